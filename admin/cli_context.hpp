#pragma once
// switchyard-cli's command line (internal to admin/): how each file of
// commands adds its subcommands to the CLI11 parser. run() (cli.cpp) makes
// the parser and calls the register_* functions in the order --help lists
// the commands; after a successful parse, cli_context::finish names the
// command given and runs the checks the files added.

#include "admin/command.hpp"

#include <functional>
#include <string>
#include <vector>

namespace CLI {
class App;
class Validator;
}  // namespace CLI

namespace switchyard::admin {

// Digits only, at most 20 (an unsigned 64-bit value): CLI11 alone would
// read "-1" into an unsigned option as 2^64 - 1, and "abc" says "not in
// range". For the unsigned options of every command.
extern const CLI::Validator whole_number;

// The deepest subcommand `app` parsed (`app` itself if none).
const CLI::App& deepest_parsed(const CLI::App& app);

// The names from below `app` down to `sub`, a subcommand of `app` at any
// depth, space-separated: "streams list".
std::string command_path(const CLI::App& app, const CLI::App& sub);

// What the register_* functions fill while run() builds the parser. Lives
// in run(), as long as the parser; used on run()'s thread only.
class cli_context {
 public:
  // A check: completes the settings from what was given, and checks what
  // CLI11 cannot. Returns a usage error's message (exit 1, nothing is
  // sent), or "" if fine.
  using check = std::function<std::string()>;

  // `s` (borrowed for the context's life) receives the options' values.
  explicit cli_context(settings& s) : s_(s) {}

  // The settings the options are bound to.
  settings& s() noexcept { return s_; }

  // `fn` runs after a successful parse, after the checks added before it.
  void add_check(check fn) { checks_.push_back(std::move(fn)); }

  // After `app` parsed the command line: sets s.command to the parsed
  // command's path ("streams list", the name command::run knows it by),
  // then runs the checks in the order added. Returns the first check's
  // usage error, or "" when the command may run.
  std::string finish(const CLI::App& app);

 private:
  settings& s_;
  std::vector<check> checks_;
};

// Each adds its file's subcommands to `app`, their options bound to
// cli.s(), and its checks to `cli`.
void register_pubsub_commands(CLI::App& app, cli_context& cli);   // pubsub_commands.cpp: pub, sub
void register_send_command(CLI::App& app, cli_context& cli);      // routing_commands.cpp: send
void register_stream_commands(CLI::App& app, cli_context& cli);   // stream_commands.cpp: streams ...
void register_routing_commands(CLI::App& app, cli_context& cli);  // routing_commands.cpp: routes, leases, inboxes
void register_offer_commands(CLI::App& app, cli_context& cli);    // offer_commands.cpp: pending, flags
void register_cluster_commands(CLI::App& app, cli_context& cli);  // cluster_commands.cpp: cluster status

}  // namespace switchyard::admin
