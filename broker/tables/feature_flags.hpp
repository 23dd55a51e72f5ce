#pragma once
// Server flags: named switches an operator turns on for a share of
// connections, at run time, without a deploy (docs/protocol.md §15.6).
//
// A flag gates something the server emits to connections that declared
// its capability (the flag "offers": the offer fields and notices of the
// capability "offers"). A connection is inside a flag's ramp when its
// bucket, xxh64(client id) mod 100 (stable across reconnects for one
// client id), is below the flag's percentage. Changing the percentage
// applies to the next frame: nothing is cached per connection. The
// per-bucket counts of declared connections answer "how many are on and
// off" exactly without visiting connections.
//
// Loop thread only.

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace switchyard::broker {

class feature_flags {
 public:
  // The flags this server knows. Each is named on the wire by name_of().
  enum class flag : std::uint8_t { offers };
  static constexpr std::size_t count = 1;
  static constexpr std::uint8_t buckets = 100;

  static std::string_view name_of(flag f) noexcept;
  static std::optional<flag> find(std::string_view name) noexcept;
  // The ramp bucket of a client id, 0..99: xxh64 with seed 0, so the same
  // client id falls in the same bucket on every server and every run.
  static std::uint8_t bucket_of(std::string_view client_id) noexcept;

  // Every flag starts at `initial_percent` (0..100, clamped).
  explicit feature_flags(std::uint8_t initial_percent = 100) noexcept { percent_.fill(clamp(initial_percent)); }

  std::uint8_t percent(flag f) const noexcept { return percent_[index(f)]; }
  // 0 turns the flag off for everyone, 100 on for everyone.
  void set(flag f, std::uint8_t percent) noexcept { percent_[index(f)] = clamp(percent); }
  bool on(flag f, std::uint8_t bucket) const noexcept { return bucket < percent_[index(f)]; }

  // A connection that declared the flag's capability opened (joined) or
  // closed (left), in `bucket`. Every joined must be matched by one left.
  void joined(flag f, std::uint8_t bucket) noexcept { ++members_[index(f)][bucket % buckets]; }
  void left(flag f, std::uint8_t bucket) noexcept { --members_[index(f)][bucket % buckets]; }

  struct split {
    std::uint64_t on = 0;
    std::uint64_t off = 0;
  };
  // The open connections that declared the capability, inside and outside
  // the ramp now.
  split connections(flag f) const noexcept;

 private:
  static constexpr std::size_t index(flag f) noexcept { return static_cast<std::size_t>(f); }
  static constexpr std::uint8_t clamp(std::uint8_t p) noexcept { return p > 100 ? 100 : p; }
  std::array<std::uint8_t, count> percent_{};
  std::array<std::array<std::uint64_t, buckets>, count> members_{};
};

}  // namespace switchyard::broker
