#pragma once
// What a principal may do: one allow list and one deny list of name
// patterns per operation. Names (channels, route keys, registry keys, inbox
// ids, stream names) are matched with the channel wildcard syntax: tokens
// separated by '.', `*` matches exactly one token, `>` (last token only)
// matches one or more. A name is allowed when some allow pattern matches it
// and no deny pattern does (deny wins). An empty allow list allows nothing.
//
// Loop thread only: `allows` keeps a bounded cache of its answers.

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace switchyard::auth {

enum class operation : std::uint8_t {
  publish,          // Publish: the channel
  subscribe,        // Subscribe: the pattern (see permission_rule::check_subscribe)
  send,             // Send: each route key
  registry_put,     // RegistryPut: the key
  registry_get,     // RegistryGet: the key
  registry_delete,  // RegistryDelete: the key
  inbox,            // InboxOpen: the inbox id
  stream_append,    // Append, and Publish/Send with a stream: the stream name
  stream_read,      // Read, StreamInfo: the stream name
};
inline constexpr std::size_t operation_count = 9;

// The operation's name in auth files and messages ("publish", "registry_put", ...).
std::string_view to_string(operation op) noexcept;
// The inverse; false for an unknown name.
bool from_string(std::string_view name, operation& out) noexcept;

// Pattern arithmetic on the wildcard syntax. Patterns and names are
// non-empty; a pattern's `>` is its last token.
// True when `name` (taken literally: `*` and `>` in it are plain tokens)
// is matched by `pattern`.
bool pattern_matches(std::string_view pattern, std::string_view name) noexcept;
// True when every name `inner` matches is also matched by `outer`.
bool pattern_covers(std::string_view outer, std::string_view inner) noexcept;
// True when some name is matched by both.
bool patterns_overlap(std::string_view a, std::string_view b) noexcept;
// A valid pattern for an auth file: 1..255 bytes, non-empty tokens, `>`
// only as the last token, no spaces or control characters.
bool is_valid_rule_pattern(std::string_view pattern) noexcept;

class permission_rule {
 public:
  permission_rule() = default;
  // Preconditions: every pattern is_valid_rule_pattern.
  permission_rule(std::vector<std::string> allow, std::vector<std::string> deny);

  // A concrete name: some allow pattern matches and no deny pattern does.
  // With at most direct_match_limit patterns in all, the patterns are
  // matched directly (no allocation); with more, answers are cached (at
  // most max_cached names; the cache is cleared when full), so a steady
  // stream of the same names costs one lookup.
  bool allows(std::string_view name) const;

  enum class subscribe_verdict : std::uint8_t {
    denied,           // no allow pattern covers it, or a deny pattern covers it
    allowed,          // covered by an allow pattern, overlaps no deny pattern
    allowed_filtered  // allowed, but overlaps a deny pattern: each channel it
                      // matches must be checked with allows() before delivery
  };
  // A subscription pattern is allowed when one allow pattern covers it
  // (`orders.>` covers `orders.*.created`), denied when a deny pattern
  // covers it, and filtered when it only overlaps one.
  subscribe_verdict check_subscribe(std::string_view pattern) const;

  // True when every name is allowed (allow has `>`, deny is empty): the
  // hot path skips the check.
  bool allows_everything() const noexcept { return everything_; }
  bool allows_nothing() const noexcept { return allow_.empty(); }

  const std::vector<std::string>& allow() const noexcept { return allow_; }
  const std::vector<std::string>& deny() const noexcept { return deny_; }

  static constexpr std::size_t max_cached = 4096;
  static constexpr std::size_t direct_match_limit = 8;

 private:
  // A pattern's shape, found once when the rule is made, so the common ones
  // match a name without splitting it into tokens. Each answers exactly as
  // pattern_matches does.
  enum class shape : std::uint8_t {
    any,           // ">": every name
    one_token,     // "*": a name without '.'
    literal,       // no wildcard token: the name equals the pattern
    literal_tail,  // "a.b.>": the name starts with "a.b." (a wildcard-free prefix)
    general,       // anything else: pattern_matches
  };
  static shape shape_of(std::string_view pattern) noexcept;
  static bool matches(shape kind, const std::string& pattern, std::string_view name) noexcept;
  bool compute(std::string_view name) const;

  // Transparent (a lookup with a string_view allocates nothing) and keyed
  // with a random per-process key (SipHash), so clients cannot craft names
  // that collide in the cache.
  struct cache_hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept;
  };

  std::vector<std::string> allow_;
  std::vector<std::string> deny_;
  std::vector<shape> allow_shapes_;  // allow_shapes_[i] is shape_of(allow_[i])
  std::vector<shape> deny_shapes_;
  bool everything_ = false;
  mutable std::unordered_map<std::string, bool, cache_hash, std::equal_to<>> cache_;
};

}  // namespace switchyard::auth
