// End to end: Stats and ConnList (docs/protocol.md §14) through the client
// library against a real broker: what they report follows what the
// clients do.

#include "switchyard/client.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/log_helpers.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/test_server.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <set>
#include <string>

using namespace switchyard;
using namespace std::chrono_literals;
using namespace switchyard::test;

namespace {

std::unique_ptr<client> connect_admin(std::uint16_t port, std::string name = "operator") {
  client_options o;
  o.port = port;
  o.client_name = std::move(name);
  o.admin = true;
  auto c = client::connect(o);
  REQUIRE(c);
  return std::move(*c);
}

std::uint64_t value_of(const server_stats& s, std::string_view name) {
  for (const auto& v : s.values)
    if (v.name == name) return v.value;
  FAIL("no value named " << name);
  return 0;
}

std::string setting_of(const server_stats& s, std::string_view name) {
  for (const auto& [n, v] : s.settings)
    if (n == name) return v;
  FAIL("no setting named " << name);
  return {};
}

}  // namespace

TEST_CASE("stats name the server, its settings and its counters and gauges as clients use it", "[e2e][stats]") {
  temp_dir dir;
  test_server server(with_data(dir));
  auto op = connect_admin(server.port());
  auto sub = connect_to(server, "subscriber");
  auto pub = connect_to(server, "publisher");
  std::atomic<int> got{0};
  REQUIRE(sub->subscribe("orders.>", [&](const message&) { ++got; }));
  for (int i = 0; i < 5; ++i) REQUIRE_FALSE(pub->publish("orders.eu", std::string_view("o")));
  REQUIRE_FALSE(pub->flush());
  REQUIRE(wait_until([&] { return got == 5; }));

  const auto s = op->stats();
  REQUIRE(s);
  CHECK(s->version == SWITCHYARD_VERSION);
  CHECK(s->instance_id == op->server_instance());
  CHECK(setting_of(*s, "listen") == "127.0.0.1:" + std::to_string(server.port()));
  CHECK(setting_of(*s, "data_dir") == dir.path().string());
  CHECK(setting_of(*s, "auth") == "off (anonymous)");
  CHECK(value_of(*s, "published_total") == 5);
  CHECK(value_of(*s, "delivered_total") == 5);
  CHECK(value_of(*s, "connections") == 3);
  CHECK(value_of(*s, "subscriptions") == 1);
  CHECK(value_of(*s, "ready") == 1);
  CHECK(value_of(*s, "received_bytes_total") > 0);
  CHECK(value_of(*s, "sent_bytes_total") > 0);
  // Names are unique; counters end in _total and only counters do.
  std::set<std::string> names;
  for (const auto& v : s->values) {
    INFO(v.name);
    CHECK(names.insert(v.name).second);
    CHECK(v.name.ends_with("_total") == v.counter);
  }
  // Counters grow: one more publish shows in the next answer.
  REQUIRE_FALSE(pub->publish("orders.eu", std::string_view("o")));
  REQUIRE_FALSE(pub->flush());
  const auto later = op->stats();
  REQUIRE(later);
  CHECK(value_of(*later, "published_total") == 6);
  CHECK(later->uptime >= s->uptime);
}

TEST_CASE("the connection list shows each client's name, address, subscriptions, inbox and lease, and bytes",
          "[e2e][stats]") {
  test_server server;
  auto op = connect_admin(server.port());
  auto gw = connect_to(server, "gateway-7");
  REQUIRE(gw->subscribe("a.>", [](const message&) {}));
  REQUIRE(gw->subscribe("b.*", [](const message&) {}));
  auto lease = gw->lease_grant(10s);
  REQUIRE(lease);
  REQUIRE_FALSE(gw->open_inbox("gw-7", lease->id, [](const inbox_message&) {}));

  const auto page = op->connections();
  REQUIRE(page);
  CHECK(page->total == 2);
  CHECK(page->next_cursor == 0);
  REQUIRE(page->connections.size() == 2);
  const auto& me = page->connections[0];  // oldest first
  const auto& g = page->connections[1];
  CHECK(me.name == "operator");
  CHECK(std::find(me.capabilities.begin(), me.capabilities.end(), "admin") != me.capabilities.end());
  CHECK(g.name == "gateway-7");
  CHECK(g.address.starts_with("127.0.0.1:"));
  CHECK(g.principal.empty());
  CHECK(g.subscriptions == 2);
  CHECK(g.inboxes == std::vector<std::string>{"gw-7"});
  CHECK(g.inbox_leases == std::vector<lease_id>{lease->id});
  CHECK(g.bytes_in > 0);
  CHECK(g.bytes_out > 0);
  CHECK_FALSE(g.tls);
  CHECK(g.id > me.id);
}

TEST_CASE("the connection list comes in pages: in id order a walk sees every connection once", "[e2e][stats]") {
  test_server server;
  auto op = connect_admin(server.port());
  std::vector<std::unique_ptr<client>> clients;
  for (int i = 0; i < 6; ++i) clients.push_back(connect_to(server, "c" + std::to_string(i)));
  std::set<std::uint64_t> seen;
  std::uint64_t cursor = 0;
  int pages = 0;
  for (; pages < 20; ++pages) {  // bounded: 7 connections, 3 a page
    const auto page = op->connections(connection_order::id, 3, cursor);
    REQUIRE(page);
    CHECK(page->total == 7);
    CHECK(page->connections.size() <= 3);
    for (const auto& c : page->connections) CHECK(seen.insert(c.id).second);
    cursor = page->next_cursor;
    if (cursor == 0) break;
  }
  CHECK(seen.size() == 7);
  CHECK(pages == 2);  // three pages: 3, 3, 1
}

TEST_CASE("the connection list sorted by drops puts a slow consumer first, and stats count it", "[e2e][stats]") {
  auto cfg = test_server::default_config();
  cfg.max_frame = 64 * 1024;
  cfg.max_pending_bytes = 256 * 1024;
  test_server server(cfg);
  auto op = connect_admin(server.port());
  auto idle = connect_to(server, "idle");
  auto slow = connect_to(server, "slow");
  auto pub = connect_to(server, "publisher");
  stall hold;
  REQUIRE(slow->subscribe("x", [&](const message&) { hold.wait(); }));
  const std::string payload(1024, 'p');
  for (int i = 0; i < 20'000; ++i) REQUIRE_FALSE(pub->publish("x", payload));  // 20 MB: more than any socket buffers
  REQUIRE_FALSE(pub->flush());
  std::uint64_t dropped = 0;
  REQUIRE(wait_until([&] {
    const auto page = op->connections(connection_order::dropped, 1);
    if (!page || page->connections.empty()) return false;
    dropped = page->connections[0].dropped;
    return page->connections[0].name == "slow" && dropped > 0;
  }));
  const auto s = op->stats();
  REQUIRE(s);
  CHECK(value_of(*s, "slow_consumers_total") >= 1);
  CHECK(value_of(*s, "dropped_total") >= dropped);
  hold.release();
}
