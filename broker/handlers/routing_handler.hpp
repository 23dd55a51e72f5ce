#pragma once
// Leases, the routing registry, gateway inboxes and send-to-user
// (capability "routing"; docs/protocol.md §6). A send without a stream is
// routed at once (fanout::send_to_users); one with a stream goes through
// the durable pipeline first.
//
// Loop thread only. Each handler answers on `from` itself; the dispatcher
// has checked the "routing" capability.

#include "broker/delivery/fanout.hpp"
#include "broker/tables/lease_table.hpp"
#include "broker/requests/peer.hpp"
#include "broker/tables/routing_table.hpp"
#include "broker/config/server_config.hpp"
#include "protocol/frame_builder.hpp"
#include "protocol/frame_parser.hpp"

#include <cstdint>
#include <memory>
#include <span>

namespace spdlog {
class logger;
}

namespace switchyard::broker {

class durable_pipeline;
class offer_handler;
class route_relay;

class routing_handler {
 public:
  // Borrows everything for its lifetime; `durable` is null without a
  // sequence log.
  routing_handler(const server_config& config, lease_table& leases, routing_table& routing, fanout& fan,
                  durable_pipeline* durable, protocol::frame_builder& builder, std::shared_ptr<spdlog::logger> logger);

  void lease_grant(peer& from, std::uint64_t request_id, const protocol::wire::LeaseGrant& m);
  void lease_keepalive(peer& from, std::uint64_t request_id, const protocol::wire::LeaseKeepAlive& m);
  void lease_revoke(peer& from, std::uint64_t request_id, const protocol::wire::LeaseRevoke& m);
  void lease_time_to_live(peer& from, std::uint64_t request_id, const protocol::wire::LeaseTimeToLive& m);
  void lease_list(peer& from, std::uint64_t request_id, const protocol::wire::LeaseList& m);
  void registry_put(peer& from, std::uint64_t request_id, const protocol::wire::RegistryPut& m);
  void registry_get(peer& from, std::uint64_t request_id, const protocol::wire::RegistryGet& m);
  void registry_delete(peer& from, std::uint64_t request_id, const protocol::wire::RegistryDelete& m);
  void registry_list(peer& from, std::uint64_t request_id, const protocol::wire::RegistryList& m);
  void inbox_open(peer& from, std::uint64_t request_id, const protocol::wire::InboxOpen& m);
  void inbox_close(peer& from, std::uint64_t request_id, const protocol::wire::InboxClose& m);
  void send(peer& from, std::uint64_t request_id, const protocol::wire::Send& m);
  // Sends that carry an expiry or offer fields go to `offers` (null: they
  // are answered unsupported_message).
  void use_offers(offer_handler* offers) noexcept { offers_ = offers; }
  // Cluster mode (docs/cluster.md, "Routes and send-to-user"): puts are
  // confirmed by the key's partition owner before they are answered, and
  // sends without stream or offer fields go through `relay` (null: one
  // node, as before).
  void use_cluster(route_relay* relay) noexcept { cluster_ = relay; }

  // Cache hints before frames[i] is handled: a send's routing lookup misses
  // the cache twice (slot, then entry), so the slot is loaded two sends
  // ahead and the entry one ahead.
  void look_ahead(std::span<const protocol::frame_view> frames, std::size_t i) const noexcept;

  // `p` closed: its inboxes stay bound to their leases (a gateway that
  // reconnects within the TTL reopens them) but lose their target.
  void disconnected(peer& p);

 private:
  // Ownership (docs/security.md, "Ownership"): a lease, and the registry
  // entries and inbox bound to it, may be touched only by the principal
  // that granted it, or an admin. True when `from` may touch `lease`
  // (also when there is no such lease: the caller answers not_found);
  // otherwise answers forbidden, naming `operation` (the request's message
  // type) and `what`, and returns false.
  bool owns(peer& from, std::uint64_t request_id, std::string_view operation, std::optional<lease_id> lease,
            std::string_view what);
  void lease_gone(peer& from, std::uint64_t request_id);
  void leases_full(peer& from, std::uint64_t request_id);

  const server_config& config_;
  lease_table& leases_;
  routing_table& routing_;
  fanout& fanout_;
  // The lease time the sends of the batch being handled are routed at:
  // read once per batch by look_ahead(frames, 0), which the connection
  // calls before it handles a batch's first frame (and a Send is handled
  // only within a batch: connection::handle_input). A batch holds at most
  // 32 frames, so a route is judged at most that many sends late.
  // Until the first batch: the end of time, so that a send handled without
  // look_ahead (a broken contract) finds every lease expired, never alive.
  mutable mono_clock::time_point batch_lease_now_ = mono_clock::time_point::max();
  durable_pipeline* durable_;
  offer_handler* offers_ = nullptr;
  route_relay* cluster_ = nullptr;
  protocol::frame_builder& builder_;
  std::shared_ptr<spdlog::logger> logger_;
};

}  // namespace switchyard::broker
