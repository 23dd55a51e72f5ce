// End to end: the sequence log through the broker: durable appends, reads,
// restarts, trimmed positions, and kill -9 in the middle of a burst.

#include "bench/server_process.hpp"
#include "protocol/errc.hpp"
#include "storage/sequence_log.hpp"
#include "switchyard/client.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/raw_connection.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/log_helpers.hpp"
#include "tests/support/test_server.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <signal.h>

#include <atomic>
#include <map>
#include <mutex>
#include <random>
#include <thread>

using namespace switchyard;
using test::connect_to;
using test::str;
using test::temp_dir;
using test::test_server;
using test::text;
using test::wait_until;
using test::with_data;

TEST_CASE("appends are acknowledged with contiguous sequences and read back in order", "[e2e][log]") {
  temp_dir dir;
  test_server server(with_data(dir));
  auto c = connect_to(server.port());
  std::uint64_t epoch = 0;
  for (int i = 1; i <= 100; ++i) {
    auto ack = c->append("conv:42", text("message " + std::to_string(i)));
    REQUIRE(ack);
    CHECK(ack->seq == static_cast<std::uint64_t>(i));
    if (i == 1) epoch = ack->epoch;
    CHECK(ack->epoch == epoch);
  }
  auto all = c->read("conv:42");
  REQUIRE(all);
  CHECK(all->epoch == epoch);
  CHECK(all->first_seq == 1);
  CHECK(all->last_seq == 100);
  REQUIRE(all->records.size() == 100);
  for (int i = 0; i < 100; ++i) {
    CHECK(all->records[i].seq == static_cast<std::uint64_t>(i + 1));
    CHECK(str(all->records[i].payload) == "message " + std::to_string(i + 1));
  }
  auto some = c->read("conv:42", 50, 10);
  REQUIRE(some);
  REQUIRE(some->records.size() == 10);
  CHECK(some->records.front().seq == 50);
  CHECK(some->records.back().seq == 59);
}

TEST_CASE("acknowledged appends survive a server restart and sequences continue", "[e2e][log]") {
  temp_dir dir;
  std::uint64_t epoch = 0;
  {
    test_server server(with_data(dir));
    auto c = connect_to(server.port());
    for (int i = 1; i <= 50; ++i) {
      auto ack = c->append("orders", text("o" + std::to_string(i)));
      REQUIRE(ack);
      epoch = ack->epoch;
    }
  }
  test_server server(with_data(dir));
  auto c = connect_to(server.port());
  auto all = c->read("orders");
  REQUIRE(all);
  REQUIRE(all->records.size() == 50);
  CHECK(str(all->records.back().payload) == "o50");
  auto next = c->append("orders", text("o51"));
  REQUIRE(next);
  CHECK(next->seq == 51);
  CHECK(next->epoch == epoch);
}

TEST_CASE("reading a trimmed position answers trimmed with the first retained sequence", "[e2e][log]") {
  temp_dir dir;
  {
    test_server server(with_data(dir));
    auto c = connect_to(server.port());
    for (int i = 1; i <= 20; ++i) REQUIRE(c->append("room", text("r" + std::to_string(i))));
  }
  {
    // Trim the first ten records directly in the log, as retention would.
    storage::log_options o;
    o.dir = dir.path() / "log";
    auto log = storage::sequence_log::open(o);
    REQUIRE(log);
    auto trimmed = (*log)->trim("room", 11, 100);
    REQUIRE(trimmed);
    CHECK(*trimmed == 10);
  }
  test_server server(with_data(dir));
  auto c = connect_to(server.port());
  auto below = c->read("room", 5);
  REQUIRE_FALSE(below);
  CHECK(below.error() == errc::trimmed);
  auto from_start = c->read("room", 0);
  REQUIRE(from_start);
  CHECK(from_start->first_seq == 11);
  REQUIRE_FALSE(from_start->records.empty());
  CHECK(from_start->records.front().seq == 11);

  // On the wire the error names where the log starts now.
  test::raw_connection raw(server.port());
  const std::array<std::string_view, 1> caps{"log"};
  protocol::hello_fields h;
  h.protocol_major = 1;
  h.capabilities = caps;
  protocol::frame_builder b;
  raw.send(b.hello(1, h));
  test::raw_frame f;
  REQUIRE(raw.next_of(protocol::wire::Message::Welcome, f) != nullptr);
  raw.send(b.read(9, "room", 3, 0, 0));
  const auto* e = raw.next_of(protocol::wire::Message::Error, f);
  REQUIRE(e != nullptr);
  CHECK(e->request_id() == 9);
  CHECK(static_cast<int>(e->message_as_Error()->code()) == static_cast<int>(protocol::errc::trimmed));
  CHECK(e->message_as_Error()->first_seq() == 11);
}

TEST_CASE("an unknown stream answers not_found and a server without a data dir does not grant the log", "[e2e][log]") {
  temp_dir dir;
  {
    test_server server(with_data(dir));
    auto c = connect_to(server.port());
    auto r = c->read("nothing-here");
    REQUIRE_FALSE(r);
    CHECK(r.error() == errc::not_found);
  }
  test_server no_data;  // default test config: no data dir
  auto c = connect_to(no_data.port());
  auto a = c->append("s", text("x"));
  REQUIRE_FALSE(a);
  CHECK(a.error() == errc::not_supported);
  CHECK(c->connected());
}

TEST_CASE(
    "a server without a data dir answers log requests and publishes with a stream with unsupported_message, not "
    "internal",
    "[e2e][log]") {
  test_server no_data;
  test::raw_connection raw(no_data.port());
  const std::array<std::string_view, 2> caps{"log", "publish-ack"};
  raw.send_hello(caps);
  test::raw_frame f;
  const auto* w = raw.next_of(protocol::wire::Message::Welcome, f);
  REQUIRE(w != nullptr);
  const auto* granted = w->message_as_Welcome()->capabilities();
  REQUIRE(granted != nullptr);
  for (const auto* cap : *granted) CHECK(cap->string_view() != "log");
  protocol::frame_builder b;
  const protocol::bytes_view payload{reinterpret_cast<const std::uint8_t*>("x"), 1};
  raw.send(b.publish(7, "orders.new", payload, "orders"));
  raw.send(b.append(8, "orders", payload));
  raw.send(b.read(9, "orders", 1, 0, 0));
  for (const std::uint64_t rid : {7u, 8u, 9u}) {
    const auto* e = raw.next_of(protocol::wire::Message::Error, f);
    REQUIRE(e != nullptr);
    CHECK(e->request_id() == rid);
    CHECK(static_cast<int>(e->message_as_Error()->code()) == static_cast<int>(protocol::errc::unsupported_message));
    CHECK_THAT(e->message_as_Error()->message()->str(), Catch::Contains("sequence log is off"));
    CHECK_FALSE(e->message_as_Error()->fatal());
  }
}

TEST_CASE("a read of an empty stream name answers bad_request from any position", "[e2e][log]") {
  temp_dir dir;
  test_server server(with_data(dir));
  test::raw_connection raw(server.port());
  const std::array<std::string_view, 1> caps{"log"};
  raw.send_hello(caps);
  test::raw_frame f;
  REQUIRE(raw.next_of(protocol::wire::Message::Welcome, f) != nullptr);
  protocol::frame_builder b;
  for (const std::uint64_t from : {0u, 1u, 5u}) {
    raw.send(b.read(10 + from, "", from, 0, 0));
    const auto* e = raw.next_of(protocol::wire::Message::Error, f);
    REQUIRE(e != nullptr);
    CHECK(e->request_id() == 10 + from);
    CHECK(static_cast<int>(e->message_as_Error()->code()) == static_cast<int>(protocol::errc::bad_request));
  }
  const std::string long_name(256, 's');
  raw.send(b.read(20, long_name, 1, 0, 0));
  const auto* e = raw.next_of(protocol::wire::Message::Error, f);
  REQUIRE(e != nullptr);
  CHECK(static_cast<int>(e->message_as_Error()->code()) == static_cast<int>(protocol::errc::bad_request));
}

TEST_CASE("pipelined appends from several threads are all acknowledged exactly once", "[e2e][log]") {
  // sync commits on the committer's thread; batch and none on the loop's.
  const std::string mode = GENERATE("sync", "batch", "none");
  INFO("durability " << mode);
  temp_dir dir;
  auto cfg = with_data(dir);
  cfg.durability = *storage::parse_durability(mode);
  test_server server(cfg);
  auto c = connect_to(server.port());
  std::mutex mu;
  std::vector<std::uint64_t> seqs;
  std::atomic<int> done{0}, failed{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < 4; ++w)
    writers.emplace_back([&] {
      for (int i = 0; i < 250; ++i)
        c->async_append("burst", text("x"), [&](std::expected<append_ack, std::error_code> r) {
          if (!r)
            ++failed;
          else {
            std::lock_guard lock(mu);
            seqs.push_back(r->seq);
          }
          ++done;
        });
    });
  for (auto& w : writers) w.join();
  REQUIRE(wait_until([&] { return done == 1000; }, std::chrono::seconds(30)));
  CHECK(failed == 0);
  std::sort(seqs.begin(), seqs.end());
  REQUIRE(seqs.size() == 1000);
  for (std::size_t i = 0; i < seqs.size(); ++i) CHECK(seqs[i] == i + 1);
  auto stored = c->read("burst", 1, 1);
  REQUIRE(stored);
  CHECK(stored->last_seq == 1000);
}

TEST_CASE("kill -9 during a burst loses no acknowledged append and tears nothing", "[e2e][log][slow]") {
  temp_dir dir;
  const std::string data = (dir.path() / "data").string();
  std::mt19937 rng(2026);
  std::map<std::uint64_t, std::string> acked;  // every acknowledged sequence and its payload
  // A sequence acknowledged twice means the first acknowledgement was lost
  // in a crash and its number handed out again.
  std::vector<std::uint64_t> acked_twice;
  constexpr int rounds = 20;
  for (int round = 0; round < rounds; ++round) {
    auto server = bench::server_process::start(SWITCHYARD_SERVER_BINARY, {}, std::chrono::seconds(10), data);
    REQUIRE(server);
    auto c = connect_to(server->port());
    std::mutex mu;
    std::atomic<bool> stop{false};
    std::atomic<int> in_flight{0};
    std::thread writer([&] {
      // Keep up to 64 appends in flight, each payload naming its round and index.
      for (int i = 0; i < 100'000 && !stop; ++i) {
        while (in_flight >= 64 && !stop) std::this_thread::yield();
        const std::string payload = "round " + std::to_string(round) + " item " + std::to_string(i);
        ++in_flight;
        c->async_append("crash", text(payload), [&, payload](std::expected<append_ack, std::error_code> r) {
          if (r) {
            std::lock_guard lock(mu);
            if (!acked.emplace(r->seq, payload).second) acked_twice.push_back(r->seq);
          }
          --in_flight;
        });
      }
    });
    // Each round has appends acknowledged before the kill (however slow the
    // disk's fsync), then more in flight when it comes.
    const auto acked_before = [&] {
      std::lock_guard lock(mu);
      return acked.size();
    }();
    const bool some_acked = wait_until(
        [&] {
          std::lock_guard lock(mu);
          return acked.size() > acked_before;
        },
        std::chrono::seconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(5, 60)(rng)));
    const auto status = server->signal_and_wait(SIGKILL, std::chrono::seconds(10));
    stop = true;
    writer.join();
    REQUIRE(some_acked);
    REQUIRE(status.has_value());
    c->close();  // fails whatever was still in flight: those were never acknowledged
  }
  // Restart once more and check the whole stream.
  auto server = bench::server_process::start(SWITCHYARD_SERVER_BINARY, {}, std::chrono::seconds(10), data);
  REQUIRE(server);
  auto c = connect_to(server->port());
  REQUIRE_FALSE(acked.empty());
  std::vector<stream_record> all;
  for (std::uint64_t from = 1; all.size() < 10'000'000;) {
    auto r = c->read("crash", from, 10'000);
    INFO("read from " << from << ": " << (r ? std::string("ok") : r.error().message()));
    REQUIRE(r);
    if (r->records.empty()) break;
    for (auto& rec : r->records) all.push_back(std::move(rec));
    from = all.back().seq + 1;
  }
  INFO("acknowledged " << acked.size() << ", stored " << all.size());
  CHECK(acked_twice.empty());
  // Contiguous from 1, no duplicates, nothing torn (every record read and
  // passed its checksum on the way), and every acknowledged append is there
  // with its payload.
  for (std::size_t i = 0; i < all.size(); ++i) REQUIRE(all[i].seq == i + 1);
  for (const auto& [seq, payload] : acked) {
    REQUIRE(seq <= all.size());
    CHECK(str(all[seq - 1].payload) == payload);
  }
}

TEST_CASE("a publish with a stream is appended first and delivered with its log position", "[e2e][log]") {
  temp_dir dir;
  test_server server(with_data(dir));
  auto sub = connect_to(server.port(), "sub");
  std::mutex mu;
  std::vector<std::tuple<std::string, std::uint64_t, std::uint64_t, std::string>> got;
  REQUIRE(sub->subscribe("chat.>", [&](const message& m) {
    std::lock_guard lock(mu);
    got.emplace_back(std::string(m.stream), m.seq, m.epoch, std::string(m.payload_text()));
  }));
  auto pub = connect_to(server.port(), "pub");
  std::uint64_t epoch = 0;
  for (int i = 1; i <= 3; ++i) {
    auto ack = pub->publish_durable("chat.room1", "conv:42", text("hello " + std::to_string(i)));
    REQUIRE(ack);
    CHECK(ack->seq == static_cast<std::uint64_t>(i));
    epoch = ack->epoch;
  }
  REQUIRE(wait_until([&] {
    std::lock_guard lock(mu);
    return got.size() == 3;
  }));
  for (int i = 0; i < 3; ++i) {
    const auto& [stream, seq, e, payload] = got[i];
    CHECK(stream == "conv:42");
    CHECK(seq == static_cast<std::uint64_t>(i + 1));
    CHECK(e == epoch);
    CHECK(payload == "hello " + std::to_string(i + 1));
  }
  // The log has them, in the same order.
  auto all = pub->read("conv:42");
  REQUIRE(all);
  REQUIRE(all->records.size() == 3);
  CHECK(str(all->records[2].payload) == "hello 3");
  // A plain publish still carries no position.
  REQUIRE_FALSE(pub->publish("chat.room1", "plain"));
  REQUIRE(wait_until([&] {
    std::lock_guard lock(mu);
    return got.size() == 4;
  }));
  std::lock_guard lock(mu);
  CHECK(std::get<0>(got[3]).empty());
  CHECK(std::get<1>(got[3]) == 0);
}

TEST_CASE("a plain publish to a channel configured as durable goes through the channel's stream", "[e2e][log]") {
  temp_dir dir;
  auto cfg = with_data(dir);
  cfg.durable_channels = {"orders.>"};
  test_server server(cfg);
  auto sub = connect_to(server.port(), "sub");
  std::mutex mu;
  std::vector<std::tuple<std::string, std::string, std::uint64_t>> got;  // channel, stream, seq
  REQUIRE(sub->subscribe(">", [&](const message& m) {
    std::lock_guard lock(mu);
    got.emplace_back(std::string(m.channel), std::string(m.stream), m.seq);
  }));
  auto pub = connect_to(server.port(), "pub");
  // publish_confirmed returns once the broker answered: for a durable
  // channel, once the record is in the log.
  REQUIRE_FALSE(pub->publish_confirmed("orders.eu", text("order 1")));
  REQUIRE_FALSE(pub->publish_confirmed("orders.eu", text("order 2")));
  auto stored = pub->read("orders.eu");
  REQUIRE(stored);
  REQUIRE(stored->records.size() == 2);
  CHECK(str(stored->records[1].payload) == "order 2");
  CHECK(stored->records[1].channel == "orders.eu");
  // Other channels stay at most once, with no stream.
  REQUIRE_FALSE(pub->publish_confirmed("chat.x", text("hi")));
  auto none = pub->read("chat.x");
  REQUIRE_FALSE(none);
  CHECK(none.error() == errc::not_found);
  REQUIRE(wait_until([&] {
    std::lock_guard lock(mu);
    return got.size() == 3;
  }));
  std::lock_guard lock(mu);
  CHECK(got[0] == std::tuple<std::string, std::string, std::uint64_t>{"orders.eu", "orders.eu", 1});
  CHECK(got[1] == std::tuple<std::string, std::string, std::uint64_t>{"orders.eu", "orders.eu", 2});
  CHECK(got[2] == std::tuple<std::string, std::string, std::uint64_t>{"chat.x", "", 0});
}

TEST_CASE("a publisher without the log capability is answered Ok once its publish to a durable channel is stored",
          "[e2e][log]") {
  temp_dir dir;
  auto cfg = with_data(dir);
  cfg.durable_channels = {"audit.*"};
  test_server server(cfg);
  test::raw_connection raw(server.port());
  raw.send_hello();  // dropped-notice and publish-ack, no "log"
  test::raw_frame f;
  REQUIRE(raw.next_of(protocol::wire::Message::Welcome, f) != nullptr);
  protocol::frame_builder b;
  const std::string_view payload = "login alice";
  raw.send(b.publish(7, "audit.login", {reinterpret_cast<const std::uint8_t*>(payload.data()), payload.size()}));
  const auto* ok = raw.next_of(protocol::wire::Message::Ok, f);
  REQUIRE(ok != nullptr);
  CHECK(ok->request_id() == 7);
  auto c = connect_to(server.port());
  auto stored = c->read("audit.login");
  REQUIRE(stored);
  REQUIRE(stored->records.size() == 1);
  CHECK(str(stored->records[0].payload) == "login alice");
}

TEST_CASE("a send with a stream is appended first and delivered into the inbox with its position", "[e2e][log]") {
  temp_dir dir;
  test_server server(with_data(dir));
  auto gw = connect_to(server.port(), "gateway");
  auto lease = gw->lease_grant(std::chrono::seconds(30));
  REQUIRE(lease);
  std::mutex mu;
  std::vector<std::tuple<std::string, std::uint64_t, std::uint64_t, std::string, std::size_t>> got;
  REQUIRE_FALSE(gw->open_inbox("gw-7", lease->id, [&](const inbox_message& m) {
    std::lock_guard lock(mu);
    got.emplace_back(std::string(m.stream), m.seq, m.epoch, std::string(m.payload_text()), m.route_keys.size());
  }));
  REQUIRE(gw->registry_put("user:alice", "gw-7", lease->id));
  REQUIRE(gw->registry_put("user:bob", "gw-7", lease->id));

  auto service = connect_to(server.port(), "service");
  const std::array<std::string_view, 3> room{"user:alice", "user:bob", "user:nobody"};
  auto sent = service->send_durable(room, "conv:7", text("hi room"));
  REQUIRE(sent);
  CHECK(sent->seq == 1);
  CHECK(sent->routed == 2);
  REQUIRE(sent->gateways.size() == 3);
  CHECK(sent->gateways[0] == "gw-7");
  CHECK(sent->gateways[2].empty());
  REQUIRE(wait_until([&] {
    std::lock_guard lock(mu);
    return got.size() == 1;
  }));
  {
    std::lock_guard lock(mu);
    const auto& [stream, seq, epoch, payload, keys] = got[0];
    CHECK(stream == "conv:7");
    CHECK(seq == 1);
    CHECK(epoch == sent->epoch);
    CHECK(payload == "hi room");
    CHECK(keys == 2);  // one delivery for the inbox, listing both users
  }
  // Nobody is routed: the record is in the log all the same.
  const std::array<std::string_view, 1> nobody{"user:nobody"};
  auto lost = service->send_durable(nobody, "conv:7", text("for later"));
  REQUIRE(lost);
  CHECK(lost->routed == 0);
  CHECK(lost->seq == 2);
  auto log = service->read("conv:7");
  REQUIRE(log);
  REQUIRE(log->records.size() == 2);
  CHECK(str(log->records[1].payload) == "for later");
}

TEST_CASE("the broker applies default retention in the background", "[e2e][log]") {
  temp_dir dir;
  auto cfg = with_data(dir);
  cfg.retention_max_records = 5;
  test_server server(cfg);
  auto c = connect_to(server.port());
  for (int i = 1; i <= 20; ++i) REQUIRE(c->append("short", text("m" + std::to_string(i))));
  // Retention passes run about once a second: wait (bounded) for one.
  REQUIRE(wait_until(
      [&] {
        auto r = c->read("short", 0);
        return r && r->first_seq == 16;
      },
      std::chrono::seconds(10)));
  auto old = c->read("short", 1);
  REQUIRE_FALSE(old);
  CHECK(old.error() == errc::trimmed);
  auto next = c->append("short", text("m21"));
  REQUIRE(next);
  CHECK(next->seq == 21);
}
