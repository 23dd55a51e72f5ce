#include "admin/format.hpp"

#include <switchyard/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

namespace switchyard::admin {

std::string base64(std::string_view bytes) {
  static constexpr char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    const std::size_t n = std::min<std::size_t>(3, bytes.size() - i);
    std::uint32_t v = 0;
    for (std::size_t j = 0; j < 3; ++j) v = v << 8 | (j < n ? static_cast<unsigned char>(bytes[i + j]) : 0u);
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
  if (ms < 60'000)
    std::snprintf(out, sizeof out, "%llu.%llus", u(s), u(ms % 1000 / 100));
  else if (s < 3600)
    std::snprintf(out, sizeof out, "%llum%02llus", u(s / 60), u(s % 60));
  else if (s < 86'400)
    std::snprintf(out, sizeof out, "%lluh%02llum", u(s / 3600), u(s % 3600 / 60));
  else
    std::snprintf(out, sizeof out, "%llud%02lluh", u(s / 86'400), u(s % 86'400 / 3600));
  return out;
}

std::string_view error_code_name(std::error_code ec) {
  if (ec.category() != client_category()) return "connection_failed";
  return error_name(static_cast<errc>(ec.value()));
}

}  // namespace switchyard::admin
