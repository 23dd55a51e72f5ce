#include "auth/permission.hpp"

#include "auth/credentials.hpp"

#include <sodium.h>

#include <algorithm>
#include <cstring>
#include <utility>

namespace switchyard::auth {
namespace {

constexpr std::array<std::string_view, operation_count> operation_names{
    "publish",         "subscribe", "send",          "registry_put", "registry_get",
    "registry_delete", "inbox",     "stream_append", "stream_read",
};

constexpr std::size_t max_rule_pattern_length = 255;

// The tokens of a name or pattern, left to right, without allocating. Unlike
// protocol::next_token, a trailing dot yields a last, empty token, so "a."
// never reads as "a".
class token_cursor {
 public:
  explicit token_cursor(std::string_view s) noexcept : rest_(s), done_(s.empty()) {}
  // False when no token is left; otherwise the next one in `out`.
  bool next(std::string_view& out) noexcept {
    if (done_) return false;
    const auto dot = rest_.find('.');
    if (dot == std::string_view::npos) {
      out = rest_;
      done_ = true;
    } else {
      out = rest_.substr(0, dot);
      rest_ = rest_.substr(dot + 1);
    }
    return true;
  }

 private:
  std::string_view rest_;
  bool done_;
};

bool is_rule_char(char c) noexcept { return c > ' ' && c < 0x7f && c != '.'; }

// The per-process key of permission_rule's cache hash.
const std::array<unsigned char, crypto_shorthash_KEYBYTES>& cache_hash_key() {
  static const auto key = [] {
    init_crypto();
    std::array<unsigned char, crypto_shorthash_KEYBYTES> k{};
    randombytes_buf(k.data(), k.size());
    return k;
  }();
  return key;
}

}  // namespace

std::string_view to_string(operation op) noexcept {
  const auto i = static_cast<std::size_t>(op);
  return i < operation_names.size() ? operation_names[i] : std::string_view("unknown");
}

bool from_string(std::string_view name, operation& out) noexcept {
  for (std::size_t i = 0; i < operation_names.size(); ++i) {
    if (operation_names[i] == name) {
      out = static_cast<operation>(i);
      return true;
    }
  }
  return false;
}

bool pattern_matches(std::string_view pattern, std::string_view name) noexcept {
  if (pattern.empty() || name.empty()) return false;
  token_cursor p(pattern), n(name);
  std::string_view pt, nt;
  while (p.next(pt)) {
    if (pt == ">") return n.next(nt);  // one or more tokens left
    if (!n.next(nt)) return false;
    if (pt != "*" && pt != nt) return false;
  }
  return !n.next(nt);
}

bool pattern_covers(std::string_view outer, std::string_view inner) noexcept {
  if (outer.empty() || inner.empty()) return false;
  token_cursor o(outer), i(inner);
  std::string_view ot, it;
  while (o.next(ot)) {
    if (!i.next(it)) return false;  // inner is shorter: matches names outer needs longer
    if (ot == ">") return true;     // covers one or more of whatever inner has left
    if (it == ">") return false;    // inner may go on past outer's fixed tokens
    if (it == "*") {
      if (ot != "*") return false;
    } else if (ot != "*" && ot != it) {
      return false;
    }
  }
  return !i.next(it);
}

bool patterns_overlap(std::string_view a, std::string_view b) noexcept {
  if (a.empty() || b.empty()) return false;
  token_cursor ca(a), cb(b);
  std::string_view ta, tb;
  while (true) {
    const bool more_a = ca.next(ta);
    const bool more_b = cb.next(tb);
    if (!more_a || !more_b) return more_a == more_b;  // both done: same length
    // `>` takes one or more tokens, and whatever the other has left (at
    // least this token) is a non-empty run of tokens both can match.
    if (ta == ">" || tb == ">") return true;
    if (ta != "*" && tb != "*" && ta != tb) return false;
  }
}

bool is_valid_rule_pattern(std::string_view pattern) noexcept {
  if (pattern.empty() || pattern.size() > max_rule_pattern_length) return false;
  token_cursor c(pattern);
  std::string_view t;
  bool after_tail = false;
  while (c.next(t)) {
    if (after_tail || t.empty()) return false;
    if (t == ">") after_tail = true;
    for (const char ch : t)
      if (!is_rule_char(ch)) return false;
  }
  return true;
}

std::size_t permission_rule::cache_hash::operator()(std::string_view s) const noexcept {
  const auto& key = cache_hash_key();
  std::uint64_t h = 0;
  unsigned char out[crypto_shorthash_BYTES];
  crypto_shorthash(out, reinterpret_cast<const unsigned char*>(s.data()), s.size(), key.data());
  std::memcpy(&h, out, sizeof h);
  return static_cast<std::size_t>(h);
}

permission_rule::permission_rule(std::vector<std::string> allow, std::vector<std::string> deny)
    : allow_(std::move(allow)), deny_(std::move(deny)) {
  everything_ = deny_.empty() && std::find(allow_.begin(), allow_.end(), ">") != allow_.end();
  for (const auto& p : allow_) allow_shapes_.push_back(shape_of(p));
  for (const auto& p : deny_) deny_shapes_.push_back(shape_of(p));
}

permission_rule::shape permission_rule::shape_of(std::string_view pattern) noexcept {
  if (pattern == ">") return shape::any;
  if (pattern == "*") return shape::one_token;
  const bool tail = pattern.ends_with(".>");
  const std::string_view fixed = tail ? pattern.substr(0, pattern.size() - 2) : pattern;
  token_cursor c(fixed);
  std::string_view t;
  while (c.next(t))
    if (t == "*" || t == ">") return shape::general;
  return tail ? shape::literal_tail : shape::literal;
}

bool permission_rule::matches(shape kind, const std::string& pattern, std::string_view name) noexcept {
  if (name.empty()) return false;
  switch (kind) {
    case shape::any:
      return true;
    case shape::one_token:
      return name.find('.') == std::string_view::npos;
    case shape::literal:
      return name == pattern;
    case shape::literal_tail: {
      // "a.b.>" against "a.b." + rest: `>` takes rest's one or more tokens
      // (an empty rest is one empty token, as pattern_matches reads it).
      const std::size_t dot = pattern.size() - 2;
      return name.size() > dot && name[dot] == '.' && name.compare(0, dot, pattern, 0, dot) == 0;
    }
    case shape::general:
      return pattern_matches(pattern, name);
  }
  return false;
}

bool permission_rule::compute(std::string_view name) const {
  bool allowed = false;
  for (std::size_t i = 0; i < allow_.size(); ++i) {
    if (matches(allow_shapes_[i], allow_[i], name)) {
      allowed = true;
      break;
    }
  }
  if (!allowed) return false;
  for (std::size_t i = 0; i < deny_.size(); ++i)
    if (matches(deny_shapes_[i], deny_[i], name)) return false;
  return true;
}

bool permission_rule::allows(std::string_view name) const {
  if (everything_) return true;
  if (allow_.empty()) return false;
  // A few patterns are matched directly: cheaper than the cache's hash,
  // and no allocation for a name seen once (route keys: one per user).
  if (allow_.size() + deny_.size() <= direct_match_limit) return compute(name);
  if (const auto it = cache_.find(name); it != cache_.end()) return it->second;
  const bool allowed = compute(name);
  if (cache_.size() >= max_cached) cache_.clear();
  cache_.emplace(std::string(name), allowed);
  return allowed;
}

permission_rule::subscribe_verdict permission_rule::check_subscribe(std::string_view pattern) const {
  for (const auto& d : deny_)
    if (pattern_covers(d, pattern)) return subscribe_verdict::denied;
  const bool covered =
      std::any_of(allow_.begin(), allow_.end(), [&](const std::string& a) { return pattern_covers(a, pattern); });
  if (!covered) return subscribe_verdict::denied;
  for (const auto& d : deny_)
    if (patterns_overlap(d, pattern)) return subscribe_verdict::allowed_filtered;
  return subscribe_verdict::allowed;
}

}  // namespace switchyard::auth
