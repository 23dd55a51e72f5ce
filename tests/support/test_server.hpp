#pragma once
// A real switchyard broker on 127.0.0.1, port 0, running on its own thread
// for the duration of a test.

#include "broker/server/server.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <thread>

namespace switchyard::test {

class test_server {
 public:
  // Starts at once; throws if the server cannot bind.
  test_server() : test_server(default_config()) {}
  explicit test_server(broker::server_config config);
  ~test_server();  // stop() + join

  std::uint16_t port() const noexcept { return server_->port(); }
  // The monitoring port (config.http_host set), else 0.
  std::uint16_t http_port() const noexcept { return server_->http_port(); }
  // Stops and waits for the loop thread to finish (idempotent).
  void stop();
  // Not stopped yet (by stop(), or by itself).
  bool running() const noexcept { return thread_.joinable() && !finished_; }
  // The server (its run()) ended by itself, e.g. after a drain: waits at
  // most `timeout` for that.
  bool wait_finished(std::chrono::milliseconds timeout);
  // Counters, valid after stop().
  const broker::server_counters& counters() const noexcept { return server_->counters(); }
  // broker::server::drained_for_lost_standing, valid once finished.
  bool drained_for_lost_standing() const noexcept { return server_->drained_for_lost_standing(); }
  // broker::server::streams_taken_over, valid once finished.
  bool streams_taken_over() const noexcept { return server_->streams_taken_over(); }
  // Every counter and gauge, valid after stop().
  broker::metrics_snapshot metrics() const { return server_->metrics(); }
  // The same while the server runs, gathered on its loop thread (waits at
  // most 10 s; REQUIREs an answer).
  broker::metrics_snapshot live_metrics();

  // Blocks the server's loop thread until the returned hold is released
  // (or destroyed): returns once the loop is held, so whatever clients
  // write meanwhile waits in the kernel and the loop's next reads find it
  // all at once (a loop turn that took long). A hold left unreleased gives
  // the loop back after 30 s. REQUIREs that the loop took the hold within
  // 10 s.
  class loop_hold {
   public:
    explicit loop_hold(std::shared_ptr<std::promise<void>> release) : release_(std::move(release)) {}
    loop_hold(loop_hold&&) = default;
    loop_hold& operator=(loop_hold&&) = delete;
    ~loop_hold() { release(); }
    void release();

   private:
    std::shared_ptr<std::promise<void>> release_;
  };
  [[nodiscard]] loop_hold hold_loop();

  // What SIGHUP does (broker::server::reload), run on the loop thread;
  // returns once it ran.
  void reload();

  // Loopback, port 0, no data folder, quiet logs, short hello timeout.
  static broker::server_config default_config() { return default_config(0); }
  // The same on `port` (a broker restarted where an earlier test_server
  // listened).
  static broker::server_config default_config(std::uint16_t port);

 private:
  std::unique_ptr<broker::server> server_;
  std::thread thread_;
  std::atomic<bool> finished_{false};
};

}  // namespace switchyard::test
