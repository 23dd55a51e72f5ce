// Unit tests for broker::fanout on real tables (channel_table, a
// routing_table over a lease table on a hand-driven clock) and a real frame
// arena, without sockets: the delivery targets record what they get.

#include "broker/tables/channel_table.hpp"
#include "broker/delivery/fanout.hpp"
#include "broker/tables/frame_arena.hpp"
#include "broker/tables/lease_table.hpp"
#include "broker/tables/routing_table.hpp"
#include "tests/support/byte_pattern.hpp"
#include "tests/support/fake_clock.hpp"
#include "tests/support/recording_target.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace std::chrono_literals;
using namespace switchyard::broker;
using switchyard::test::fake_clock;
using switchyard::test::fake_clock_config;
using switchyard::test::recording_target;
namespace wire = switchyard::protocol::wire;
using switchyard::protocol::bytes_view;

using switchyard::test::wire_bytes_of;

std::string text(const flatbuffers::Vector<std::uint8_t>* v) {
  return v ? std::string(reinterpret_cast<const char*>(v->data()), v->size()) : std::string{};
}

std::vector<std::string> strings(const flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>* v) {
  std::vector<std::string> out;
  if (v)
    for (const auto* s : *v) out.push_back(s->str());
  return out;
}

// The tables fan-out works on, with a lease for the inboxes.
struct fixture : fake_clock {
  frame_arena arena;
  switchyard::protocol::frame_builder builder;
  server_counters counters;
  channel_table channels;
  lease_table leases{fake_clock_config(10ms, 1h), source()};
  routing_table routing{leases};
  fanout fan{channels, routing, arena, builder, counters};
  lease_id lease = 0;

  fixture() : fake_clock{fake_clock::time_point{} + 1000h} { lease = leases.grant(10s).id; }

  // `user` is routed to inbox `inbox`, held by `owner`.
  void route(std::string_view user, std::string_view inbox, delivery_target& owner) {
    if (!routing.inbox_owner(inbox)) REQUIRE_FALSE(routing.open_inbox(inbox, lease, &owner));
    REQUIRE(routing.put(user, inbox, lease, 0ms));
  }
  std::vector<std::string_view> gateways;
};

}  // namespace

TEST_CASE("a publish is encoded once and shared by every subscriber", "[broker][fanout]") {
  fixture f;
  recording_target a, b, c, other;
  f.channels.subscribe("orders.eu", &a);
  f.channels.subscribe("orders.*", &b);
  f.channels.subscribe("orders.>", &c);
  f.channels.subscribe("billing.>", &other);

  CHECK(f.fan.publish("orders.eu", wire_bytes_of("hello")) == 3);
  for (auto* t : {&a, &b, &c}) {
    REQUIRE(t->deliveries.size() == 1);
    const auto& d = t->deliveries[0];
    CHECK(d.shared);
    const auto* m = d.frame().message_as_Deliver();
    REQUIRE(m != nullptr);
    CHECK(m->channel()->str() == "orders.eu");
    CHECK(text(m->payload()) == "hello");
    CHECK(m->stream() == nullptr);
  }
  // One encoding: the same arena bytes.
  CHECK(a.deliveries[0].shared_data == b.deliveries[0].shared_data);
  CHECK(b.deliveries[0].shared_data == c.deliveries[0].shared_data);
  CHECK(other.deliveries.empty());
  CHECK(f.counters.published == 1);
}

TEST_CASE("a target subscribed by several matching patterns gets a publish once", "[broker][fanout]") {
  fixture f;
  recording_target a;
  f.channels.subscribe("orders.eu", &a);
  f.channels.subscribe("orders.*", &a);
  f.channels.subscribe(">", &a);
  CHECK(f.fan.publish("orders.eu", wire_bytes_of("x")) == 1);
  CHECK(a.deliveries.size() == 1);
}

TEST_CASE("a publish with a log position carries it only to targets that want positions", "[broker][fanout]") {
  fixture f;
  recording_target plain(false), positioned(true);
  f.channels.subscribe("orders.eu", &plain);
  f.channels.subscribe("orders.eu", &positioned);
  const log_position pos{"orders", 42, 7};

  CHECK(f.fan.publish("orders.eu", wire_bytes_of("p"), &pos) == 2);
  REQUIRE(plain.deliveries.size() == 1);
  REQUIRE(positioned.deliveries.size() == 1);
  const auto* without = plain.deliveries[0].frame().message_as_Deliver();
  CHECK(without->stream() == nullptr);
  CHECK(without->seq() == 0);
  const auto* with = positioned.deliveries[0].frame().message_as_Deliver();
  REQUIRE(with->stream() != nullptr);
  CHECK(with->stream()->str() == "orders");
  CHECK(with->seq() == 42);
  CHECK(with->epoch() == 7);
  CHECK(text(with->payload()) == "p");
}

TEST_CASE("a publish to a channel without subscribers delivers nothing and is counted", "[broker][fanout]") {
  fixture f;
  recording_target a;
  f.channels.subscribe("orders.eu", &a);
  f.channels.unsubscribe("orders.eu", &a);
  CHECK(f.fan.publish("orders.eu", wire_bytes_of("x")) == 0);
  CHECK(a.deliveries.empty());
  CHECK(f.counters.published == 1);
}

TEST_CASE("a send to one user goes to the inbox its route names", "[broker][fanout]") {
  fixture f;
  recording_target gw1, gw2;
  f.route("user:1", "gw-1", gw1);
  f.route("user:2", "gw-2", gw2);
  const std::vector<std::string_view> keys{"user:1"};

  CHECK(f.fan.send_to_users(keys, wire_bytes_of("hi"), nullptr, f.gateways) == 1);
  REQUIRE(gw1.deliveries.size() == 1);
  CHECK_FALSE(gw1.deliveries[0].shared);
  const auto* m = gw1.deliveries[0].frame().message_as_InboxDelivery();
  REQUIRE(m != nullptr);
  CHECK(m->inbox_id()->str() == "gw-1");
  CHECK(strings(m->route_keys()) == std::vector<std::string>{"user:1"});
  CHECK(text(m->payload()) == "hi");
  CHECK(gw2.deliveries.empty());
  CHECK(f.gateways == std::vector<std::string_view>{"gw-1"});
  CHECK(f.counters.sends_routed == 1);
  CHECK(f.counters.sends_unrouted == 0);
}

TEST_CASE("a send to several users delivers once per inbox, listing that inbox's keys", "[broker][fanout]") {
  fixture f;
  recording_target gw1, gw2;
  f.route("user:1", "gw-1", gw1);
  f.route("user:2", "gw-2", gw2);
  f.route("user:3", "gw-1", gw1);
  const std::vector<std::string_view> keys{"user:1", "user:2", "nobody", "user:3"};

  CHECK(f.fan.send_to_users(keys, wire_bytes_of("all"), nullptr, f.gateways) == 3);
  REQUIRE(gw1.deliveries.size() == 1);
  REQUIRE(gw2.deliveries.size() == 1);
  CHECK(strings(gw1.deliveries[0].frame().message_as_InboxDelivery()->route_keys()) ==
        std::vector<std::string>{"user:1", "user:3"});
  CHECK(strings(gw2.deliveries[0].frame().message_as_InboxDelivery()->route_keys()) ==
        std::vector<std::string>{"user:2"});
  CHECK(f.gateways == std::vector<std::string_view>{"gw-1", "gw-2", "", "gw-1"});
  CHECK(f.counters.sends_routed == 3);
  CHECK(f.counters.sends_unrouted == 1);
}

TEST_CASE("a send with a log position carries it only to inboxes whose owner wants positions", "[broker][fanout]") {
  fixture f;
  recording_target plain(false), positioned(true);
  f.route("user:1", "gw-1", plain);
  f.route("user:2", "gw-2", positioned);
  const std::vector<std::string_view> keys{"user:1", "user:2"};
  const log_position pos{"sends", 9, 3};

  CHECK(f.fan.send_to_users(keys, wire_bytes_of("d"), &pos, f.gateways) == 2);
  CHECK(plain.deliveries.at(0).frame().message_as_InboxDelivery()->stream() == nullptr);
  const auto* with = positioned.deliveries.at(0).frame().message_as_InboxDelivery();
  REQUIRE(with->stream() != nullptr);
  CHECK(with->stream()->str() == "sends");
  CHECK(with->seq() == 9);
  CHECK(with->epoch() == 3);
}

TEST_CASE("a send to a user whose gateway disconnected is not routed", "[broker][fanout]") {
  fixture f;
  recording_target gw1;
  f.route("user:1", "gw-1", gw1);
  f.routing.disconnect(&gw1, {"gw-1"});
  const std::vector<std::string_view> keys{"user:1"};

  CHECK(f.fan.send_to_users(keys, wire_bytes_of("x"), nullptr, f.gateways) == 0);
  CHECK(gw1.deliveries.empty());
  CHECK(f.gateways == std::vector<std::string_view>{""});
  CHECK(f.counters.sends_unrouted == 1);
}
