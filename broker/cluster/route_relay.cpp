#include "broker/cluster/route_relay.hpp"

#include "broker/cluster/node_link_generated.h"
#include "broker/cluster/partition_map.hpp"
#include "protocol/errc.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace switchyard::broker {

using protocol::errc;

namespace {
// The longest route key (docs/protocol.md §12): a longer one from a peer
// is malformed.
constexpr std::size_t max_key_bytes = 1024;

}  // namespace

// Keys of one Send bound for one node, with their places in the Send.
struct route_relay::key_group {
  std::vector<std::string_view> keys;
  std::vector<std::uint32_t> indices;
  void add(std::string_view key, std::uint32_t index) {
    keys.push_back(key);
    indices.push_back(index);
  }
  void clear() {
    keys.clear();
    indices.clear();
  }
};

// Keys grouped by node (the node ids borrowed from the view), reused from
// call to call: the groups keep their capacity.
struct route_relay::node_groups {
  std::vector<std::pair<std::string_view, key_group>> groups;
  std::size_t used = 0;
  key_group& operator[](std::string_view node) {
    for (std::size_t i = 0; i < used; ++i)
      if (groups[i].first == node) return groups[i].second;
    if (used == groups.size()) groups.emplace_back();
    auto& g = groups[used++];
    g.first = node;
    g.second.clear();
    return g.second;
  }
  std::span<const std::pair<std::string_view, key_group>> in_use() const { return {groups.data(), used}; }
  bool empty() const { return used == 0; }
  void clear() { used = 0; }
};

// A send waiting for other nodes: answered once the owners it asked have
// answered and every home they named has.
struct route_relay::pending_send {
  std::weak_ptr<peer> who;
  std::uint64_t request_id = 0;
  std::uint64_t peer_ticket = 0;
  std::string single_key;  // the key of a one-key send (its no_route names it)
  std::size_t keys = 0;
  std::uint32_t owners_waited = 0;  // owner outcomes still to come
  std::uint32_t homes_expected = 0;
  std::uint32_t homes_answered = 0;
  std::uint32_t routed = 0;
  std::uint32_t unavailable = 0;
  std::vector<std::string> gateways;  // per key of the Send, in order ("" = no route)
  std::vector<std::string> asked;     // the nodes asked (an outcome_unknown names them)
  clock::time_point deadline;
  // A durable send: answered with its record's place, never outcome_unknown.
  bool durable = false;
  std::uint64_t seq = 0;
  std::uint64_t epoch = 0;
  // An offer: called instead of answering (send_offer); per key, 1 when
  // an owner left it out over its cap.
  offer_done done;
  std::vector<std::uint8_t> capped;
  std::uint32_t capped_keys = 0;
};

// Puts and removals for one owner, and (once sent) the puts waiting for
// its RouteAck.
struct route_relay::put_batch {
  struct waiter {
    std::weak_ptr<peer> who;
    std::uint64_t request_id = 0;
    std::uint64_t peer_ticket = 0;
    std::string key;
    std::vector<std::uint8_t> answer;
  };
  std::string owner;
  std::vector<std::string> puts;        // sent: kept until the RouteAck (its revisions are per put)
  std::vector<std::string> principals;  // per put
  std::vector<std::uint64_t> serials;   // per put: its home_entry's serial (a re-put after a removal has another)
  std::vector<std::string> removes;
  std::vector<waiter> waiters;
  std::size_t bytes = 0;  // of puts and removes, about
  clock::time_point deadline;
};

// A partition set being rebuilt: the members that have not answered yet.
struct route_relay::rebuild {
  struct member {
    std::string node_id;
    std::uint32_t next_part = 0;
    bool broken = false;  // a part of its answer went missing
    // When it was last asked, or its last part came: a large answer comes
    // paced over many loop turns; only silence this long is a lost one.
    clock::time_point heard{};
  };
  std::vector<std::uint32_t> partitions;  // ascending
  std::vector<member> waiting;
  // Blocking: the partitions were just gained and answer unavailable until
  // it completes. Not blocking: a member that joined or came back as a new
  // incarnation is asked for its routes in the partitions held (served
  // meanwhile).
  bool blocking = true;
};

route_relay::route_relay(asio::io_context& io, route_relay_options options, node_bus& bus, routing_table& routing,
                         fanout& fan, std::function<bool()> in_standing, std::shared_ptr<spdlog::logger> logger)
    : io_(io),
      options_(options),
      bus_(bus),
      routing_(routing),
      fanout_(fan),
      in_standing_(std::move(in_standing)),
      logger_(std::move(logger)),
      held_(partition_map::partition_count, 0),
      rebuilding_(partition_map::partition_count, 0),
      outboxes_(
          bus,
          [this](std::string_view node, outbox& box) {
            auto& b = box.b;
            const auto forwards = b.CreateVector(box.requests);
            const auto outcomes = b.CreateVector(box.answers);
            return bus_.send_body(node, link::Body::Sends, link::CreateSends(b, forwards, outcomes).Union(), b);
          },
          [this] { schedule_flush(); }),
      timer_(io),
      pump_timer_(io),
      here_(std::make_unique<key_group>()),
      all_(std::make_unique<key_group>()),
      homes_(std::make_unique<node_groups>()),
      owners_(std::make_unique<node_groups>()) {
  bus_.on_route_message([this](remote_node& from, const link::LinkMessage& m) { on_message(from, m); });
  routing_.on_entry_removed([this](std::string_view key) { removed(key); });
}

route_relay::~route_relay() {
  // What still waits for another node is answered: the node leaves the
  // cluster (it stops), and a Ping after these must not hang.
  for (auto& [ticket, snd] : sends_) {
    if (snd.durable) {
      answer(snd);
      continue;
    }
    if (snd.done) {
      // An offer: its handler answers outcome_unknown and keeps what is
      // known delivered.
      std::string nodes;
      for (const auto& n : snd.asked) nodes += (nodes.empty() ? "'" : ", '") + n + "'";
      snd.done(offer_outcome{snd.gateways, snd.capped, snd.routed, snd.unavailable, snd.capped_keys, true, nodes});
      if (auto p = snd.who.lock()) p->close_ticket(snd.peer_ticket);
      continue;
    }
    if (auto p = snd.who.lock(); p && !p->closed()) {
      p->send_error(snd.request_id, errc::outcome_unknown,
                    "this node left the cluster before the other nodes answered: the message may or may not have "
                    "been delivered");
      p->close_ticket(snd.peer_ticket);
    }
  }
  const auto unconfirmed = [](put_batch& batch) {
    for (auto& w : batch.waiters)
      if (auto p = w.who.lock(); p && !p->closed()) {
        p->send_error(w.request_id, errc::unavailable,
                      "this node left the cluster before route key '" + w.key + "' was confirmed");
        p->close_ticket(w.peer_ticket);
      }
  };
  for (auto& [ticket, batch] : unacked_) unconfirmed(batch);
  for (auto& [owner, batch] : outgoing_) unconfirmed(batch);
  *alive_ = false;
  stopped_ = true;
  timer_.cancel();
  pump_timer_.cancel();
  key_answers_.clear();
  bus_.on_route_message(nullptr);
  routing_.on_entry_removed(nullptr);
}

const route_relay::home_entry* route_relay::home_route(std::string_view key) const {
  const auto it = home_routes_.find(key);
  return it == home_routes_.end() ? nullptr : &it->second;
}

const cluster_member* route_relay::owner_of(std::uint32_t partition) const {
  const auto* view = bus_.view();
  return view ? view->owner(partition) : nullptr;
}

bool route_relay::ready(std::uint32_t partition) const {
  return held_[partition] != 0 && rebuilding_[partition] == 0 && in_standing_();
}

const std::string& route_relay::node_id_of(std::int64_t incarnation) const {
  static const std::string none;
  for (const auto& m : members_)
    if (m.incarnation == incarnation) return m.node_id;
  return none;
}

void route_relay::view_changed() {
  const auto* view = bus_.view();
  if (!view) return;
  const bool restarted = incarnation_ != 0 && bus_.incarnation() != incarnation_;
  incarnation_ = bus_.incarnation();
  const bool members_changed = view->members.size() != members_.size() ||
                               !std::equal(view->members.begin(), view->members.end(), members_.begin(),
                                           [](const cluster_member& a, const cluster_member& b) {
                                             return a.node_id == b.node_id && a.incarnation == b.incarnation;
                                           });
  // An outbox made for a node that left, or for an earlier incarnation of
  // it (the bus already links to the new one), is not sent: this node's
  // own sends in it count those keys unavailable (settled below); what it
  // owed others (their tickets were the earlier incarnation's) goes.
  outboxes_.drop_stale(view);
  std::vector<cluster_member> previous = std::move(members_);
  members_ = view->members;
  // Ownership: what this node holds now, at which revision.
  std::vector<std::uint32_t> gained;
  for (std::uint32_t p = 0; p < partition_map::partition_count; ++p) {
    std::int64_t now = 0;
    if (p < view->owners.size()) {
      const auto& o = view->owners[p];
      if (o.node_id == bus_.node_id() && o.incarnation == incarnation_) now = o.revision;
    }
    if (now == held_[p]) continue;
    directory_.clear(p);
    rebuilding_[p] = 0;
    held_[p] = now;
    if (now == 0) continue;
    gained.push_back(p);
    asked_by_[p] = {};  // this node's own view is the newest word on it
  }
  if (members_changed) {
    // The entries of homes no longer in the view (gone, or a new
    // incarnation that writes its entries afresh).
    directory_.drop_homes([this](std::int64_t home) { return !node_id_of(home).empty(); });
    // A rebuild no longer waits for a member that left; one that came back
    // as a new incarnation is asked again.
    for (auto it = rebuilds_.begin(); it != rebuilds_.end();) {
      std::erase_if(it->second.waiting, [&](const rebuild::member& w) { return view->find(w.node_id) == nullptr; });
      for (auto& w : it->second.waiting) {
        const auto* m = view->find(w.node_id);
        const bool same = std::any_of(previous.begin(), previous.end(), [&](const cluster_member& o) {
          return o.node_id == m->node_id && o.incarnation == m->incarnation;
        });
        if (same) continue;
        w.next_part = 0;
        w.broken = false;
        w.heard = clock::now();
        ask_rebuild(w.node_id, it->first, it->second.partitions);
      }
      if (it->second.waiting.empty()) {
        for (const auto p : it->second.partitions)
          if (rebuilding_[p] == it->first) rebuilding_[p] = 0;
        it = rebuilds_.erase(it);
      } else {
        ++it;
      }
    }
    // Puts waiting for an owner that left: answered unavailable now.
    for (auto it = unacked_.begin(); it != unacked_.end();) {
      if (view->find(it->second.owner) == nullptr) {
        for (auto& w : it->second.waiters) {
          auto p = w.who.lock();
          if (!p || p->closed()) continue;
          ++counters_.unavailable;
          p->send_error(w.request_id, errc::unavailable,
                        "node '" + it->second.owner + "', the owner of route key '" + w.key +
                            "', left before confirming it: retry");
          p->close_ticket(w.peer_ticket);
        }
        it = unacked_.erase(it);
      } else {
        ++it;
      }
    }
  }
  std::vector<std::string> everyone;
  for (const auto& m : members_) everyone.push_back(m.node_id);
  start_rebuild(std::move(gained), everyone, true);
  // Members that joined or came back as a new incarnation (their old
  // entries were dropped above): asked for their routes in the partitions
  // this node kept. After this node's own re-registration, every member is
  // new to it, and each of them asks it likewise.
  if (!previous.empty() || restarted) {
    std::vector<std::string> fresh;
    for (const auto& m : members_)
      if (m.node_id != bus_.node_id() && std::none_of(previous.begin(), previous.end(), [&](const cluster_member& o) {
            return o.node_id == m.node_id && o.incarnation == m.incarnation;
          }))
        fresh.push_back(m.node_id);
    std::vector<std::uint32_t> kept;
    for (std::uint32_t p = 0; p < partition_map::partition_count; ++p)
      if (held_[p] != 0 && rebuilding_[p] == 0) kept.push_back(p);
    if (!fresh.empty()) start_rebuild(std::move(kept), fresh, false);
  }
  settle_refused();
  arm_timer();
}

void route_relay::start_rebuild(std::vector<std::uint32_t> partitions, const std::vector<std::string>& from,
                                bool blocking) {
  if (partitions.empty()) return;
  const auto ticket = ++next_ticket_;
  rebuild r;
  r.partitions = std::move(partitions);
  r.blocking = blocking;
  if (blocking) {
    counters_.rebuilds += r.partitions.size();
    // This node's own keys in them: at once.
    routing_.for_each_live_key([&](std::string_view key) {
      const auto p = partition_map::partition_of(key);
      if (held_[p] != 0 && std::binary_search(r.partitions.begin(), r.partitions.end(), p)) {
        const auto* own = home_route(key);
        directory_.put(key, p, incarnation_, own ? std::string_view(own->principal) : std::string_view(),
                       own ? own->stamp : route_stamp{});
      }
    });
  }
  for (const auto& id : from)
    if (id != bus_.node_id()) r.waiting.push_back({.node_id = id, .heard = clock::now()});
  if (r.waiting.empty()) return;  // alone: complete
  if (blocking) {
    for (const auto p : r.partitions) rebuilding_[p] = ticket;
    logger_->info("cluster: rebuilding the route directory of {} partition(s) from {} node(s)", r.partitions.size(),
                  r.waiting.size());
  }
  for (const auto& w : r.waiting) ask_rebuild(w.node_id, ticket, r.partitions);
  rebuilds_.emplace(ticket, std::move(r));
}

std::optional<std::string> route_relay::unavailable_for(std::string_view key) const {
  const auto p = partition_map::partition_of(key);
  const auto* owner = owner_of(p);
  if (!owner) return "route key '" + std::string(key) + "': its partition " + std::to_string(p) + " has no owner now";
  if (owner->node_id == bus_.node_id() && !ready(p)) {
    if (!in_standing_())
      return std::string("this node, the owner of route key's partition, is out of standing in etcd");
    return "route key '" + std::string(key) + "': partition " + std::to_string(p) + " is being rebuilt here";
  }
  return std::nullopt;
}

bool route_relay::taken_elsewhere(std::string_view key, std::uint32_t partition, std::int64_t home,
                                  std::string_view principal) const {
  // Ownership (docs/security.md): a principal may not take over a route
  // another principal holds on another live node; an admin ("") may.
  if (principal.empty()) return false;
  const auto current = directory_.find(key, partition);
  if (current == 0 || current == home || node_id_of(current).empty()) return false;
  return directory_.principal(key, partition) != principal;
}

void route_relay::refuse_taken(peer& from, std::uint64_t rid, std::string_view key) {
  routing_.erase(key);  // the local put is undone
  from.send_forbidden(rid, "RegistryPut", "registry key '" + std::string(key) + "'",
                      "it belongs to another principal (on another node)");
}

bool route_relay::refuse_put(peer& from, std::uint64_t rid, std::string_view key) {
  auto why = unavailable_for(key);
  if (!why) return false;
  ++counters_.unavailable;
  from.send_error(rid, errc::unavailable, *why);
  return true;
}

void route_relay::confirm_put(peer& from, std::uint64_t rid, std::string_view key, std::string_view principal,
                              protocol::bytes_view answer) {
  const auto p = partition_map::partition_of(key);
  const auto* owner = owner_of(p);
  auto at = home_routes_.find(key);
  if (at == home_routes_.end()) at = home_routes_.emplace(std::string(key), home_entry{.serial = ++home_serial_}).first;
  auto& own = at->second;
  own.principal.assign(principal);
  if (owner && owner->node_id == bus_.node_id() && ready(p)) {
    if (taken_elsewhere(key, p, incarnation_, principal)) return refuse_taken(from, rid, key);
    own.stamp = {held_[p], ++confirmations_};
    directory_.put(key, p, incarnation_, principal, own.stamp);
    from.send(answer);
    return;
  }
  if (!owner) {  // unavailable_for() was asked just before: the view cannot have changed
    ++counters_.unavailable;
    return from.send_error(rid, errc::unavailable, *unavailable_for(key));
  }
  auto& batch = outgoing_[owner->node_id];
  batch.owner = owner->node_id;
  std::erase(batch.removes, key);
  batch.puts.emplace_back(key);
  batch.principals.emplace_back(principal);
  batch.serials.push_back(own.serial);
  batch.waiters.push_back({from.weak_peer(), rid, from.open_ticket(), std::string(key),
                           std::vector<std::uint8_t>(answer.begin(), answer.end())});
  batch.bytes += key.size() + 8;
  if (batch.bytes >= options_.part_bytes) return flush_owner(owner->node_id, batch);
  schedule_flush();
}

void route_relay::removed(std::string_view key) {
  if (const auto it = home_routes_.find(key); it != home_routes_.end()) home_routes_.erase(it);
  const auto p = partition_map::partition_of(key);
  const auto* owner = owner_of(p);
  // The partition's last asker, when this node's view does not name it
  // (yet): it may own the partition already and hold this node's route from
  // the answer, so it is told too. Whoever does not hold the partition
  // ignores a removal; whoever does removes only this home's entry.
  const auto& asker = asked_by_[p].node_id;
  if (!asker.empty() && (!owner || owner->node_id != asker) && bus_.view() && bus_.view()->find(asker))
    remove_at(asker, key, p);
  // No owner: whoever gets the partition rebuilds it from the home tables.
  if (owner) remove_at(owner->node_id, key, p);
}

void route_relay::remove_at(const std::string& node, std::string_view key, std::uint32_t partition) {
  if (node == bus_.node_id()) {
    if (held_[partition] != 0) directory_.remove(key, partition, incarnation_);
    return;
  }
  auto& batch = outgoing_[node];
  batch.owner = node;
  for (std::size_t i = 0; i < batch.puts.size();) {
    if (batch.puts[i] == key) {
      batch.puts.erase(batch.puts.begin() + static_cast<std::ptrdiff_t>(i));
      batch.principals.erase(batch.principals.begin() + static_cast<std::ptrdiff_t>(i));
      batch.serials.erase(batch.serials.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  batch.removes.emplace_back(key);
  batch.bytes += key.size() + 8;
  if (batch.bytes >= options_.part_bytes) return flush_owner(node, batch);
  schedule_flush();
}

void route_relay::schedule_flush() {
  if (flush_posted_ || stopped_) return;
  flush_posted_ = true;
  asio::post(io_, [this, alive = alive_] {
    if (!*alive) return;
    flush_posted_ = false;
    if (!stopped_) flush();
  });
}

void route_relay::flush() {
  for (auto& [owner, batch] : outgoing_) flush_owner(owner, batch);
  outgoing_.clear();
  outboxes_.flush();
  settle_refused();
  arm_timer();
}

void route_relay::settle_refused() {
  // Taken first: answering a send may forward another.
  auto refused = std::move(outboxes_.refused());
  outboxes_.refused().clear();
  for (const auto& r : refused) {
    const auto it = sends_.find(r.ticket);
    if (it == sends_.end()) continue;
    auto& s = it->second;
    s.unavailable += r.keys;
    if (r.to_home) {
      if (s.homes_expected > 0) --s.homes_expected;
    } else if (s.owners_waited > 0) {
      --s.owners_waited;
    }
    finish(r.ticket);
  }
}

void route_relay::flush_owner(const std::string& owner, put_batch& batch) {
  if (batch.puts.empty() && batch.removes.empty() && batch.waiters.empty()) return;
  const auto deadline = clock::now() + options_.forward_timeout;
  {
    const auto ticket = batch.waiters.empty() ? 0 : ++next_ticket_;
    auto& b = bus_.link_builder();
    b.Clear();
    const auto puts = b.CreateVectorOfStrings(batch.puts.begin(), batch.puts.end());
    const auto removes = b.CreateVectorOfStrings(batch.removes.begin(), batch.removes.end());
    const auto principals = b.CreateVectorOfStrings(batch.principals.begin(), batch.principals.end());
    const bool sent = bus_.send_body(owner, link::Body::RouteUpdate,
                                     link::CreateRouteUpdate(b, puts, removes, ticket, 0, true, 0, principals).Union());
    std::vector<std::string> sent_puts = std::move(batch.puts);
    std::vector<std::uint64_t> sent_serials = std::move(batch.serials);
    batch.puts.clear();
    batch.serials.clear();
    batch.principals.clear();
    batch.removes.clear();
    batch.bytes = 0;
    if (ticket == 0) return;
    if (!sent) {
      for (auto& w : batch.waiters) {
        auto p = w.who.lock();
        if (!p || p->closed()) continue;
        ++counters_.unavailable;
        p->send_error(w.request_id, errc::unavailable,
                      "cannot reach node '" + owner + "', the owner of route key '" + w.key + "': retry");
        p->close_ticket(w.peer_ticket);
      }
      batch.waiters.clear();
      return;
    }
    put_batch waiting;
    waiting.owner = owner;
    waiting.puts = std::move(sent_puts);
    waiting.serials = std::move(sent_serials);
    waiting.waiters = std::move(batch.waiters);
    batch.waiters.clear();
    waiting.deadline = deadline;
    unacked_.emplace(ticket, std::move(waiting));
  }
  arm_timer();
}

void route_relay::send(peer& from, std::uint64_t rid, std::span<const std::string_view> keys,
                       protocol::bytes_view payload) {
  route(&from, rid, keys, payload, nullptr);
}

void route_relay::send_durable(peer* from, std::uint64_t rid, std::uint64_t ticket,
                               std::span<const std::string_view> keys, protocol::bytes_view payload,
                               const log_position& position, clock::time_point deadline) {
  const delivery_part durable{position, deadline, ticket, 0};
  route(from, rid, keys, payload, &durable);
}

void route_relay::send_offer(peer& from, std::span<const std::string_view> keys, protocol::bytes_view payload,
                             const offer_fields& offer, offer_done done) {
  const delivery_part part{log_position{}, offer.deadline,  0, offer.offer_id, offer.counted,
                           offer.cap_max,  offer.cap_window};
  route(&from, 0, keys, payload, &part, &done);
}

bool route_relay::over_cap(std::string_view key, const delivery_part* part, clock::time_point now) const {
  return part && part->cap_max != 0 && exposure_ && exposure_->count(key, part->cap_window, now) >= part->cap_max;
}

void route_relay::count_exposure(std::string_view key, const delivery_part* part, clock::time_point now) {
  if (!part || !part->counted || !exposure_) return;
  const bool was_empty = exposure_->size() == 0;
  if (!exposure_->record(key, now)) {
    if (exposure_untracked_) ++*exposure_untracked_;
  } else if (was_empty && exposure_first_) {
    exposure_first_();
  }
}

std::uint32_t route_relay::deliver_here(std::span<const std::string_view> keys, protocol::bytes_view payload,
                                        const delivery_part* part, std::vector<std::string_view>& gateways) {
  if (!part) return fanout_.send_to_users(keys, payload, nullptr, gateways);
  const log_position* position = part->durable() ? &part->position : nullptr;
  if (part->deadline == clock::time_point{} && part->offer_id == 0)
    return fanout_.send_to_users(keys, payload, position, gateways);
  return fanout_.send_offer(keys, payload, delivery_meta{part->deadline, part->offer_id, false}, clock::now(), gateways,
                            position);
}

void route_relay::route(peer* from, std::uint64_t rid, std::span<const std::string_view> keys,
                        protocol::bytes_view payload, const delivery_part* part, offer_done* done) {
  const delivery_part* durable = part && part->durable() ? part : nullptr;
  // Group the keys (with their places in the Send): delivered here, by
  // home node (this node owns their partition), by owner node; or
  // unavailable.
  auto& homes = *homes_;
  auto& owners = *owners_;
  auto& here = *here_;
  homes.clear();
  owners.clear();
  here.clear();
  std::uint32_t unavailable = 0;
  auto& capped = capped_scratch_;
  capped.clear();
  const bool counted = part && part->counted;
  const auto now = counted ? clock::now() : clock::time_point{};
  for (std::uint32_t i = 0; i < keys.size(); ++i) {
    const auto key = keys[i];
    const auto p = partition_map::partition_of(key);
    const auto* owner = owner_of(p);
    if (!owner) {
      ++unavailable;
      continue;
    }
    if (owner->node_id != bus_.node_id()) {
      owners[owner->node_id].add(key, i);
      continue;
    }
    if (!ready(p)) {
      ++unavailable;
      continue;
    }
    if (counted && over_cap(key, part, now)) {
      capped.push_back(i);
      continue;
    }
    const auto home = directory_.find(key, p);
    if (home == 0) continue;  // no route
    if (counted) count_exposure(key, part, now);
    if (home == incarnation_)
      here.add(key, i);
    else if (const auto& id = node_id_of(home); !id.empty())
      homes[id].add(key, i);
  }
  std::uint32_t routed = 0;
  auto& gateways = gateway_scratch_;
  gateways.clear();
  if (!here.keys.empty()) routed = deliver_here(here.keys, payload, part, gateways);
  // A durable send past the limit: the keys other nodes would have to
  // deliver count as not routed (its record is durable; a durable inbox
  // finds it by reading).
  const bool full = sends_.size() >= max_pending_sends;
  if ((durable || done) && full) {
    // An offer past it: those keys count unavailable.
    for (const auto& [node, g] : owners.in_use()) unavailable += static_cast<std::uint32_t>(g.keys.size());
    for (const auto& [node, g] : homes.in_use()) unavailable += static_cast<std::uint32_t>(g.keys.size());
    owners.clear();
    homes.clear();
  }
  if (homes.empty() && owners.empty()) {
    if (done) {
      // An offer decided here: its handler answers.
      offer_gateways_.assign(keys.size(), std::string());
      for (std::size_t j = 0; j < here.indices.size() && j < gateways.size(); ++j)
        offer_gateways_[here.indices[j]] = gateways[j];
      offer_capped_.assign(keys.size(), 0);
      for (const auto i : capped) offer_capped_[i] = 1;
      (*done)(offer_outcome{
          offer_gateways_, offer_capped_, routed, unavailable, static_cast<std::uint32_t>(capped.size()), false, {}});
      return;
    }
    // Everything decided here: answered as on one node (a gateway per key,
    // in order).
    if (durable) {
      if (from && rid != 0) {
        answer_scratch_.assign(keys.size(), std::string_view());
        for (std::size_t j = 0; j < here.indices.size() && j < gateways.size(); ++j)
          answer_scratch_[here.indices[j]] = gateways[j];
        from->send(answers_.send_result(rid, answer_scratch_, routed, durable->position.seq, durable->position.epoch));
      }
      if (from) from->close_ticket(durable->ticket);
      return;
    }
    if (keys.size() == 1 && routed == 0) {
      if (unavailable != 0) {
        ++counters_.unavailable;
        return from->send_error(rid, errc::unavailable,
                                unavailable_for(keys[0]).value_or("route key's partition is not in reach now"));
      }
      return from->send_error(rid, errc::no_route, "no route for " + std::string(keys[0]));
    }
    if (rid != 0) {
      answer_scratch_.assign(keys.size(), std::string_view());
      for (std::size_t j = 0; j < here.indices.size() && j < gateways.size(); ++j)
        answer_scratch_[here.indices[j]] = gateways[j];
      from->send(answers_.send_result(rid, answer_scratch_, routed));
    }
    return;
  }
  if (full) {
    ++counters_.unavailable;
    return from->send_error(
        rid, errc::unavailable,
        fmt::format("this node has {} sends waiting for other nodes (its limit): retry", max_pending_sends));
  }
  const auto ticket = ++next_ticket_;
  pending_send s;
  if (from) {
    // A durable send keeps its append's ticket (opened before any Ping
    // that must wait for this answer).
    s.who = from->weak_peer();
    s.peer_ticket = durable ? durable->ticket : from->open_ticket();
  }
  s.request_id = rid;
  if (keys.size() == 1) s.single_key = keys[0];
  s.keys = keys.size();
  s.routed = routed;
  s.unavailable = unavailable;
  s.gateways.assign(keys.size(), std::string());
  for (std::size_t j = 0; j < here.indices.size() && j < gateways.size(); ++j)
    s.gateways[here.indices[j]] = gateways[j];
  // A durable send's answer must reach a forwarding origin within its own
  // timeout: the timer's granularity (forward_timeout / 4) added, it is
  // answered within half of it.
  s.deadline = clock::now() + (durable ? options_.forward_timeout / 4 : options_.forward_timeout);
  if (durable) {
    s.durable = true;
    s.seq = durable->position.seq;
    s.epoch = durable->position.epoch;
  }
  if (done) {
    s.done = std::move(*done);
    s.capped.assign(keys.size(), 0);
    for (const auto i : capped) s.capped[i] = 1;
    s.capped_keys = static_cast<std::uint32_t>(capped.size());
  }
  const auto origin = bus_.node_id();
  for (const auto& [node, g] : owners.in_use()) {
    if (forward(node, origin, ticket, g.keys, g.indices, payload, false, part)) {
      ++s.owners_waited;
      s.asked.emplace_back(node);
    } else {
      s.unavailable += static_cast<std::uint32_t>(g.keys.size());
    }
  }
  for (const auto& [node, g] : homes.in_use()) {
    if (forward(node, origin, ticket, g.keys, g.indices, payload, true, part)) {
      ++s.homes_expected;
      s.asked.emplace_back(node);
    } else {
      s.unavailable += static_cast<std::uint32_t>(g.keys.size());
    }
  }
  sends_.emplace(ticket, std::move(s));
  finish(ticket);  // every forward failed: answered now
  arm_timer();
}

bool route_relay::forward(std::string_view node, std::string_view origin, std::uint64_t ticket,
                          std::span<const std::string_view> keys, std::span<const std::uint32_t> indices,
                          protocol::bytes_view payload, bool to_home, const delivery_part* part) {
  std::size_t size = payload.size() + origin.size() + 64;
  for (const auto key : keys) size += key.size() + 16;
  if (part) size += part->position.stream.size() + 40;
  auto* box = outboxes_.get(node, size);
  if (!box) return false;
  auto& b = box->b;
  const auto o = b.CreateString(origin.data(), origin.size());
  const auto k = b.CreateVectorOfStrings(keys.begin(), keys.end());
  const auto bytes = b.CreateVector(payload.data(), payload.size());
  const auto idx = b.CreateVector(indices.data(), indices.size());
  flatbuffers::Offset<flatbuffers::String> stream;
  std::uint64_t seq = 0, epoch = 0;
  bool expiring = false;
  std::uint32_t expires_in_ms = 0;
  std::uint64_t offer_id = 0;
  bool counted = false;
  std::uint32_t cap_max = 0, cap_window_ms = 0;
  if (part) {
    if (part->durable()) {
      stream = b.CreateString(part->position.stream.data(), part->position.stream.size());
      seq = part->position.seq;
      epoch = part->position.epoch;
    }
    if (part->deadline != clock::time_point{}) {
      // The time left, rounded down: the receiver never writes it later
      // than this node would have.
      expiring = true;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(part->deadline - clock::now());
      expires_in_ms = static_cast<std::uint32_t>(std::clamp<std::int64_t>(left.count(), 0, UINT32_MAX));
    }
    offer_id = part->offer_id;
    counted = part->counted && !to_home;  // the owner counts; a home only delivers
    cap_max = part->cap_max;
    cap_window_ms = static_cast<std::uint32_t>(part->cap_window.count());
  }
  box->requests.push_back(link::CreateSendForward(b, o, incarnation_, ticket, k, bytes, to_home, idx, stream, seq,
                                                  epoch, expiring, expires_in_ms, offer_id, counted, cap_max,
                                                  cap_window_ms));
  if (origin == bus_.node_id()) box->own.push_back({ticket, static_cast<std::uint32_t>(keys.size()), to_home});
  ++counters_.sends_forwarded;
  return true;
}

void route_relay::send_outcome(std::string_view to, std::uint64_t ticket, std::uint32_t routed,
                               std::span<const std::string_view> gateways, std::span<const std::uint32_t> indices,
                               std::uint32_t forwarded, std::uint32_t unavailable, bool from_owner,
                               std::span<const std::uint32_t> capped) {
  std::size_t size = 64 + indices.size() * 4 + capped.size() * 4;
  for (const auto g : gateways) size += g.size() + 16;
  auto* box = outboxes_.get(to, size);
  if (!box) return;
  auto& b = box->b;
  const auto g = b.CreateVectorOfStrings(gateways.begin(), gateways.end());
  const auto idx = b.CreateVector(indices.data(), indices.size());
  const auto cap = capped.empty() ? flatbuffers::Offset<flatbuffers::Vector<std::uint32_t>>()
                                  : b.CreateVector(capped.data(), capped.size());
  box->answers.push_back(link::CreateSendOutcome(b, ticket, routed, g, forwarded, unavailable, from_owner, idx, cap));
}

void route_relay::on_message(remote_node& from, const link::LinkMessage& m) {
  switch (m.body_type()) {
    case link::Body::RouteUpdate:
      if (const auto* u = m.body_as_RouteUpdate()) on_route_update(from, *u);
      break;
    case link::Body::RouteAck:
      if (const auto* a = m.body_as_RouteAck()) on_route_ack(from, *a);
      break;
    case link::Body::RouteRebuild:
      if (const auto* r = m.body_as_RouteRebuild()) on_rebuild(from, *r);
      break;
    case link::Body::Sends:
      if (const auto* s = m.body_as_Sends()) on_sends(from, *s);
      break;
    case link::Body::SendForward:  // on its own: an earlier version
      if (const auto* f = m.body_as_SendForward()) on_forward(from, *f);
      break;
    case link::Body::SendOutcome:
      if (const auto* o = m.body_as_SendOutcome()) on_outcome(*o);
      break;
    default:
      break;
  }
}

void route_relay::on_route_update(remote_node& from, const link::RouteUpdate& u) {
  const auto home = from.member().incarnation;
  const bool live = u.ticket() != 0;  // a put waiting for its answer (else a rebuild's answer or a removal)
  std::vector<std::string> refused, forbidden;
  std::vector<std::int64_t> confirmed;  // live: per put, the revision it was confirmed at (0: not)
  const auto* principals = u.principals();
  const auto* revisions = u.revisions();
  const auto* versions = u.versions();
  // One count for the puts of this update: (revision, version) orders them
  // after every put confirmed before, by this owner or an earlier one.
  const std::uint64_t version = live ? ++confirmations_ : 0;
  if (const auto* puts = u.put())
    for (std::uint32_t i = 0; i < puts->size(); ++i) {
      if (live) confirmed.push_back(0);
      const auto key = puts->Get(i)->string_view();
      if (key.empty() || key.size() > max_key_bytes) continue;
      const std::string_view principal =
          principals && i < principals->size() ? principals->Get(i)->string_view() : std::string_view();
      const auto p = partition_map::partition_of(key);
      // A live put is confirmed only by an owner in standing; what the
      // homes tell a rebuild is taken whenever the partition is held (it
      // serves only once in standing again: ready()).
      if (held_[p] == 0 || (live && !in_standing_())) {
        if (live) refused.emplace_back(key);
      } else if (live && taken_elsewhere(key, p, home, principal)) {
        forbidden.emplace_back(key);
      } else if (live) {
        directory_.put(key, p, home, principal, {held_[p], version});
        confirmed.back() = held_[p];
      } else {
        // A rebuild's answer: of two homes holding the key, the later
        // confirmed put stands, whichever answer comes first.
        const route_stamp stamp{revisions && i < revisions->size() ? revisions->Get(i) : 0,
                                versions && i < versions->size() ? versions->Get(i) : 0};
        directory_.put_if_newer(key, p, home, principal, stamp);
      }
    }
  if (const auto* removes = u.removed())
    for (const auto* s : *removes) {
      const auto key = s->string_view();
      const auto p = partition_map::partition_of(key);
      if (held_[p] != 0) directory_.remove(key, p, home);
    }
  if (live) {
    auto& b = bus_.link_builder();
    b.Clear();
    const auto r = b.CreateVectorOfStrings(refused.begin(), refused.end());
    const auto fb = b.CreateVectorOfStrings(forbidden.begin(), forbidden.end());
    const auto revs = b.CreateVector(confirmed);
    bus_.send_body(from.member().node_id, link::Body::RouteAck,
                   link::CreateRouteAck(b, u.ticket(), r, fb, revs, version).Union());
  }
  if (u.rebuild() != 0) rebuild_part(from.member().node_id, u.rebuild(), u.part(), u.last());
}

void route_relay::rebuild_part(const std::string& member, std::uint64_t ticket, std::uint32_t part, bool last) {
  const auto it = rebuilds_.find(ticket);
  if (it == rebuilds_.end()) return;
  auto& r = it->second;
  const auto w = std::find_if(r.waiting.begin(), r.waiting.end(), [&](const auto& x) { return x.node_id == member; });
  if (w == r.waiting.end()) return;
  // Parts come in order on the link; one missing (lost in transit) spoils
  // this answer: the member is asked again once its last part is in.
  if (!w->broken && part != w->next_part) w->broken = true;
  ++w->next_part;
  w->heard = clock::now();
  if (!last) return;
  if (w->broken) {
    logger_->info("cluster: parts of node '{}''s routes were lost in transit; asking again", member);
    w->next_part = 0;
    w->broken = false;
    ask_rebuild(member, ticket, r.partitions);
    return;
  }
  r.waiting.erase(w);
  if (!r.waiting.empty()) return;
  std::size_t done = 0;
  for (const auto p : r.partitions)
    if (rebuilding_[p] == ticket) {
      rebuilding_[p] = 0;
      ++done;
    }
  if (r.blocking)
    logger_->info("cluster: route directory of {} partition(s) rebuilt ({} entries held)", done, directory_.size());
  rebuilds_.erase(it);
}

void route_relay::ask_rebuild(const std::string& member, std::uint64_t ticket,
                              const std::vector<std::uint32_t>& partitions) {
  auto& b = bus_.link_builder();
  b.Clear();
  bus_.send_body(member, link::Body::RouteRebuild,
                 link::CreateRouteRebuild(b, b.CreateVector(partitions), ticket).Union());
}

void route_relay::on_route_ack(remote_node& from, const link::RouteAck& a) {
  const auto it = unacked_.find(a.ticket());
  if (it == unacked_.end() || it->second.owner != from.member().node_id) return;
  // When each put was confirmed, for this node's answers to later
  // rebuilds (a later stamp only: acks from two owners may cross).
  if (const auto* revisions = a.revisions()) {
    const auto& sent = it->second;
    const auto sent_at = sent.deadline - options_.forward_timeout;
    std::map<std::string, std::vector<std::string_view>, std::less<>> late;  // per asker: keys it may hold older
    for (std::size_t i = 0; i < std::min<std::size_t>(revisions->size(), sent.puts.size()); ++i) {
      const route_stamp stamp{revisions->Get(static_cast<flatbuffers::uoffset_t>(i)), a.version()};
      if (stamp.revision == 0) continue;
      const auto own = home_routes_.find(sent.puts[i]);
      // Removed since, or removed and put again: that later put waits for
      // an ack of its own.
      if (own == home_routes_.end() || i >= sent.serials.size() || own->second.serial != sent.serials[i]) continue;
      if (!(own->second.stamp < stamp)) continue;
      own->second.stamp = stamp;
      // The partition changed hands while the ack was on its way: the new
      // owner took this node's routes with the older stamp (this node, in
      // its own directory; another node, from this node's answer).
      const auto p = partition_map::partition_of(own->first);
      if (held_[p] != 0)
        directory_.put_if_newer(own->first, p, incarnation_, own->second.principal, stamp);
      else if (const auto& by = asked_by_[p];
               !by.node_id.empty() && by.node_id != from.member().node_id && sent_at < by.at)
        late[by.node_id].push_back(own->first);
    }
    for (const auto& [asker, keys] : late) send_routes(asker, keys, 0, true, 0);
  }
  std::vector<std::string_view> refused, forbidden;
  if (const auto* r = a.refused())
    for (const auto* s : *r) refused.push_back(s->string_view());
  if (const auto* f = a.forbidden())
    for (const auto* s : *f) forbidden.push_back(s->string_view());
  for (auto& w : it->second.waiters) {
    if (std::find(forbidden.begin(), forbidden.end(), w.key) != forbidden.end()) {
      // Another principal's route on another node: the local put is undone.
      routing_.erase(w.key);
      if (auto p = w.who.lock(); p && !p->closed()) {
        p->send_forbidden(w.request_id, "RegistryPut", "registry key '" + w.key + "'",
                          "it belongs to another principal (on another node)");
        p->close_ticket(w.peer_ticket);
      }
      continue;
    }
    auto p = w.who.lock();
    if (!p || p->closed()) continue;
    if (std::find(refused.begin(), refused.end(), w.key) != refused.end()) {
      ++counters_.unavailable;
      p->send_error(w.request_id, errc::unavailable,
                    "route key '" + w.key + "': its partition is moving between nodes; retry");
    } else {
      ++counters_.puts_confirmed;
      p->send(protocol::bytes_view(w.answer.data(), w.answer.size()));
    }
    p->close_ticket(w.peer_ticket);
  }
  unacked_.erase(it);
}

void route_relay::on_rebuild(remote_node& from, const link::RouteRebuild& r) {
  std::vector<bool> wanted(partition_map::partition_count, false);
  if (const auto* ps = r.partitions())
    for (const auto p : *ps)
      if (p < partition_map::partition_count) {
        wanted[p] = true;
        asked_by_[p] = {from.member().node_id, clock::now()};
      }
  answer_rebuild(from.member(), wanted, r.ticket());
}

void route_relay::answer_rebuild(const cluster_member& to, const std::vector<bool>& partitions,
                                 std::uint64_t rebuild_ticket) {
  const auto same = [&](const key_answer& a) {
    return a.to == to.node_id && a.incarnation == to.incarnation && a.ticket == rebuild_ticket;
  };
  // Asked again before a part of it went out (it waited behind others):
  // it stays as it is.
  if (std::any_of(key_answers_.begin(), key_answers_.end(),
                  [&](const key_answer& a) { return same(a) && a.part == 0; }))
    return;
  // Asked again after parts went (one went missing, or the link was
  // silent too long): start over.
  std::erase_if(key_answers_, same);
  key_answer a;
  a.to = to.node_id;
  a.incarnation = to.incarnation;
  a.ticket = rebuild_ticket;
  routing_.for_each_live_key([&](std::string_view key) {
    if (partitions[partition_map::partition_of(key)]) a.keys.emplace_back(key);
  });
  key_answers_.push_back(std::move(a));
  pump_answers();
}

void route_relay::pump_answers() {
  if (stopped_) return;
  // At least one part may always wait in the link.
  const std::size_t limit = std::max(bus_.options().nats_queue_bytes / 4, options_.part_bytes);
  std::size_t sent = 0;
  bool wait = false;
  std::vector<std::string_view> part;
  while (!key_answers_.empty() && sent < answer_turn_bytes) {
    // Reconnecting, NATS takes publishes into its own reconnect buffer at
    // once: pending_bytes would not hold the answer back.
    if (!bus_.nats_connected() || bus_.link_pending_bytes() + options_.part_bytes > limit) {
      wait = true;
      break;
    }
    // One part of each answer in turn: none waits silent behind another.
    key_answer a = std::move(key_answers_.front());
    key_answers_.pop_front();
    const auto* view = bus_.view();
    const auto* member = view ? view->find(a.to) : nullptr;
    if (!member || member->incarnation != a.incarnation) continue;  // the asker left or restarted
    std::size_t bytes = 0;
    part.clear();
    while (a.next < a.keys.size() && bytes < options_.part_bytes) {
      const std::string& key = a.keys[a.next++];
      if (!routing_.entry_lease(key)) continue;  // gone since: its removal went to the owner already
      part.emplace_back(key);
      const auto* own = home_route(key);
      bytes += key.size() + (own ? own->principal.size() : 0) + 32;
    }
    const bool last = a.next == a.keys.size();
    const bool ok = send_routes(a.to, part, a.ticket, last, a.part++);
    sent += bytes + 64;
    // Not sent (NATS refused it): the asker finds the answer broken or
    // silent and asks again.
    if (ok && !last) key_answers_.push_back(std::move(a));
  }
  if (key_answers_.empty() || pump_posted_) return;
  pump_posted_ = true;
  const auto go_on = [this, alive = alive_](const asio_error_code& ec = {}) {
    if (!*alive) return;
    pump_posted_ = false;
    if (!ec) pump_answers();
  };
  if (wait) {
    pump_timer_.expires_after(std::chrono::milliseconds(1));
    pump_timer_.async_wait(go_on);
  } else {
    asio::post(io_, [go_on] { go_on(); });
  }
}

bool route_relay::send_routes(const std::string& to, std::span<const std::string_view> keys, std::uint64_t rebuild,
                              bool last, std::uint32_t part) {
  std::vector<std::string_view> principals;
  std::vector<std::int64_t> revisions;
  std::vector<std::uint64_t> versions;
  for (const auto key : keys) {
    const auto* own = home_route(key);
    principals.emplace_back(own ? std::string_view(own->principal) : std::string_view());
    revisions.push_back(own ? own->stamp.revision : 0);
    versions.push_back(own ? own->stamp.version : 0);
  }
  auto& b = bus_.link_builder();
  b.Clear();
  const auto puts = b.CreateVectorOfStrings(keys.begin(), keys.end());
  const auto by = b.CreateVectorOfStrings(principals.begin(), principals.end());
  const auto revs = b.CreateVector(revisions);
  const auto vers = b.CreateVector(versions);
  return bus_.send_body(to, link::Body::RouteUpdate,
                        link::CreateRouteUpdate(b, puts, 0, 0, rebuild, last, part, by, revs, vers).Union());
}

void route_relay::on_sends(remote_node& from, const link::Sends& s) {
  if (const auto* forwards = s.forwards())
    for (const auto* f : *forwards) on_forward(from, *f);
  if (const auto* outcomes = s.outcomes())
    for (const auto* o : *outcomes) on_outcome(*o);
}

void route_relay::on_forward(remote_node&, const link::SendForward& f) {
  if (!f.origin() || !f.keys()) return;
  const auto origin = f.origin()->string_view();
  const auto* p = f.payload();
  const protocol::bytes_view payload = p ? protocol::bytes_view{p->data(), p->size()} : protocol::bytes_view{};
  const auto* idx = f.indices();
  if (!idx || idx->size() != f.keys()->size()) return;  // not as this version sends it
  // A durable send's or an offer's part, rebuilt from the forward (its
  // deadline from the time it had left when sent).
  delivery_part part_here;
  const delivery_part* part = nullptr;
  if (f.stream() && f.stream()->size() > 0)
    part_here.position = log_position{f.stream()->string_view(), f.seq(), f.epoch()};
  if (f.expiring()) part_here.deadline = clock::now() + std::chrono::milliseconds(f.expires_in_ms());
  part_here.offer_id = f.offer_id();
  part_here.counted = f.counted() && !f.to_home();
  part_here.cap_max = f.cap_max();
  part_here.cap_window = std::chrono::milliseconds(f.cap_window_ms());
  if (part_here.durable() || f.expiring() || part_here.offer_id != 0 || part_here.counted) part = &part_here;
  auto& all = *all_;
  all.clear();
  for (std::uint32_t i = 0; i < f.keys()->size(); ++i) {
    const auto* s = f.keys()->Get(i);
    if (s->size() > 0 && s->size() <= max_key_bytes) all.add(s->string_view(), idx->Get(i));
  }
  if (f.to_home()) return deliver_home(origin, f.ticket(), all.keys, all.indices, payload, part);
  // As the keys' owner: look them up, deliver what lives here, pass the
  // rest on to their homes (a home that is the origin itself delivers on
  // its SendForward too).
  auto& homes = *homes_;
  auto& here = *here_;
  homes.clear();
  here.clear();
  std::uint32_t unavailable = 0;
  auto& capped = capped_scratch_;
  capped.clear();
  const bool counted = part && part->counted;
  const auto now = counted ? clock::now() : clock::time_point{};
  for (std::size_t i = 0; i < all.keys.size(); ++i) {
    const auto key = all.keys[i];
    const auto partition = partition_map::partition_of(key);
    if (!ready(partition)) {
      ++unavailable;
      continue;
    }
    if (counted && over_cap(key, part, now)) {
      capped.push_back(all.indices[i]);
      continue;
    }
    const auto home = directory_.find(key, partition);
    if (home == 0) continue;
    if (counted) count_exposure(key, part, now);
    if (home == incarnation_)
      here.add(key, all.indices[i]);
    else if (const auto& id = node_id_of(home); !id.empty())
      homes[id].add(key, all.indices[i]);
  }
  std::uint32_t forwarded = 0;
  for (const auto& [node, g] : homes.in_use()) {
    if (forward(node, origin, f.ticket(), g.keys, g.indices, payload, true, part))
      ++forwarded;
    else
      unavailable += static_cast<std::uint32_t>(g.keys.size());
  }
  std::uint32_t routed = 0;
  auto& gateways = gateway_scratch_;
  gateways.clear();
  if (!here.keys.empty()) routed = deliver_here(here.keys, payload, part, gateways);
  send_outcome(origin, f.ticket(), routed, gateways, here.indices, forwarded, unavailable, true, capped);
}

void route_relay::deliver_home(std::string_view origin, std::uint64_t ticket, std::span<const std::string_view> keys,
                               std::span<const std::uint32_t> indices, protocol::bytes_view payload,
                               const delivery_part* part) {
  auto& gateways = gateway_scratch_;
  gateways.clear();
  const auto routed = keys.empty() ? 0 : deliver_here(keys, payload, part, gateways);
  if (origin == bus_.node_id())
    apply_outcome(ticket, routed, gateways, indices, 0, 0, false);
  else
    send_outcome(origin, ticket, routed, gateways, indices, 0, 0, false);
}

void route_relay::on_outcome(const link::SendOutcome& o) {
  auto& gateways = answer_scratch_;
  auto& indices = index_scratch_;
  gateways.clear();
  indices.clear();
  if (const auto* g = o.gateways())
    for (const auto* s : *g) gateways.push_back(s->string_view());
  if (const auto* i = o.indices()) indices.assign(i->begin(), i->end());
  auto& capped = capped_scratch_;
  capped.clear();
  if (const auto* c = o.capped()) capped.assign(c->begin(), c->end());
  apply_outcome(o.ticket(), o.routed(), gateways, indices, o.forwarded(), o.unavailable(), o.from_owner(), capped);
}

void route_relay::apply_outcome(std::uint64_t ticket, std::uint32_t routed, std::span<const std::string_view> gateways,
                                std::span<const std::uint32_t> indices, std::uint32_t forwarded,
                                std::uint32_t unavailable, bool from_owner, std::span<const std::uint32_t> capped) {
  const auto it = sends_.find(ticket);
  if (it == sends_.end()) return;  // answered already (timed out)
  auto& s = it->second;
  for (const auto i : capped)
    if (i < s.capped.size() && s.capped[i] == 0) {
      s.capped[i] = 1;
      ++s.capped_keys;
    }
  s.routed += routed;
  s.unavailable += unavailable;
  for (std::size_t j = 0; j < gateways.size() && j < indices.size(); ++j)
    if (indices[j] < s.gateways.size() && !gateways[j].empty()) s.gateways[indices[j]] = gateways[j];
  if (from_owner) {
    if (s.owners_waited > 0) --s.owners_waited;
    s.homes_expected += forwarded;
  } else {
    ++s.homes_answered;
  }
  finish(ticket);
}

void route_relay::finish(std::uint64_t ticket) {
  const auto it = sends_.find(ticket);
  if (it == sends_.end()) return;
  auto& s = it->second;
  if (s.owners_waited > 0 || s.homes_answered < s.homes_expected) return;
  answer(s);
  sends_.erase(it);
}

void route_relay::answer(pending_send& s) {
  if (s.done) {
    // An offer: its handler answers (and keeps the offer even when the
    // sender has gone: receipts may go to an inbox).
    s.done(offer_outcome{s.gateways, s.capped, s.routed, s.unavailable, s.capped_keys, false, {}});
    if (auto p = s.who.lock()) p->close_ticket(s.peer_ticket);
    return;
  }
  auto p = s.who.lock();
  if (!p) return;
  if (p->closed()) {
    p->close_ticket(s.peer_ticket);
    return;
  }
  if (s.durable) {
    // Its record is durable: the answer says where, and which keys were
    // routed (so far).
    if (s.request_id != 0) {
      std::vector<std::string_view> views(s.gateways.begin(), s.gateways.end());
      p->send(answers_.send_result(s.request_id, views, s.routed, s.seq, s.epoch));
    }
  } else if (s.keys == 1 && s.routed == 0) {
    if (s.unavailable != 0) {
      ++counters_.unavailable;
      p->send_error(s.request_id, errc::unavailable,
                    "route key '" + s.single_key + "': its partition's owner is not in reach now; retry");
    } else {
      p->send_error(s.request_id, errc::no_route, "no route for " + s.single_key);
    }
  } else if (s.request_id != 0) {
    std::vector<std::string_view> views(s.gateways.begin(), s.gateways.end());
    p->send(answers_.send_result(s.request_id, views, s.routed));
  }
  p->close_ticket(s.peer_ticket);
}

void route_relay::arm_timer() {
  if (timer_armed_ || stopped_ || (sends_.empty() && unacked_.empty() && rebuilds_.empty())) return;
  timer_armed_ = true;
  timer_.expires_after(std::max(options_.forward_timeout / 4, std::chrono::milliseconds(25)));
  timer_.async_wait([this, alive = alive_](const asio_error_code& ec) {
    if (!*alive) return;
    timer_armed_ = false;
    if (ec || stopped_) return;
    on_timer();
    arm_timer();
  });
}

void route_relay::on_timer() {
  const auto now = clock::now();
  for (auto it = sends_.begin(); it != sends_.end();) {
    auto& s = it->second;
    if (now < s.deadline) {
      ++it;
      continue;
    }
    if (s.durable) {
      // Durable either way: answered with the keys routed so far.
      answer(s);
      it = sends_.erase(it);
      continue;
    }
    if (s.done) {
      std::string nodes;
      for (const auto& n : s.asked) nodes += (nodes.empty() ? "'" : ", '") + n + "'";
      ++counters_.sends_unknown;
      s.done(offer_outcome{s.gateways, s.capped, s.routed, s.unavailable, s.capped_keys, true, nodes});
      if (auto p = s.who.lock()) p->close_ticket(s.peer_ticket);
      it = sends_.erase(it);
      continue;
    }
    if (auto p = s.who.lock(); p && !p->closed()) {
      ++counters_.sends_unknown;
      std::string nodes;
      for (const auto& n : s.asked) nodes += (nodes.empty() ? "'" : ", '") + n + "'";
      p->send_error(s.request_id, errc::outcome_unknown,
                    fmt::format("no answer from node {} within {} ms: the message may or may not have been delivered",
                                nodes, options_.forward_timeout.count()));
      p->close_ticket(s.peer_ticket);
    }
    it = sends_.erase(it);
  }
  for (auto it = unacked_.begin(); it != unacked_.end();) {
    if (now < it->second.deadline) {
      ++it;
      continue;
    }
    for (auto& w : it->second.waiters) {
      auto p = w.who.lock();
      if (!p || p->closed()) continue;
      ++counters_.unavailable;
      p->send_error(w.request_id, errc::unavailable,
                    fmt::format("node '{}', the owner of route key '{}', did not confirm it within {} ms: sends from "
                                "other nodes may not find it until it is put again",
                                it->second.owner, w.key, options_.forward_timeout.count()));
      p->close_ticket(w.peer_ticket);
    }
    it = unacked_.erase(it);
  }
  // Rebuilds whose partitions are all gone (given back meanwhile) end; a
  // member silent on one is asked again.
  for (auto it = rebuilds_.begin(); it != rebuilds_.end();) {
    auto& r = it->second;
    const bool still = std::any_of(r.partitions.begin(), r.partitions.end(), [&](std::uint32_t p) {
      return held_[p] != 0 && (!r.blocking || rebuilding_[p] == it->first);
    });
    if (!still) {
      it = rebuilds_.erase(it);
      continue;
    }
    for (auto& w : r.waiting) {
      if (now - w.heard < options_.forward_timeout) continue;
      logger_->info("cluster: node '{}' has not answered the route rebuild; asking again", w.node_id);
      w.next_part = 0;
      w.broken = false;
      w.heard = now;
      ask_rebuild(w.node_id, it->first, r.partitions);
    }
    ++it;
  }
}

route_relay_counters route_relay::counters() const {
  auto c = counters_;
  c.directory_entries = directory_.size();
  for (std::uint32_t p = 0; p < partition_map::partition_count; ++p) c.partitions_unowned += owner_of(p) == nullptr;
  c.partitions_held =
      static_cast<std::size_t>(std::count_if(held_.begin(), held_.end(), [](std::int64_t r) { return r != 0; }));
  c.partitions_rebuilding = static_cast<std::size_t>(
      std::count_if(rebuilding_.begin(), rebuilding_.end(), [](std::uint64_t t) { return t != 0; }));
  c.pending = sends_.size() + unacked_.size();
  for (const auto& [owner, b] : outgoing_) c.pending += b.waiters.size() != 0;
  return c;
}

}  // namespace switchyard::broker
