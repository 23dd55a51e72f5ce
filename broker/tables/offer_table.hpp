#pragma once
// Live offers (docs/protocol.md §15): sends with an offer id, from the
// send until they expire, are withdrawn, or are evicted by the limits.
// For each offer: who sent it (a connection id, and the inbox receipts go
// to), its payload, and per routed key the inbox it went to and whether
// the device acknowledged it. Per route key, the offers pending for it
// (not acknowledged, not expired, not withdrawn), oldest first: the pull.
//
// Bounded: at most max_offers offers and max_bytes of them (payload,
// keys and inboxes, plus a fixed cost each, and the per-key pending lists);
// past either the oldest offers go (evicted, counted). At most max_pending_per_key offers pending per
// key; past it the key's oldest pending entry goes (counted).
//
// Time is passed in (tests use a fake clock). Loop thread only.

#include "broker/tables/string_hash.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <queue>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace switchyard::broker {

class offer_table {
 public:
  using clock = std::chrono::steady_clock;

  struct limits {
    std::size_t max_offers = 100'000;
    std::size_t max_bytes = 64u << 20;
    std::size_t max_pending_per_key = 16;
  };

  struct key_state {
    std::string key;
    std::string inbox;  // the inbox it was delivered into
    bool acked = false;
    bool pending = true;  // listed for the key (not acked, not pushed out)
    bool receipt_sent = false;
  };

  struct offer {
    std::uint64_t id = 0;
    std::uint64_t sender = 0;   // the sending connection's id
    std::uint64_t owner = 0;    // the sender's principal number (0 = none)
    std::string principal;      // its name ("" = none, or an admin): a withdraw from another node
    std::string receipt_inbox;  // receipts go to its holder (empty: the sender)
    clock::time_point sent{};
    clock::time_point expires{};
    clock::time_point receipt_due{};  // {} = no receipts asked
    std::vector<std::byte> payload;
    std::vector<key_state> keys;  // the routed keys, in send order

    bool wants_receipts() const noexcept { return receipt_due != clock::time_point{}; }
    // What the table counts against max_bytes for it.
    std::size_t bytes() const noexcept;
  };
  // The fixed part of an offer's cost (bytes()) besides payload, keys and inboxes.
  static constexpr std::size_t offer_overhead = sizeof(offer) + 64;
  static constexpr std::size_t key_overhead = sizeof(key_state) + 32;
  // A key's pending list: its map entry besides the key (node, bucket, the
  // vector), and each offer id in it (with room for the vector's growth).
  static constexpr std::size_t pending_list_overhead = sizeof(std::string) + sizeof(std::vector<std::uint64_t>) + 32;
  static constexpr std::size_t pending_entry_bytes = 2 * sizeof(std::uint64_t);

  explicit offer_table(limits l) : limits_(l) {}

  bool contains(std::uint64_t id) const { return offers_.contains(id); }
  offer* find(std::uint64_t id);
  // Adds `o` (precondition: !contains(o.id), o.keys not empty), then
  // evicts the oldest offers while over the limits (never `o` itself).
  void add(offer o);
  // Acknowledges key `key` of offer `id` (every key delivered into one of
  // `inboxes` when `key` is empty). Calls `each` for each key state newly
  // acked. Returns how many were acked; 0 when the offer is unknown or no
  // such key is unacked.
  std::size_t ack(std::uint64_t id, std::string_view key, std::span<const std::string> inboxes,
                  const std::function<void(offer&, key_state&)>& each);
  // Removes offer `id`; returns it (nullopt when unknown).
  std::optional<offer> remove(std::uint64_t id);

  // The offers pending for `key` at `now`, oldest first, at most `limit`
  // (0 = all): borrowed until the table changes.
  std::vector<const offer*> pending(std::string_view key, clock::time_point now, std::size_t limit) const;

  // Due work at `now`: `timed_out` for each key of an offer whose receipt
  // timeout passed, not acked yet (once per key); then `expired` for each
  // offer past its expiry, just before it is removed.
  void sweep(clock::time_point now, const std::function<void(offer&, key_state&)>& timed_out,
             const std::function<void(offer&)>& expired);
  // The earliest receipt timeout or expiry still to come (nullopt: none).
  std::optional<clock::time_point> next_deadline() const;

  std::size_t size() const noexcept { return offers_.size(); }
  // The offers' bytes plus their keys' pending lists (what max_bytes bounds).
  std::size_t bytes() const noexcept { return bytes_ + pending_bytes_; }
  std::size_t pending_entries() const noexcept { return pending_entries_; }
  // Since the table was made.
  std::uint64_t evicted() const noexcept { return evicted_; }
  std::uint64_t pending_pushed_out() const noexcept { return pushed_out_; }
  const limits& bounds() const noexcept { return limits_; }
  void set_limits(limits l) noexcept { limits_ = l; }

 private:
  using deadline = std::pair<clock::time_point, std::uint64_t>;
  using deadline_heap = std::priority_queue<deadline, std::vector<deadline>, std::greater<>>;
  // Takes `o`'s keys out of the per-key pending lists.
  void unlist(offer& o);
  void unlist_key(std::uint64_t id, key_state& k);

  limits limits_;
  std::unordered_map<std::uint64_t, offer> offers_;
  // Per key, the ids pending for it, oldest first (at most
  // max_pending_per_key: a vector, small and cheap to shift).
  std::unordered_map<std::string, std::vector<std::uint64_t>, string_hash, std::equal_to<>> pending_;
  std::deque<std::uint64_t> order_;  // ids in the order added (stale ids skipped): eviction
  deadline_heap receipts_;
  deadline_heap expiries_;
  std::size_t bytes_ = 0;          // the live offers' bytes()
  std::size_t pending_bytes_ = 0;  // pending_'s lists (pending_list_overhead, pending_entry_bytes)
  std::size_t pending_entries_ = 0;
  std::uint64_t evicted_ = 0;
  std::uint64_t pushed_out_ = 0;
};

}  // namespace switchyard::broker
