// End to end: lease stall protection against a real pause of the broker
// process (SIGSTOP / SIGCONT), with the shortest TTL the defaults allow.

#include "switchyard/client.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/process.hpp"

#include <catch2/catch.hpp>

#include <signal.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

using namespace switchyard;
using namespace std::chrono_literals;
using test::connect_to;
using test::start_server_process;

TEST_CASE("leases kept alive every TTL/3 survive a 3 s SIGSTOP of the broker with TTL 1 s", "[e2e][broker][lease]") {
  auto server = start_server_process();
  auto c = connect_to(server, "stall");
  // 20: each lease's keepalive, one blocking round trip after another, has
  // TTL/3/20 = 16 ms, room for a slow round trip to a broker under ASan.
  constexpr int n = 20;
  constexpr auto ttl = 1000ms;
  std::vector<lease_id> ids;
  for (int i = 0; i < n; ++i) {
    auto l = c->lease_grant(ttl);
    REQUIRE(l);
    REQUIRE(l->ttl == ttl);
    ids.push_back(l->id);
  }
  // Keepalives spread evenly: lease i every TTL/3, one lease at a time.
  const auto step = ttl / 3 / n;
  std::atomic<bool> paused{false};
  std::thread pauser([&] {
    std::this_thread::sleep_for(1s);
    ::kill(server.pid(), SIGSTOP);
    paused = true;
    std::this_thread::sleep_for(3s);
    ::kill(server.pid(), SIGCONT);
  });
  int refused = 0, sent = 0;
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + 6s;
  auto next = start;
  for (int i = 0; std::chrono::steady_clock::now() < end && sent < 100'000; i = (i + 1) % n) {
    std::this_thread::sleep_until(next);
    next += step;
    auto r = c->lease_keepalive(ids[i]);  // blocks while the broker is stopped
    ++sent;
    if (!r) {
      INFO("lease " << ids[i] << ": " << r.error().message());
      CHECK(r.error() == errc::not_found);
      ++refused;
    }
    if (std::chrono::steady_clock::now() > next + 500ms) next = std::chrono::steady_clock::now();  // after the pause
  }
  pauser.join();
  CHECK(paused);
  CHECK(sent > 2 * n);
  CHECK(refused == 0);
  for (const lease_id id : ids) CHECK(c->lease_time_to_live(id));
}
