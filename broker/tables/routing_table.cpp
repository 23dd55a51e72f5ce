#include "broker/tables/routing_table.hpp"

#include "protocol/errc.hpp"

#include <algorithm>
#include <memory>

namespace switchyard::broker {

using protocol::errc;
using std::chrono::milliseconds;

// Memory per route is a budgeted figure (docs/benchmarks.md): keep the entry
// at 120 bytes, a 128-byte malloc chunk.
static_assert(sizeof(registry_entry) <= 120, "registry_entry grew: check memory per route");

routing_table::~routing_table() {
  registry_.for_each([](registry_entry& e) { delete &e; });
}

std::expected<std::uint64_t, std::error_code> routing_table::put(std::string_view key, std::string_view value,
                                                                 lease_id lease, milliseconds ttl, owner_id owner) {
  const bool own = lease == 0;
  if (!own && !leases_.alive(lease)) return std::unexpected(make_error_code(errc::not_found));
  registry_entry* e = registry_.find(key);
  if (!e) {
    auto made = std::make_unique<registry_entry>();
    made->key.assign(key);
    made->kind = static_cast<std::uint8_t>(attachment_kind::registry_entry);
    registry_.insert(made.get());
    e = made.release();
  } else if (e->own_lease() && e->lease != 0 && (own || e->lease != lease)) {
    // The entry had a private TTL lease; it is replaced, so it goes too.
    const lease_id old = e->lease;
    leases_.detach(*e);
    revoke_private(old);
  } else {
    leases_.detach(*e);
  }
  if (own) lease = leases_.grant(ttl, owner).id;
  leases_.attach(lease, *e);
  e->set_own_lease(own);
  if (e->value != value) e->cached_generation = 0;  // names another inbox now
  e->value.assign(value);
  e->version = ++revision_;
  return e->version;
}

std::optional<lease_id> routing_table::entry_lease(std::string_view key) const {
  const registry_entry* e = registry_.find(key);
  if (!e || !live(*e)) return std::nullopt;
  return e->lease;
}

std::optional<lease_id> routing_table::inbox_lease(std::string_view id) const {
  const auto it = inboxes_.find(id);
  if (it == inboxes_.end() || !live(it->second)) return std::nullopt;
  return it->second.lease;
}

std::optional<registry_view> routing_table::get(std::string_view key) const {
  const registry_entry* e = registry_.find(key);
  if (!e || e->lease == 0) return std::nullopt;
  const auto ttl = leases_.time_to_live(e->lease);
  if (!ttl) return std::nullopt;  // expired, the sweeper has not run yet
  return registry_view{e->key, e->value, e->version, e->own_lease() ? 0 : e->lease, ttl->remaining};
}

void routing_table::drop_entry(registry_entry* e) {
  if (on_removed_) on_removed_(e->key);
  const lease_id own = e->own_lease() ? e->lease : 0;
  leases_.detach(*e);
  registry_.erase(e);
  delete e;
  if (own != 0) revoke_private(own);
}

void routing_table::revoke_private(lease_id id) {
  // Others may have attached to the private lease (its id is visible in
  // lease lists): they go with it, as with any revoke.
  leases_.revoke(id, [this](lease_id lease, lease_attachment* first) { remove_lease(lease, first); });
}

bool routing_table::erase(std::string_view key) {
  registry_entry* e = registry_.find(key);
  if (!e) return false;
  const bool was_live = live(*e);
  drop_entry(e);
  return was_live;
}

std::vector<registry_view> routing_table::list(std::string_view prefix, std::size_t limit, bool& more) const {
  std::vector<registry_view> out;
  registry_.for_each([&](const registry_entry& e) {
    if (std::string_view(e.key).substr(0, prefix.size()) != prefix || e.lease == 0) return;
    const auto ttl = leases_.time_to_live(e.lease);
    if (!ttl) return;
    out.push_back({e.key, e.value, e.version, e.own_lease() ? 0 : e.lease, ttl->remaining});
  });
  // Key order, and only the first `limit` of it.
  more = out.size() > limit;
  if (more) {
    std::partial_sort(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(limit), out.end(),
                      [](const registry_view& a, const registry_view& b) { return a.key < b.key; });
    out.resize(limit);
  } else {
    std::sort(out.begin(), out.end(), [](const registry_view& a, const registry_view& b) { return a.key < b.key; });
  }
  return out;
}

std::error_code routing_table::open_inbox(std::string_view id, lease_id lease, delivery_target* owner) {
  if (!leases_.alive(lease)) return errc::not_found;
  auto it = inboxes_.find(id);
  if (it != inboxes_.end()) {
    inbox& box = it->second;
    // One live owner: a connected holder with a live lease keeps it.
    if (box.owner && box.owner != owner && live(box)) return errc::inbox_taken;
    leases_.detach(box);
  } else {
    it = inboxes_.try_emplace(std::string(id)).first;
    it->second.id = it->first;
    it->second.kind = static_cast<std::uint8_t>(attachment_kind::inbox);
  }
  it->second.owner = owner;
  leases_.attach(lease, it->second);
  return {};
}

bool routing_table::close_inbox(std::string_view id, delivery_target* owner) {
  auto it = inboxes_.find(id);
  if (it == inboxes_.end() || it->second.owner != owner) return false;
  leases_.detach(it->second);
  erase_inbox(it);
  return true;
}

void routing_table::erase_inbox(decltype(inboxes_)::iterator it) {
  ++inbox_generation_;
  inboxes_.erase(it);
}

routing_table::route_target routing_table::route(std::string_view key, mono_clock::time_point now) {
  registry_entry* entry = registry_.find(key);
  if (!entry || entry->lease == 0) return {};
  if (!leases_.alive(entry->lease, now)) return {};
  inbox* box = entry->cached_inbox;
  if (entry->cached_generation != inbox_generation_) {
    const auto it = inboxes_.find(entry->value);
    if (it == inboxes_.end()) return {};
    box = &it->second;
    entry->cached_inbox = box;
    entry->cached_generation = inbox_generation_;
  }
  if (box->lease == 0 || !leases_.alive(box->lease, now)) return {};
  return {entry->value, box->owner};
}

delivery_target* routing_table::inbox_owner(std::string_view id) const {
  auto it = inboxes_.find(id);
  if (it == inboxes_.end() || !live(it->second)) return nullptr;
  return it->second.owner;
}

void routing_table::disconnect(delivery_target* owner, const std::vector<std::string>& inbox_ids) {
  for (const auto& id : inbox_ids) {
    auto it = inboxes_.find(id);
    if (it != inboxes_.end() && it->second.owner == owner) it->second.owner = nullptr;
  }
}

void routing_table::remove_lease(lease_id, lease_attachment* first) {
  for (lease_attachment* a = first; a;) {
    lease_attachment* next = a->next;
    if (a->kind == static_cast<std::uint8_t>(attachment_kind::registry_entry)) {
      auto* e = static_cast<registry_entry*>(a);
      if (on_removed_) on_removed_(e->key);
      // The lease is going away: its own-lease flag must not revoke it again.
      e->set_own_lease(false);
      leases_.detach(*e);
      registry_.erase(e);
      delete e;
    } else if (a->kind == static_cast<std::uint8_t>(attachment_kind::inbox)) {
      auto* box = static_cast<inbox*>(a);
      leases_.detach(*box);
      erase_inbox(inboxes_.find(box->id));
    }
    a = next;
  }
}

}  // namespace switchyard::broker
