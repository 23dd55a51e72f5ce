#pragma once
// Exposure counts for offer caps (docs/protocol.md §15.5): per route key,
// the times of its last `history` offers, so "how many offers did this key
// get in the last W" is answered for any W up to the table's window.
//
// Memory: one entry per key offered within the window, about
// entry_bytes + the key's length, at most max_keys entries (a new key past
// that is not counted: record() returns false, and the server counts it).
// sweep() forgets keys with no offer in the window; the keys are kept in
// the order of their last offer, so a sweep looks only at the ones it
// forgets (and one more), never at all of them.
//
// Time is passed in (tests use a fake clock). Loop thread only.

#include "broker/tables/string_hash.hpp"

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <list>
#include <string>
#include <string_view>
#include <unordered_map>

namespace switchyard::broker {

class exposure_table {
 public:
  using clock = std::chrono::steady_clock;
  // The most offers one key remembers: a cap above it cannot be checked
  // (the handler refuses cap_max > history).
  static constexpr std::uint32_t history = 16;

  // `window`: the longest window a cap or a query may use; `max_keys`:
  // the most keys tracked at once.
  exposure_table(std::size_t max_keys, clock::duration window) : max_keys_(max_keys), window_(window) {}

  // Offers recorded for `key` in (now - window, now]; `window` is clamped
  // to the table's.
  std::uint32_t count(std::string_view key, clock::duration window, clock::time_point now) const;
  // Records one offer to `key` at `now`. False (nothing recorded) when
  // the key is new and the table holds max_keys keys. Precondition: `now`
  // is not earlier than the previous call's (a monotonic clock).
  bool record(std::string_view key, clock::time_point now);
  // Forgets keys whose last offer is older than the window; returns how
  // many went. Costs what it forgets, not what the table holds.
  std::size_t sweep(clock::time_point now);

  std::size_t size() const noexcept { return keys_.size(); }
  clock::duration window() const noexcept { return window_; }
  // Bytes held, estimated: entries and their keys.
  std::size_t bytes() const noexcept { return keys_.size() * entry_bytes + key_bytes_; }
  // What one entry costs besides its key (node, bucket, ring, its place in
  // the order of last offers).
  static constexpr std::size_t entry_bytes = sizeof(std::string) + history * sizeof(std::int64_t) + 8 + 32 + 8 + 32;

 private:
  struct ring {
    std::array<std::int64_t, history> at{};  // offer times, ns since the clock's epoch
    std::uint32_t next = 0;                  // where the next one goes
    std::uint32_t size = 0;
    std::int64_t last() const noexcept { return at[(next + history - 1) % history]; }
  };
  struct entry {
    ring times;
    std::list<const std::string*>::iterator place;  // in by_last_
  };
  std::size_t max_keys_;
  clock::duration window_;
  std::size_t key_bytes_ = 0;
  std::unordered_map<std::string, entry, string_hash, std::equal_to<>> keys_;
  // The keys (pointing at keys_'s own strings, which stay put until
  // erased), the one offered longest ago first: record() moves a key to
  // the back (times only grow), sweep() takes from the front.
  std::list<const std::string*> by_last_;
};

}  // namespace switchyard::broker
