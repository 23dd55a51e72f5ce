#pragma once
// Every setting of switchyard-gateway, declared once (settings/setting.hpp):
// one row per setting drives the command line, the --config file (TOML),
// --help, the range checks and the flag table of docs/websocket.md (a test
// compares it with gateway_settings_markdown()).

#include "gateway/gateway_config.hpp"

#include "settings/setting.hpp"

#include <span>
#include <string>

namespace switchyard::edge {

using gateway_setting = settings::setting<gateway_config>;

// The rows, in the order of --help and the docs. Built on first use;
// thread-safe; never changes afterwards.
std::span<const gateway_setting> gateway_settings();

// The flags switchyard-gateway knows (--flag NAME=PERCENT).
std::span<const std::string_view> gateway_flag_names();

// --help, --version or a command-line or config-file error: what to print
// and the exit code (0 for --help and --version).
struct gateway_cli_exit {
  int code = 0;
  std::string text;
};

// Parses the command line (and the --config file it names) and checks every
// range and the rules between settings. Throws gateway_cli_exit (help,
// version, parse errors: exit code 2 with the message) and
// std::invalid_argument (a value out of range, settings that do not go
// together), naming the setting.
gateway_config parse_gateway_args(int argc, const char* const* argv);

// The flag table of docs/websocket.md.
std::string gateway_settings_markdown();

}  // namespace switchyard::edge
