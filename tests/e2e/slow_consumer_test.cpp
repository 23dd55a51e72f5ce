// End to end: a slow consumer loses messages (counted and reported) while
// other subscribers lose nothing and the publisher is never blocked.

#include "protocol/errc.hpp"
#include "switchyard/client.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/raw_connection.hpp"
#include "tests/support/test_server.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

using namespace switchyard;
using protocol::wire::Message;
using namespace switchyard::test;

namespace {

constexpr std::uint64_t message_count = 20'000;
constexpr std::size_t payload_size = 1024;  // 20 MB in all: more than any socket buffers

broker::server_config small_queue_config() {
  auto cfg = test_server::default_config();
  cfg.max_frame = 64 * 1024;
  cfg.max_pending_bytes = 256 * 1024;
  // Raw subscribers here never answer pings: no heartbeat deadline (12.5 s
  // by default) during a long run under ASan.
  cfg.heartbeat_interval = std::chrono::seconds(60);
  return cfg;
}

// --slow-consumer=disconnect with a queue of `pending` bytes and a close
// watchdog of `grace`.
broker::server_config disconnect_config(std::size_t pending, std::chrono::milliseconds grace) {
  auto cfg = test_server::default_config();
  cfg.max_frame = 64 * 1024;
  cfg.max_pending_bytes = pending;
  cfg.slow_consumer = broker::slow_consumer_policy::disconnect;
  cfg.shutdown_grace = grace;
  cfg.heartbeat_interval = std::chrono::seconds(60);  // as small_queue_config
  return cfg;
}

// Counts in-order sequence numbers from the first 8 payload bytes.
struct counting_sub {
  std::atomic<std::uint64_t> received{0};
  std::atomic<std::uint64_t> out_of_order{0};
  std::uint64_t last = 0;  // loop thread
  void on(const message& m) {
    std::uint64_t v = 0;
    std::memcpy(&v, m.payload.data(), sizeof v);
    if (received > 0 && v <= last) ++out_of_order;
    last = v;
    ++received;
  }
};

// Says hello on a raw connection and subscribes it to `pattern` (request 2).
void raw_subscribe(raw_connection& c, std::string_view pattern) {
  c.send_hello();
  protocol::frame_builder b;
  c.send(b.subscribe(2, pattern));
  raw_frame f;
  REQUIRE(c.next_of(Message::Ok, f) != nullptr);
}

// Publishes message_count messages. With `fast` given, publishing pauses
// every 64 messages until that subscriber has caught up, so it never lags
// by more than 64 KiB (well under the queue limit) and must lose nothing,
// while the non-reading subscriber falls ever further behind.
void publish_all(client& pub, const counting_sub* fast = nullptr) {
  std::vector<std::byte> payload(payload_size);
  for (std::uint64_t i = 0; i < message_count; ++i) {
    std::memcpy(payload.data(), &i, sizeof i);
    REQUIRE_FALSE(pub.publish("feed.prices", payload));
    if (fast && (i + 1) % 64 == 0) {
      REQUIRE_FALSE(pub.flush());
      REQUIRE(wait_until([&] { return fast->received >= i + 1; }));
    }
  }
  REQUIRE_FALSE(pub.flush());
}

}  // namespace

TEST_CASE("a subscriber that never reads gets drops counted and a notice while a fast one loses nothing",
          "[e2e][broker][slow]") {
  test_server server(small_queue_config());
  raw_connection slow(server.port(), 64 * 1024);
  raw_subscribe(slow, "feed.>");

  auto fast = connect_to(server, "fast");
  counting_sub fast_sub;
  REQUIRE(fast->subscribe("feed.prices", [&](const message& m) { fast_sub.on(m); }));

  auto pub = connect_to(server, "pub");
  publish_all(*pub, &fast_sub);  // completes: the slow subscriber does not block it

  REQUIRE(wait_until([&] { return fast_sub.received == message_count; }, std::chrono::seconds(30)));
  CHECK(fast_sub.out_of_order == 0);
  CHECK(fast->dropped_total() == 0);

  // Now drain the slow one: every message is either delivered or counted in
  // a Dropped notice, and the notice arrives.
  std::uint64_t delivered = 0, dropped = 0, notices = 0;
  raw_frame f;
  for (int guard = 0; guard < 1'000'000 && delivered + dropped < message_count; ++guard) {
    const auto* frame = slow.next(f, std::chrono::seconds(10));
    INFO("delivered " << delivered << ", dropped " << dropped << ", notices " << notices);
    REQUIRE(frame != nullptr);
    if (frame->message_type() == Message::Deliver) ++delivered;
    if (frame->message_type() == Message::Dropped) {
      dropped += frame->message_as_Dropped()->count();
      ++notices;
    }
  }
  CHECK(delivered + dropped == message_count);
  CHECK(dropped > 0);
  CHECK(notices >= 1);
  server.stop();
  CHECK(server.counters().dropped == dropped);
}

TEST_CASE("the client library reports drops to on_dropped", "[e2e][client][slow]") {
  test_server server(small_queue_config());
  std::atomic<std::uint64_t> reported{0};
  auto slow = client::connect(
      {.port = server.port(), .client_name = "slow", .on_dropped = [&](std::uint64_t n) { reported += n; }});
  REQUIRE(slow);
  // The handler blocks the slow client's loop until publishing is over, so
  // its socket is not read and the broker's queue for it overflows.
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<std::uint64_t> received{0};
  REQUIRE((*slow)->subscribe("feed.prices", [&](const message&) {
    if (received++ == 0) {
      std::unique_lock lock(mu);
      cv.wait_for(lock, std::chrono::seconds(30), [&] { return release; });
    }
  }));
  auto pub = connect_to(server, "pub");
  publish_all(*pub);
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  REQUIRE(wait_until([&] { return received + reported == message_count; }, std::chrono::seconds(30)));
  CHECK(reported > 0);
  CHECK((*slow)->dropped_total() == reported);
  CHECK((*slow)->connected());
}

TEST_CASE("with slow-consumer=disconnect the slow subscriber is closed with slow_consumer", "[e2e][broker][slow]") {
  auto cfg = small_queue_config();
  cfg.slow_consumer = broker::slow_consumer_policy::disconnect;
  cfg.shutdown_grace = std::chrono::seconds(30);  // time for us to read up to the goodbye
  test_server server(cfg);
  raw_connection slow(server.port(), 64 * 1024);
  raw_subscribe(slow, "feed.prices");

  auto fast = connect_to(server, "fast");
  counting_sub fast_sub;
  REQUIRE(fast->subscribe("feed.prices", [&](const message& m) { fast_sub.on(m); }));
  auto pub = connect_to(server, "pub");
  publish_all(*pub, &fast_sub);
  REQUIRE(wait_until([&] { return fast_sub.received == message_count; }, std::chrono::seconds(30)));
  CHECK(fast->connected());

  // The slow one finds, after whatever deliveries fit, a fatal slow_consumer error.
  raw_frame f;
  const auto* e = slow.next_of(Message::Error, f, std::chrono::seconds(20));
  REQUIRE(e != nullptr);
  CHECK(static_cast<int>(e->message_as_Error()->code()) == static_cast<int>(protocol::errc::slow_consumer));
  CHECK(slow.closed_by_peer());
}

TEST_CASE("with slow-consumer=disconnect a subscriber that reads slowly finds the slow_consumer error, not a reset",
          "[e2e][broker][slow]") {
  // 16 MiB queued: far more than the reader gets through before the close
  // watchdog (8 s: the rest of the publishing, under ASan on a busy
  // machine, must not use it up before the reader starts).
  test_server server(disconnect_config(16u << 20, std::chrono::seconds(8)));
  raw_connection slow(server.port(), 64 * 1024);
  raw_subscribe(slow, "feed.prices");
  auto pub = connect_to(server, "pub");
  // 30 MB: the queue passes its 16 MiB while the subscriber reads nothing.
  std::vector<std::byte> payload(payload_size);
  for (std::uint64_t i = 0; i < 30'000; ++i) {
    std::memcpy(payload.data(), &i, sizeof i);
    REQUIRE_FALSE(pub->publish("feed.prices", payload));
  }
  REQUIRE_FALSE(pub->flush());
  // Then it reads, at most 1.3 MB/s: the error must come within the close
  // watchdog's 8 s, so it cannot wait behind the 16 MiB backlog (13 s).
  raw_frame f;
  std::size_t deliveries = 0;
  const protocol::wire::Frame* frame = nullptr;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 100'000; ++i) {
    frame = slow.next(f, std::chrono::seconds(5));
    if (!frame || frame->message_type() == Message::Error) break;
    if (frame->message_type() == Message::Deliver && ++deliveries % 64 == 0)
      std::this_thread::sleep_until(start + std::chrono::milliseconds(50) * (deliveries / 64));
  }
  INFO(deliveries << " deliveries read first");
  REQUIRE(frame != nullptr);
  REQUIRE(frame->message_type() == Message::Error);
  CHECK(static_cast<int>(frame->message_as_Error()->code()) == static_cast<int>(protocol::errc::slow_consumer));
  CHECK(frame->message_as_Error()->fatal());
  CHECK(slow.closed_by_peer());
}

TEST_CASE("a slow consumer that half-closes while a write is stuck still gets its slow_consumer error",
          "[e2e][broker][slow]") {
  test_server server(disconnect_config(1u << 20, std::chrono::seconds(5)));
  raw_connection slow(server.port(), 64 * 1024);
  raw_subscribe(slow, "feed.prices");
  auto pub = connect_to(server, "pub");
  std::vector<std::byte> payload(payload_size);
  for (std::uint64_t i = 0; i < 10'000; ++i) {
    std::memcpy(payload.data(), &i, sizeof i);
    REQUIRE_FALSE(pub->publish("feed.prices", payload));
  }
  REQUIRE_FALSE(pub->flush());
  // The broker has decided to close it, with a write stuck in flight; the
  // peer now says it sends nothing more, then reads everything.
  slow.shutdown_write();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  raw_frame f;
  const auto* e = slow.next_of(Message::Error, f, std::chrono::seconds(10));
  REQUIRE(e != nullptr);
  CHECK(static_cast<int>(e->message_as_Error()->code()) == static_cast<int>(protocol::errc::slow_consumer));
  CHECK(slow.closed_by_peer());
}

TEST_CASE("deliveries a subscriber's socket takes only in part at the end of a read reach it whole and in order",
          "[e2e][broker][slow]") {
  // The broker writes what a read queued at the end of that read, without
  // blocking (connection::write_now); a subscriber with a small receive
  // buffer that reads nothing for a while makes such a write partial, and
  // the writer must send the rest from where it stopped.
  auto cfg = test_server::default_config();
  cfg.max_frame = 64 * 1024;
  cfg.max_pending_bytes = 64 << 20;
  cfg.heartbeat_interval = std::chrono::seconds(60);  // the raw subscriber answers no pings
  test_server server(cfg);
  raw_connection sub(server.port(), 16 * 1024);
  raw_subscribe(sub, "feed.big");
  auto pub = connect_to(server, "publisher");
  constexpr std::uint64_t count = 200;
  constexpr std::size_t size = 40'000;  // 8 MB: far more than the subscriber's socket holds
  std::vector<std::byte> payload(size);
  for (std::uint64_t i = 0; i < count; ++i) {
    std::memcpy(payload.data(), &i, sizeof i);
    std::memset(payload.data() + sizeof i, static_cast<int>('a' + i % 26), size - sizeof i);
    REQUIRE_FALSE(pub->publish("feed.big", payload));
    REQUIRE_FALSE(pub->flush());  // one publish per read: each is written at the end of its read
  }
  for (std::uint64_t i = 0; i < count; ++i) {
    raw_frame storage;
    const auto* f = sub.next_of(Message::Deliver, storage);
    REQUIRE(f != nullptr);
    const auto* data = f->message_as_Deliver()->payload();
    REQUIRE(data->size() == size);
    std::uint64_t seq = 0;
    std::memcpy(&seq, data->data(), sizeof seq);
    REQUIRE(seq == i);
    REQUIRE(std::all_of(data->begin() + sizeof seq, data->end(),
                        [i](std::uint8_t b) { return b == static_cast<std::uint8_t>('a' + i % 26); }));
  }
}
