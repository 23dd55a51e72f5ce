#pragma once
// How the broker's log lines look (--log-format): `text`, one line per
// event with an ISO 8601 timestamp and its UTC offset
// ("2026-12-01T16:12:05.123+00:00 [broker] [info] listening on ..."), or
// `json`, one JSON object per line for log shippers:
//   {"time":"2026-12-01T16:12:05.123+00:00","level":"info","logger":"broker","msg":"listening on ..."}
// with the message escaped (quotes, backslashes, control characters).

#include <string_view>

namespace spdlog {
class logger;
}

namespace switchyard::broker {

// True for the names --log-format accepts.
bool is_logger_style(std::string_view name) noexcept;

// Gives `log` the format named `name` (precondition: is_logger_style(name)).
// Call before the logger is shared with other threads.
void apply_logger_style(spdlog::logger& log, std::string_view name);

}  // namespace switchyard::broker
