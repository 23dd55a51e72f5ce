// Offers across nodes (docs/cluster.md, "Offers"): real etcd and
// nats-server processes, switchyard nodes on loopback, real gateway and
// dispatcher clients. The offer stays on the node it was sent to; it is
// delivered, acked, withdrawn and pulled from any node.

#include "tests/support/clients.hpp"
#include "tests/support/cluster_fixture.hpp"

#include <switchyard/client.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <span>
#include <string>
#include <vector>

using namespace switchyard;
using namespace std::chrono_literals;
using test::cluster_fixture;
using test::collector;
using test::user_owned_by;
using test::wait_until;

namespace {

std::unique_ptr<client> connect_with(test::test_server& node, std::string name, client_options o = {}) {
  o.port = node.port();
  o.client_name = std::move(name);
  auto c = client::connect(o);
  REQUIRE(c);
  return std::move(*c);
}

// Turns flag "offers" on for every connection of `node` (gateways get the
// offer fields only with it).
void offers_on(test::test_server& node) {
  client_options o;
  o.admin = true;
  auto admin = connect_with(node, "operator", o);
  REQUIRE(admin->set_flag("offers", 100));
}

struct seen {
  std::string payload;
  std::vector<std::string> keys;
  std::uint64_t offer_id = 0;
  std::chrono::milliseconds time_left{0};
};

// A gateway on `node`: inbox `inbox` under a lease, `users` routed to it.
struct gateway {
  collector<seen> got;
  collector<withdrawn_notice> withdrawn;
  std::unique_ptr<client> c;
  gateway(test::test_server& node, std::string inbox, const std::vector<std::string>& users) {
    client_options o;
    o.on_withdrawn = [this](const withdrawn_notice& w) { withdrawn.add(w); };
    c = connect_with(node, inbox, o);
    auto l = c->lease_grant(30s);
    REQUIRE(l);
    REQUIRE_FALSE(c->open_inbox(inbox, l->id, [this](const inbox_message& m) {
      got.add({std::string(m.payload_text()), {m.route_keys.begin(), m.route_keys.end()}, m.offer_id, m.time_left});
    }));
    for (const auto& u : users) REQUIRE(c->registry_put(u, inbox, l->id));
  }
};

// A dispatcher on `node` and the receipts it got.
struct dispatcher {
  collector<receipt> receipts;
  std::unique_ptr<client> c;
  explicit dispatcher(test::test_server& node) {
    client_options o;
    o.on_receipt = [this](const receipt& r) { receipts.add(r); };
    c = connect_with(node, "dispatcher", o);
  }
};

// The keys `gw` got offer `id` for, sorted. A gateway gets an offer in
// at most one delivery per owner node its keys passed through, each naming
// its keys.
std::vector<std::string> keys_of(gateway& gw, std::uint64_t id) {
  std::vector<std::string> keys;
  for (const auto& m : gw.got.snapshot())
    if (m.offer_id == id) keys.insert(keys.end(), m.keys.begin(), m.keys.end());
  std::sort(keys.begin(), keys.end());
  return keys;
}

std::vector<std::string> users(int n) {
  std::vector<std::string> u;
  for (int i = 0; i < n; ++i) u.push_back("user:" + std::to_string(i));
  return u;
}

}  // namespace

TEST_CASE("an offer sent on one node reaches a gateway on another, whose ack there sends the sender its receipts",
          "[cluster][e2e][offers]") {
  cluster_fixture f;
  f.start_settled({"a", "b", "c"});
  offers_on(f.node("a"));
  // Twelve users: their partitions are owned by every node.
  gateway gw(f.node("a"), "gw-a", users(12));
  dispatcher d(f.node("b"));
  std::vector<std::string_view> keys;
  const auto all = users(12);
  for (const auto& u : all) keys.push_back(u);
  keys.push_back("user:nobody");
  const auto r = d.c->send_offer(keys, "ride 1", {.offer_id = 501, .expires_in = 30s, .receipt_timeout = 20s});
  REQUIRE(r);
  CHECK(r->routed == 12);
  REQUIRE(r->outcomes.size() == 13);
  for (int i = 0; i < 12; ++i) {
    CHECK(r->outcomes[i] == key_outcome::routed);
    CHECK(r->gateways[i] == "gw-a");
  }
  CHECK(r->outcomes[12] == key_outcome::no_route);
  auto sorted = all;
  std::sort(sorted.begin(), sorted.end());
  REQUIRE(wait_until([&] { return keys_of(gw, 501) == sorted; }));
  CHECK(gw.got.count <= 3);
  for (const auto& m : gw.got.snapshot()) {
    CHECK(m.payload == "ride 1");
    CHECK(m.offer_id == 501);
    CHECK(m.time_left > 0ms);
    CHECK(m.time_left <= 30s);
  }

  // The device took it for two users: acked on node a, the offer is on b.
  CHECK_FALSE(gw.c->ack(501, "user:3"));
  CHECK_FALSE(gw.c->ack(501, "user:7"));
  REQUIRE(wait_until([&] { return d.receipts.count == 2; }));
  std::vector<std::string> acked;
  for (const auto& x : d.receipts.snapshot()) {
    CHECK(x.offer_id == 501);
    CHECK(x.outcome == receipt_outcome::acked);
    CHECK(x.inbox_id == "gw-a");
    acked.push_back(x.route_key);
  }
  std::sort(acked.begin(), acked.end());
  CHECK(acked == std::vector<std::string>{"user:3", "user:7"});
  // They left the pending list, on whichever node it is asked.
  for (const char* node : {"a", "b", "c"}) {
    auto c = connect_with(f.node(node), "app");
    const auto p3 = c->pending_offers("user:3");
    REQUIRE(p3);
    CHECK(p3->empty());
    const auto p4 = c->pending_offers("user:4");
    REQUIRE(p4);
    REQUIRE(p4->size() == 1);
    CHECK(p4->front().offer_id == 501);
    CHECK(p4->front().payload_text() == "ride 1");
  }
  // An ack of an offer no node holds is refused (the library logs it, the
  // connection stays).
  CHECK_FALSE(gw.c->ack(999, "user:3"));
  CHECK_FALSE(gw.c->flush());
  CHECK(d.receipts.count == 2);
}

TEST_CASE("keys of an offer sent on one node that no gateway on another node acks time out at the sender",
          "[cluster][e2e][offers]") {
  cluster_fixture f;
  f.start_settled({"a", "b"});
  offers_on(f.node("a"));
  gateway gw(f.node("a"), "gw-a", users(4));
  dispatcher d(f.node("b"));
  const std::array<std::string_view, 2> keys{"user:0", "user:1"};
  const auto r = d.c->send_offer(keys, "ride 2", {.offer_id = 502, .expires_in = 30s, .receipt_timeout = 300ms});
  REQUIRE(r);
  CHECK(r->routed == 2);
  REQUIRE(wait_until([&] { return keys_of(gw, 502).size() == 2; }));
  CHECK_FALSE(gw.c->ack(502, "user:0"));
  REQUIRE(wait_until([&] { return d.receipts.count == 2; }));
  auto got = d.receipts.snapshot();
  std::sort(got.begin(), got.end(), [](const receipt& x, const receipt& y) { return x.route_key < y.route_key; });
  CHECK(got[0].route_key == "user:0");
  CHECK(got[0].outcome == receipt_outcome::acked);
  CHECK(got[1].route_key == "user:1");
  CHECK(got[1].outcome == receipt_outcome::timeout);
  CHECK(got[1].inbox_id == "gw-a");
}

TEST_CASE("withdrawing an offer retracts it from gateways on other nodes, asked on its node or on another",
          "[cluster][e2e][offers]") {
  cluster_fixture f;
  f.start_settled({"a", "b", "c"});
  offers_on(f.node("a"));
  offers_on(f.node("c"));
  gateway gw_a(f.node("a"), "gw-a", {"user:0", "user:1"});
  gateway gw_c(f.node("c"), "gw-c", {"user:2"});
  dispatcher d(f.node("b"));
  const std::array<std::string_view, 3> keys{"user:0", "user:1", "user:2"};
  REQUIRE(d.c->send_offer(keys, "ride 3", {.offer_id = 503, .expires_in = 30s}));
  REQUIRE(d.c->send_offer(keys, "ride 4", {.offer_id = 504, .expires_in = 30s}));
  REQUIRE(wait_until([&] {
    return keys_of(gw_a, 504).size() == 2 && keys_of(gw_c, 504).size() == 1 && keys_of(gw_a, 503).size() == 2 &&
           keys_of(gw_c, 503).size() == 1;
  }));

  // On its node: both gateways are told, with their keys.
  const auto w = d.c->withdraw(503);
  REQUIRE(w);
  CHECK(w->notified == 2);
  CHECK(w->pending == 3);
  REQUIRE(wait_until([&] { return gw_a.withdrawn.count == 1 && gw_c.withdrawn.count == 1; }));
  const auto na = gw_a.withdrawn.snapshot().front();
  CHECK(na.offer_id == 503);
  CHECK(na.inbox_id == "gw-a");
  auto ka = na.route_keys;
  std::sort(ka.begin(), ka.end());
  CHECK(ka == std::vector<std::string>{"user:0", "user:1"});
  CHECK(gw_c.withdrawn.snapshot().front().route_keys == std::vector<std::string>{"user:2"});

  // On another node (the dispatcher reconnected to c): its node withdraws it.
  auto elsewhere = connect_with(f.node("c"), "dispatcher-again");
  const auto w2 = elsewhere->withdraw(504);
  REQUIRE(w2);
  CHECK(w2->notified == 2);
  CHECK(w2->pending == 3);
  REQUIRE(wait_until([&] { return gw_a.withdrawn.count == 2 && gw_c.withdrawn.count == 2; }));
  CHECK(elsewhere->pending_offers("user:0")->empty());
  // Withdrawn: not live anywhere.
  CHECK(elsewhere->withdraw(504).error() == errc::not_found);
  CHECK(d.c->withdraw(504).error() == errc::not_found);
}

TEST_CASE("an offer id live on a node is refused there while its delivery to other nodes is under way",
          "[cluster][e2e][offers]") {
  cluster_fixture f;
  f.start_settled({"a", "b"});
  gateway gw(f.node("a"), "gw-a", users(8));
  dispatcher d(f.node("b"));
  std::vector<std::string_view> keys;
  const auto all = users(8);
  for (const auto& u : all) keys.push_back(u);
  // Two sends with one id, back to back (the second before the first's
  // delivery is known): one is taken, the other refused.
  std::atomic<int> ok{0}, refused{0};
  for (int i = 0; i < 2; ++i)
    d.c->async_send_offer(keys, std::as_bytes(std::span(std::string_view("ride 5"))),
                          {.offer_id = 505, .expires_in = 30s},
                          [&](const std::expected<offer_result, std::error_code>& r) {
                            if (r)
                              ++ok;
                            else if (r.error() == errc::bad_request)
                              ++refused;
                          });
  REQUIRE(wait_until([&] { return ok + refused == 2; }));
  CHECK(ok == 1);
  CHECK(refused == 1);
}

TEST_CASE("an exposure cap holds across nodes: each key's owner counts the offers sent through every node",
          "[cluster][e2e][offers]") {
  cluster_fixture f;
  f.start_settled({"a", "b", "c"});
  gateway gw(f.node("a"), "gw-a", {"user:0", "user:1"});
  dispatcher on_b(f.node("b")), on_c(f.node("c")), on_a(f.node("a"));
  const std::array<std::string_view, 1> one{"user:0"};
  const offer_options capped_at_2{.expires_in = 30s, .cap_max = 2, .cap_window = 60s};
  // Two offers to user:0 through two nodes: both routed.
  const auto r1 = on_b.c->send_offer(one, "ride 6", capped_at_2);
  REQUIRE(r1);
  CHECK(r1->outcomes == std::vector<key_outcome>{key_outcome::routed});
  const auto r2 = on_c.c->send_offer(one, "ride 7", capped_at_2);
  REQUIRE(r2);
  CHECK(r2->outcomes == std::vector<key_outcome>{key_outcome::routed});
  // A third through a node that sent none: user:0 is at its cap, user:1 not.
  const std::array<std::string_view, 2> both{"user:0", "user:1"};
  const auto r3 = on_a.c->send_offer(both, "ride 8", capped_at_2);
  REQUIRE(r3);
  CHECK(r3->outcomes == std::vector<key_outcome>{key_outcome::capped, key_outcome::routed});
  CHECK(r3->capped == 1);
  CHECK(r3->routed == 1);
  CHECK(r3->gateways == std::vector<std::string>{"", "gw-a"});
  // The counts, asked on any node, are the cluster's.
  for (auto* d : {&on_a, &on_b, &on_c}) {
    const auto counts = d->c->exposure(both, 60s);
    REQUIRE(counts);
    CHECK(*counts == std::vector<std::uint32_t>{2, 1});
  }
  // Nothing of ride 8 reached user:0.
  REQUIRE(wait_until([&] { return gw.got.count >= 3; }));
  REQUIRE_FALSE(gw.c->flush());
  for (const auto& m : gw.got.snapshot())
    if (m.payload == "ride 8") CHECK(m.keys == std::vector<std::string>{"user:1"});
}

TEST_CASE("an offer capped for every key on other nodes is not live: its id is free again", "[cluster][e2e][offers]") {
  cluster_fixture f;
  f.start_settled({"a", "b"});
  gateway gw(f.node("a"), "gw-a", users(6));
  dispatcher d(f.node("b"));
  std::vector<std::string_view> keys;
  const auto all = users(6);
  for (const auto& u : all) keys.push_back(u);
  const offer_options capped_at_1{.offer_id = 510, .expires_in = 30s, .cap_max = 1, .cap_window = 60s};
  REQUIRE(d.c->send_offer(keys, "first", capped_at_1));
  auto again = capped_at_1;
  again.offer_id = 511;
  const auto r = d.c->send_offer(keys, "second", again);
  REQUIRE(r);
  CHECK(r->capped == 6);
  CHECK(r->routed == 0);
  CHECK(d.c->withdraw(511).error() == errc::not_found);
  CHECK(d.c->pending_offers("user:0")->size() == 1);
}

TEST_CASE("while an offer waits for a silent node, acks and a withdraw that come meanwhile take effect once it is kept",
          "[cluster][e2e][offers]") {
  cluster_fixture f;
  for (const auto* id : {"a", "b", "c"}) {
    auto c = f.config(id);
    c.cluster_lease_ttl_s = 10;  // the hold below must not cost c its membership
    c.cluster_forward_timeout = 1500ms;
    f.start(c);
  }
  f.converge(3);
  f.settle();
  const std::vector<std::string> members{"a", "b", "c"};
  const auto on_a = user_owned_by("a", members), on_c = user_owned_by("c", members);
  offers_on(f.node("a"));
  gateway gw(f.node("a"), "gw-a", {on_a, on_c});
  dispatcher d(f.node("b"));
  const std::vector<std::string_view> keys{on_a, on_c};
  std::atomic<int> answered{0};
  std::error_code first_error, second_error;
  {
    auto hold = f.node("c").hold_loop();
    // on_c's owner is silent: both offers wait for it on b.
    d.c->async_send_offer(keys, std::as_bytes(std::span(std::string_view("ride 9"))),
                          {.offer_id = 520, .expires_in = 30s, .receipt_timeout = 20s},
                          [&](const std::expected<offer_result, std::error_code>& r) {
                            first_error = r ? std::error_code() : r.error();
                            ++answered;
                          });
    d.c->async_send_offer(keys, std::as_bytes(std::span(std::string_view("ride 10"))),
                          {.offer_id = 521, .expires_in = 30s},
                          [&](const std::expected<offer_result, std::error_code>& r) {
                            second_error = r ? std::error_code() : r.error();
                            ++answered;
                          });
    // on_a reaches the gateway meanwhile, which acks it (asked of b, which
    // holds the offer's delivery).
    REQUIRE(wait_until([&] { return keys_of(gw, 520) == std::vector<std::string>{on_a}; }));
    CHECK(answered == 0);
    CHECK_FALSE(gw.c->ack(520, on_a));
    // A pull cannot be complete while c is silent.
    auto app = connect_with(f.node("a"), "app");
    CHECK(app->pending_offers(on_a).error() == errc::unavailable);
    // The sender withdraws the other one: answered once it is kept.
    const auto w = d.c->withdraw(521);
    REQUIRE(w);
    CHECK(w->notified == 1);
    CHECK(answered == 2);
  }
  // c never answered in time: outcome unknown, the offers kept with the
  // keys known routed.
  CHECK(first_error == errc::outcome_unknown);
  CHECK(second_error == errc::outcome_unknown);
  REQUIRE(wait_until([&] { return d.receipts.count == 1; }));
  const auto r = d.receipts.snapshot().front();
  CHECK(r.offer_id == 520);
  CHECK(r.route_key == on_a);
  CHECK(r.outcome == receipt_outcome::acked);
  CHECK(r.inbox_id == "gw-a");
  REQUIRE(wait_until([&] { return gw.withdrawn.count == 1; }));
  CHECK(gw.withdrawn.snapshot().front().offer_id == 521);
  CHECK(d.c->withdraw(521).error() == errc::not_found);
  // c delivers on_c late (b never learned it went to gw-a): the gateway's
  // ack of it still gives a receipt, naming the acking gateway's inbox.
  REQUIRE(wait_until([&] {
    const auto k = keys_of(gw, 520);
    return std::find(k.begin(), k.end(), on_c) != k.end();
  }));
  CHECK_FALSE(gw.c->ack(520, on_c));
  REQUIRE(wait_until([&] { return d.receipts.count == 2; }));
  const auto late = d.receipts.snapshot().back();
  CHECK(late.route_key == on_c);
  CHECK(late.outcome == receipt_outcome::acked);
  CHECK(late.inbox_id == "gw-a");
}
