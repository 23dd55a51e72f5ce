// End to end: the broker's side of the connection lifecycle (docs/protocol.md
// §9.1): hellos over the rate and at the connection cap are refused with
// retry hints, admin hellos reach the reserved slots, a drain closes the
// connections in batches over its window and refuses new ones, SIGUSR2
// drains the real binary, SIGHUP re-reads its config file and SIGUSR1 does
// not end it.

#include "protocol/errc.hpp"
#include "protocol/frame_builder.hpp"
#include "protocol/limits.hpp"
#include "switchyard/client.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/process.hpp"
#include "tests/support/raw_connection.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/test_server.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <csignal>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace switchyard;
using namespace std::chrono_literals;
using perrc = protocol::errc;
using protocol::wire::Message;
using test::raw_connection;
using test::raw_frame;
using test::test_server;

namespace {

constexpr std::array<std::string_view, 1> admin_caps{protocol::capability::admin};

// The fatal Error a connection was sent, as the test needs it.
struct goodbye {
  perrc code{};
  std::uint32_t retry_after_ms = 0;
  bool fatal = false;
  std::uint64_t request_id = 1;
  std::chrono::steady_clock::time_point at;  // when the test read it
};

// Reads until an Error arrives (REQUIREs one within `timeout`).
goodbye read_goodbye(raw_connection& c, std::chrono::milliseconds timeout = 5s) {
  raw_frame f;
  const auto* e = c.next_of(Message::Error, f, timeout);
  REQUIRE(e != nullptr);
  const auto* m = e->message_as_Error();
  return {static_cast<perrc>(m->code()), m->retry_after_ms(), m->fatal(), e->request_id(),
          std::chrono::steady_clock::now()};
}

// A raw connection after its hello (asking `caps`, or the default two) and
// its welcome.
std::unique_ptr<raw_connection> welcomed(std::uint16_t port, std::span<const std::string_view> caps = {}) {
  auto c = std::make_unique<raw_connection>(port);
  if (caps.empty())
    c->send_hello();
  else
    c->send_hello(caps);
  raw_frame f;
  REQUIRE(c->next_of(Message::Welcome, f) != nullptr);
  return c;
}

// A raw connection whose hello is refused: its goodbye.
goodbye refused(std::uint16_t port, std::span<const std::string_view> caps = {}) {
  raw_connection c(port);
  if (caps.empty())
    c.send_hello();
  else
    c.send_hello(caps);
  auto g = read_goodbye(c);
  CHECK(c.closed_by_peer());
  return g;
}

void write_file(const std::filesystem::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::trunc);
  out << text;
  REQUIRE(out.good());
}

// Subscribes `n` patterns on a new connection; the error of the first that
// fails (nullopt: all were accepted).
std::optional<std::error_code> subscribe_n(std::uint16_t port, int n) {
  auto c = test::connect_to(port);
  for (int i = 0; i < n; ++i) {
    auto r = c->subscribe("lifecycle.p" + std::to_string(i), [](const message&) {});
    if (!r) return r.error();
  }
  return std::nullopt;
}

}  // namespace

TEST_CASE("hellos over max-hellos-per-s are refused rate_limited with retry hints spread one token apart",
          "[e2e][broker][admission]") {
  auto cfg = test_server::default_config();
  cfg.max_hellos_per_s = 1;
  cfg.hello_burst = 3;
  test_server server(cfg);
  std::vector<std::unique_ptr<raw_connection>> in;
  for (int i = 0; i < 3; ++i) in.push_back(welcomed(server.port()));
  std::vector<std::uint32_t> hints;
  for (int i = 0; i < 5; ++i) {
    const auto g = refused(server.port());
    CHECK(g.code == perrc::rate_limited);
    CHECK(g.fatal);
    CHECK(g.request_id == 0);
    CHECK(g.retry_after_ms > 0);
    CHECK(g.retry_after_ms <= 30'000);
    hints.push_back(g.retry_after_ms);
  }
  // One token (1 s) apart, less the time the test took between them.
  for (std::size_t i = 1; i < hints.size(); ++i) CHECK(hints[i] > hints[i - 1]);
  CHECK(hints.back() - hints.front() >= 3000);
  CHECK(server.live_metrics().counters.hellos_rate_limited == 5);
  // The hint is honest: after it, a hello is admitted again.
  std::this_thread::sleep_for(std::chrono::milliseconds(hints.front()));
  in.push_back(welcomed(server.port()));
}

TEST_CASE("a hello asking admin is neither rate limited nor refused at the cap while admin slots are free",
          "[e2e][broker][admission]") {
  auto cfg = test_server::default_config();
  cfg.max_connections = 2;
  cfg.admin_slots = 1;
  cfg.max_hellos_per_s = 1;
  cfg.hello_burst = 2;
  test_server server(cfg);
  auto a = welcomed(server.port());
  auto b = welcomed(server.port());
  // At the cap: a plain hello is refused with a retry hint...
  const auto plain = refused(server.port());
  CHECK(plain.code == perrc::too_many_connections);
  CHECK(plain.fatal);
  CHECK(plain.retry_after_ms >= 1000);
  // ... and an admin one takes the reserved slot (the bucket is empty too).
  raw_connection admin(server.port());
  admin.send_hello(admin_caps);
  raw_frame f;
  const auto* w = admin.next_of(Message::Welcome, f);
  REQUIRE(w != nullptr);
  const auto* granted = w->message_as_Welcome()->capabilities();
  REQUIRE(granted != nullptr);
  CHECK(std::any_of(granted->begin(), granted->end(), [](const auto* s) { return s->string_view() == "admin"; }));
  // The slots are taken now: even admin is refused, at once.
  const auto full = refused(server.port(), admin_caps);
  CHECK(full.code == perrc::too_many_connections);
  CHECK(full.retry_after_ms >= 1000);
  const auto m = server.live_metrics();
  CHECK(m.counters.connections_rejected == 2);
  CHECK(m.connections - m.connections_rejecting == 3);  // the refused ones may still be saying goodbye
}

TEST_CASE("switchyard-cli reaches a broker at its connection cap through an admin slot", "[e2e][broker][admission]") {
  auto cfg = test_server::default_config();
  cfg.max_connections = 1;
  cfg.admin_slots = 1;
  test_server server(cfg);
  auto only = welcomed(server.port());
  CHECK(refused(server.port()).code == perrc::too_many_connections);
  const auto [code, out] = test::run_for_exit_code(std::string(SWITCHYARD_CLI_BINARY) + " --address 127.0.0.1:" +
                                                   std::to_string(server.port()) + " ping --json 2>/dev/null");
  CHECK(code == 0);
  CHECK(out.find("\"admin\"") != std::string::npos);
}

TEST_CASE("a drain closes the connections in batches over its window and refuses new ones, then the server ends",
          "[e2e][broker][drain]") {
  auto cfg = test_server::default_config();
  test_server server(cfg);
  constexpr int n = 10;
  std::vector<std::unique_ptr<raw_connection>> conns;
  for (int i = 0; i < n; ++i) conns.push_back(welcomed(server.port()));
  // Each connection's goodbye, read on its own thread as it arrives.
  std::vector<goodbye> got(n);
  std::vector<std::jthread> readers;  // joined on the way out, also when a REQUIRE fails
  // The drain, asked over an admin connection (one of the connections it closes).
  auto admin = welcomed(server.port(), admin_caps);
  protocol::frame_builder b;
  admin->send(b.drain(9, 2000));
  raw_frame f;
  const auto* ok = admin->next_of(Message::Ok, f);
  REQUIRE(ok != nullptr);
  CHECK(ok->request_id() == 9);
  for (int i = 0; i < n; ++i)
    readers.emplace_back([&got, &conns, i] {
      raw_frame storage;
      const auto* e = conns[i]->next_of(Message::Error, storage, 10s);
      if (!e) return;
      const auto* m = e->message_as_Error();
      got[i] = {static_cast<perrc>(m->code()), m->retry_after_ms(), m->fatal(), e->request_id(),
                std::chrono::steady_clock::now()};
    });
  const auto started = std::chrono::steady_clock::now();
  // While draining: not ready, and a new hello is refused with a hint.
  const auto m = server.live_metrics();
  CHECK(m.draining);
  CHECK_FALSE(m.ready);
  const auto late = refused(server.port(), admin_caps);
  CHECK(late.code == perrc::draining);
  CHECK(late.fatal);
  CHECK(late.retry_after_ms == 2000);
  for (auto& t : readers) t.join();
  std::set<std::int64_t> buckets;  // 100 ms slots the goodbyes came in
  auto first = got[0].at, last = got[0].at;
  for (const auto& g : got) {
    CHECK(g.code == perrc::draining);
    CHECK(g.fatal);
    CHECK(g.request_id == 0);
    CHECK(g.retry_after_ms == 2000);  // the reconnect window: min(window, 10 s)
    first = std::min(first, g.at);
    last = std::max(last, g.at);
    buckets.insert(std::chrono::duration_cast<std::chrono::milliseconds>(g.at - started).count() / 100);
  }
  // Spread over the window, not all at once.
  CHECK(last - first >= 1s);
  CHECK(buckets.size() >= 4);
  CHECK(read_goodbye(*admin).code == perrc::draining);
  // The last connection gone, the server ends by itself.
  CHECK(server.wait_finished(10s));
  server.stop();
  CHECK(server.metrics().counters.connections_drained == n + 1);
  CHECK(server.metrics().counters.hellos_draining == 1);
}

TEST_CASE("SIGUSR2 drains the server process, which tells its clients draining and exits 0",
          "[e2e][broker][drain][process]") {
  auto server = test::start_server_process({"--drain-window-ms", "500", "--shutdown-grace-ms", "500"});
  std::vector<std::unique_ptr<raw_connection>> conns;
  for (int i = 0; i < 3; ++i) conns.push_back(welcomed(server.port()));
  const auto code = server.signal_and_wait(SIGUSR2, 15s);
  REQUIRE(code.has_value());
  CHECK(*code == 0);
  // What the server sent before it went is still there to read.
  for (auto& c : conns) {
    const auto g = read_goodbye(*c);
    CHECK(g.code == perrc::draining);
    CHECK(g.retry_after_ms == 500);
  }
}

TEST_CASE("SIGHUP re-reads the config file: a changed limit holds, a bad file changes nothing, nothing exits",
          "[e2e][broker][process]") {
  test::temp_dir dir;
  const auto file = dir.path() / "broker.toml";
  write_file(file, "max-subscriptions = 100\n");
  auto server = test::start_server_process({"--config", file.string()});
  CHECK_FALSE(subscribe_n(server.port(), 3));
  write_file(file, "max-subscriptions = 2\n");
  CHECK_FALSE(server.signal_and_wait(SIGHUP, 200ms).has_value());  // still running
  // The reload happens on the server's loop, soon after the signal.
  std::optional<std::error_code> third;
  CHECK(test::wait_until([&] { return (third = subscribe_n(server.port(), 3)).has_value(); }, 10s));
  CHECK(third == std::optional<std::error_code>(make_error_code(errc::limit_exceeded)));
  // A broken file is refused with a log line; the limit stays 2.
  write_file(file, "max-subscriptions = [oops\n");
  CHECK_FALSE(server.signal_and_wait(SIGHUP, 200ms).has_value());
  std::this_thread::sleep_for(200ms);
  CHECK(subscribe_n(server.port(), 3) == std::optional<std::error_code>(make_error_code(errc::limit_exceeded)));
  CHECK_FALSE(subscribe_n(server.port(), 2));
  // SIGUSR1 (counters to the log) does not end it either.
  CHECK_FALSE(server.signal_and_wait(SIGUSR1, 200ms).has_value());
  CHECK_FALSE(subscribe_n(server.port(), 1));
  CHECK(server.signal_and_wait(SIGTERM, 10s) == std::optional<int>(0));
}
