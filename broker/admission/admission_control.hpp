#pragma once
// Admission control: whether a new connection may stay, decided once when
// it is accepted and once at its hello (never per message). The rules
// (docs/protocol.md §9.1):
//
//  - draining: every new connection is refused with `draining`,
//    retry_after_ms = the drain's reconnect window;
//  - the connection cap: at accept, a connection beyond max_connections +
//    admin_slots is refused at once; at its hello, one that did not ask for
//    the "admin" capability is refused when the open connections (itself
//    included) are more than max_connections: the last admin_slots
//    connections are kept for admins (the CLI). `too_many_connections`,
//    retry_after_ms = 1 s, or the hello rate's reservation if that is later;
//  - TLS: a connection counts from its accept, as a plain one does, but it
//    is registered only once its handshake is done: until then it is a
//    handshake in progress, counted here. At accept, a TLS connection is
//    closed at once, without a handshake, when the open connections plus
//    the handshakes in progress are max_connections + admin_slots or more
//    (no `too_many_connections` frame: there is no session to send it
//    in; the client's handshake fails). So a flood of connections that
//    never finish their handshake holds at most the cap's places, each
//    until the hello timeout. Its hello is then checked as a plain one's,
//    against the open connections (handshakes in progress not counted);
//  - the hello rate: a hello without "admin" takes a token of the bucket
//    (token_bucket.hpp); without one it is refused with `rate_limited`,
//    retry_after_ms from the bucket's reservations.
//
// Until authentication exists any client may ask for "admin": the reserved
// slots and the rate exemption keep the operator from being locked out by
// a storm of ordinary clients, not by a hostile one.
//
// Each refusal is counted in server_counters by reason. Times are passed
// in (no clock of its own). Reads the limits from the server's config at
// each call, so a reload takes effect at once (the bucket after
// reconfigure()). Loop thread only.

#include "broker/config/server_config.hpp"
#include "broker/tables/server_counters.hpp"
#include "broker/tables/token_bucket.hpp"
#include "protocol/errc.hpp"

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

namespace switchyard::broker {

// Why a new connection is sent away: the fatal Error it gets (request id
// 0), then the connection closes.
struct refusal {
  protocol::errc code;
  std::chrono::milliseconds retry_after;  // > 0
  std::string message;
};

class admission_control {
 public:
  using clock = token_bucket::clock;

  // The longest retry hint of a rate or cap refusal.
  static constexpr std::chrono::milliseconds max_retry_after{30'000};
  // The shortest hint of a cap refusal: a slot frees only when a
  // connection closes, which the server cannot predict.
  static constexpr std::chrono::milliseconds cap_retry_after{1'000};
  // The longest reconnect window a drain tells its connections.
  static constexpr std::chrono::milliseconds max_reconnect_window{10'000};

  // Borrows `config` and `counters` for its lifetime.
  admission_control(const server_config& config, server_counters& counters, clock::time_point now);

  // The config changed (a reload): the bucket takes its rate and burst.
  void reconfigure(clock::time_point now);

  // A new connection before anything is read from it; `open` = the
  // counted connections without it. nullopt = go on and read its hello.
  std::optional<refusal> on_accept(std::size_t open, clock::time_point now);
  // A TLS connection before its handshake; `open` = the counted
  // connections. True: go on with the handshake, which now holds a place
  // until tls_handshake_done(). False: close it at once (counted in
  // connections_rejected).
  bool on_tls_accept(std::size_t open) noexcept;
  // The handshake that on_tls_accept() allowed ended (done, failed or
  // timed out).
  void tls_handshake_done() noexcept;
  std::size_t tls_handshakes() const noexcept { return tls_handshakes_; }

  // Its hello; `open` = the counted connections, itself included. `admin`:
  // the hello asked for the "admin" capability. nullopt = welcome it.
  std::optional<refusal> on_hello(bool admin, std::size_t open, clock::time_point now);

  // From now on every new connection is refused with `draining` and told to
  // come back after `reconnect_window`. There is no way back (the server
  // exits at the drain's end).
  void begin_drain(std::chrono::milliseconds reconnect_window) noexcept;
  bool draining() const noexcept { return draining_; }
  std::chrono::milliseconds reconnect_window() const noexcept { return reconnect_window_; }

  // The reconnect window of a drain over `window`: min(window, 10 s), at
  // least 1 ms.
  static std::chrono::milliseconds reconnect_window_for(std::chrono::milliseconds window) noexcept;

  // Tokens in the hello bucket (metrics, tests).
  double hello_tokens(clock::time_point now) noexcept { return bucket_.tokens(now); }

 private:
  refusal drain_refusal();
  refusal cap_refusal(clock::time_point now);

  const server_config& config_;
  server_counters& counters_;
  token_bucket bucket_;
  std::size_t tls_handshakes_ = 0;  // in progress
  bool draining_ = false;
  std::chrono::milliseconds reconnect_window_{0};
};

}  // namespace switchyard::broker
