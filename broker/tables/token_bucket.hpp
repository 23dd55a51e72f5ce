#pragma once
// A token bucket for the rate of new hellos (--max-hellos-per-s,
// --hello-burst), with a reservation queue for the retry hints of the
// hellos it refuses.
//
// Tokens refill at `rate` per second up to `burst`; an admitted hello
// takes one. A refused one is told when to come back: each refusal
// reserves the next future token time after the reservations before it (a
// virtual queue end q: q = max(q, now) + 1/rate; hint = q - now), so a
// storm of C refused clients at rate R is told to come back spread over
// about C/R seconds instead of all at once. Reservations in the past are
// forgotten (max(q, now)); the hint is at most `max_hint`, and q never runs
// further ahead than that. The reservations are advice to the clients: they
// hold no token, an admitted hello takes whatever token is there.
//
// Time is passed in by the caller (the server's steady clock, a test's
// fake clock): the bucket reads no clock itself. Loop thread only.

#include <chrono>

namespace switchyard::broker {

class token_bucket {
 public:
  using clock = std::chrono::steady_clock;

  // rate_per_s 0 = unlimited (every take succeeds). burst 0 = one second's
  // worth of tokens (the rate), at least 1. Starts full at `now`.
  token_bucket(double rate_per_s, double burst, clock::time_point now) noexcept;

  // New limits (a configuration reload): the tokens held are kept, up to
  // the new burst; the reservations are kept.
  void configure(double rate_per_s, double burst, clock::time_point now) noexcept;

  // Takes a token if there is one. Always true when unlimited.
  bool try_take(clock::time_point now) noexcept;

  // A refused taker's retry hint (see above): at least 1 ms, at most
  // max_hint. Unlimited: 0.
  std::chrono::milliseconds reserve(clock::time_point now, std::chrono::milliseconds max_hint) noexcept;

  bool limited() const noexcept { return rate_ > 0; }
  double rate() const noexcept { return rate_; }
  double burst() const noexcept { return burst_; }
  // Tokens held at `now` (for tests and metrics).
  double tokens(clock::time_point now) noexcept;

 private:
  void refill(clock::time_point now) noexcept;

  double rate_ = 0;
  double burst_ = 1;
  double tokens_ = 1;
  clock::time_point last_{};
  clock::time_point queue_end_{};  // the last reserved token time
};

}  // namespace switchyard::broker
