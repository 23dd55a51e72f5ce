#include "admin/format.hpp"

#include <switchyard/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

namespace switchyard::admin {

namespace {

// Length of the valid UTF-8 sequence at the front of `s` and its code
// point, or 0 if the front byte does not start one.
std::size_t utf8_sequence(std::string_view s, char32_t& cp) {
  const auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(0);
  std::size_t len = 0;
  if (c < 0x80) {
    cp = c;
    return 1;
  }
  if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F;
  else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F;
  else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07;
  else return 0;  // a continuation byte, an overlong lead (C0, C1) or past U+10FFFF (F5..FF)
  if (s.size() < len) return 0;
  for (std::size_t i = 1; i < len; ++i) {
    if ((b(i) & 0xC0) != 0x80) return 0;
    cp = cp << 6 | (b(i) & 0x3F);
  }
  const char32_t min = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

bool is_control(char32_t cp) { return cp < 0x20 || (cp >= 0x7F && cp <= 0x9F); }

}  // namespace

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
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
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

bool is_printable_utf8(std::string_view s) {
  while (!s.empty()) {
    char32_t cp = 0;
    const std::size_t len = utf8_sequence(s, cp);
    if (len == 0 || is_control(cp)) return false;
    s.remove_prefix(len);
  }
  return true;
}

std::string base64(std::string_view bytes) {
  static constexpr char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    const std::size_t n = std::min<std::size_t>(3, bytes.size() - i);
    std::uint32_t v = 0;
    for (std::size_t j = 0; j < 3; ++j)
      v = v << 8 | (j < n ? static_cast<unsigned char>(bytes[i + j]) : 0u);
    for (std::size_t j = 0; j < 4; ++j) out += j <= n ? alphabet[(v >> (18 - 6 * j)) & 0x3F] : '=';
  }
  return out;
}

std::string format_table(const std::vector<std::vector<std::string>>& rows, const std::vector<bool>& right_aligned) {
  std::vector<std::size_t> width;
  for (const auto& row : rows) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      if (i > 0) line += "  ";
      const std::string pad(width[i] - row[i].size(), ' ');
      const bool right = i < right_aligned.size() && right_aligned[i];
      line += right ? pad + row[i] : row[i] + pad;
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line;
    out += '\n';
  }
  return out;
}

std::string format_utc(std::uint64_t ms) {
  const auto seconds = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  if (!gmtime_r(&seconds, &tm)) return std::to_string(ms) + "ms";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03uZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<unsigned>(ms % 1000));
  return buf;
}

std::string format_duration_ms(std::uint64_t ms) {
  struct unit {
    std::uint64_t ms;
    const char* name;
  };
  static constexpr unit units[] = {{86'400'000, "d"}, {3'600'000, "h"}, {60'000, "min"}, {1000, "s"}};
  for (const auto& u : units)
    if (ms >= u.ms && ms % u.ms == 0) return std::to_string(ms / u.ms) + u.name;
  return std::to_string(ms) + "ms";
}

std::string format_elapsed(std::uint64_t ms) {
  if (ms < 1000) return std::to_string(ms) + "ms";
  char out[48];
  const auto u = [](std::uint64_t v) { return static_cast<unsigned long long>(v); };
  const std::uint64_t s = ms / 1000;
  if (ms < 60'000) std::snprintf(out, sizeof out, "%llu.%llus", u(s), u(ms % 1000 / 100));
  else if (s < 3600) std::snprintf(out, sizeof out, "%llum%02llus", u(s / 60), u(s % 60));
  else if (s < 86'400) std::snprintf(out, sizeof out, "%lluh%02llum", u(s / 3600), u(s % 3600 / 60));
  else std::snprintf(out, sizeof out, "%llud%02lluh", u(s / 86'400), u(s % 86'400 / 3600));
  return out;
}

std::string_view error_code_name(std::error_code ec) {
  if (ec.category() != client_category()) return "connection_failed";
  return error_name(static_cast<errc>(ec.value()));
}

}  // namespace switchyard::admin
