// Per-stream retention over a real LMDB log in a temporary folder: the
// override's persistence (sequence_log), its use by background retention
// instead of the default and clearing it (group_committer), and list by
// prefix. Wall-clock time comes from an injected clock.

#include "storage/group_committer.hpp"
#include "storage/sequence_log.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <future>
#include <string>
#include <thread>

using namespace switchyard::storage;
using std::chrono::milliseconds;
using switchyard::test::wait_until;

namespace {

// A log in a fresh folder, on a hand-driven wall clock; reopenable.
struct retention_env {
  switchyard::test::temp_dir dir{"switchyard-retention"};
  std::atomic<std::uint64_t> clock_ms{1'000'000};
  std::unique_ptr<sequence_log> log;

  retention_env() { reopen(); }
  ~retention_env() { log.reset(); }  // before the folder goes

  void reopen(durability mode = durability::sync) {
    log.reset();
    log_options o;
    o.dir = dir.path() / "log";
    o.mode = mode;
    o.initial_map_size = std::size_t{4} << 20;
    o.max_map_size = std::size_t{64} << 20;
    o.wall_clock_ms = [this] { return clock_ms.load(); };
    auto opened = sequence_log::open(o);
    REQUIRE(opened);
    log = std::move(*opened);
  }

  void append(std::string_view stream, int n, std::string_view payload = "x") {
    const auto bytes = std::as_bytes(std::span(payload.data(), payload.size()));
    for (int i = 0; i < n; ++i) REQUIRE(log->append(stream, bytes));
  }

  stream_info info(std::string_view stream) {
    auto r = log->info(stream);
    REQUIRE(r);
    return *r;
  }
};

group_commit_options fast_retention(retention default_limits = {}) {
  group_commit_options o;
  o.default_retention = default_limits;
  o.retention_interval = milliseconds(5);
  return o;
}

// set_retention / clear_retention through the committer, waited for.
std::expected<stream_info, std::error_code> change(group_committer& gc, std::string_view stream,
                                                   std::optional<retention> limits) {
  std::promise<std::expected<stream_info, std::error_code>> done;
  auto result = done.get_future();
  gc.set_retention(stream, limits, [&](std::expected<stream_info, std::error_code> r) { done.set_value(r); });
  REQUIRE(result.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  return result.get();
}

}  // namespace

TEST_CASE("a stream's own retention survives reopening the log", "[storage]") {
  retention_env env;
  env.append("orders", 3);
  env.append("plain", 1);
  auto set = env.log->set_retention("orders", {.max_records = 100, .max_age = milliseconds(60'000), .max_bytes = 4096});
  REQUIRE(set);
  REQUIRE(set->own_retention);
  CHECK(set->own_retention->max_records == 100);
  CHECK(set->last_seq == 3);
  const auto epoch = set->epoch;

  env.reopen();
  const auto orders = env.info("orders");
  REQUIRE(orders.own_retention);
  CHECK(orders.own_retention->max_records == 100);
  CHECK(orders.own_retention->max_age == milliseconds(60'000));
  CHECK(orders.own_retention->max_bytes == 4096);
  CHECK(orders.epoch == epoch);
  CHECK(orders.last_seq == 3);
  CHECK_FALSE(env.info("plain").own_retention);
  // list() reports it too, and the records are untouched.
  auto all = env.log->list();
  REQUIRE(all);
  REQUIRE(all->size() == 2);
  CHECK((*all)[0].name == "orders");
  CHECK((*all)[0].own_retention);
  CHECK_FALSE((*all)[1].own_retention);
  auto r = env.log->read("orders", 1, 10, 1 << 20);
  REQUIRE(r);
  CHECK(r->records.size() == 3);
}

TEST_CASE("setting a retention replaces the earlier one, and all-zero limits are an override too", "[storage]") {
  retention_env env;
  env.append("s", 1);
  REQUIRE(env.log->set_retention("s", {.max_records = 5}));
  REQUIRE(env.log->set_retention("s", {.max_bytes = 10}));
  auto own = env.info("s").own_retention;
  REQUIRE(own);
  CHECK(own->max_records == 0);
  CHECK(own->max_bytes == 10);
  REQUIRE(env.log->set_retention("s", {}));
  own = env.info("s").own_retention;
  REQUIRE(own);  // "keep everything", not "use the default"
  CHECK(own->max_records == 0);
  CHECK(own->max_age == milliseconds(0));
  CHECK(own->max_bytes == 0);
}

TEST_CASE("setting a retention on an unknown stream creates it empty and its first append is sequence 1", "[storage]") {
  retention_env env;
  env.append("older", 2);
  auto set = env.log->set_retention("fresh", {.max_records = 7});
  REQUIRE(set);
  CHECK(set->first_seq == 1);
  CHECK(set->last_seq == 0);
  CHECK(set->records == 0);
  CHECK(set->created_ms == env.clock_ms);
  CHECK(set->id > env.info("older").id);
  const auto payload = std::as_bytes(std::span("a", 1));
  auto seq = env.log->append("fresh", payload);
  REQUIRE(seq);
  CHECK(*seq == 1);
  CHECK(env.info("fresh").epoch == set->epoch);
  // Streams created after it get ids of their own and keep their records apart.
  env.append("newest", 1);
  env.append("fresh", 1);
  env.reopen();
  auto fresh = env.log->read("fresh", 1, 10, 1 << 20);
  REQUIRE(fresh);
  CHECK(fresh->records.size() == 2);
  CHECK(env.info("newest").records == 1);
  CHECK(env.info("fresh").own_retention->max_records == 7);
}

TEST_CASE("clearing a stream's own retention keeps the stream and drops only the override", "[storage]") {
  retention_env env;
  env.append("s", 2);
  REQUIRE(env.log->set_retention("s", {.max_records = 1}));
  auto cleared = env.log->clear_retention("s");
  REQUIRE(cleared);
  CHECK_FALSE(cleared->own_retention);
  CHECK(cleared->last_seq == 2);
  env.reopen();
  CHECK_FALSE(env.info("s").own_retention);
  CHECK(env.info("s").records == 2);
  // Clearing again is a no-op.
  CHECK(env.log->clear_retention("s"));
}

TEST_CASE("clearing the retention of an unknown stream is not_found and creates nothing", "[storage]") {
  retention_env env;
  auto r = env.log->clear_retention("ghost");
  REQUIRE_FALSE(r);
  CHECK(r.error() == errc::not_found);
  auto all = env.log->list();
  REQUIRE(all);
  CHECK(all->empty());
}

TEST_CASE("retention changes with a bad name or a negative age are invalid_argument and change nothing", "[storage]") {
  retention_env env;
  const std::string long_name(256, 'n');
  for (const std::string& name : {std::string(), long_name}) {
    auto set = env.log->set_retention(name, {.max_records = 1});
    REQUIRE_FALSE(set);
    CHECK(set.error() == errc::invalid_argument);
    auto clear = env.log->clear_retention(name);
    REQUIRE_FALSE(clear);
    CHECK(clear.error() == errc::invalid_argument);
  }
  auto negative = env.log->set_retention("s", {.max_age = milliseconds(-1)});
  REQUIRE_FALSE(negative);
  CHECK(negative.error() == errc::invalid_argument);
  auto all = env.log->list();
  REQUIRE(all);
  CHECK(all->empty());
}

TEST_CASE("list by prefix returns the matching streams in name order, at most max_count, and says when more",
          "[storage]") {
  retention_env env;
  for (const char* name : {"b.2", "a", "b.1", "b.3", "c", "b"}) env.append(name, 1);
  bool more = true;
  auto b = env.log->list("b.", 10, &more);
  REQUIRE(b);
  REQUIRE(b->size() == 3);
  CHECK((*b)[0].name == "b.1");
  CHECK((*b)[2].name == "b.3");
  CHECK_FALSE(more);
  auto cut = env.log->list("b", 2, &more);
  REQUIRE(cut);
  REQUIRE(cut->size() == 2);
  CHECK((*cut)[0].name == "b");
  CHECK((*cut)[1].name == "b.1");
  CHECK(more);
  auto exact = env.log->list("", 6, &more);
  REQUIRE(exact);
  CHECK(exact->size() == 6);
  CHECK_FALSE(more);
  auto none = env.log->list("zzz", 10, &more);
  REQUIRE(none);
  CHECK(none->empty());
  CHECK_FALSE(more);
}

TEST_CASE("background retention applies a stream's own record limit instead of the default", "[storage]") {
  retention_env env;
  env.append("own", 30);
  env.append("default", 30);
  REQUIRE(env.log->set_retention("own", {.max_records = 3}));
  group_committer gc(*env.log, fast_retention({.max_records = 10}));
  REQUIRE(wait_until([&] { return env.info("own").records == 3 && env.info("default").records == 10; }));
  CHECK(env.info("own").first_seq == 28);
  CHECK(env.info("default").first_seq == 21);
}

TEST_CASE("background retention applies a stream's own age limit on the injected wall clock", "[storage]") {
  retention_env env;
  env.append("aging", 5);  // at t0
  env.clock_ms += 10'000;
  env.append("aging", 5);  // at t0 + 10 s
  env.append("kept", 5);
  group_committer gc(*env.log, fast_retention());  // no default limits at all
  REQUIRE(change(gc, "aging", retention{.max_age = milliseconds(5'000)}));
  // Records 1..5 are 10 s old, 6..10 just written: only the first five go.
  REQUIRE(wait_until([&] { return env.info("aging").first_seq == 6; }));
  CHECK(env.info("aging").records == 5);
  // Time passes: the rest ages out too; the stream without limits keeps all.
  env.clock_ms += 6'000;
  REQUIRE(wait_until([&] { return env.info("aging").records == 0; }));
  CHECK(env.info("aging").first_seq == 11);
  CHECK(env.info("kept").records == 5);
}

TEST_CASE("an own retention without limits keeps everything while the default trims", "[storage]") {
  retention_env env;
  env.append("audit", 20);
  env.append("chat", 20);
  REQUIRE(env.log->set_retention("audit", {}));
  group_committer gc(*env.log, fast_retention({.max_records = 4}));
  // 16 records of "chat" go; then several more passes run (every 5 ms),
  // and none touches the stream that keeps everything.
  REQUIRE(wait_until([&] { return gc.stats().trimmed == 16; }));
  std::this_thread::sleep_for(milliseconds(50));
  CHECK(gc.stats().trimmed == 16);
  CHECK(env.info("chat").records == 4);
  CHECK(env.info("audit").records == 20);
}

TEST_CASE("clearing an own retention through the committer reverts the stream to the default", "[storage]") {
  retention_env env;
  env.append("s", 20);
  // Own limits before the committer starts, so no pass ever sees the default alone.
  REQUIRE(env.log->set_retention("s", {.max_records = 15}));
  group_committer gc(*env.log, fast_retention({.max_records = 5}));
  REQUIRE(wait_until([&] { return env.info("s").records == 15; }));
  auto cleared = change(gc, "s", std::nullopt);
  REQUIRE(cleared);
  CHECK_FALSE(cleared->own_retention);
  REQUIRE(wait_until([&] { return env.info("s").records == 5; }));
  CHECK(env.info("s").first_seq == 16);
}

TEST_CASE("the committer applies an own retention set while the default keeps everything", "[storage]") {
  retention_env env;
  env.append("s", 12);
  group_committer gc(*env.log, fast_retention());  // no default: passes start only with an override
  auto set = change(gc, "s", retention{.max_bytes = 4});
  REQUIRE(set);
  REQUIRE(wait_until([&] { return env.info("s").records == 4; }));
  CHECK(env.info("s").bytes == 4);
}

TEST_CASE("a retention change is synced before it completes in the batch and none modes", "[storage]") {
  for (auto mode : {durability::batch, durability::none}) {
    retention_env env;
    env.reopen(mode);
    group_commit_options o;
    o.sync_interval = std::chrono::hours(1);  // no periodic sync comes first
    group_committer gc(*env.log, o);
    std::atomic<std::uint64_t> syncs_seen{99};
    std::promise<void> done;
    gc.set_retention("cfg", retention{.max_records = 9}, [&](auto r) {
      CHECK(r);
      syncs_seen = gc.stats().syncs;
      done.set_value();
    });
    REQUIRE(done.get_future().wait_for(std::chrono::seconds(10)) == std::future_status::ready);
    CHECK(syncs_seen == 1);
    CHECK(env.info("cfg").own_retention->max_records == 9);
  }
}

TEST_CASE("the committer refuses a bad retention change at once and a clear of an unknown stream with not_found",
          "[storage]") {
  retention_env env;
  group_committer gc(*env.log);
  std::optional<std::error_code> at_once;
  gc.set_retention("", retention{.max_records = 1}, [&](auto r) { at_once = r ? std::error_code{} : r.error(); });
  REQUIRE(at_once);  // completed on this thread, before set_retention returned
  CHECK(*at_once == errc::invalid_argument);
  auto ghost = change(gc, "ghost", std::nullopt);
  REQUIRE_FALSE(ghost);
  CHECK(ghost.error() == errc::not_found);
  auto all = env.log->list();
  REQUIRE(all);
  CHECK(all->empty());
}

TEST_CASE("a stream's own byte limit holds in every commit under back-to-back batches", "[storage]") {
  retention_env env;
  group_commit_options o;
  o.default_retention.max_records = 1'000'000;   // the default would keep far more
  o.retention_interval = std::chrono::hours(1);  // no background pass: only commits trim
  group_committer gc(*env.log, o);
  REQUIRE(change(gc, "own", retention{.max_bytes = 4096}));
  std::atomic<std::uint64_t> acked{0};
  gc.set_batch_handler([&](std::span<const group_committer::token_result> r) {
    for (const auto& x : r) acked += x.result ? 1 : 0;
  });
  const std::string payload(100, 'b');
  const auto bytes = std::as_bytes(std::span(payload.data(), payload.size()));
  std::uint64_t token = 0;
  for (int batch = 0; batch < 100; ++batch) {
    for (int i = 0; i < 30; ++i) {
      REQUIRE_FALSE(gc.append("own", bytes, {}, ++token));
      REQUIRE_FALSE(gc.append("other", bytes, {}, ++token));
    }
    for (int steps = 0; steps < 10 && gc.commit_queued(); ++steps) {
    }
    REQUIRE(wait_until([&] { return acked == token; }));
    REQUIRE(env.info("own").bytes <= 4096);
  }
  CHECK(env.info("own").bytes == 4000);
  CHECK(env.info("own").last_seq == 3000);
  CHECK(env.info("other").records == 3000);  // under its (default) limit: untouched
}
