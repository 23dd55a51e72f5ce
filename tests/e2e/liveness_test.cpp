// End to end: heartbeats in both directions and clean shutdown.

#include "protocol/errc.hpp"
#include "protocol/frame_builder.hpp"
#include "protocol/limits.hpp"
#include "switchyard/client.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/raw_connection.hpp"
#include "tests/support/test_server.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <utility>

using namespace switchyard;
using protocol::wire::Message;
using namespace switchyard::test;

namespace {

// A socket listening on 127.0.0.1 at a free port, and that port.
std::pair<int, std::uint16_t> loopback_listener(int backlog) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(listener >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(listener, backlog) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  return {listener, ntohs(addr.sin_port)};
}

}  // namespace

TEST_CASE("a silent connection is closed by the heartbeat deadline", "[e2e][broker]") {
  auto cfg = test_server::default_config();
  cfg.heartbeat_interval = std::chrono::milliseconds(40);
  test_server server(cfg);
  raw_connection silent(server.port());
  silent.send_hello();
  // The server pings; we never answer or send anything.
  raw_frame f;
  const auto* ping = silent.next_of(Message::Ping, f);
  REQUIRE(ping != nullptr);
  const auto* e = silent.next_of(Message::Error, f);
  REQUIRE(e != nullptr);
  CHECK(static_cast<int>(e->message_as_Error()->code()) == static_cast<int>(protocol::errc::heartbeat_timeout));
  CHECK(silent.closed_by_peer());
}

TEST_CASE("a client that heartbeats stays connected past several deadlines", "[e2e][broker][client]") {
  auto cfg = test_server::default_config();
  // Deadline 2.5 intervals (625 ms): a pause of either loop thread shorter
  // than ~300 ms (a busy CI machine under ASan) must not close the
  // connection, so the interval is not shorter.
  cfg.heartbeat_interval = std::chrono::milliseconds(250);
  test_server server(cfg);
  disconnect_probe probe;
  auto c = client::connect({.port = server.port(), .on_disconnect = probe.callback()});
  REQUIRE(c);
  // Three deadlines' worth of idle time: only heartbeats flow.
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));
  CHECK_FALSE(probe.fired);
  CHECK((*c)->connected());
  CHECK_FALSE((*c)->flush());
}

TEST_CASE("the client library declares a silent server dead", "[e2e][client]") {
  // A fake server: answers the hello with a welcome asking for 30 ms
  // heartbeats, then never sends another byte.
  const auto [listener, port] = loopback_listener(1);

  std::atomic<bool> done{false};
  std::thread fake([&] {
    const int fd = ::accept(listener, nullptr, nullptr);
    if (fd < 0) return;
    std::uint8_t buf[4096];
    (void)::recv(fd, buf, sizeof buf, 0);  // the hello
    protocol::frame_builder b;
    protocol::welcome_fields w;
    w.protocol_major = 1;
    w.session_id = 99;
    w.heartbeat_ms = 30;
    w.max_frame = protocol::default_max_frame;
    const auto welcome = b.welcome(0, w);
    (void)::send(fd, welcome.data(), welcome.size(), MSG_NOSIGNAL);
    // Swallow the client's pings, answer nothing, for at most 10 s.
    for (int i = 0; i < 1000 && !done; ++i) {
      (void)::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::close(fd);
  });

  disconnect_probe probe;
  // Without reconnect: the lost connection is the end of this client.
  auto c = client::connect({.port = port, .on_disconnect = probe.callback(), .reconnect = {.enabled = false}});
  REQUIRE(c);
  CHECK((*c)->session_id() == 99);
  CHECK(wait_until([&] { return probe.fired.load(); }, std::chrono::seconds(5)));
  CHECK(probe.get() == errc::heartbeat_timeout);
  CHECK_FALSE((*c)->connected());
  CHECK((*c)->publish("a.b", "x") == errc::not_connected);
  done = true;
  fake.join();
  ::close(listener);
}

TEST_CASE("stopping the server tells clients it is shutting down", "[e2e][broker][client]") {
  test_server server;
  disconnect_probe probe;
  auto c = client::connect({.port = server.port(), .on_disconnect = probe.callback()});
  REQUIRE(c);
  server.stop();
  REQUIRE(wait_until([&] { return probe.fired.load(); }));
  CHECK(probe.get() == errc::shutting_down);
}

TEST_CASE("connect gives up after connect_timeout when the server never answers the hello", "[e2e][client]") {
  // A listening socket nobody accepts from: the TCP handshake completes in
  // the kernel's backlog, but no welcome ever comes.
  const auto [listener, port] = loopback_listener(4);

  auto c = client::connect({.port = port, .connect_timeout = std::chrono::milliseconds(100)});
  REQUIRE_FALSE(c);
  CHECK(c.error() == errc::timeout);
  ::close(listener);
}

TEST_CASE("async_connect hands over a working client on the loop thread", "[e2e][client]") {
  test_server server;
  auto loop = std::make_shared<event_loop>();
  std::mutex mu;
  std::unique_ptr<client> conn;
  std::error_code error;
  std::atomic<bool> done{false};
  client::async_connect({.port = server.port()}, loop, [&](std::expected<std::unique_ptr<client>, std::error_code> r) {
    std::lock_guard lock(mu);
    if (r)
      conn = std::move(*r);
    else
      error = r.error();
    done = true;
  });
  REQUIRE(wait_until([&] { return done.load(); }));
  std::lock_guard lock(mu);
  REQUIRE_FALSE(error);
  REQUIRE(conn);
  CHECK(conn->connected());
  CHECK_FALSE(conn->flush());
}
