#include "broker/cluster/offer_relay.hpp"

#include "broker/cluster/node_link_generated.h"
#include "protocol/errc.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace switchyard::broker {

using protocol::errc;

struct offer_relay::ask {
  std::weak_ptr<peer> who;
  std::uint64_t request_id = 0;
  std::uint64_t peer_ticket = 0;
  link::OfferAskKind kind = link::OfferAskKind::ack;
  std::vector<std::string> waiting;  // members not answered yet
  gathered got;
  gathered_done done;
  clock::time_point deadline;
};

offer_relay::offer_relay(asio::io_context& io, node_bus& bus, std::chrono::milliseconds forward_timeout,
                         std::shared_ptr<spdlog::logger> logger)
    : bus_(bus), forward_timeout_(forward_timeout), logger_(std::move(logger)), timer_(io) {
  bus_.on_offer_message([this](remote_node& from, const link::LinkMessage& m) { on_message(from, m); });
}

offer_relay::~offer_relay() {
  bus_.on_offer_message(nullptr);
  *alive_ = false;
  // What still waits is answered: the node leaves the cluster.
  for (auto& [ticket, a] : asks_) {
    auto p = a.who.lock();
    if (!p || p->closed()) continue;
    p->send_error(a.request_id, errc::unavailable,
                  "this node left the cluster before the other nodes answered about the offer; retry");
    p->close_ticket(a.peer_ticket);
  }
}

void offer_relay::ask_ack(peer& who, std::uint64_t rid, std::uint64_t offer_id, std::string_view key,
                          std::span<const std::string> inboxes, gathered_done done) {
  question q;
  q.kind = static_cast<std::uint8_t>(link::OfferAskKind::ack);
  q.offer_id = offer_id;
  q.key = key;
  q.inboxes = inboxes;
  start(who, rid, q, std::move(done));
}

void offer_relay::ask_withdraw(peer& who, std::uint64_t rid, std::uint64_t offer_id, std::string_view principal,
                               gathered_done done) {
  question q;
  q.kind = static_cast<std::uint8_t>(link::OfferAskKind::withdraw);
  q.offer_id = offer_id;
  q.principal = principal;
  start(who, rid, q, std::move(done));
}

void offer_relay::ask_pending(peer& who, std::uint64_t rid, std::string_view key, std::uint32_t limit,
                              gathered_done done) {
  question q;
  q.kind = static_cast<std::uint8_t>(link::OfferAskKind::pending);
  q.key = key;
  q.limit = limit;
  start(who, rid, q, std::move(done));
}

void offer_relay::ask_exposure(peer& who, std::uint64_t rid, std::span<const std::string_view> keys,
                               std::chrono::milliseconds window, gathered_done done) {
  question q;
  q.kind = static_cast<std::uint8_t>(link::OfferAskKind::exposure);
  q.keys = keys;
  q.window_ms = static_cast<std::uint32_t>(std::clamp<std::int64_t>(window.count(), 0, UINT32_MAX));
  start(who, rid, q, std::move(done));
}

void offer_relay::start(peer& who, std::uint64_t rid, const question& q, gathered_done done) {
  if (asks_.size() >= max_asks)
    return who.send_error(
        rid, errc::unavailable,
        fmt::format("this node has {} offer requests waiting for other nodes (its limit): retry", max_asks));
  const auto kind = static_cast<link::OfferAskKind>(q.kind);
  gathered got;
  if (kind == link::OfferAskKind::exposure) got.counts.assign(q.keys.size(), 0);
  std::vector<std::string> members;
  if (const auto* view = bus_.view())
    for (const auto& m : view->members)
      if (m.node_id != bus_.node_id() && bus_.has_link(m.node_id)) members.push_back(m.node_id);
  if (members.empty()) return done(who, got);
  const auto ticket = ++next_ticket_;
  auto& b = builder_;
  for (const auto& member : members) {
    b.Clear();
    const auto k = b.CreateString(q.key.data(), q.key.size());
    const auto in = b.CreateVectorOfStrings(q.inboxes.begin(), q.inboxes.end());
    const auto pr = b.CreateString(q.principal.data(), q.principal.size());
    const auto ks = b.CreateVectorOfStrings(q.keys.begin(), q.keys.end());
    const auto body = link::CreateOfferAsk(b, ticket, kind, q.offer_id, k, in, pr, q.limit, ks, q.window_ms);
    // A member NATS refuses this to stays waited for: the timeout names it.
    bus_.send_body(member, link::Body::OfferAsk, body.Union(), b);
  }
  ask a;
  a.who = who.weak_peer();
  a.request_id = rid;
  a.peer_ticket = who.open_ticket();
  a.kind = kind;
  a.waiting = std::move(members);
  a.got = std::move(got);
  a.done = std::move(done);
  a.deadline = clock::now() + forward_timeout_;
  asks_.emplace(ticket, std::move(a));
  arm_timer();
}

void offer_relay::tell_withdrawn(std::uint64_t offer_id, std::span<const std::string_view> inboxes,
                                 std::span<const std::string_view> keys, std::span<const std::uint32_t> key_inbox) {
  const auto* view = bus_.view();
  if (!view) return;
  auto& b = builder_;
  for (const auto& m : view->members) {
    if (m.node_id == bus_.node_id() || !bus_.has_link(m.node_id)) continue;
    b.Clear();
    const auto in = b.CreateVectorOfStrings(inboxes.begin(), inboxes.end());
    const auto k = b.CreateVectorOfStrings(keys.begin(), keys.end());
    const auto ki = b.CreateVector(key_inbox.data(), key_inbox.size());
    const auto body = link::CreateOfferWithdrawn(b, offer_id, in, k, ki);
    bus_.send_body(m.node_id, link::Body::OfferWithdrawn, body.Union(), b);
  }
}

void offer_relay::on_message(remote_node& from, const link::LinkMessage& m) {
  switch (m.body_type()) {
    case link::Body::OfferAsk:
      if (const auto* a = m.body_as_OfferAsk()) on_ask(from, *a);
      break;
    case link::Body::OfferReply:
      if (const auto* r = m.body_as_OfferReply()) on_reply(from, *r);
      break;
    case link::Body::OfferWithdrawn:
      if (const auto* w = m.body_as_OfferWithdrawn()) on_withdrawn(*w);
      break;
    default:
      break;
  }
}

void offer_relay::on_ask(remote_node& from, const link::OfferAsk& a) {
  const std::string_view key = a.route_key() ? a.route_key()->string_view() : std::string_view{};
  std::uint32_t found = 0;
  withdraw_answer w;
  auto& offers = pending_scratch_;
  offers.clear();
  std::vector<std::uint32_t> counts;
  switch (a.kind()) {
    case link::OfferAskKind::ack: {
      auto& inboxes = inbox_scratch_;
      inboxes.clear();
      if (a.inboxes())
        for (const auto* s : *a.inboxes()) inboxes.emplace_back(s->string_view());
      if (local_.ack) found = local_.ack(a.offer_id(), key, inboxes);
      break;
    }
    case link::OfferAskKind::withdraw:
      if (local_.withdraw)
        w = local_.withdraw(a.offer_id(), a.principal() ? a.principal()->string_view() : std::string_view{});
      found = w.found ? 1 : 0;
      break;
    case link::OfferAskKind::pending:
      if (local_.pending && !key.empty()) local_.pending(key, a.limit(), offers);
      found = static_cast<std::uint32_t>(offers.size());
      break;
    case link::OfferAskKind::exposure: {
      auto& keys = view_scratch_;
      keys.clear();
      if (a.keys())
        for (const auto* s : *a.keys()) keys.push_back(s->string_view());
      counts.assign(keys.size(), 0);
      if (local_.exposure) local_.exposure(keys, std::chrono::milliseconds(a.window_ms()), counts);
      break;
    }
    default:
      return;  // a kind this version does not know: the asker times out
  }
  auto& b = builder_;
  b.Clear();
  std::vector<flatbuffers::Offset<link::PendingOfferEntry>> entries;
  entries.reserve(offers.size());
  for (const auto& o : offers)
    entries.push_back(
        link::CreatePendingOfferEntry(b, o.offer_id, b.CreateVector(o.payload), o.expires_in_ms, o.age_ms));
  const auto list = b.CreateVector(entries);
  const auto c = b.CreateVector(counts);
  const auto body =
      link::CreateOfferReply(b, a.ticket(), found, w.forbidden, w.dropped, w.notified, w.pending, list, c, w.busy);
  bus_.send_body(from.member().node_id, link::Body::OfferReply, body.Union(), b);
}

void offer_relay::on_reply(remote_node& from, const link::OfferReply& r) {
  const auto it = asks_.find(r.ticket());
  if (it == asks_.end()) return;  // answered already
  auto& a = it->second;
  const auto w = std::find(a.waiting.begin(), a.waiting.end(), from.member().node_id);
  if (w == a.waiting.end()) return;  // not asked, or answered already
  a.waiting.erase(w);
  auto& g = a.got;
  if (a.kind == link::OfferAskKind::exposure) {
    if (const auto* c = r.counts())
      for (std::uint32_t i = 0; i < c->size() && i < g.counts.size(); ++i) g.counts[i] += c->Get(i);
  } else if (a.kind == link::OfferAskKind::pending) {
    if (const auto* list = r.offers())
      for (const auto* e : *list) {
        pending_entry p;
        p.offer_id = e->offer_id();
        if (e->payload()) p.payload.assign(e->payload()->begin(), e->payload()->end());
        p.expires_in_ms = e->expires_in_ms();
        p.age_ms = e->age_ms();
        g.offers.push_back(std::move(p));
      }
  } else if (r.found() > 0) {
    g.found += r.found();
    g.forbidden = g.forbidden || r.forbidden();
    g.busy = g.busy || r.busy();
    g.dropped += r.dropped();
    g.notified += r.notified();
    g.pending += r.pending();
    // The member that held it answered: what the others say cannot change
    // the answer (offer ids are unique among a node's live offers).
    return finish(it);
  }
  if (a.waiting.empty()) finish(it);
}

void offer_relay::on_withdrawn(const link::OfferWithdrawn& w) {
  if (!local_.withdrawn || !w.inboxes() || !w.keys() || !w.key_inbox()) return;
  if (w.keys()->size() != w.key_inbox()->size()) return;  // not as this version sends it
  auto& inboxes = view_scratch_;
  auto& keys = key_scratch_;
  auto& index = index_scratch_;
  inboxes.clear();
  keys.clear();
  index.clear();
  for (const auto* s : *w.inboxes()) inboxes.push_back(s->string_view());
  for (std::uint32_t i = 0; i < w.keys()->size(); ++i) {
    if (w.key_inbox()->Get(i) >= inboxes.size()) return;
    keys.push_back(w.keys()->Get(i)->string_view());
    index.push_back(w.key_inbox()->Get(i));
  }
  local_.withdrawn(w.offer_id(), inboxes, keys, index);
}

void offer_relay::finish(std::map<std::uint64_t, ask>::iterator it) {
  auto a = std::move(it->second);
  asks_.erase(it);
  for (const auto& n : a.waiting) a.got.silent += (a.got.silent.empty() ? "'" : ", '") + n + "'";
  auto p = a.who.lock();
  if (!p) return;
  if (!p->closed()) a.done(*p, a.got);
  p->close_ticket(a.peer_ticket);
}

void offer_relay::arm_timer() {
  if (timer_armed_ || asks_.empty()) return;
  timer_armed_ = true;
  timer_.expires_after(std::max(forward_timeout_ / 4, std::chrono::milliseconds(25)));
  timer_.async_wait([this, alive = alive_](const asio_error_code& ec) {
    if (!*alive) return;
    timer_armed_ = false;
    if (ec) return;
    const auto now = clock::now();
    for (auto it = asks_.begin(); it != asks_.end();) {
      const auto next = std::next(it);
      if (now >= it->second.deadline) finish(it);
      it = next;
    }
    arm_timer();
  });
}

}  // namespace switchyard::broker
