// The client library's offers API (capability "offers") against a real
// broker on 127.0.0.1: send_offer and its outcomes, the offer's fields at
// the gateway, acks and receipts (to the sender, or to the holder of a
// receipt inbox), withdraw, pending_offers, exposure caps, expiring
// publishes, and the broker's flags (set_flag, flags).

#include "switchyard/client.hpp"
#include "switchyard/gateway.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/test_server.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

using namespace switchyard;
using namespace std::chrono_literals;
using test::collector;
using test::test_server;
using test::wait_until;

namespace {

// What a gateway's on_message saw of one delivery (the views are gone
// after the call).
struct seen {
  std::string payload;
  std::vector<std::string> keys;
  std::uint64_t offer_id = 0;
  std::chrono::milliseconds time_left{0};
};

seen copy_of(const inbox_message& m) {
  return {std::string(m.payload_text()), {m.route_keys.begin(), m.route_keys.end()}, m.offer_id, m.time_left};
}

// A client of `server` with `o`'s callbacks (port and name filled in).
std::unique_ptr<client> connect_with(const test_server& server, std::string name, client_options o = {}) {
  o.port = server.port();
  o.client_name = std::move(name);
  auto c = client::connect(o);
  REQUIRE(c);
  return std::move(*c);
}

// An operator's connection (capability "admin") that turns flag "offers"
// on for `percent` of the connections.
void set_offers_flag(const test_server& server, unsigned percent) {
  client_options o;
  o.admin = true;
  auto admin = connect_with(server, "operator", o);
  const auto f = admin->set_flag("offers", percent);
  INFO((f ? std::string() : "set_flag: " + f.error().message()));
  REQUIRE(f);
  CHECK(f->percent == percent);
}

// A gateway connection: inbox `inbox` under a lease, `users` routed to it,
// and what it received.
struct gateway_conn {
  collector<seen> got;
  collector<withdrawn_notice> withdrawn;
  std::unique_ptr<client> c;
  gateway_conn(const test_server& server, std::string_view inbox, std::vector<std::string> users) {
    client_options o;
    o.on_withdrawn = [this](const withdrawn_notice& w) { withdrawn.add(w); };
    c = connect_with(server, std::string(inbox), o);
    auto l = c->lease_grant(30s);
    REQUIRE(l);
    REQUIRE_FALSE(c->open_inbox(inbox, l->id, [this](const inbox_message& m) { got.add(copy_of(m)); }));
    for (const auto& u : users) REQUIRE(c->registry_put(u, inbox, l->id));
  }
};

bool has_cap(const client& c, std::string_view cap) {
  const auto caps = c.capabilities();
  return std::find(caps.begin(), caps.end(), cap) != caps.end();
}

}  // namespace

TEST_CASE("a client asks for the offers capability and the broker grants it", "[client-lib][offers]") {
  test_server server;
  auto c = test::connect_to(server);
  CHECK(has_cap(*c, "offers"));
}

TEST_CASE("offer calls refuse what the broker would refuse before sending anything", "[client-lib][offers]") {
  test_server server;
  auto c = test::connect_to(server);
  const std::array<std::string_view, 1> keys{"user:alice"};
  CHECK(c->send_offer(keys, "x", {.offer_id = 1}).error() == errc::bad_request);  // an id needs an expiry
  CHECK(c->send_offer(keys, "x", {.expires_in = 1s, .receipt_timeout = 1s}).error() == errc::bad_request);
  CHECK(c->send_offer(keys, "x", {.offer_id = 1, .expires_in = -5ms}).error() == errc::bad_request);
  CHECK(c->publish("rides.eu", "x", -1ms) == errc::bad_request);
  CHECK(c->ack(inbox_message{}) == errc::bad_request);  // not an offer
  CHECK(c->ack(0, "user:alice") == errc::bad_request);
  CHECK(c->exposure(keys, -1ms).error() == errc::bad_request);
  CHECK(c->connected());
}

TEST_CASE("the flag calls need admin, and a percentage above 100 is refused before sending", "[client-lib][offers]") {
  test_server server;
  auto plain = test::connect_to(server);
  CHECK(plain->flags().error() == errc::not_supported);
  CHECK(plain->set_flag("offers", 10).error() == errc::not_supported);
  client_options o;
  o.admin = true;
  auto admin = connect_with(server, "operator", o);
  CHECK(admin->set_flag("offers", 101).error() == errc::bad_request);
  CHECK(admin->connected());
}

TEST_CASE("a plain send with an expiry to a user without a route is a no_route outcome, not an error",
          "[client-lib][offers]") {
  test_server server;
  auto c = test::connect_to(server);
  const std::array<std::string_view, 1> keys{"user:nobody"};
  const auto r = c->send_offer(keys, "x", {.expires_in = 10s});
  REQUIRE(r);
  CHECK(r->outcomes == std::vector<key_outcome>{key_outcome::no_route});
  CHECK(r->gateways == std::vector<std::string>{""});
  CHECK(r->routed == 0);
}

// ---- The following need the broker's offers support (docs/protocol.md §15).

TEST_CASE("an offer reaches the gateway with its id and time left, and the sender gets every key's outcome",
          "[client-lib][offers]") {
  test_server server;
  set_offers_flag(server, 100);
  gateway_conn gw(server, "gw-1", {"user:alice"});
  auto sender = test::connect_to(server, "dispatcher");
  const std::array<std::string_view, 2> keys{"user:alice", "user:nobody"};
  const auto r = sender->send_offer(keys, "ride 1", {.offer_id = 101, .expires_in = 30s});
  REQUIRE(r);
  CHECK(r->outcomes == std::vector<key_outcome>{key_outcome::routed, key_outcome::no_route});
  CHECK(r->gateways == std::vector<std::string>{"gw-1", ""});
  CHECK(r->routed == 1);
  CHECK(r->capped == 0);
  REQUIRE(wait_until([&] { return gw.got.count == 1; }));
  const auto m = gw.got.snapshot().front();
  CHECK(m.payload == "ride 1");
  CHECK(m.keys == std::vector<std::string>{"user:alice"});
  CHECK(m.offer_id == 101);
  CHECK(m.time_left > 0ms);
  CHECK(m.time_left <= 30s);
}

TEST_CASE("with the offers flag off a gateway gets the offer without its id or time left", "[client-lib][offers]") {
  test_server server;
  set_offers_flag(server, 0);
  gateway_conn gw(server, "gw-1", {"user:alice"});
  auto sender = test::connect_to(server, "dispatcher");
  const std::array<std::string_view, 1> keys{"user:alice"};
  REQUIRE(sender->send_offer(keys, "ride 2", {.offer_id = 102, .expires_in = 30s}));
  REQUIRE(wait_until([&] { return gw.got.count == 1; }));
  const auto m = gw.got.snapshot().front();
  CHECK(m.payload == "ride 2");
  CHECK(m.offer_id == 0);
  CHECK(m.time_left == 0ms);
}

TEST_CASE("a gateway's ack gives the sender an acked receipt and takes the offer off the pending list",
          "[client-lib][offers]") {
  test_server server;
  set_offers_flag(server, 100);
  collector<receipt> receipts;
  client_options so;
  so.on_receipt = [&](const receipt& r) { receipts.add(r); };
  auto sender = connect_with(server, "dispatcher", so);

  // The gateway helper: offers wait for the device, which acks later.
  auto conn = test::connect_to(server, "gw");
  collector<seen> got;
  auto gw = gateway::start(*conn, {.inbox_id = "gw-1",
                                   .on_message = [&](const inbox_message& m) { got.add(copy_of(m)); },
                                   .routes = {"user:alice"}});
  REQUIRE(gw);
  const std::array<std::string_view, 1> keys{"user:alice"};
  REQUIRE(sender->send_offer(keys, "ride 3", {.offer_id = 103, .expires_in = 30s, .receipt_timeout = 30s}));
  REQUIRE(wait_until([&] { return got.count == 1; }));

  auto pending = sender->pending_offers("user:alice");
  REQUIRE(pending);
  REQUIRE(pending->size() == 1);
  CHECK(pending->front().offer_id == 103);
  CHECK(pending->front().payload_text() == "ride 3");
  CHECK(pending->front().time_left > 0ms);
  CHECK(receipts.count == 0);

  // What the gateway's on_message got, acked as the device took it.
  inbox_message m;
  const std::string_view alice = "user:alice";
  m.inbox = "gw-1";
  m.route_keys = std::span(&alice, 1);
  m.offer_id = got.snapshot().front().offer_id;
  REQUIRE_FALSE((*gw)->ack(m));
  REQUIRE(wait_until([&] { return receipts.count == 1; }));
  const auto r = receipts.snapshot().front();
  CHECK(r.offer_id == 103);
  CHECK(r.route_key == "user:alice");
  CHECK(r.inbox_id == "gw-1");
  CHECK(r.outcome == receipt_outcome::acked);
  pending = sender->pending_offers("user:alice");
  REQUIRE(pending);
  CHECK(pending->empty());
}

TEST_CASE("an offer no gateway acks in time gives a timeout receipt", "[client-lib][offers]") {
  test_server server;
  set_offers_flag(server, 100);
  gateway_conn gw(server, "gw-1", {"user:alice"});
  collector<receipt> receipts;
  client_options so;
  so.on_receipt = [&](const receipt& r) { receipts.add(r); };
  auto sender = connect_with(server, "dispatcher", so);
  const std::array<std::string_view, 1> keys{"user:alice"};
  REQUIRE(sender->send_offer(keys, "ride 4", {.offer_id = 104, .expires_in = 30s, .receipt_timeout = 100ms}));
  REQUIRE(wait_until([&] { return receipts.count == 1; }));
  const auto r = receipts.snapshot().front();
  CHECK(r.offer_id == 104);
  CHECK(r.route_key == "user:alice");
  CHECK(r.outcome == receipt_outcome::timeout);
}

TEST_CASE("receipts go to the connection that holds the receipt inbox, not to the sender", "[client-lib][offers]") {
  test_server server;
  set_offers_flag(server, 100);
  gateway_conn gw(server, "gw-1", {"user:alice"});
  collector<receipt> at_sender, at_dispatcher;
  client_options so, dop;
  so.on_receipt = [&](const receipt& r) { at_sender.add(r); };
  dop.on_receipt = [&](const receipt& r) { at_dispatcher.add(r); };
  auto sender = connect_with(server, "sender", so);
  auto dispatcher = connect_with(server, "dispatcher", dop);
  auto lease = dispatcher->lease_grant(30s);
  REQUIRE(lease);
  REQUIRE_FALSE(dispatcher->open_inbox("dispatch-1", lease->id, [](const inbox_message&) {}));
  const std::array<std::string_view, 1> keys{"user:alice"};
  REQUIRE(sender->send_offer(
      keys, "ride 5", {.offer_id = 105, .expires_in = 30s, .receipt_timeout = 30s, .receipt_inbox = "dispatch-1"}));
  REQUIRE(wait_until([&] { return gw.got.count == 1; }));
  REQUIRE_FALSE(gw.c->ack(105, "user:alice"));
  REQUIRE(wait_until([&] { return at_dispatcher.count == 1; }));
  CHECK(at_dispatcher.snapshot().front().outcome == receipt_outcome::acked);
  REQUIRE_FALSE(sender->flush());
  CHECK(at_sender.count == 0);
}

TEST_CASE("withdrawing an offer tells the gateway that got it and empties the pending list", "[client-lib][offers]") {
  test_server server;
  set_offers_flag(server, 100);
  gateway_conn gw(server, "gw-1", {"user:alice", "user:bob"});
  auto sender = test::connect_to(server, "dispatcher");
  const std::array<std::string_view, 2> keys{"user:alice", "user:bob"};
  REQUIRE(sender->send_offer(keys, "ride 6", {.offer_id = 106, .expires_in = 30s}));
  REQUIRE(wait_until([&] { return gw.got.count == 1; }));
  const auto w = sender->withdraw(106);
  REQUIRE(w);
  CHECK(w->notified == 1);
  CHECK(w->pending == 2);
  REQUIRE(wait_until([&] { return gw.withdrawn.count == 1; }));
  const auto n = gw.withdrawn.snapshot().front();
  CHECK(n.offer_id == 106);
  CHECK(n.inbox_id == "gw-1");
  auto k = n.route_keys;
  std::sort(k.begin(), k.end());
  CHECK(k == std::vector<std::string>{"user:alice", "user:bob"});
  const auto pending = sender->pending_offers("user:alice");
  REQUIRE(pending);
  CHECK(pending->empty());
  CHECK(sender->withdraw(106).error() == errc::not_found);
}

TEST_CASE("an exposure cap makes the keys over it capped, and exposure counts what each key got",
          "[client-lib][offers]") {
  test_server server;
  set_offers_flag(server, 100);
  gateway_conn gw(server, "gw-1", {"user:alice"});
  auto sender = test::connect_to(server, "dispatcher");
  const std::array<std::string_view, 1> keys{"user:alice"};
  const offer_options capped{.offer_id = 107, .expires_in = 30s, .cap_max = 1, .cap_window = 1h};
  const auto first = sender->send_offer(keys, "ride 7", capped);
  REQUIRE(first);
  CHECK(first->outcomes == std::vector<key_outcome>{key_outcome::routed});
  auto again = capped;
  again.offer_id = 108;
  const auto second = sender->send_offer(keys, "ride 8", again);
  REQUIRE(second);
  CHECK(second->outcomes == std::vector<key_outcome>{key_outcome::capped});
  CHECK(second->capped == 1);
  CHECK(second->routed == 0);
  const std::array<std::string_view, 2> asked{"user:alice", "user:nobody"};
  const auto counts = sender->exposure(asked, 1h);
  REQUIRE(counts);
  CHECK(*counts == std::vector<std::uint32_t>{1, 0});
  REQUIRE(wait_until([&] { return gw.got.count == 1; }));
  REQUIRE_FALSE(sender->flush());
  CHECK(gw.got.count == 1);
}

TEST_CASE("async_send_offer answers with every key's outcome and the receipt follows, many in flight",
          "[client-lib][offers]") {
  test_server server;
  set_offers_flag(server, 100);
  collector<receipt> receipts;
  client_options so;
  so.on_receipt = [&](const receipt& r) { receipts.add(r); };
  auto sender = connect_with(server, "dispatcher", so);
  auto conn = test::connect_to(server, "gw");
  std::unique_ptr<gateway> gw;
  std::atomic<gateway*> acker{nullptr};
  // The device acks every offer at once, on the loop thread.
  auto started = gateway::start(*conn, {.inbox_id = "gw-1",
                                        .on_message =
                                            [&](const inbox_message& m) {
                                              if (auto* g = acker.load()) (void)g->ack(m);
                                            },
                                        .routes = {"user:alice"}});
  REQUIRE(started);
  gw = std::move(*started);
  acker = gw.get();
  collector<offer_result> answers;
  collector<std::error_code> failures;
  const std::array<std::string_view, 2> keys{"user:alice", "user:nobody"};
  constexpr int n = 50;
  for (int i = 0; i < n; ++i)
    sender->async_send_offer(
        keys, std::as_bytes(std::span("ride", 4)),
        {.offer_id = 200u + static_cast<std::uint64_t>(i), .expires_in = 30s, .receipt_timeout = 30s},
        [&](std::expected<offer_result, std::error_code> r) {
          if (r)
            answers.add(*r);
          else
            failures.add(r.error());
        });
  REQUIRE(wait_until([&] { return answers.count + failures.count == n; }));
  CHECK(failures.count == 0);
  for (const auto& r : answers.snapshot()) {
    CHECK(r.outcomes == std::vector<key_outcome>{key_outcome::routed, key_outcome::no_route});
    CHECK(r.gateways == std::vector<std::string>{"gw-1", ""});
  }
  // One acked receipt per offer (user:nobody had no route: no receipt).
  REQUIRE(wait_until([&] { return receipts.count == n; }));
  std::vector<std::uint64_t> ids;
  for (const auto& r : receipts.snapshot()) {
    CHECK(r.outcome == receipt_outcome::acked);
    CHECK(r.route_key == "user:alice");
    ids.push_back(r.offer_id);
  }
  std::sort(ids.begin(), ids.end());
  CHECK(std::adjacent_find(ids.begin(), ids.end()) == ids.end());
  CHECK(ids.front() == 200);
  CHECK(ids.back() == 200 + n - 1);
}

TEST_CASE("async_send_offer refuses what send_offer refuses, calling back at once", "[client-lib][offers]") {
  test_server server;
  auto c = test::connect_to(server);
  const std::array<std::string_view, 1> keys{"user:alice"};
  std::optional<std::expected<offer_result, std::error_code>> got;
  c->async_send_offer(keys, std::as_bytes(std::span("x", 1)), {.offer_id = 1},
                      [&](std::expected<offer_result, std::error_code> r) { got = std::move(r); });
  REQUIRE(got.has_value());  // called before async_send_offer returned
  CHECK(got->error() == errc::bad_request);
  // A plain send with an expiry to a user without a route: an outcome, as send_offer.
  collector<offer_result> answers;
  c->async_send_offer(keys, std::as_bytes(std::span("x", 1)), {.expires_in = 10s},
                      [&](std::expected<offer_result, std::error_code> r) {
                        if (r) answers.add(*r);
                      });
  REQUIRE(wait_until([&] { return answers.count == 1; }));
  CHECK(answers.snapshot().front().outcomes == std::vector<key_outcome>{key_outcome::no_route});
}

TEST_CASE("a publish with an expiry reaches a subscriber with the time it had left", "[client-lib][offers]") {
  test_server server;
  set_offers_flag(server, 100);
  auto sub = test::connect_to(server, "sub");
  collector<std::chrono::milliseconds> left;
  REQUIRE(sub->subscribe("rides.>", [&](const message& m) { left.add(m.time_left); }));
  auto pub = test::connect_to(server, "pub");
  REQUIRE_FALSE(pub->publish("rides.eu", "ride 9", 30s));
  REQUIRE_FALSE(pub->publish("rides.eu", "no expiry"));
  REQUIRE(wait_until([&] { return left.count == 2; }));
  const auto got = left.snapshot();
  CHECK(got[0] > 0ms);
  CHECK(got[0] <= 30s);
  CHECK(got[1] == 0ms);
}

TEST_CASE("set_flag and flags give each flag's percentage and the connections on and off", "[client-lib][offers]") {
  test_server server;
  client_options o;
  o.admin = true;
  auto admin = connect_with(server, "operator", o);
  auto others = std::array{test::connect_to(server, "a"), test::connect_to(server, "b")};
  const auto all_on = admin->set_flag("offers", 100);
  REQUIRE(all_on);
  CHECK(all_on->name == "offers");
  CHECK(all_on->percent == 100);
  CHECK(all_on->connections_on == 3);  // every connection here asked for "offers"
  CHECK(all_on->connections_off == 0);
  const auto all_off = admin->set_flag("offers", 0);
  REQUIRE(all_off);
  CHECK(all_off->connections_on == 0);
  CHECK(all_off->connections_off == 3);
  const auto list = admin->flags();
  REQUIRE(list);
  const auto it = std::find_if(list->begin(), list->end(), [](const flag_info& f) { return f.name == "offers"; });
  REQUIRE(it != list->end());
  CHECK(it->percent == 0);
  CHECK(admin->set_flag("no-such-flag", 10).error() == errc::not_found);
}
