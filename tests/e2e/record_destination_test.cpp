// End to end: records read back from the sequence log remember how they
// were delivered live (their destination): the channel of a durable publish,
// every route key of a durable send, nothing for a plain append.

#include "switchyard/client.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/log_helpers.hpp"
#include "tests/support/test_server.hpp"
#include "tests/support/wait.hpp"

#include <lmdb.h>

#include <catch2/catch.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <string>
#include <string_view>
#include <vector>

using namespace switchyard;
using test::connect_to;
using test::str;
using test::temp_dir;
using test::test_server;
using test::text;
using test::wait_until;
using test::with_data;

TEST_CASE("a record appended by publish_durable reads back with its channel", "[e2e][log]") {
  temp_dir dir;
  test_server server(with_data(dir));
  auto sub = connect_to(server.port(), "sub");
  std::atomic<int> delivered{0};
  REQUIRE(sub->subscribe("chat.>", [&](const message&) { ++delivered; }));
  auto pub = connect_to(server.port(), "pub");
  // One stream, two channels.
  REQUIRE(pub->publish_durable("chat.room1", "conv:1", text("one")));
  REQUIRE(pub->publish_durable("chat.room2.eu", "conv:1", text("two")));
  REQUIRE(pub->publish_durable("chat.room1", "conv:1", text("three")));
  REQUIRE(wait_until([&] { return delivered.load() == 3; }));

  auto r = pub->read("conv:1");
  REQUIRE(r);
  REQUIRE(r->records.size() == 3);
  const std::array<std::string_view, 3> channels{"chat.room1", "chat.room2.eu", "chat.room1"};
  const std::array<std::string_view, 3> payloads{"one", "two", "three"};
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(r->records[i].channel == channels[i]);
    CHECK(r->records[i].route_keys.empty());
    CHECK(str(r->records[i].payload) == payloads[i]);
  }
}

TEST_CASE("a record appended by send_durable reads back with all its route keys, routed or not", "[e2e][log]") {
  temp_dir dir;
  test_server server(with_data(dir));
  auto gw = connect_to(server.port(), "gateway");
  auto lease = gw->lease_grant(std::chrono::seconds(30));
  REQUIRE(lease);
  std::atomic<int> delivered{0};
  REQUIRE_FALSE(gw->open_inbox("gw-1", lease->id, [&](const inbox_message&) { ++delivered; }));
  REQUIRE(gw->registry_put("user:alice", "gw-1", lease->id));
  REQUIRE(gw->registry_put("user:bob", "gw-1", lease->id));

  auto service = connect_to(server.port(), "service");
  const std::array<std::string_view, 3> keys{"user:alice", "user:nobody", "user:bob"};
  auto sent = service->send_durable(keys, "conv:9", text("hi all"));
  REQUIRE(sent);
  CHECK(sent->routed == 2);
  const std::array<std::string_view, 1> unrouted{"user:nobody"};
  auto later = service->send_durable(unrouted, "conv:9", text("for later"));
  REQUIRE(later);
  CHECK(later->routed == 0);
  REQUIRE(wait_until([&] { return delivered.load() == 1; }));

  auto r = service->read("conv:9");
  REQUIRE(r);
  REQUIRE(r->records.size() == 2);
  // Every key of the send, in its order, routed or not.
  CHECK(r->records[0].route_keys == std::vector<std::string>{"user:alice", "user:nobody", "user:bob"});
  CHECK(r->records[0].channel.empty());
  CHECK(str(r->records[0].payload) == "hi all");
  CHECK(r->records[1].route_keys == std::vector<std::string>{"user:nobody"});
  CHECK(str(r->records[1].payload) == "for later");
}

TEST_CASE("a record of a plain append reads back with no channel and no route keys", "[e2e][log]") {
  temp_dir dir;
  test_server server(with_data(dir));
  auto c = connect_to(server.port());
  // A plain append between durable publishes and sends on the same stream.
  const std::array<std::string_view, 1> key{"user:x"};
  REQUIRE(c->publish_durable("news.today", "mixed", text("published")));
  REQUIRE(c->append("mixed", text("appended")));
  REQUIRE(c->send_durable(key, "mixed", text("sent")));
  REQUIRE(c->append("mixed", {}));

  auto r = c->read("mixed");
  REQUIRE(r);
  REQUIRE(r->records.size() == 4);
  CHECK(r->records[0].channel == "news.today");
  CHECK(r->records[1].channel.empty());
  CHECK(r->records[1].route_keys.empty());
  CHECK(str(r->records[1].payload) == "appended");
  CHECK(r->records[2].route_keys == std::vector<std::string>{"user:x"});
  CHECK(r->records[3].channel.empty());
  CHECK(r->records[3].route_keys.empty());
  CHECK(r->records[3].payload.empty());
}

TEST_CASE("record destinations survive a server restart", "[e2e][log]") {
  temp_dir dir;
  {
    test_server server(with_data(dir));
    auto c = connect_to(server.port());
    const std::array<std::string_view, 2> keys{"user:a", "user:b"};
    REQUIRE(c->publish_durable("orders.eu", "s", text("p")));
    REQUIRE(c->send_durable(keys, "s", text("q")));
  }
  test_server server(with_data(dir));
  auto c = connect_to(server.port());
  auto r = c->read("s");
  REQUIRE(r);
  REQUIRE(r->records.size() == 2);
  CHECK(r->records[0].channel == "orders.eu");
  CHECK(r->records[1].route_keys == std::vector<std::string>{"user:a", "user:b"});
}

TEST_CASE("a durable send whose route keys exceed the 64 KiB destination limit is refused and not appended",
          "[e2e][log]") {
  temp_dir dir;
  test_server server(with_data(dir));
  auto c = connect_to(server.port());
  REQUIRE(c->append("room", text("first")));
  // 300 keys of 250 bytes: about 75 KB of keys, within the frame limit.
  std::vector<std::string> owned;
  for (int i = 0; i < 300; ++i) owned.push_back("user:" + std::to_string(i) + ":" + std::string(240, 'k'));
  const std::vector<std::string_view> keys(owned.begin(), owned.end());
  auto sent = c->send_durable(keys, "room", text("too many keys"));
  REQUIRE_FALSE(sent);
  CHECK(sent.error() == errc::bad_request);
  CHECK(c->connected());
  auto r = c->read("room");
  REQUIRE(r);
  CHECK(r->last_seq == 1);
  REQUIRE(r->records.size() == 1);
  // Fewer keys fit.
  const std::vector<std::string_view> fewer(keys.begin(), keys.begin() + 200);
  auto ok = c->send_durable(fewer, "room", text("fits"));
  REQUIRE(ok);
  CHECK(ok->seq == 2);
  auto again = c->read("room", 2);
  REQUIRE(again);
  REQUIRE(again->records.size() == 1);
  CHECK(again->records[0].route_keys.size() == 200);
  CHECK(again->records[0].route_keys[199] == owned[199]);
}

TEST_CASE("a read whose route keys would overflow the frame limit returns fewer records", "[e2e][log]") {
  // Short route keys take about four times more room on the wire than in
  // the log: the log's byte budget alone would let three such records
  // into a 16 KiB frame.
  temp_dir dir;
  auto cfg = with_data(dir);
  cfg.max_frame = 16 * 1024;
  test_server server(cfg);
  auto c = connect_to(server.port());
  std::vector<std::string> owned;
  for (int i = 0; i < 900; ++i) owned.push_back(std::to_string(i % 10));
  const std::vector<std::string_view> keys(owned.begin(), owned.end());
  for (int i = 1; i <= 3; ++i) {
    auto sent = c->send_durable(keys, "tiny-keys", text("m" + std::to_string(i)));
    REQUIRE(sent);
    CHECK(sent->seq == static_cast<std::uint64_t>(i));
  }
  // Every record still comes, in order, over as many reads as it takes.
  std::uint64_t next = 1;
  for (int reads = 0; reads < 3 && next <= 3; ++reads) {
    auto r = c->read("tiny-keys", next);
    REQUIRE(r);
    REQUIRE_FALSE(r->records.empty());
    CHECK(r->records.size() < 3);
    for (const auto& rec : r->records) {
      CHECK(rec.seq == next);
      CHECK(rec.route_keys == owned);
      CHECK(str(rec.payload) == "m" + std::to_string(next));
      ++next;
    }
  }
  CHECK(next == 4);
  CHECK(c->connected());
}

TEST_CASE("a server refuses to start on a log written in another on-disk format", "[e2e][log]") {
  temp_dir dir;
  {
    test_server server(with_data(dir));
    auto c = connect_to(server.port());
    REQUIRE(c->append("s", text("x")));
  }
  {
    // Stamp the log with a format this code does not know, as a newer
    // version of the server would have.
    MDB_env* env = nullptr;
    REQUIRE(mdb_env_create(&env) == MDB_SUCCESS);
    REQUIRE(mdb_env_set_maxdbs(env, 4) == MDB_SUCCESS);
    REQUIRE(mdb_env_open(env, (dir.path() / "log").c_str(), 0, 0644) == MDB_SUCCESS);
    MDB_txn* txn = nullptr;
    REQUIRE(mdb_txn_begin(env, nullptr, 0, &txn) == MDB_SUCCESS);
    MDB_dbi meta = 0;
    REQUIRE(mdb_dbi_open(txn, "meta", 0, &meta) == MDB_SUCCESS);
    std::string_view key = "format_version";
    unsigned char version[8] = {99};
    MDB_val k{key.size(), const_cast<char*>(key.data())}, v{sizeof version, version};
    REQUIRE(mdb_put(txn, meta, &k, &v, 0) == MDB_SUCCESS);
    REQUIRE(mdb_txn_commit(txn) == MDB_SUCCESS);
    mdb_env_close(env);
  }
  REQUIRE_THROWS_WITH(test_server(with_data(dir)), Catch::Contains("unsupported format"));
}
