#pragma once
// The routing registry (route key -> value, each bound to a lease) and the
// gateway inboxes, on top of the lease table.
//
// Soft state: nothing here is persisted; gateways re-register after a
// restart. Every entry and inbox is a lease_attachment, so when a lease
// expires or is revoked, everything bound to it goes in the same step
// (remove_lease). Single-threaded (the broker loop).

#include "broker/tables/flat_index.hpp"
#include "broker/tables/lease_table.hpp"
#include "broker/tables/string_hash.hpp"

#include <cstdint>
#include <expected>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <vector>

namespace switchyard::broker {

class delivery_target;

enum class attachment_kind : std::uint8_t { registry_entry = 1, inbox = 2 };

// flags bit: the entry was put with a TTL, and its lease is private to it.
inline constexpr std::uint8_t own_lease_flag = 1;

struct inbox;

// Sized so that an entry is 120 bytes (a 128-byte malloc chunk); the index
// adds 16 to 32 bytes of slots per entry.
struct registry_entry : lease_attachment {
  std::string key;
  std::string value;
  std::uint64_t version = 0;
  // The inbox `value` named when route() last found one, valid while
  // routing_table's inbox generation still equals cached_generation (no
  // inbox was erased since): a send then skips the inbox lookup.
  inbox* cached_inbox = nullptr;
  std::uint64_t cached_generation = 0;
  bool own_lease() const noexcept { return flags & own_lease_flag; }
  void set_own_lease(bool on) noexcept { flags = on ? (flags | own_lease_flag) : (flags & ~own_lease_flag); }
};

struct inbox : lease_attachment {
  std::string id;
  delivery_target* owner = nullptr;  // null while its gateway is disconnected
};

struct registry_view {
  std::string_view key;
  std::string_view value;
  std::uint64_t version = 0;
  lease_id lease = 0;  // 0 when the entry has a TTL of its own
  std::chrono::milliseconds remaining{0};
};

class routing_table {
 public:
  explicit routing_table(lease_table& leases) : leases_(leases) {}
  ~routing_table();
  routing_table(const routing_table&) = delete;
  routing_table& operator=(const routing_table&) = delete;

  // key -> value under `lease` (non-zero) or a private TTL lease. Errors:
  // protocol not_found (the lease is unknown or expired). Returns the new version.
  // A private TTL lease is granted to `owner` (lease_table::grant).
  std::expected<std::uint64_t, std::error_code> put(std::string_view key, std::string_view value, lease_id lease,
                                                    std::chrono::milliseconds ttl, owner_id owner = 0);
  // The lease a live entry (its private one included) or an inbox is
  // bound to: what ownership is checked against. nullopt: no live entry /
  // no inbox with a live lease.
  std::optional<lease_id> entry_lease(std::string_view key) const;
  std::optional<lease_id> inbox_lease(std::string_view id) const;
  // Never an expired entry, even before the sweeper ran. The view is valid
  // until the next change.
  std::optional<registry_view> get(std::string_view key) const;
  bool erase(std::string_view key);
  // Entries with the prefix in key order (live ones only), at most `limit`;
  // `more` says whether the limit cut the list. O(entries): an admin call.
  std::vector<registry_view> list(std::string_view prefix, std::size_t limit, bool& more) const;

  // Opens `id` for `owner` under `lease`. Errors: not_found (lease),
  // inbox_taken (open on another live connection).
  std::error_code open_inbox(std::string_view id, lease_id lease, delivery_target* owner);
  // Closes `id` if `owner` holds it; false otherwise.
  bool close_inbox(std::string_view id, delivery_target* owner);
  // The target holding inbox `id`, or null (unknown, expired or disconnected).
  delivery_target* inbox_owner(std::string_view id) const;
  // Where a send to `key` goes: the inbox its live entry names and the
  // target holding that inbox (owner null when there is none: no live
  // entry, or an unknown, expired or disconnected inbox). The hot path of
  // send-to-user: one clock reading, no TTL arithmetic. The view is valid
  // until the next change.
  struct route_target {
    std::string_view inbox;
    delivery_target* owner = nullptr;
  };
  route_target route(std::string_view key) { return route(key, leases_.now()); }
  // As route(key), judging the entry's and the inbox's leases at
  // `lease_now` (lease_now() read earlier): a caller routing a run of sends
  // reads the clock once for the run.
  route_target route(std::string_view key, mono_clock::time_point lease_now);
  mono_clock::time_point lease_now() const { return leases_.now(); }
  // Cache hints for a caller that knows its next route() keys (a run of
  // sends read at once): prefetch_slot for a key two lookups ahead,
  // prefetch_entry for the next one. See flat_index.
  void prefetch_slot(std::string_view key) const noexcept { registry_.prefetch_slot(key); }
  void prefetch_entry(std::string_view key) const noexcept { registry_.prefetch_node(key); }
  // Forget `owner` (its connection closed): its inboxes stay bound to their
  // leases, so a gateway reconnecting within the TTL can reopen them.
  void disconnect(delivery_target* owner, const std::vector<std::string>& inbox_ids);

  // Removes everything attached to a lease (the lease table's remove
  // callback for revoke and expiry).
  void remove_lease(lease_id id, lease_attachment* first);

  // Cluster mode: `f(key)` is called whenever an entry goes (erase, its
  // lease expired or was revoked), before it goes; the key is borrowed for
  // the call. f must not change the table.
  void on_entry_removed(std::function<void(std::string_view key)> f) { on_removed_ = std::move(f); }
  // Calls f(key) for every live entry, in no order. O(entries).
  template <class F>
  void for_each_live_key(F&& f) const {
    registry_.for_each([&](const registry_entry& e) {
      if (live(e)) f(std::string_view(e.key));
    });
  }

  std::size_t entries() const noexcept { return registry_.size(); }
  std::size_t inboxes() const noexcept { return inboxes_.size(); }

 private:
  bool live(const lease_attachment& a) const { return a.lease != 0 && leases_.alive(a.lease); }
  // route() runs on every send: a flat index, two cache misses per lookup.
  // list() is an admin operation and scans (O(entries)), sorting only what
  // it returns. The table owns the entries (allocated one by one: the lease
  // table links them, so they must not move).
  using registry_map = flat_index<registry_entry, &registry_entry::key>;
  void drop_entry(registry_entry* e);
  void revoke_private(lease_id id);

  lease_table& leases_;
  registry_map registry_;
  // Node-based, so an inbox stays put while it exists: entries cache its
  // address. Bumped whenever an inbox is erased, which voids every cache.
  std::unordered_map<std::string, inbox, string_hash, std::equal_to<>> inboxes_;
  std::function<void(std::string_view)> on_removed_;
  std::uint64_t inbox_generation_ = 1;
  void erase_inbox(decltype(inboxes_)::iterator it);
  std::uint64_t revision_ = 0;
};

}  // namespace switchyard::broker
