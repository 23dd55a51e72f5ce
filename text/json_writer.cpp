#include "text/json_writer.hpp"

#include "text/utf8.hpp"

#include <cmath>
#include <cstdio>

namespace switchyard::text {

void json_writer::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!empty_.empty()) {
    if (!empty_.back()) out_ += ',';
    empty_.back() = false;
  }
}

json_writer& json_writer::begin_object() {
  before_value();
  out_ += '{';
  empty_.push_back(true);
  return *this;
}

json_writer& json_writer::end_object() {
  out_ += '}';
  empty_.pop_back();
  return *this;
}

json_writer& json_writer::begin_array() {
  before_value();
  out_ += '[';
  empty_.push_back(true);
  return *this;
}

json_writer& json_writer::end_array() {
  out_ += ']';
  empty_.pop_back();
  return *this;
}

json_writer& json_writer::key(std::string_view k) {
  before_value();
  out_ += json_quote(k);
  out_ += ':';
  after_key_ = true;
  return *this;
}

json_writer& json_writer::string(std::string_view v) {
  before_value();
  out_ += json_quote(v);
  return *this;
}

json_writer& json_writer::number(std::uint64_t v) {
  before_value();
  out_ += std::to_string(v);
  return *this;
}

json_writer& json_writer::decimal(double v, int decimals) {
  before_value();
  if (!std::isfinite(v)) {
    out_ += "null";
    return *this;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  out_ += buf;
  return *this;
}

json_writer& json_writer::boolean(bool v) {
  before_value();
  out_ += v ? "true" : "false";
  return *this;
}

std::string json_quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  while (!s.empty()) {
    char32_t cp = 0;
    const std::size_t len = utf8_sequence(s, cp);
    if (len == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD for a byte that is not valid UTF-8
      s.remove_prefix(1);
      continue;
    }
    switch (cp) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (cp < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
          out += buf;
        } else {
          out.append(s.data(), len);
        }
    }
    s.remove_prefix(len);
  }
  out += '"';
  return out;
}

}  // namespace switchyard::text
