// End to end: stream administration through the broker (StreamInfo,
// StreamList, SetRetention, StreamDelete) with the client library and raw
// frames, a real LMDB log in a temporary folder.

#include "protocol/errc.hpp"
#include "protocol/limits.hpp"
#include "switchyard/client.hpp"
#include "tests/support/byte_pattern.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/raw_connection.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/log_helpers.hpp"
#include "tests/support/test_server.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <array>
#include <chrono>
#include <string>

using namespace switchyard;
using std::chrono::milliseconds;
using test::connect_to;
using test::temp_dir;
using test::test_server;
using test::text;
using test::wait_until;
using test::with_data;

namespace {

// A raw connection after a hello asking for `caps`, its welcome read.
struct raw_session {
  test::raw_connection raw;
  protocol::frame_builder b;
  test::raw_frame f;
  raw_session(std::uint16_t port, std::span<const std::string_view> caps) : raw(port) {
    protocol::hello_fields h;
    h.protocol_major = 1;
    h.capabilities = caps;
    raw.send(b.hello(1, h));
    REQUIRE(raw.next_of(protocol::wire::Message::Welcome, f) != nullptr);
  }
  // The error answering the last request (REQUIREs one with request id `rid`).
  protocol::errc error(std::uint64_t rid) {
    const auto* e = raw.next(f);
    REQUIRE(e != nullptr);
    REQUIRE(e->message_type() == protocol::wire::Message::Error);
    CHECK(e->request_id() == rid);
    CHECK_FALSE(e->message_as_Error()->fatal());
    return static_cast<protocol::errc>(e->message_as_Error()->code());
  }
};

}  // namespace

TEST_CASE("stream_info reports a stream's positions, counts, creation time and the default retention",
          "[e2e][broker]") {
  temp_dir dir;
  auto cfg = with_data(dir);
  cfg.retention_max_records = 1000;
  cfg.retention_max_age = milliseconds(86'400'000);
  test_server server(cfg);
  auto c = connect_to(server.port());
  const auto before = static_cast<std::uint64_t>(
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  std::uint64_t epoch = 0;
  for (int i = 0; i < 5; ++i) {
    auto ack = c->append("orders.eu", text("12345"));
    REQUIRE(ack);
    epoch = ack->epoch;
  }
  auto st = c->stream_info("orders.eu");
  REQUIRE(st);
  CHECK(st->name == "orders.eu");
  CHECK(st->epoch == epoch);
  CHECK(st->first_seq == 1);
  CHECK(st->last_seq == 5);
  CHECK(st->records == 5);
  CHECK(st->bytes == 25);
  CHECK(st->created_ms >= before);
  CHECK(st->created_ms < before + 60'000);
  CHECK_FALSE(st->own_retention);
  CHECK(st->retention.max_records == 1000);
  CHECK(st->retention.max_age == milliseconds(86'400'000));
  CHECK(st->retention.max_bytes == 0);
}

TEST_CASE("stream_list filters by prefix in name order and says when the limit cut it", "[e2e][broker]") {
  temp_dir dir;
  test_server server(with_data(dir));
  auto c = connect_to(server.port());
  for (const char* name : {"orders.us", "chat.1", "orders.eu", "orders.asia", "chat.2"})
    REQUIRE(c->append(name, text("x")));
  bool more = true;
  auto orders = c->stream_list("orders.", 0, &more);
  REQUIRE(orders);
  REQUIRE(orders->size() == 3);
  CHECK((*orders)[0].name == "orders.asia");
  CHECK((*orders)[1].name == "orders.eu");
  CHECK((*orders)[2].name == "orders.us");
  CHECK_FALSE(more);
  auto first_two = c->stream_list("", 2, &more);
  REQUIRE(first_two);
  REQUIRE(first_two->size() == 2);
  CHECK((*first_two)[0].name == "chat.1");
  CHECK(more);
  auto all = c->stream_list();
  REQUIRE(all);
  CHECK(all->size() == 5);
  auto none = c->stream_list("nothing", 0, &more);
  REQUIRE(none);
  CHECK(none->empty());
  CHECK_FALSE(more);
}

TEST_CASE("stream_list answers at most the default limit of 1000 streams and at most 10000 when asked for more",
          "[e2e][broker]") {
  temp_dir dir;
  auto cfg = with_data(dir);
  cfg.durability = storage::durability::none;  // 10,001 streams: the limits are under test, not fsync
  cfg.max_frame = 16u << 20;                   // room for 10,000 items: the count limit, not the frame, cuts
  test_server server(cfg);
  auto c = connect_to(server.port());
  constexpr int streams = protocol::max_list_limit + 1;
  // Pipelined appends, one stream each.
  std::atomic<int> done{0};
  for (int i = 0; i < streams; ++i)
    c->async_append("s." + std::to_string(100000 + i), text("x"), [&](auto r) { done += r ? 1 : 1000000; });
  REQUIRE(wait_until([&] { return done >= streams; }, std::chrono::seconds(60)));
  REQUIRE(done == streams);
  bool more = false;
  auto dflt = c->stream_list("s.", 0, &more);
  REQUIRE(dflt);
  CHECK(dflt->size() == protocol::default_list_limit);
  CHECK(more);
  auto big = c->stream_list("s.", 1'000'000, &more);
  REQUIRE(big);
  CHECK(big->size() == protocol::max_list_limit);
  CHECK(more);
}

TEST_CASE("set_stream_retention answers with the stream's own limits, survives a restart and clears to the default",
          "[e2e][broker]") {
  temp_dir dir;
  auto cfg = with_data(dir);
  cfg.retention_max_records = 500;
  {
    test_server server(cfg);
    auto c = connect_to(server.port());
    REQUIRE(c->append("orders", text("x")));
    auto set = c->set_stream_retention("orders", {.max_records = 10, .max_age = milliseconds(60'000), .max_bytes = 0});
    REQUIRE(set);
    CHECK(set->own_retention);
    CHECK(set->retention.max_records == 10);
    CHECK(set->retention.max_age == milliseconds(60'000));
    CHECK(set->retention.max_bytes == 0);
    CHECK(set->last_seq == 1);
  }
  test_server server(cfg);
  auto c = connect_to(server.port());
  auto st = c->stream_info("orders");
  REQUIRE(st);
  CHECK(st->own_retention);
  CHECK(st->retention.max_records == 10);
  auto cleared = c->clear_stream_retention("orders");
  REQUIRE(cleared);
  CHECK_FALSE(cleared->own_retention);
  CHECK(cleared->retention.max_records == 500);
  CHECK(cleared->retention.max_age == milliseconds(0));
  auto listed = c->stream_list("orders");
  REQUIRE(listed);
  REQUIRE(listed->size() == 1);
  CHECK_FALSE(listed->front().own_retention);
}

TEST_CASE("set_stream_retention on an unknown stream creates it empty, and appends continue it", "[e2e][broker]") {
  temp_dir dir;
  test_server server(with_data(dir));
  auto c = connect_to(server.port());
  auto set = c->set_stream_retention("new.stream", {.max_records = 3});
  REQUIRE(set);
  CHECK(set->name == "new.stream");
  CHECK(set->first_seq == 1);
  CHECK(set->last_seq == 0);
  CHECK(set->records == 0);
  auto empty = c->read("new.stream");
  REQUIRE(empty);
  CHECK(empty->records.empty());
  auto ack = c->append("new.stream", text("first"));
  REQUIRE(ack);
  CHECK(ack->seq == 1);
  CHECK(ack->epoch == set->epoch);
}

TEST_CASE("the broker trims by a stream's own retention instead of the default", "[e2e][broker]") {
  temp_dir dir;
  auto cfg = with_data(dir);
  cfg.retention_max_records = 8;
  test_server server(cfg);
  auto c = connect_to(server.port());
  REQUIRE(c->set_stream_retention("short", {.max_records = 2}));
  for (int i = 0; i < 12; ++i) {
    REQUIRE(c->append("short", text("s")));
    REQUIRE(c->append("normal", text("n")));
  }
  REQUIRE(wait_until([&] {
    auto s = c->stream_info("short");
    auto n = c->stream_info("normal");
    return s && n && s->records == 2 && n->records == 8;
  }));
  auto s = c->stream_info("short");
  CHECK(s->first_seq == 11);
  auto old = c->read("short", 1);
  REQUIRE_FALSE(old);
  CHECK(old.error() == errc::trimmed);
}

TEST_CASE("stream_info and clearing an unknown stream answer not_found and create nothing", "[e2e][broker]") {
  temp_dir dir;
  test_server server(with_data(dir));
  auto c = connect_to(server.port());
  auto info = c->stream_info("ghost");
  REQUIRE_FALSE(info);
  CHECK(info.error() == errc::not_found);
  auto clear = c->clear_stream_retention("ghost");
  REQUIRE_FALSE(clear);
  CHECK(clear.error() == errc::not_found);
  auto all = c->stream_list();
  REQUIRE(all);
  CHECK(all->empty());
  CHECK(c->connected());
}

TEST_CASE("bad stream names, prefixes and limits over the maximum answer bad_request and change nothing",
          "[e2e][broker]") {
  temp_dir dir;
  test_server server(with_data(dir));
  auto c = connect_to(server.port());
  REQUIRE(c->append("kept", text("x")));
  const std::string long_name(256, 'n');
  for (const std::string& name : {std::string(), long_name}) {
    auto info = c->stream_info(name);
    REQUIRE_FALSE(info);
    CHECK(info.error() == errc::bad_request);
    auto set = c->set_stream_retention(name, {.max_records = 1});
    REQUIRE_FALSE(set);
    CHECK(set.error() == errc::bad_request);
    auto clear = c->clear_stream_retention(name);
    REQUIRE_FALSE(clear);
    CHECK(clear.error() == errc::bad_request);
  }
  auto long_prefix = c->stream_list(long_name);
  REQUIRE_FALSE(long_prefix);
  CHECK(long_prefix.error() == errc::bad_request);
  const std::uint64_t over = protocol::max_retention_limit + 1;
  for (const stream_retention& limits :
       {stream_retention{.max_records = over}, stream_retention{.max_age = milliseconds(over)},
        stream_retention{.max_bytes = over}, stream_retention{.max_age = milliseconds(-1)}}) {
    auto set = c->set_stream_retention("kept", limits);
    REQUIRE_FALSE(set);
    CHECK(set.error() == errc::bad_request);
    auto fresh = c->set_stream_retention("not-created", limits);
    REQUIRE_FALSE(fresh);
    CHECK(fresh.error() == errc::bad_request);
  }
  // The largest limit is accepted.
  auto max = c->set_stream_retention("kept", {.max_records = protocol::max_retention_limit});
  REQUIRE(max);
  CHECK(max->retention.max_records == protocol::max_retention_limit);
  auto all = c->stream_list();
  REQUIRE(all);
  REQUIRE(all->size() == 1);
  CHECK(all->front().name == "kept");
  CHECK(c->connected());
}

TEST_CASE("stream administration needs the log capability and a data dir", "[e2e][broker]") {
  temp_dir dir;
  test_server server(with_data(dir));
  {
    const std::array<std::string_view, 1> caps{"routing"};
    raw_session s(server.port(), caps);
    s.raw.send(s.b.stream_info(2, "x"));
    CHECK(s.error(2) == protocol::errc::unsupported_message);
    s.raw.send(s.b.stream_list(3, "", 0));
    CHECK(s.error(3) == protocol::errc::unsupported_message);
    s.raw.send(s.b.set_retention(4, "x", {1, 0, 0}));
    CHECK(s.error(4) == protocol::errc::unsupported_message);
    // Still open: a ping is answered.
    s.raw.send(s.b.ping(5));
    const auto* pong = s.raw.next(s.f);
    REQUIRE(pong != nullptr);
    CHECK(pong->message_type() == protocol::wire::Message::Pong);
  }
  test_server no_data;  // default test config: no data dir
  auto c = connect_to(no_data.port());
  auto info = c->stream_info("x");
  REQUIRE_FALSE(info);
  CHECK(info.error() == errc::not_supported);
  auto set = c->set_stream_retention("x", {.max_records = 1});
  REQUIRE_FALSE(set);
  CHECK(set.error() == errc::not_supported);
  auto list = c->stream_list();
  REQUIRE_FALSE(list);
  CHECK(list.error() == errc::not_supported);
}

TEST_CASE("set retention with request id 0 is still answered, with id 0", "[e2e][broker]") {
  temp_dir dir;
  test_server server(with_data(dir));
  const std::array<std::string_view, 1> caps{"log"};
  raw_session s(server.port(), caps);
  s.raw.send(s.b.set_retention(0, "cfg", {4, 0, 0}));
  const auto* f = s.raw.next(s.f);
  REQUIRE(f != nullptr);
  REQUIRE(f->message_type() == protocol::wire::Message::StreamInfoResult);
  CHECK(f->request_id() == 0);
  CHECK(f->message_as_StreamInfoResult()->stream()->str() == "cfg");
  CHECK(f->message_as_StreamInfoResult()->max_records() == 4);
  CHECK(f->message_as_StreamInfoResult()->own_retention());
}

TEST_CASE("delete_stream answers what the stream held and a later append starts a new stream", "[e2e][broker]") {
  temp_dir dir;
  test_server server(with_data(dir));
  auto c = connect_to(server.port());
  for (int i = 0; i < 3; ++i) REQUIRE(c->append("orders", text("o")));
  REQUIRE(c->append("other", text("x")));
  REQUIRE(c->set_stream_retention("orders", {.max_records = 100}));
  const auto before = c->stream_info("orders");
  REQUIRE(before);
  auto gone = c->delete_stream("orders");
  REQUIRE(gone);
  CHECK(gone->name == "orders");
  CHECK(gone->records == 3);
  CHECK(gone->last_seq == 3);
  CHECK(gone->epoch == before->epoch);
  CHECK(gone->own_retention);
  CHECK(c->stream_info("orders").error() == errc::not_found);
  CHECK(c->read("orders").error() == errc::not_found);
  auto all = c->stream_list();
  REQUIRE(all);
  REQUIRE(all->size() == 1);
  CHECK(all->front().name == "other");
  auto again = c->append("orders", text("new"));
  REQUIRE(again);
  CHECK(again->seq == 1);
  CHECK(again->epoch != before->epoch);
  CHECK_FALSE(c->stream_info("orders")->own_retention);
}

TEST_CASE("delete_stream of an unknown stream answers not_found and a bad name bad_request", "[e2e][broker]") {
  temp_dir dir;
  test_server server(with_data(dir));
  auto c = connect_to(server.port());
  CHECK(c->delete_stream("ghost").error() == errc::not_found);
  CHECK(c->delete_stream("").error() == errc::bad_request);
  CHECK(c->delete_stream(std::string(256, 'n')).error() == errc::bad_request);
  CHECK(c->connected());
}

TEST_CASE("a stream delete comes after the appends sent before it and before those sent after it", "[e2e][broker]") {
  temp_dir dir;
  test_server server(with_data(dir));
  const std::array<std::string_view, 1> caps{"log"};
  raw_session s(server.port(), caps);
  // Pipelined on one connection: two appends, the delete, one append.
  s.raw.send(s.b.append(2, "s", test::wire_bytes_of("a")));
  s.raw.send(s.b.append(3, "s", test::wire_bytes_of("b")));
  s.raw.send(s.b.stream_delete(4, "s"));
  s.raw.send(s.b.append(5, "s", test::wire_bytes_of("c")));
  s.raw.send(s.b.ping(6));
  std::uint64_t deleted_records = 0, last_seq = 0, deleted_epoch = 0, last_epoch = 0;
  for (int i = 0; i < 5; ++i) {
    const auto* f = s.raw.next(s.f);
    REQUIRE(f != nullptr);
    if (f->message_type() == protocol::wire::Message::StreamInfoResult) {
      CHECK(f->request_id() == 4);
      deleted_records = f->message_as_StreamInfoResult()->records();
      deleted_epoch = f->message_as_StreamInfoResult()->epoch();
    } else if (f->message_type() == protocol::wire::Message::Appended) {
      if (f->request_id() == 5) {
        last_seq = f->message_as_Appended()->seq();
        last_epoch = f->message_as_Appended()->epoch();
      }
    } else {
      CHECK(f->message_type() == protocol::wire::Message::Pong);
    }
  }
  CHECK(deleted_records == 2);
  CHECK(last_seq == 1);
  CHECK(last_epoch != deleted_epoch);
}

TEST_CASE("retention limits for a stream name with spaces or control bytes answer bad_request and create nothing",
          "[e2e][broker]") {
  temp_dir dir;
  test_server server(with_data(dir));
  auto c = connect_to(server.port());
  for (const std::string name : {"bad name with spaces", "tab\there", "caf\xc3\xa9"}) {
    INFO(name);
    auto set = c->set_stream_retention(name, {.max_records = 1});
    REQUIRE_FALSE(set);
    CHECK(set.error() == errc::bad_request);
  }
  auto all = c->stream_list();
  REQUIRE(all);
  CHECK(all->empty());
  // A stream an append made under such a name can still be cleared and deleted.
  REQUIRE(c->append("odd name", text("x")));
  CHECK(c->clear_stream_retention("odd name"));
  CHECK(c->delete_stream("odd name"));
}

TEST_CASE("stream changes are logged once on disk, saying whether a retention change created the stream",
          "[e2e][broker]") {
  // The sink is added while no broker runs (spdlog's sink list is not
  // thread-safe), and removed after this one stopped.
  auto logger = spdlog::get("broker");
  if (!logger) logger = spdlog::stderr_color_mt("broker");
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(200);
  logger->sinks().push_back(sink);
  {
    temp_dir dir;
    auto cfg = with_data(dir);
    cfg.log_level = "info";
    test_server server(cfg);
    auto c = connect_to(server.port());
    REQUIRE(c->append("old", text("x")));
    REQUIRE(c->set_stream_retention("old", {.max_records = 3}));
    REQUIRE(c->set_stream_retention("fresh", {.max_records = 4}));
    REQUIRE(c->clear_stream_retention("old"));
    CHECK(c->clear_stream_retention("ghost").error() == errc::not_found);
    REQUIRE(c->delete_stream("old"));
    c->close();
    server.stop();
  }
  logger->sinks().pop_back();
  logger->set_level(spdlog::level::warn);
  std::string all;
  int old_set = 0;
  for (const auto& line : sink->last_formatted()) {
    all += line;
    if (line.find("stream=old retention set: max_records=3 max_age_ms=0 max_bytes=0") != std::string::npos) {
      ++old_set;
      CHECK(line.find("created") == std::string::npos);
    }
  }
  CHECK(old_set == 1);
  CHECK(all.find("stream=fresh retention set: max_records=4 max_age_ms=0 max_bytes=0 (stream created, empty)") !=
        std::string::npos);
  CHECK(all.find("stream=old retention cleared") != std::string::npos);
  CHECK(all.find("ghost") == std::string::npos);  // not_found: nothing was done, nothing logged
  CHECK(all.find("stream=old deleted: 1 records") != std::string::npos);
}
