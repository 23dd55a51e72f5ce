// End to end: the client library's reconnect against the broker's own
// admission control and drain (docs/reconnect.md, docs/protocol.md §9.1).
// Both sides are real: in-process brokers on 127.0.0.1 (a broker restarted
// on the same port is a second test_server there) and library clients
// that the test leaves alone.

#include "switchyard/client.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/test_server.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

using namespace switchyard;
using namespace std::chrono_literals;
using namespace switchyard::test;

namespace {

// A library client subscribed to `channel`, counting what arrives there and
// what its reconnect reports.
struct watched_client {
  std::atomic<int> received{0};
  std::atomic<int> reconnected{0};
  std::atomic<std::uint32_t> refused{0};
  std::mutex mu;
  std::vector<std::error_code> losses;

  std::error_code first_loss() {
    std::lock_guard lock(mu);
    return losses.empty() ? std::error_code{} : losses.front();
  }
  // Last, so destroyed first: its loop thread calls the callbacks above
  // until it is gone.
  std::unique_ptr<client> conn;
};

std::unique_ptr<watched_client> watched(std::uint16_t port, const std::string& channel, reconnect_options r) {
  auto w = std::make_unique<watched_client>();
  auto* raw = w.get();
  client_options o;
  o.port = port;
  o.client_name = channel;
  o.reconnect = r;
  o.on_disconnect = [raw](std::error_code ec) {
    std::lock_guard lock(raw->mu);
    raw->losses.push_back(ec);
  };
  o.on_reconnect = [raw](const reconnect_info& info) {
    raw->refused += info.refused;
    ++raw->reconnected;
  };
  auto c = client::connect(o);
  REQUIRE(c);
  REQUIRE((*c)->subscribe(channel, [raw](const message&) { ++raw->received; }));
  w->conn = std::move(*c);
  return w;
}

// Publishes once to each client's channel and waits until every one got it.
// The publisher asks for "admin", so a hello rate limit does not turn it away.
bool all_receive(std::uint16_t port, std::vector<std::unique_ptr<watched_client>>& clients) {
  client_options o;
  o.port = port;
  o.client_name = "publisher";
  o.admin = true;
  auto connected = client::connect(o);
  if (!connected) return false;
  auto& pub = *connected;
  for (std::size_t i = 0; i < clients.size(); ++i) {
    clients[i]->received = 0;
    if (pub->publish("back." + std::to_string(i), "hello")) return false;
  }
  if (pub->flush()) return false;
  return wait_until(
      [&] {
        for (auto& c : clients)
          if (c->received.load() == 0) return false;
        return true;
      },
      10s);
}

}  // namespace

TEST_CASE("clients drained from a broker come back by themselves to the broker started after it, subscriptions and all",
          "[e2e][client][reconnect][drain]") {
  auto first = std::make_unique<test_server>();
  const auto port = first->port();
  reconnect_options r;  // the defaults, except a cap that keeps the test short
  r.max_delay = 1s;
  std::vector<std::unique_ptr<watched_client>> clients;
  for (int i = 0; i < 8; ++i) clients.push_back(watched(port, "back." + std::to_string(i), r));

  client_options admin_options;
  admin_options.port = port;
  admin_options.admin = true;
  admin_options.reconnect.enabled = false;
  auto admin = client::connect(admin_options);
  REQUIRE(admin);
  REQUIRE_FALSE((*admin)->drain(500ms));
  REQUIRE(first->wait_finished(10s));
  first->stop();
  CHECK(first->metrics().counters.connections_drained >= 8);
  first.reset();

  test_server second(test_server::default_config(port));
  REQUIRE(wait_until(
      [&] {
        for (auto& c : clients)
          if (c->reconnected.load() == 0) return false;
        return true;
      },
      20s));
  for (auto& c : clients) CHECK(c->first_loss() == errc::draining);
  CHECK(all_receive(port, clients));
}

TEST_CASE("clients reconnecting to a rate-limited broker wait as long as its retry hints say",
          "[e2e][client][reconnect][admission]") {
  constexpr int n = 12;
  auto first = std::make_unique<test_server>();
  const auto port = first->port();
  // Left to their own delays, these clients would try again every few
  // milliseconds; only the broker's hints can hold them back.
  reconnect_options r;
  r.base_delay = 1ms;
  r.max_delay = 2ms;
  std::vector<std::unique_ptr<watched_client>> clients;
  for (int i = 0; i < n; ++i) clients.push_back(watched(port, "back." + std::to_string(i), r));
  first.reset();  // stops: every client is told shutting_down

  auto cfg = test_server::default_config(port);
  // One hello every 200 ms: a client a little late for its hinted time
  // (a busy machine) still finds its token.
  cfg.max_hellos_per_s = 5;
  cfg.hello_burst = 1;
  test_server second(cfg);
  REQUIRE(wait_until(
      [&] {
        for (auto& c : clients)
          if (c->reconnected.load() == 0) return false;
        return true;
      },
      20s));
  const auto m = second.live_metrics();
  std::uint64_t refused = 0;
  for (auto& c : clients) refused += c->refused.load();
  // Each refusal reserved a later token for its client: obeyed, the hints
  // let each client in at about its second try, so refusals stay near n
  // (ignored, clients retrying every 2 ms for ~2.4 s would be refused
  // hundreds of times).
  CHECK(m.counters.hellos_rate_limited > 0);
  CHECK(m.counters.hellos_rate_limited <= 3 * n);
  CHECK(refused == m.counters.hellos_rate_limited);
  CHECK(all_receive(port, clients));
}
