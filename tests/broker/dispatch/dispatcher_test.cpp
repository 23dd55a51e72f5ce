// Unit tests for broker::dispatcher with the real handlers, tables and
// fan-out of a server without a sequence log, and peers without sockets
// (tests/support/recording_peer.hpp): capability checks, refusals, the
// Ping flush idiom and the handler wiring.

#include "broker/tables/channel_table.hpp"
#include "broker/dispatch/dispatcher.hpp"
#include "broker/delivery/fanout.hpp"
#include "broker/tables/frame_arena.hpp"
#include "broker/tables/lease_table.hpp"
#include "broker/handlers/pubsub_handler.hpp"
#include "broker/handlers/routing_handler.hpp"
#include "broker/tables/routing_table.hpp"
#include "broker/handlers/server_admin_handler.hpp"
#include "protocol/frame_parser.hpp"
#include "tests/support/byte_pattern.hpp"
#include "tests/support/fake_clock.hpp"
#include "tests/support/recording_peer.hpp"

#include <catch2/catch.hpp>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <string_view>
#include <vector>

namespace {

using namespace std::chrono_literals;
using namespace switchyard::broker;
using switchyard::test::fake_clock;
using switchyard::test::fake_clock_config;
using switchyard::test::recording_peer;
namespace protocol = switchyard::protocol;
namespace wire = protocol::wire;
using protocol::errc;

using switchyard::test::wire_bytes_of;

// A server's request path without sockets and without a log.
struct fixture : fake_clock {
  server_config config;
  std::shared_ptr<spdlog::logger> logger =
      std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  frame_arena arena;
  protocol::frame_builder builder;   // the loop's (answers)
  protocol::frame_builder requests;  // the tests' (requests)
  server_counters counters;
  channel_table channels;
  lease_table leases{fake_clock_config(10ms, 1h, 1000ms), source()};
  routing_table routing{leases};
  fanout fan{channels, routing, arena, builder, counters};
  pubsub_handler pubsub{config, channels, fan, nullptr, builder, logger};
  routing_handler routing_requests{config, leases, routing, fan, nullptr, builder, logger};
  std::vector<std::chrono::milliseconds> drains;  // what the admin handler was asked
  std::chrono::milliseconds default_drain_window{30'000};
  // The server's side of Stats and ConnList: connections 7 and 9.
  server_admin_handler admin{{[this](std::chrono::milliseconds w) { drains.push_back(w); },
                              [] {
                                stats_report r;
                                r.version = "9.9.9";
                                r.values.push_back({"published_total", 42, true});
                                return r;
                              },
                              [] {
                                return std::vector<conn_key>{{.id = 9}, {.id = 7}};
                              },
                              [](std::span<const std::uint64_t> ids) {
                                std::vector<protocol::conn_info_fields> out;
                                for (const auto id : ids)
                                  out.push_back({.id = id, .name = "conn-" + std::to_string(id)});
                                return out;
                              }},
                             default_drain_window,
                             builder,
                             logger};
  dispatcher dispatch{{pubsub, routing_requests, nullptr, nullptr, &admin}, counters, logger};
  std::vector<std::vector<std::uint8_t>> frames;  // keeps each request's bytes

  fixture() : fake_clock{fake_clock::time_point{} + 1000h} {}

  std::shared_ptr<recording_peer> peer(capability_set granted = {}) {
    return std::make_shared<recording_peer>(next_id++, builder, granted);
  }
  // Dispatches an encoded request from `p` as a connection does: a batch
  // of one frame, look_ahead on it first (connection::handle_input).
  bool from(recording_peer& p, protocol::bytes_view request) {
    const auto* frame = decoded(request);
    const protocol::frame_view batch[] = {{frame, request.size()}};
    dispatch.look_ahead(p, batch, 0);
    return dispatch.dispatch(p, *frame);
  }
  // Keeps a copy of `request` for as long as the fixture; its decoded frame.
  const protocol::wire::Frame* decoded(protocol::bytes_view request) {
    frames.emplace_back(request.begin(), request.end());
    auto f = protocol::decode_frame(frames.back(), protocol::default_max_frame);
    REQUIRE(f);
    return *f;
  }
  std::uint64_t next_id = 1;
};

capability_set routing_caps() {
  capability_set c;
  c.routing = true;
  return c;
}

}  // namespace

TEST_CASE("a request that needs routing, from a connection without it, is refused and the connection stays",
          "[broker][dispatch]") {
  fixture f;
  auto p = f.peer();
  CHECK(f.from(*p, f.requests.lease_grant(7, 5000)));
  REQUIRE(p->sent.size() == 1);
  const auto* e = p->answer(0).message_as_Error();
  REQUIRE(e != nullptr);
  CHECK(p->answer(0).request_id() == 7);
  CHECK(e->code() == wire::ErrorCode::unsupported_message);
  CHECK(std::string_view(e->message()->c_str()).find("routing") != std::string_view::npos);
  CHECK_FALSE(p->closed());
  CHECK(f.leases.size() == 0);
}

TEST_CASE("a request that needs routing, from a connection granted it, reaches its handler", "[broker][dispatch]") {
  fixture f;
  auto p = f.peer(routing_caps());
  CHECK(f.from(*p, f.requests.lease_grant(7, 5000)));
  REQUIRE(p->sent.size() == 1);
  REQUIRE(p->answer(0).message_as_LeaseInfo() != nullptr);
  CHECK(f.leases.size() == 1);
}

TEST_CASE("a log request on a server without a log is answered that the log is off", "[broker][dispatch]") {
  fixture f;
  capability_set all = routing_caps();
  all.sequence_log = true;  // never granted without a log; refused all the same
  auto p = f.peer(all);
  CHECK(f.from(*p, f.requests.append(3, "orders", wire_bytes_of("x"))));
  CHECK(f.from(*p, f.requests.stream_info(4, "orders")));
  REQUIRE(p->sent.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    const auto* e = p->answer(i).message_as_Error();
    REQUIRE(e != nullptr);
    CHECK(e->code() == wire::ErrorCode::unsupported_message);
    CHECK(std::string_view(e->message()->c_str()).find("the sequence log is off") != std::string_view::npos);
  }
  CHECK_FALSE(p->closed());
}

TEST_CASE("a message type clients may not send closes the connection as a protocol error", "[broker][dispatch]") {
  fixture f;
  auto p = f.peer();
  CHECK_FALSE(f.from(*p, f.requests.deliver("orders.eu", wire_bytes_of("x"))));
  REQUIRE(p->closed_with);
  CHECK(*p->closed_with == errc::unsupported_message);
  CHECK(p->close_reason.find("Deliver") != std::string::npos);
  CHECK(f.counters.protocol_errors == 1);
}

TEST_CASE("every message type is either served to clients or refused as server-only", "[broker][dispatch]") {
  fixture f;
  using M = wire::Message;
  const std::vector<M> from_clients{
      M::Hello,         M::Ping,          M::Pong,           M::Error,        M::Subscribe,       M::Unsubscribe,
      M::Publish,       M::LeaseGrant,    M::LeaseKeepAlive, M::LeaseRevoke,  M::LeaseTimeToLive, M::LeaseList,
      M::RegistryPut,   M::RegistryGet,   M::RegistryDelete, M::RegistryList, M::InboxOpen,       M::InboxClose,
      M::Send,          M::Append,        M::Read,           M::StreamInfo,   M::StreamList,      M::SetRetention,
      M::Drain,         M::Stats,         M::ConnList,       M::StreamDelete, M::OfferAck,        M::Withdraw,
      M::PendingOffers, M::ExposureQuery, M::FlagSet,        M::FlagList,     M::ClusterStatus,   M::ClusterTakeover};
  for (int t = 0; t <= static_cast<int>(M::MAX); ++t) {
    const auto type = static_cast<M>(t);
    INFO(wire::EnumNameMessage(type));
    const bool expected = std::find(from_clients.begin(), from_clients.end(), type) != from_clients.end();
    CHECK(f.dispatch.accepts(type) == expected);
  }
  CHECK(f.dispatch.needs(M::Send) == dispatcher::requirement::routing);
  CHECK(f.dispatch.needs(M::InboxOpen) == dispatcher::requirement::routing);
  CHECK(f.dispatch.needs(M::Read) == dispatcher::requirement::sequence_log);
  CHECK(f.dispatch.needs(M::SetRetention) == dispatcher::requirement::sequence_log);
  CHECK(f.dispatch.needs(M::StreamDelete) == dispatcher::requirement::sequence_log);
  CHECK(f.dispatch.needs(M::Publish) == dispatcher::requirement::none);
  CHECK(f.dispatch.needs(M::Drain) == dispatcher::requirement::admin);
  CHECK(f.dispatch.needs(M::Stats) == dispatcher::requirement::admin);
  CHECK(f.dispatch.needs(M::ConnList) == dispatcher::requirement::admin);
  CHECK(f.dispatch.needs(M::FlagSet) == dispatcher::requirement::admin);
  CHECK(f.dispatch.needs(M::ClusterStatus) == dispatcher::requirement::admin);
  CHECK(f.dispatch.needs(M::ClusterTakeover) == dispatcher::requirement::admin);
  CHECK(f.dispatch.needs(M::OfferAck) == dispatcher::requirement::offers);
  CHECK(f.dispatch.needs(M::Withdraw) == dispatcher::requirement::offers);
}

TEST_CASE("a drain request without the admin capability is refused and drains nothing", "[broker][dispatch]") {
  fixture f;
  auto p = f.peer(routing_caps());
  CHECK(f.from(*p, f.requests.drain(5, 1000)));
  REQUIRE(p->sent.size() == 1);
  const auto* e = p->answer(0).message_as_Error();
  REQUIRE(e != nullptr);
  CHECK(e->code() == wire::ErrorCode::unsupported_message);
  CHECK(std::string_view(e->message()->c_str()).find("admin") != std::string_view::npos);
  CHECK(f.drains.empty());
  CHECK_FALSE(p->closed());
}

TEST_CASE("a drain request with the admin capability is answered Ok and drains over its window or the default",
          "[broker][dispatch]") {
  fixture f;
  capability_set admin;
  admin.admin = true;
  auto p = f.peer(admin);
  CHECK(f.from(*p, f.requests.drain(5, 1500)));
  CHECK(f.from(*p, f.requests.drain(6, 0)));
  REQUIRE(p->sent.size() == 2);
  CHECK(p->answer(0).message_as_Ok() != nullptr);
  CHECK(p->answer(0).request_id() == 5);
  REQUIRE(f.drains.size() == 2);
  CHECK(f.drains[0] == 1500ms);
  CHECK(f.drains[1] == 30'000ms);
}

TEST_CASE("stats and connection lists without the admin capability are refused and the connection stays",
          "[broker][dispatch]") {
  fixture f;
  auto p = f.peer(routing_caps());
  CHECK(f.from(*p, f.requests.stats(5)));
  CHECK(f.from(*p, f.requests.conn_list(6, 0, 0, 0)));
  REQUIRE(p->sent.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    const auto* e = p->answer(i).message_as_Error();
    REQUIRE(e != nullptr);
    CHECK(e->code() == wire::ErrorCode::unsupported_message);
  }
  CHECK_FALSE(p->closed());
}

TEST_CASE("a stats request with the admin capability is answered with what the server reports", "[broker][dispatch]") {
  fixture f;
  capability_set admin;
  admin.admin = true;
  auto p = f.peer(admin);
  CHECK(f.from(*p, f.requests.stats(5)));
  REQUIRE(p->sent.size() == 1);
  CHECK(p->answer(0).request_id() == 5);
  const auto* r = p->answer(0).message_as_StatsResult();
  REQUIRE(r != nullptr);
  CHECK(r->version()->string_view() == "9.9.9");
  REQUIRE(r->values()->size() == 1);
  CHECK(r->values()->Get(0)->name()->string_view() == "published_total");
  CHECK(r->values()->Get(0)->value() == 42);
  CHECK(r->values()->Get(0)->counter());
}

TEST_CASE("a connection list with the admin capability is answered with a page in id order", "[broker][dispatch]") {
  fixture f;
  capability_set admin;
  admin.admin = true;
  auto p = f.peer(admin);
  CHECK(f.from(*p, f.requests.conn_list(5, static_cast<std::uint8_t>(wire::ConnSort::id), 1, 0)));
  REQUIRE(p->sent.size() == 1);
  const auto* r = p->answer(0).message_as_ConnListResult();
  REQUIRE(r != nullptr);
  CHECK(r->total() == 2);
  REQUIRE(r->conns()->size() == 1);
  CHECK(r->conns()->Get(0)->id() == 7);
  CHECK(r->conns()->Get(0)->name()->string_view() == "conn-7");
  CHECK(r->next_cursor() == 7);
}

TEST_CASE("a cluster status request without the admin capability is refused and the connection stays",
          "[broker][dispatch]") {
  fixture f;
  auto p = f.peer(routing_caps());
  CHECK(f.from(*p, f.requests.cluster_status(5)));
  REQUIRE(p->sent.size() == 1);
  const auto* e = p->answer(0).message_as_Error();
  REQUIRE(e != nullptr);
  CHECK(e->code() == wire::ErrorCode::unsupported_message);
  CHECK(std::string_view(e->message()->c_str()).find("admin") != std::string_view::npos);
  CHECK_FALSE(p->closed());
}

TEST_CASE("a cluster status request with the admin capability reaches the admin handler", "[broker][dispatch]") {
  fixture f;  // its admin handler has no cluster status source: a single node
  capability_set admin;
  admin.admin = true;
  auto p = f.peer(admin);
  CHECK(f.from(*p, f.requests.cluster_status(5)));
  REQUIRE(p->sent.size() == 1);
  CHECK(p->answer(0).request_id() == 5);
  const auto* e = p->answer(0).message_as_Error();
  REQUIRE(e != nullptr);
  CHECK(e->code() == wire::ErrorCode::not_found);
  CHECK(std::string_view(e->message()->c_str()) == server_admin_handler::not_in_cluster_message);
  CHECK_FALSE(p->closed());
}

TEST_CASE("a ping is answered only after the requests before it that wait for the log", "[broker][dispatch]") {
  fixture f;
  auto p = f.peer();
  const auto ticket = p->open_ticket();  // an append waiting for the log
  CHECK(f.from(*p, f.requests.ping(21)));
  CHECK(f.from(*p, f.requests.ping(22)));
  CHECK(p->sent.empty());
  p->close_ticket(ticket);
  REQUIRE(p->sent.size() == 2);
  CHECK(p->answer(0).message_type() == wire::Message::Pong);
  CHECK(p->answer(0).request_id() == 21);
  CHECK(p->answer(1).request_id() == 22);
  CHECK(f.from(*p, f.requests.ping(23)));  // nothing waits now: at once
  CHECK(p->sent.size() == 3);
}

TEST_CASE("a publish dispatched from one peer is delivered to another's subscription", "[broker][dispatch]") {
  fixture f;
  auto sub = f.peer();
  auto pub = f.peer();
  CHECK(f.from(*sub, f.requests.subscribe(1, "orders.*")));
  CHECK(sub->answer(0).message_type() == wire::Message::Ok);
  CHECK(sub->drop_report_restarts == 1);
  CHECK(f.from(*pub, f.requests.publish(0, "orders.eu", wire_bytes_of("hi"))));
  REQUIRE(sub->delivered.size() == 1);
  const auto* d = wire::GetSizePrefixedFrame(sub->delivered[0].data())->message_as_Deliver();
  REQUIRE(d != nullptr);
  CHECK(d->channel()->str() == "orders.eu");
  CHECK(pub->sent.empty());  // no publish-ack asked for
}

TEST_CASE("a disconnected peer's subscriptions and inboxes are forgotten", "[broker][dispatch]") {
  fixture f;
  auto gw = f.peer(routing_caps());
  auto svc = f.peer(routing_caps());
  CHECK(f.from(*gw, f.requests.subscribe(1, "orders.>")));
  CHECK(f.from(*gw, f.requests.lease_grant(2, 5000)));
  const auto lease = gw->answer(1).message_as_LeaseInfo()->lease_id();
  CHECK(f.from(*gw, f.requests.inbox_open(3, "gw-1", lease)));
  CHECK(f.from(*gw, f.requests.registry_put(4, "user:1", "gw-1", lease, 0)));
  const std::vector<std::string_view> keys{"user:1"};
  CHECK(f.from(*svc, f.requests.send(5, keys, wire_bytes_of("one"))));
  CHECK(gw->delivered.size() == 1);

  f.dispatch.disconnected(*gw);
  CHECK(gw->subscriptions().empty());
  CHECK(gw->inboxes().empty());
  CHECK(f.channels.size() == 0);
  CHECK(f.from(*svc, f.requests.publish(0, "orders.eu", wire_bytes_of("x"))));
  CHECK(f.from(*svc, f.requests.send(6, keys, wire_bytes_of("two"))));
  CHECK(gw->delivered.size() == 1);
  // The send found the inbox without a connection: no route.
  const auto* e = svc->answer(svc->sent.size() - 1).message_as_Error();
  REQUIRE(e != nullptr);
  CHECK(e->code() == wire::ErrorCode::no_route);
}

TEST_CASE("the sends of one batch are routed at the lease time read when the batch began", "[broker][dispatch]") {
  fixture f;
  auto gw = f.peer(routing_caps());
  auto svc = f.peer(routing_caps());
  CHECK(f.from(*gw, f.requests.lease_grant(1, 1000)));  // the fixture's shortest TTL: 1 s
  const auto lease = gw->answer(0).message_as_LeaseInfo()->lease_id();
  CHECK(f.from(*gw, f.requests.inbox_open(2, "gw-1", lease)));
  CHECK(f.from(*gw, f.requests.registry_put(3, "user:1", "gw-1", lease, 0)));
  const std::vector<std::string_view> keys{"user:1"};
  // A batch of two sends: the lease expires between them, and both are
  // judged when the batch began (a batch holds at most 32 frames).
  const protocol::frame_view batch[] = {{f.decoded(f.requests.send(0, keys, wire_bytes_of("one"))), 0},
                                        {f.decoded(f.requests.send(0, keys, wire_bytes_of("two"))), 0}};
  f.dispatch.look_ahead(*svc, batch, 0);
  CHECK(f.dispatch.dispatch(*svc, *batch[0].frame));
  f.advance(1500ms);
  f.dispatch.look_ahead(*svc, batch, 1);
  CHECK(f.dispatch.dispatch(*svc, *batch[1].frame));
  CHECK(gw->delivered.size() == 2);
  // The next batch reads the clock again: the lease has expired.
  CHECK(f.from(*svc, f.requests.send(0, keys, wire_bytes_of("three"))));
  CHECK(gw->delivered.size() == 2);
}
