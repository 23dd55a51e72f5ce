// End to end: leases, the routing registry, gateway inboxes and
// send-to-user through a real broker on 127.0.0.1 with the client library
// and its gateway helper.

#include "protocol/errc.hpp"
#include "protocol/frame_builder.hpp"
#include "protocol/limits.hpp"
#include "switchyard/client.hpp"
#include "switchyard/gateway.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/raw_connection.hpp"
#include "tests/support/test_server.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <span>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace switchyard;
using namespace std::chrono_literals;
using protocol::wire::Message;
using namespace switchyard::test;

namespace {

// Short leases and a fast sweeper so that expiry tests take a fraction of
// a second.
broker::server_config routing_config() {
  auto cfg = test_server::default_config();
  cfg.lease_min_ttl = 100ms;
  cfg.lease_max_ttl = 5000ms;
  cfg.sweep_period = 20ms;
  return cfg;
}

// One delivery as seen by an inbox handler (copied: the views die with the call).
struct delivery {
  std::string inbox;
  std::vector<std::string> keys;
  std::string payload;
};

// Collects inbox deliveries (loop thread writes, test thread reads).
struct deliveries : test::collector<delivery> {
  inbox_handler handler() {
    return [this](const inbox_message& m) {
      delivery d{std::string(m.inbox), {}, std::string(m.payload_text())};
      for (const auto k : m.route_keys) d.keys.emplace_back(k);
      add(std::move(d));
    };
  }
};

// A gateway "gw-7" routing user:alice on a connection of its own, that can
// vanish as if its process went away: it abandons its lease (no revoke) and
// disconnects, so the lease and its routes outlive it.
struct vanishing_gateway {
  std::unique_ptr<client> conn;
  deliveries unused;
  std::unique_ptr<gateway> gw;

  vanishing_gateway(const test_server& server, std::string name, std::chrono::milliseconds ttl)
      : conn(connect_to(server, std::move(name))) {
    auto started = gateway::start(*conn, {.inbox_id = "gw-7", .lease_ttl = ttl, .on_message = unused.handler()});
    REQUIRE(started);
    gw = std::move(*started);
    REQUIRE_FALSE(gw->add_route("user:alice"));
  }
  lease_id lease() const { return gw->lease(); }
  void vanish() {
    gw->abandon();
    gw.reset();
    conn->close();
  }
};

std::error_code error_of(const auto& expected) { return expected ? std::error_code{} : expected.error(); }

}  // namespace

// ------------------------------------------------------------------ leases

TEST_CASE("a lease grant clamps the asked TTL to the server's minimum and maximum", "[e2e][broker][client][routing]") {
  test_server server(routing_config());
  auto c = connect_to(server);
  auto low = c->lease_grant(10ms);
  REQUIRE(low);
  CHECK(low->ttl == 100ms);
  auto high = c->lease_grant(1h);
  REQUIRE(high);
  CHECK(high->ttl == 5000ms);
  auto mid = c->lease_grant(1234ms);
  REQUIRE(mid);
  CHECK(mid->ttl == 1234ms);
  CHECK(mid->remaining == 1234ms);
  CHECK(low->id != high->id);
  CHECK(high->id != mid->id);
}

TEST_CASE("lease keepalive resets the remaining time and keeps a lease past its TTL",
          "[e2e][broker][client][routing]") {
  test_server server(routing_config());
  auto c = connect_to(server);
  // 1 s: a pause of this process under a busy CI must not expire it.
  auto l = c->lease_grant(1000ms);
  REQUIRE(l);
  std::this_thread::sleep_for(200ms);
  auto before = c->lease_time_to_live(l->id);
  REQUIRE(before);
  CHECK(before->remaining <= 800ms);
  auto kept = c->lease_keepalive(l->id);
  REQUIRE(kept);
  CHECK(kept->id == l->id);
  CHECK(kept->ttl == 1000ms);
  CHECK(kept->remaining == 1000ms);
  auto after = c->lease_time_to_live(l->id);
  REQUIRE(after);
  CHECK(after->remaining > before->remaining);

  // Kept alive every 50 ms for two TTLs, it never expires.
  const auto until = std::chrono::steady_clock::now() + 2000ms;
  for (int i = 0; i < 100 && std::chrono::steady_clock::now() < until; ++i) {
    REQUIRE(c->lease_keepalive(l->id));
    std::this_thread::sleep_for(50ms);
  }
  CHECK(c->lease_time_to_live(l->id));
}

TEST_CASE("lease time-to-live reports the granted TTL and what remains of it", "[e2e][broker][client][routing]") {
  test_server server(routing_config());
  auto c = connect_to(server);
  auto l = c->lease_grant(2000ms);
  REQUIRE(l);
  auto t = c->lease_time_to_live(l->id);
  REQUIRE(t);
  CHECK(t->id == l->id);
  CHECK(t->ttl == 2000ms);
  CHECK(t->remaining > 0ms);
  CHECK(t->remaining <= 2000ms);
  auto unknown = c->lease_time_to_live(l->id + 1000);
  REQUIRE_FALSE(unknown);
  CHECK(unknown.error() == errc::not_found);
}

TEST_CASE("a lease expires without keepalives and then answers not_found", "[e2e][broker][client][routing]") {
  test_server server(routing_config());
  auto c = connect_to(server);
  auto l = c->lease_grant(100ms);
  REQUIRE(l);
  REQUIRE(wait_until([&] { return error_of(c->lease_time_to_live(l->id)) == errc::not_found; }, 5s));
  CHECK(error_of(c->lease_keepalive(l->id)) == errc::not_found);
}

TEST_CASE("a revoked lease answers not_found to keepalive, time-to-live and revoke", "[e2e][broker][client][routing]") {
  test_server server(routing_config());
  auto c = connect_to(server);
  auto l = c->lease_grant(2000ms);
  REQUIRE(l);
  REQUIRE_FALSE(c->lease_revoke(l->id));
  auto k = c->lease_keepalive(l->id);
  REQUIRE_FALSE(k);
  CHECK(k.error() == errc::not_found);
  CHECK(error_of(c->lease_time_to_live(l->id)) == errc::not_found);
  CHECK(c->lease_revoke(l->id) == errc::not_found);
}

TEST_CASE("a lease is independent of the connection that granted it", "[e2e][broker][client][routing]") {
  test_server server(routing_config());
  lease_id id = 0;
  {
    auto a = connect_to(server, "granter");
    auto l = a->lease_grant(2000ms);
    REQUIRE(l);
    id = l->id;
    a->close();
  }
  auto b = connect_to(server, "other");
  auto k = b->lease_keepalive(id);
  REQUIRE(k);
  CHECK(k->id == id);
  CHECK_FALSE(b->lease_revoke(id));
}

TEST_CASE("lease list returns the live leases up to the limit", "[e2e][broker][client][routing]") {
  test_server server(routing_config());
  auto c = connect_to(server);
  std::set<lease_id> granted;
  for (int i = 0; i < 3; ++i) {
    auto l = c->lease_grant(2000ms);
    REQUIRE(l);
    granted.insert(l->id);
  }
  auto revoked = c->lease_grant(2000ms);
  REQUIRE(revoked);
  REQUIRE_FALSE(c->lease_revoke(revoked->id));

  auto all = c->lease_list();
  REQUIRE(all);
  std::set<lease_id> listed;
  for (const auto& l : *all) {
    listed.insert(l.id);
    CHECK(l.ttl == 2000ms);
    CHECK(l.remaining > 0ms);
  }
  CHECK(listed == granted);
  auto two = c->lease_list(2);
  REQUIRE(two);
  CHECK(two->size() == 2);
}

TEST_CASE("lease_list pages past the default of 1000 leases with a cursor, listing each lease once",
          "[e2e][broker][client][routing]") {
  test_server server;
  auto c = connect_to(server);
  std::set<lease_id> granted;
  for (int i = 0; i < 1500; ++i) {
    auto l = c->lease_grant(60'000ms);
    REQUIRE(l);
    granted.insert(l->id);
  }
  lease_id next = 0;
  std::uint64_t total = 0;
  auto first = c->lease_list(0, 0, &next, &total);
  REQUIRE(first);
  CHECK(first->size() == 1000);  // the default page
  CHECK(total == 1500);
  REQUIRE(next == first->back().id);
  std::set<lease_id> listed;
  for (const auto& l : *first) listed.insert(l.id);
  auto second = c->lease_list(0, next, &next, &total);
  REQUIRE(second);
  CHECK(second->size() == 500);
  CHECK(next == 0);  // the last page
  for (const auto& l : *second) CHECK(listed.insert(l.id).second);
  CHECK(listed == granted);
}

// ---------------------------------------------------------------- registry

TEST_CASE("registry put, get, list and delete work through the client", "[e2e][broker][client][routing]") {
  test_server server(routing_config());
  auto c = connect_to(server);
  auto l = c->lease_grant(3000ms);
  REQUIRE(l);

  auto v1 = c->registry_put("user:bob", "gw-1", l->id);
  auto v2 = c->registry_put("user:alice", "gw-2", l->id);
  auto v3 = c->registry_put("user:carol", "gw-1", l->id);
  auto v4 = c->registry_put_ttl("room:9", "gw-3", 3000ms);
  REQUIRE(v1);
  REQUIRE(v2);
  REQUIRE(v3);
  REQUIRE(v4);
  CHECK(*v1 < *v2);
  CHECK(*v2 < *v3);
  CHECK(*v3 < *v4);

  auto alice = c->registry_get("user:alice");
  REQUIRE(alice);
  CHECK(alice->key == "user:alice");
  CHECK(alice->value == "gw-2");
  CHECK(alice->version == *v2);
  CHECK(alice->lease == l->id);
  CHECK(alice->remaining > 0ms);
  CHECK(alice->remaining <= 3000ms);
  auto room = c->registry_get("room:9");
  REQUIRE(room);
  CHECK(room->lease == 0);  // a TTL of its own

  bool more = true;
  auto users = c->registry_list("user:", 0, &more);
  REQUIRE(users);
  CHECK_FALSE(more);
  std::vector<std::string> keys;
  for (const auto& e : *users) keys.push_back(e.key);
  CHECK(keys == std::vector<std::string>{"user:alice", "user:bob", "user:carol"});
  auto first_two = c->registry_list("user:", 2, &more);
  REQUIRE(first_two);
  CHECK(first_two->size() == 2);
  CHECK(more);

  REQUIRE_FALSE(c->registry_delete("user:bob"));
  CHECK(error_of(c->registry_get("user:bob")) == errc::not_found);
  CHECK(c->registry_delete("user:bob") == errc::not_found);
  auto rest = c->registry_list("user:");
  REQUIRE(rest);
  CHECK(rest->size() == 2);
}

TEST_CASE("registry put under an unknown lease answers not_found", "[e2e][broker][client][routing]") {
  test_server server(routing_config());
  auto c = connect_to(server);
  auto r = c->registry_put("user:alice", "gw-1", 12345);
  REQUIRE_FALSE(r);
  CHECK(r.error() == errc::not_found);
  CHECK(error_of(c->registry_get("user:alice")) == errc::not_found);
}

TEST_CASE("revoking a lease removes its registry entries at once", "[e2e][broker][client][routing]") {
  test_server server(routing_config());
  auto c = connect_to(server);
  auto doomed = c->lease_grant(3000ms);
  auto kept = c->lease_grant(3000ms);
  REQUIRE(doomed);
  REQUIRE(kept);
  REQUIRE(c->registry_put("user:alice", "gw-1", doomed->id));
  REQUIRE(c->registry_put("user:bob", "gw-1", doomed->id));
  REQUIRE(c->registry_put("user:carol", "gw-2", kept->id));
  REQUIRE_FALSE(c->lease_revoke(doomed->id));
  CHECK(error_of(c->registry_get("user:alice")) == errc::not_found);
  CHECK(error_of(c->registry_get("user:bob")) == errc::not_found);
  CHECK(c->registry_get("user:carol"));
}

// ------------------------------------------------------ send-to-user story

TEST_CASE("a service's send to user:alice is routed to gateway gw-7 and delivered with the route key",
          "[e2e][broker][client][routing]") {
  test_server server(routing_config());
  auto gw_conn = connect_to(server, "gateway");
  deliveries got;
  auto gw = gateway::start(*gw_conn, {.inbox_id = "gw-7", .lease_ttl = 500ms, .on_message = got.handler()});
  REQUIRE(gw);
  REQUIRE_FALSE((*gw)->add_route("user:alice"));
  CHECK((*gw)->routes() == std::vector<std::string>{"user:alice"});

  auto service = connect_to(server, "service");
  auto entry = service->registry_get("user:alice");
  REQUIRE(entry);
  CHECK(entry->value == "gw-7");
  CHECK(entry->lease == (*gw)->lease());

  auto routed = service->send("user:alice", "hello alice");
  REQUIRE(routed);
  CHECK(*routed == "gw-7");
  REQUIRE(wait_until([&] { return got.count == 1; }, 5s));
  const auto d = got.snapshot().at(0);
  CHECK(d.inbox == "gw-7");
  CHECK(d.keys == std::vector<std::string>{"user:alice"});
  CHECK(d.payload == "hello alice");
}

TEST_CASE("a send to a user nobody registered answers no_route", "[e2e][broker][client][routing]") {
  test_server server(routing_config());
  auto gw_conn = connect_to(server, "gateway");
  deliveries got;
  auto gw = gateway::start(*gw_conn, {.inbox_id = "gw-7", .lease_ttl = 500ms, .on_message = got.handler()});
  REQUIRE(gw);
  REQUIRE_FALSE((*gw)->add_route("user:alice"));

  auto service = connect_to(server, "service");
  auto r = service->send("user:nobody", "hello?");
  REQUIRE_FALSE(r);
  CHECK(r.error() == errc::no_route);
  REQUIRE_FALSE(gw_conn->flush());  // anything for the gateway would have come first
  CHECK(got.count == 0);
}

TEST_CASE("a removed route answers no_route", "[e2e][broker][client][routing]") {
  test_server server(routing_config());
  auto gw_conn = connect_to(server, "gateway");
  deliveries got;
  auto gw = gateway::start(*gw_conn, {.inbox_id = "gw-7", .lease_ttl = 500ms, .on_message = got.handler()});
  REQUIRE(gw);
  REQUIRE_FALSE((*gw)->add_route("user:alice"));
  REQUIRE_FALSE((*gw)->remove_route("user:alice"));
  CHECK((*gw)->routes().empty());
  auto service = connect_to(server, "service");
  CHECK(error_of(service->send("user:alice", "x")) == errc::no_route);
  CHECK((*gw)->remove_route("user:alice") == errc::not_found);
}

TEST_CASE("a route naming an inbox that nobody opened answers no_route", "[e2e][broker][client][routing]") {
  test_server server(routing_config());
  auto c = connect_to(server);
  auto l = c->lease_grant(2000ms);
  REQUIRE(l);
  REQUIRE(c->registry_put("user:alice", "gw-nowhere", l->id));
  auto r = c->send("user:alice", "x");
  REQUIRE_FALSE(r);
  CHECK(r.error() == errc::no_route);
}

TEST_CASE("a second connection opening an open inbox gets inbox_taken until the first one is gone",
          "[e2e][broker][client][routing]") {
  test_server server(routing_config());
  auto first = connect_to(server, "first");
  auto second = connect_to(server, "second");
  auto l1 = first->lease_grant(3000ms);
  auto l2 = second->lease_grant(3000ms);
  REQUIRE(l1);
  REQUIRE(l2);
  deliveries got1, got2;
  REQUIRE_FALSE(first->open_inbox("gw-7", l1->id, got1.handler()));
  CHECK(second->open_inbox("gw-7", l2->id, got2.handler()) == errc::inbox_taken);

  first->close();
  REQUIRE(wait_until([&] { return !second->open_inbox("gw-7", l2->id, got2.handler()); }, 5s));
  REQUIRE(second->registry_put("user:alice", "gw-7", l2->id));
  auto routed = second->send("user:alice", "to the new owner");
  REQUIRE(routed);
  REQUIRE(wait_until([&] { return got2.count == 1; }, 5s));
  CHECK(got1.count == 0);
}

TEST_CASE("revoking a lease closes its inbox: sends answer no_route until it is reopened",
          "[e2e][broker][client][routing]") {
  test_server server(routing_config());
  auto gw = connect_to(server, "gateway");
  auto service = connect_to(server, "service");
  auto l = gw->lease_grant(3000ms);
  REQUIRE(l);
  deliveries got;
  REQUIRE_FALSE(gw->open_inbox("gw-7", l->id, got.handler()));
  REQUIRE(gw->registry_put("user:alice", "gw-7", l->id));
  REQUIRE(service->send("user:alice", "one"));

  REQUIRE_FALSE(service->lease_revoke(l->id));
  CHECK(error_of(service->send("user:alice", "two")) == errc::no_route);
  CHECK(error_of(service->registry_get("user:alice")) == errc::not_found);
  // Opening it under the dead lease is refused.
  CHECK(gw->open_inbox("gw-7", l->id, got.handler()) == errc::not_found);

  auto fresh = gw->lease_grant(3000ms);
  REQUIRE(fresh);
  REQUIRE_FALSE(gw->open_inbox("gw-7", fresh->id, got.handler()));
  REQUIRE(gw->registry_put("user:alice", "gw-7", fresh->id));
  REQUIRE(service->send("user:alice", "three"));
  REQUIRE(wait_until([&] { return got.count == 2; }, 5s));
  REQUIRE_FALSE(gw->flush());
  const auto all = got.snapshot();
  REQUIRE(all.size() == 2);
  CHECK(all[0].payload == "one");
  CHECK(all[1].payload == "three");
}

TEST_CASE("closing an inbox stops deliveries to it", "[e2e][broker][client][routing]") {
  test_server server(routing_config());
  auto gw = connect_to(server, "gateway");
  auto service = connect_to(server, "service");
  auto l = gw->lease_grant(3000ms);
  REQUIRE(l);
  deliveries got;
  REQUIRE_FALSE(gw->open_inbox("gw-7", l->id, got.handler()));
  REQUIRE(gw->registry_put("user:alice", "gw-7", l->id));
  REQUIRE_FALSE(gw->close_inbox("gw-7"));
  CHECK(error_of(service->send("user:alice", "x")) == errc::no_route);
  CHECK(gw->close_inbox("gw-7") == errc::not_found);
  REQUIRE_FALSE(gw->flush());
  CHECK(got.count == 0);
}

TEST_CASE("send_many to a room on two gateways makes one delivery per gateway listing its users",
          "[e2e][broker][client][routing]") {
  test_server server(routing_config());
  auto conn1 = connect_to(server, "gateway-1");
  auto conn2 = connect_to(server, "gateway-2");
  deliveries got1, got2;
  auto gw1 = gateway::start(*conn1, {.inbox_id = "gw-1", .lease_ttl = 500ms, .on_message = got1.handler()});
  auto gw2 = gateway::start(*conn2, {.inbox_id = "gw-2", .lease_ttl = 500ms, .on_message = got2.handler()});
  REQUIRE(gw1);
  REQUIRE(gw2);
  REQUIRE_FALSE((*gw1)->add_route("user:a"));
  REQUIRE_FALSE((*gw1)->add_route("user:b"));
  REQUIRE_FALSE((*gw2)->add_route("user:c"));

  auto service = connect_to(server, "service");
  const std::string_view room[] = {"user:a", "user:c", "user:nobody", "user:b"};
  const std::string payload = "room message";
  auto r = service->send_many(room, std::as_bytes(std::span(payload.data(), payload.size())));
  REQUIRE(r);
  CHECK(r->routed == 3);
  CHECK(r->gateways == std::vector<std::string>{"gw-1", "gw-2", "", "gw-1"});

  REQUIRE(wait_until([&] { return got1.count >= 1 && got2.count >= 1; }, 5s));
  // A round trip on each gateway connection: everything for it came before.
  REQUIRE_FALSE(conn1->flush());
  REQUIRE_FALSE(conn2->flush());
  const auto d1 = got1.snapshot();
  const auto d2 = got2.snapshot();
  REQUIRE(d1.size() == 1);
  REQUIRE(d2.size() == 1);
  CHECK(d1[0].inbox == "gw-1");
  CHECK(std::multiset<std::string>(d1[0].keys.begin(), d1[0].keys.end()) ==
        std::multiset<std::string>{"user:a", "user:b"});
  CHECK(d1[0].payload == payload);
  CHECK(d2[0].inbox == "gw-2");
  CHECK(d2[0].keys == std::vector<std::string>{"user:c"});
  CHECK(d2[0].payload == payload);
}

TEST_CASE("send_many where no key has a route reports zero routed instead of an error",
          "[e2e][broker][client][routing]") {
  test_server server(routing_config());
  auto service = connect_to(server, "service");
  const std::string_view room[] = {"user:x", "user:y"};
  auto r = service->send_many(room, {});
  REQUIRE(r);
  CHECK(r->routed == 0);
  CHECK(r->gateways == std::vector<std::string>{"", ""});
}

TEST_CASE("a gateway whose lease is revoked by someone else re-grants it and restores inbox and routes",
          "[e2e][broker][client][routing]") {
  test_server server(routing_config());
  auto gw_conn = connect_to(server, "gateway");
  deliveries got;
  std::atomic<lease_id> renewed_from{0}, renewed_to{0};
  auto gw = gateway::start(*gw_conn, {.inbox_id = "gw-7",
                                      // Long enough that only the revoke ends it (a
                                      // pause of this process must not).
                                      .lease_ttl = 3000ms,
                                      .on_message = got.handler(),
                                      .on_lease_renewed = [&](lease_id old_lease, lease_id new_lease) {
                                        renewed_to = new_lease;
                                        renewed_from = old_lease;
                                      }});
  REQUIRE(gw);
  REQUIRE_FALSE((*gw)->add_route("user:alice"));
  REQUIRE_FALSE((*gw)->add_route("user:bob"));
  const lease_id first = (*gw)->lease();

  auto admin = connect_to(server, "admin");
  REQUIRE_FALSE(admin->lease_revoke(first));
  auto service = connect_to(server, "service");

  REQUIRE(wait_until([&] { return renewed_from.load() != 0; }, 10s));  // next keepalive: TTL/3
  CHECK(renewed_from == first);
  CHECK(renewed_to != first);
  CHECK((*gw)->lease() == renewed_to);
  auto alice = service->registry_get("user:alice");
  REQUIRE(alice);
  CHECK(alice->lease == renewed_to);
  auto bob = service->registry_get("user:bob");
  REQUIRE(bob);
  CHECK(bob->lease == renewed_to);

  auto routed = service->send("user:alice", "after renewal");
  REQUIRE(routed);
  CHECK(*routed == "gw-7");
  REQUIRE(wait_until([&] { return got.count == 1; }, 5s));
  CHECK(got.snapshot().at(0).payload == "after renewal");
}

TEST_CASE("two gateways racing for one inbox: exactly one wins, the other gets inbox_taken",
          "[e2e][broker][client][routing]") {
  test_server server(routing_config());
  for (int round = 0; round < 5; ++round) {
    INFO("round " << round);
    const std::string inbox = "gw-race-" + std::to_string(round);
    auto conn_a = connect_to(server, "gateway-a");
    auto conn_b = connect_to(server, "gateway-b");
    deliveries got_a, got_b;
    std::expected<std::unique_ptr<gateway>, std::error_code> ra = std::unexpected(std::error_code{});
    std::expected<std::unique_ptr<gateway>, std::error_code> rb = std::unexpected(std::error_code{});
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    auto racer = [&](client& conn, deliveries& got, auto& out) {
      ++ready;
      for (int i = 0; i < 10'000 && !go; ++i) std::this_thread::sleep_for(100us);
      out = gateway::start(conn, {.inbox_id = inbox, .lease_ttl = 500ms, .on_message = got.handler()});
    };
    std::thread ta([&] { racer(*conn_a, got_a, ra); });
    std::thread tb([&] { racer(*conn_b, got_b, rb); });
    wait_until([&] { return ready == 2; }, 5s);
    go = true;
    ta.join();
    tb.join();

    REQUIRE(ra.has_value() != rb.has_value());
    auto& winner = ra ? *ra : *rb;
    const std::error_code loser_error = ra ? rb.error() : ra.error();
    CHECK(loser_error == errc::inbox_taken);

    // The loser gave its lease back; only the winner's is alive.
    auto leases = conn_a->lease_list();
    REQUIRE(leases);
    REQUIRE(leases->size() == 1);
    CHECK(leases->front().id == winner->lease());

    // The winner receives what is sent to its users.
    REQUIRE_FALSE(winner->add_route("user:racer-" + std::to_string(round)));
    auto service = connect_to(server, "service");
    auto routed = service->send("user:racer-" + std::to_string(round), "won");
    REQUIRE(routed);
    CHECK(*routed == inbox);
    auto& winner_got = ra ? got_a : got_b;
    REQUIRE(wait_until([&] { return winner_got.count == 1; }, 5s));
    // Destroying the winner revokes its lease before its client goes.
    winner.reset();
    auto after = service->lease_list();
    REQUIRE(after);
    CHECK(after->empty());
  }
}

TEST_CASE("a gateway that reconnects within the TTL keeps its lease and its routes", "[e2e][broker][client][routing]") {
  test_server server(routing_config());
  auto service = connect_to(server, "service");
  lease_id first_lease = 0;
  {
    // A TTL long enough for the reconnect; nothing here waits for it.
    vanishing_gateway gw(server, "gateway-1st", 3000ms);
    first_lease = gw.lease();
    gw.vanish();  // as if the process went away: no revoke
  }
  // Once the broker noticed the disconnect, sends find no live inbox, but
  // the route itself is still registered under the lease.
  REQUIRE(wait_until([&] { return error_of(service->send("user:alice", "while away")) == errc::no_route; }, 5s));
  auto during = service->registry_get("user:alice");
  REQUIRE(during);
  CHECK(during->lease == first_lease);

  auto conn = connect_to(server, "gateway-2nd");
  deliveries got;
  auto gw = gateway::start(
      *conn, {.inbox_id = "gw-7", .lease_ttl = 3000ms, .on_message = got.handler(), .resume_lease = first_lease});
  REQUIRE(gw);
  CHECK((*gw)->lease() == first_lease);
  // No add_route: the route survived the reconnect.
  auto routed = service->send("user:alice", "welcome back");
  REQUIRE(routed);
  CHECK(*routed == "gw-7");
  REQUIRE(wait_until([&] { return got.count == 1; }, 5s));
  const auto d = got.snapshot().at(0);
  CHECK(d.keys == std::vector<std::string>{"user:alice"});
  CHECK(d.payload == "welcome back");
}

TEST_CASE("a gateway resuming a lease that already expired gets a new lease", "[e2e][broker][client][routing]") {
  test_server server(routing_config());
  auto conn = connect_to(server, "gateway");
  auto old = conn->lease_grant(100ms);
  REQUIRE(old);
  REQUIRE(wait_until([&] { return error_of(conn->lease_time_to_live(old->id)) == errc::not_found; }, 5s));
  deliveries got;
  auto gw = gateway::start(
      *conn, {.inbox_id = "gw-7", .lease_ttl = 500ms, .on_message = got.handler(), .resume_lease = old->id});
  REQUIRE(gw);
  CHECK((*gw)->lease() != old->id);
  CHECK(conn->lease_time_to_live((*gw)->lease()));
}

TEST_CASE("when an abandoned gateway's lease expires its routes are gone and sends answer no_route",
          "[e2e][broker][client][routing]") {
  test_server server(routing_config());
  auto service = connect_to(server, "service");
  lease_id lease = 0;
  {
    vanishing_gateway gw(server, "gateway", 200ms);
    lease = gw.lease();
    REQUIRE(service->send("user:alice", "still here"));
    gw.vanish();
  }
  // TTL plus one sweep, with a generous bound.
  REQUIRE(wait_until([&] { return error_of(service->registry_get("user:alice")) == errc::not_found; }, 5s));
  CHECK(error_of(service->lease_time_to_live(lease)) == errc::not_found);
  auto r = service->send("user:alice", "anyone?");
  REQUIRE_FALSE(r);
  CHECK(r.error() == errc::no_route);

  // The same gateway id can start again, under a new lease.
  auto conn = connect_to(server, "gateway-again");
  deliveries got;
  auto gw = gateway::start(*conn, {.inbox_id = "gw-7", .lease_ttl = 500ms, .on_message = got.handler()});
  REQUIRE(gw);
  CHECK((*gw)->lease() != lease);
  REQUIRE_FALSE((*gw)->add_route("user:alice"));
  auto routed = service->send("user:alice", "back");
  REQUIRE(routed);
  CHECK(*routed == "gw-7");
  REQUIRE(wait_until([&] { return got.count == 1; }, 5s));
}

TEST_CASE("a gateway keeps its lease alive by itself over several TTLs", "[e2e][broker][client][routing]") {
  test_server server(routing_config());
  auto conn = connect_to(server, "gateway");
  deliveries got;
  std::atomic<int> renewals{0};
  auto gw = gateway::start(*conn, {.inbox_id = "gw-7",
                                   // Keepalives every 333 ms: a pause of this
                                   // process under 600 ms must not cost the lease.
                                   .lease_ttl = 1000ms,
                                   .on_message = got.handler(),
                                   .on_lease_renewed = [&](lease_id, lease_id) { ++renewals; }});
  REQUIRE(gw);
  REQUIRE_FALSE((*gw)->add_route("user:alice"));
  const lease_id first = (*gw)->lease();
  std::this_thread::sleep_for(3500ms);  // over three TTLs
  auto service = connect_to(server, "service");
  CHECK(service->lease_time_to_live(first));
  CHECK((*gw)->lease() == first);
  CHECK(renewals == 0);
  CHECK(service->send("user:alice", "x"));
}

TEST_CASE("routing requests without the routing capability get a non-fatal unsupported_message",
          "[e2e][broker][routing]") {
  test_server server(routing_config());
  raw_connection c(server.port());
  c.send_hello();  // asks for dropped_notice and publish_ack only
  raw_frame f;
  const auto* welcome = c.next(f);
  REQUIRE(welcome != nullptr);
  REQUIRE(welcome->message_type() == Message::Welcome);

  protocol::frame_builder b;
  c.send(b.lease_grant(7, 1000));
  const auto* frame = c.next_of(Message::Error, f);
  REQUIRE(frame != nullptr);
  CHECK(frame->request_id() == 7);
  const auto* e = frame->message_as_Error();
  CHECK(static_cast<int>(e->code()) == static_cast<int>(protocol::errc::unsupported_message));
  CHECK_FALSE(e->fatal());

  const std::string_view keys[] = {"user:alice"};
  c.send(b.send(8, keys, {}));
  frame = c.next_of(Message::Error, f);
  REQUIRE(frame != nullptr);
  CHECK(frame->request_id() == 8);
  CHECK(static_cast<int>(frame->message_as_Error()->code()) == static_cast<int>(protocol::errc::unsupported_message));

  // The connection stays open and usable.
  c.send(b.ping(9));
  frame = c.next_of(Message::Pong, f);
  REQUIRE(frame != nullptr);
  CHECK(frame->request_id() == 9);
}

namespace {
// What a burst's writes did: the server's counters once it was delivered.
struct burst_writes {
  std::uint64_t routed = 0, writes = 0, frames_written = 0, write_waits = 0;
};

// Sends 20,000 messages fire and forget to 200 users on 20 gateways of a
// server with `cfg`, all queued while its loop is held, so the broker's
// reads fill their buffer and (coalescing on) small gateway writes wait a
// turn or two for more. Checks that every message arrives once, in send
// order, at its user's gateway.
burst_writes burst_to_gateways(broker::server_config cfg) {
  // Nothing renews these leases: long enough for the slowest set-up.
  cfg.lease_max_ttl = 60s;
  test_server server(std::move(cfg));
  constexpr int gateways = 20, users_per_gateway = 10, sends = 20000;
  std::vector<std::unique_ptr<client>> conns;
  std::vector<deliveries> got(gateways);
  for (int g = 0; g < gateways; ++g) {
    conns.push_back(connect_to(server, "gw-" + std::to_string(g)));
    auto lease = conns.back()->lease_grant(60s);
    REQUIRE(lease);
    REQUIRE_FALSE(
        conns.back()->open_inbox("gw-" + std::to_string(g), lease->id, got[static_cast<std::size_t>(g)].handler()));
    for (int u = 0; u < users_per_gateway; ++u)
      REQUIRE(conns.back()->registry_put("user:" + std::to_string(g * users_per_gateway + u), "gw-" + std::to_string(g),
                                         lease->id));
  }
  // The service speaks the wire by hand: the whole burst (~3 MB) is written
  // into the kernel while the loop is held, so the broker's first read
  // after finds its buffer's worth waiting however slowly this process runs.
  raw_connection service(server.port());
  const std::string_view caps[] = {protocol::capability::routing};
  service.send_hello(caps);
  raw_frame f;
  const auto* welcome = service.next(f);
  REQUIRE(welcome != nullptr);
  REQUIRE(welcome->message_type() == Message::Welcome);
  std::vector<std::uint8_t> burst;
  {
    protocol::frame_builder b;
    std::array<std::uint8_t, 100> payload{};
    std::string key;
    for (int i = 0; i < sends; ++i) {
      key = "user:" + std::to_string((i * 7919) % (gateways * users_per_gateway));
      std::memcpy(payload.data(), &i, sizeof i);
      const std::string_view keys[] = {key};
      const auto frame = b.send(0, keys, payload);
      burst.insert(burst.end(), frame.begin(), frame.end());
    }
  }
  std::size_t written = 0;
  {
    auto hold = server.hold_loop();
    written = service.send_some(burst);
  }
  // Far more than the broker's first read (64 KiB) was waiting for it.
  REQUIRE(written >= 256 * 1024);
  service.send(protocol::bytes_view(burst).subspan(written));
  REQUIRE(wait_until(
      [&] {
        std::size_t n = 0;
        for (auto& d : got) n += d.count;
        return n == sends;
      },
      20s));
  for (int g = 0; g < gateways; ++g) {
    int last = -1;
    for (const auto& d : got[static_cast<std::size_t>(g)].snapshot()) {
      int i = 0;
      std::memcpy(&i, d.payload.data(), sizeof i);
      REQUIRE(i > last);                                                              // in send order
      REQUIRE((i * 7919) % (gateways * users_per_gateway) / users_per_gateway == g);  // to the right gateway
      last = i;
    }
  }
  const auto& n = server.counters();
  return {n.sends_routed, n.writes, n.frames_written, n.write_waits};
}
}  // namespace

TEST_CASE("a burst of sends to users on many gateways arrives complete and in order per gateway, writes held back",
          "[e2e][broker][client][routing]") {
  auto cfg = routing_config();
  // The default turn budget; a time budget no slow loop turn under ASan
  // uses up before a writer first runs (the default is 10 ms).
  cfg.write_coalesce_time = 1s;
  const auto b = burst_to_gateways(cfg);
  CHECK(b.routed == 20000);
  CHECK(b.write_waits > 0);
  // Coalesced: the gateways' writes carried more than one frame each on average.
  CHECK(b.frames_written > b.writes);
  // At most the turn budget (2 by default) per write.
  CHECK(b.write_waits <= 2 * b.writes);
}

TEST_CASE("a write waits at most --write-coalesce-turns loop turns", "[e2e][broker][client][routing]") {
  auto cfg = routing_config();
  cfg.write_coalesce_turns = 1;
  cfg.write_coalesce_time = 1s;
  const auto b = burst_to_gateways(cfg);
  CHECK(b.write_waits > 0);
  CHECK(b.write_waits <= b.writes);
}

TEST_CASE(
    "zero turns, a zero time budget or a one-byte budget turn write coalescing off, and a burst still arrives "
    "complete and in order",
    "[e2e][broker][client][routing]") {
  auto cfg = routing_config();
  SECTION("zero turns") { cfg.write_coalesce_turns = 0; }
  SECTION("a zero time budget") { cfg.write_coalesce_time = std::chrono::microseconds(0); }
  SECTION("a one-byte budget: anything queued is written at once") { cfg.write_coalesce_bytes = 1; }
  const auto b = burst_to_gateways(cfg);
  CHECK(b.routed == 20000);
  CHECK(b.write_waits == 0);
  CHECK(b.frames_written >= 20000);
}
