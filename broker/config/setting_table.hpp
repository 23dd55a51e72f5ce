#pragma once
// Every setting of switchyard-server, declared once: one row per setting
// holds its flag (which is also its config-file key), help text, default
// (a value, or a rule when the default follows another setting), range,
// unit, and whether a SIGHUP applies it. The rows drive the command line and
// the TOML file (server_config.cpp), --help, validate(), the reload
// (server_reload.cpp: a changed row is applied or named in the "takes
// effect at a restart" warning, no third case), Stats' summary of the
// settings and the flag table of docs/operations.md (checked by a test).
//
// A server_config field is held by exactly one row, or is one of the few
// fields that are no setting (internal_fields()); a test fails otherwise.

#include "broker/config/server_config.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace switchyard::broker {

// When a changed value takes effect.
enum class takes_effect {
  at_reload,   // SIGHUP applies it: each use reads the running config, so it holds from the next use on
  at_restart,  // fixed at start: a SIGHUP that changes it names it in a warning
};

struct setting {
  std::string_view name;         // the flag without "--", and the config-file key
  std::string_view help;         // --help's text
  std::string_view doc;          // docs/operations.md's text (Markdown); empty: help
  std::string_view default_doc;  // the default when it is a rule rather than a value (docs, --help)
  std::string_view unit;         // "ms", "bytes", ...: docs and range errors
  takes_effect effect = takes_effect::at_restart;
  bool in_stats = false;  // listed in Stats' summary of the settings

  // Registers the option on `app`, parsing into `into` (both borrowed
  // until app.parse() returns). Parse errors are CLI11's (exit code and
  // message through CLI::App::exit).
  std::function<CLI::Option*(CLI::App& app, server_config& into)> add;
  // The value in `c` as text (logs, Stats, docs); "" when unset.
  std::function<std::string(const server_config& c)> show;
  // Copies this setting's value from `from` into `to`.
  std::function<void(server_config& to, const server_config& from)> assign;
  // Throws std::invalid_argument naming this setting when its value in `c`
  // is out of range (a range may depend on other settings); empty: any.
  std::function<void(const server_config& c)> check;
  // The range as docs state it ("1 .. 64"), "" when any value goes.
  std::string range_doc;
  // For a default that follows other settings: sets it in `c` when the
  // user gave no value (a value the user gave is only checked). Empty for
  // a plain default.
  std::function<void(server_config& c)> derive;
  // Byte offsets in server_config of the fields this row holds (a host:port
  // row holds two).
  std::vector<std::size_t> fields;
};

// The rows, in the order of --help and the docs. Built on first use;
// thread-safe; never changes afterwards.
std::span<const setting> settings();

// The row named `name` (without dashes), or nullptr.
const setting* find_setting(std::string_view name);

// Offsets of the server_config fields that are no setting: where the
// settings came from (config_file, command_line) and what only tests
// inject (instance_id, log_wall_clock_ms).
std::span<const std::size_t> internal_fields();

// The flag table of docs/operations.md (Markdown, one row per setting plus
// --config), generated from the rows.
std::string settings_markdown();

}  // namespace switchyard::broker
