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

flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>> strings(
    flatbuffers::FlatBufferBuilder& b, std::span<const std::string_view> all) {
  std::vector<flatbuffers::Offset<flatbuffers::String>> offsets;
  offsets.reserve(all.size());
  for (const auto s : all) offsets.push_back(b.CreateString(s.data(), s.size()));
  return b.CreateVector(offsets);
}

flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>> strings(
    flatbuffers::FlatBufferBuilder& b, const std::vector<std::string>& all) {
  std::vector<flatbuffers::Offset<flatbuffers::String>> offsets;
  offsets.reserve(all.size());
  for (const auto& s : all) offsets.push_back(b.CreateString(s));
  return b.CreateVector(offsets);
}
}  // namespace

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
  std::vector<std::string> gateways;
  std::vector<std::string> asked;  // the nodes asked (an outcome_unknown names them)
  clock::time_point deadline;
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
  std::vector<std::string> puts;
  std::vector<std::string> removes;
  std::vector<waiter> waiters;
  std::size_t bytes = 0;  // of puts and removes, about
  clock::time_point deadline;
};

// A partition set being rebuilt: the members that have not answered yet.
struct route_relay::rebuild {
  std::vector<std::uint32_t> partitions;
  std::vector<std::string> waiting;
  clock::time_point sent_at;
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
      timer_(io) {
  bus_.on_route_message([this](remote_node& from, const link::LinkMessage& m) { on_message(from, m); });
  routing_.on_entry_removed([this](std::string_view key) { removed(key); });
}

route_relay::~route_relay() {
  *alive_ = false;
  stopped_ = true;
  timer_.cancel();
  bus_.on_route_message(nullptr);
  routing_.on_entry_removed(nullptr);
}

const cluster_member* route_relay::owner_of(std::uint32_t partition) const {
  const auto* view = bus_.view();
  if (!view || partition >= view->owners.size()) return nullptr;
  const auto& o = view->owners[partition];
  if (o.node_id.empty()) return nullptr;
  const auto* m = view->find(o.node_id);
  return m && m->incarnation == o.incarnation ? m : nullptr;
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
    if (now != 0) gained.push_back(p);
  }
  if (members_changed) {
    // The entries of homes no longer in the view (gone, or a new
    // incarnation that writes its entries afresh).
    directory_.drop_homes([this](std::int64_t home) { return !node_id_of(home).empty(); });
    // A rebuild no longer waits for a member that left.
    for (auto it = rebuilds_.begin(); it != rebuilds_.end();) {
      std::erase_if(it->second.waiting, [&](const std::string& id) { return view->find(id) == nullptr; });
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
  if (!gained.empty()) start_rebuild(std::move(gained));
  if (restarted) {
    // A new incarnation: the owners dropped what the old one wrote.
    logger_->info("cluster: writing this node's routes to their owners again (new incarnation)");
    std::vector<bool> all;  // empty: every partition
    for (const auto& m : members_)
      if (m.node_id != bus_.node_id()) send_keys(m.node_id, &all, 0);
  }
  arm_timer();
}

void route_relay::start_rebuild(std::vector<std::uint32_t> partitions) {
  const auto ticket = ++next_ticket_;
  counters_.rebuilds += partitions.size();
  // This node's own keys in them: at once.
  routing_.for_each_live_key([&](std::string_view key) {
    const auto p = partition_map::partition_of(key);
    if (held_[p] != 0 && std::binary_search(partitions.begin(), partitions.end(), p))
      directory_.put(key, p, incarnation_);
  });
  rebuild r;
  r.partitions = partitions;
  for (const auto& m : members_)
    if (m.node_id != bus_.node_id()) r.waiting.push_back(m.node_id);
  if (r.waiting.empty()) return;  // alone: complete
  for (const auto p : partitions) rebuilding_[p] = ticket;
  r.sent_at = clock::now();
  logger_->info("cluster: rebuilding the route directory of {} partition(s) from {} node(s)", partitions.size(),
                r.waiting.size());
  for (const auto& id : r.waiting) {
    auto& b = bus_.link_builder();
    b.Clear();
    bus_.send_body(id, link::Body::RouteRebuild,
                   link::CreateRouteRebuild(b, b.CreateVector(partitions), ticket).Union());
  }
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

bool route_relay::refuse_put(peer& from, std::uint64_t rid, std::string_view key) {
  auto why = unavailable_for(key);
  if (!why) return false;
  ++counters_.unavailable;
  from.send_error(rid, errc::unavailable, *why);
  return true;
}

void route_relay::confirm_put(peer& from, std::uint64_t rid, std::string_view key, protocol::bytes_view answer) {
  const auto p = partition_map::partition_of(key);
  const auto* owner = owner_of(p);
  if (owner && owner->node_id == bus_.node_id() && ready(p)) {
    directory_.put(key, p, incarnation_);
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
  batch.waiters.push_back({from.weak_peer(), rid, from.open_ticket(), std::string(key),
                           std::vector<std::uint8_t>(answer.begin(), answer.end())});
  batch.bytes += key.size() + 8;
  if (batch.bytes >= options_.part_bytes) return flush_owner(owner->node_id, batch);
  schedule_flush();
}

void route_relay::removed(std::string_view key) {
  const auto p = partition_map::partition_of(key);
  const auto* owner = owner_of(p);
  if (!owner) return;  // whoever gets the partition rebuilds it from the home tables
  if (owner->node_id == bus_.node_id()) {
    if (held_[p] != 0) directory_.remove(key, p, incarnation_);
    return;
  }
  auto& batch = outgoing_[owner->node_id];
  batch.owner = owner->node_id;
  std::erase(batch.puts, key);
  batch.removes.emplace_back(key);
  batch.bytes += key.size() + 8;
  if (batch.bytes >= options_.part_bytes) return flush_owner(owner->node_id, batch);
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
  arm_timer();
}

void route_relay::flush_owner(const std::string& owner, put_batch& batch) {
  if (batch.puts.empty() && batch.removes.empty() && batch.waiters.empty()) return;
  const auto deadline = clock::now() + options_.forward_timeout;
  {
    const auto ticket = batch.waiters.empty() ? 0 : ++next_ticket_;
    auto& b = bus_.link_builder();
    b.Clear();
    const auto puts = strings(b, batch.puts);
    const auto removes = strings(b, batch.removes);
    const bool sent =
        bus_.send_body(owner, link::Body::RouteUpdate, link::CreateRouteUpdate(b, puts, removes, ticket).Union());
    batch.puts.clear();
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
    waiting.waiters = std::move(batch.waiters);
    batch.waiters.clear();
    waiting.deadline = deadline;
    unacked_.emplace(ticket, std::move(waiting));
  }
  arm_timer();
}

void route_relay::send(peer& from, std::uint64_t rid, std::span<const std::string_view> keys,
                       protocol::bytes_view payload) {
  // Group the keys: delivered here, by home node (this node owns their
  // partition), by owner node; or unavailable.
  std::map<std::string_view, std::vector<std::string_view>> homes, owners;
  auto& here = key_scratch_;
  here.clear();
  std::uint32_t unavailable = 0;
  for (const auto key : keys) {
    const auto p = partition_map::partition_of(key);
    const auto* owner = owner_of(p);
    if (!owner) {
      ++unavailable;
      continue;
    }
    if (owner->node_id != bus_.node_id()) {
      owners[owner->node_id].push_back(key);
      continue;
    }
    if (!ready(p)) {
      ++unavailable;
      continue;
    }
    const auto home = directory_.find(key, p);
    if (home == 0) continue;  // no route
    if (home == incarnation_)
      here.push_back(key);
    else if (const auto& id = node_id_of(home); !id.empty())
      homes[id].push_back(key);
  }
  std::uint32_t routed = 0;
  auto& gateways = gateway_scratch_;
  gateways.clear();
  if (!here.empty()) routed = fanout_.send_to_users(here, payload, nullptr, gateways);
  if (homes.empty() && owners.empty()) {
    // Everything decided here: answered as on one node.
    if (keys.size() == 1 && routed == 0) {
      if (unavailable != 0) {
        ++counters_.unavailable;
        return from.send_error(rid, errc::unavailable,
                               unavailable_for(keys[0]).value_or("route key's partition is not in reach now"));
      }
      return from.send_error(rid, errc::no_route, "no route for " + std::string(keys[0]));
    }
    if (rid != 0) from.send(answers_.send_result(rid, gateways, routed));
    return;
  }
  const auto ticket = ++next_ticket_;
  pending_send s;
  s.who = from.weak_peer();
  s.request_id = rid;
  s.peer_ticket = from.open_ticket();
  if (keys.size() == 1) s.single_key = keys[0];
  s.keys = keys.size();
  s.routed = routed;
  s.unavailable = unavailable;
  for (const auto g : gateways) s.gateways.emplace_back(g);
  s.deadline = clock::now() + options_.forward_timeout;
  const auto origin = bus_.node_id();
  for (const auto& [node, ks] : owners) {
    if (forward(node, origin, ticket, ks, payload, false)) {
      ++s.owners_waited;
      s.asked.emplace_back(node);
    } else {
      s.unavailable += static_cast<std::uint32_t>(ks.size());
    }
  }
  for (const auto& [node, ks] : homes) {
    if (forward(node, origin, ticket, ks, payload, true)) {
      ++s.homes_expected;
      s.asked.emplace_back(node);
    }
  }
  sends_.emplace(ticket, std::move(s));
  finish(ticket);  // every forward failed: answered now
  arm_timer();
}

bool route_relay::forward(std::string_view node, std::string_view origin, std::uint64_t ticket,
                          std::span<const std::string_view> keys, protocol::bytes_view payload, bool to_home) {
  auto& b = bus_.link_builder();
  b.Clear();
  const auto o = b.CreateString(origin.data(), origin.size());
  const auto k = strings(b, keys);
  const auto bytes = b.CreateVector(payload.data(), payload.size());
  const bool sent = bus_.send_body(node, link::Body::SendForward,
                                   link::CreateSendForward(b, o, incarnation_, ticket, k, bytes, to_home).Union());
  if (sent) ++counters_.sends_forwarded;
  return sent;
}

void route_relay::send_outcome(std::string_view to, std::uint64_t ticket, std::uint32_t routed,
                               std::span<const std::string_view> gateways, std::uint32_t forwarded,
                               std::uint32_t unavailable, bool from_owner) {
  auto& b = bus_.link_builder();
  b.Clear();
  const auto g = strings(b, gateways);
  bus_.send_body(to, link::Body::SendOutcome,
                 link::CreateSendOutcome(b, ticket, routed, g, forwarded, unavailable, from_owner).Union());
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
    case link::Body::SendForward:
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
  std::vector<std::string> refused;
  if (const auto* puts = u.put())
    for (const auto* s : *puts) {
      const auto key = s->string_view();
      if (key.empty() || key.size() > max_key_bytes) continue;
      const auto p = partition_map::partition_of(key);
      if (held_[p] != 0 && in_standing_())
        directory_.put(key, p, home);
      else if (u.ticket() != 0)
        refused.emplace_back(key);
    }
  if (const auto* removes = u.removed())
    for (const auto* s : *removes) {
      const auto key = s->string_view();
      const auto p = partition_map::partition_of(key);
      if (held_[p] != 0) directory_.remove(key, p, home);
    }
  if (u.ticket() != 0) {
    auto& b = bus_.link_builder();
    b.Clear();
    const auto r = strings(b, refused);
    bus_.send_body(from.member().node_id, link::Body::RouteAck, link::CreateRouteAck(b, u.ticket(), r).Union());
  }
  if (u.rebuild() != 0 && u.last()) {
    const auto it = rebuilds_.find(u.rebuild());
    if (it == rebuilds_.end()) return;
    std::erase(it->second.waiting, from.member().node_id);
    if (!it->second.waiting.empty()) return;
    std::size_t done = 0;
    for (const auto p : it->second.partitions)
      if (rebuilding_[p] == it->first) {
        rebuilding_[p] = 0;
        ++done;
      }
    logger_->info("cluster: route directory of {} partition(s) rebuilt ({} entries held)", done, directory_.size());
    rebuilds_.erase(it);
  }
}

void route_relay::on_route_ack(remote_node& from, const link::RouteAck& a) {
  const auto it = unacked_.find(a.ticket());
  if (it == unacked_.end() || it->second.owner != from.member().node_id) return;
  std::vector<std::string_view> refused;
  if (const auto* r = a.refused())
    for (const auto* s : *r) refused.push_back(s->string_view());
  for (auto& w : it->second.waiters) {
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
      if (p < partition_map::partition_count) wanted[p] = true;
  send_keys(from.member().node_id, &wanted, r.ticket());
}

void route_relay::send_keys(std::string_view to, const std::vector<bool>* partitions, std::uint64_t rebuild_ticket) {
  std::vector<std::string> part;
  std::size_t bytes = 0;
  const auto send_part = [&](bool last) {
    auto& b = bus_.link_builder();
    b.Clear();
    const auto puts = strings(b, part);
    bus_.send_body(to, link::Body::RouteUpdate, link::CreateRouteUpdate(b, puts, 0, 0, rebuild_ticket, last).Union());
    part.clear();
    bytes = 0;
  };
  routing_.for_each_live_key([&](std::string_view key) {
    if (!partitions->empty() && !(*partitions)[partition_map::partition_of(key)]) return;
    if (partitions->empty()) {  // everything: only what `to` owns
      const auto* owner = owner_of(partition_map::partition_of(key));
      if (!owner || owner->node_id != to) return;
    }
    part.emplace_back(key);
    bytes += key.size() + 8;
    if (bytes >= options_.part_bytes) send_part(false);
  });
  send_part(true);
}

void route_relay::on_forward(remote_node&, const link::SendForward& f) {
  if (!f.origin() || !f.keys()) return;
  const auto origin = f.origin()->string_view();
  const auto* p = f.payload();
  const protocol::bytes_view payload = p ? protocol::bytes_view{p->data(), p->size()} : protocol::bytes_view{};
  std::vector<std::string_view> keys;
  keys.reserve(f.keys()->size());
  for (const auto* s : *f.keys())
    if (s->size() > 0 && s->size() <= max_key_bytes) keys.push_back(s->string_view());
  if (f.to_home()) return deliver_home(origin, f.ticket(), keys, payload);
  // As the keys' owner: look them up, deliver what lives here, pass the
  // rest on to their homes.
  std::map<std::string_view, std::vector<std::string_view>> homes;
  std::vector<std::string_view> here;
  std::uint32_t unavailable = 0;
  for (const auto key : keys) {
    const auto part = partition_map::partition_of(key);
    if (!ready(part)) {
      ++unavailable;
      continue;
    }
    const auto home = directory_.find(key, part);
    if (home == 0) continue;
    if (home == incarnation_)
      here.push_back(key);
    else if (const auto& id = node_id_of(home); !id.empty())
      homes[id].push_back(key);
  }
  // (A home that is the origin itself delivers on its SendForward too.)
  std::uint32_t forwarded = 0;
  for (const auto& [node, ks] : homes)
    if (forward(node, origin, f.ticket(), ks, payload, true)) ++forwarded;
  std::uint32_t routed = 0;
  auto& gateways = gateway_scratch_;
  gateways.clear();
  if (!here.empty()) routed = fanout_.send_to_users(here, payload, nullptr, gateways);
  send_outcome(origin, f.ticket(), routed, gateways, forwarded, unavailable, true);
}

void route_relay::deliver_home(std::string_view origin, std::uint64_t ticket, std::span<const std::string_view> keys,
                               protocol::bytes_view payload) {
  auto& gateways = gateway_scratch_;
  gateways.clear();
  const auto routed = keys.empty() ? 0 : fanout_.send_to_users(keys, payload, nullptr, gateways);
  if (origin == bus_.node_id())
    apply_outcome(ticket, routed, gateways, 0, 0, false);
  else
    send_outcome(origin, ticket, routed, gateways, 0, 0, false);
}

void route_relay::on_outcome(const link::SendOutcome& o) {
  std::vector<std::string_view> gateways;
  if (const auto* g = o.gateways())
    for (const auto* s : *g) gateways.push_back(s->string_view());
  apply_outcome(o.ticket(), o.routed(), gateways, o.forwarded(), o.unavailable(), o.from_owner());
}

void route_relay::apply_outcome(std::uint64_t ticket, std::uint32_t routed, std::span<const std::string_view> gateways,
                                std::uint32_t forwarded, std::uint32_t unavailable, bool from_owner) {
  const auto it = sends_.find(ticket);
  if (it == sends_.end()) return;
  auto& s = it->second;
  s.routed += routed;
  s.unavailable += unavailable;
  for (const auto g : gateways) s.gateways.emplace_back(g);
  if (from_owner) {
    --s.owners_waited;
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
  if (auto p = s.who.lock(); p && !p->closed()) {
    if (s.keys == 1 && s.routed == 0) {
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
  sends_.erase(it);
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
  // A member silent on a rebuild: asked again.
  for (auto& [ticket, r] : rebuilds_) {
    if (now - r.sent_at < options_.forward_timeout) continue;
    r.sent_at = now;
    for (const auto& id : r.waiting) {
      logger_->info("cluster: node '{}' has not answered the route rebuild; asking again", id);
      auto& b = bus_.link_builder();
      b.Clear();
      bus_.send_body(id, link::Body::RouteRebuild,
                     link::CreateRouteRebuild(b, b.CreateVector(r.partitions), ticket).Union());
    }
  }
}

route_relay_counters route_relay::counters() const {
  auto c = counters_;
  c.directory_entries = directory_.size();
  c.partitions_held =
      static_cast<std::size_t>(std::count_if(held_.begin(), held_.end(), [](std::int64_t r) { return r != 0; }));
  c.partitions_rebuilding = static_cast<std::size_t>(
      std::count_if(rebuilding_.begin(), rebuilding_.end(), [](std::uint64_t t) { return t != 0; }));
  c.pending = sends_.size() + unacked_.size();
  for (const auto& [owner, b] : outgoing_) c.pending += b.waiters.size() != 0;
  return c;
}

}  // namespace switchyard::broker
