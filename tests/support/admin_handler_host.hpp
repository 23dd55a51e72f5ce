#pragma once
// A stand-in broker on 127.0.0.1 (port 0) that serves ClusterStatus
// through a real broker::server_admin_handler whose cluster_status source
// is the test's: what a server in cluster mode answers, before the server
// can be one. For tests of the client library and switchyard-cli against
// a node's cluster status.
//
// It welcomes every hello (granting "admin" when asked, nothing else),
// answers Ping with Pong, hands each ClusterStatus to the handler on a
// recording_peer and writes back what the handler answered; any other
// request is answered unsupported_message (non-fatal). One connection at a
// time, on its own thread: the source runs on that thread.

#include "broker/handlers/server_admin_handler.hpp"
#include "protocol/frame_builder.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace switchyard::test {

// Three nodes as node-a sees them, every field set, most to a value of
// their own (incarnations above 2^53, a negative member incarnation
// nowhere: etcd's lease ids are positive).
broker::cluster_status_report sample_cluster_status();

class admin_handler_host {
 public:
  // Listens at once; throws std::runtime_error if it cannot.
  explicit admin_handler_host(broker::server_admin_handler::cluster_status_fn source);
  ~admin_handler_host();  // closes the listener and the open connection, joins
  admin_handler_host(const admin_handler_host&) = delete;
  admin_handler_host& operator=(const admin_handler_host&) = delete;

  std::uint16_t port() const noexcept { return port_; }
  // ClusterStatus requests handed to the handler so far.
  std::uint64_t cluster_status_requests() const noexcept { return requests_.load(); }

 private:
  void run();
  // Serves one connection until it closes or sends what is not a frame.
  void serve(int fd);

  std::chrono::milliseconds default_window_{30'000};
  protocol::frame_builder builder_;  // the host thread's
  broker::server_admin_handler handler_;
  int fd_ = -1;
  std::atomic<int> conn_fd_{-1};
  std::uint16_t port_ = 0;
  std::atomic<std::uint64_t> requests_{0};
  std::thread thread_;
};

}  // namespace switchyard::test
