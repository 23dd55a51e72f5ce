#include "text/utf8.hpp"

namespace switchyard::text {

std::size_t utf8_sequence(std::string_view s, char32_t& cp) {
  const auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(0);
  std::size_t len = 0;
  if (c < 0x80) {
    cp = c;
    return 1;
  }
  if (c >= 0xC2 && c <= 0xDF)
    len = 2, cp = c & 0x1F;
  else if (c >= 0xE0 && c <= 0xEF)
    len = 3, cp = c & 0x0F;
  else if (c >= 0xF0 && c <= 0xF4)
    len = 4, cp = c & 0x07;
  else
    return 0;  // a continuation byte, an overlong lead (C0, C1) or past U+10FFFF (F5..FF)
  if (s.size() < len) return 0;
  for (std::size_t i = 1; i < len; ++i) {
    if ((b(i) & 0xC0) != 0x80) return 0;
    cp = cp << 6 | (b(i) & 0x3F);
  }
  const char32_t min = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

namespace {

bool is_control(char32_t cp) { return cp < 0x20 || (cp >= 0x7F && cp <= 0x9F); }

}  // namespace

bool is_utf8(std::string_view s) {
  while (!s.empty()) {
    if (static_cast<unsigned char>(s.front()) < 0x80) {  // ASCII, the common case
      s.remove_prefix(1);
      continue;
    }
    char32_t cp = 0;
    const std::size_t len = utf8_sequence(s, cp);
    if (len == 0) return false;
    s.remove_prefix(len);
  }
  return true;
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

}  // namespace switchyard::text
