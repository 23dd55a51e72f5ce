// Unit tests for broker::drain_schedule: how many connections a drain has
// closed by each moment of its window. Pure arithmetic on a fake clock.

#include "broker/tables/drain_schedule.hpp"
#include "tests/support/fake_clock.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstddef>
#include <vector>

namespace {
using namespace std::chrono_literals;
using switchyard::broker::drain_schedule;
using switchyard::test::fake_clock;
}  // namespace

TEST_CASE("a drain of 50,000 connections over 300 s closes about 167 a second in 100 ms batches", "[broker][drain]") {
  fake_clock clock;
  const drain_schedule d(clock.now, 300s, 50'000);
  CHECK(d.period() == 100ms);
  CHECK(d.target(clock.now) == 0);
  std::size_t handled = 0, largest = 0, smallest = 50'000;
  std::vector<std::size_t> per_second(300, 0);
  for (int tick = 1; tick <= 3000; ++tick) {
    clock.advance(d.period());
    const auto t = d.target(clock.now);
    REQUIRE(t >= handled);
    largest = std::max(largest, t - handled);
    smallest = std::min(smallest, t - handled);
    per_second[static_cast<std::size_t>(tick - 1) / 10] += t - handled;
    handled = t;
  }
  CHECK(handled == 50'000);
  CHECK(largest <= 17);
  CHECK(smallest >= 16);
  for (const auto n : per_second) {
    CHECK(n >= 166);
    CHECK(n <= 167);
  }
}

TEST_CASE("a drain closes every connection by the end of its window", "[broker][drain]") {
  fake_clock clock;
  const drain_schedule d(clock.now, 1s, 7);
  CHECK(d.target(clock.now + 999ms) <= 7);
  CHECK(d.target(clock.now + 1s) == 7);
  CHECK(d.target(clock.now + 1h) == 7);
  CHECK(d.end() == clock.now + 1s);
}

TEST_CASE("a drain of few connections spreads them over the window, not at its start", "[broker][drain]") {
  fake_clock clock;
  const drain_schedule d(clock.now, 2s, 4);
  CHECK(d.period() == 100ms);
  CHECK(d.target(clock.now + 100ms) == 1);  // ceil(4 * 0.05)
  CHECK(d.target(clock.now + 500ms) == 1);
  CHECK(d.target(clock.now + 501ms) == 2);
  CHECK(d.target(clock.now + 1001ms) == 3);
  CHECK(d.target(clock.now + 1501ms) == 4);
}

TEST_CASE("a short drain's batches come a tenth of the window apart", "[broker][drain]") {
  fake_clock clock;
  CHECK(drain_schedule(clock.now, 200ms, 10).period() == 20ms);
  CHECK(drain_schedule(clock.now, 5ms, 10).period() == 1ms);
  CHECK(drain_schedule(clock.now, 0ms, 10).window() == 1ms);
}

TEST_CASE("a drain with no connections is done at once", "[broker][drain]") {
  fake_clock clock;
  const drain_schedule d(clock.now, 30s, 0);
  clock.advance(100ms);
  CHECK(d.target(clock.now) == 0);
  CHECK(d.connections() == 0);
}
