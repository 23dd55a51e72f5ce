// End to end: server::metrics gathers every counter and gauge of a running
// broker in one snapshot (connections, tables, queues, memory, the log).

#include "switchyard/client.hpp"
#include "tests/support/byte_pattern.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/test_server.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <thread>

using namespace switchyard;
using namespace std::chrono_literals;
using namespace switchyard::test;

namespace {

using switchyard::test::bytes_of;

}  // namespace

TEST_CASE("metrics count the connections, tables and log of a running server", "[e2e][metrics]") {
  temp_dir dir;
  auto cfg = test_server::default_config();
  cfg.data_dir = dir.path().string();
  test_server server(cfg);

  const auto idle = server.live_metrics();
  CHECK(idle.connections == 0);
  CHECK(idle.log_enabled);

  auto gateway = connect_to(server, "gateway");
  auto service = connect_to(server, "service");
  REQUIRE(gateway->subscribe("orders.*", [](const message&) {}));
  REQUIRE(gateway->subscribe("billing.>", [](const message&) {}));
  auto lease = gateway->lease_grant(10s);
  REQUIRE(lease);
  REQUIRE_FALSE(gateway->open_inbox("gw-1", lease->id, [](const inbox_message&) {}));
  REQUIRE(gateway->registry_put("user:1", "gw-1", lease->id));
  REQUIRE(gateway->registry_put("user:2", "gw-1", lease->id));
  REQUIRE(service->send("user:1", std::string_view("hi")));
  REQUIRE_FALSE(service->send("user:9", std::string_view("nobody")));
  const std::string payload = "record";
  REQUIRE(service->append("audit", bytes_of(payload)));
  REQUIRE(service->append("audit", bytes_of(payload)));
  REQUIRE(service->publish("orders.eu", std::string_view("o")) == std::error_code{});
  REQUIRE_FALSE(service->flush());

  const auto m = server.live_metrics();
  CHECK(m.connections == 2);
  CHECK(m.connections_rejecting == 0);
  CHECK(m.counters.connections_accepted == 2);
  CHECK(m.subscriptions == 2);
  CHECK(m.leases == 1);
  CHECK(m.registry_entries == 2);
  CHECK(m.inboxes == 1);
  CHECK(m.counters.sends_routed == 1);
  CHECK(m.counters.sends_unrouted == 1);
  CHECK(m.counters.published == 1);
  CHECK(m.group_commit.records == 2);
  CHECK(m.group_commit.batches >= 1);
  CHECK(m.appends_waiting == 0);
  CHECK(m.incomplete_bytes == 0);
  CHECK(m.arena_chunks > 0);

  gateway.reset();
  service.reset();
  // Closing is asynchronous: the count drops once the broker saw both go.
  broker::metrics_snapshot after;
  for (int i = 0; i < 200; ++i) {
    after = server.live_metrics();
    if (after.connections == 0) break;
    std::this_thread::sleep_for(10ms);
  }
  CHECK(after.connections == 0);
  CHECK(after.subscriptions == 0);
  CHECK(after.inboxes == 1);  // bound to its lease until it expires
}
