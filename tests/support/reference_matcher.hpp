#pragma once
// An independent, brute-force model of channel names and patterns for
// randomized tests: a reference matcher over token lists, and random
// dot-separated channels and patterns over a small alphabet (small so that
// random patterns often match random channels). Standard library only, so
// it shares no code with what it checks.

#include <cstddef>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace switchyard::test {

// "a.b.c" -> {"a", "b", "c"}.
inline std::vector<std::string> split_tokens(std::string_view s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const auto dot = s.find('.', start);
    out.emplace_back(s.substr(start, dot - start));
    if (dot == std::string_view::npos) return out;
    start = dot + 1;
  }
}

// Independent reference matcher over token lists.
inline bool reference_match(const std::vector<std::string>& p, std::size_t pi, const std::vector<std::string>& c,
                            std::size_t ci) {
  if (pi == p.size()) return ci == c.size();
  if (p[pi] == ">") return ci < c.size();  // one or more remaining tokens
  if (ci == c.size()) return false;
  if (p[pi] != "*" && p[pi] != c[ci]) return false;
  return reference_match(p, pi + 1, c, ci + 1);
}

inline bool reference_match(std::string_view pattern, std::string_view channel) {
  return reference_match(split_tokens(pattern), 0, split_tokens(channel), 0);
}

// Random channels and patterns of 1 to `max_tokens` tokens drawn from
// `alphabet`. In a pattern a token is '*' with odds 1 in `wildcard_odds`,
// and the last token is '>' with the same odds.
struct random_names {
  std::mt19937& rng;
  std::vector<std::string> alphabet;
  unsigned max_tokens;
  unsigned wildcard_odds;

  std::string channel() {
    std::string s;
    const int n = 1 + static_cast<int>(rng() % max_tokens);
    for (int i = 0; i < n; ++i) {
      if (i) s += '.';
      s += alphabet[rng() % alphabet.size()];
    }
    return s;
  }

  std::string pattern() {
    std::string s;
    const int n = 1 + static_cast<int>(rng() % max_tokens);
    for (int i = 0; i < n; ++i) {
      if (i) s += '.';
      const auto r = rng() % wildcard_odds;
      if (r == 0)
        s += '*';
      else if (r == 1 && i == n - 1)
        s += '>';
      else
        s += alphabet[rng() % alphabet.size()];
    }
    return s;
  }
};

}  // namespace switchyard::test
