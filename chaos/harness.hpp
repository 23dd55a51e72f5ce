#pragma once
// The chaos harness: a whole cluster on loopback, in child processes of
// this one: three etcd members (data in the run's folder, which should be
// on tmpfs; --unsafe-no-fsync, test-only: an etcd member that loses power
// may lose what it acknowledged), three nats-servers routed into one
// cluster, and three switchyard nodes (a, b, c). Each node reaches etcd and
// NATS through its own TCP proxies (tcp_proxy.hpp), so one node can be cut
// off. Faults and their ends are methods; each is logged to the run's
// folder with the processes' own logs.
//
// Threads: not thread-safe; one thread (the chaos tool's main) drives it.
// The proxies run on a thread of its own.

#include "chaos/child_process.hpp"
#include "chaos/tcp_proxy.hpp"
#include "common/asio.hpp"

#include <chrono>
#include <cstdint>
#include <expected>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace switchyard::chaos {

struct harness_options {
  std::string server_binary;         // switchyard-server
  std::string etcd_binary = "etcd";  // etcd-server's
  std::string nats_binary = "/usr/sbin/nats-server";
  std::filesystem::path dir;  // data and logs (made if missing)
  std::string cluster_name = "chaos";
  int cluster_lease_ttl_s = 2;                      // the nodes' etcd lease TTL
  std::chrono::milliseconds start_timeout{30'000};  // per process
};

class harness {
 public:
  static constexpr int size = 3;  // of each: etcd members, NATS servers, nodes

  // Starts all nine (etcd, then NATS, then the nodes) and waits until each
  // listens. Throws std::runtime_error naming what did not start (its log).
  explicit harness(harness_options o);
  ~harness();  // stops the nodes (SIGTERM), then NATS and etcd
  harness(const harness&) = delete;
  harness& operator=(const harness&) = delete;

  static std::string node_name(int i) { return std::string(1, static_cast<char>('a' + i)); }
  // "127.0.0.1:port" where clients reach node i.
  std::string node_address(int i) const;
  std::vector<std::string> node_addresses() const;

  // Faults. Each one's end restores what it broke; a node, etcd member or
  // NATS server killed starts again on its ports with its data.
  void kill_node(int i);
  std::expected<void, std::string> restart_node(int i);  // waits until it listens again
  void stop_node(int i);                                 // SIGSTOP
  void continue_node(int i);                             // SIGCONT
  void cut_node(int i);                                  // its etcd and NATS connections stop flowing
  void heal_node(int i);
  void kill_etcd(int i);
  std::expected<void, std::string> restart_etcd(int i);
  void kill_nats(int i);
  std::expected<void, std::string> restart_nats(int i);

  // Every process started by the harness that is not running (a node that
  // exited by itself, say): "node b", "etcd 1".
  std::vector<std::string> exited();
  const std::filesystem::path& dir() const noexcept { return options_.dir; }

 private:
  std::expected<void, std::string> start_and_wait(child_process& p, std::uint16_t port);
  void on_proxies(const std::function<void()>& fn);
  void shutdown();                      // stops every process and the proxies' thread; idempotent
  void set_up(std::vector<int>& held);  // the constructor's work, after the proxy thread started

  harness_options options_;
  asio::io_context proxy_io_;
  asio::executor_work_guard<asio::io_context::executor_type> proxy_work_{proxy_io_.get_executor()};
  std::thread proxy_thread_;
  std::vector<std::uint16_t> etcd_ports_, nats_ports_, node_ports_;
  std::vector<std::unique_ptr<child_process>> etcd_, nats_, nodes_;
  // node_proxies_[i]: node i's proxies, one per etcd member then one per NATS server.
  std::vector<std::vector<std::unique_ptr<tcp_proxy>>> node_proxies_;
};

}  // namespace switchyard::chaos
