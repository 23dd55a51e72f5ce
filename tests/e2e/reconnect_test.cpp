// End to end: the client library reconnects by itself. The broker is the
// real switchyard-server binary, killed with SIGKILL (or stopped with
// SIGTERM) and restarted on the same port and data folder
// (bench::server_process::restart); the clients then work again without
// any code of the test's: subscriptions, durable positions, leases,
// inboxes and routes come back, held publishes go out, and the callbacks
// say what happened.

#include "switchyard/client.hpp"
#include "switchyard/gateway.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/process.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <signal.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace switchyard;
using namespace std::chrono_literals;
using namespace switchyard::test;

namespace {

// Quick attempts, so that tests take milliseconds once the broker is back.
reconnect_options fast_reconnect() {
  reconnect_options r;
  r.base_delay = 20ms;
  r.max_delay = 200ms;
  return r;
}

// What a client's reconnect callbacks reported (written on its loop
// thread, read by the test).
struct lifecycle_probe {
  std::mutex mu;
  std::vector<std::error_code> disconnects;
  std::vector<reconnect_info> reconnects;
  std::vector<std::error_code> closes;
  std::atomic<int> disconnected{0};
  std::atomic<int> reconnected{0};
  std::atomic<int> closed{0};

  void attach(client_options& o) {
    o.on_disconnect = [this](std::error_code ec) {
      std::lock_guard lock(mu);
      disconnects.push_back(ec);
      ++disconnected;
    };
    o.on_reconnect = [this](const reconnect_info& info) {
      std::lock_guard lock(mu);
      reconnects.push_back(info);
      ++reconnected;
    };
    o.on_closed = [this](std::error_code ec) {
      std::lock_guard lock(mu);
      closes.push_back(ec);
      ++closed;
    };
  }
  reconnect_info last_reconnect() {
    std::lock_guard lock(mu);
    return reconnects.back();
  }
  std::error_code last_disconnect() {
    std::lock_guard lock(mu);
    return disconnects.back();
  }
  std::error_code last_close() {
    std::lock_guard lock(mu);
    return closes.back();
  }
};

// A client of `server` with fast reconnects, reporting to `probe`.
std::unique_ptr<client> connect_reconnecting(const bench::server_process& server, lifecycle_probe& probe,
                                             std::string name, reconnect_options r = fast_reconnect()) {
  client_options o;
  o.port = server.port();
  o.client_name = std::move(name);
  o.reconnect = r;
  probe.attach(o);
  auto c = client::connect(o);
  REQUIRE(c);
  return std::move(*c);
}

// SIGKILL, then the same binary again on the same port and data folder.
void kill_and_restart(bench::server_process& server) {
  REQUIRE(server.signal_and_wait(SIGKILL, 10s) == -SIGKILL);
  auto again = server.restart(10s);
  if (!again) FAIL(again.error());
}

std::span<const std::byte> bytes(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

}  // namespace

TEST_CASE("a subscriber left alone receives again after the broker is killed and restarted",
          "[e2e][client][reconnect]") {
  auto server = start_server_process();
  lifecycle_probe probe;
  auto sub = connect_reconnecting(server, probe, "sub");
  collector<std::string> got;
  REQUIRE(sub->subscribe("orders.*", [&](const message& m) { got.add(std::string(m.payload_text())); }));
  const auto instance_before = sub->server_instance();

  kill_and_restart(server);
  REQUIRE(wait_until([&] { return probe.reconnected.load() == 1; }));
  CHECK(sub->connected());
  CHECK(probe.disconnected == 1);
  const auto info = probe.last_reconnect();
  CHECK(info.attempts >= 1);
  CHECK(info.new_server_instance);
  CHECK(sub->server_instance() != instance_before);
  CHECK(sub->reconnect_attempts_total() >= info.attempts);

  auto pub = connect_to(server, "pub");
  REQUIRE_FALSE(pub->publish_confirmed("orders.new", bytes("after")));
  REQUIRE(wait_until([&] { return got.count == 1; }));
  CHECK(got.snapshot() == std::vector<std::string>{"after"});
  CHECK(probe.closed == 0);
}

TEST_CASE("on_disconnect reports shutting_down when the broker stops, and the client comes back to its restart",
          "[e2e][client][reconnect]") {
  auto server = start_server_process();
  lifecycle_probe probe;
  auto c = connect_reconnecting(server, probe, "c");
  REQUIRE(server.signal_and_wait(SIGTERM, 10s) == 0);
  REQUIRE(wait_until([&] { return probe.disconnected.load() == 1; }));
  CHECK(probe.last_disconnect() == errc::shutting_down);
  CHECK_FALSE(c->connected());
  auto again = server.restart(10s);
  if (!again) FAIL(again.error());
  REQUIRE(wait_until([&] { return probe.reconnected.load() == 1; }));
  CHECK(c->connected());
  CHECK_FALSE(c->flush());
}

TEST_CASE("a send to a user reaches a gateway left alone after the broker is killed and restarted",
          "[e2e][client][reconnect][routing]") {
  auto server = start_server_process();
  lifecycle_probe probe;
  auto conn = connect_reconnecting(server, probe, "gateway");
  collector<std::string> delivered;
  collector<std::pair<lease_id, lease_id>> renewals;
  auto gw = gateway::start(*conn,
                           {.inbox_id = "gw-7",
                            .on_message = [&](const inbox_message& m) { delivered.add(std::string(m.payload_text())); },
                            .on_lease_renewed =
                                [&](lease_id o, lease_id n) {
                                  renewals.add({o, n});
                                },
                            .routes = {"user:alice"}});
  REQUIRE(gw);
  const lease_id old_lease = (*gw)->lease();

  kill_and_restart(server);
  auto service = connect_to(server, "service");
  // Routes again once the gateway's client restored its session; the
  // wait bounds the test, it measures nothing.
  REQUIRE(wait_until([&] { return service->send("user:alice", "probe").has_value(); }, 10s));
  auto routed = service->send("user:alice", "hello");
  REQUIRE(routed);
  CHECK(*routed == "gw-7");
  REQUIRE(wait_until([&] { return delivered.count >= 2; }));
  CHECK(delivered.snapshot().back() == "hello");
  // The new broker did not know the lease: the client granted a new one,
  // and the gateway learnt it.
  REQUIRE(renewals.count == 1);
  CHECK(renewals.snapshot()[0].first == old_lease);
  CHECK((*gw)->lease() == renewals.snapshot()[0].second);
  CHECK(probe.last_reconnect().leases_replaced ==
        std::vector<std::pair<lease_id, lease_id>>{{old_lease, (*gw)->lease()}});
  // Its keepalive goes on under the new lease.
  CHECK(conn->lease_time_to_live((*gw)->lease()));
}

TEST_CASE("a lease granted through the client is granted again after a restart, and its old id reaches the new one",
          "[e2e][client][reconnect][routing]") {
  auto server = start_server_process();
  lifecycle_probe probe;
  auto c = connect_reconnecting(server, probe, "owner");
  auto lease = c->lease_grant(20s);
  REQUIRE(lease);
  REQUIRE(c->registry_put("svc:search", "10.0.0.7", lease->id));
  collector<std::string> inbox;
  REQUIRE_FALSE(
      c->open_inbox("box-1", lease->id, [&](const inbox_message& m) { inbox.add(std::string(m.payload_text())); }));
  REQUIRE(c->registry_put("user:bob", "box-1", lease->id));

  kill_and_restart(server);
  REQUIRE(wait_until([&] { return probe.reconnected.load() == 1; }));
  const auto info = probe.last_reconnect();
  REQUIRE(info.leases_replaced.size() == 1);
  CHECK(info.leases_replaced[0].first == lease->id);
  const lease_id fresh = info.leases_replaced[0].second;
  CHECK(fresh != lease->id);

  // The entries are back under the new lease, with their values and TTL.
  auto entry = c->registry_get("svc:search");
  REQUIRE(entry);
  CHECK(entry->value == "10.0.0.7");
  CHECK(entry->lease == fresh);
  auto ttl = c->lease_time_to_live(fresh);
  REQUIRE(ttl);
  CHECK(ttl->ttl == lease->ttl);
  // Code holding the old id goes on working.
  auto kept = c->lease_keepalive(lease->id);
  REQUIRE(kept);
  CHECK(kept->id == fresh);
  // The inbox is open again under it.
  auto service = connect_to(server, "service");
  auto routed = service->send("user:bob", "hi bob");
  REQUIRE(routed);
  CHECK(*routed == "box-1");
  REQUIRE(wait_until([&] { return inbox.count == 1; }));
}

TEST_CASE("a durable subscription gets the messages published while it was away, once each and in order",
          "[e2e][client][reconnect][log]") {
  auto server = start_server_process();
  lifecycle_probe probe;
  // A slower first attempt than the publisher's few milliseconds below, so
  // that (almost always) the messages are published while it is away.
  auto r = fast_reconnect();
  r.base_delay = 1500ms;
  r.max_delay = 3000ms;
  auto sub = connect_reconnecting(server, probe, "durable-sub", r);
  collector<std::pair<std::uint64_t, bool>> got;  // seq, replayed
  auto id = sub->subscribe_durable("events.>", [&](const message& m) { got.add({m.seq, m.replayed}); });
  REQUIRE(id);
  {
    auto pub = connect_to(server, "pub");
    for (int i = 0; i < 3; ++i) REQUIRE(pub->publish_durable("events.a", "ev", bytes("before")));
  }
  REQUIRE(wait_until([&] { return got.count == 3; }));

  kill_and_restart(server);
  {
    auto pub = connect_to(server, "pub-2");
    for (int i = 0; i < 3; ++i) REQUIRE(pub->publish_durable("events.a", "ev", bytes("while away")));
  }
  const bool published_while_away = probe.reconnected.load() == 0;
  REQUIRE(wait_until([&] { return got.count == 6; }));
  REQUIRE(probe.reconnected == 1);
  std::this_thread::sleep_for(50ms);  // nothing more (no duplicate) arrives
  const auto all = got.snapshot();
  REQUIRE(all.size() == 6);
  for (std::size_t i = 0; i < all.size(); ++i) CHECK(all[i].first == i + 1);
  if (published_while_away) {
    for (std::size_t i = 3; i < all.size(); ++i) CHECK(all[i].second);  // read from the log
  } else {
    WARN("the subscriber was back before the publishes: they came live");
  }
  auto positions = sub->stream_positions_of(*id);
  CHECK(positions["ev"].seq == 6);
}

TEST_CASE("a durable gateway inbox gets the durable sends made while its broker was restarting, once each",
          "[e2e][client][reconnect][routing][log]") {
  auto server = start_server_process();
  lifecycle_probe probe;
  auto r = fast_reconnect();
  r.base_delay = 1500ms;  // as above: away while the service sends (almost always)
  r.max_delay = 3000ms;
  auto conn = connect_reconnecting(server, probe, "gateway", r);
  collector<std::pair<std::uint64_t, bool>> got;  // seq, replayed
  auto gw = gateway::start(*conn, {.inbox_id = "gw-d",
                                   .on_message =
                                       [&](const inbox_message& m) {
                                         got.add({m.seq, m.replayed});
                                       },
                                   .routes = {"user:carol"},
                                   .durable = durable_options{}});
  REQUIRE(gw);
  const std::string_view carol[] = {"user:carol"};
  {
    auto service = connect_to(server, "service");
    for (int i = 0; i < 2; ++i) REQUIRE(service->send_durable(carol, "conv:1", bytes("before")));
  }
  REQUIRE(wait_until([&] { return got.count == 2; }));

  kill_and_restart(server);
  {
    auto service = connect_to(server, "service-2");
    for (int i = 0; i < 2; ++i) REQUIRE(service->send_durable(carol, "conv:1", bytes("while away")));
  }
  const bool sent_while_away = probe.reconnected.load() == 0;
  REQUIRE(wait_until([&] { return got.count == 4; }));
  std::this_thread::sleep_for(50ms);  // nothing more (no duplicate) arrives
  const auto all = got.snapshot();
  REQUIRE(all.size() == 4);
  for (std::size_t i = 0; i < all.size(); ++i) CHECK(all[i].first == i + 1);
  if (sent_while_away) {
    CHECK(all[2].second);
    CHECK(all[3].second);
  } else {
    WARN("the gateway was back before the sends: they came live");
  }
}

TEST_CASE("publishes made while the broker is down are held and delivered in order after the session is restored",
          "[e2e][client][reconnect]") {
  auto server = start_server_process();
  lifecycle_probe probe;
  auto c = connect_reconnecting(server, probe, "c");
  collector<std::string> got;
  REQUIRE(c->subscribe("held.x", [&](const message& m) { got.add(std::string(m.payload_text())); }));
  REQUIRE(server.signal_and_wait(SIGKILL, 10s) == -SIGKILL);
  REQUIRE(wait_until([&] { return probe.disconnected.load() == 1; }));
  CHECK_FALSE(c->connected());
  for (int i = 0; i < 5; ++i) REQUIRE_FALSE(c->publish("held.x", std::to_string(i)));
  auto again = server.restart(10s);
  if (!again) FAIL(again.error());
  // The subscription is restored before the held publishes go out, so the
  // client receives its own publishes.
  REQUIRE(wait_until([&] { return got.count == 5; }));
  CHECK(got.snapshot() == std::vector<std::string>{"0", "1", "2", "3", "4"});
}

TEST_CASE("publishing while disconnected fails with buffer_full past reconnect.buffer_bytes",
          "[e2e][client][reconnect]") {
  auto server = start_server_process();
  lifecycle_probe probe;
  auto r = fast_reconnect();
  r.buffer_bytes = 1000;
  auto c = connect_reconnecting(server, probe, "c", r);
  REQUIRE(server.signal_and_wait(SIGKILL, 10s) == -SIGKILL);
  REQUIRE(wait_until([&] { return probe.disconnected.load() == 1; }));
  const std::string payload(300, 'x');
  int held = 0;
  std::error_code ec;
  for (int i = 0; i < 10 && !ec; ++i) {
    ec = c->publish("full.x", payload);
    if (!ec) ++held;
  }
  CHECK(ec == errc::buffer_full);
  CHECK(held >= 2);
  CHECK(held <= 3);
}

TEST_CASE("a request in flight when the broker dies fails with connection_lost", "[e2e][client][reconnect]") {
  auto server = start_server_process();
  lifecycle_probe probe;
  auto c = connect_reconnecting(server, probe, "c");
  // Stopped, the broker reads nothing: the ping stays unanswered.
  REQUIRE(::kill(server.pid(), SIGSTOP) == 0);
  std::promise<std::error_code> answer;
  c->async_flush([&](std::error_code ec) { answer.set_value(ec); });
  auto result = answer.get_future();
  CHECK(result.wait_for(100ms) == std::future_status::timeout);
  REQUIRE(server.signal_and_wait(SIGKILL, 10s) == -SIGKILL);
  REQUIRE(result.wait_for(10s) == std::future_status::ready);
  CHECK(result.get() == errc::connection_lost);
}

TEST_CASE("a blocking request made while the client reconnects waits for the restored session",
          "[e2e][client][reconnect]") {
  auto server = start_server_process();
  lifecycle_probe probe;
  client_options o;
  o.port = server.port();
  o.request_timeout = 20s;
  o.reconnect = fast_reconnect();
  probe.attach(o);
  auto c = client::connect(o);
  REQUIRE(c);
  REQUIRE(server.signal_and_wait(SIGKILL, 10s) == -SIGKILL);
  REQUIRE(wait_until([&] { return probe.disconnected.load() == 1; }));
  auto appended = std::async(std::launch::async, [&] { return (*c)->append("waits", bytes("x")); });
  CHECK(appended.wait_for(100ms) == std::future_status::timeout);
  auto again = server.restart(10s);
  if (!again) FAIL(again.error());
  auto r = appended.get();
  REQUIRE(r);
  CHECK(r->seq == 1);
}

TEST_CASE("a client gives up after max_attempts and reports reconnect_failed through on_closed",
          "[e2e][client][reconnect]") {
  auto server = start_server_process();
  lifecycle_probe probe;
  auto r = fast_reconnect();
  r.base_delay = 5ms;
  r.max_attempts = 3;
  auto c = connect_reconnecting(server, probe, "c", r);
  REQUIRE(server.signal_and_wait(SIGKILL, 10s) == -SIGKILL);
  REQUIRE(wait_until([&] { return probe.closed.load() == 1; }));
  CHECK(probe.last_close() == errc::reconnect_failed);
  CHECK(c->reconnect_attempts_total() == 3);
  CHECK(probe.reconnected == 0);
  CHECK_FALSE(c->connected());
  CHECK(c->publish("a.b", "x") == errc::not_connected);
  CHECK(c->flush() == errc::not_connected);
}

TEST_CASE("connect() fails fast when no broker answers, reconnect or not", "[e2e][client][reconnect]") {
  std::uint16_t port = 0;
  {
    auto server = start_server_process();
    port = server.port();
  }  // stopped: nobody listens there now
  lifecycle_probe probe;
  client_options o;
  o.port = port;
  probe.attach(o);
  auto c = client::connect(o);
  REQUIRE_FALSE(c);
  CHECK(c.error() != errc::timeout);  // refused at once, not after connect_timeout
  CHECK(probe.closed == 0);
  CHECK(probe.disconnected == 0);
}

TEST_CASE("with reconnect disabled a lost connection closes the client and on_closed says why",
          "[e2e][client][reconnect]") {
  auto server = start_server_process();
  lifecycle_probe probe;
  reconnect_options off;
  off.enabled = false;
  auto c = connect_reconnecting(server, probe, "c", off);
  REQUIRE(server.signal_and_wait(SIGTERM, 10s) == 0);
  REQUIRE(wait_until([&] { return probe.closed.load() == 1; }));
  CHECK(probe.last_disconnect() == errc::shutting_down);
  CHECK(probe.last_close() == errc::shutting_down);
  auto again = server.restart(10s);
  if (!again) FAIL(again.error());
  std::this_thread::sleep_for(100ms);
  CHECK_FALSE(c->connected());
  CHECK(c->publish("a.b", "x") == errc::not_connected);
  CHECK(c->reconnect_attempts_total() == 0);
}

TEST_CASE("connect() refuses a broker address that is not host:port and takes one that is",
          "[e2e][client][reconnect]") {
  for (const char* bad : {"localhost", "127.0.0.1:", ":7878", "127.0.0.1:70000", "::1:7878", "127.0.0.1:78x"}) {
    INFO(bad);
    client_options o;
    o.addresses = {bad};
    auto c = client::connect(o);
    REQUIRE_FALSE(c);
    CHECK(c.error() == std::errc::invalid_argument);
  }
  auto server = start_server_process();
  client_options o;
  o.addresses = {"127.0.0.1:" + std::to_string(server.port())};
  CHECK(client::connect(o));
}
