// End to end: gap-free delivery of durable streams. The live path drops
// (slow consumer) or is cut (reconnect); the client library reads what was
// missed from the log, so the application sees every sequence once, in
// order, or is told explicitly that the position is lost.

#include "switchyard/client.hpp"
#include "switchyard/gateway.hpp"
#include "tests/support/byte_pattern.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/log_helpers.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/test_server.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

using namespace switchyard;
using test::collector;
using test::connect_to;
using test::stall;
using test::temp_dir;
using test::test_server;
using test::wait_until;

namespace {

broker::server_config log_config(const temp_dir& dir) {
  auto cfg = test::with_data(dir);
  cfg.durability = storage::durability::none;  // delivery is under test here, not fsync
  return cfg;
}

using switchyard::test::bytes_of;

// What a durable handler saw: sequence numbers in arrival order, and how
// many of them came from the log.
struct seen {
  collector<std::uint64_t> seqs;
  std::atomic<std::uint64_t> replayed{0};
  void on(std::uint64_t seq, bool from_log) {
    if (from_log) ++replayed;
    seqs.add(seq);
  }
};

// The slow-consumer tests: a queue limit of a few dozen deliveries, and
// slow_count payloads of slow_payload_bytes (12 MB in all: more than the
// socket buffers hold), so a stalled client loses deliveries.
constexpr std::uint64_t slow_count = 3000;
constexpr std::size_t slow_payload_bytes = 4096;
broker::server_config slow_consumer_config(const temp_dir& dir) {
  auto cfg = log_config(dir);
  cfg.max_frame = 64 * 1024;
  cfg.max_pending_bytes = 128 * 1024;
  // A stalled client answers no pings: no heartbeat deadline (12.5 s by
  // default) while thousands of frames go by under ASan.
  cfg.heartbeat_interval = std::chrono::seconds(60);
  return cfg;
}

std::vector<std::uint64_t> range(std::uint64_t from, std::uint64_t to) {
  std::vector<std::uint64_t> v;
  for (auto q = from; q <= to; ++q) v.push_back(q);
  return v;
}

}  // namespace

TEST_CASE("a slow durable subscriber whose messages were dropped receives every one, once, in order",
          "[e2e][log][slow]") {
  temp_dir dir;
  test_server server(slow_consumer_config(dir));
  const std::string payload(slow_payload_bytes, 'x');

  // The handler stalls on the first message until everything is
  // published, so the broker's queue for this subscriber overflows.
  stall gate;
  seen got;
  auto sub = connect_to(server, "slow");
  const auto id = sub->subscribe_durable("conv.42", [&](const message& m) {
    if (m.seq == 1) gate.wait();
    got.on(m.seq, m.replayed);
  });
  REQUIRE(id);

  auto pub = connect_to(server, "pub");
  for (std::uint64_t i = 1; i <= slow_count; ++i) {
    auto ack = pub->publish_durable("conv.42", "conv:42", bytes_of(payload));
    REQUIRE(ack);
    REQUIRE(ack->seq == i);
  }
  gate.release();

  REQUIRE(wait_until([&] { return got.seqs.count >= slow_count; }, std::chrono::seconds(60)));
  // A moment for duplicates, if any, to show up.
  REQUIRE_FALSE(pub->flush());
  REQUIRE_FALSE(sub->flush());
  CHECK(got.seqs.snapshot() == range(1, slow_count));
  CHECK(sub->dropped_total() > 0);
  CHECK(got.replayed > 0);
  CHECK(sub->recovered_total() == got.replayed);
  CHECK(sub->stream_positions_of(*id).at("conv:42").seq == slow_count);
}

TEST_CASE("a durable subscriber that reconnects resumes from its positions with no gap and no duplicate",
          "[e2e][log]") {
  temp_dir dir;
  test_server server(log_config(dir));
  auto pub = connect_to(server, "pub");

  seen got;
  auto handler = [&](const message& m) { got.on(m.seq, m.replayed); };
  stream_positions saved;
  {
    auto sub = connect_to(server, "sub-1");
    auto id = sub->subscribe_durable("room.*", handler);
    REQUIRE(id);
    for (int i = 1; i <= 5; ++i) REQUIRE(pub->publish_durable("room.a", "room:a", bytes_of("m")));
    REQUIRE(wait_until([&] { return got.seqs.count == 5; }));
    sub->close();  // the network cut
    saved = sub->stream_positions_of(*id);
  }
  REQUIRE(saved.at("room:a").seq == 5);
  for (int i = 6; i <= 9; ++i) REQUIRE(pub->publish_durable("room.a", "room:a", bytes_of("m")));

  auto sub = connect_to(server, "sub-2");
  REQUIRE(sub->subscribe_durable("room.*", handler, {.resume_from = saved}));
  REQUIRE(wait_until([&] { return got.seqs.count == 9; }));
  REQUIRE(pub->publish_durable("room.a", "room:a", bytes_of("live")));
  REQUIRE(wait_until([&] { return got.seqs.count == 10; }));
  REQUIRE_FALSE(sub->flush());
  CHECK(got.seqs.snapshot() == range(1, 10));
  CHECK(got.replayed == 4);  // 6..9 from the log, 10 live
}

TEST_CASE("records of a shared stream for channels the subscription does not match are not replayed to it",
          "[e2e][log]") {
  temp_dir dir;
  test_server server(log_config(dir));
  auto pub = connect_to(server, "pub");
  collector<std::string> got;
  stream_positions saved;
  {
    auto sub = connect_to(server, "sub-1");
    auto id = sub->subscribe_durable("news.sport", [&](const message& m) { got.add(std::string(m.payload_text())); });
    REQUIRE(id);
    REQUIRE(pub->publish_durable("news.sport", "news", bytes_of("s1")));
    REQUIRE(wait_until([&] { return got.count == 1; }));
    sub->close();
    saved = sub->stream_positions_of(*id);
  }
  REQUIRE(pub->publish_durable("news.weather", "news", bytes_of("w1")));
  REQUIRE(pub->publish_durable("news.sport", "news", bytes_of("s2")));
  REQUIRE(pub->append("news", bytes_of("plain append")));
  auto sub = connect_to(server, "sub-2");
  const auto id = sub->subscribe_durable(
      "news.sport", [&](const message& m) { got.add(std::string(m.payload_text())); }, {.resume_from = saved});
  REQUIRE(id);
  REQUIRE(wait_until([&] { return sub->stream_positions_of(*id).at("news").seq == 4; }));
  CHECK(got.snapshot() == std::vector<std::string>{"s1", "s2"});
}

TEST_CASE("a position whose records were trimmed is reported as unrecoverable, never skipped silently", "[e2e][log]") {
  temp_dir dir;
  auto cfg = log_config(dir);
  cfg.retention_max_records = 5;
  test_server server(cfg);
  auto pub = connect_to(server, "pub");
  std::uint64_t epoch = 0;
  for (int i = 1; i <= 20; ++i) {
    auto ack = pub->publish_durable("feed.x", "feed", bytes_of("m"));
    REQUIRE(ack);
    epoch = ack->epoch;
  }
  // Background retention keeps the last 5.
  REQUIRE(wait_until([&] {
    auto r = pub->read("feed", 1);
    return !r && r.error() == errc::trimmed;
  }));

  collector<unrecoverable_position> lost;
  seen got;
  auto sub = connect_to(server, "sub");
  durable_options o;
  o.resume_from = {{"feed", {2, epoch}}};
  o.on_unrecoverable = [&](const unrecoverable_position& u) {
    lost.add(u);
    return resume_at::first_available;
  };
  REQUIRE(sub->subscribe_durable(
      "feed.>", [&](const message& m) { got.on(m.seq, m.replayed); }, o));
  REQUIRE(wait_until([&] { return got.seqs.count == 5; }));
  REQUIRE(lost.count == 1);
  const auto u = lost.snapshot().front();
  CHECK(u.reason == position_lost::trimmed);
  CHECK(u.last_delivered.seq == 2);
  CHECK(u.first_available == 16);
  CHECK(u.epoch == epoch);
  CHECK(got.seqs.snapshot() == range(16, 20));
}

TEST_CASE("a durable inbox reopened on a new connection receives the sends it missed with their route keys",
          "[e2e][log][routing]") {
  temp_dir dir;
  test_server server(log_config(dir));
  auto svc = connect_to(server, "service");
  collector<std::string> got;  // "seq:key1,key2:payload"
  auto handler = [&](const inbox_message& m) {
    std::string keys;
    for (auto k : m.route_keys) keys += std::string(k) + ",";
    got.add(std::to_string(m.seq) + ":" + keys + ":" + std::string(m.payload_text()) + (m.replayed ? ":log" : ""));
  };
  const std::string_view to_alice[] = {"user:alice"};
  const std::string_view to_both[] = {"user:alice", "user:bob"};

  auto gw = connect_to(server, "gw");
  auto lease = gw->lease_grant(std::chrono::seconds(30));
  REQUIRE(lease);
  REQUIRE_FALSE(gw->open_inbox_durable("gw-1", lease->id, handler));
  REQUIRE(gw->registry_put("user:alice", "gw-1", lease->id));
  REQUIRE(svc->send_durable(to_alice, "conv:7", bytes_of("hello")));
  REQUIRE(wait_until([&] { return got.count == 1; }));
  const auto saved = gw->inbox_stream_positions("gw-1");
  gw->close();  // the lease, the inbox and the route outlive the connection

  REQUIRE(svc->send_durable(to_both, "conv:7", bytes_of("missed")));
  auto gw2 = connect_to(server, "gw-again");
  REQUIRE_FALSE(gw2->open_inbox_durable("gw-1", lease->id, handler, {.resume_from = saved}));
  REQUIRE(wait_until([&] { return got.count == 2; }));
  REQUIRE(svc->send_durable(to_alice, "conv:7", bytes_of("live")));
  REQUIRE(wait_until([&] { return got.count == 3; }));
  REQUIRE_FALSE(gw2->flush());
  CHECK(got.snapshot() ==
        std::vector<std::string>{"1:user:alice,:hello", "2:user:alice,user:bob,:missed:log", "3:user:alice,:live"});
}

TEST_CASE("a gateway restarted with its saved positions gets the durable sends it missed, for its users only",
          "[e2e][log][routing]") {
  temp_dir dir;
  test_server server(log_config(dir));
  auto svc = connect_to(server, "service");
  collector<std::string> got;  // "seq:keys[:log]"
  auto on_message = [&](const inbox_message& m) {
    std::string keys;
    for (auto k : m.route_keys) keys += std::string(k) + ",";
    got.add(std::to_string(m.seq) + ":" + keys + (m.replayed ? ":log" : ""));
  };
  const std::string_view room[] = {"user:alice", "user:carol"};  // carol is on another gateway, or nowhere

  auto conn = connect_to(server, "gw");
  auto gw = gateway::start(
      *conn, {.inbox_id = "gw-9", .on_message = on_message, .routes = {"user:alice"}, .durable = durable_options{}});
  REQUIRE(gw);
  REQUIRE(svc->send_durable(room, "conv:9", bytes_of("a")));
  REQUIRE(wait_until([&] { return got.count == 1; }));
  const auto positions = (*gw)->positions();
  const auto lease = (*gw)->lease();
  (*gw)->abandon();
  gw->reset();
  conn->close();

  REQUIRE(svc->send_durable(room, "conv:9", bytes_of("b")));  // routed to gw-9, which has no connection
  // A record for nobody this gateway holds: read back on resume, not delivered.
  const std::string_view carol_only[] = {"user:carol"};
  REQUIRE(svc->send_durable(carol_only, "conv:9", bytes_of("for carol")));
  auto conn2 = connect_to(server, "gw-again");
  auto gw2 = gateway::start(*conn2, {.inbox_id = "gw-9",
                                     .on_message = on_message,
                                     .resume_lease = lease,
                                     .routes = {"user:alice"},
                                     .durable = durable_options{.resume_from = positions}});
  REQUIRE(gw2);
  CHECK((*gw2)->lease() == lease);
  REQUIRE(wait_until([&] { return got.count == 2; }));
  REQUIRE(svc->send_durable(room, "conv:9", bytes_of("c")));
  REQUIRE(wait_until([&] { return got.count == 3; }));
  CHECK(got.snapshot() == std::vector<std::string>{"1:user:alice,", "2:user:alice,:log", "4:user:alice,"});
}

TEST_CASE("a slow gateway whose inbox deliveries were dropped receives every durable send, once, in order",
          "[e2e][log][routing][slow]") {
  temp_dir dir;
  test_server server(slow_consumer_config(dir));
  const std::string payload(slow_payload_bytes, 'x');
  stall gate;
  seen got;
  auto conn = connect_to(server, "gw");
  auto gw = gateway::start(*conn, {.inbox_id = "gw-1",
                                   .on_message =
                                       [&](const inbox_message& m) {
                                         if (m.seq == 1) gate.wait();
                                         if (m.route_keys.size() == 1 && m.route_keys[0] == "user:alice")
                                           got.on(m.seq, m.replayed);
                                       },
                                   .routes = {"user:alice"},
                                   .durable = durable_options{}});
  REQUIRE(gw);

  // The service: conversation conv:42, every message to alice, durable.
  auto svc = connect_to(server, "service");
  const std::string_view alice[] = {"user:alice"};
  for (std::uint64_t i = 1; i <= slow_count; ++i) {
    auto r = svc->send_durable(alice, "conv:42", bytes_of(payload));
    REQUIRE(r);
    REQUIRE(r->seq == i);
  }
  gate.release();
  REQUIRE(wait_until([&] { return got.seqs.count >= slow_count; }, std::chrono::seconds(60)));
  REQUIRE_FALSE(conn->flush());
  CHECK(got.seqs.snapshot() == range(1, slow_count));
  CHECK(conn->dropped_total() > 0);
  CHECK(got.replayed > 0);
}

TEST_CASE("a durable inbox reopened after some sends expired receives the others and resumes live",
          "[e2e][log][routing][offers]") {
  temp_dir dir;
  std::atomic<std::uint64_t> now_ms{1'700'000'000'000};
  auto cfg = log_config(dir);
  cfg.log_wall_clock_ms = [&] { return now_ms.load(); };
  test_server server(cfg);
  auto svc = connect_to(server, "dispatcher");
  collector<std::string> got;  // "seq:payload[:log]"
  auto handler = [&](const inbox_message& m) {
    got.add(std::to_string(m.seq) + ":" + std::string(m.payload_text()) + (m.replayed ? ":log" : ""));
  };
  const std::string_view to_alice[] = {"user:alice"};

  auto gw = connect_to(server, "gw");
  auto lease = gw->lease_grant(std::chrono::seconds(30));
  REQUIRE(lease);
  REQUIRE_FALSE(gw->open_inbox_durable("gw-1", lease->id, handler));
  REQUIRE(gw->registry_put("user:alice", "gw-1", lease->id));
  REQUIRE(svc->send_durable(to_alice, "offers:7", bytes_of("kept"), std::chrono::seconds(60)));
  REQUIRE(wait_until([&] { return got.count == 1; }));
  const auto saved = gw->inbox_stream_positions("gw-1");
  gw->close();

  // While the gateway is away: 2 and 4 expire, 3 has no expiry.
  REQUIRE(svc->send_durable(to_alice, "offers:7", bytes_of("short"), std::chrono::seconds(1)));
  REQUIRE(svc->send_durable(to_alice, "offers:7", bytes_of("plain")));
  REQUIRE(svc->send_durable(to_alice, "offers:7", bytes_of("short too"), std::chrono::seconds(1)));
  now_ms += 2'000;

  auto gw2 = connect_to(server, "gw-again");
  std::atomic<int> unrecoverable{0};
  REQUIRE_FALSE(gw2->open_inbox_durable("gw-1", lease->id, handler,
                                        {.resume_from = saved, .on_unrecoverable = [&](const unrecoverable_position&) {
                                           ++unrecoverable;
                                           return resume_at::first_available;
                                         }}));
  REQUIRE(wait_until([&] { return got.count == 2; }));
  // Past the expired tail: the next send arrives live, not read again.
  REQUIRE(svc->send_durable(to_alice, "offers:7", bytes_of("live"), std::chrono::seconds(60)));
  REQUIRE(wait_until([&] { return got.count == 3; }));
  REQUIRE_FALSE(gw2->flush());
  CHECK(got.snapshot() == std::vector<std::string>{"1:kept", "3:plain:log", "5:live"});
  CHECK(gw2->inbox_stream_positions("gw-1").at("offers:7").seq == 5);
  // Nothing was reported lost: the expired ones are gone by the sender's wish.
  CHECK(unrecoverable == 0);
  server.stop();
  CHECK(server.counters().expired_read >= 2);
}
