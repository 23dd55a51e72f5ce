#pragma once
// switchyard-server as a library: the listener, the connection registry and
// the event loop. main.cpp and the end-to-end tests both use it.

#include "broker/monitor/metrics_snapshot.hpp"
#include "broker/config/server_config.hpp"
#include "broker/tables/server_counters.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

namespace switchyard::broker {

// A setting that looked right but does not work (an auth file that does
// not parse): start() throws it, switchyard-server exits 2.
struct startup_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class server {
 public:
  // Validates the config (throws std::invalid_argument). Does not bind.
  explicit server(server_config config);
  ~server();
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  // Loads the auth file, creates the data folder, binds and listens,
  // writes the port file. Throws startup_error (the auth file, with the
  // line at fault), std::system_error (address in use, permission, ...).
  void start();

  // The bound port (after start()).
  std::uint16_t port() const noexcept;
  // The monitoring port's bound port (after start()); 0 without --http.
  std::uint16_t http_port() const noexcept;
  // This process's instance id (server_config::instance_id, or the random
  // one drawn at construction): the Welcome's server_instance.
  std::uint64_t instance_id() const noexcept;

  // Signals (call before run()): SIGINT/SIGTERM stop (stop()); SIGUSR2
  // drains over --drain-window-ms (drain()); SIGHUP re-reads the --config
  // file and applies what can change at run time (a bad file is logged and
  // changes nothing); SIGUSR1 logs the counters. None but SIGINT/SIGTERM
  // ends the process by itself.
  void handle_signals();

  // Runs the event loop on the calling thread until stop() finished:
  // everything the broker does happens on this one thread.
  void run();

  // Thread-safe. Stops accepting, sends every session a shutting_down
  // goodbye, and makes run() return once they are closed (or after the
  // shutdown grace).
  void stop();

  // Thread-safe: what SIGHUP does (re-reads the --config file, the TLS
  // files and the auth file), on the loop thread, soon after the call.
  void reload();

  // After run() returned: the node drained because it was out of standing
  // in its cluster for cluster-drain-after-s (the process exits 75 then,
  // so that a supervisor restarting on failure starts it again).
  bool drained_for_lost_standing() const noexcept;
  // Cluster mode: it stopped because the cluster declared the streams in
  // its log lost (cluster takeover) while it was cut off.
  bool streams_taken_over() const noexcept;

  // Counters, read on the loop thread (or after run() returned).
  const server_counters& counters() const noexcept;
  // Every counter and gauge (connections, tables, memory, the log's group
  // commit) in one copy. Loop thread, or after run() returned.
  metrics_snapshot metrics() const;
  // Thread-safe: gathers the snapshot on the loop thread while it runs and
  // calls `done` with it there (never, if the loop stops first).
  void post_metrics(std::function<void(const metrics_snapshot&)> done);

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace switchyard::broker
