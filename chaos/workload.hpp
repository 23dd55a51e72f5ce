#pragma once
// The chaos workload: what gateways and services do to the cluster while
// the harness injects faults, each step recorded in the history.
//
//  - gateways (client library `gateway`, one client each, every node's
//    address listed, so the client's reconnect moves it to another node):
//    each registers its users' routes and records every delivery;
//  - senders: services sending to a random user through whichever node
//    their client is on (send-to-user across nodes);
//  - offerers: offers to a random user with receipts (the offer stays on
//    the node it was sent to, the gateway acks it on its own node), each
//    recorded as a send, the gateway's ack and the receipt as events;
//  - appenders: durable appends to a few streams through any node (the
//    stream's holder may be another node);
//  - subscribers and publishers of one channel family (a publish on any
//    node reaches the subscribers of every node);
//  - after the run: probes (every user of a live gateway reached again)
//    and a read of every stream to its end, and a publish from every node
//    until each subscriber received one.
//
// Threads: start(), abandon_one(), stop(), probe() and read_streams() are
// called by one thread (the chaos tool's main), in that order; the senders
// and appenders run on threads of their own, the gateways' handlers on
// their clients' loops. All record into the history (thread-safe).

#include "chaos/history.hpp"
#include "common/mutex.hpp"

#include <switchyard/client.hpp>
#include <switchyard/gateway.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace switchyard::chaos {

// How the history names an error: switchyard::error_name for the client
// library's codes ("no_route"), the message for others.
std::string outcome_of(const std::error_code& ec);

struct workload_options {
  std::vector<std::string> addresses;  // the nodes' client addresses
  int gateways = 6;
  int users_per_gateway = 20;
  int senders = 3;
  int offerers = 2;
  std::chrono::milliseconds receipt_timeout{1500};  // an offer's (its expiry: 10 s)
  int appenders = 3;
  int streams = 6;
  int subscribers = 3;
  int publishers = 2;
  std::chrono::milliseconds gateway_lease_ttl{2000};
  std::chrono::milliseconds sweep_period{100};  // the nodes' (recorded with an abandon)
  std::chrono::milliseconds pause{5};           // between one client's calls
  std::uint64_t seed = 1;
};

class workload {
 public:
  workload(workload_options o, history_recorder& history);
  ~workload();  // stop(), then closes every client
  workload(const workload&) = delete;
  workload& operator=(const workload&) = delete;

  // Connects the gateways (their routes registered) and then starts the
  // senders and appenders. Throws std::runtime_error when a client cannot
  // connect or a gateway cannot start (the cluster is not up).
  void start();
  // The last gateway stops its keepalives (gateway::abandon): its lease and
  // routes must lapse after the TTL, and no send made later may reach it.
  void abandon_one();
  // Stops the senders and appenders (joined; each call in flight is
  // answered or times out first).
  void stop();
  // Sends to every user of a live gateway until one was routed to its
  // gateway and delivered there, or `deadline` passes; records each probe.
  // Returns how many users were not reached (unreached() names them).
  std::size_t probe(std::chrono::milliseconds deadline);
  // Reads every stream from its first record to its end, retrying until
  // `deadline` (a holder may still be coming back); records one read event
  // per stream (its outcome the last error when it never worked).
  void read_streams(std::chrono::milliseconds deadline);
  // Publishes from each node in turn (a client connected to it alone)
  // until every subscriber received one of that node's probes, or
  // `deadline` passes (for all nodes together); records each publish.
  // Returns the (subscriber, node) pairs not reached.
  std::size_t probe_channels(std::chrono::milliseconds deadline);

  // The users the last probe() did not reach.
  const std::vector<std::string>& unreached() const noexcept { return unreached_; }
  std::uint64_t calls() const noexcept { return calls_.load(std::memory_order_relaxed); }

 private:
  struct gateway_slot;
  // A workload client's options: its name, these nodes, short timeouts and
  // reconnect delays (the cluster comes back within seconds).
  client_options options_for(const std::string& name, std::vector<std::string> addresses) const;
  // Throws std::runtime_error when no node takes the connection.
  std::unique_ptr<client> connect(const std::string& name);
  // connect(), retried until it works or stop() was called (nullptr then).
  std::unique_ptr<client> connect_until_stopped(const std::string& name);
  // Connects as `name` (retrying) and calls step(conn, n) for n = 0, 1, ...
  // until stop(), pausing options_.pause between calls. On its own thread.
  void run_worker(const std::string& name, const std::function<void(client&, std::uint64_t)>& step);
  void run_sender(int k);
  void run_offerer(int k);
  void run_appender(int k);
  void run_publisher(int k);

  workload_options options_;
  history_recorder& history_;
  std::vector<std::string> users_;  // all of them, gateway by gateway
  std::vector<std::unique_ptr<gateway_slot>> gateways_;
  std::vector<std::unique_ptr<client>> subscribers_;
  // Per subscriber: the probers ("prober-a", ...) whose publish it received.
  switchyard::mutex probes_mu_;
  std::vector<std::set<std::string>> probes_seen_ SWITCHYARD_GUARDED_BY(probes_mu_);
  std::set<std::string> probes_delivered_ SWITCHYARD_GUARDED_BY(probes_mu_);  // ids of probes a gateway received
  std::atomic<bool> stopping_{false};
  std::atomic<std::uint64_t> calls_{0};
  std::vector<std::thread> threads_;
  std::vector<std::string> unreached_;
};

}  // namespace switchyard::chaos
