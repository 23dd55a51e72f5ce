// End to end: bad input closes only the offending connection, with the
// right error, and never disturbs other clients.

#include "protocol/errc.hpp"
#include "protocol/limits.hpp"
#include "switchyard/client.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/fake_service.hpp"
#include "tests/support/raw_connection.hpp"
#include "tests/support/test_server.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <array>
#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace switchyard;
using perrc = protocol::errc;
using protocol::wire::Message;
using namespace switchyard::test;

namespace {

// Reads the next frame and checks it is a fatal Error with `code`, then
// that the server closes the connection.
void expect_fatal_error(raw_connection& c, perrc code) {
  raw_frame f;
  const auto* frame = c.next_of(Message::Error, f);
  REQUIRE(frame != nullptr);
  const auto* e = frame->message_as_Error();
  CHECK(static_cast<int>(e->code()) == static_cast<int>(code));
  CHECK(e->fatal());
  CHECK(e->message() != nullptr);
  CHECK(c.closed_by_peer());
}

void expect_welcome(raw_connection& c) {
  raw_frame f;
  const auto* frame = c.next(f);
  REQUIRE(frame != nullptr);
  REQUIRE(frame->message_type() == Message::Welcome);
}

// A bystander that must keep working while others misbehave.
struct bystander {
  std::unique_ptr<client> sub, pub;
  std::atomic<int> got{0};
  explicit bystander(const test_server& s) {
    sub = connect_to(s, "bystander-sub");
    pub = connect_to(s, "bystander-pub");
    REQUIRE(sub->subscribe("still.alive", [this](const message&) { ++got; }));
  }
  void check_round_trip() {
    const int before = got;
    REQUIRE_FALSE(pub->publish("still.alive", "yes"));
    REQUIRE(wait_until([&] { return got == before + 1; }));
    CHECK(sub->connected());
    CHECK(pub->connected());
  }
};

}  // namespace

TEST_CASE("an oversized frame closes only that connection with frame_too_large", "[e2e][broker]") {
  auto cfg = test_server::default_config();
  cfg.max_frame = 64 * 1024;
  test_server server(cfg);
  bystander ok(server);
  raw_connection bad(server.port());
  bad.send_hello();
  expect_welcome(bad);
  // Only the header: the server must refuse before the body arrives.
  const std::uint32_t length = 64 * 1024 + 1;
  const std::array<std::uint8_t, 4> header{static_cast<std::uint8_t>(length), static_cast<std::uint8_t>(length >> 8),
                                           static_cast<std::uint8_t>(length >> 16),
                                           static_cast<std::uint8_t>(length >> 24)};
  bad.send(header);
  expect_fatal_error(bad, perrc::frame_too_large);
  ok.check_round_trip();
}

TEST_CASE("a frame of exactly max_frame bytes is accepted", "[e2e][broker]") {
  auto cfg = test_server::default_config();
  // Our frames are padded to 8 bytes with a 4-byte prefix, so bodies are
  // 4 mod 8: pick a limit one of them can hit exactly.
  cfg.max_frame = 64 * 1024 + 4;
  test_server server(cfg);
  raw_connection c(server.port());
  c.send_hello();
  expect_welcome(c);
  protocol::frame_builder b;
  std::vector<std::uint8_t> payload(60 * 1024);
  while (b.publish(7, "big.frame", payload).size() - 4 < cfg.max_frame) payload.push_back(0);
  const auto frame = b.publish(7, "big.frame", payload);
  REQUIRE(frame.size() - 4 == cfg.max_frame);
  c.send(frame);
  raw_frame f;
  const auto* answer = c.next(f);
  REQUIRE(answer != nullptr);
  CHECK(answer->message_type() == Message::Ok);
  CHECK(answer->request_id() == 7);
}

TEST_CASE("garbage bytes close the connection with malformed_frame", "[e2e][broker]") {
  test_server server;
  bystander ok(server);
  raw_connection bad(server.port());
  bad.send_hello();
  expect_welcome(bad);
  std::mt19937 rng(42);
  std::array<std::uint8_t, 68> junk{};
  for (auto& x : junk) x = static_cast<std::uint8_t>(rng());
  junk[0] = 64;  // a plausible length prefix: the body is random
  junk[1] = junk[2] = junk[3] = 0;
  bad.send(junk);
  expect_fatal_error(bad, perrc::malformed_frame);
  ok.check_round_trip();
}

TEST_CASE("garbage before the hello is refused too", "[e2e][broker]") {
  test_server server;
  raw_connection bad(server.port());
  const std::string text = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  bad.send({reinterpret_cast<const std::uint8_t*>(text.data()), text.size()});
  // "GET " read as a length is ~542 million: over the pre-hello cap.
  expect_fatal_error(bad, perrc::frame_too_large);
}

TEST_CASE("a first frame that is not a hello gets hello_required", "[e2e][broker]") {
  test_server server;
  bystander ok(server);
  raw_connection bad(server.port());
  protocol::frame_builder b;
  bad.send(b.subscribe(1, "x.y"));
  expect_fatal_error(bad, perrc::hello_required);
  ok.check_round_trip();
}

TEST_CASE("a frame above the pre-hello cap is refused before the hello", "[e2e][broker]") {
  test_server server;
  raw_connection bad(server.port());
  protocol::frame_builder b;
  std::vector<std::uint8_t> payload(protocol::pre_hello_max_frame + 1);
  bad.send(b.publish(1, "a.b", payload));
  expect_fatal_error(bad, perrc::frame_too_large);
}

TEST_CASE("a frame above the pre-hello cap right behind the hello, in the same write, is accepted", "[e2e][broker]") {
  // The hello raises the frame limit; the frame after it must be parsed
  // with the raised limit even when both arrive in one read.
  test_server server;
  raw_connection c(server.port());
  protocol::frame_builder b;
  protocol::hello_fields h;
  h.protocol_major = protocol::protocol_major;
  h.client_name = "eager";
  static constexpr std::array<std::string_view, 1> caps{protocol::capability::publish_ack};
  h.capabilities = caps;
  const auto hello = b.hello(1, h);
  std::vector<std::uint8_t> bytes(hello.begin(), hello.end());
  std::vector<std::uint8_t> payload(protocol::pre_hello_max_frame + 1024);
  const auto big = b.publish(2, "a.b", payload);
  bytes.insert(bytes.end(), big.begin(), big.end());
  c.send(bytes);
  expect_welcome(c);
  raw_frame f;
  const auto* answer = c.next(f);
  REQUIRE(answer != nullptr);
  CHECK(answer->message_type() == Message::Ok);
  CHECK(answer->request_id() == 2);
}

TEST_CASE("no hello within the hello timeout closes the connection", "[e2e][broker]") {
  auto cfg = test_server::default_config();
  cfg.hello_timeout = std::chrono::milliseconds(100);
  test_server server(cfg);
  raw_connection silent(server.port());
  expect_fatal_error(silent, perrc::hello_timeout);
}

TEST_CASE("an unsupported protocol major is refused with unsupported_version", "[e2e][broker]") {
  test_server server;
  raw_connection c(server.port());
  c.send_hello(2);
  expect_fatal_error(c, perrc::unsupported_version);
}

TEST_CASE("an unknown message type closes the connection with unsupported_message", "[e2e][broker]") {
  test_server server;
  bystander ok(server);
  raw_connection bad(server.port());
  bad.send_hello();
  expect_welcome(bad);
  protocol::frame_builder b;
  auto& fbb = b.start();
  const auto body = protocol::wire::CreateOk(fbb).Union();
  bad.send(b.finish(9, 200, body));
  expect_fatal_error(bad, perrc::unsupported_message);
  ok.check_round_trip();
}

TEST_CASE("a server-to-client message sent by a client is refused", "[e2e][broker]") {
  test_server server;
  raw_connection bad(server.port());
  bad.send_hello();
  expect_welcome(bad);
  protocol::frame_builder b;
  bad.send(b.deliver("a.b", {}));
  expect_fatal_error(bad, perrc::unsupported_message);
}

TEST_CASE("capabilities granted are those asked for that the server supports", "[e2e][broker]") {
  test_server server;
  raw_connection c(server.port());
  const std::array<std::string_view, 3> asked{"future-thing", "dropped-notice", "dropped-notice"};
  protocol::hello_fields h;
  h.protocol_major = 1;
  h.capabilities = asked;
  protocol::frame_builder b;
  c.send(b.hello(3, h));
  raw_frame f;
  const auto* frame = c.next(f);
  REQUIRE(frame != nullptr);
  REQUIRE(frame->message_type() == Message::Welcome);
  CHECK(frame->request_id() == 3);
  const auto* caps = frame->message_as_Welcome()->capabilities();
  REQUIRE(caps != nullptr);
  REQUIRE(caps->size() == 1);
  CHECK(caps->Get(0)->string_view() == "dropped-notice");
}

TEST_CASE("invalid names get a non-fatal bad_request answer", "[e2e][broker]") {
  test_server server;
  raw_connection c(server.port());
  c.send_hello();
  expect_welcome(c);
  protocol::frame_builder b;
  c.send(b.subscribe(5, "a.>.b"));
  raw_frame f;
  const auto* e = c.next_of(Message::Error, f);
  REQUIRE(e != nullptr);
  CHECK(e->request_id() == 5);
  CHECK(static_cast<int>(e->message_as_Error()->code()) == static_cast<int>(perrc::bad_request));
  CHECK_FALSE(e->message_as_Error()->fatal());
  c.send(b.publish(6, "wild.*", {}));
  e = c.next_of(Message::Error, f);
  REQUIRE(e != nullptr);
  CHECK(e->request_id() == 6);
  // Still open: a ping is answered.
  c.send(b.ping(8));
  const auto* pong = c.next_of(Message::Pong, f);
  REQUIRE(pong != nullptr);
  CHECK(pong->request_id() == 8);
}

TEST_CASE("connections over the cap get too_many_connections", "[e2e][broker]") {
  auto cfg = test_server::default_config();
  cfg.max_connections = 2;
  cfg.admin_slots = 0;  // refused at accept, before any read (lifecycle_test.cpp has the admin slots)
  test_server server(cfg);
  raw_connection a(server.port()), b(server.port());
  a.send_hello();
  b.send_hello();
  expect_welcome(a);
  expect_welcome(b);
  raw_connection c(server.port());
  expect_fatal_error(c, perrc::too_many_connections);
}

namespace {

// `count` publishes to still.alive, back to back in one byte string. With
// `odd`, each frame carries 4 bytes of slack inside its length, so every
// other frame starts off the 8-byte alignment the parser reads in place:
// those are verified in the parser's scratch copy instead.
std::vector<std::uint8_t> publishes(int count, bool odd) {
  protocol::frame_builder b;
  std::vector<std::uint8_t> out;
  for (int i = 0; i < count; ++i) {
    const std::string payload = std::to_string(i);
    const auto f = b.publish(0, "still.alive", {reinterpret_cast<const std::uint8_t*>(payload.data()), payload.size()});
    const std::size_t at = out.size();
    out.insert(out.end(), f.begin(), f.end());
    if (odd) {
      out.insert(out.end(), 4, 0);
      const std::uint32_t length = protocol::read_frame_length(out.data() + at) + 4;
      for (int k = 0; k < 4; ++k) out[at + static_cast<std::size_t>(k)] = static_cast<std::uint8_t>(length >> (8 * k));
    }
  }
  return out;
}

// A subscriber to still.alive that keeps the payloads it gets, in order.
struct still_alive_log : collector<std::string> {
  std::unique_ptr<client> sub;
  explicit still_alive_log(const test_server& server) : sub(connect_to(server, "sub")) {
    REQUIRE(sub->subscribe("still.alive", [this](const message& m) {
      add(std::string(reinterpret_cast<const char*>(m.payload.data()), m.payload.size()));
    }));
  }
  // Waits for `n` payloads and checks they are "0", "1", ... in order.
  void expect_in_order(std::size_t n) {
    REQUIRE(wait_until([&] { return count == n; }));
    const auto all = snapshot();
    for (std::size_t i = 0; i < n; ++i) CHECK(all[i] == std::to_string(i));
  }
};

}  // namespace

TEST_CASE("frames before a malformed one in the same read are handled, in order, then it closes", "[e2e][broker]") {
  test_server server;
  still_alive_log got(server);
  raw_connection bad(server.port());
  bad.send_hello();
  expect_welcome(bad);
  // More frames than the broker verifies ahead in one batch (32), then junk.
  auto bytes = publishes(75, false);
  const std::array<std::uint8_t, 16> junk{12, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  bytes.insert(bytes.end(), junk.begin(), junk.end());
  bad.send(bytes);
  expect_fatal_error(bad, perrc::malformed_frame);
  got.expect_in_order(75);
}

TEST_CASE("misaligned frames (lengths not a multiple of 8) are all handled, in order", "[e2e][broker]") {
  test_server server;
  still_alive_log got(server);
  raw_connection odd(server.port());
  odd.send_hello();
  expect_welcome(odd);
  odd.send(publishes(100, true));
  got.expect_in_order(100);
  // The connection is still in good standing.
  protocol::frame_builder b;
  odd.send(b.ping(9));
  raw_frame f;
  const auto* pong = odd.next_of(Message::Pong, f);
  REQUIRE(pong != nullptr);
  CHECK(pong->request_id() == 9);
}

TEST_CASE("a rejected connection saying goodbye does not count against the cap", "[e2e][broker]") {
  auto cfg = test_server::default_config();
  cfg.max_connections = 1;
  cfg.shutdown_grace = std::chrono::seconds(10);
  test_server server(cfg);
  auto first = connect_to(server, "first");
  // Over the cap: rejected, and it neither reads nor closes.
  raw_connection lingering(server.port());
  lingering.send_hello();
  REQUIRE(wait_until([&] { return server.live_metrics().counters.connections_rejected == 1; }));
  first.reset();
  REQUIRE(wait_until([&] {
    const auto m = server.live_metrics();
    return m.connections == m.connections_rejecting;  // only the rejected one is left
  }));
  // The one place is free again, although the rejected one is still open.
  auto second = connect_to(server, "second");
  CHECK_FALSE(second->flush());
  CHECK(second->connected());
}

TEST_CASE("a client pointed at a service that is not a broker fails with not_a_broker, not frame_too_large",
          "[e2e][client]") {
  // An HTTP server's answer read as a frame: "HTTP" as a length is far
  // above any max frame; a short binary answer is no SWY1 frame either.
  for (const std::string& reply : {std::string("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"),
                                   std::string("\x10\0\0\0garbage-garbage-", 20)}) {
    test::fake_service other(reply);
    client_options o;
    o.port = other.port();
    o.reconnect.enabled = false;
    o.connect_timeout = std::chrono::seconds(5);
    auto c = client::connect(o);
    REQUIRE_FALSE(c);
    CHECK(c.error() == make_error_code(errc::not_a_broker));
    CHECK(error_name(errc::not_a_broker) == "not_a_broker");
  }
}
