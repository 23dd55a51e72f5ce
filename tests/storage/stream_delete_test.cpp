// Deleting a stream over a real LMDB log in a temporary folder
// (sequence_log::delete_stream), and its place among appends in the group
// committer (group_committer::delete_stream).

#include "storage/group_committer.hpp"
#include "storage/raw_access.hpp"
#include "storage/sequence_log.hpp"
#include "tests/support/raw_log_values.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace switchyard::storage;
using std::chrono::milliseconds;
using switchyard::test::bytes_of;

namespace {

struct delete_env {
  switchyard::test::temp_dir dir{"switchyard-delete"};
  std::unique_ptr<sequence_log> log;

  explicit delete_env(durability mode = durability::sync) { reopen(mode); }
  ~delete_env() { log.reset(); }  // before the folder goes

  void reopen(durability mode = durability::sync) {
    log.reset();
    log_options o;
    o.dir = dir.path() / "log";
    o.mode = mode;
    o.initial_map_size = std::size_t{4} << 20;
    o.max_map_size = std::size_t{64} << 20;
    auto opened = sequence_log::open(o);
    REQUIRE(opened);
    log = std::move(*opened);
  }

  void append(std::string_view stream, int n, std::string_view payload = "x") {
    const auto bytes = std::as_bytes(std::span(payload.data(), payload.size()));
    for (int i = 0; i < n; ++i) REQUIRE(log->append(stream, bytes));
  }
};

}  // namespace

TEST_CASE("deleting a stream removes its records, metadata and own retention, and reports what it held", "[storage]") {
  delete_env env;
  env.append("a", 3, "abc");
  env.append("b", 2);
  REQUIRE(env.log->set_retention("a", {.max_records = 100}));
  auto gone = env.log->delete_stream("a");
  REQUIRE(gone);
  CHECK(gone->name == "a");
  CHECK(gone->first_seq == 1);
  CHECK(gone->last_seq == 3);
  CHECK(gone->records == 3);
  CHECK(gone->bytes == 9);
  REQUIRE(gone->own_retention);
  CHECK(gone->own_retention->max_records == 100);

  CHECK(env.log->info("a").error() == errc::not_found);
  CHECK(env.log->read("a", 0, 10, 1 << 20).error() == errc::not_found);
  auto all = env.log->list();
  REQUIRE(all);
  REQUIRE(all->size() == 1);
  CHECK((*all)[0].name == "b");
  auto b = env.log->read("b", 1, 10, 1 << 20);
  REQUIRE(b);
  CHECK(b->records.size() == 2);
  // No record of the deleted stream is left behind.
  const auto report = env.log->verify();
  CHECK(report.intact());
  CHECK(report.records == 2);
}

TEST_CASE("an append after a delete starts a new stream of that name from sequence 1 with a new epoch", "[storage]") {
  delete_env env;
  env.append("a", 5);
  REQUIRE(env.log->set_retention("a", {.max_records = 2}));
  const auto old = env.log->info("a");
  REQUIRE(old);
  REQUIRE(env.log->delete_stream("a"));
  auto seq = env.log->append("a", bytes_of("new"));
  REQUIRE(seq);
  CHECK(*seq == 1);
  auto now = env.log->info("a");
  REQUIRE(now);
  CHECK(now->epoch != old->epoch);
  CHECK(now->first_seq == 1);
  CHECK(now->records == 1);
  CHECK_FALSE(now->own_retention);  // the old stream's limits went with it
  CHECK(env.log->verify().intact());
}

TEST_CASE("a deleted stream stays deleted after the log is reopened", "[storage]") {
  delete_env env;
  env.append("a", 2);
  env.append("b", 1);
  REQUIRE(env.log->delete_stream("a"));
  env.reopen();
  CHECK(env.log->info("a").error() == errc::not_found);
  CHECK(env.log->info("b"));
  CHECK(env.log->verify().intact());
}

TEST_CASE("deleting an unknown stream is not_found and an invalid name invalid_argument", "[storage]") {
  delete_env env;
  env.append("a", 1);
  CHECK(env.log->delete_stream("nope").error() == errc::not_found);
  CHECK(env.log->delete_stream("").error() == errc::invalid_argument);
  CHECK(env.log->delete_stream(std::string(256, 's')).error() == errc::invalid_argument);
  CHECK(env.log->info("a"));
}

TEST_CASE("an empty stream made by a retention change can be deleted", "[storage]") {
  delete_env env;
  bool created = false;
  REQUIRE(env.log->set_retention("bad name", {.max_records = 1}, &created));
  CHECK(created);
  auto gone = env.log->delete_stream("bad name");
  REQUIRE(gone);
  CHECK(gone->records == 0);
  CHECK(env.log->info("bad name").error() == errc::not_found);
  auto all = env.log->list();
  REQUIRE(all);
  CHECK(all->empty());
}

TEST_CASE("set_retention tells whether it created the stream", "[storage]") {
  delete_env env;
  env.append("old", 1);
  bool created = true;
  REQUIRE(env.log->set_retention("old", {.max_records = 5}, &created));
  CHECK_FALSE(created);
  REQUIRE(env.log->set_retention("fresh", {.max_records = 5}, &created));
  CHECK(created);
}

TEST_CASE("a stream with a missing record is not deleted at all", "[storage][damage]") {
  namespace t = switchyard::test;
  delete_env env(durability::none);
  // Stream s holds 1..3 by its metadata; record 2 is missing.
  const auto r1 = t::record_value(1, 10, "", "one"), r3 = t::record_value(3, 30, "", "three");
  const auto meta = t::stream_meta(1, 1, 3, 3, 3 + 5 + 3), k1 = t::record_key(1, 1), k3 = t::record_key(1, 3);
  const raw_entry entries[] = {
      {raw_db::streams, bytes_of("s"), meta}, {raw_db::records, k1, r1}, {raw_db::records, k3, r3}};
  REQUIRE_FALSE(rewrite_raw(*env.log, entries));
  CHECK(env.log->delete_stream("s").error() == errc::corrupted);
  // All or nothing: record 1 (before the hole) is still there.
  auto info = env.log->info("s");
  REQUIRE(info);
  CHECK(info->records == 3);
  auto r = env.log->read("s", 1, 1, 1 << 20);
  REQUIRE(r);
  CHECK(r->records.size() == 1);
}

TEST_CASE("the group committer deletes a stream after the appends queued before it, and before those after it",
          "[storage]") {
  for (const auto mode : {durability::sync, durability::none}) {
    INFO("mode " << static_cast<int>(mode));
    delete_env env(mode);
    env.append("s", 2);
    const auto old_epoch = env.log->info("s")->epoch;
    group_committer gc(*env.log);
    std::mutex mu;
    std::vector<group_committer::token_result> acks;
    gc.set_batch_handler([&](std::span<const group_committer::token_result> r) {
      std::lock_guard lock(mu);
      acks.insert(acks.end(), r.begin(), r.end());
    });
    // Tokened appends do not wake the writer; the delete does, so it is
    // the first thing the writer sees queued.
    for (std::uint64_t token = 1; token <= 3; ++token) REQUIRE_FALSE(gc.append("s", bytes_of("before"), {}, token));
    std::promise<std::expected<group_committer::stream_change, std::error_code>> deleted;
    gc.delete_stream("s", [&](auto r) { deleted.set_value(r); });
    for (std::uint64_t token = 4; token <= 5; ++token) REQUIRE_FALSE(gc.append("s", bytes_of("after"), {}, token));
    if (mode == durability::sync)
      gc.wake();
    else
      while (gc.commit_queued()) {
      }
    auto f = deleted.get_future();
    REQUIRE(f.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
    const auto r = f.get();
    REQUIRE(r);
    CHECK(r->info.records == 5);  // the two appended directly and the three queued before it
    CHECK(r->info.last_seq == 5);
    gc.wake();
    // The two queued after it went into a new stream.
    for (int i = 0; i < 10'000; ++i) {
      {
        std::lock_guard lock(mu);
        if (acks.size() == 5) break;
      }
      std::this_thread::sleep_for(milliseconds(1));
    }
    {
      std::lock_guard lock(mu);
      REQUIRE(acks.size() == 5);
      for (const auto& a : acks) {
        REQUIRE(a.result);
        if (a.token >= 4) CHECK(a.result->epoch != old_epoch);
      }
    }
    auto now = env.log->info("s");
    REQUIRE(now);
    CHECK(now->epoch != old_epoch);
    CHECK(now->first_seq == 1);
    CHECK(now->last_seq == 2);
  }
}

TEST_CASE("the group committer reports a retention change that created its stream", "[storage]") {
  delete_env env;
  env.append("old", 1);
  group_committer gc(*env.log);
  for (const auto& [stream, created] : {std::pair{"old", false}, std::pair{"fresh", true}}) {
    std::promise<std::expected<group_committer::stream_change, std::error_code>> done;
    gc.change_retention(stream, retention{.max_records = 3}, [&](auto r) { done.set_value(r); });
    auto f = done.get_future();
    REQUIRE(f.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
    const auto r = f.get();
    REQUIRE(r);
    CHECK(r->created == created);
  }
}
