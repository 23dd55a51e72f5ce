#pragma once
// The --config file reader of a program's settings (parse_args() installs
// it on the program's CLI::App): CLI11 hands it the file,
// toml++ parses it, so a syntax error is reported as such (file, line,
// column, what is wrong) instead of as whatever CLI11's own lenient reader
// made of the broken line.

#include <CLI/CLI.hpp>

#include <istream>
#include <string>
#include <vector>

namespace switchyard::settings {

// Accepts a flat TOML document: each key is a long option name without the
// dashes; a value is a string, an integer, a float, a boolean or an array of
// those (a repeatable option). Tables (sections) and nested arrays are
// refused. Errors are thrown as CLI::ConfigError (exit code and message
// through CLI::App::exit), naming the line and column ("config file: ...";
// CLI11 2.1 does not pass the file's name to its reader).
class toml_config : public CLI::Config {
 public:
  // The keys a file may have (the long option names, without dashes). With
  // none given every key is passed on to CLI11; with them, an unknown key
  // is refused here, naming its line and the closest known key ("did you
  // mean 'max-connections'?").
  void known_keys(std::vector<std::string> keys) { known_ = std::move(keys); }

  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override;
  // Not used (no program writes its config back); CLI11 requires it.
  std::string to_config(const CLI::App*, bool, bool, std::string) const override { return {}; }

 private:
  std::vector<std::string> known_;
};

}  // namespace switchyard::settings
