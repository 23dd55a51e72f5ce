#include "protocol/channel_name.hpp"

namespace switchyard::protocol {
namespace {

bool valid_token_char(char c) noexcept { return c > ' ' && c < 0x7f && c != '*' && c != '>' && c != '.'; }

// Shared by both validators: wildcards are only legal in patterns.
bool validate(std::string_view s, bool allow_wildcards) noexcept {
  if (s.empty() || s.size() > max_channel_length) return false;
  std::size_t tokens = 0;
  std::string_view rest = s;
  while (true) {
    if (++tokens > max_channel_tokens) return false;
    const bool last = rest.find('.') == std::string_view::npos;
    if (!last && rest.back() == '.') return false;  // trailing dot: empty last token
    const std::string_view token = next_token(rest);
    if (token.empty()) return false;
    if (allow_wildcards && token == "*") {
    } else if (allow_wildcards && token == ">") {
      if (!last) return false;
    } else {
      for (const char c : token)
        if (!valid_token_char(c)) return false;
    }
    if (last) return true;
  }
}

}  // namespace

std::string_view next_token(std::string_view& rest) noexcept {
  const auto dot = rest.find('.');
  const std::string_view token = rest.substr(0, dot);
  rest = dot == std::string_view::npos ? std::string_view{} : rest.substr(dot + 1);
  return token;
}

bool is_valid_channel(std::string_view name) noexcept { return validate(name, false); }
bool is_valid_pattern(std::string_view pattern) noexcept { return validate(pattern, true); }

bool is_printable_stream_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > max_stream_name_length) return false;
  for (const char c : name)
    if (c <= ' ' || c >= 0x7f) return false;
  return true;
}

bool pattern_matches(std::string_view pattern, std::string_view channel) noexcept {
  if (pattern == channel) return true;
  while (!pattern.empty()) {
    const std::string_view p = next_token(pattern);
    if (p == ">") return !channel.empty();
    if (channel.empty()) return false;
    const std::string_view c = next_token(channel);
    if (p != "*" && p != c) return false;
  }
  return channel.empty();
}

}  // namespace switchyard::protocol
