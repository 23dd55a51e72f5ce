// End to end: where gap-free delivery starts. A durable subscription (or
// inbox) owes every message published to a matching stream after it was
// acknowledged, including the first ones of a stream it has never seen,
// even when the live path drops them; and a saved position must say which
// incarnation of its stream it belongs to.

#include "switchyard/client.hpp"
#include "switchyard/gateway.hpp"
#include "tests/support/byte_pattern.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/log_helpers.hpp"
#include "tests/support/raw_connection.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/test_server.hpp"
#include "tests/support/wait.hpp"
#include "protocol/frame_builder.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
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

using switchyard::test::bytes_of;

// A queue limit of about 30 deliveries of filler_bytes: a subscriber that
// stalls while filler_count of them are published (12 MB, more than the
// socket buffers hold) has its queue full, so every delivery after them is
// dropped until it reads again.
constexpr std::size_t filler_count = 3000;
constexpr std::size_t filler_bytes = 4096;
broker::server_config tiny_queue_config(const temp_dir& dir) {
  auto cfg = test::with_data(dir);
  cfg.durability = storage::durability::none;  // delivery is under test here, not fsync
  cfg.max_frame = 64 * 1024;
  cfg.max_pending_bytes = 128 * 1024;
  // A stalled client answers no pings: no heartbeat deadline (12.5 s by
  // default) while thousands of frames go by under ASan.
  cfg.heartbeat_interval = std::chrono::seconds(60);
  return cfg;
}

// Per stream: the sequences a durable handler got, in order, and whether
// each came from the log. The loop thread writes, the test thread reads.
struct per_stream {
  std::mutex mu;
  std::map<std::string, std::vector<std::uint64_t>> seqs;
  std::map<std::string, std::set<std::uint64_t>> replayed;
  std::atomic<std::size_t> total{0};
  void add(std::string_view stream, std::uint64_t seq, bool from_log) {
    std::lock_guard lock(mu);
    seqs[std::string(stream)].push_back(seq);
    if (from_log) replayed[std::string(stream)].insert(seq);
    ++total;
  }
  std::vector<std::uint64_t> of(const std::string& stream) {
    std::lock_guard lock(mu);
    return seqs[stream];
  }
  bool was_replayed(const std::string& stream, std::uint64_t seq) {
    std::lock_guard lock(mu);
    return replayed[stream].contains(seq);
  }
};

std::vector<std::uint64_t> range(std::uint64_t from, std::uint64_t to) {
  std::vector<std::uint64_t> v;
  for (auto q = from; q <= to; ++q) v.push_back(q);
  return v;
}

// Streams 0..5; each gets `burst` messages while the subscriber stalls and
// all but the last stream `after` more once it reads again (the last
// stream's messages are all lost live: nothing later reveals it).
constexpr int stream_count = 6;
constexpr std::uint64_t burst = 40;
constexpr std::uint64_t after = 2;
std::uint64_t expected_last(int stream) { return stream == stream_count - 1 ? burst : burst + after; }

}  // namespace

TEST_CASE(
    "a durable subscriber whose first deliveries of several streams were dropped gets every message "
    "published after its subscribe, in order",
    "[e2e][log][slow]") {
  temp_dir dir;
  test_server server(tiny_queue_config(dir));
  const std::string payload(filler_bytes, 'x');

  stall gate;
  std::atomic<bool> stalled{false};
  per_stream got;
  std::atomic<std::size_t> fillers{0};
  auto sub = connect_to(server, "slow-start");
  const auto id = sub->subscribe_durable("conv.>", [&](const message& m) {
    if (!stalled.exchange(true)) gate.wait();  // the very first message: stall
    if (m.stream.empty())
      ++fillers;
    else
      got.add(m.stream, m.seq, m.replayed);
  });
  REQUIRE(id);

  // Plain filler first: it fills the socket buffers and the broker's queue
  // for the stalled subscriber, so what follows is dropped.
  auto pub = connect_to(server, "pub");
  for (std::size_t i = 0; i < filler_count; ++i) REQUIRE_FALSE(pub->publish("conv.filler", payload));
  REQUIRE_FALSE(pub->flush());  // all routed (queued or dropped)
  // Then the durable streams, interleaved: none of their messages reaches
  // the subscriber live while it stalls.
  for (std::uint64_t i = 1; i <= burst; ++i)
    for (int s = 0; s < stream_count; ++s) {
      const auto n = std::to_string(s);
      auto ack = pub->publish_durable("conv." + n, "conv:" + n, bytes_of(payload));
      REQUIRE(ack);
      REQUIRE(ack->seq == i);
    }
  gate.release();
  // Live again: the first message of these streams that arrives is
  // burst + 1, long after their first ones.
  for (std::uint64_t i = 1; i <= after; ++i)
    for (int s = 0; s + 1 < stream_count; ++s) {
      const auto n = std::to_string(s);
      REQUIRE(pub->publish_durable("conv." + n, "conv:" + n, bytes_of("late")));
    }

  const std::size_t want = stream_count * burst + (stream_count - 1) * after;
  CHECK(wait_until([&] { return got.total >= want; }, std::chrono::seconds(20)));
  REQUIRE_FALSE(sub->flush());  // a moment for duplicates, if any, to show up
  for (int s = 0; s < stream_count; ++s) {
    const auto stream = "conv:" + std::to_string(s);
    INFO(stream);
    CHECK(got.of(stream) == range(1, expected_last(s)));
    // The scenario did what it says: the stream's first message came from
    // the log, not live.
    CHECK(got.was_replayed(stream, 1));
  }
  CHECK(got.total == want);
  CHECK(sub->dropped_total() > 0);
}

TEST_CASE(
    "a gateway whose first durable sends of several streams were dropped gets every send made after its "
    "inbox opened, in order",
    "[e2e][log][routing][slow]") {
  temp_dir dir;
  test_server server(tiny_queue_config(dir));
  const std::string payload(filler_bytes, 'x');

  stall gate;
  std::atomic<bool> stalled{false};
  per_stream got;
  auto conn = connect_to(server, "gw");
  auto gw = gateway::start(*conn, {.inbox_id = "gw-1",
                                   .on_message =
                                       [&](const inbox_message& m) {
                                         if (!stalled.exchange(true)) gate.wait();
                                         if (!m.stream.empty()) got.add(m.stream, m.seq, m.replayed);
                                       },
                                   .routes = {"user:alice"},
                                   .durable = durable_options{}});
  REQUIRE(gw);

  auto svc = connect_to(server, "service");
  for (std::size_t i = 0; i < filler_count; ++i) REQUIRE_FALSE(svc->send_nowait("user:alice", bytes_of(payload)));
  REQUIRE_FALSE(svc->flush());
  const std::string_view alice[] = {"user:alice"};
  for (std::uint64_t i = 1; i <= burst; ++i)
    for (int s = 0; s < stream_count; ++s) {
      auto r = svc->send_durable(alice, "conv:" + std::to_string(s), bytes_of(payload));
      REQUIRE(r);
      REQUIRE(r->seq == i);
    }
  gate.release();
  for (std::uint64_t i = 1; i <= after; ++i)
    for (int s = 0; s + 1 < stream_count; ++s)
      REQUIRE(svc->send_durable(alice, "conv:" + std::to_string(s), bytes_of("late")));

  const std::size_t want = stream_count * burst + (stream_count - 1) * after;
  CHECK(wait_until([&] { return got.total >= want; }, std::chrono::seconds(20)));
  REQUIRE_FALSE(conn->flush());
  for (int s = 0; s < stream_count; ++s) {
    const auto stream = "conv:" + std::to_string(s);
    INFO(stream);
    CHECK(got.of(stream) == range(1, expected_last(s)));
    CHECK(got.was_replayed(stream, 1));
  }
  CHECK(got.total == want);
}

TEST_CASE(
    "the broker reports the first dropped durable delivery of each stream and channel once, until a "
    "Subscribe or the Dropped notice",
    "[e2e][log][slow]") {
  temp_dir dir;
  test_server server(tiny_queue_config(dir));
  const std::string payload(filler_bytes, 'x');
  using protocol::wire::Message;

  test::raw_connection slow(server.port(), 64 * 1024);
  const std::array<std::string_view, 3> caps{"dropped-notice", "log", "stream-drops"};
  protocol::hello_fields h;
  h.protocol_major = 1;
  h.capabilities = caps;
  protocol::frame_builder b;
  slow.send(b.hello(1, h));
  test::raw_frame f;
  REQUIRE(slow.next_of(Message::Welcome, f) != nullptr);
  slow.send(b.subscribe(2, "c.>"));
  REQUIRE(slow.next_of(Message::Ok, f) != nullptr);

  auto pub = connect_to(server, "pub");
  collector<std::string> synced;
  REQUIRE(pub->subscribe("sync.>", [&](const message& m) { synced.add(std::string(m.channel)); }));
  const auto durable = [&](std::string_view channel, std::string_view stream) {
    REQUIRE(pub->publish_durable(channel, stream, bytes_of(payload)));
  };
  // Fills the slow connection's socket buffers and queue (it does not read).
  const auto fill = [&] {
    for (std::size_t i = 0; i < filler_count; ++i) REQUIRE_FALSE(pub->publish("c.filler", payload));
    REQUIRE_FALSE(pub->flush());
  };
  // The slow connection's frames are handled in order: once its publish to
  // `channel` reaches `pub`, everything it sent before was handled.
  const auto handled = [&](std::string_view channel) {
    slow.send(b.publish(0, channel, {}));
    REQUIRE(wait_until([&] {
      const auto all = synced.snapshot();
      return std::find(all.begin(), all.end(), channel) != all.end();
    }));
  };

  // What the slow connection receives until it has both the Pong it asks
  // for now (so everything above was handled) and a Dropped notice after
  // the last StreamDropped (the notice that counts the last drops, and
  // clears what was told): the StreamDropped frames as
  // "stream:seq:channel", and the Ok of a second Subscribe as "ok".
  // Notices also come while the socket buffers fill. Durable deliveries
  // must all have been dropped.
  std::uint64_t ping_id = 100;
  const auto read_episode = [&](std::vector<std::string>& out) {
    slow.send(b.ping(++ping_id));
    bool durable_delivered = false, pong = false, notice = false;
    for (int guard = 0; guard < 100'000 && !(pong && notice); ++guard) {
      const auto* frame = slow.next(f, std::chrono::seconds(10));
      INFO("pong " << pong << ", notice " << notice << ", told " << out.size() << ", frames " << guard);
      REQUIRE(frame != nullptr);
      const auto type = frame->message_type();
      if (type == Message::Pong && frame->request_id() == ping_id) pong = true;
      if (type == Message::Dropped) notice = true;
      if (type == Message::Ok) out.push_back("ok");
      if (type == Message::Deliver && frame->message_as_Deliver()->stream()) durable_delivered = true;
      if (type == Message::StreamDropped) {
        notice = false;
        const auto* d = frame->message_as_StreamDropped();
        out.push_back(d->stream()->str() + ":" + std::to_string(d->seq()) + ":" + d->channel()->str());
        CHECK(d->epoch() != 0);
        CHECK(d->inbox_id() == nullptr);
      }
    }
    CHECK(pong);
    CHECK(notice);
    CHECK_FALSE(durable_delivered);
  };

  fill();
  durable("c.a", "s");               // s:1, the first drop of (s, c.a): told
  durable("c.a", "s");               // s:2: not again
  durable("c.b", "s");               // s:3, the first drop of (s, c.b): told
  durable("c.a", "t");               // t:1: told
  slow.send(b.subscribe(3, "c.>"));  // the same pattern again: a new subscription starts here
  handled("sync.1");
  durable("c.a", "s");  // s:4: told again, for the new subscription
  durable("c.a", "s");  // s:5: not again
  std::vector<std::string> told;
  read_episode(told);
  CHECK(told == std::vector<std::string>{"s:1:c.a", "s:3:c.b", "t:1:c.a", "ok", "s:4:c.a"});

  // The Dropped notice ends the episode: the next drop of (s, c.a) is told.
  fill();
  durable("c.a", "s");  // s:6
  durable("c.a", "s");  // s:7
  told.clear();
  read_episode(told);
  CHECK(told == std::vector<std::string>{"s:6:c.a"});
}

TEST_CASE("saved positions with a sequence but no epoch are refused, so a recreated stream cannot go unreported",
          "[e2e][log]") {
  // The stream "feed" is recreated: the same name on a broker whose log
  // started again (a new epoch), holding 5 records of the new incarnation.
  temp_dir dir;
  test_server server(test::with_data(dir));
  auto pub = connect_to(server, "pub");
  for (int i = 1; i <= 5; ++i) REQUIRE(pub->publish_durable("feed.x", "feed", bytes_of("new")));

  // What a subscriber of the old incarnation saved, without its epoch.
  const stream_positions saved{{"feed", {3, 0}}};
  collector<std::uint64_t> got;
  collector<unrecoverable_position> lost;
  durable_options o;
  o.resume_from = saved;
  o.on_unrecoverable = [&](const unrecoverable_position& u) {
    lost.add(u);
    return resume_at::first_available;
  };
  auto sub = connect_to(server, "sub");
  const auto id = sub->subscribe_durable(
      "feed.>", [&](const message& m) { got.add(m.seq); }, o);
  REQUIRE_FALSE(id);
  CHECK(id.error() == errc::invalid_position);

  // The same for a durable inbox (and the gateway helper, which opens one).
  auto lease = sub->lease_grant(std::chrono::seconds(30));
  REQUIRE(lease);
  CHECK(sub->open_inbox_durable(
            "gw-1", lease->id, [](const inbox_message&) {}, o) == errc::invalid_position);
  auto gw = gateway::start(*sub, {.inbox_id = "gw-2",
                                  .on_message = [](const inbox_message&) {},
                                  .durable = durable_options{.resume_from = saved}});
  REQUIRE_FALSE(gw);
  CHECK(gw.error() == errc::invalid_position);

  // Nothing of the new incarnation was passed off as the old one's 4 and 5.
  REQUIRE_FALSE(sub->flush());
  CHECK(got.count == 0);
  CHECK(lost.count == 0);
}

TEST_CASE("a saved position of a stream recreated since is reported as epoch_changed", "[e2e][log]") {
  std::uint64_t old_epoch = 0;
  {
    temp_dir old_dir;
    test_server old_server(test::with_data(old_dir));
    auto pub = connect_to(old_server, "pub");
    for (int i = 1; i <= 3; ++i) {
      auto ack = pub->publish_durable("feed.x", "feed", bytes_of("old"));
      REQUIRE(ack);
      old_epoch = ack->epoch;
    }
  }
  temp_dir dir;
  test_server server(test::with_data(dir));
  auto pub = connect_to(server, "pub");
  std::uint64_t new_epoch = 0;
  for (int i = 1; i <= 5; ++i) {
    auto ack = pub->publish_durable("feed.x", "feed", bytes_of("new"));
    REQUIRE(ack);
    new_epoch = ack->epoch;
  }
  REQUIRE(new_epoch != old_epoch);

  collector<std::uint64_t> got;
  collector<unrecoverable_position> lost;
  durable_options o;
  o.resume_from = {{"feed", {3, old_epoch}}};
  o.on_unrecoverable = [&](const unrecoverable_position& u) {
    lost.add(u);
    return resume_at::first_available;
  };
  auto sub = connect_to(server, "sub");
  REQUIRE(sub->subscribe_durable(
      "feed.>", [&](const message& m) { got.add(m.seq); }, o));
  REQUIRE(wait_until([&] { return got.count == 5; }));
  REQUIRE(lost.count == 1);
  const auto u = lost.snapshot().front();
  CHECK(u.reason == position_lost::epoch_changed);
  CHECK(u.last_delivered.seq == 3);
  CHECK(u.last_delivered.epoch == old_epoch);
  CHECK(u.epoch == new_epoch);
  CHECK(got.snapshot() == range(1, 5));
}

TEST_CASE(
    "a connection that reads nothing while durable deliveries of over 10,000 streams are dropped is closed as "
    "a slow consumer",
    "[e2e][log][slow]") {
  temp_dir dir;
  test_server server(tiny_queue_config(dir));
  const std::string payload(filler_bytes, 'x');
  using protocol::wire::Message;
  test::raw_connection slow(server.port(), 64 * 1024);
  const std::array<std::string_view, 3> caps{"dropped-notice", "log", "stream-drops"};
  slow.send_hello(caps);
  test::raw_frame f;
  REQUIRE(slow.next_of(Message::Welcome, f) != nullptr);
  protocol::frame_builder b;
  slow.send(b.subscribe(2, "c.>"));
  REQUIRE(slow.next_of(Message::Ok, f) != nullptr);
  auto pub = connect_to(server, "pub");
  for (std::size_t i = 0; i < filler_count; ++i) REQUIRE_FALSE(pub->publish("c.filler", payload));
  REQUIRE_FALSE(pub->flush());
  // Each durable publish to a new stream is dropped for `slow` and would
  // need a report of its own; pipelined with no answers (request id 0).
  test::raw_connection raw_pub(server.port());
  const std::array<std::string_view, 1> log_cap{"log"};
  raw_pub.send_hello(log_cap);
  REQUIRE(raw_pub.next_of(Message::Welcome, f) != nullptr);
  const std::uint8_t one = 'd';
  for (int half = 0; half < 2; ++half) {
    std::vector<std::uint8_t> frames;
    for (int i = half * 5'025; i < (half + 1) * 5'025; ++i) {
      const auto p = b.publish(0, "c.durable", {&one, 1}, "s." + std::to_string(i));
      frames.insert(frames.end(), p.begin(), p.end());
    }
    const auto ping = b.ping(77);
    frames.insert(frames.end(), ping.begin(), ping.end());
    raw_pub.send(frames);
    const auto* pong = raw_pub.next_of(Message::Pong, f, std::chrono::seconds(30));
    REQUIRE(pong != nullptr);
    // Subscribing again (the same pattern) does not reset the count.
    if (half == 0) slow.send(b.subscribe(3, "c.>"));
  }
  bool closed = false;
  for (int guard = 0; guard < 200'000 && !closed; ++guard) {
    const auto* frame = slow.next(f, std::chrono::seconds(10));
    REQUIRE(frame != nullptr);
    if (frame->message_type() == Message::Error) {
      CHECK(static_cast<int>(frame->message_as_Error()->code()) == static_cast<int>(protocol::errc::slow_consumer));
      CHECK(frame->message_as_Error()->fatal());
      closed = true;
    }
  }
  CHECK(closed);
  CHECK(pub->connected());
}
