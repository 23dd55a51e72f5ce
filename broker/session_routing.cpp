// session: the lease, registry, inbox and send handlers (capability
// "routing"). Split from session.cpp to keep each file about one thing.

#include "broker/log_subject.hpp"
#include "broker/server_core.hpp"
#include "broker/session.hpp"
#include "protocol/limits.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <unordered_map>

namespace switchyard::broker {

namespace wire = protocol::wire;
using protocol::errc;
using std::chrono::milliseconds;

namespace {

constexpr std::size_t max_key_length = 1024;
constexpr std::size_t max_value_length = 64 * 1024;
constexpr std::uint32_t default_list_limit = 1000;
constexpr std::uint32_t max_list_limit = protocol::max_list_items;

std::uint32_t list_limit(std::uint32_t asked) {
  return asked == 0 ? default_list_limit : std::min(asked, max_list_limit);
}

std::uint32_t ms32(milliseconds d) {
  return static_cast<std::uint32_t>(std::clamp<std::int64_t>(d.count(), 0, UINT32_MAX));
}

protocol::lease_info_fields fields(const lease_info& l) {
  return {l.id, ms32(l.ttl), ms32(l.remaining)};
}

protocol::registry_entry_fields fields(const registry_view& v) {
  return {v.key, v.value, v.version, v.lease, ms32(v.remaining)};
}

std::string_view view(const flatbuffers::String* s) { return s ? s->string_view() : std::string_view{}; }

}  // namespace

void session::handle_routing(const wire::Frame& frame) {
  const std::uint64_t rid = frame.request_id();
  auto& leases = core_.leases;
  auto& routing = core_.routing;
  auto& b = core_.builder;
  const auto lease_gone = [&] { send_error(rid, errc::not_found, "lease not found (expired or revoked)"); };
  const auto on_remove = [&](lease_id id, lease_attachment* first) { routing.remove_lease(id, first); };
  const auto leases_full = [&] {
    send_error(rid, errc::limit_exceeded,
               "the server holds max-leases (" + std::to_string(core_.config.max_leases) + ") leases");
  };

  switch (frame.message_type()) {
    case wire::Message::LeaseGrant: {
      if (leases.size() >= core_.config.max_leases) return leases_full();
      const auto l = leases.grant(milliseconds(frame.message_as_LeaseGrant()->ttl_ms()));
      core_.log->debug("conn={} lease={} granted ttl={}ms", id_, l.id, l.ttl.count());
      send(b.lease_info(rid, fields(l)));
      return;
    }
    case wire::Message::LeaseKeepAlive: {
      if (auto l = leases.keepalive(frame.message_as_LeaseKeepAlive()->lease_id())) send(b.lease_info(rid, fields(*l)));
      else lease_gone();
      return;
    }
    case wire::Message::LeaseRevoke: {
      const lease_id id = frame.message_as_LeaseRevoke()->lease_id();
      if (!leases.revoke(id, on_remove)) return lease_gone();
      core_.log->debug("conn={} lease={} revoked", id_, id);
      if (rid != 0) send(b.ok(rid));
      return;
    }
    case wire::Message::LeaseTimeToLive: {
      if (auto l = leases.time_to_live(frame.message_as_LeaseTimeToLive()->lease_id())) send(b.lease_info(rid, fields(*l)));
      else lease_gone();
      return;
    }
    case wire::Message::LeaseList: {
      // About 40 bytes per lease on the wire: stay well inside one frame.
      const std::uint32_t fits = std::max<std::uint32_t>(1, core_.config.max_frame / 2 / 40);
      const auto list = leases.list(std::min(list_limit(frame.message_as_LeaseList()->limit()), fits));
      std::vector<protocol::lease_info_fields> out;
      out.reserve(list.size());
      for (const auto& l : list) out.push_back(fields(l));
      send(b.lease_list_result(rid, out));
      return;
    }
    case wire::Message::RegistryPut: {
      const auto& m = *frame.message_as_RegistryPut();
      const std::string_view key = m.key()->string_view();
      const std::string_view value = view(m.value());
      if (key.empty() || key.size() > max_key_length || value.size() > max_value_length)
        return send_error(rid, errc::bad_request, "registry keys are 1..1024 bytes, values at most 64 KiB");
      if (m.lease_id() == 0 && m.ttl_ms() == 0)
        return send_error(rid, errc::bad_request, "a registry entry needs a lease_id or a ttl_ms");
      // Only a new key counts against the limit; an entry with its own TTL
      // also takes a lease.
      if (routing.entries() >= core_.config.max_registry_entries && !routing.get(key))
        return send_error(rid, errc::limit_exceeded,
                          "the registry holds max-registry-entries (" +
                              std::to_string(core_.config.max_registry_entries) + ") entries");
      if (m.lease_id() == 0 && leases.size() >= core_.config.max_leases) return leases_full();
      auto version = routing.put(key, value, m.lease_id(), milliseconds(m.ttl_ms()));
      if (!version) return lease_gone();
      send(b.registry_entry(rid, fields(*routing.get(key))));
      return;
    }
    case wire::Message::RegistryGet: {
      if (auto e = routing.get(frame.message_as_RegistryGet()->key()->string_view())) send(b.registry_entry(rid, fields(*e)));
      else send_error(rid, errc::not_found, "no such key (or it expired)");
      return;
    }
    case wire::Message::RegistryDelete: {
      if (!routing.erase(frame.message_as_RegistryDelete()->key()->string_view()))
        return send_error(rid, errc::not_found, "no such key (or it expired)");
      if (rid != 0) send(b.ok(rid));
      return;
    }
    case wire::Message::RegistryList: {
      const auto& m = *frame.message_as_RegistryList();
      bool more = false;
      auto list = routing.list(view(m.prefix()), list_limit(m.limit()), more);
      // Keep the answer well inside one frame: cut the list and say so.
      std::vector<protocol::registry_entry_fields> out;
      std::size_t bytes = 1024;
      for (const auto& e : list) {
        bytes += e.key.size() + e.value.size() + 64;
        if (bytes > core_.config.max_frame / 2) {
          more = true;
          break;
        }
        out.push_back(fields(e));
      }
      send(b.registry_list_result(rid, out, more));
      return;
    }
    case wire::Message::InboxOpen: {
      const auto& m = *frame.message_as_InboxOpen();
      const std::string_view inbox_id = m.inbox_id()->string_view();
      if (inbox_id.empty() || inbox_id.size() > max_key_length)
        return send_error(rid, errc::bad_request, "inbox ids are 1..1024 bytes");
      if (inbox_ids_.size() >= core_.config.max_inboxes &&
          std::find(inbox_ids_.begin(), inbox_ids_.end(), inbox_id) == inbox_ids_.end())
        return send_error(rid, errc::limit_exceeded,
                          "this connection has max-inboxes (" + std::to_string(core_.config.max_inboxes) +
                              ") inboxes open");
      if (const auto ec = routing.open_inbox(inbox_id, m.lease_id(), this)) {
        return send_error(rid, static_cast<errc>(ec.value()),
                          ec == errc::inbox_taken ? "inbox is open on another live connection"
                                                  : "lease not found (expired or revoked)");
      }
      if (std::find(inbox_ids_.begin(), inbox_ids_.end(), inbox_id) == inbox_ids_.end())
        inbox_ids_.emplace_back(inbox_id);
      drops_reported_.clear();  // a durable inbox starts here: see handle_subscribe
      core_.log->info("conn={} inbox={} opened lease={}", id_, inbox_id, m.lease_id());
      if (rid != 0) send(b.ok(rid));
      return;
    }
    case wire::Message::InboxClose: {
      const std::string_view inbox_id = frame.message_as_InboxClose()->inbox_id()->string_view();
      if (!routing.close_inbox(inbox_id, this))
        return send_error(rid, errc::not_found, "inbox not open on this connection");
      std::erase(inbox_ids_, inbox_id);
      if (rid != 0) send(b.ok(rid));
      return;
    }
    case wire::Message::Send:
      handle_send(rid, *frame.message_as_Send());
      return;
    default:
      return;
  }
}

std::uint32_t session::deliver_to_users(server_core& core, std::span<const std::string_view> keys,
                                        protocol::bytes_view payload, const channel_table::log_position* position,
                                        std::vector<std::string_view>& gateways) {
  const auto encode = [&](session* owner, std::string_view inbox, std::span<const std::string_view> inbox_keys) {
    // A log position is a field only peers granted "log" get.
    const bool positioned = position && owner->wants_log_positions();
    owner->deliver(positioned ? core.builder.inbox_delivery(inbox, inbox_keys, payload, position->stream, position->seq,
                                                            position->epoch)
                              : core.builder.inbox_delivery(inbox, inbox_keys, payload));
  };
  gateways.assign(keys.size(), {});
  std::uint32_t routed = 0;
  if (keys.size() == 1) {
    // Send to a user: nothing to group.
    if (const auto to = core.routing.route(keys[0]); to.owner) {
      encode(to.owner, to.inbox, keys);
      gateways[0] = to.inbox;
      routed = 1;
    }
  } else {
    // Resolve every key, then group by inbox: each inbox gets one delivery
    // listing its keys, encoded once.
    std::size_t used = 0;
    core.send_index.clear();
    for (std::size_t i = 0; i < keys.size(); ++i) {
      const auto to = core.routing.route(keys[i]);
      if (!to.owner) continue;
      auto [it, fresh] = core.send_index.try_emplace(to.inbox, used);
      if (fresh) {
        if (used == core.send_targets.size()) core.send_targets.emplace_back();
        auto& t = core.send_targets[used++];
        t.inbox = to.inbox;
        t.owner = to.owner;
        t.keys.clear();
      }
      core.send_targets[it->second].keys.push_back(keys[i]);
      gateways[i] = to.inbox;
      ++routed;
    }
    for (std::size_t t = 0; t < used; ++t)
      encode(core.send_targets[t].owner, core.send_targets[t].inbox, core.send_targets[t].keys);
  }
  core.counters.sends_routed += routed;
  core.counters.sends_unrouted += keys.size() - routed;
  return routed;
}

void session::handle_send(std::uint64_t rid, const wire::Send& m) {
  const auto* p = m.payload();
  const protocol::bytes_view payload = p ? protocol::bytes_view{p->data(), p->size()} : protocol::bytes_view{};
  // The keys as views into the frame, in a reused buffer.
  auto& keys = core_.send_keys;
  keys.clear();
  for (const auto* k : *m.route_keys()) keys.push_back(k->string_view());

  if (m.stream() && m.stream()->size() > 0) {
    // Durable send: append first, route and deliver once the log has it.
    // The record stores every key, routed or not (log_subject.hpp).
    const auto bytes = std::as_bytes(std::span(payload.data(), payload.size()));
    if (!can_append(rid, m.stream()->string_view(), bytes.size(), route_keys_subject_size(keys))) return;
    if (keys.empty()) return send_error(rid, errc::bad_request, "a send needs at least one route key");
    auto& subject = core_.subject_scratch;
    encode_route_keys_subject(keys, subject);
    append_to_log(rid, m.stream()->string_view(), bytes, subject, {}, keys);
    return;
  }

  auto& gateways = core_.send_gateways;
  const std::uint32_t routed = deliver_to_users(core_, keys, payload, nullptr, gateways);
  // A send to one user that found no route is an error (send answers "no
  // route"); a send to several reports per key.
  if (keys.size() == 1 && routed == 0) return send_error(rid, errc::no_route, "no route for " + std::string(keys[0]));
  if (rid != 0) send(core_.builder.send_result(rid, gateways, routed));
}

}  // namespace switchyard::broker
