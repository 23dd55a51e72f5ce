// nats_link against a real nats-server (tests/support/nats_process.hpp).
// The test thread is the loop thread: it runs the io_context in slices
// (run_until) and calls subscribe/publish between them, as the broker's
// loop would. Every wait is bounded.

#include "cluster/nats_link.hpp"
#include "tests/support/nats_process.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using switchyard::cluster::errc;
using switchyard::cluster::inbound_message;
using switchyard::cluster::link_state;
using switchyard::cluster::nats_link;
using switchyard::cluster::nats_link_options;
using switchyard::test::nats_process;
using switchyard::test::wait_until;
namespace asio = switchyard::asio;

namespace {

// An io_context kept alive (a work guard) so run_for waits instead of returning.
struct loop {
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> guard = asio::make_work_guard(io);
  // Runs the loop on this thread until `pred` holds or `timeout` passed.
  template <class Pred>
  bool run_until(Pred pred, std::chrono::milliseconds timeout = 10s) {
    const auto give_up = std::chrono::steady_clock::now() + timeout;
    while (!pred()) {
      if (std::chrono::steady_clock::now() >= give_up) return pred();
      io.run_for(2ms);
    }
    return true;
  }
};

nats_link_options options_for(const nats_process& server) {
  nats_link_options o;
  o.servers = {server.url()};
  return o;
}

std::span<const std::byte> bytes(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

std::string text(std::span<const std::byte> b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

// A message as received, copied out of the handler's borrowed view.
struct received {
  std::string subject, reply, payload;
  std::thread::id thread;
};

// Subscribes and runs the loop until the server confirmed the SUB.
nats_link::subscription_id subscribe_ready(loop& l, nats_link& link, std::string_view subject,
                                           std::vector<received>& into) {
  bool ready = false;
  std::error_code ready_ec = make_error_code(errc::timeout);
  auto id = link.subscribe(
      subject,
      [&into](const inbound_message& m) {
        into.push_back({std::string(m.subject), std::string(m.reply), text(m.payload), std::this_thread::get_id()});
      },
      [&](std::error_code ec) {
        ready = true;
        ready_ec = ec;
      });
  REQUIRE(id);
  REQUIRE(l.run_until([&] { return ready; }));
  REQUIRE_FALSE(ready_ec);
  return *id;
}

std::uint32_t seq_of(const std::string& payload) {
  std::uint32_t v = 0;
  REQUIRE(payload.size() >= sizeof v);
  std::memcpy(&v, payload.data(), sizeof v);
  return v;
}

std::string seq_payload(std::uint32_t v, std::size_t size = sizeof(std::uint32_t)) {
  std::string p(std::max(size, sizeof v), 'x');
  std::memcpy(p.data(), &v, sizeof v);
  return p;
}

}  // namespace

TEST_CASE("a message published on one link reaches a subscriber on another link, on the loop thread") {
  nats_process server;
  loop l;
  nats_link a(l.io.get_executor(), options_for(server));
  nats_link b(l.io.get_executor(), options_for(server));
  REQUIRE(a.start());
  REQUIRE(b.start());
  CHECK(a.state() == link_state::connected);
  CHECK(a.stats().server_url == server.url());
  CHECK(a.max_payload() == 1024 * 1024);  // nats-server's default

  std::vector<received> got;
  subscribe_ready(l, b, "node.b.inbox", got);
  REQUIRE(a.publish("node.b.inbox", bytes("hello"), "node.a.reply"));
  REQUIRE(l.run_until([&] { return !got.empty(); }));

  REQUIRE(got.size() == 1);
  CHECK(got[0].subject == "node.b.inbox");
  CHECK(got[0].reply == "node.a.reply");
  CHECK(got[0].payload == "hello");
  CHECK(got[0].thread == std::this_thread::get_id());
  const auto sa = a.stats();
  const auto sb = b.stats();
  CHECK(sa.messages_out == 1);
  CHECK(sa.bytes_out == 5);
  CHECK(sb.messages_in == 1);
  CHECK(sb.bytes_in == 5);
  CHECK(sb.dropped_in == 0);
  CHECK(sa.dropped_out == 0);
}

TEST_CASE("messages arrive in publish order") {
  nats_process server;
  loop l;
  nats_link a(l.io.get_executor(), options_for(server));
  nats_link b(l.io.get_executor(), options_for(server));
  REQUIRE(a.start());
  REQUIRE(b.start());
  std::vector<received> got;
  subscribe_ready(l, b, "order", got);
  constexpr std::uint32_t count = 5000;
  for (std::uint32_t i = 0; i < count; ++i) {
    // The queue's default bound (8192) holds them all.
    REQUIRE(a.publish("order", bytes(seq_payload(i, 64))));
  }
  REQUIRE(l.run_until([&] { return got.size() >= count; }));
  REQUIRE(got.size() == count);
  for (std::uint32_t i = 0; i < count; ++i) REQUIRE(seq_of(got[i].payload) == i);
  CHECK(b.stats().dropped_in == 0);
}

TEST_CASE("a publish over max_payload is refused with payload_too_large") {
  nats_process server("max_payload: 1024");
  loop l;
  nats_link a(l.io.get_executor(), options_for(server));
  REQUIRE(a.start());
  CHECK(a.max_payload() == 1024);
  CHECK(a.stats().max_payload == 1024);
  const std::string big(1025, 'x');
  const auto refused = a.publish("big", bytes(big));
  REQUIRE_FALSE(refused);
  CHECK(refused.error() == errc::payload_too_large);
  CHECK(a.publish("big", bytes(std::string_view(big).substr(0, 1024))));
  REQUIRE(wait_until([&] { return a.stats().messages_out == 1; }));
  CHECK(a.stats().dropped_out == 0);
  CHECK(a.stats().send_failures == 0);
}

TEST_CASE("a publish with an empty or spaced subject is refused with invalid_argument") {
  nats_process server;
  loop l;
  nats_link a(l.io.get_executor(), options_for(server));
  REQUIRE(a.start());
  CHECK(a.publish("", bytes("x")).error() == errc::invalid_argument);
  CHECK(a.publish("a b", bytes("x")).error() == errc::invalid_argument);
  CHECK(a.publish("a", bytes("x"), "r\r\n").error() == errc::invalid_argument);
  CHECK(a.subscribe("a b", [](const inbound_message&) {}).error() == errc::invalid_argument);
}

TEST_CASE("a full outbound queue refuses with queue_full and counts the drop") {
  nats_process server;
  loop l;
  auto o = options_for(server);
  o.queue_max_messages = 1000;
  o.queue_max_bytes = 1u << 20;
  o.write_deadline = 30s;  // the sender thread stays blocked on the frozen server
  nats_link a(l.io.get_executor(), o);
  REQUIRE(a.start());
  server.freeze();  // stops reading: the socket buffers fill, then the sender thread blocks
  const std::string payload(256 * 1024, 'p');
  int accepted = 0;
  int refused = 0;
  for (int i = 0; i < 2000 && refused < 10; ++i) {  // at most ~500 MB through the kernel's buffers
    const auto r = a.publish("load", bytes(payload));
    if (r) {
      ++accepted;
    } else {
      REQUIRE(r.error() == errc::queue_full);
      ++refused;
      std::this_thread::sleep_for(1ms);
    }
  }
  CHECK(refused == 10);
  CHECK(a.stats().dropped_out == 10);
  CHECK(accepted > 0);
  server.thaw();  // the blocked write completes; stop() sends the rest
  a.stop();
  const auto st = a.stats();
  CHECK(st.messages_out + st.send_failures == static_cast<std::uint64_t>(accepted));
}

TEST_CASE("pending_bytes counts what waits to be handed to cnats, and falls to zero once it has been") {
  nats_process server;
  loop l;
  auto o = options_for(server);
  o.queue_max_bytes = 1u << 20;
  o.write_deadline = 30s;
  nats_link a(l.io.get_executor(), o);
  REQUIRE(a.start());
  CHECK(a.pending_bytes() == 0);
  server.freeze();
  const std::string payload(64 * 1024, 'p');
  int accepted = 0;
  for (int i = 0; i < 10'000; ++i) {  // at most ~640 MB through the kernel's buffers
    if (!a.publish("load", bytes(payload))) break;
    ++accepted;
  }
  // The queue is full: what it holds (and the sender's blocked batch) waits.
  CHECK(a.pending_bytes() > o.queue_max_bytes - payload.size() - 64);
  server.thaw();
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (a.pending_bytes() != 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
  CHECK(a.pending_bytes() == 0);
  CHECK(a.stats().messages_out == static_cast<std::uint64_t>(accepted));
  a.stop();
}

TEST_CASE("a full mailbox drops and counts, and one drain delivers what it holds") {
  nats_process server;
  loop receiver_loop;
  loop sender_loop;
  auto o = options_for(server);
  o.mailbox_max_messages = 10;
  nats_link b(receiver_loop.io.get_executor(), o);
  nats_link a(sender_loop.io.get_executor(), options_for(server));
  REQUIRE(b.start());
  REQUIRE(a.start());
  std::vector<received> got;
  subscribe_ready(receiver_loop, b, "flood", got);
  receiver_loop.io.poll();  // nothing else pending on the receiver's loop

  // The receiver's loop does not run: the mailbox fills.
  for (std::uint32_t i = 0; i < 100; ++i) REQUIRE(a.publish("flood", bytes(seq_payload(i))));
  REQUIRE(wait_until([&] {
    const auto st = b.stats();
    return st.messages_in + st.dropped_in >= 100;
  }));
  const auto st = b.stats();
  CHECK(st.messages_in == 10);
  CHECK(st.dropped_in == 90);
  CHECK(got.empty());

  // One posted drain for the whole batch.
  CHECK(receiver_loop.io.poll() == 1);
  REQUIRE(got.size() == 10);
  for (std::uint32_t i = 0; i < 10; ++i) CHECK(seq_of(got[i].payload) == i);
  receiver_loop.run_until([] { return false; }, 100ms);
  CHECK(got.size() == 10);
}

TEST_CASE("the link reconnects after the server restarts and reports the state changes") {
  nats_process server;
  loop l;
  auto o = options_for(server);
  o.reconnect_wait = 50ms;
  nats_link a(l.io.get_executor(), o);
  nats_link b(l.io.get_executor(), o);
  std::vector<link_state> states;
  b.set_status_handler([&](link_state s) { states.push_back(s); });
  REQUIRE(a.start());
  REQUIRE(b.start());
  std::vector<received> got;
  subscribe_ready(l, b, "after.restart", got);
  REQUIRE(l.run_until([&] { return states.size() == 1; }));
  CHECK(states[0] == link_state::connected);

  server.kill(SIGKILL);
  REQUIRE(l.run_until([&] { return b.state() == link_state::reconnecting && states.size() == 2; }));
  CHECK(states[1] == link_state::reconnecting);
  server.restart();
  REQUIRE(l.run_until([&] { return b.state() == link_state::connected && states.size() == 3; }));
  CHECK(states[2] == link_state::connected);
  CHECK(b.stats().reconnects == 1);
  CHECK(b.stats().server_url == server.url());

  // The subscription came back with the connection (cnats re-sends SUBs);
  // `a` may reconnect later than `b`: publish until one arrives.
  REQUIRE(l.run_until([&] { return a.state() == link_state::connected; }));
  REQUIRE(l.run_until(
      [&] {
        (void)a.publish("after.restart", bytes("again"));
        return !got.empty();
      },
      10s));
  CHECK(got[0].payload == "again");
}

TEST_CASE("a link whose reconnect attempts run out is closed and refuses publishes with closed") {
  nats_process server;
  loop l;
  auto o = options_for(server);
  o.max_reconnects = 1;
  o.reconnect_wait = 20ms;
  o.connect_timeout = 200ms;
  nats_link a(l.io.get_executor(), o);
  std::vector<link_state> states;
  a.set_status_handler([&](link_state s) { states.push_back(s); });
  REQUIRE(a.start());
  server.kill(SIGKILL);
  REQUIRE(l.run_until([&] { return a.state() == link_state::closed && states.size() == 3; }));
  CHECK(states == std::vector<link_state>{link_state::connected, link_state::reconnecting, link_state::closed});
  const auto r = a.publish("x", bytes("x"));
  REQUIRE_FALSE(r);
  CHECK(r.error() == errc::closed);
  a.stop();
  CHECK(a.stats().reconnects == 0);
}

TEST_CASE("stop returns with the sender stuck on a frozen server, joins, and later publishes fail with closed") {
  nats_process server;
  loop l;
  auto o = options_for(server);
  o.queue_max_bytes = 1u << 20;
  o.write_deadline = 3s;  // stop() waits for the stuck write up to this long
  o.connect_timeout = 500ms;
  nats_link a(l.io.get_executor(), o);
  REQUIRE(a.start());
  std::vector<received> got;
  subscribe_ready(l, a, "self", got);
  server.freeze();
  // Publish until the sender thread is stuck in a socket write: the queue
  // refuses and nothing has gone out for 200 ms.
  const std::string payload(256 * 1024, 'p');
  auto last_out = a.stats().messages_out;
  auto last_change = std::chrono::steady_clock::now();
  bool stuck = false;
  for (int i = 0; i < 5000 && !stuck; ++i) {
    if (!a.publish("load", bytes(payload))) std::this_thread::sleep_for(5ms);
    const auto out = a.stats().messages_out;
    if (out != last_out) {
      last_out = out;
      last_change = std::chrono::steady_clock::now();
    }
    stuck = a.stats().dropped_out > 0 && std::chrono::steady_clock::now() - last_change > 200ms;
  }
  REQUIRE(stuck);

  auto stopped = std::async(std::launch::async, [&] { a.stop(); });
  REQUIRE(stopped.wait_for(20s) == std::future_status::ready);
  server.thaw();
  CHECK(a.state() == link_state::closed);
  const auto r = a.publish("load", bytes("x"));
  REQUIRE_FALSE(r);
  CHECK(r.error() == errc::closed);
  CHECK(a.subscribe("x", [](const inbound_message&) {}).error() == errc::closed);
  a.stop();  // idempotent
  CHECK(a.state() == link_state::closed);
}

TEST_CASE("unsubscribe stops delivery to that handler only") {
  nats_process server;
  loop l;
  nats_link a(l.io.get_executor(), options_for(server));
  nats_link b(l.io.get_executor(), options_for(server));
  REQUIRE(a.start());
  REQUIRE(b.start());
  std::vector<received> one, two;
  const auto id = subscribe_ready(l, b, "topic", one);
  subscribe_ready(l, b, "topic", two);
  REQUIRE(a.publish("topic", bytes("1")));
  REQUIRE(l.run_until([&] { return one.size() == 1 && two.size() == 1; }));
  b.unsubscribe(id);
  REQUIRE(a.publish("topic", bytes("2")));
  REQUIRE(l.run_until([&] { return two.size() == 2; }));
  l.run_until([] { return false; }, 100ms);
  CHECK(one.size() == 1);
  CHECK(two.size() == 2);
}

TEST_CASE("start fails with unreachable when no server listens") {
  loop l;
  nats_link_options o;
  o.servers = {"nats://127.0.0.1:" + std::to_string(switchyard::test::unused_port())};
  o.connect_timeout = 1s;
  nats_link a(l.io.get_executor(), o);
  auto started = std::async(std::launch::async, [&] { return a.start(); });
  REQUIRE(started.wait_for(10s) == std::future_status::ready);
  const auto r = started.get();
  REQUIRE_FALSE(r);
  CHECK(r.error() == errc::unreachable);
  CHECK(a.state() == link_state::closed);
  CHECK(a.publish("x", bytes("x")).error() == errc::closed);
  CHECK(a.start().error() == errc::closed);  // not restartable
  a.stop();
  CHECK(a.state() == link_state::closed);
}

TEST_CASE("a message crosses a three-server NATS cluster between links on different servers") {
  switchyard::test::nats_cluster cluster;
  loop l;
  nats_link_options oa;
  oa.servers = {cluster.first.url()};
  nats_link_options ob;
  ob.servers = {cluster.third.url()};
  nats_link a(l.io.get_executor(), oa);
  nats_link b(l.io.get_executor(), ob);
  REQUIRE(a.start());
  REQUIRE(b.start());
  CHECK(a.stats().server_url == cluster.first.url());
  CHECK(b.stats().server_url == cluster.third.url());
  std::vector<received> got;
  subscribe_ready(l, b, "across", got);
  // The routes form and the interest spreads asynchronously: publish
  // (every 20 ms) until the first message crosses, then check order.
  REQUIRE(l.run_until(
      [&] {
        (void)a.publish("across", bytes("probe"));
        l.io.run_for(20ms);
        return !got.empty();
      },
      10s));
  got.clear();
  for (std::uint32_t i = 0; i < 1000; ++i) REQUIRE(a.publish("across", bytes(seq_payload(i))));
  REQUIRE(l.run_until([&] {
    return std::count_if(got.begin(), got.end(), [](const received& r) { return r.payload != "probe"; }) >= 1000;
  }));
  std::uint32_t next = 0;
  for (const auto& r : got) {
    if (r.payload == "probe") continue;  // a late probe
    REQUIRE(seq_of(r.payload) == next++);
  }
  CHECK(next == 1000);
}

TEST_CASE("a link fails over to the next server of its list when its server dies") {
  switchyard::test::nats_cluster cluster;
  loop l;
  nats_link_options oa;
  oa.servers = {cluster.third.url()};
  nats_link_options ob;
  ob.servers = {cluster.first.url(), cluster.second.url()};
  ob.reconnect_wait = 50ms;
  nats_link a(l.io.get_executor(), oa);
  nats_link b(l.io.get_executor(), ob);
  std::vector<link_state> states;
  b.set_status_handler([&](link_state s) { states.push_back(s); });
  REQUIRE(a.start());
  REQUIRE(b.start());
  CHECK(b.stats().server_url == cluster.first.url());  // no_randomize: the list's order
  std::vector<received> got;
  subscribe_ready(l, b, "failover", got);

  cluster.first.kill(SIGKILL);
  REQUIRE(l.run_until([&] { return b.state() == link_state::connected && states.size() == 3; }));
  CHECK(states == std::vector<link_state>{link_state::connected, link_state::reconnecting, link_state::connected});
  CHECK(b.stats().server_url == cluster.second.url());
  CHECK(b.stats().reconnects == 1);
  REQUIRE(l.run_until(
      [&] {
        (void)a.publish("failover", bytes("after"));
        l.io.run_for(20ms);
        return !got.empty();
      },
      10s));
  CHECK(got[0].payload == "after");
}
