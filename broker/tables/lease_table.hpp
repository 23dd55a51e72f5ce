#pragma once
// Leases: a holder proves it is alive by renewing a lease before its TTL
// runs out; the sweeper expires the rest.
//
// Expiry structure: a single-level timing wheel. Time is cut into ticks of
// one sweep period; a lease sits in the bucket of the first tick at or after
// its deadline, in an intrusive doubly-linked list, so grant, keepalive
// (unlink + relink) and revoke are O(1), and a sweep touches only the buckets
// whose tick has come and the leases in them, never the whole table. The
// wheel has max_ttl/period + 2 buckets, so a bucket never holds leases of a
// later round. A heap was the alternative; it costs O(log n) per keepalive
// and either a decrease-key or stale entries, and keepalives are the hot
// operation here (every live lease, every TTL/3).
//
// Guarantee: a lease expires no earlier than its TTL after the last
// keepalive (a bucket is swept only once its tick has passed the deadline)
// and no later than TTL plus one sweep period, unless the rate limit defers
// it to the next sweep. Two protections:
//  - at most max_expiries_per_sweep leases expire per sweep, so a mass
//    expiry is spread over several loop turns instead of stalling the loop;
//  - if the sweeper itself ran much later than its period (a paused
//    process), the lease clock is held back by the stall, and every lease
//    gets at least its full TTL from the end of the stall (its owner could
//    not reach us during it either), instead of expiring at once. The grace
//    is applied lazily: a lease's effective deadline is the later of its own
//    and the stall's end plus its TTL, and the sweep moves a due lease to
//    that deadline when it finds one, so a stall costs nothing per lease.
//
// The table runs on "lease time": the injected monotonic clock minus the
// stalls absorbed so far. Single-threaded (the broker loop).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace switchyard::broker {

using lease_id = std::uint64_t;
// Who created a lease (the broker's number for an authenticated principal;
// 0 = nobody in particular, as on a broker without an auth file). The
// table only stores it: broker/handlers/routing_handler.cpp checks it.
using owner_id = std::uint16_t;
using mono_clock = std::chrono::steady_clock;
// Injectable monotonic clock: tests drive time by hand.
using clock_source = std::function<mono_clock::time_point()>;

struct lease_config {
  std::chrono::milliseconds min_ttl{1000};
  std::chrono::milliseconds max_ttl{3'600'000};
  std::chrono::milliseconds sweep_period{100};
  std::size_t max_expiries_per_sweep = 10'000;
  // A sweep that comes this much later than its period counts as a stall.
  std::chrono::milliseconds stall_threshold{2000};
  // Every id handed out is XORed with this key, so that two tables with
  // independent random keys (two server processes) hand out unrelated ids:
  // an id a client kept from a previous process finds nothing here, instead
  // of another client's lease. 0 = ids as the slab makes them (1, 2, ...,
  // then (generation << 32) | slot). The server derives it from its random
  // instance id (server.cpp); the odds are in docs/protocol.md §12.2.
  std::uint64_t id_key = 0;
};

struct lease_info {
  lease_id id = 0;
  std::chrono::milliseconds ttl{0};
  std::chrono::milliseconds remaining{0};
};

// Something bound to a lease (a registry entry, an inbox): linked into the
// lease's list so that expiry finds everything attached in O(attached).
struct lease_attachment {
  lease_attachment* prev = nullptr;
  lease_attachment* next = nullptr;
  lease_id lease = 0;
  std::uint8_t kind = 0;   // free for the owner: what the attachment is
  std::uint8_t flags = 0;  // free for the owner (kept in the padding)
};

class lease_table {
 public:
  lease_table(lease_config config, clock_source clock);
  ~lease_table();
  lease_table(const lease_table&) = delete;
  lease_table& operator=(const lease_table&) = delete;

  // Grants a lease with `ttl` clamped to [min_ttl, max_ttl]. Ids are never
  // 0 and never reused by this table (with id_key 0 the first is 1; they
  // need not increase).
  lease_info grant(std::chrono::milliseconds ttl, owner_id owner = 0);
  // The owner given at grant; nullopt: unknown or expired.
  std::optional<owner_id> owner_of(lease_id id) const;
  // Resets the deadline to now + TTL. nullopt: unknown or expired.
  std::optional<lease_info> keepalive(lease_id id);
  // Remaining time. nullopt: unknown or expired (even if not swept yet).
  std::optional<lease_info> time_to_live(lease_id id) const;
  bool alive(lease_id id) const { return alive(id, now()); }
  // The same against a lease-clock reading taken once for several checks.
  bool alive(lease_id id, mono_clock::time_point now) const;
  // Up to `limit` live leases in the table's listing order (slot order: a
  // lease keeps its place while it lives; not the ids' numeric order),
  // after the lease `after` (0: from the first). `after` need not be live
  // any more: its place is in the id itself. `*next` (if given) becomes
  // the last lease listed when live leases follow it, else 0. So a walk,
  // page by page, lists every lease that lives throughout exactly once.
  // An `after` that no id of this table has (another process's) lists
  // from an arbitrary place or nothing. O(limit + dead slots passed).
  std::vector<lease_info> list(std::size_t limit, lease_id after = 0, lease_id* next = nullptr) const;

  // Callbacks (`remove_fn`) may detach attachments but must not call
  // grant, keepalive, revoke or sweep on this table: the sweep is walking
  // the wheel while they run.

  // Removes a lease now; `on_remove` gets it with its attachments first.
  // Returns false when the lease was unknown or already expired (an expired
  // one not yet swept is removed all the same).
  using remove_fn = std::function<void(lease_id, lease_attachment* first)>;
  bool revoke(lease_id id, const remove_fn& on_remove);

  struct sweep_result {
    std::size_t expired = 0;
    bool more_due = false;  // rate limit hit: leases past their deadline remain
    std::chrono::milliseconds stall_absorbed{0};
  };
  // Expires every lease whose deadline has passed (at most
  // max_expiries_per_sweep), calling `on_expire` for each before it is
  // erased. Run it every sweep_period.
  sweep_result sweep(const remove_fn& on_expire);

  // Links `a` into lease `id`'s attachment list. False if the lease is
  // unknown or expired.
  bool attach(lease_id id, lease_attachment& a);
  // Unlinks `a` from its lease (no-op if not attached).
  void detach(lease_attachment& a) noexcept;

  // The lease clock: the injected clock minus absorbed stalls.
  mono_clock::time_point now() const;
  std::size_t size() const noexcept { return live_; }
  const lease_config& config() const noexcept { return config_; }

 private:
  static constexpr std::uint32_t none = UINT32_MAX;

  // Leases live in a slab indexed by slot; an id is ((generation << 32) |
  // (slot + 1)) ^ id_key, so a lookup is an XOR, an index and a generation
  // check, and a freed slot's next lease gets a different id. The one
  // (slot, generation) whose id would be 0 is skipped at grant. 40 bytes a lease, no per-lease
  // allocation: the wheel links slots by index.
  struct lease {
    mono_clock::time_point deadline;  // lease time
    lease_attachment* attached = nullptr;
    std::uint32_t generation = 0;
    std::uint32_t ttl_ms = 0;
    std::uint32_t prev = none;  // wheel bucket list
    std::uint32_t next = none;
    std::uint32_t bucket = 0;
    bool live = false;
    owner_id owner = 0;  // in the padding: still 40 bytes
  };
  static_assert(sizeof(lease) == 40);

  std::uint64_t tick_of(mono_clock::time_point t) const;  // first tick at or after t
  std::uint32_t slot_of(lease_id id) const noexcept;      // `none` unless live
  lease_id id_of(std::uint32_t slot) const noexcept {
    return (static_cast<lease_id>(slots_[slot].generation) << 32 | (slot + 1)) ^ config_.id_key;
  }
  void link(std::uint32_t slot);
  void unlink(std::uint32_t slot) noexcept;
  void erase(std::uint32_t slot, const remove_fn& fn);
  // The last stall, in lease time: a lease still live at the sweep before
  // it (deadline after `cutoff`) lives at least its TTL past its end `from`.
  struct stall_grace {
    mono_clock::time_point from;
    mono_clock::time_point cutoff;
  };
  // The last stall's grace, or the one a stall still pending will give
  // (it ends at the frozen lease time now() reports).
  stall_grace current_grace() const;
  // A lease's effective deadline under grace `g`.
  mono_clock::time_point deadline_of(const lease& l, const stall_grace& g) const noexcept;
  std::optional<lease_info> info(std::uint32_t slot) const;

  lease_config config_;
  clock_source clock_;
  mono_clock::time_point epoch_;       // tick 0, lease time
  mono_clock::duration stalled_{0};    // total stall absorbed
  mono_clock::time_point last_sweep_;  // real clock
  mono_clock::time_point swept_at_;    // lease time of the last sweep
  stall_grace grace_;                  // of the last stall absorbed
  std::uint64_t swept_tick_ = 0;       // every tick before this was swept
  std::vector<std::uint32_t> wheel_;   // first slot of each bucket
  std::vector<lease> slots_;
  std::vector<std::uint32_t> free_;
  std::size_t live_ = 0;
};

}  // namespace switchyard::broker
