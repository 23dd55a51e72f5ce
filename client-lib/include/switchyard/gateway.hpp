#pragma once
// The gateway side of send-to-user, in one object: it owns a lease (keeps
// it alive at TTL/3 and, if the lease was lost anyway, grants a new one and
// restores everything), holds the gateway's inbox, and registers the route
// keys of the users connected to this gateway.
//
//   auto conn = switchyard::client::connect(options).value();
//   auto gw = switchyard::gateway::start(*conn, {.inbox_id = "gw-7", .on_message = deliver_to_socket}).value();
//   gw->add_route("user:alice");   // sends to user:alice now arrive in on_message

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
  // Called on the keepalive thread after a lost lease was replaced and the
  // inbox and routes restored under the new one.
  std::function<void(lease_id old_lease, lease_id new_lease)> on_lease_renewed;
  // Called on the keepalive thread when a keepalive or restore failed (the
  // connection is down, a timeout); the next tick retries.
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
  // Grants (or resumes) the lease, opens the inbox and starts the keepalive
  // thread. `conn` must outlive the gateway. Errors: inbox_taken, not_found,
  // not_supported, not_connected, timeout.
  static std::expected<std::unique_ptr<gateway>, std::error_code> start(client& conn, gateway_options options);

  // Stops the keepalive and revokes the lease, so its routes vanish at once
  // (unless abandon() was called).
  ~gateway();
  gateway(const gateway&) = delete;
  gateway& operator=(const gateway&) = delete;

  // Registers route_key -> this gateway under the lease (blocking).
  std::error_code add_route(std::string_view route_key);
  std::error_code remove_route(std::string_view route_key);
  std::vector<std::string> routes() const;

  lease_id lease() const;
  // A durable inbox's positions (see client::inbox_stream_positions): save
  // them to resume after a restart. Empty without `durable`.
  stream_positions positions() const;
  const std::string& inbox_id() const noexcept;

  // Stops the keepalive without revoking: the lease, inbox and routes then
  // expire after the TTL, as if the process had died.
  void abandon();

 private:
  struct impl;
  explicit gateway(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace switchyard
