#pragma once
// Output helpers of switchyard-cli: a small JSON writer, payload rendering
// (text or base64), aligned columns and times. Pure functions, no I/O.

#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace switchyard::admin {

// Builds one JSON document into a string. Containers nest; commas are
// placed automatically. Inside an object every value follows key(); the
// caller keeps begin/end balanced. Strings are escaped by json_quote().
class json_writer {
 public:
  json_writer& begin_object();
  json_writer& end_object();
  json_writer& begin_array();
  json_writer& end_array();
  json_writer& key(std::string_view k);
  json_writer& string(std::string_view v);
  json_writer& number(std::uint64_t v);
  // Fixed-point with `decimals` digits after the point (no exponent).
  json_writer& decimal(double v, int decimals);
  json_writer& boolean(bool v);

  // Shorthands for key(k) followed by the value.
  json_writer& string(std::string_view k, std::string_view v) { return key(k).string(v); }
  json_writer& number(std::string_view k, std::uint64_t v) { return key(k).number(v); }
  json_writer& boolean(std::string_view k, bool v) { return key(k).boolean(v); }

  const std::string& str() const noexcept { return out_; }

 private:
  void before_value();  // a comma between elements

  std::string out_;
  std::vector<bool> empty_;  // per open container: nothing written in it yet
  bool after_key_ = false;
};

// `s` as a JSON string literal, quotes included: `"` and `\` escaped,
// control characters as \n, \t, ... or \u00XX, and every byte that is not
// part of valid UTF-8 replaced by U+FFFD (JSON text must be UTF-8).
std::string json_quote(std::string_view s);

// Valid UTF-8 (no overlong forms, surrogates or code points past
// U+10FFFF) without control characters (U+0000..U+001F, U+007F..U+009F,
// newlines and tabs included): safe to print as one line of text.
bool is_printable_utf8(std::string_view s);

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
