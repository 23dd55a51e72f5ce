#pragma once
// A program's command line and --config file, parsed into its Config from
// its settings table (setting.hpp): each row is an option (its name the
// flag and the file's key), the file is read by toml_config, flags win over
// the file.

#include "settings/setting.hpp"
#include "settings/toml_config.hpp"

#include <CLI/CLI.hpp>

#include <memory>
#include <span>
#include <string>
#include <vector>

namespace switchyard::settings {

// Registers every row of `rows` on `app`, in order, with its default shown
// in --help (the rule's text without Markdown's backquotes, or the value,
// none for an unset value or a switch that is off), and `--config FILE`
// read by toml_config with the rows' names as the only keys; parses argv;
// then sets each default that follows other settings (setting::derive)
// whose option was not given. Returns the Config read; checks no ranges
// (the caller runs check() of setting.hpp, and its own rules).
//
// `app` is the caller's: its name, description and --version are set
// before the call; afterwards it may be read (config_file() below, or
// CLI::App::exit for an error) but not parsed again (its options refer to
// a Config that is gone). `rows` is borrowed until this returns.
//
// Throws CLI::ParseError for --help and --version and for every flag or
// file error (CLI::App::exit turns it into the exit code and the text);
// and what a row's parser throws (std::invalid_argument naming the
// setting, e.g. a bad host:port).
template <class Config>
Config parse_args(CLI::App& app, std::span<const setting<Config>> rows, int argc, const char* const* argv) {
  Config cfg;
  const Config defaults;
  app.set_config("--config", "", "TOML file with any of the options below (long names as keys)");
  app.allow_config_extras(false);
  auto toml = std::make_shared<toml_config>();
  app.config_formatter(toml);

  std::vector<CLI::Option*> options;
  std::vector<std::string> keys;
  for (const auto& s : rows) {
    CLI::Option* o = s.add(app, cfg);
    if (!s.default_doc.empty()) {
      std::string rule(s.default_doc);  // Markdown for the docs; plain on a terminal
      std::erase(rule, '`');
      o->default_str(rule);
    } else if (const auto shown = s.show(defaults); !shown.empty() && shown != "false") {
      o->default_str(shown);
    }
    options.push_back(o);
    keys.emplace_back(s.name);
  }
  toml->known_keys(std::move(keys));
  app.parse(argc, argv);
  // A default that follows other settings follows them unless given.
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (rows[i].derive && options[i]->count() == 0) rows[i].derive(cfg);
  return cfg;
}

// The file --config named when parse_args() parsed `app`; "" when none.
inline std::string config_file(const CLI::App& app) {
  const CLI::Option* file = app.get_config_ptr();
  return file && file->count() > 0 ? file->as<std::string>() : std::string();
}

}  // namespace switchyard::settings
