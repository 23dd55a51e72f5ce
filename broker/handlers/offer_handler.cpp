#include "broker/handlers/offer_handler.hpp"

#include "protocol/answer_budget.hpp"
#include "protocol/limits.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace switchyard::broker {

namespace wire = protocol::wire;
using protocol::errc;
using std::chrono::milliseconds;

namespace {

std::uint32_t ms32(std::chrono::steady_clock::duration d) {
  const auto ms = std::chrono::ceil<milliseconds>(d).count();
  return static_cast<std::uint32_t>(std::clamp<std::int64_t>(ms, 0, UINT32_MAX));
}

constexpr std::string_view no_offers_message = "expiries and offers need the \"offers\" capability in the hello";

}  // namespace

offer_handler::offer_handler(const server_config& config, routing_table& routing, fanout& fan,
                             protocol::frame_builder& builder, server_counters& counters,
                             std::function<clock::time_point()> now, std::shared_ptr<spdlog::logger> logger)
    : config_(config),
      routing_(routing),
      fanout_(fan),
      builder_(builder),
      counters_(counters),
      now_(std::move(now)),
      logger_(std::move(logger)),
      offers_({config.max_offers, config.max_offer_bytes, config.max_pending_per_key}),
      exposure_(config.max_exposure_keys, config.exposure_window) {}

bool offer_handler::refuse_expiry(peer& from, std::uint64_t rid, std::uint32_t expires_in_ms,
                                  const server_config& config) {
  if (!from.granted().offers) {
    from.send_error(rid, errc::unsupported_message, no_offers_message);
    return true;
  }
  if (std::chrono::milliseconds(expires_in_ms) > config.max_offer_expiry) {
    from.send_error(rid, errc::bad_request,
                    fmt::format("expires_in_ms is at most max-offer-expiry-ms ({})", config.max_offer_expiry.count()));
    return true;
  }
  return false;
}

void offer_handler::send(peer& from, std::uint64_t rid, const wire::Send& m) {
  if (!from.granted().offers) return from.send_error(rid, errc::unsupported_message, no_offers_message);
  if (m.stream() && m.stream()->size() > 0)
    return from.send_error(rid, errc::bad_request,
                           "an offer id, a receipt or a cap cannot be combined with a stream (an expiry can)");
  const auto* p = m.payload();
  const protocol::bytes_view payload = p ? protocol::bytes_view{p->data(), p->size()} : protocol::bytes_view{};
  auto& keys = fanout_.key_scratch();
  keys.clear();
  for (const auto* k : *m.route_keys()) keys.push_back(k->string_view());
  if (keys.empty()) return from.send_error(rid, errc::bad_request, "a send needs at least one route key");

  const std::uint64_t offer_id = m.offer_id();
  const milliseconds expires_in(m.expires_in_ms());
  const milliseconds receipt_timeout(m.receipt_timeout_ms());
  const std::string_view receipt_inbox = m.receipt_inbox() ? m.receipt_inbox()->string_view() : std::string_view{};
  const std::uint32_t cap_max = m.cap_max();
  const milliseconds cap_window(m.cap_window_ms());
  const auto refuse = [&](std::string message) { from.send_error(rid, errc::bad_request, message); };
  if (offer_id != 0 && expires_in.count() == 0) return refuse("an offer id needs an expiry (expires_in_ms)");
  if (expires_in > config_.max_offer_expiry)
    return refuse(fmt::format("expires_in_ms is at most max-offer-expiry-ms ({})", config_.max_offer_expiry.count()));
  if ((receipt_timeout.count() != 0 || !receipt_inbox.empty()) && offer_id == 0)
    return refuse("receipts need an offer id");
  if (!receipt_inbox.empty() && receipt_timeout.count() == 0)
    return refuse("a receipt inbox needs a receipt timeout (receipt_timeout_ms)");
  if (cap_max > exposure_table::history) return refuse(fmt::format("cap_max is at most {}", exposure_table::history));
  if ((cap_max != 0) != (cap_window.count() != 0))
    return refuse("an exposure cap needs both cap_max and cap_window_ms");
  if (cap_window > exposure_.window())
    return refuse(fmt::format("cap_window_ms is at most exposure-window-ms ({})",
                              std::chrono::duration_cast<milliseconds>(exposure_.window()).count()));
  if (offer_id != 0 && (offers_.contains(offer_id) || sending_.contains(offer_id)))
    return refuse(fmt::format("offer {} is live: offer ids must be unique among live offers", offer_id));

  const auto now = now_();
  const bool tracked = offer_id != 0;
  const bool counted = tracked || cap_max != 0;  // answered with outcomes, counted for exposure

  // Keys over the cap are left out; the others are routed.
  std::uint32_t capped = 0;
  outcomes_.assign(keys.size(), static_cast<std::uint8_t>(wire::KeyOutcome::no_route));
  deliver_keys_.clear();
  deliver_index_.clear();
  for (std::size_t i = 0; i < keys.size(); ++i) {
    // In cluster mode each key's owner counts and caps it (route_relay).
    if (!relay_ && cap_max != 0 && exposure_.count(keys[i], cap_window, now) >= cap_max) {
      outcomes_[i] = static_cast<std::uint8_t>(wire::KeyOutcome::capped);
      ++capped;
      continue;
    }
    deliver_keys_.push_back(keys[i]);
    deliver_index_.push_back(i);
  }
  counters_.offers_capped += capped;

  send_args a;
  a.request_id = rid;
  a.offer_id = offer_id;
  a.now = now;
  a.expires = expires_in.count() != 0 ? now + expires_in : clock::time_point{};
  a.receipt_timeout = receipt_timeout;
  a.receipt_inbox = receipt_inbox;
  a.tracked = tracked;
  a.counted = counted;
  a.capped = capped;
  sender_info sender{from.id(), from.owner(), {}, from.weak_peer()};
  if (const auto* who = from.principal(); who && !who->admin) sender.principal = who->name;

  if (relay_ && !deliver_keys_.empty()) {
    // Cluster mode: delivered on every node; the offer is kept here once
    // their answers are in. What take() needs is copied (the frame goes),
    // within max-offer-bytes with the offers kept.
    std::size_t held = payload.size() + receipt_inbox.size() + 256;
    for (const auto k : keys) held += k.size() + 32;
    if (offers_.bytes() + sending_bytes_ + held > config_.max_offer_bytes)
      return from.send_error(rid, errc::unavailable,
                             fmt::format("offers kept and being delivered to other nodes hold {} bytes, near "
                                         "max-offer-bytes ({}): retry",
                                         offers_.bytes() + sending_bytes_, config_.max_offer_bytes));
    sending_bytes_ += held;
    struct state {
      std::vector<std::string> keys;
      std::vector<std::uint8_t> payload;
      std::string receipt_inbox;
      std::vector<std::size_t> deliver_index;
      std::vector<std::uint8_t> outcomes;
    };
    auto st = std::make_shared<state>();
    st->keys.assign(keys.begin(), keys.end());
    st->payload.assign(payload.begin(), payload.end());
    st->receipt_inbox = receipt_inbox;
    st->deliver_index = deliver_index_;
    st->outcomes = outcomes_;
    if (tracked) sending_.try_emplace(offer_id);
    const route_relay::offer_fields fields{offer_id, a.expires, counted, cap_max, cap_window};
    relay_->send_offer(from, deliver_keys_, payload, fields,
                       [this, st, a, sender, held](const route_relay::offer_outcome& r) mutable {
                         sending_bytes_ -= held;
                         in_flight early;
                         if (a.tracked)
                           if (const auto it = sending_.find(a.offer_id); it != sending_.end()) {
                             early = std::move(it->second);
                             sending_.erase(it);
                           }
                         std::vector<std::string_view> key_views(st->keys.begin(), st->keys.end());
                         std::vector<std::string_view> routed_to(r.gateways.begin(), r.gateways.end());
                         a.keys = key_views;
                         a.payload = protocol::bytes_view{st->payload.data(), st->payload.size()};
                         a.receipt_inbox = st->receipt_inbox;
                         a.deliver_index = st->deliver_index;
                         a.outcomes = st->outcomes;
                         const auto p = sender.who.lock();
                         a.counted_by_owners = true;
                         a.capped_by_owners = r.capped;
                         take(p && !p->closed() ? p.get() : nullptr, sender, a, routed_to, r.routed, r.unavailable,
                              r.timed_out, r.silent);
                         if (a.tracked) settle_early(a.offer_id, std::move(early));
                       });
    return;
  }

  auto& routed_to = fanout_.gateway_scratch();
  std::uint32_t routed = 0;
  if (!deliver_keys_.empty())
    routed = fanout_.send_offer(deliver_keys_, payload, delivery_meta{a.expires, offer_id, false}, now, routed_to);
  else
    routed_to.clear();
  a.keys = keys;
  a.payload = payload;
  a.deliver_index = deliver_index_;
  a.outcomes = outcomes_;
  take(&from, sender, a, routed_to, routed, 0, false, {});
}

void offer_handler::take(peer* from, const sender_info& sender, const send_args& a,
                         std::span<const std::string_view> routed_to, std::uint32_t routed, std::uint32_t unavailable,
                         bool timed_out, std::string_view silent) {
  const auto keys = a.keys;
  auto& outcomes = a.outcomes;
  // Keys their owners left out over the cap (cluster mode).
  std::uint32_t capped = a.capped;
  bool any_taken = false;
  for (std::size_t j = 0; j < a.deliver_index.size(); ++j) {
    if (j < a.capped_by_owners.size() && a.capped_by_owners[j] != 0) {
      outcomes[a.deliver_index[j]] = static_cast<std::uint8_t>(wire::KeyOutcome::capped);
      ++capped;
      ++counters_.offers_capped;
    } else {
      any_taken = true;
    }
  }
  // Per key of the send: the inbox (or "") and the outcome.
  auto& inbox_of = inbox_of_;
  inbox_of.assign(keys.size(), {});
  for (std::size_t j = 0; j < a.deliver_index.size() && j < routed_to.size(); ++j) {
    const std::size_t i = a.deliver_index[j];
    inbox_of[i] = routed_to[j];
    if (!routed_to[j].empty()) outcomes[i] = static_cast<std::uint8_t>(wire::KeyOutcome::routed);
  }

  if (a.counted && !a.counted_by_owners)
    for (std::size_t i = 0; i < keys.size(); ++i)
      if (outcomes[i] == static_cast<std::uint8_t>(wire::KeyOutcome::routed) && !exposure_.record(keys[i], a.now))
        ++counters_.exposure_untracked;

  if (a.tracked && any_taken) {
    offer_table::offer o;
    o.id = a.offer_id;
    o.sender = sender.id;
    o.owner = sender.owner;
    o.principal = sender.principal;
    o.receipt_inbox = a.receipt_inbox;
    o.sent = a.now;
    o.expires = a.expires;
    if (a.receipt_timeout.count() != 0) o.receipt_due = a.now + a.receipt_timeout;
    o.payload.assign(reinterpret_cast<const std::byte*>(a.payload.data()),
                     reinterpret_cast<const std::byte*>(a.payload.data()) + a.payload.size());
    o.keys.reserve(a.deliver_index.size());
    for (std::size_t j = 0; j < a.deliver_index.size(); ++j) {
      const std::size_t i = a.deliver_index[j];
      if (outcomes[i] == static_cast<std::uint8_t>(wire::KeyOutcome::capped)) continue;
      offer_table::key_state k;
      k.key = keys[i];
      k.inbox = inbox_of[i];
      // A key without a route gets no timeout (its sender was told
      // no_route); it stays pending for a pull, and an ack still sends
      // its receipt.
      k.receipt_sent = inbox_of[i].empty();
      o.keys.push_back(std::move(k));
    }
    // (A sender gone meanwhile is not listed: disconnected() ran already.)
    if (o.wants_receipts() && a.receipt_inbox.empty() && from) senders_.try_emplace(sender.id, sender.who);
    const auto first = o.wants_receipts() ? std::min(o.receipt_due, o.expires) : o.expires;
    offers_.add(std::move(o));
    ++counters_.offers;
    if (offer_added_) offer_added_(first);
  }

  if (!from || a.request_id == 0) return;
  const auto rid = a.request_id;
  if (timed_out)
    return from->send_error(
        rid, errc::outcome_unknown,
        fmt::format("no answer from node {} within the forward timeout: the offer may or may not have been delivered "
                    "to their keys (receipts, if asked, say which were)",
                    silent));
  if (keys.size() == 1 && routed == 0 && unavailable != 0)
    return from->send_error(
        rid, errc::unavailable,
        "route key '" + std::string(keys[0]) + "': its partition's owner is not in reach now; retry");
  auto& gateways = answer_gateways_;
  gateways.assign(inbox_of.begin(), inbox_of.end());
  if (a.counted) return from->send(builder_.send_result(rid, gateways, routed, 0, 0, outcomes, capped));
  // An expiry alone: answered as a plain send.
  if (keys.size() == 1 && routed == 0)
    return from->send_error(rid, errc::no_route, "no route for " + std::string(keys[0]));
  from->send(builder_.send_result(rid, gateways, routed));
}

void offer_handler::send_receipt(offer_table::offer& o, const offer_table::key_state& k, std::uint8_t outcome,
                                 clock::time_point now, std::string_view inbox) {
  const auto elapsed = std::chrono::duration_cast<std::chrono::microseconds>(now - o.sent).count();
  const auto frame = builder_.receipt(o.id, k.key, inbox.empty() ? std::string_view(k.inbox) : inbox, outcome,
                                      static_cast<std::uint64_t>(std::max<std::int64_t>(elapsed, 0)));
  if (!o.receipt_inbox.empty()) {
    if (delivery_target* t = routing_.inbox_owner(o.receipt_inbox)) return t->notify(frame);
  } else if (const auto it = senders_.find(o.sender); it != senders_.end()) {
    if (const auto p = it->second.lock(); p && !p->closed()) return p->send(frame);
  }
  ++counters_.receipts_undeliverable;
}

void offer_handler::ack(peer& from, std::uint64_t rid, const wire::OfferAck& m) {
  if (!from.granted().offers) return from.send_error(rid, errc::unsupported_message, no_offers_message);
  const std::string_view key = m.route_key() ? m.route_key()->string_view() : std::string_view{};
  const auto n = ack_here(m.offer_id(), key, from.inboxes());
  const auto not_found = [offer_id = m.offer_id()](std::string_view key) {
    return fmt::format("offer {} has no unacknowledged {} (unknown, expired or withdrawn)", offer_id,
                       key.empty() ? std::string("key in this connection's inboxes") : fmt::format("key '{}'", key));
  };
  if (n == 0 && cluster_offers_ && !offers_.contains(m.offer_id())) {
    // Not this node's offer: the node that holds it acks it (and sends the
    // receipts).
    return cluster_offers_->ask_ack(
        from, rid, m.offer_id(), key, from.inboxes(),
        [this, rid, offer_id = m.offer_id(), key = std::string(key), not_found](peer& who,
                                                                                const offer_relay::gathered& g) {
          if (g.found > 0) {
            if (rid != 0) who.send(builder_.ok(rid));
            return;
          }
          if (!g.silent.empty())
            return who.send_error(rid, errc::unavailable,
                                  fmt::format("offer {}: not found on the nodes that answered; node {} did not answer "
                                              "in time (it may hold it): retry",
                                              offer_id, g.silent));
          who.send_error(rid, errc::not_found, not_found(key));
        });
  }
  if (n == 0) return from.send_error(rid, errc::not_found, not_found(key));
  if (rid != 0) from.send(builder_.ok(rid));
}

void offer_handler::settle_early(std::uint64_t id, in_flight early) {
  for (const auto& a : early.acks) ack_here(id, a.key, a.inboxes);
  for (const auto& w : early.withdraws) {
    const auto p = w.who.lock();
    if (!p) continue;
    offer_table::offer* o = offers_.find(id);
    if (p->closed()) {
      // Gone: nothing to answer.
    } else if (!o) {
      p->send_error(w.request_id, errc::not_found,
                    fmt::format("offer {} is not live (unknown, expired or withdrawn)", id));
    } else if (!p->may_touch(o->owner)) {
      p->send_forbidden(w.request_id, "Withdraw", fmt::format("offer {}", id), "it belongs to another principal");
    } else {
      const auto r = withdraw_here(*o);
      p->send(builder_.withdraw_result(w.request_id, id, r.dropped, r.notified, r.pending));
    }
    p->close_ticket(w.ticket);
  }
}

std::uint32_t offer_handler::ack_here(std::uint64_t id, std::string_view key, std::span<const std::string> inboxes) {
  if (!offers_.contains(id))
    if (const auto it = sending_.find(id); it != sending_.end()) {
      // Its delivery is under way: acked once the offer is kept.
      if (it->second.acks.size() >= max_early_acks) return 0;
      it->second.acks.push_back({std::string(key), {inboxes.begin(), inboxes.end()}});
      return 1;
    }
  const auto now = now_();
  return static_cast<std::uint32_t>(
      offers_.ack(id, key, inboxes, [&](offer_table::offer& o, offer_table::key_state& k) {
        ++counters_.receipts_acked;
        if (o.wants_receipts()) {
          k.receipt_sent = true;
          // A key whose delivery this node never learned (a node silent
          // past the forward timeout) was acked by a gateway: the receipt
          // names the acking connection's inbox when it holds one.
          const std::string_view via =
              k.inbox.empty() && inboxes.size() == 1 ? std::string_view(inboxes.front()) : std::string_view();
          send_receipt(o, k, static_cast<std::uint8_t>(wire::ReceiptOutcome::acked), now, via);
        }
      }));
}

void offer_handler::retract(std::uint64_t id, std::span<const std::string_view> inboxes,
                            std::span<const std::string_view> keys, std::span<const std::uint32_t> key_inbox,
                            std::uint32_t& dropped, std::uint32_t& notified) {
  std::vector<std::string_view> inbox_keys;
  for (std::uint32_t i = 0; i < inboxes.size(); ++i) {
    delivery_target* t = routing_.inbox_owner(inboxes[i]);
    if (!t) continue;
    // One delivery per inbox: dropped if still queued, else told.
    if (const auto n = t->withdraw(id); n > 0) {
      dropped += static_cast<std::uint32_t>(n);
      continue;
    }
    if (!t->wants_offer_fields()) continue;
    inbox_keys.clear();
    for (std::size_t k = 0; k < keys.size(); ++k)
      if (key_inbox[k] == i) inbox_keys.push_back(keys[k]);
    t->notify(builder_.withdrawn(id, inboxes[i], inbox_keys));
    ++notified;
  }
}

offer_relay::withdraw_answer offer_handler::withdraw_here(offer_table::offer& o) {
  offer_relay::withdraw_answer w;
  w.found = true;
  for (const auto& k : o.keys) w.pending += k.pending ? 1 : 0;
  // The inboxes it went into, once each, and each key's inbox.
  std::vector<std::string_view> inboxes, keys, remote;
  std::vector<std::uint32_t> key_inbox;
  for (const auto& k : o.keys) {
    if (k.inbox.empty()) continue;
    auto it = std::find(inboxes.begin(), inboxes.end(), std::string_view(k.inbox));
    if (it == inboxes.end()) it = inboxes.insert(inboxes.end(), k.inbox);
    keys.push_back(k.key);
    key_inbox.push_back(static_cast<std::uint32_t>(it - inboxes.begin()));
  }
  retract(o.id, inboxes, keys, key_inbox, w.dropped, w.notified);
  if (cluster_offers_) {
    // Inboxes held elsewhere: their nodes drop or retract them (counted
    // as told).
    std::uint32_t elsewhere = 0;
    for (const auto in : inboxes)
      if (!routing_.inbox_owner(in)) ++elsewhere;
    if (elsewhere > 0) cluster_offers_->tell_withdrawn(o.id, inboxes, keys, key_inbox);
    w.notified += elsewhere;
  }
  const std::uint64_t id = o.id;
  offers_.remove(id);
  ++counters_.offers_withdrawn;
  return w;
}

void offer_handler::withdraw(peer& from, std::uint64_t rid, const wire::Withdraw& m) {
  if (!from.granted().offers) return from.send_error(rid, errc::unsupported_message, no_offers_message);
  const auto not_live = [id = m.offer_id()] {
    return fmt::format("offer {} is not live (unknown, expired or withdrawn)", id);
  };
  offer_table::offer* o = offers_.find(m.offer_id());
  if (!o)
    if (const auto it = sending_.find(m.offer_id()); it != sending_.end()) {
      // Its delivery is under way: withdrawn once the offer is kept.
      it->second.withdraws.push_back({from.weak_peer(), rid, from.open_ticket()});
      return;
    }
  if (!o && cluster_offers_) {
    // Another node's offer (its sender reconnected here): that node
    // withdraws it, if this principal may.
    std::string principal;
    if (const auto* who = from.principal(); who && !who->admin) principal = who->name;
    return cluster_offers_->ask_withdraw(
        from, rid, m.offer_id(), principal,
        [this, rid, id = m.offer_id(), not_live](peer& who, const offer_relay::gathered& g) {
          if (g.found > 0 && g.busy)
            return who.send_error(rid, errc::unavailable,
                                  fmt::format("offer {} is still being delivered on its node: retry", id));
          if (g.found > 0 && g.forbidden)
            return who.send_forbidden(rid, "Withdraw", fmt::format("offer {}", id), "it belongs to another principal");
          if (g.found > 0) return who.send(builder_.withdraw_result(rid, id, g.dropped, g.notified, g.pending));
          if (!g.silent.empty())
            return who.send_error(rid, errc::unavailable,
                                  fmt::format("offer {}: not found on the nodes that answered; node {} did not answer "
                                              "in time (it may hold it): retry",
                                              id, g.silent));
          who.send_error(rid, errc::not_found, not_live());
        });
  }
  if (!o) return from.send_error(rid, errc::not_found, not_live());
  if (!from.may_touch(o->owner))
    return from.send_forbidden(rid, "Withdraw", fmt::format("offer {}", m.offer_id()),
                               "it belongs to another principal");
  const auto w = withdraw_here(*o);
  logger_->debug("conn={} offer={} withdrawn: {} queued copies dropped, {} gateways told, {} pending removed",
                 from.id(), m.offer_id(), w.dropped, w.notified, w.pending);
  from.send(builder_.withdraw_result(rid, m.offer_id(), w.dropped, w.notified, w.pending));
}

void offer_handler::pending_here(std::string_view key, std::uint32_t limit, clock::time_point now,
                                 std::vector<offer_relay::pending_entry>& out) {
  // At most one frame's worth: the oldest first, as many as fit.
  auto budget = protocol::answer_budget::for_records(config_.max_frame);
  for (const auto* o : offers_.pending(key, now, limit)) {
    if (!budget.take(o->payload.size() + protocol::record_overhead)) break;
    offer_relay::pending_entry e;
    e.offer_id = o->id;
    e.payload.assign(reinterpret_cast<const std::uint8_t*>(o->payload.data()),
                     reinterpret_cast<const std::uint8_t*>(o->payload.data()) + o->payload.size());
    e.expires_in_ms = ms32(o->expires - now);
    e.age_ms = ms32(now - o->sent);
    out.push_back(std::move(e));
  }
}

void offer_handler::pending(peer& from, std::uint64_t rid, const wire::PendingOffers& m) {
  if (!from.granted().offers) return from.send_error(rid, errc::unsupported_message, no_offers_message);
  const std::string_view key = m.route_key()->string_view();
  const auto now = now_();
  const std::uint32_t limit = m.limit();
  auto answer = [this, rid, key = std::string(key), limit](peer& who, std::vector<offer_relay::pending_entry>& list) {
    // Oldest first (across nodes), at most `limit`, one frame's worth.
    std::stable_sort(list.begin(), list.end(), [](const auto& x, const auto& y) { return x.age_ms > y.age_ms; });
    if (limit != 0 && list.size() > limit) list.resize(limit);
    std::vector<protocol::pending_offer_fields> out;
    out.reserve(list.size());
    auto budget = protocol::answer_budget::for_records(config_.max_frame);
    for (const auto& e : list) {
      if (!budget.take(e.payload.size() + protocol::record_overhead)) break;
      out.push_back({e.offer_id, {e.payload.data(), e.payload.size()}, e.expires_in_ms, e.age_ms});
    }
    who.send(builder_.pending_offers_result(rid, key, out));
  };
  std::vector<offer_relay::pending_entry> here;
  pending_here(key, limit, now, here);
  if (!cluster_offers_) return answer(from, here);
  // Cluster mode: every node's offers pending for the key.
  cluster_offers_->ask_pending(
      from, rid, key, limit,
      [rid, here = std::move(here), answer, key = std::string(key)](peer& who, const offer_relay::gathered& g) mutable {
        // A node silent may hold offers for the key: a partial list would
        // look complete.
        if (!g.silent.empty())
          return who.send_error(
              rid, errc::unavailable,
              fmt::format("the offers pending for '{}': node {} did not answer in time; retry", key, g.silent));
        here.insert(here.end(), g.offers.begin(), g.offers.end());
        answer(who, here);
      });
}

void offer_handler::use_cluster(route_relay* relay, offer_relay* offers) {
  if (cluster_offers_ && cluster_offers_ != offers) cluster_offers_->set_local({});
  if (relay_ && relay_ != relay) relay_->use_exposure(nullptr, nullptr, nullptr);
  if (relay)
    relay->use_exposure(&exposure_, &counters_.exposure_untracked, [this] {
      // Counts kept for other nodes' offers: swept as this node's are.
      if (offer_added_) offer_added_(now_() + std::chrono::seconds(1));
    });
  relay_ = relay;
  cluster_offers_ = offers;
  if (!offers) return;
  offer_relay::local_offers local;
  local.ack = [this](std::uint64_t id, std::string_view key, std::span<const std::string> inboxes) {
    return ack_here(id, key, inboxes);
  };
  local.withdraw = [this](std::uint64_t id, std::string_view principal) {
    offer_relay::withdraw_answer w;
    offer_table::offer* o = offers_.find(id);
    if (!o && sending_.contains(id)) {
      w.found = true;
      w.busy = true;
    }
    if (!o) return w;
    if (!principal.empty() && principal != o->principal) {
      w.found = true;
      w.forbidden = true;
      return w;
    }
    return withdraw_here(*o);
  };
  local.pending = [this](std::string_view key, std::uint32_t limit, std::vector<offer_relay::pending_entry>& out) {
    pending_here(key, limit, now_(), out);
  };
  local.exposure = [this](std::span<const std::string_view> keys, milliseconds window,
                          std::vector<std::uint32_t>& out) {
    const auto now = now_();
    for (std::size_t i = 0; i < keys.size() && i < out.size(); ++i) out[i] = exposure_.count(keys[i], window, now);
  };
  local.withdrawn = [this](std::uint64_t id, std::span<const std::string_view> inboxes,
                           std::span<const std::string_view> keys, std::span<const std::uint32_t> key_inbox) {
    std::uint32_t dropped = 0, notified = 0;
    retract(id, inboxes, keys, key_inbox, dropped, notified);
  };
  offers->set_local(std::move(local));
}

void offer_handler::exposure(peer& from, std::uint64_t rid, const wire::ExposureQuery& m) {
  if (!from.granted().offers) return from.send_error(rid, errc::unsupported_message, no_offers_message);
  const milliseconds window(m.window_ms());
  if (window.count() == 0 || window > exposure_.window())
    return from.send_error(rid, errc::bad_request,
                           fmt::format("window_ms is 1..exposure-window-ms ({})",
                                       std::chrono::duration_cast<milliseconds>(exposure_.window()).count()));
  const auto now = now_();
  std::vector<std::uint32_t> counts;
  counts.reserve(m.route_keys()->size());
  for (const auto* k : *m.route_keys()) counts.push_back(exposure_.count(k->string_view(), window, now));
  if (!cluster_offers_) return from.send(builder_.exposure_result(rid, counts));
  // Cluster mode: each key is counted by its owner (and by earlier owners,
  // for the time they owned it): the counts of every node, summed.
  std::vector<std::string_view> keys;
  keys.reserve(m.route_keys()->size());
  for (const auto* k : *m.route_keys()) keys.push_back(k->string_view());
  cluster_offers_->ask_exposure(
      from, rid, keys, window,
      [this, rid, counts = std::move(counts)](peer& who, const offer_relay::gathered& g) mutable {
        if (!g.silent.empty())
          return who.send_error(rid, errc::unavailable,
                                fmt::format("exposure counts: node {} did not answer in time; retry", g.silent));
        for (std::size_t i = 0; i < counts.size() && i < g.counts.size(); ++i) counts[i] += g.counts[i];
        who.send(builder_.exposure_result(rid, counts));
      });
}

std::optional<offer_handler::clock::time_point> offer_handler::sweep() {
  const auto now = now_();
  offers_.sweep(
      now,
      [&](offer_table::offer& o, offer_table::key_state& k) {
        ++counters_.receipt_timeouts;
        send_receipt(o, k, static_cast<std::uint8_t>(wire::ReceiptOutcome::timeout), now);
      },
      [&](offer_table::offer&) { ++counters_.offers_expired; });
  if (exposure_.size() > 0 && now - last_exposure_sweep_ >= std::chrono::seconds(1)) {
    exposure_.sweep(now);
    last_exposure_sweep_ = now;
  }
  auto next = offers_.next_deadline();
  if (exposure_.size() > 0) {
    const auto at = last_exposure_sweep_ + std::chrono::seconds(1);
    if (!next || at < *next) next = at;
  }
  return next;
}

void offer_handler::disconnected(peer& p) { senders_.erase(p.id()); }

}  // namespace switchyard::broker
