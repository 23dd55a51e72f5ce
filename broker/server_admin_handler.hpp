#pragma once
// Server administration requests (capability "admin"; docs/protocol.md
// §14): Drain. The server's own state is reached through the function it
// injects, so this layer does not depend on the server.
//
// Loop thread only.

#include "broker/peer.hpp"
#include "protocol/frame_builder.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

namespace spdlog {
class logger;
}

namespace switchyard::broker {

class server_admin_handler {
 public:
  // Begins a drain over `window` (never 0: the handler puts the configured
  // default in its place); a drain already under way is left as it is.
  using drain_fn = std::function<void(std::chrono::milliseconds window)>;

  // `default_window` is read at each request (a reload may change it).
  server_admin_handler(drain_fn drain, const std::chrono::milliseconds& default_window,
                       protocol::frame_builder& builder, std::shared_ptr<spdlog::logger> logger);

  // Answers Ok (when request_id != 0), then begins the drain: the
  // requester is one of the connections it closes.
  void drain(peer& from, std::uint64_t request_id, const protocol::wire::Drain& m);

 private:
  drain_fn drain_;
  const std::chrono::milliseconds& default_window_;
  protocol::frame_builder& builder_;
  std::shared_ptr<spdlog::logger> logger_;
};

}  // namespace switchyard::broker
