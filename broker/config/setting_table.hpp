#pragma once
// Every setting of switchyard-server, declared once: one row per setting
// holds its flag (which is also its config-file key), help text, default
// (a value, or a rule when the default follows another setting), range,
// unit, and whether a SIGHUP applies it. The rows drive the command line and
// the TOML file (server_config.cpp), --help, validate(), the reload
// (server_reload.cpp: a changed row is applied or named in the "takes
// effect at a restart" warning, no third case), Stats' summary of the
// settings and the flag table of docs/operations.md (checked by a test).
// The machinery (the row type, its builders, the parser, the docs table)
// is settings/'s, shared with the other programs; the rows are here.
//
// A server_config field is held by exactly one row, or is one of the few
// fields that are no setting (internal_fields()); a test fails otherwise.

#include "broker/config/server_config.hpp"

#include "settings/setting.hpp"

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace switchyard::broker {

// When a changed value takes effect (at_reload: a SIGHUP applies it).
using settings::takes_effect;

// A row of the table (settings/setting.hpp).
using setting = settings::setting<server_config>;

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
