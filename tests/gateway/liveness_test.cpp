// liveness: when a socket is due a ping or a close, on made-up times.

#include "gateway/liveness.hpp"

#include <catch2/catch.hpp>

using namespace switchyard::edge;
using namespace std::chrono_literals;

namespace {

const liveness_timing timing{.hello_timeout = 10s, .ping_interval = 25s, .dead_after = 60s, .close_grace = 2s};
const steady_time t0 = steady_time() + 1000s;

liveness live_socket() {
  liveness s;
  s.accepted = s.last_received = s.last_ping = t0;
  s.upgraded = s.hello_received = true;
  return s;
}

}  // namespace

TEST_CASE("a socket without a hello is closed at the hello timeout", "[gateway][liveness]") {
  liveness s;
  s.accepted = s.last_received = s.last_ping = t0;
  CHECK(due(s, timing, t0 + 9999ms) == liveness_action::none);
  CHECK(due(s, timing, t0 + 10s) == liveness_action::hello_timeout);
  s.upgraded = true;  // upgraded, still no hello: same
  CHECK(due(s, timing, t0 + 10s) == liveness_action::hello_timeout);
}

TEST_CASE("a live socket is pinged every interval and dead after the deadline", "[gateway][liveness]") {
  auto s = live_socket();
  CHECK(due(s, timing, t0 + 24s) == liveness_action::none);
  CHECK(due(s, timing, t0 + 25s) == liveness_action::ping);
  s.last_ping = t0 + 25s;
  CHECK(due(s, timing, t0 + 49s) == liveness_action::none);
  CHECK(due(s, timing, t0 + 50s) == liveness_action::ping);
  s.last_ping = t0 + 50s;
  CHECK(due(s, timing, t0 + 60s) == liveness_action::dead);
  s.last_received = t0 + 55s;  // a pong came
  CHECK(due(s, timing, t0 + 60s) == liveness_action::none);
}

TEST_CASE("a token that expires closes the socket before anything else but an abort", "[gateway][liveness]") {
  auto s = live_socket();
  s.token_expiry = t0 + 30s;
  CHECK(due(s, timing, t0 + 29s) == liveness_action::ping);
  CHECK(due(s, timing, t0 + 30s) == liveness_action::token_expired);
}

TEST_CASE("a close that does not finish within the grace aborts the socket", "[gateway][liveness]") {
  auto s = live_socket();
  s.closing_since = t0 + 100s;  // long dead: the close is what counts now
  CHECK(due(s, timing, t0 + 101s) == liveness_action::none);
  CHECK(due(s, timing, t0 + 102s) == liveness_action::abort);
}
