// End to end: the client obeys the reconnect hints a broker sends before it
// closes a connection: retry_after_ms as a floor, and a `draining` window
// that sends it to another broker.
//
// The broker here is a tiny fake acceptor (POSIX sockets) that answers the
// hello with a welcome and then, on the first connection, sends a fatal
// Error with retry_after_ms and closes. That is all it does: the real
// server's drain (and its hints) is built in parallel on another branch;
// everything else about reconnecting is tested against the real broker in
// reconnect_test.cpp.

#include "switchyard/client.hpp"
#include "protocol/errc.hpp"
#include "protocol/frame_builder.hpp"
#include "protocol/limits.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace switchyard;
using namespace std::chrono_literals;
using switchyard::test::wait_until;
using steady = std::chrono::steady_clock;

namespace {

// The goodbye the fakes send, once, to the first connection any of them
// gets (shared by the fakes of one test).
struct goodbye_plan {
  protocol::errc code = protocol::errc::shutting_down;
  std::uint32_t retry_after_ms = 0;
  std::atomic<bool> sent{false};
  std::atomic<steady::rep> sent_at{0};  // when the goodbye went out (steady ticks)
};

// Listens on 127.0.0.1 (a free port); for each connection: reads the
// hello, sends a welcome, then either the plan's goodbye (fatal Error,
// close) or keeps the connection open, silent, until destroyed. Records
// when each connection arrived.
class fake_broker {
 public:
  explicit fake_broker(goodbye_plan& plan) : plan_(plan) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd_, 16) == 0);
    socklen_t len = sizeof a;
    REQUIRE(::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  ~fake_broker() {
    stop_ = true;
    thread_.join();
    for (int c : open_) ::close(c);
    ::close(fd_);
  }

  std::uint16_t port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  std::vector<steady::time_point> arrivals() {
    std::lock_guard lock(mu_);
    return arrivals_;
  }

 private:
  void run() {
    // Bounded: at most 30 s, whatever the client does.
    for (int i = 0; i < 3000 && !stop_; ++i) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 10) <= 0) continue;
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      {
        std::lock_guard lock(mu_);
        arrivals_.push_back(steady::now());
      }
      serve(c);
    }
  }

  void serve(int c) {
    // The hello first (closing with it unread would reset the connection
    // before the client reads our Error).
    pollfd p{c, POLLIN, 0};
    char buf[4096];
    if (::poll(&p, 1, 2000) <= 0 || ::recv(c, buf, sizeof buf, 0) <= 0) {
      ::close(c);
      return;
    }
    protocol::frame_builder b;
    protocol::welcome_fields w;
    w.protocol_major = protocol::protocol_major;
    w.server_version = "fake";
    w.session_id = ++sessions_;
    w.heartbeat_ms = 60'000;  // no heartbeat timeout during the test
    w.server_instance = 0xfa4e;
    send_all(c, b.welcome(1, w));
    bool expected = false;
    if (!plan_.sent.load() && plan_.sent.compare_exchange_strong(expected, true)) {
      send_all(c, b.error(0, plan_.code, "bye", plan_.retry_after_ms, true));
      plan_.sent_at = steady::now().time_since_epoch().count();
      ::shutdown(c, SHUT_WR);
      // Until the client closes its side (bounded), then close.
      for (int i = 0; i < 200 && ::recv(c, buf, sizeof buf, MSG_DONTWAIT) != 0; ++i) std::this_thread::sleep_for(5ms);
      ::close(c);
      return;
    }
    open_.push_back(c);
  }

  static void send_all(int c, protocol::bytes_view bytes) {
    std::size_t at = 0;
    while (at < bytes.size()) {
      const auto n = ::send(c, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
      if (n <= 0) return;
      at += static_cast<std::size_t>(n);
    }
  }

  goodbye_plan& plan_;
  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<steady::time_point> arrivals_;
  std::vector<int> open_;  // the accept thread's
  std::uint64_t sessions_ = 0;
};

}  // namespace

TEST_CASE("a retry_after_ms hint sent before a close delays the client's next attempt at least that long",
          "[e2e][client][reconnect]") {
  goodbye_plan plan;
  plan.code = protocol::errc::shutting_down;
  plan.retry_after_ms = 400;
  fake_broker broker(plan);
  std::atomic<int> reconnected{0};
  std::error_code reason;
  client_options o;
  o.port = broker.port();
  o.reconnect.base_delay = 10ms;  // without the floor, the attempt would come within 10 ms
  o.on_disconnect = [&](std::error_code ec) { reason = ec; };
  o.on_reconnect = [&](const reconnect_info&) { ++reconnected; };
  auto c = client::connect(o);
  REQUIRE(c);
  REQUIRE(wait_until([&] { return reconnected.load() == 1; }));
  CHECK(reason == errc::shutting_down);
  const auto arrivals = broker.arrivals();
  REQUIRE(arrivals.size() == 2);
  CHECK(arrivals[1] - steady::time_point(steady::duration(plan.sent_at.load())) >= 400ms);
}

TEST_CASE("a draining close sends the client to its next broker address", "[e2e][client][reconnect]") {
  goodbye_plan plan;
  plan.code = protocol::errc::draining;
  plan.retry_after_ms = 300;  // the window the first attempt is spread over
  fake_broker a(plan);
  fake_broker b(plan);
  std::atomic<int> reconnected{0};
  std::error_code reason;
  client_options o;
  o.addresses = {a.address(), b.address()};
  o.on_disconnect = [&](std::error_code ec) { reason = ec; };
  o.on_reconnect = [&](const reconnect_info&) { ++reconnected; };
  auto c = client::connect(o);
  REQUIRE(c);
  REQUIRE(wait_until([&] { return reconnected.load() == 1; }));
  CHECK(reason == errc::draining);
  // One connection each: the first went to whichever came first in the
  // shuffled order and was drained, the reconnect to the other.
  CHECK(a.arrivals().size() == 1);
  CHECK(b.arrivals().size() == 1);
}
