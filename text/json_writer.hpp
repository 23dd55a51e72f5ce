#pragma once
// A small JSON writer: what switchyard-cli prints with --json and the
// broker's HTTP monitoring port answers. Builds into a string; no I/O.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace switchyard::text {

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

}  // namespace switchyard::text
