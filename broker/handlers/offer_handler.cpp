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
  if (offer_id != 0 && offers_.contains(offer_id))
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
    if (cap_max != 0 && exposure_.count(keys[i], cap_window, now) >= cap_max) {
      outcomes_[i] = static_cast<std::uint8_t>(wire::KeyOutcome::capped);
      ++capped;
      continue;
    }
    deliver_keys_.push_back(keys[i]);
    deliver_index_.push_back(i);
  }
  counters_.offers_capped += capped;

  const delivery_meta meta{expires_in.count() != 0 ? now + expires_in : clock::time_point{}, offer_id, false};
  auto& routed_to = fanout_.gateway_scratch();
  std::uint32_t routed = 0;
  if (!deliver_keys_.empty())
    routed = fanout_.send_offer(deliver_keys_, payload, meta, now, routed_to);
  else
    routed_to.clear();

  // Per key of the send: the inbox (or "") and the outcome.
  std::vector<std::string_view>& gateways = deliver_keys_;  // reused: deliver_keys_ is done
  auto& inbox_of = inbox_of_;
  inbox_of.assign(keys.size(), {});
  for (std::size_t j = 0; j < deliver_index_.size(); ++j) {
    const std::size_t i = deliver_index_[j];
    inbox_of[i] = routed_to[j];
    if (!routed_to[j].empty()) outcomes_[i] = static_cast<std::uint8_t>(wire::KeyOutcome::routed);
  }

  if (counted)
    for (std::size_t i = 0; i < keys.size(); ++i)
      if (outcomes_[i] == static_cast<std::uint8_t>(wire::KeyOutcome::routed) && !exposure_.record(keys[i], now))
        ++counters_.exposure_untracked;

  if (tracked && !deliver_index_.empty()) {
    offer_table::offer o;
    o.id = offer_id;
    o.sender = from.id();
    o.owner = from.owner();
    o.receipt_inbox = receipt_inbox;
    o.sent = now;
    o.expires = meta.deadline;
    if (receipt_timeout.count() != 0) o.receipt_due = now + receipt_timeout;
    o.payload.assign(reinterpret_cast<const std::byte*>(payload.data()),
                     reinterpret_cast<const std::byte*>(payload.data()) + payload.size());
    o.keys.reserve(deliver_index_.size());
    for (const std::size_t i : deliver_index_) {
      offer_table::key_state k;
      k.key = keys[i];
      k.inbox = inbox_of[i];
      // A key without a route gets no timeout (its sender was told
      // no_route); it stays pending for a pull, and an ack still sends
      // its receipt.
      k.receipt_sent = inbox_of[i].empty();
      o.keys.push_back(std::move(k));
    }
    if (o.wants_receipts() && receipt_inbox.empty()) senders_.try_emplace(from.id(), from.weak_peer());
    const auto first = o.wants_receipts() ? std::min(o.receipt_due, o.expires) : o.expires;
    offers_.add(std::move(o));
    ++counters_.offers;
    if (offer_added_) offer_added_(first);
  }

  if (rid == 0) return;
  gateways.assign(inbox_of.begin(), inbox_of.end());
  if (counted) return from.send(builder_.send_result(rid, gateways, routed, 0, 0, outcomes_, capped));
  // An expiry alone: answered as a plain send.
  if (keys.size() == 1 && routed == 0)
    return from.send_error(rid, errc::no_route, "no route for " + std::string(keys[0]));
  from.send(builder_.send_result(rid, gateways, routed));
}

void offer_handler::send_receipt(offer_table::offer& o, const offer_table::key_state& k, std::uint8_t outcome,
                                 clock::time_point now) {
  const auto elapsed = std::chrono::duration_cast<std::chrono::microseconds>(now - o.sent).count();
  const auto frame =
      builder_.receipt(o.id, k.key, k.inbox, outcome, static_cast<std::uint64_t>(std::max<std::int64_t>(elapsed, 0)));
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
  const auto now = now_();
  const auto n = offers_.ack(m.offer_id(), key, from.inboxes(), [&](offer_table::offer& o, offer_table::key_state& k) {
    ++counters_.receipts_acked;
    if (o.wants_receipts()) {
      k.receipt_sent = true;
      send_receipt(o, k, static_cast<std::uint8_t>(wire::ReceiptOutcome::acked), now);
    }
  });
  if (n == 0)
    return from.send_error(
        rid, errc::not_found,
        fmt::format("offer {} has no unacknowledged {} (unknown, expired or withdrawn)", m.offer_id(),
                    key.empty() ? std::string("key in this connection's inboxes") : fmt::format("key '{}'", key)));
  if (rid != 0) from.send(builder_.ok(rid));
}

void offer_handler::withdraw(peer& from, std::uint64_t rid, const wire::Withdraw& m) {
  if (!from.granted().offers) return from.send_error(rid, errc::unsupported_message, no_offers_message);
  offer_table::offer* o = offers_.find(m.offer_id());
  if (!o)
    return from.send_error(rid, errc::not_found,
                           fmt::format("offer {} is not live (unknown, expired or withdrawn)", m.offer_id()));
  if (!from.may_touch(o->owner))
    return from.send_forbidden(rid, "Withdraw", fmt::format("offer {}", m.offer_id()),
                               "it belongs to another principal");
  std::uint32_t dropped = 0, notified = 0, pending = 0;
  for (const auto& k : o->keys) pending += k.pending ? 1 : 0;
  // One delivery per inbox: dropped if still queued, else told.
  std::vector<std::string_view> seen, inbox_keys;
  for (const auto& k : o->keys) {
    if (k.inbox.empty() || std::find(seen.begin(), seen.end(), k.inbox) != seen.end()) continue;
    seen.push_back(k.inbox);
    delivery_target* t = routing_.inbox_owner(k.inbox);
    if (!t) continue;
    if (const auto n = t->withdraw(o->id); n > 0) {
      dropped += static_cast<std::uint32_t>(n);
      continue;
    }
    if (!t->wants_offer_fields()) continue;
    inbox_keys.clear();
    for (const auto& other : o->keys)
      if (other.inbox == k.inbox) inbox_keys.push_back(other.key);
    t->notify(builder_.withdrawn(o->id, k.inbox, inbox_keys));
    ++notified;
  }
  const std::uint64_t id = o->id;
  offers_.remove(id);
  ++counters_.offers_withdrawn;
  logger_->debug("conn={} offer={} withdrawn: {} queued copies dropped, {} gateways told, {} pending removed",
                 from.id(), id, dropped, notified, pending);
  from.send(builder_.withdraw_result(rid, id, dropped, notified, pending));
}

void offer_handler::pending(peer& from, std::uint64_t rid, const wire::PendingOffers& m) {
  if (!from.granted().offers) return from.send_error(rid, errc::unsupported_message, no_offers_message);
  const std::string_view key = m.route_key()->string_view();
  const auto now = now_();
  const auto list = offers_.pending(key, now, m.limit());
  std::vector<protocol::pending_offer_fields> out;
  out.reserve(list.size());
  // Keep the answer inside one frame: the oldest first, as many as fit.
  auto budget = protocol::answer_budget::for_records(config_.max_frame);
  for (const auto* o : list) {
    if (!budget.take(o->payload.size() + protocol::record_overhead)) break;
    out.push_back({o->id,
                   {reinterpret_cast<const std::uint8_t*>(o->payload.data()), o->payload.size()},
                   ms32(o->expires - now),
                   ms32(now - o->sent)});
  }
  from.send(builder_.pending_offers_result(rid, key, out));
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
  from.send(builder_.exposure_result(rid, counts));
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
