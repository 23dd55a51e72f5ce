#pragma once
// switchyard-gateway's core: it accepts devices' WebSockets (device_session),
// verifies their tokens (token_verifier), and holds each connected user's
// route on the broker through the client library's gateway helper: the
// route is added before the first socket of a user is welcomed and removed
// after its last socket closed, all under this gateway's lease and inbox.
// Sends to users arrive in the inbox and go to every socket of the user;
// channel subscriptions are shared (one broker subscription per channel,
// however many sockets asked); offers go to devices that declared "offers"
// (and whose user the flag's ramp includes), and a device's ack becomes the
// sender's receipt.
//
// Threads: the gateway's own io thread (run()) owns every socket and every
// table here. The broker client calls back on its loop thread; those
// callbacks encode what they received once and post it to the io thread.

#include "gateway/device_session.hpp"
#include "gateway/gateway_config.hpp"
#include "gateway/gateway_status.hpp"
#include "gateway/resume_reader.hpp"
#include "gateway/token_verifier.hpp"

#include "common/asio.hpp"

#include "switchyard/client.hpp"
#include "switchyard/gateway.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace switchyard::edge {

class gateway_server final : private session_host {
 public:
  // Connects to the broker, starts the gateway helper (lease, inbox) and
  // binds the listener. Throws std::runtime_error naming what failed (the
  // broker unreachable, the port taken, a key file unreadable).
  // `wall_clock` (tests) replaces the system clock for token expiry.
  explicit gateway_server(gateway_config config,
                          std::function<std::chrono::system_clock::time_point()> wall_clock = {});
  ~gateway_server();
  gateway_server(const gateway_server&) = delete;
  gateway_server& operator=(const gateway_server&) = delete;

  // Runs the io loop on the calling thread until stop() (or a finished
  // drain).
  void run();
  // Any thread: closes every socket (1001) and ends run().
  void stop();
  // Any thread: stops accepting upgrades (503), closes the sockets in
  // batches spread over --drain-window-ms with code 1001 and a reconnect
  // hint, then ends run().
  void drain();
  // Any thread: applies the settings of `fresh` that a reload applies (the
  // rows marked reloadable: the flag ramp, the log level, the TLS
  // certificate, whose files are read again) and says which
  // others changed (they take effect at a restart). A flag's new ramp is
  // applied to the sockets open too.
  void reload(const gateway_config& fresh);

  std::uint16_t port() const noexcept { return port_; }
  // The monitoring port (--http), else 0.
  std::uint16_t http_port() const noexcept { return http_ ? http_->port() : 0; }
  const std::string& inbox_id() const noexcept { return config_.inbox_id; }
  // Any thread: the figures, gathered on the io thread (empty while run()
  // is not running).
  gateway_counters counters();

 private:
  struct user_entry;
  struct channel_entry;

  // session_host
  bool admit() override;
  void hello(device_session& s, hello_message m) override;
  void subscribe(device_session& s, const subscribe_message& m) override;
  void unsubscribe(device_session& s, const unsubscribe_message& m) override;
  void ack(device_session& s, const ack_message& m) override;
  void closed(device_session& s) override;

  asio::awaitable<void> accept_loop();
  void sweep();
  void drain_step();
  void reconcile_route(const std::string& user);
  void route_changed(const std::string& user, bool added, std::error_code ec);
  void leave_channel(device_session& s, const std::string& channel);
  void channel_ready(const std::string& channel, std::expected<subscription_id, std::error_code> r);
  // What the inbox received, encoded once (on the client's loop thread).
  struct inbound {
    std::vector<std::string> keys;
    device_session::text plain;  // "msg"
    device_session::text offer;  // "offer" (null: not an offer)
    std::uint64_t offer_id = 0;
    std::string stream;  // a durable send's
    std::uint64_t seq = 0;
    std::uint64_t epoch = 0;
  };
  void deliver(const inbound& in);
  void start_resume(device_session& s);
  // A read-back of `stream` for `s` from `from`; false when the reader's
  // queue is full.
  bool submit_resume(device_session& s, const std::string& stream, resume_point from);
  // After the broker restored this gateway's routes: every welcomed
  // socket's streams are read back from its last position.
  void resume_all();
  void resume_done(const std::weak_ptr<device_session>& weak, resume_result r);
  void withdrawn(const withdrawn_notice& n);
  bool flag_on(std::string_view flag, std::string_view user) const;
  std::string user_of(std::string_view route_key) const;

  gateway_counters gather() const;  // io thread
  gateway_health health() const;    // io thread

  gateway_config config_;
  const steady_time started_ = std::chrono::steady_clock::now();
  session_limits limits_;
  liveness_timing timing_;
  std::function<std::chrono::system_clock::time_point()> wall_clock_;
  token_verifier tokens_;
  asio::io_context io_;
  asio::ip::tcp::acceptor acceptor_;
  asio::steady_timer sweep_timer_;
  asio::steady_timer drain_timer_;
  std::uint16_t port_ = 0;

  std::unique_ptr<client> broker_;
  std::unique_ptr<switchyard::gateway> helper_;
  std::unique_ptr<resume_reader> resumes_;  // after broker_: goes first
  std::unique_ptr<http::http_endpoint> http_;
  std::shared_ptr<device_tls> tls_;  // io thread; null: plain ws://

  // io thread only.
  std::unordered_map<std::uint64_t, std::shared_ptr<device_session>> sessions_;
  std::unordered_map<std::string, user_entry> users_;
  std::unordered_map<std::string, channel_entry> channels_;
  std::uint64_t next_session_ = 1;
  gateway_counters counters_;
  bool draining_ = false;
  bool stopping_ = false;
  steady_time drain_started_{};
  std::size_t drain_total_ = 0;
  std::size_t drain_closed_ = 0;
  std::minstd_rand jitter_;
};

}  // namespace switchyard::edge
