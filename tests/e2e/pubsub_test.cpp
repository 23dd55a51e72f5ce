// End to end: pub/sub through a real broker on 127.0.0.1 with the client
// library.

#include "switchyard/client.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/test_server.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

using namespace switchyard;
using namespace std::chrono_literals;
using switchyard::test::connect_to;
using switchyard::test::test_server;
using switchyard::test::wait_until;

namespace {

// Collects messages delivered to one handler (loop thread writes, test reads).
struct inbox : test::collector<std::pair<std::string, std::string>> {
  message_handler handler() {
    return [this](const message& m) { add({std::string(m.channel), std::string(m.payload_text())}); };
  }
};

// Publishes messages of `bytes` bytes on `channel` from this thread until
// one fails, at most `limit`; returns that failure (none: every publish
// was taken).
std::error_code publish_until_refused(client& c, int limit, std::size_t bytes = 1024,
                                      std::string_view channel = "full.buffer") {
  const std::string payload(bytes, 'x');
  for (int i = 0; i < limit; ++i)
    if (auto ec = c.publish(channel, payload)) return ec;
  return {};
}

// A client to `server` with a 64 KiB send buffer and no reconnect.
std::unique_ptr<client> small_buffer_client(test_server& server, bool wait_for_space,
                                            std::chrono::milliseconds request_timeout) {
  client_options o;
  o.port = server.port();
  o.max_pending_bytes = 64 * 1024;
  o.request_timeout = request_timeout;
  o.wait_for_space = wait_for_space;
  // The held broker sends nothing: the connection must not be declared
  // dead meanwhile (publishes would then be held for a reconnect).
  o.heartbeat_interval = 60s;
  o.reconnect.enabled = false;
  auto c = client::connect(o);
  REQUIRE(c);
  return std::move(*c);
}

}  // namespace

TEST_CASE("a publish reaches subscribers on orders.*.created and orders.>", "[e2e][broker][client]") {
  test_server server;
  auto star = connect_to(server, "star");
  auto tail = connect_to(server, "tail");
  auto other = connect_to(server, "other");
  inbox a, b, c;
  REQUIRE(star->subscribe("orders.*.created", a.handler()));
  REQUIRE(tail->subscribe("orders.>", b.handler()));
  REQUIRE(other->subscribe("orders.*.deleted", c.handler()));

  auto pub = connect_to(server, "pub");
  REQUIRE_FALSE(pub->publish("orders.eu.created", "order 42"));
  REQUIRE_FALSE(pub->flush());

  REQUIRE(wait_until([&] { return a.count == 1 && b.count == 1; }));
  CHECK(a.got[0] == std::pair<std::string, std::string>{"orders.eu.created", "order 42"});
  CHECK(b.got[0] == std::pair<std::string, std::string>{"orders.eu.created", "order 42"});
  // A round trip on the non-matching subscriber proves nothing was queued for it.
  REQUIRE_FALSE(other->flush());
  CHECK(c.count == 0);
}

TEST_CASE("one delivery per connection reaches every matching local subscription", "[e2e][broker][client]") {
  test_server server;
  auto sub = connect_to(server);
  inbox a, b;
  REQUIRE(sub->subscribe("room.*", a.handler()));
  REQUIRE(sub->subscribe("room.>", b.handler()));
  auto pub = connect_to(server, "pub");
  REQUIRE_FALSE(pub->publish("room.7", "hi"));
  REQUIRE_FALSE(pub->flush());
  REQUIRE(wait_until([&] { return a.count == 1 && b.count == 1; }));
  REQUIRE_FALSE(sub->flush());
  server.stop();
  // Two handlers ran, but the broker encoded and queued the message once.
  CHECK(server.counters().delivered == 1);
  CHECK(a.count == 1);
  CHECK(b.count == 1);
}

TEST_CASE("unsubscribe stops delivery", "[e2e][broker][client]") {
  test_server server;
  auto sub = connect_to(server);
  auto pub = connect_to(server, "pub");
  inbox a;
  auto id = sub->subscribe("news.sport", a.handler());
  REQUIRE(id);
  REQUIRE_FALSE(pub->publish("news.sport", "one"));
  REQUIRE(wait_until([&] { return a.count == 1; }));

  REQUIRE_FALSE(sub->unsubscribe(*id));
  REQUIRE_FALSE(sub->flush());  // the broker has processed the unsubscribe
  REQUIRE_FALSE(pub->publish("news.sport", "two"));
  REQUIRE_FALSE(pub->flush());  // ... and the publish
  REQUIRE_FALSE(sub->flush());  // anything queued for sub came before this pong
  CHECK(a.count == 1);
  CHECK(sub->unsubscribe(*id) == errc::not_found);
}

TEST_CASE("per-publisher order is preserved over 100k messages", "[e2e][broker][client]") {
  test_server server;
  auto sub = connect_to(server);
  constexpr std::uint64_t n = 100'000;
  std::atomic<std::uint64_t> received{0};
  std::atomic<std::uint64_t> out_of_order{0};
  std::uint64_t expect = 0;  // loop thread only
  REQUIRE(sub->subscribe("seq.test", [&](const message& m) {
    std::uint64_t v = 0;
    std::memcpy(&v, m.payload.data(), sizeof v);
    if (v != expect) ++out_of_order;
    expect = v + 1;
    ++received;
  }));
  auto pub = connect_to(server, "pub");
  for (std::uint64_t i = 0; i < n; ++i) {
    std::byte payload[16]{};
    std::memcpy(payload, &i, sizeof i);
    REQUIRE_FALSE(pub->publish("seq.test", payload));
  }
  REQUIRE_FALSE(pub->flush());
  REQUIRE(wait_until([&] { return received == n; }, std::chrono::seconds(60)));
  CHECK(out_of_order == 0);
  CHECK(sub->dropped_total() == 0);
}

TEST_CASE("invalid channels and patterns are refused by the client library", "[e2e][client]") {
  test_server server;
  auto c = connect_to(server);
  CHECK(c->publish("orders.*", "x") == errc::invalid_channel);
  CHECK(c->publish("", "x") == errc::invalid_channel);
  CHECK(c->publish("a..b", "x") == errc::invalid_channel);
  auto r = c->subscribe("orders.>.x", [](const message&) {});
  REQUIRE_FALSE(r);
  CHECK(r.error() == errc::invalid_pattern);
}

TEST_CASE("publish_confirmed returns once the broker routed the message", "[e2e][broker][client]") {
  test_server server;
  auto sub = connect_to(server);
  inbox a;
  REQUIRE(sub->subscribe("confirm.me", a.handler()));
  auto p = publisher::connect({.port = server.port()});
  REQUIRE(p);
  REQUIRE_FALSE(p->publish("confirm.me", "sure"));
  // Routed means queued for the subscriber before the answer: a round trip
  // on the subscriber's connection must bring it.
  REQUIRE_FALSE(sub->flush());
  CHECK(a.count == 1);
  CHECK(p->publish("bad channel", "x") == errc::invalid_channel);
}

TEST_CASE("the welcome reports session, limits and granted capabilities", "[e2e][client]") {
  auto cfg = test_server::default_config();
  cfg.max_frame = 64 * 1024;
  test_server server(cfg);
  auto c = connect_to(server);
  CHECK(c->session_id() > 0);
  CHECK(c->server_max_frame() == 64 * 1024);
  auto caps = c->capabilities();
  std::sort(caps.begin(), caps.end());
  // No "log": this server has no data folder.
  CHECK(caps == std::vector<std::string>{"dropped-notice", "offers", "publish-ack", "routing"});
  // A payload that cannot fit the server's frame limit is refused locally.
  std::vector<std::byte> big(70 * 1024);
  CHECK(c->publish("big.one", big) == errc::payload_too_large);
  CHECK(c->connected());
}

TEST_CASE("connecting to a port with no server fails with a clear error", "[e2e][client]") {
  std::uint16_t port = 0;
  {
    test_server server;
    port = server.port();
  }
  client_options o;
  o.port = port;
  o.connect_timeout = std::chrono::seconds(3);
  auto c = client::connect(o);
  REQUIRE_FALSE(c);
  CHECK(c.error() == std::errc::connection_refused);
}

TEST_CASE("a delivery to an idle subscriber is written at once, one frame in one write", "[e2e][pubsub]") {
  test_server server;
  auto sub = connect_to(server.port());
  std::atomic<int> got{0};
  REQUIRE(sub->subscribe("idle.news", [&](const message&) { ++got; }));
  auto pub = connect_to(server.port());
  const auto before = server.live_metrics().counters;
  REQUIRE_FALSE(pub->publish("idle.news", "one"));  // no answer asked: the subscriber's write is the only one
  REQUIRE(wait_until([&] { return got == 1; }));
  const auto after = server.live_metrics().counters;
  CHECK(after.writes - before.writes == 1);
  CHECK(after.frames_written - before.frames_written == 1);
  CHECK(after.write_waits == before.write_waits);  // nothing waited: the loop was idle
}

TEST_CASE("many async subscribes made from the caller's thread all complete while their answers arrive", "[e2e]") {
  // The answers come back on the client's loop thread while the caller is
  // still issuing subscribes: each one's timeout watchdog must be armed
  // before its answer can cancel it (under ASan, the race corrupted the
  // io_context's timer queue).
  test::test_server server;
  auto c = test::connect_to(server, "subscriber");
  constexpr int patterns = 3000;
  std::atomic<int> answered{0}, failed{0};
  for (int i = 0; i < patterns; ++i)
    c->async_subscribe(
        "async.many." + std::to_string(i) + ".*", [](const message&) {},
        [&](std::expected<subscription_id, std::error_code> r) { ++(r ? answered : failed); });
  REQUIRE(test::wait_until([&] { return answered.load() + failed.load() == patterns; }, std::chrono::seconds(30)));
  CHECK(failed.load() == 0);
}

TEST_CASE("a publish into a full send buffer waits for room and then fails with timeout", "[e2e][client]") {
  test_server server;
  auto c = small_buffer_client(server, true, 300ms);
  std::error_code ec;
  {
    auto hold = server.hold_loop();           // the broker reads nothing
    ec = publish_until_refused(*c, 100'000);  // 100 MB: far more than the socket buffers take
  }
  CHECK(ec == errc::timeout);
  // The connection goes on (the broker first reads what waited).
  CHECK(wait_until([&] { return !c->flush(); }));
}

TEST_CASE("a publish into a full send buffer fails at once with buffer_full when the client must not wait",
          "[e2e][client]") {
  test_server server;
  // A publish that waited would fail only after a minute, by when the
  // hold (30 s at most) has let the broker read again.
  auto c = small_buffer_client(server, false, 60s);
  std::error_code ec;
  {
    auto hold = server.hold_loop();
    ec = publish_until_refused(*c, 100'000);
  }
  CHECK(ec == errc::buffer_full);
  CHECK(wait_until([&] { return !c->flush(); }));
}

TEST_CASE("an unsubscribe made while the send buffer is full reaches the broker", "[e2e][client]") {
  test_server server;
  auto c = small_buffer_client(server, true, 300ms);
  const auto sub = c->subscribe("full.unsub", [](const message&) {});
  REQUIRE(sub);
  REQUIRE(server.live_metrics().subscriptions == 1);
  {
    auto hold = server.hold_loop();
    // Full for good (a publish waited 300 ms for room in vain), then to
    // the last bytes: a publish smaller than the Unsubscribe waited too.
    REQUIRE(publish_until_refused(*c, 100'000) == errc::timeout);
    REQUIRE(publish_until_refused(*c, 100'000, 0, "f") == errc::timeout);
    CHECK_FALSE(c->unsubscribe(*sub));
  }
  // The same connection: everything it sent is read.
  REQUIRE(wait_until([&] { return !c->flush(); }));
  CHECK(server.live_metrics().connections == 1);
  CHECK(server.live_metrics().subscriptions == 0);
}
