// End to end: the flush idiom. A Ping is answered only after every request
// before it on the same connection has been answered, including the ones
// that wait for the sequence log (appends, durable publishes and sends,
// retention changes): docs/protocol.md §2 and §6.

#include "protocol/frame_builder.hpp"
#include "protocol/limits.hpp"
#include "tests/support/raw_connection.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/test_server.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

using namespace switchyard;
using protocol::wire::Message;
using test::raw_connection;
using test::raw_frame;
using test::temp_dir;

namespace {

constexpr std::array<std::string_view, 2> caps{protocol::capability::log, protocol::capability::routing};

broker::server_config with_log(const temp_dir& dir) {
  auto c = test::test_server::default_config();
  c.data_dir = dir.path().string();
  return c;
}

// The request ids of the next `n` answers (server heartbeats skipped), in
// the order they arrived, with their types.
std::vector<std::pair<std::uint64_t, Message>> answers(raw_connection& c, std::size_t n) {
  std::vector<std::pair<std::uint64_t, Message>> out;
  raw_frame f;
  for (int guard = 0; out.size() < n && guard < 1000; ++guard) {
    const auto* frame = c.next(f);
    REQUIRE(frame != nullptr);
    if (frame->message_type() == Message::Ping && frame->request_id() == 0) continue;
    out.emplace_back(frame->request_id(), frame->message_type());
  }
  return out;
}

// Connects with "log" and "routing", sends `requests` and then two Pings
// (ids 902, 903) in one write, and checks that the answers to the requests
// come first, then the Pongs, in order.
void check_flush(const test::test_server& server, const std::vector<std::vector<std::uint8_t>>& requests,
                 Message answer) {
  raw_connection c(server.port());
  c.send_hello(caps);
  raw_frame f;
  REQUIRE(c.next_of(Message::Welcome, f) != nullptr);
  protocol::frame_builder b;
  std::vector<std::uint8_t> bytes;
  for (const auto& r : requests) bytes.insert(bytes.end(), r.begin(), r.end());
  for (const std::uint64_t id : {902u, 903u}) {
    const auto ping = b.ping(id);
    bytes.insert(bytes.end(), ping.begin(), ping.end());
  }
  c.send(bytes);
  const auto got = answers(c, requests.size() + 2);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    INFO("answer " << i);
    CHECK(got[i].first == 901 + i * 1000);
    CHECK(got[i].second == answer);
  }
  CHECK(got[requests.size()] == std::pair{std::uint64_t{902}, Message::Pong});
  CHECK(got[requests.size() + 1] == std::pair{std::uint64_t{903}, Message::Pong});
}

std::vector<std::uint8_t> copy(protocol::bytes_view v) { return {v.begin(), v.end()}; }

const protocol::bytes_view payload{reinterpret_cast<const std::uint8_t*>("hello"), 5};

}  // namespace

TEST_CASE("a Ping after appends is answered after every Appended", "[e2e][broker][log]") {
  temp_dir dir;
  test::test_server server(with_log(dir));
  protocol::frame_builder b;
  std::vector<std::vector<std::uint8_t>> requests;
  for (std::uint64_t i = 0; i < 5; ++i) requests.push_back(copy(b.append(901 + i * 1000, "orders", payload)));
  check_flush(server, requests, Message::Appended);
}

TEST_CASE("a Ping after a SetRetention is answered after its StreamInfoResult", "[e2e][broker][log]") {
  temp_dir dir;
  test::test_server server(with_log(dir));
  protocol::frame_builder b;
  check_flush(server, {copy(b.set_retention(901, "orders", {.max_records = 10}))}, Message::StreamInfoResult);
}

TEST_CASE("a Ping after a publish with a stream is answered after its Appended", "[e2e][broker][log]") {
  temp_dir dir;
  test::test_server server(with_log(dir));
  protocol::frame_builder b;
  check_flush(
      server,
      {copy(b.publish(901, "orders.new", payload, "orders")), copy(b.publish(1901, "orders.new", payload, "orders"))},
      Message::Appended);
}

TEST_CASE("a Ping after a send with a stream is answered after its SendResult", "[e2e][broker][log]") {
  temp_dir dir;
  test::test_server server(with_log(dir));
  protocol::frame_builder b;
  const std::array<std::string_view, 1> keys{"user:nobody"};
  check_flush(server, {copy(b.send(901, keys, payload, "sends"))}, Message::SendResult);
}

TEST_CASE("a Ping with nothing waiting for the log is answered at once, before later appends", "[e2e][broker][log]") {
  temp_dir dir;
  test::test_server server(with_log(dir));
  raw_connection c(server.port());
  c.send_hello(caps);
  raw_frame f;
  REQUIRE(c.next_of(Message::Welcome, f) != nullptr);
  protocol::frame_builder b;
  auto bytes = copy(b.ping(7));
  const auto append = b.append(8, "orders", payload);
  bytes.insert(bytes.end(), append.begin(), append.end());
  c.send(bytes);
  const auto got = answers(c, 2);
  CHECK(got[0] == std::pair{std::uint64_t{7}, Message::Pong});
  CHECK(got[1] == std::pair{std::uint64_t{8}, Message::Appended});
}

TEST_CASE("nothing follows the fatal error, not even the answer to an append before the bad frame",
          "[e2e][broker][log]") {
  temp_dir dir;
  auto cfg = with_log(dir);
  cfg.durability = storage::durability::none;  // committed on the loop, right behind the bad frame's handling
  test::test_server server(cfg);
  raw_connection c(server.port());
  c.send_hello(caps);
  raw_frame f;
  REQUIRE(c.next_of(Message::Welcome, f) != nullptr);
  protocol::frame_builder b;
  auto bytes = copy(b.append(5, "orders", payload));
  // A frame whose identifier is wrong: malformed, fatal.
  std::vector<std::uint8_t> bad(24, 0);
  bad[0] = 20;
  bytes.insert(bytes.end(), bad.begin(), bad.end());
  c.send(bytes);
  std::vector<Message> seen;
  for (int i = 0; i < 10; ++i) {
    const auto* frame = c.next(f, std::chrono::seconds(3));
    if (!frame) break;
    seen.push_back(frame->message_type());
  }
  REQUIRE_FALSE(seen.empty());
  CHECK(seen.back() == Message::Error);
  CHECK(std::count(seen.begin(), seen.end(), Message::Error) == 1);
}
