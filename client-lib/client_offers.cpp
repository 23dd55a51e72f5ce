// client: offers (capability "offers": expiring publishes and sends, offer
// ids, acks, receipts, withdrawal, pending offers, exposure) and the
// broker's flags (FlagSet, FlagList; capability "admin"). The frames'
// conversions are offer_frames.hpp's; Receipt and Withdrawn arrive through
// client_connection.cpp's dispatch.

#include "switchyard/client.hpp"

#include "client_impl_inline.hpp"
#include "offer_frames.hpp"

#include <algorithm>

namespace switchyard {

namespace {

using std::chrono::milliseconds;

template <class T>
using result = std::expected<T, std::error_code>;

std::error_code mismatch() { return make_error_code(errc::protocol_violation); }
std::error_code bad_request() { return make_error_code(errc::bad_request); }

// A duration on the wire: negative is refused, above 2^32 - 1 ms clamped.
result<std::uint32_t> wire_ms(milliseconds d) {
  if (d.count() < 0) return std::unexpected(bad_request());
  return static_cast<std::uint32_t>(std::min<std::int64_t>(d.count(), UINT32_MAX));
}

std::string text(const flatbuffers::String* s) { return s ? s->str() : std::string(); }

milliseconds ms(std::uint32_t v) { return milliseconds(v); }

key_outcome to_outcome(wire::KeyOutcome o) {
  switch (o) {
    case wire::KeyOutcome::routed:
      return key_outcome::routed;
    case wire::KeyOutcome::capped:
      return key_outcome::capped;
    default:
      return key_outcome::no_route;  // no_route, or a later broker's "not delivered"
  }
}

flag_info to_flag(const wire::FlagInfo& f) {
  return {text(f.name()), f.percent(), f.connections_on(), f.connections_off()};
}

// Whether the broker granted "admin" to this session.
bool granted_admin(detail::client_state& c) {
  switchyard::lock_guard lock(c.mu);
  return std::find(c.caps.begin(), c.caps.end(), protocol::capability::admin) != c.caps.end();
}

}  // namespace

// ------------------------------------------------------------ conversions

result<protocol::offer_fields> detail::offer_fields_of(const offer_options& o) {
  const auto expires = wire_ms(o.expires_in);
  const auto receipt_timeout = wire_ms(o.receipt_timeout);
  const auto window = wire_ms(o.cap_window);
  if (!expires || !receipt_timeout || !window) return std::unexpected(bad_request());
  if (o.offer_id != 0 && *expires == 0) return std::unexpected(bad_request());
  if (o.offer_id == 0 && *receipt_timeout != 0) return std::unexpected(bad_request());
  protocol::offer_fields f;
  f.expires_in_ms = *expires;
  f.offer_id = o.offer_id;
  f.receipt_timeout_ms = *receipt_timeout;
  f.receipt_inbox = o.receipt_inbox;
  f.cap_max = o.cap_max;
  f.cap_window_ms = *window;
  return f;
}

result<std::uint32_t> detail::expiry_ms(milliseconds expires_in) { return wire_ms(expires_in); }

result<offer_result> detail::parse_offer_result(const wire::Frame& f, std::size_t keys) {
  const auto* m = f.message_as_SendResult();
  if (!m) return std::unexpected(mismatch());
  offer_result out;
  out.routed = m->routed();
  out.capped = m->capped();
  if (m->gateways())
    for (const auto* g : *m->gateways()) out.gateways.push_back(g->str());
  if (out.gateways.size() != keys) return std::unexpected(mismatch());
  if (m->outcomes()) {
    if (m->outcomes()->size() != keys) return std::unexpected(mismatch());
    for (const auto o : *m->outcomes()) out.outcomes.push_back(to_outcome(o));
  } else {
    // A plain send (no offer id, no cap): only routed or not.
    for (const auto& g : out.gateways) out.outcomes.push_back(g.empty() ? key_outcome::no_route : key_outcome::routed);
  }
  return out;
}

offer_result detail::unrouted_result(std::size_t keys) {
  offer_result out;
  out.gateways.assign(keys, std::string());
  out.outcomes.assign(keys, key_outcome::no_route);
  return out;
}

receipt detail::to_receipt(const wire::Receipt& m) {
  return {m.offer_id(), text(m.route_key()), text(m.inbox_id()), static_cast<receipt_outcome>(m.outcome()),
          std::chrono::microseconds(static_cast<std::int64_t>(std::min<std::uint64_t>(m.elapsed_us(), INT64_MAX)))};
}

withdrawn_notice detail::to_withdrawn(const wire::Withdrawn& m) {
  withdrawn_notice out{m.offer_id(), text(m.inbox_id()), {}};
  if (m.route_keys())
    for (const auto* k : *m.route_keys()) out.route_keys.push_back(k->str());
  return out;
}

result<withdraw_result> detail::parse_withdraw_result(const wire::Frame& f) {
  const auto* m = f.message_as_WithdrawResult();
  if (!m) return std::unexpected(mismatch());
  return withdraw_result{m->dropped(), m->notified(), m->pending()};
}

result<std::vector<pending_offer>> detail::parse_pending_offers(const wire::Frame& f) {
  const auto* m = f.message_as_PendingOffersResult();
  if (!m) return std::unexpected(mismatch());
  std::vector<pending_offer> out;
  if (!m->offers()) return out;
  out.reserve(m->offers()->size());
  for (const auto* o : *m->offers()) {
    pending_offer p;
    p.offer_id = o->offer_id();
    if (const auto* b = o->payload()) {
      const auto bytes = std::as_bytes(std::span(b->data(), b->size()));
      p.payload.assign(bytes.begin(), bytes.end());
    }
    p.time_left = ms(o->time_left_ms());
    p.age = ms(o->age_ms());
    out.push_back(std::move(p));
  }
  return out;
}

result<std::vector<std::uint32_t>> detail::parse_exposure(const wire::Frame& f, std::size_t keys) {
  const auto* m = f.message_as_ExposureResult();
  if (!m) return std::unexpected(mismatch());
  std::vector<std::uint32_t> out;
  if (m->counts()) out.assign(m->counts()->begin(), m->counts()->end());
  if (out.size() != keys) return std::unexpected(mismatch());
  return out;
}

result<flag_info> detail::parse_flag_info(const wire::Frame& f) {
  const auto* m = f.message_as_FlagInfo();
  if (!m) return std::unexpected(mismatch());
  return to_flag(*m);
}

result<std::vector<flag_info>> detail::parse_flag_list(const wire::Frame& f) {
  const auto* m = f.message_as_FlagListResult();
  if (!m) return std::unexpected(mismatch());
  std::vector<flag_info> out;
  if (m->flags())
    for (const auto* x : *m->flags()) out.push_back(to_flag(*x));
  return out;
}

// ----------------------------------------------------------------- offers

std::error_code client::publish(std::string_view channel, std::span<const std::byte> payload, milliseconds expires_in) {
  if (expires_in.count() == 0) return publish(channel, payload);
  if (!protocol::is_valid_channel(channel)) return errc::invalid_channel;
  if (!impl_->offers) return errc::not_supported;
  const auto expires = detail::expiry_ms(expires_in);
  if (!expires) return expires.error();
  const protocol::bytes_view data(reinterpret_cast<const std::uint8_t*>(payload.data()), payload.size());
  return impl_->enqueue(local_builder().publish(0, channel, data, {}, *expires));
}

result<offer_result> client::send_offer(std::span<const std::string_view> route_keys,
                                        std::span<const std::byte> payload, const offer_options& options) {
  if (!impl_->offers || !impl_->routing) return std::unexpected(make_error_code(errc::not_supported));
  const auto fields = detail::offer_fields_of(options);
  if (!fields) return std::unexpected(fields.error());
  const protocol::bytes_view data(reinterpret_cast<const std::uint8_t*>(payload.data()), payload.size());
  const std::size_t keys = route_keys.size();
  auto r = impl_->call<offer_result>(
      [&](std::uint64_t id) { return local_builder().send(id, route_keys, data, {}, &*fields); },
      [keys](const wire::Frame& f) { return detail::parse_offer_result(f, keys); });
  // Not an offer (no id, no cap): the broker answers a single key without
  // a route with Error no_route, which is an outcome here.
  const bool offer = options.offer_id != 0 || options.cap_max != 0;
  if (!r && r.error() == errc::no_route && !offer) return detail::unrouted_result(keys);
  return r;
}

void client::async_send_offer(std::span<const std::string_view> route_keys, std::span<const std::byte> payload,
                              const offer_options& options, std::function<void(result<offer_result>)> done) {
  if (!impl_->offers || !impl_->routing) return done(std::unexpected(make_error_code(errc::not_supported)));
  const auto fields = detail::offer_fields_of(options);
  if (!fields) return done(std::unexpected(fields.error()));
  const protocol::bytes_view data(reinterpret_cast<const std::uint8_t*>(payload.data()), payload.size());
  const std::size_t keys = route_keys.size();
  const bool offer = options.offer_id != 0 || options.cap_max != 0;
  impl_->call_async<offer_result>(
      [&](std::uint64_t id) { return local_builder().send(id, route_keys, data, {}, &*fields); },
      [keys](const wire::Frame& f) { return detail::parse_offer_result(f, keys); },
      [keys, offer, done = std::move(done)](result<offer_result> r) {
        // As send_offer: a plain send's single key without a route is an outcome.
        if (!r && r.error() == errc::no_route && !offer) return done(detail::unrouted_result(keys));
        done(std::move(r));
      });
}

std::error_code client::ack(std::uint64_t offer_id, std::string_view route_key) {
  if (!impl_->offers) return errc::not_supported;
  if (offer_id == 0) return errc::bad_request;
  return impl_->enqueue(local_builder().offer_ack(0, offer_id, route_key));
}

std::error_code client::ack(const inbox_message& m) {
  if (!impl_->offers) return errc::not_supported;
  if (m.offer_id == 0) return errc::bad_request;
  // No keys (not a delivery's): every key of the offer delivered here.
  if (m.route_keys.empty()) return ack(m.offer_id);
  for (const auto key : m.route_keys)
    if (auto ec = ack(m.offer_id, key)) return ec;
  return {};
}

result<withdraw_result> client::withdraw(std::uint64_t offer_id) {
  if (!impl_->offers) return std::unexpected(make_error_code(errc::not_supported));
  return impl_->call<withdraw_result>([&](std::uint64_t r) { return local_builder().withdraw(r, offer_id); },
                                      detail::parse_withdraw_result);
}

result<std::vector<pending_offer>> client::pending_offers(std::string_view route_key, std::size_t limit) {
  if (!impl_->offers) return std::unexpected(make_error_code(errc::not_supported));
  const auto n = static_cast<std::uint32_t>(std::min<std::size_t>(limit, UINT32_MAX));
  return impl_->call<std::vector<pending_offer>>(
      [&](std::uint64_t r) { return local_builder().pending_offers(r, route_key, n); }, detail::parse_pending_offers);
}

result<std::vector<std::uint32_t>> client::exposure(std::span<const std::string_view> route_keys, milliseconds window) {
  if (!impl_->offers) return std::unexpected(make_error_code(errc::not_supported));
  const auto window_ms = wire_ms(window);
  if (!window_ms) return std::unexpected(window_ms.error());
  const std::size_t keys = route_keys.size();
  return impl_->call<std::vector<std::uint32_t>>(
      [&](std::uint64_t r) { return local_builder().exposure_query(r, route_keys, *window_ms); },
      [keys](const wire::Frame& f) { return detail::parse_exposure(f, keys); });
}

// ------------------------------------------------------------------ flags

result<flag_info> client::set_flag(std::string_view name, unsigned percent) {
  if (!granted_admin(*impl_)) return std::unexpected(make_error_code(errc::not_supported));
  // The wire field is one byte: 300 would arrive as 44.
  if (percent > 100) return std::unexpected(bad_request());
  return impl_->call<flag_info>(
      [&](std::uint64_t r) { return local_builder().flag_set(r, name, static_cast<std::uint8_t>(percent)); },
      detail::parse_flag_info);
}

result<std::vector<flag_info>> client::flags() {
  if (!granted_admin(*impl_)) return std::unexpected(make_error_code(errc::not_supported));
  return impl_->call<std::vector<flag_info>>([](std::uint64_t r) { return local_builder().flag_list(r); },
                                             detail::parse_flag_list);
}

}  // namespace switchyard
