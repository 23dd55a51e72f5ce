#pragma once
// Internal: when a client's next reconnect attempt starts. Not installed.
//
// Capped exponential backoff with full jitter: the attempt after n earlier
// attempts (n = 0, 1, ...) waits uniform(0, min(max_delay, base_delay *
// 2^n)). A retry_after_ms hint from the server (a refused hello, or the
// Error that came before a close) is a floor: the delay is at least the
// hint. A close with `draining` and a window W spreads even the first
// attempt over uniform(0, W). The attempt counter n goes on across
// connections that failed early and resets only once a connection stayed
// up `stable_after`, so a broker that accepts and drops at once is not
// hammered. The client gives up when max_attempts attempts since the loss
// failed, or when the next attempt would start more than max_downtime
// after the loss.
//
// No I/O, no timers, no threads: the random source and the clock are
// injected, so the delay sequence is unit-tested without sleeping. One
// thread at a time (the client's loop thread).

#include "switchyard/client.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>

namespace switchyard::detail {

class reconnect_backoff {
 public:
  using clock = std::chrono::steady_clock;
  // A uniform random number in [0, 1).
  using random_fn = std::function<double()>;
  using now_fn = std::function<clock::time_point()>;

  reconnect_backoff(reconnect_options options, random_fn random, now_fn now);
  // The production sources: a std::mt19937_64 seeded from std::random_device,
  // and steady_clock.
  explicit reconnect_backoff(reconnect_options options);

  // A session is up (the first one, or a restored one): the stable period
  // starts now.
  void connected();
  // The connection was lost. `retry_after` is the server's hint (0: none);
  // with `draining`, it is the window the first attempt is spread over.
  // Resets the attempt counter when the connection had stayed up
  // stable_after.
  void lost(std::chrono::milliseconds retry_after, bool draining);
  // An attempt failed; `retry_after` is the hint of a refused hello (0:
  // none), a floor for the next delay.
  void attempt_failed(std::chrono::milliseconds retry_after);
  // The wait before the next attempt, counting it as made; nullopt: give
  // up (max_attempts or max_downtime reached).
  std::optional<std::chrono::milliseconds> next_delay();

  // Attempts since the loss (the one under way included).
  std::uint32_t attempts() const noexcept { return since_loss_; }
  // Time since the loss.
  std::chrono::milliseconds downtime() const;
  // The exponent n of the next attempt (for tests and logs).
  std::uint32_t exponent() const noexcept { return n_; }
  // A uniform wait in [limit / 2, limit] from the injected random source
  // (the client's other jittered retries).
  std::chrono::milliseconds half_jitter(std::chrono::milliseconds limit) {
    return limit / 2 + jitter(limit - limit / 2);
  }

 private:
  std::chrono::milliseconds jitter(std::chrono::milliseconds limit);

  reconnect_options opts_;
  random_fn random_;
  now_fn now_;
  std::uint32_t n_ = 0;                  // exponent of the next attempt
  std::uint32_t since_loss_ = 0;         // attempts since the loss
  std::chrono::milliseconds floor_{0};   // the server's hint for the next attempt
  std::chrono::milliseconds window_{0};  // a drain window for the next attempt (0: none)
  clock::time_point up_since_{};
  clock::time_point lost_at_{};
};

}  // namespace switchyard::detail
