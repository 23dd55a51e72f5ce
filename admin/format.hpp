#pragma once
// Output helpers of switchyard-cli: payload rendering (text or base64),
// aligned columns and times. Pure functions, no I/O.

#include "text/json_writer.hpp"
#include "text/utf8.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace switchyard::admin {

// The JSON writer and UTF-8 checks live in text/ (shared with the broker's
// HTTP monitoring port).
using text::is_printable_utf8;
using text::json_quote;
using text::json_writer;

// Standard base64 (RFC 4648, with padding).
std::string base64(std::string_view bytes);

// Rows of cells as aligned columns, two spaces apart, each row ending in
// '\n' and without trailing blanks. Column i is right-aligned when
// right_aligned[i] is true (numbers), else left-aligned. Widths count
// bytes.
std::string format_table(const std::vector<std::vector<std::string>>& rows, const std::vector<bool>& right_aligned);

// The name --json gives an error (its "code"): the client library's
// error_name() for the library's codes (the broker's codes have the
// protocol's names), "connection_failed" for the operating system's
// (refused, reset, unreachable, ...).
std::string_view error_code_name(std::error_code ec);

// Milliseconds since the Unix epoch as UTC ISO 8601, e.g.
// "2026-11-30T00:37:13.123Z".
std::string format_utc(std::uint64_t ms);

// A duration in ms, in the largest unit that divides it exactly ("90s",
// "2h", "1500ms", "7d").
std::string format_duration_ms(std::uint64_t ms);

// An elapsed time (an age, an uptime) in its two largest units, rounded
// down: "12ms", "4.5s", "4m38s", "3h05m", "2d07h".
std::string format_elapsed(std::uint64_t ms);

}  // namespace switchyard::admin
