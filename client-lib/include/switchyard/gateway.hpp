#pragma once
// The gateway side of send-to-user, in one object: it owns a lease (keeps
// it alive at TTL/3 and, if the lease was lost anyway, grants a new one and
// restores everything), holds the gateway's inbox, and registers the route
// keys of the users connected to this gateway. Its lease, inbox and routes
// go through its client, whose reconnect (client_options::reconnect)
// restores them after a lost connection: the gateway needs no loop of its
// own (see docs/reconnect.md).
//
//   auto conn = switchyard::client::connect(options).value();
//   auto gw = switchyard::gateway::start(*conn, {.inbox_id = "gw-7", .on_message = deliver_to_socket}).value();
//   gw->add_route("user:alice");   // sends to user:alice now arrive in on_message
//
// Threads: the gateway has none of its own. Once started, everything it
// does runs on its client's event-loop thread: the keepalive is a timer
// there, and every callback (on_message, on_lease_renewed, on_error) is
// called there, one at a time, like the client's own handlers. Callbacks
// must not block for long, and the blocking members (start, add_route,
// remove_route) return errc::would_deadlock when called there. The
// members are thread-safe; the destructor and abandon() may run on any
// thread, the loop thread included.

#include "switchyard/client.hpp"

#include <chrono>
#include <expected>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace switchyard {

struct gateway_options {
  std::string inbox_id;                         // required: this gateway's stable id, e.g. "gw-7"
  std::chrono::milliseconds lease_ttl{10'000};  // the server may clamp it
  inbox_handler on_message;                     // required; runs on the client's loop thread
  // Reuse a lease that may still be alive (a gateway reconnecting within
  // its TTL keeps its lease and routes). 0 = grant a new one.
  lease_id resume_lease = 0;
  // Called on the loop thread after a lost lease was replaced and the
  // inbox and routes restored under the new one: by the gateway (a
  // keepalive answered not_found) or by the client's restore after a
  // reconnect (the broker did not know the lease any more).
  std::function<void(lease_id old_lease, lease_id new_lease)> on_lease_renewed;
  // Called on the loop thread when a keepalive or restore failed (a
  // timeout, connection_lost for a keepalive in flight at a disconnect);
  // the next tick retries. No keepalive is sent while the client
  // reconnects.
  std::function<void(std::error_code)> on_error;
  // Route keys registered by start() itself (more come with add_route).
  // With a durable inbox resuming, list the users here: replays are
  // filtered by the routes held when they arrive.
  std::vector<std::string> routes;
  // Set: the inbox is durable (client::open_inbox_durable): sends with a
  // stream arrive once each and in order, recovered from the log after
  // drops, a lease renewal, or, with durable->resume_from, a restart.
  // Replayed deliveries carry only the route keys this gateway holds.
  std::optional<durable_options> durable;
};

class gateway {
 public:
  // Grants (or resumes) the lease, opens the inbox, registers
  // options.routes and starts the keepalive timer. Blocking. `conn` must
  // outlive the gateway. Errors: inbox_taken, not_found, not_supported,
  // not_connected, timeout, would_deadlock (on the loop thread), bad_request
  // (no inbox_id or on_message).
  static std::expected<std::unique_ptr<gateway>, std::error_code> start(client& conn, gateway_options options);

  // Stops the keepalive, closes the inbox on this side (its handler is
  // never called again once the destructor returns) and revokes the lease,
  // so its inbox and routes vanish at once on the broker (unless abandon()
  // was called: they then stay until the lease expires). Blocks until the
  // loop thread has let go of the gateway; on the loop thread itself the
  // revoke is sent without waiting for its answer.
  ~gateway();
  gateway(const gateway&) = delete;
  gateway& operator=(const gateway&) = delete;

  // Registers route_key -> this gateway under the lease. Blocking; a lease
  // renewal under way finishes first (route changes and renewals never
  // overlap). Errors: not_found (the lease was lost and not renewed yet:
  // retry after on_lease_renewed), not_connected, timeout, would_deadlock.
  std::error_code add_route(std::string_view route_key);
  // Removes a route added here: the broker's entry is deleted only while it
  // still names this gateway's inbox (a user who moved to another gateway
  // keeps that gateway's route). Errors as add_route; not_found when
  // route_key is not a route of this gateway.
  std::error_code remove_route(std::string_view route_key);
  // The same without waiting, for code on a thread of its own that must
  // not block (a WebSocket server's loop): `done` gets what add_route or
  // remove_route would have returned, on the client's loop thread (do not
  // block there). Changes run in the order they were asked, from any
  // thread, the loop thread included. `done` may be empty.
  void async_add_route(std::string_view route_key, std::function<void(std::error_code)> done);
  void async_remove_route(std::string_view route_key, std::function<void(std::error_code)> done);
  std::vector<std::string> routes() const;

  // The user's device took the offer m (a delivery of on_message with
  // m.offer_id != 0): client::ack(m) on the gateway's client, for every
  // route key of m. Fire and forget, like publish: it does not wait on
  // the loop thread (safe in on_message). Errors: bad_request (m is not an
  // offer), not_supported (the broker did not grant "offers"),
  // not_connected, timeout (buffer full; buffer_full at once without
  // client_options::wait_for_space), buffer_full (reconnecting).
  std::error_code ack(const inbox_message& m);

  lease_id lease() const;
  // A durable inbox's positions (see client::inbox_stream_positions): save
  // them to resume after a restart. Empty without `durable`.
  stream_positions positions() const;
  const std::string& inbox_id() const noexcept;

  // Stops the keepalive without revoking: the lease, inbox and routes then
  // expire after the TTL, as if the process had died. Deliveries still
  // reach on_message until the gateway is destroyed; a lease renewal
  // already under way still completes.
  void abandon();

 private:
  struct impl;
  explicit gateway(std::shared_ptr<impl> p);
  std::shared_ptr<impl> impl_;  // shared: the loop's callbacks hold weak references
};

}  // namespace switchyard
