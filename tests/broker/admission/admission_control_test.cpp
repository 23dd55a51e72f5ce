// Unit tests for broker::admission_control: the connection cap with its
// admin slots, the hello rate, draining, and the retry hint and counter of
// each refusal. Time is a fake clock moved by hand.

#include "broker/admission/admission_control.hpp"
#include "tests/support/fake_clock.hpp"

#include <catch2/catch.hpp>

#include <chrono>

namespace {
using namespace std::chrono_literals;
using switchyard::broker::admission_control;
using switchyard::broker::server_config;
using switchyard::broker::server_counters;
using switchyard::protocol::errc;
using switchyard::test::fake_clock;
}  // namespace

TEST_CASE("admission at the cap keeps the admin slots for hellos asking admin", "[broker][admission]") {
  fake_clock clock;
  server_config cfg;
  cfg.max_connections = 10;
  cfg.admin_slots = 2;
  server_counters counters;
  admission_control a(cfg, counters, clock.now);
  // Accepted while under cap + slots, whatever the hello will say.
  CHECK_FALSE(a.on_accept(10, clock.now));
  CHECK_FALSE(a.on_accept(11, clock.now));
  const auto full = a.on_accept(12, clock.now);
  REQUIRE(full);
  CHECK(full->code == errc::too_many_connections);
  CHECK(full->retry_after == admission_control::cap_retry_after);
  // At the hello: the 11th is refused unless it asks for admin.
  CHECK_FALSE(a.on_hello(false, 10, clock.now));
  const auto plain = a.on_hello(false, 11, clock.now);
  REQUIRE(plain);
  CHECK(plain->code == errc::too_many_connections);
  CHECK(plain->retry_after > 0ms);
  CHECK_FALSE(a.on_hello(true, 11, clock.now));
  CHECK_FALSE(a.on_hello(true, 12, clock.now));
  CHECK(counters.connections_rejected == 2);
}

TEST_CASE("admission refuses hellos over the rate with spread retry hints and counts them", "[broker][admission]") {
  fake_clock clock;
  server_config cfg;
  cfg.max_hellos_per_s = 100;
  cfg.hello_burst = 5;
  server_counters counters;
  admission_control a(cfg, counters, clock.now);
  for (int i = 0; i < 5; ++i) CHECK_FALSE(a.on_hello(false, 1, clock.now));
  const auto first = a.on_hello(false, 1, clock.now);
  const auto second = a.on_hello(false, 1, clock.now);
  REQUIRE(first);
  REQUIRE(second);
  CHECK(first->code == errc::rate_limited);
  CHECK(first->retry_after == 10ms);
  CHECK(second->retry_after == 20ms);
  // Admin hellos are not rate limited.
  CHECK_FALSE(a.on_hello(true, 1, clock.now));
  CHECK(counters.hellos_rate_limited == 2);
  clock.advance(10ms);
  CHECK_FALSE(a.on_hello(false, 1, clock.now));
}

TEST_CASE("admission takes a new hello rate at reconfigure", "[broker][admission]") {
  fake_clock clock;
  server_config cfg;
  server_counters counters;
  admission_control a(cfg, counters, clock.now);
  for (int i = 0; i < 1000; ++i) REQUIRE_FALSE(a.on_hello(false, 1, clock.now));
  cfg.max_hellos_per_s = 1;
  a.reconfigure(clock.now);
  CHECK_FALSE(a.on_hello(false, 1, clock.now));
  CHECK(a.on_hello(false, 1, clock.now));
}

TEST_CASE("a cap refusal with a hello rate takes its place in the rate's queue", "[broker][admission]") {
  fake_clock clock;
  server_config cfg;
  cfg.max_connections = 1;
  cfg.admin_slots = 0;
  cfg.max_hellos_per_s = 1;
  server_counters counters;
  admission_control a(cfg, counters, clock.now);
  CHECK(a.on_accept(1, clock.now)->retry_after == 1000ms);
  CHECK(a.on_accept(1, clock.now)->retry_after == 2000ms);
}

TEST_CASE("a draining server refuses every new connection, admin too, with the reconnect window",
          "[broker][admission]") {
  fake_clock clock;
  server_config cfg;
  server_counters counters;
  admission_control a(cfg, counters, clock.now);
  a.begin_drain(admission_control::reconnect_window_for(300s));
  CHECK(a.draining());
  const auto at_accept = a.on_accept(0, clock.now);
  REQUIRE(at_accept);
  CHECK(at_accept->code == errc::draining);
  CHECK(at_accept->retry_after == 10s);
  const auto at_hello = a.on_hello(true, 1, clock.now);
  REQUIRE(at_hello);
  CHECK(at_hello->code == errc::draining);
  CHECK(counters.hellos_draining == 2);
  CHECK(admission_control::reconnect_window_for(2s) == 2s);
}
