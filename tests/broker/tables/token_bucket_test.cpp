// Unit tests for broker::token_bucket: the rate and burst of admitted
// hellos, and the retry hints of refused ones (the reservation queue that
// spreads a storm over C/R seconds). Time is a fake clock moved by hand.

#include "broker/tables/token_bucket.hpp"
#include "tests/support/fake_clock.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstddef>

namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using switchyard::broker::token_bucket;
using switchyard::test::fake_clock;

// How many of `n` takes at the clock's time succeed.
int takes(token_bucket& b, fake_clock& clock, int n) {
  int ok = 0;
  for (int i = 0; i < n; ++i) ok += b.try_take(clock.now) ? 1 : 0;
  return ok;
}

}  // namespace

TEST_CASE("a token bucket admits its burst at once, then nothing until a token refills", "[broker][admission]") {
  fake_clock clock;
  token_bucket b(100, 10, clock.now);
  CHECK(takes(b, clock, 50) == 10);
  clock.advance(9ms);  // 0.9 tokens
  CHECK_FALSE(b.try_take(clock.now));
  clock.advance(1ms);
  CHECK(b.try_take(clock.now));
  CHECK_FALSE(b.try_take(clock.now));
}

TEST_CASE("a token bucket refills at its rate and never holds more than its burst", "[broker][admission]") {
  fake_clock clock;
  token_bucket b(100, 10, clock.now);
  CHECK(takes(b, clock, 10) == 10);
  clock.advance(50ms);  // 5 tokens
  CHECK(takes(b, clock, 20) == 5);
  clock.advance(1h);  // capped at the burst
  CHECK(b.tokens(clock.now) == Approx(10));
  CHECK(takes(b, clock, 20) == 10);
}

TEST_CASE("a token bucket admits about rate per second over a long run", "[broker][admission]") {
  fake_clock clock;
  token_bucket b(250, 1, clock.now);
  int admitted = 0;
  // 10 s of 1000 attempts a second.
  for (int ms = 0; ms < 10'000; ++ms) {
    admitted += takes(b, clock, 1);
    clock.advance(1ms);
  }
  CHECK(admitted >= 2'499);
  CHECK(admitted <= 2'501);
}

TEST_CASE("a token bucket with burst 0 holds one second of its rate", "[broker][admission]") {
  fake_clock clock;
  token_bucket b(40, 0, clock.now);
  CHECK(b.burst() == Approx(40));
  CHECK(takes(b, clock, 100) == 40);
}

TEST_CASE("a token bucket with rate 0 admits everything and gives no hint", "[broker][admission]") {
  fake_clock clock;
  token_bucket b(0, 0, clock.now);
  CHECK_FALSE(b.limited());
  CHECK(takes(b, clock, 100'000) == 100'000);
  CHECK(b.reserve(clock.now, 30s) == 0ms);
}

TEST_CASE("refused takers are told to come back one token apart, spread over C/R seconds", "[broker][admission]") {
  fake_clock clock;
  token_bucket b(250, 250, clock.now);
  CHECK(takes(b, clock, 250) == 250);
  // A storm of 5000 more at the same instant: hints 4 ms, 8 ms, ... 20 s.
  milliseconds first{0}, last{0};
  for (int i = 1; i <= 5000; ++i) {
    REQUIRE_FALSE(b.try_take(clock.now));
    const auto hint = b.reserve(clock.now, 30s);
    if (i == 1) first = hint;
    CHECK(hint >= last);  // never earlier than the one before
    last = hint;
  }
  CHECK(first == 4ms);
  CHECK(last == 20'000ms);  // C / R = 5000 / 250 s
}

TEST_CASE("retry hints are clamped to the maximum and the queue stops growing there", "[broker][admission]") {
  fake_clock clock;
  token_bucket b(10, 1, clock.now);
  (void)b.try_take(clock.now);
  for (int i = 0; i < 1000; ++i) CHECK(b.reserve(clock.now, 30s) <= 30s);
  CHECK(b.reserve(clock.now, 30s) == 30s);
  // 10 s later the queue ends 20 s ahead, not 100 s - 10 s.
  clock.advance(10s);
  const auto hint = b.reserve(clock.now, 30s);
  CHECK(hint == 20'100ms);
}

TEST_CASE("reservations in the past are forgotten", "[broker][admission]") {
  fake_clock clock;
  token_bucket b(100, 1, clock.now);
  for (int i = 0; i < 100; ++i) (void)b.reserve(clock.now, 30s);  // up to 1 s ahead
  clock.advance(5s);
  CHECK(b.reserve(clock.now, 30s) == 10ms);  // one step from now, not from the old queue end
}

TEST_CASE("a reconfigured token bucket keeps its tokens up to the new burst", "[broker][admission]") {
  fake_clock clock;
  token_bucket b(100, 100, clock.now);
  CHECK(takes(b, clock, 40) == 40);  // 60 left
  b.configure(10, 20, clock.now);
  CHECK(b.tokens(clock.now) == Approx(20));
  b.configure(0, 0, clock.now);  // off: everything passes
  CHECK(takes(b, clock, 1000) == 1000);
  b.configure(5, 3, clock.now);  // on again: starts full
  CHECK(takes(b, clock, 10) == 3);
}
