// The reconnect delay sequence (client-lib/reconnect_backoff), driven by a
// scripted random source and a hand-moved clock: nothing sleeps.

#include "client-lib/reconnect_backoff.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

using switchyard::reconnect_options;
using switchyard::detail::reconnect_backoff;
using namespace std::chrono_literals;
using std::chrono::milliseconds;

namespace {

// Random numbers from a script (then `fallback`), and a clock that moves
// only when told. Both outlive the backoff under test.
struct scripted {
  std::deque<double> script;
  double fallback = 0.5;
  reconnect_backoff::clock::time_point now{};

  reconnect_backoff make(reconnect_options o) {
    return reconnect_backoff(
        o,
        [this] {
          if (script.empty()) return fallback;
          const double r = script.front();
          script.pop_front();
          return r;
        },
        [this] { return now; });
  }
};

reconnect_options options(milliseconds base, milliseconds cap) {
  reconnect_options o;
  o.base_delay = base;
  o.max_delay = cap;
  return o;
}

}  // namespace

TEST_CASE("each reconnect delay is uniform between zero and a limit that doubles per attempt", "[client-lib]") {
  scripted s;
  auto b = s.make(options(500ms, 30s));
  b.lost(0ms, false);
  // The largest random number gives the limit itself: 500, 1000, 2000, ...
  s.fallback = 0.999999;
  std::vector<std::int64_t> limits;
  for (int i = 0; i < 5; ++i) limits.push_back(b.next_delay().value().count());
  CHECK(limits == std::vector<std::int64_t>{499, 999, 1999, 3999, 7999});
  // The smallest gives zero: the full range is used (full jitter).
  s.fallback = 0.0;
  CHECK(b.next_delay() == 0ms);
  // And in between, proportionally: half of 32 s.
  s.fallback = 0.5;
  CHECK(b.next_delay() == 15'000ms);  // min(30 s, 500 ms * 2^6) / 2
}

TEST_CASE("reconnect delays never exceed max_delay however many attempts failed", "[client-lib]") {
  scripted s;
  s.fallback = 0.999999;
  auto b = s.make(options(500ms, 30s));
  b.lost(0ms, false);
  std::int64_t largest = 0;
  for (int i = 0; i < 200; ++i) {
    const auto d = b.next_delay().value();
    largest = std::max<std::int64_t>(largest, d.count());
    b.attempt_failed(0ms);
  }
  CHECK(largest == 29'999);
  CHECK(b.attempts() == 200);
}

TEST_CASE("the server's retry_after_ms is a floor for the next reconnect delay only", "[client-lib]") {
  scripted s;
  s.fallback = 0.1;
  auto b = s.make(options(500ms, 30s));
  // A close with a hint: the first attempt waits at least that long.
  b.lost(4000ms, false);
  CHECK(b.next_delay() == 4000ms);
  // A refused hello with a hint below the jitter: the jitter wins.
  b.attempt_failed(10ms);
  CHECK(b.next_delay() == 100ms);  // 0.1 * 1000
  // No hint: plain jitter again.
  b.attempt_failed(0ms);
  CHECK(b.next_delay() == 200ms);  // 0.1 * 2000
  b.attempt_failed(7000ms);
  CHECK(b.next_delay() == 7000ms);
}

TEST_CASE("a draining close spreads even the first reconnect attempt over the hinted window", "[client-lib]") {
  scripted s;
  auto b = s.make(options(500ms, 30s));
  s.script = {0.0, 0.25, 0.999999};
  b.lost(20'000ms, true);
  CHECK(b.next_delay() == 0ms);
  b.lost(20'000ms, true);
  CHECK(b.next_delay() == 5000ms);  // far past base_delay: the window, not the backoff
  b.lost(20'000ms, true);
  CHECK(b.next_delay() == 19'999ms);
  // Only the first attempt: a failed one goes back to the backoff (here n = 3).
  s.fallback = 0.999999;
  b.attempt_failed(0ms);
  CHECK(b.next_delay() == 3999ms);
}

TEST_CASE("the attempt counter resets only after a connection stayed up stable_after", "[client-lib]") {
  scripted s;
  s.fallback = 0.999999;
  auto o = options(100ms, 10s);
  o.stable_after = 5s;
  auto b = s.make(o);
  b.lost(0ms, false);
  (void)b.next_delay();  // 99
  b.attempt_failed(0ms);
  (void)b.next_delay();  // 199
  b.connected();
  // Lost again after 1 s: not stable, the sequence goes on.
  s.now += 1s;
  b.lost(0ms, false);
  CHECK(b.next_delay() == 399ms);
  CHECK(b.attempts() == 1);  // attempts since this loss
  b.connected();
  // Lost after 5 s up: back to the first limit.
  s.now += 5s;
  b.lost(0ms, false);
  CHECK(b.next_delay() == 99ms);
}

TEST_CASE("reconnecting gives up after max_attempts attempts", "[client-lib]") {
  scripted s;
  auto o = options(100ms, 10s);
  o.max_attempts = 3;
  auto b = s.make(o);
  b.lost(0ms, false);
  for (int i = 0; i < 3; ++i) {
    REQUIRE(b.next_delay());
    b.attempt_failed(0ms);
  }
  CHECK_FALSE(b.next_delay());
  // A new loss after a restored session starts a new count.
  b.connected();
  b.lost(0ms, false);
  CHECK(b.next_delay());
}

TEST_CASE("reconnecting gives up when the next attempt would start after max_downtime", "[client-lib]") {
  scripted s;
  s.fallback = 0.999999;
  auto o = options(1000ms, 60s);
  o.max_downtime = 10s;
  auto b = s.make(o);
  b.lost(0ms, false);
  REQUIRE(b.next_delay() == 999ms);
  s.now += 999ms;
  b.attempt_failed(0ms);
  REQUIRE(b.next_delay() == 1999ms);
  s.now += 1999ms;
  b.attempt_failed(0ms);
  REQUIRE(b.next_delay() == 3999ms);  // starts at 6997 ms: inside
  s.now += 3999ms;
  b.attempt_failed(0ms);
  CHECK_FALSE(b.next_delay());  // 6997 + 7999 > 10 s
  CHECK(b.downtime() == 6997ms);
  // A server hint that goes past the limit gives up too.
  auto b2 = s.make(o);
  b2.lost(11s, false);
  CHECK_FALSE(b2.next_delay());
}
