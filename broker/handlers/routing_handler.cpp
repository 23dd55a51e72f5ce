#include "broker/handlers/routing_handler.hpp"

#include "broker/requests/durable_pipeline.hpp"
#include "broker/handlers/offer_handler.hpp"
#include "broker/cluster/route_relay.hpp"
#include "broker/tables/record_destination.hpp"
#include "broker/requests/wire_error.hpp"
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

constexpr std::size_t max_key_length = 1024;
constexpr std::size_t max_value_length = 64 * 1024;

std::uint32_t list_limit(std::uint32_t asked) {
  return asked == 0 ? protocol::default_list_limit : std::min(asked, protocol::max_list_limit);
}

std::uint32_t ms32(milliseconds d) {
  return static_cast<std::uint32_t>(std::clamp<std::int64_t>(d.count(), 0, UINT32_MAX));
}

protocol::lease_info_fields fields(const lease_info& l) { return {l.id, ms32(l.ttl), ms32(l.remaining)}; }

protocol::registry_entry_fields fields(const registry_view& v) {
  return {v.key, v.value, v.version, v.lease, ms32(v.remaining)};
}

std::string_view view(const flatbuffers::String* s) { return s ? s->string_view() : std::string_view{}; }

}  // namespace

routing_handler::routing_handler(const server_config& config, lease_table& leases, routing_table& routing, fanout& fan,
                                 durable_pipeline* durable, protocol::frame_builder& builder,
                                 std::shared_ptr<spdlog::logger> logger)
    : config_(config),
      leases_(leases),
      routing_(routing),
      fanout_(fan),
      durable_(durable),
      builder_(builder),
      logger_(std::move(logger)) {}

bool routing_handler::owns(peer& from, std::uint64_t rid, std::string_view operation, std::optional<lease_id> lease,
                           std::string_view what) {
  if (!from.principal() || !lease) return true;
  const auto owner = leases_.owner_of(*lease);
  if (!owner || from.may_touch(*owner)) return true;
  from.send_forbidden(rid, operation, what, "it belongs to another principal");
  return false;
}

void routing_handler::lease_gone(peer& from, std::uint64_t rid) {
  from.send_error(rid, errc::not_found, "lease not found (expired or revoked)");
}

void routing_handler::leases_full(peer& from, std::uint64_t rid) {
  from.send_error(rid, errc::limit_exceeded,
                  "the server holds max-leases (" + std::to_string(config_.max_leases) + ") leases");
}

void routing_handler::lease_grant(peer& from, std::uint64_t rid, const wire::LeaseGrant& m) {
  if (leases_.size() >= config_.max_leases) return leases_full(from, rid);
  const auto l = leases_.grant(milliseconds(m.ttl_ms()), from.owner());
  logger_->debug("conn={} lease={} granted ttl={}ms", from.id(), l.id, l.ttl.count());
  from.send(builder_.lease_info(rid, fields(l)));
}

void routing_handler::lease_keepalive(peer& from, std::uint64_t rid, const wire::LeaseKeepAlive& m) {
  if (!owns(from, rid, "LeaseKeepAlive", m.lease_id(), fmt::format("lease {}", m.lease_id()))) return;
  if (auto l = leases_.keepalive(m.lease_id()))
    from.send(builder_.lease_info(rid, fields(*l)));
  else
    lease_gone(from, rid);
}

void routing_handler::lease_revoke(peer& from, std::uint64_t rid, const wire::LeaseRevoke& m) {
  const lease_id id = m.lease_id();
  if (!owns(from, rid, "LeaseRevoke", id, fmt::format("lease {}", id))) return;
  const auto on_remove = [this](lease_id l, lease_attachment* first) { routing_.remove_lease(l, first); };
  if (!leases_.revoke(id, on_remove)) return lease_gone(from, rid);
  logger_->debug("conn={} lease={} revoked", from.id(), id);
  if (rid != 0) from.send(builder_.ok(rid));
}

void routing_handler::lease_time_to_live(peer& from, std::uint64_t rid, const wire::LeaseTimeToLive& m) {
  if (!owns(from, rid, "LeaseTimeToLive", m.lease_id(), fmt::format("lease {}", m.lease_id()))) return;
  if (auto l = leases_.time_to_live(m.lease_id()))
    from.send(builder_.lease_info(rid, fields(*l)));
  else
    lease_gone(from, rid);
}

void routing_handler::lease_list(peer& from, std::uint64_t rid, const wire::LeaseList& m) {
  const auto fits = protocol::answer_budget::for_list(config_.max_frame).count_of(protocol::lease_item_bytes);
  lease_id next = 0;
  const auto list = leases_.list(std::min<std::size_t>(list_limit(m.limit()), fits), m.after(), &next);
  std::vector<protocol::lease_info_fields> out;
  out.reserve(list.size());
  for (const auto& l : list) out.push_back(fields(l));
  from.send(builder_.lease_list_result(rid, out, next, leases_.size()));
}

void routing_handler::registry_put(peer& from, std::uint64_t rid, const wire::RegistryPut& m) {
  const std::string_view key = m.key()->string_view();
  const std::string_view value = view(m.value());
  if (key.empty() || key.size() > max_key_length || value.size() > max_value_length)
    return from.send_error(rid, errc::bad_request, "registry keys are 1..1024 bytes, values at most 64 KiB");
  if (m.lease_id() == 0 && m.ttl_ms() == 0)
    return from.send_error(rid, errc::bad_request, "a registry entry needs a lease_id or a ttl_ms");
  // Only a new key counts against the limit; an entry with its own TTL
  // also takes a lease.
  if (routing_.entries() >= config_.max_registry_entries && !routing_.get(key))
    return from.send_error(
        rid, errc::limit_exceeded,
        "the registry holds max-registry-entries (" + std::to_string(config_.max_registry_entries) + ") entries");
  if (m.lease_id() == 0 && leases_.size() >= config_.max_leases) return leases_full(from, rid);
  if (from.principal()) {
    // Both the lease it goes under and the entry it replaces must be ours.
    if (m.lease_id() != 0 && !owns(from, rid, "RegistryPut", m.lease_id(), fmt::format("lease {}", m.lease_id())))
      return;
    if (!owns(from, rid, "RegistryPut", routing_.entry_lease(key), fmt::format("registry key '{}'", key))) return;
  }
  if (cluster_) {
    // The key's partition owner must be in reach to confirm it.
    if (cluster_->refuse_put(from, rid, key)) return;
  }
  if (!routing_.put(key, value, m.lease_id(), milliseconds(m.ttl_ms()), from.owner())) return lease_gone(from, rid);
  if (cluster_) {
    const auto* who = from.principal();
    return cluster_->confirm_put(from, rid, key, who && !who->admin ? std::string_view(who->name) : std::string_view(),
                                 builder_.registry_entry(rid, fields(*routing_.get(key))));
  }
  from.send(builder_.registry_entry(rid, fields(*routing_.get(key))));
}

void routing_handler::registry_get(peer& from, std::uint64_t rid, const wire::RegistryGet& m) {
  if (auto e = routing_.get(m.key()->string_view()))
    from.send(builder_.registry_entry(rid, fields(*e)));
  else
    from.send_error(rid, errc::not_found, "no such key (or it expired)");
}

void routing_handler::registry_delete(peer& from, std::uint64_t rid, const wire::RegistryDelete& m) {
  const std::string_view key = m.key()->string_view();
  if (!owns(from, rid, "RegistryDelete", routing_.entry_lease(key), fmt::format("registry key '{}'", key))) return;
  if (!routing_.erase(key)) return from.send_error(rid, errc::not_found, "no such key (or it expired)");
  if (rid != 0) from.send(builder_.ok(rid));
}

void routing_handler::registry_list(peer& from, std::uint64_t rid, const wire::RegistryList& m) {
  bool more = false;
  auto list = routing_.list(view(m.prefix()), list_limit(m.limit()), more);
  // Keep the answer inside one frame: cut the list and say so.
  std::vector<protocol::registry_entry_fields> out;
  auto budget = protocol::answer_budget::for_list(config_.max_frame);
  for (const auto& e : list) {
    if (!budget.take(e.key.size() + e.value.size() + protocol::registry_item_overhead)) {
      more = true;
      break;
    }
    out.push_back(fields(e));
  }
  from.send(builder_.registry_list_result(rid, out, more));
}

void routing_handler::inbox_open(peer& from, std::uint64_t rid, const wire::InboxOpen& m) {
  const std::string_view inbox_id = m.inbox_id()->string_view();
  if (inbox_id.empty() || inbox_id.size() > max_key_length)
    return from.send_error(rid, errc::bad_request, "inbox ids are 1..1024 bytes");
  auto& mine = from.inboxes();
  const bool held = std::find(mine.begin(), mine.end(), inbox_id) != mine.end();
  if (mine.size() >= config_.max_inboxes && !held)
    return from.send_error(
        rid, errc::limit_exceeded,
        "this connection has max-inboxes (" + std::to_string(config_.max_inboxes) + ") inboxes open");
  if (from.principal()) {
    if (!owns(from, rid, "InboxOpen", m.lease_id(), fmt::format("lease {}", m.lease_id()))) return;
    if (!owns(from, rid, "InboxOpen", routing_.inbox_lease(inbox_id), fmt::format("inbox '{}'", inbox_id))) return;
  }
  if (const auto ec = routing_.open_inbox(inbox_id, m.lease_id(), &from))
    return from.send_error(
        rid, wire_code(ec),
        ec == errc::inbox_taken ? "inbox is open on another live connection" : "lease not found (expired or revoked)");
  if (!held) mine.emplace_back(inbox_id);
  from.restart_drop_reports();  // a durable inbox starts here: see pubsub_handler::subscribe
  logger_->info("conn={} inbox={} opened lease={}", from.id(), inbox_id, m.lease_id());
  if (rid != 0) from.send(builder_.ok(rid));
}

void routing_handler::inbox_close(peer& from, std::uint64_t rid, const wire::InboxClose& m) {
  const std::string_view inbox_id = m.inbox_id()->string_view();
  if (!routing_.close_inbox(inbox_id, &from))
    return from.send_error(rid, errc::not_found, "inbox not open on this connection");
  std::erase(from.inboxes(), inbox_id);
  if (rid != 0) from.send(builder_.ok(rid));
}

void routing_handler::send(peer& from, std::uint64_t rid, const wire::Send& m) {
  std::uint32_t expires_in_ms = 0;  // a durable send's expiry (checked below)
  if (offer_handler::is_offer(m)) [[unlikely]] {
    // A durable send with only an expiry stays here; everything else of
    // the offers goes to offer_handler.
    if (!offer_handler::is_expiring_durable_send(m)) {
      if (offers_) return offers_->send(from, rid, m);
      return from.send_error(rid, errc::unsupported_message, "this server does not take offers");
    }
    if (offer_handler::refuse_expiry(from, rid, m.expires_in_ms(), config_)) return;
    expires_in_ms = m.expires_in_ms();
  }
  const auto* p = m.payload();
  const protocol::bytes_view payload = p ? protocol::bytes_view{p->data(), p->size()} : protocol::bytes_view{};
  // The keys as views into the frame, in a reused buffer.
  auto& keys = fanout_.key_scratch();
  keys.clear();
  for (const auto* k : *m.route_keys()) keys.push_back(k->string_view());

  if (m.stream() && m.stream()->size() > 0) {
    // Durable send: append first, route and deliver once the log has it.
    // The record stores every key, routed or not (record_destination.hpp).
    const std::string_view stream = m.stream()->string_view();
    if (!from.granted().sequence_log || !durable_)
      return from.send_error(rid, errc::unsupported_message, no_log_message(durable_ != nullptr));
    const auto bytes = std::as_bytes(payload);
    const std::size_t expiry_bytes = expires_in_ms != 0 ? destination_expiry_bytes : 0;
    if (durable_->check(stream, bytes.size(), route_keys_destination_size(keys) + expiry_bytes))
      return from.send_error(rid, errc::bad_request, durable_pipeline::check_message());
    if (keys.empty()) return from.send_error(rid, errc::bad_request, "a send needs at least one route key");
    auto& destination = durable_->destination_scratch();
    encode_route_keys_destination(keys, destination, expires_in_ms);
    durable_->append(from, rid, stream, bytes, destination, {}, keys, std::chrono::milliseconds(expires_in_ms));
    return;
  }

  if (cluster_) return cluster_->send(from, rid, keys, payload);
  auto& gateways = fanout_.gateway_scratch();
  const std::uint32_t routed = fanout_.send_to_users(keys, payload, nullptr, gateways, batch_lease_now_);
  // A send to one user that found no route is an error (send answers "no
  // route"); a send to several reports per key.
  if (keys.size() == 1 && routed == 0)
    return from.send_error(rid, errc::no_route, "no route for " + std::string(keys[0]));
  if (rid != 0) from.send(builder_.send_result(rid, gateways, routed));
}

void routing_handler::look_ahead(std::span<const protocol::frame_view> frames, std::size_t i) const noexcept {
  const auto key_of = [&](std::size_t j) -> std::string_view {
    if (j >= frames.size() || frames[j].frame->message_type() != wire::Message::Send) return {};
    const auto* keys = frames[j].frame->message_as_Send()->route_keys();
    return keys && keys->size() > 0 ? keys->Get(0)->string_view() : std::string_view{};
  };
  const auto slot = [&](std::size_t j) {
    if (const auto k = key_of(j); !k.empty()) routing_.prefetch_slot(k);
  };
  const auto entry = [&](std::size_t j) {
    if (const auto k = key_of(j); !k.empty()) routing_.prefetch_entry(k);
  };
  if (i == 0) {
    // One clock reading for the batch's sends (see batch_lease_now_).
    batch_lease_now_ = routing_.lease_now();
    // The first frames of a batch had nothing before them to do it.
    slot(0);
    slot(1);
    entry(0);
  }
  slot(i + 2);
  entry(i + 1);
}

void routing_handler::disconnected(peer& p) {
  routing_.disconnect(&p, p.inboxes());
  p.inboxes().clear();
}

}  // namespace switchyard::broker
