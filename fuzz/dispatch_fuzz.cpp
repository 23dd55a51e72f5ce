// Fuzz target: a stream of frames from several clients through
// broker::dispatcher and the real handlers (pubsub, routing with leases,
// registry and inboxes, server admin) on in-memory tables, with peers
// without sockets (tests/support/recording_peer.hpp), as
// tests/broker/dispatch/dispatcher_test.cpp wires them. No sequence log: log
// requests are answered by the capability check.
//
// Input: records of one control byte and one size-prefixed frame:
//   control & 3      0..2: the frame comes from peer 0 (no capability),
//                    1 ("routing") or 2 ("routing" and "admin");
//                    3: peer (control >> 2) % 3 disconnects first (and is
//                    replaced by a new one), then the frame comes from it
//   control & 0x80   the clock moves 700 ms and the leases are swept
//                    before the frame
// Frames are verified by protocol::frame_parser as a connection does;
// parsing stops at the first incomplete or invalid frame (a connection
// would close). Each run starts from empty tables, and at its end every
// peer disconnects, so tables and arena must come back empty.

#include "broker/tables/channel_table.hpp"
#include "broker/dispatch/dispatcher.hpp"
#include "broker/delivery/fanout.hpp"
#include "broker/tables/frame_arena.hpp"
#include "broker/tables/lease_table.hpp"
#include "broker/handlers/offer_handler.hpp"
#include "broker/handlers/pubsub_handler.hpp"
#include "broker/handlers/routing_handler.hpp"
#include "broker/tables/routing_table.hpp"
#include "broker/handlers/server_admin_handler.hpp"
#include "fuzz/seeds.hpp"
#include "protocol/frame_parser.hpp"
#include "tests/support/fake_clock.hpp"
#include "tests/support/recording_peer.hpp"

#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include <array>
#include <cstdlib>
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

constexpr std::uint32_t max_frame = 64 * 1024;
constexpr std::size_t peer_count = 3;

std::shared_ptr<spdlog::logger> null_logger() {
  static auto logger = std::make_shared<spdlog::logger>("fuzz", std::make_shared<spdlog::sinks::null_sink_mt>());
  return logger;
}

// A server's request path without sockets and without a log
// (dispatcher_test's fixture).
struct broker_state : fake_clock {
  server_config config;
  std::shared_ptr<spdlog::logger> logger = null_logger();
  frame_arena arena;
  protocol::frame_builder builder;
  server_counters counters;
  channel_table channels;
  lease_table leases{fake_clock_config(100ms, 1h, 1000ms, 60s), source()};
  routing_table routing{leases};
  fanout fan{channels, routing, arena, builder, counters};
  pubsub_handler pubsub{config, channels, fan, nullptr, builder, logger};
  routing_handler routing_requests{config, leases, routing, fan, nullptr, builder, logger};
  std::chrono::milliseconds default_drain_window{30'000};  // borrowed by the admin handler
  server_admin_handler admin{
      {[](std::chrono::milliseconds) {}, [] { return stats_report{}; },
       [] {
         return std::vector<conn_key>{{.id = 1}, {.id = 2}};
       },
       [](std::span<const std::uint64_t> ids) { return std::vector<protocol::conn_info_fields>(ids.size()); }},
      default_drain_window,
      builder,
      logger};
  offer_handler offers{config, routing, fan, builder, counters, source(), logger};
  dispatcher dispatch{{pubsub, routing_requests, nullptr, nullptr, &admin, &offers}, counters, logger};
  std::array<std::shared_ptr<recording_peer>, peer_count> peers;
  std::uint64_t next_id = 1;

  broker_state() : fake_clock{fake_clock::time_point{} + 1000h} {
    routing_requests.use_offers(&offers);
    for (std::size_t i = 0; i < peer_count; ++i) peers[i] = make_peer(i);
  }

  // Peers 1 and 2 are principals of an auth file with narrow permissions
  // (one of them admin), so the permission checks and lease ownership run;
  // peer 0 is anonymous (no auth file).
  static std::shared_ptr<const switchyard::auth::principal> make_principal(std::size_t i) {
    using switchyard::auth::operation;
    using switchyard::auth::permission_rule;
    auto p = std::make_shared<switchyard::auth::principal>();
    p->name = i == 1 ? "gw-a" : "ops";
    p->admin = i == 2;
    const auto rule = [&](operation op, std::vector<std::string> allow, std::vector<std::string> deny) {
      p->rules[static_cast<std::size_t>(op)] = permission_rule(std::move(allow), std::move(deny));
    };
    rule(operation::publish, {"a.>", "*.b"}, {"a.secret"});
    rule(operation::subscribe, {">"}, {"a.secret", "x.*.y"});
    rule(operation::send, {"u.*"}, {"u.vip"});
    rule(operation::registry_put, {"u.*"}, {});
    rule(operation::registry_get, {">"}, {"u.vip"});
    rule(operation::registry_delete, {"u.*"}, {});
    rule(operation::inbox, {"gw-a", "i.>"}, {});
    return p;
  }
  std::shared_ptr<recording_peer> make_peer(std::size_t i) {
    capability_set c;
    c.routing = i >= 1;
    c.admin = i >= 2;
    c.offers = i >= 1;
    auto p = std::make_shared<recording_peer>(next_id++, builder, c);
    if (i >= 1) p->set_principal(make_principal(i), static_cast<switchyard::broker::owner_id>(i));
    return p;
  }
  void replace(std::size_t i) {
    dispatch.disconnected(*peers[i]);
    peers[i] = make_peer(i);
  }
  void sweep() {
    advance(700ms);
    for (int i = 0; i < 100; ++i)
      if (!leases.sweep([this](lease_id id, lease_attachment* first) { routing.remove_lease(id, first); }).more_due)
        break;
  }
};

// Seeds: requests as the tests build them, each from the peer able to send
// it, in the order a gateway and a service would.
std::vector<switchyard::fuzz::seed> seeds() {
  protocol::frame_builder b;
  auto bytes = [](std::string_view s) {
    return std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(s.data()), s.size());
  };
  std::vector<switchyard::fuzz::seed> out;
  switchyard::fuzz::seed s;
  auto add = [&](std::uint8_t control, protocol::bytes_view f) {
    s.push_back(control);
    s.insert(s.end(), f.begin(), f.end());
  };
  const std::vector<std::string_view> keys{"user:1", "user:2"};
  // pub/sub
  add(0, b.subscribe(1, "orders.*"));
  add(1, b.subscribe(2, "orders.>"));
  add(2, b.publish(0, "orders.eu", bytes("hi")));
  add(0, b.unsubscribe(3, "orders.*"));
  add(1, b.publish(4, "orders.eu.x", bytes("again")));
  add(0, b.ping(5));
  out.push_back(std::move(s));
  s.clear();
  // a gateway (peer 1) and a service (peer 2); the lease id is not known
  // ahead, so the fuzzer has to find it (lease ids are deterministic here)
  add(1, b.lease_grant(1, 5000));
  add(1, b.inbox_open(2, "gw-1", 0));
  add(1, b.registry_put(3, "user:1", "gw-1", 0, 5000));
  add(2, b.send(4, keys, bytes("one")));
  add(2, b.registry_get(5, "user:1"));
  add(2, b.registry_list(6, "user", 10));
  add(1, b.lease_list(7, 10));
  add(1, b.lease_list(7, 10, 1));
  add(0x80 | 1, b.lease_keepalive(8, 1));
  add(1, b.lease_time_to_live(9, 1));
  add(2, b.registry_delete(10, "user:1"));
  add(1, b.inbox_close(11, "gw-1"));
  add(1, b.lease_revoke(12, 1));
  add(3 | (1 << 2), b.ping(13));
  out.push_back(std::move(s));
  s.clear();
  // refusals: capabilities, server-only types, a second hello, drain
  add(0, b.lease_grant(1, 5000));
  add(2, b.append(2, "orders", bytes("x")));
  add(2, b.stream_info(3, "orders"));
  add(2, b.stream_delete(3, "orders"));
  add(2, b.drain(4, 1000));
  protocol::hello_fields hello;
  hello.client_name = "again";
  add(1, b.hello(5, hello));
  add(0, b.error(6, protocol::errc::bad_request, "client notice"));
  add(0, b.pong(7));
  add(1, b.deliver("orders.eu", bytes("x")));
  out.push_back(std::move(s));
  s.clear();
  // offers: a gateway, an offer with receipts and a cap, ack, pending,
  // exposure, withdraw, flags
  add(1, b.lease_grant(1, 5000));
  add(1, b.inbox_open(2, "gw-a", 1));
  add(1, b.registry_put(3, "u.1", "gw-a", 1, 0));
  protocol::offer_fields o;
  o.offer_id = 7;
  o.expires_in_ms = 15000;
  o.receipt_timeout_ms = 2000;
  o.cap_max = 2;
  o.cap_window_ms = 60000;
  const std::string_view offer_keys[] = {"u.1", "u.2"};
  add(2, b.send(4, offer_keys, bytes("ride"), {}, &o));
  add(1, b.offer_ack(5, 7, "u.1"));
  add(1, b.pending_offers(6, "u.2", 0));
  add(2, b.exposure_query(7, offer_keys, 60000));
  add(2, b.withdraw(8, 7));
  add(2, b.flag_set(9, "offers", 10));
  add(2, b.flag_list(10));
  add(0, b.publish(11, "a.b", bytes("x"), {}, 500));
  out.push_back(std::move(s));
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  switchyard::fuzz::write_seeds_if_asked(seeds());
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  broker_state b;
  protocol::frame_parser parser(max_frame);
  protocol::bytes_view in(data, size);
  for (int i = 0; i < 512 && in.size() > 1; ++i) {
    const std::uint8_t control = in[0];
    in = in.subspan(1);
    auto r = parser.next(in);
    if (!r || !*r) break;
    const auto& frame = **r;
    in = in.subspan(frame.size);
    if (control & 0x80) b.sweep();
    std::size_t who = control & 3;
    if (who == 3) {
      who = (control >> 2) % peer_count;
      b.replace(who);
    }
    recording_peer& p = *b.peers[who];
    if (p.closed()) continue;  // a closed connection reads nothing more
    // The frame may sit in the parser's scratch copy; dispatch is done
    // with it before the next parse.
    b.dispatch.dispatch(p, *frame.frame);
    // Keep memory bounded: what the peers were sent is not checked.
    if (p.sent.size() > 64) p.sent.clear();
    if (p.delivered.size() > 64) p.delivered.clear();
  }
  for (std::size_t i = 0; i < peer_count; ++i) b.dispatch.disconnected(*b.peers[i]);
  // Every subscription and inbox went with its peer.
  if (b.channels.size() != 0) std::abort();
  return 0;
}
