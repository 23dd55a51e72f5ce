#pragma once
// One setting of a program, as a row of its settings table: its flag
// (which is also its config-file key), help text, default (a value, or a
// rule when the default follows another setting), range, unit, and whether
// a reload applies it. A program declares its rows once, over its own
// config struct (setting_rows.hpp builds them), and drives its command
// line, config file, --help (parse_args.hpp), range checks and docs
// (markdown() in setting_rows.hpp) from them.
//
// This header does not include CLI11 (only declares what it names of it),
// so code that walks the rows pays nothing for the parser.

#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace switchyard::settings {

// When a changed value takes effect.
enum class takes_effect {
  at_reload,   // a reload applies it: each use reads the running config, so it holds from the next use on
  at_restart,  // fixed at start: a reload that changes it names it in a warning
};

// A row of the settings table of a program whose settings live in a
// `Config` (a default-constructible struct; its default values are the
// settings' defaults).
template <class Config>
struct setting {
  std::string_view name;         // the flag without "--", and the config-file key
  std::string_view help;         // --help's text
  std::string_view doc;          // the docs' text (Markdown); empty: help
  std::string_view default_doc;  // the default when it is a rule rather than a value (docs, --help)
  std::string_view unit;         // "ms", "bytes", ...: docs and range errors
  takes_effect effect = takes_effect::at_restart;
  bool in_stats = false;  // listed in the program's summary of its settings

  // Registers the option on `app`, parsing into `into` (both borrowed
  // until app.parse() returns). Parse errors are CLI11's (exit code and
  // message through CLI::App::exit).
  std::function<CLI::Option*(CLI::App& app, Config& into)> add;
  // The value in `c` as text (logs, stats, docs); "" when unset.
  std::function<std::string(const Config& c)> show;
  // Copies this setting's value from `from` into `to`.
  std::function<void(Config& to, const Config& from)> assign;
  // Throws std::invalid_argument naming this setting when its value in `c`
  // is out of range (a range may depend on other settings); empty: any.
  std::function<void(const Config& c)> check;
  // The range as docs state it ("1 .. 64"), "" when any value goes.
  std::string range_doc;
  // For a default that follows other settings: sets it in `c` when the
  // user gave no value (a value the user gave is only checked). Empty for
  // a plain default.
  std::function<void(Config& c)> derive;
  // Byte offsets in Config of the fields this row holds (a host:port row
  // holds two): a test can check that every field has exactly one row.
  std::vector<std::size_t> fields;
};

// The row of `rows` named `name` (without dashes), or nullptr. The
// pointer is into `rows`.
template <class Config>
const setting<Config>* find(std::span<const setting<Config>> rows, std::string_view name) {
  for (const auto& s : rows)
    if (s.name == name) return &s;
  return nullptr;
}

// Runs the check of every row of `rows` on `c`. Throws std::invalid_argument
// naming the first setting out of its range.
template <class Config>
void check(std::span<const setting<Config>> rows, const Config& c) {
  for (const auto& s : rows)
    if (s.check) s.check(c);
}

}  // namespace switchyard::settings
