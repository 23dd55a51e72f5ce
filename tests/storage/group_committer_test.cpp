// Group commit over a real LMDB log in a temporary folder. Completions run
// on the committer's writer thread; a completion that waits on a latch is
// how these tests hold the writer still while more appends queue up.

#include "storage/group_committer.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>

using namespace switchyard::storage;
using switchyard::test::wait_until;

namespace {

// A log in a fresh folder, removed afterwards.
struct temp_log {
  switchyard::test::temp_dir dir{"switchyard-gc"};
  std::unique_ptr<sequence_log> log;
  explicit temp_log(durability mode = durability::sync, std::size_t map = 64u << 20, std::size_t max_map = 64u << 20) {
    log_options o;
    o.dir = dir.path();
    o.mode = mode;
    o.initial_map_size = map;
    o.max_map_size = max_map;
    auto opened = sequence_log::open(o);
    REQUIRE(opened);
    log = std::move(*opened);
  }
  ~temp_log() { log.reset(); }  // before the folder goes
};

// Blocks the thread that calls wait() until open() is called.
struct gate {
  std::mutex mu;
  std::condition_variable cv;
  bool is_open = false;
  std::atomic<bool> reached{false};
  void wait() {
    reached = true;
    std::unique_lock lock(mu);
    cv.wait_for(lock, std::chrono::seconds(30), [&] { return is_open; });
  }
  void open() {
    {
      std::lock_guard lock(mu);
      is_open = true;
    }
    cv.notify_all();
  }
};

std::vector<std::byte> bytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), reinterpret_cast<const std::byte*>(s.data()) + s.size()};
}

}  // namespace

TEST_CASE("every append completes with its stream's next sequence, across threads", "[storage]") {
  temp_log t;
  std::mutex mu;
  std::map<std::string, std::vector<std::uint64_t>> seen;
  std::atomic<int> failures{0}, done{0};
  constexpr int threads = 4, per_thread = 1000;
  {
    group_committer gc(*t.log);
    std::vector<std::thread> workers;
    for (int w = 0; w < threads; ++w) {
      workers.emplace_back([&, w] {
        const std::string stream = w % 2 ? "odd" : "even";
        const auto payload = bytes("payload");
        for (int i = 0; i < per_thread; ++i) {
          gc.append(stream, payload, [&, stream](std::expected<append_ack, std::error_code> r) {
            if (!r)
              ++failures;
            else {
              std::lock_guard lock(mu);
              seen[stream].push_back(r->seq);
            }
            ++done;
          });
        }
      });
    }
    for (auto& w : workers) w.join();
    REQUIRE(wait_until([&] { return done == threads * per_thread; }, std::chrono::seconds(60)));
  }
  CHECK(failures == 0);
  for (const std::string stream : {"odd", "even"}) {
    auto& v = seen[stream];
    std::sort(v.begin(), v.end());
    REQUIRE(v.size() == 2 * per_thread);
    for (std::size_t i = 0; i < v.size(); ++i) CHECK(v[i] == i + 1);
    auto info = t.log->info(stream);
    REQUIRE(info);
    CHECK(info->last_seq == 2 * per_thread);
  }
}

TEST_CASE("appends that queue up during a commit are committed together", "[storage]") {
  temp_log t;
  gate g;
  std::atomic<int> done{0};
  group_committer gc(*t.log);
  const auto payload = bytes("x");
  // The first completion holds the writer thread, as a slow fsync would.
  gc.append("s", payload, [&](auto) {
    g.wait();
    ++done;
  });
  REQUIRE(wait_until([&] { return g.reached.load(); }));
  for (int i = 0; i < 100; ++i) gc.append("s", payload, [&](auto r) { done += r ? 1 : 1000; });
  g.open();
  REQUIRE(wait_until([&] { return done == 101; }));
  const auto s = gc.stats();
  CHECK(s.batches == 2);
  CHECK(s.largest_batch == 100);
  CHECK(s.records == 101);
}

TEST_CASE("a batch holds at most max_batch_records appends", "[storage]") {
  temp_log t;
  gate g;
  std::atomic<int> done{0};
  group_committer gc(*t.log, {.max_batch_records = 10});
  const auto payload = bytes("x");
  gc.append("s", payload, [&](auto) {
    g.wait();
    ++done;
  });
  REQUIRE(wait_until([&] { return g.reached.load(); }));
  for (int i = 0; i < 100; ++i) gc.append("s", payload, [&](auto) { ++done; });
  g.open();
  REQUIRE(wait_until([&] { return done == 101; }));
  CHECK(gc.stats().largest_batch == 10);
  CHECK(gc.stats().batches == 11);
}

TEST_CASE("the committer counts one fsync per batch in the sync mode and one per sync in the batch mode", "[storage]") {
  {
    temp_log t;
    const auto opened = t.log->fsyncs();  // the new log's format stamp
    group_committer gc(*t.log);
    std::atomic<int> done{0};
    // One at a time: a batch each.
    for (int i = 1; i <= 5; ++i) {
      gc.append("s", bytes("x"), [&](auto) { ++done; });
      REQUIRE(wait_until([&] { return done == i; }));
    }
    const auto s = gc.stats();
    CHECK(s.batches == 5);
    CHECK(s.fsyncs == opened + 5);
    CHECK(s.syncs == 0);
  }
  temp_log t(durability::batch);
  group_committer gc(*t.log, {.sync_interval = std::chrono::milliseconds(20)});
  std::atomic<int> done{0};
  for (int i = 0; i < 10; ++i) gc.append("b", bytes("x"), [&](auto) { ++done; });
  REQUIRE(wait_until([&] { return done == 10; }));
  CHECK(wait_until(
      [&] {
        const auto s = gc.stats();
        return s.syncs >= 1 && s.fsyncs == s.syncs;
      },
      std::chrono::seconds(10)));
}

TEST_CASE("a lone append is committed in a batch of its own", "[storage]") {
  temp_log t;
  group_committer gc(*t.log);
  std::atomic<std::uint64_t> seq{0};
  std::atomic<std::uint64_t> epoch{0};
  gc.append("alone", bytes("hi"), [&](auto r) {
    if (r) epoch = r->epoch;
    seq = r ? r->seq : 999;
  });
  REQUIRE(wait_until([&] { return seq.load() != 0; }));
  CHECK(seq == 1);
  auto info = t.log->info("alone");
  REQUIRE(info);
  CHECK(epoch == info->epoch);  // the ack carries the stream's epoch
  CHECK(gc.stats().batches == 1);
  CHECK(gc.stats().largest_batch == 1);
  auto read = t.log->read("alone", 1, 10, 1 << 20);
  REQUIRE(read);
  REQUIRE(read->records.size() == 1);
  CHECK(read->records[0].payload == bytes("hi"));
}

TEST_CASE("an invalid append fails at once without failing the others", "[storage]") {
  temp_log t;
  group_committer gc(*t.log);
  std::error_code bad;
  bool called_inline = false;
  gc.append("", bytes("x"), [&](auto r) {
    called_inline = true;
    bad = r ? std::error_code{} : r.error();
  });
  CHECK(called_inline);
  CHECK(bad == errc::invalid_argument);
  std::atomic<int> ok{0};
  for (int i = 0; i < 10; ++i) gc.append("fine", bytes("x"), [&](auto r) { ok += r ? 1 : 100; });
  REQUIRE(wait_until([&] { return ok.load() >= 10; }));
  CHECK(ok == 10);
}

TEST_CASE("the committer stores each append's destination with its payload, in one batch", "[storage]") {
  temp_log t;
  gate g;
  std::atomic<int> done{0};
  group_committer gc(*t.log);
  gc.append("s", bytes("first"), bytes("held"), [&](auto) {
    g.wait();
    ++done;
  });
  REQUIRE(wait_until([&] { return g.reached.load(); }));
  // These queue up behind the held commit and go in one batch: destinations of
  // different sizes, none, and a destination with an empty payload.
  for (int i = 0; i < 20; ++i) {
    const std::string destination = i % 3 == 0 ? "" : "destination " + std::string(static_cast<std::size_t>(i), 'k');
    gc.append("s", bytes("payload " + std::to_string(i)), bytes(destination), [&](auto r) { done += r ? 1 : 1000; });
  }
  gc.append("s", {}, bytes("no payload"), [&](auto r) { done += r ? 1 : 1000; });
  g.open();
  REQUIRE(wait_until([&] { return done == 22; }));
  CHECK(gc.stats().largest_batch == 21);

  auto read = t.log->read("s", 1, 100, 1 << 20);
  REQUIRE(read);
  REQUIRE(read->records.size() == 22);
  CHECK(read->records[0].destination == bytes("held"));
  CHECK(read->records[0].payload == bytes("first"));
  for (int i = 0; i < 20; ++i) {
    const auto& rec = read->records[static_cast<std::size_t>(i) + 1];
    const std::string destination = i % 3 == 0 ? "" : "destination " + std::string(static_cast<std::size_t>(i), 'k');
    CHECK(rec.destination == bytes(destination));
    CHECK(rec.payload == bytes("payload " + std::to_string(i)));
  }
  CHECK(read->records[21].destination == bytes("no payload"));
  CHECK(read->records[21].payload.empty());
}

TEST_CASE("an append with an oversized destination fails at once with invalid_argument", "[storage]") {
  temp_log t;
  group_committer gc(*t.log);
  std::error_code bad;
  bool called_inline = false;
  const std::vector<std::byte> too_large(max_destination_bytes + 1, std::byte{1});
  gc.append("s", bytes("x"), too_large, [&](auto r) {
    called_inline = true;
    bad = r ? std::error_code{} : r.error();
  });
  CHECK(called_inline);
  CHECK(bad == errc::invalid_argument);
  std::atomic<std::uint64_t> seq{0};
  const std::vector<std::byte> largest(max_destination_bytes, std::byte{2});
  gc.append("s", bytes("x"), largest, [&](auto r) { seq = r ? r->seq : 999; });
  REQUIRE(wait_until([&] { return seq.load() != 0; }));
  CHECK(seq == 1);
}

TEST_CASE("destroying the committer commits and completes everything queued", "[storage]") {
  temp_log t;
  std::atomic<int> done{0}, failed{0};
  {
    group_committer gc(*t.log);
    for (int i = 0; i < 2000; ++i)
      gc.append("drain", bytes("payload"), [&](auto r) {
        if (!r) ++failed;
        ++done;
      });
  }
  CHECK(done == 2000);
  CHECK(failed == 0);
  auto info = t.log->info("drain");
  REQUIRE(info);
  CHECK(info->last_seq == 2000);
}

TEST_CASE("a full log fails the batch with storage_full and keeps what was acknowledged", "[storage]") {
  temp_log t(durability::sync, 1u << 20, 1u << 20);
  std::mutex mu;
  std::vector<std::uint64_t> acked;
  std::atomic<int> done{0}, full{0};
  const std::vector<std::byte> payload(4096, std::byte{0x5a});
  constexpr int attempts = 1000;  // 4 MB: more than the 1 MiB map holds
  {
    group_committer gc(*t.log);
    for (int i = 0; i < attempts; ++i)
      gc.append("big", payload, [&](std::expected<append_ack, std::error_code> r) {
        if (r) {
          std::lock_guard lock(mu);
          acked.push_back(r->seq);
        } else if (r.error() == errc::storage_full) {
          ++full;
        }
        ++done;
      });
  }
  CHECK(done == attempts);
  CHECK(full > 0);
  REQUIRE_FALSE(acked.empty());
  std::sort(acked.begin(), acked.end());
  CHECK(acked.back() == acked.size());  // 1..n, contiguous
  auto read = t.log->read("big", 1, acked.size() + 10, std::size_t{1} << 30);
  REQUIRE(read);
  REQUIRE(read->records.size() == acked.size());
  for (const auto& rec : read->records) CHECK(rec.payload == payload);
}

TEST_CASE("in batch mode the committer syncs within the interval", "[storage]") {
  temp_log t(durability::batch);
  group_committer gc(*t.log, {.sync_interval = std::chrono::milliseconds(20)});
  std::atomic<int> done{0};
  for (int i = 0; i < 10; ++i) gc.append("b", bytes("x"), [&](auto) { ++done; });
  REQUIRE(wait_until([&] { return done == 10; }));
  // No further appends: the syncer must still sync the acknowledged ones.
  CHECK(wait_until([&] { return gc.stats().syncs >= 1; }, std::chrono::seconds(10)));

  // The control: with an interval of an hour nothing is synced meanwhile
  // (the destructor's final sync comes after this check).
  temp_log slow(durability::batch);
  group_committer hourly(*slow.log, {.sync_interval = std::chrono::hours(1)});
  std::atomic<int> done_hourly{0};
  for (int i = 0; i < 10; ++i) hourly.append("b", bytes("x"), [&](auto) { ++done_hourly; });
  REQUIRE(wait_until([&] { return done_hourly == 10; }));
  CHECK(hourly.stats().syncs == 0);
}

TEST_CASE("background retention trims every stream to its limit in bounded steps", "[storage]") {
  temp_log t;
  group_commit_options o;
  o.default_retention.max_records = 10;
  o.retention_interval = std::chrono::milliseconds(5);
  o.retention_step = 7;  // several passes are needed
  group_committer gc(*t.log, o);
  std::atomic<int> done{0};
  for (int i = 0; i < 50; ++i) {
    gc.append("a", bytes("x"), [&](auto) { ++done; });
    gc.append("b", bytes("y"), [&](auto) { ++done; });
  }
  REQUIRE(wait_until([&] { return done == 100; }));
  REQUIRE(wait_until([&] {
    auto a = t.log->info("a");
    auto b = t.log->info("b");
    return a && b && a->records == 10 && b->records == 10;
  }));
  auto a = t.log->info("a");
  CHECK(a->first_seq == 41);
  CHECK(a->last_seq == 50);
  // The pass counts what it trimmed after its last commit: wait for it.
  CHECK(wait_until([&] { return gc.stats().trimmed == 80; }));
  // Appending goes on from the last sequence, and retention keeps up.
  std::atomic<std::uint64_t> seq{0};
  gc.append("a", bytes("z"), [&](auto r) { seq = r ? r->seq : 999; });
  REQUIRE(wait_until([&] { return seq.load() != 0; }));
  CHECK(seq == 51);
  CHECK(wait_until([&] { return t.log->info("a")->first_seq == 42; }));
}

namespace {

// Collects what the batch handler reports (writer thread).
struct batch_log {
  std::mutex mu;
  std::vector<std::size_t> sizes;  // results per handler call
  std::vector<group_committer::token_result> results;
  std::vector<std::thread::id> threads;  // per result: the thread that committed it
  std::atomic<std::size_t> count{0};
  group_committer::batch_handler handler() {
    return [this](std::span<const group_committer::token_result> r) {
      std::lock_guard lock(mu);
      sizes.push_back(r.size());
      results.insert(results.end(), r.begin(), r.end());
      threads.insert(threads.end(), r.size(), std::this_thread::get_id());
      count += r.size();
    };
  }
};

std::string str(const std::vector<std::byte>& b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

}  // namespace

TEST_CASE("tokened appends report to the batch handler once per batch, in queue order", "[storage]") {
  temp_log t;
  gate g;
  batch_log seen;
  group_committer gc(*t.log);
  gc.set_batch_handler(seen.handler());
  // Hold the writer so that the tokened appends queue up together.
  gc.append("s", bytes("hold"), [&](auto) { g.wait(); });
  REQUIRE(wait_until([&] { return g.reached.load(); }));
  for (std::uint64_t i = 1; i <= 50; ++i)
    REQUIRE_FALSE(gc.append(i % 2 ? "odd" : "even", bytes("p" + std::to_string(i)), {}, i));
  gc.wake();
  g.open();
  REQUIRE(wait_until([&] { return seen.count == 50; }));
  std::lock_guard lock(seen.mu);
  CHECK(seen.sizes == std::vector<std::size_t>{50});
  std::uint64_t odd = 0, even = 0;
  for (std::uint64_t i = 1; i <= 50; ++i) {
    const auto& r = seen.results[i - 1];
    CHECK(r.token == i);
    REQUIRE(r.result);
    CHECK(r.result->seq == (i % 2 ? ++odd : ++even));
    CHECK(r.result->epoch == t.log->info(i % 2 ? "odd" : "even")->epoch);
  }
  auto rec = t.log->read("even", 1, 100, 1 << 20);
  REQUIRE(rec);
  REQUIRE(rec->records.size() == 25);
  CHECK(str(rec->records[0].payload) == "p2");
  CHECK(str(rec->records[24].payload) == "p50");
}

TEST_CASE("a backlog longer than a batch keeps each append's own stream, destination and payload", "[storage]") {
  temp_log t;
  gate g;
  batch_log seen;
  group_committer gc(*t.log, {.max_batch_records = 7});
  gc.set_batch_handler(seen.handler());
  gc.append("hold", bytes("x"), [&](auto) { g.wait(); });
  REQUIRE(wait_until([&] { return g.reached.load(); }));
  // Names, destinations and payloads of different lengths, so that any offset
  // mistake when the rest of the queue is carried over shows.
  for (std::uint64_t i = 1; i <= 40; ++i) {
    const std::string stream = "stream-" + std::string(i % 5 + 1, 'n');
    REQUIRE_FALSE(gc.append(stream, bytes(std::string(i, 'p')), bytes(std::string(i % 3, 's')), i));
  }
  gc.wake();
  g.open();
  REQUIRE(wait_until([&] { return seen.count == 40; }));
  {
    std::lock_guard lock(seen.mu);
    CHECK(seen.sizes == std::vector<std::size_t>{7, 7, 7, 7, 7, 5});
    for (std::uint64_t i = 1; i <= 40; ++i) CHECK(seen.results[i - 1].token == i);
  }
  for (std::uint64_t k = 0; k < 5; ++k) {
    const std::string stream = "stream-" + std::string(k + 1, 'n');
    auto rec = t.log->read(stream, 1, 100, 1 << 20);
    REQUIRE(rec);
    REQUIRE(rec->records.size() == 8);
    std::uint64_t i = k == 0 ? 5 : k;  // the first i with i % 5 == k
    for (const auto& r : rec->records) {
      CHECK(str(r.payload) == std::string(i, 'p'));
      CHECK(str(r.destination) == std::string(i % 3, 's'));
      i += 5;
    }
  }
}

TEST_CASE("an invalid tokened append is refused at once and never reaches the batch handler", "[storage]") {
  temp_log t;
  batch_log seen;
  group_committer gc(*t.log);
  gc.set_batch_handler(seen.handler());
  CHECK(gc.append("", bytes("x"), {}, 1) == errc::invalid_argument);
  CHECK_FALSE(gc.append("ok", bytes("x"), {}, 2));
  gc.wake();
  REQUIRE(wait_until([&] { return seen.count == 1; }));
  std::lock_guard lock(seen.mu);
  CHECK(seen.results.front().token == 2);
}

TEST_CASE("commit_queued commits bounded batches on the calling thread, in queue order", "[storage]") {
  temp_log t(durability::none);
  std::mutex mu;
  std::vector<std::pair<std::thread::id, std::size_t>> calls;  // thread, results
  std::vector<std::uint64_t> tokens;
  // The warmup append below is done; then the writer went idle.
  std::atomic<bool> settled{false}, idle_after{false};
  group_committer gc(*t.log, {.max_batch_records = 4, .test_hook = [&](commit_point p) {
                                if (p == commit_point::idle && settled) idle_after = true;
                              }});
  gc.set_batch_handler([&](std::span<const group_committer::token_result> r) {
    std::lock_guard lock(mu);
    calls.emplace_back(std::this_thread::get_id(), r.size());
    for (const auto& x : r) tokens.push_back(x.token);
  });
  // Let the writer thread settle into its wait first: an append with a
  // completion wakes it, and it sleeps again after committing it (tokened
  // appends do not wake it). Asleep, it holds no lock, so commit_queued
  // below does not leave the queue to it.
  gc.append("warmup", bytes("w"), [&](auto) { settled = true; });
  REQUIRE(wait_until([&] { return idle_after.load(); }));
  for (std::uint64_t i = 1; i <= 10; ++i) REQUIRE_FALSE(gc.append("s", bytes(std::string(i, 'x')), {}, i));
  // Should the writer still be between two looks at the queue, it takes
  // some too: both commit in queue order.
  int steps = 0;
  while (gc.commit_queued(3) && steps < 20) ++steps;
  CHECK_FALSE(gc.commit_queued());  // nothing left
  REQUIRE(wait_until([&] {
    std::lock_guard lock(mu);
    return tokens.size() == 10;
  }));
  std::lock_guard lock(mu);
  for (std::uint64_t i = 1; i <= 10; ++i) CHECK(tokens[i - 1] == i);
  bool here = false;
  for (const auto& [id, n] : calls) {
    CHECK(n <= 4);  // the writer's batches: max_batch_records
    if (id != std::this_thread::get_id()) continue;
    here = true;
    CHECK(n <= 3);  // ours: the max_records asked for
  }
  CHECK(here);  // commit_queued did commit on this thread
  // Each record kept its own payload across the partial takes.
  auto all = t.log->read("s", 1, 100, 1 << 20);
  REQUIRE(all);
  REQUIRE(all->records.size() == 10);
  for (std::size_t i = 0; i < all->records.size(); ++i) CHECK(str(all->records[i].payload) == std::string(i + 1, 'x'));
}

TEST_CASE("retention in each commit holds a stream to its record limit under back-to-back batches", "[storage]") {
  // No background pass (an hour apart, and only while no append waits):
  // only the commits themselves trim.
  temp_log t(durability::none);
  group_commit_options o;
  o.default_retention.max_records = 100;
  o.retention_interval = std::chrono::hours(1);
  group_committer gc(*t.log, o);
  std::atomic<std::uint64_t> acked{0}, failed{0};
  gc.set_batch_handler([&](std::span<const group_committer::token_result> r) {
    for (const auto& x : r) ++(x.result ? acked : failed);
  });
  constexpr int batches = 200, per_batch = 50;
  const auto payload = bytes(std::string(100, 'p'));
  std::uint64_t token = 0, most = 0;
  for (int b = 0; b < batches; ++b) {
    for (int i = 0; i < per_batch; ++i) REQUIRE_FALSE(gc.append("busy", payload, {}, ++token));
    for (int steps = 0; steps < 10 && gc.commit_queued(); ++steps) {
    }
    REQUIRE(wait_until([&] { return acked + failed == token; }));
    auto info = t.log->info("busy");
    REQUIRE(info);
    most = std::max(most, info->records);
    // Each commit trims what it put over the limit: never past it, let
    // alone by more than a batch.
    REQUIRE(info->records <= 100);
  }
  CHECK(failed == 0);
  CHECK(most == 100);
  auto info = t.log->info("busy");
  CHECK(info->last_seq == batches * per_batch);
  CHECK(info->first_seq == batches * per_batch - 99);
  CHECK(gc.stats().trimmed_in_commits == batches * per_batch - 100);
  CHECK(gc.stats().trimmed == gc.stats().trimmed_in_commits);
  auto read = t.log->read("busy", info->first_seq, 1000, 1 << 20);
  REQUIRE(read);
  CHECK(read->records.size() == 100);
}

TEST_CASE("retention in a commit trims at most the batch's records plus the slack per stream", "[storage]") {
  // A stream far over a limit it just got loses little per commit (bounded
  // work in the append's transaction); background passes catch up.
  temp_log t(durability::none);
  const auto payload = bytes("x");
  for (int i = 0; i < 10; ++i) {
    std::vector<append_item> items(100, append_item{"over", payload});
    REQUIRE(t.log->append(items));
  }
  REQUIRE(t.log->set_retention("over", {.max_records = 10}));
  group_commit_options o;
  o.retention_interval = std::chrono::hours(1);
  o.commit_trim_slack = 16;
  group_committer gc(*t.log, o);
  std::atomic<int> done{0}, batches{0};
  gc.set_batch_handler([&](std::span<const group_committer::token_result> r) {
    done += static_cast<int>(r.size());
    ++batches;
  });
  for (std::uint64_t i = 1; i <= 5; ++i) REQUIRE_FALSE(gc.append("over", payload, {}, i));
  while (gc.commit_queued()) {
  }
  REQUIRE(wait_until([&] { return done == 5; }));
  // Usually one commit; the writer thread may take some of the appends in
  // a commit of its own: each trims at most its records plus the slack.
  const int commits = batches.load();
  REQUIRE(commits >= 1);
  REQUIRE(commits <= 5);
  auto info = t.log->info("over");
  REQUIRE(info);
  CHECK(info->records == static_cast<std::uint64_t>(1000 + 5 - (5 + 16 * commits)));
  CHECK(info->first_seq == static_cast<std::uint64_t>(1 + 5 + 16 * commits));
}

TEST_CASE("a batch the full log refuses costs a logarithmic number of attempts, not one per append", "[storage]") {
  temp_log t(durability::none, 1u << 20, 1u << 20);
  // Fill the 1 MiB map until a single small append is refused.
  const auto small = bytes(std::string(500, 's'));
  for (int i = 0; i < 10'000; ++i)
    if (!t.log->append("fill", small)) break;
  REQUIRE_FALSE(t.log->append("fill", small));
  group_committer gc(*t.log, {.max_batch_records = 1024});
  // Let the writer thread settle into its wait first (tokened appends do
  // not wake it), so that this thread commits the queue in one batch.
  std::atomic<bool> settled{false};
  gc.append("warmup", bytes("w"), [&](auto) { settled = true; });
  REQUIRE(wait_until([&] { return settled.load(); }));
  std::atomic<int> full{0}, other{0};
  gc.set_batch_handler([&](std::span<const group_committer::token_result> r) {
    for (const auto& x : r) ++(!x.result && x.result.error() == errc::storage_full ? full : other);
  });
  for (std::uint64_t i = 1; i <= 1024; ++i) REQUIRE_FALSE(gc.append("s", small, {}, i));
  while (gc.commit_queued()) {
  }
  REQUIRE(wait_until([&] { return full + other == 1024; }));
  CHECK(full == 1024);
  // Per batch (the writer thread may have taken some of the queue as a
  // batch of its own): halving down the first halves (at most 10 levels),
  // each second half tried once whole, 2 log2(n) + 1 attempts where
  // splitting everything took 2n - 1.
  const auto stats = gc.stats();
  CHECK(stats.batches <= 3);
  CHECK(stats.full_attempts <= stats.batches * (2 * 10 + 1));
}

// The thread contract (group_committer.hpp): a commit on the caller's
// thread (the broker's loop, batch and none modes) never waits for a sync
// or a background retention step of the writer thread. Each test holds one
// of them through group_commit_options::test_hook and commits from another
// thread meanwhile, with a generous bound on the wait (never a speed
// assertion).

namespace {

constexpr auto bounded = std::chrono::seconds(10);

// A test hook that holds the first call at `at` (blocking the thread that
// makes it until the gate opens) and counts the writer's idle waits.
struct point_hold {
  commit_point at;
  gate g;
  std::atomic<int> calls{0};  // at `at`
  std::atomic<int> idles{0};
  std::function<void()> observe;  // called at every `at`, before holding (set before the committer starts)
  std::function<void(commit_point)> hook() {
    return [this](commit_point p) {
      if (p == commit_point::idle) ++idles;
      if (p != at) return;
      if (observe) observe();
      if (calls++ == 0) g.wait();
    };
  }
};

// Opens the gate when the test ends, passed or failed, so that no thread
// stays held after it.
struct open_on_exit {
  gate& g;
  ~open_on_exit() { g.open(); }
};

struct commit_call {
  bool queued = true;      // every append was queued
  bool more = false;       // what commit_queued returned
  std::thread::id thread;  // the thread that called it
};

// Queues tokened appends first..last to `stream`, then calls commit_queued,
// on a thread of its own.
std::future<commit_call> append_and_commit(group_committer& gc, std::string stream, std::uint64_t first,
                                           std::uint64_t last) {
  return std::async(std::launch::async, [&gc, stream = std::move(stream), first, last] {
    commit_call call;
    call.thread = std::this_thread::get_id();
    for (std::uint64_t i = first; i <= last; ++i)
      call.queued &= !gc.append(stream, bytes("r" + std::to_string(i)), {}, i);
    call.more = gc.commit_queued();
    return call;
  });
}

// Whether `stream` holds the records append_and_commit wrote for first..last.
bool holds(sequence_log& log, std::string_view stream, std::uint64_t first, std::uint64_t last) {
  auto read = log.read(stream, first, 1000, 1 << 20);
  if (!read || read->records.size() != last - first + 1) return false;
  for (std::uint64_t i = first; i <= last; ++i)
    if (str(read->records[i - first].payload) != "r" + std::to_string(i)) return false;
  return true;
}

// Two streams (a, b) 50 records over a default limit of 5, and a stream s
// that keeps everything (its own all-zero limits), in the batch mode; the
// committer's first background retention step is held.
struct held_retention {
  temp_log t{durability::batch};
  point_hold hold{commit_point::retention_step};
  batch_log seen;
  std::unique_ptr<group_committer> gc;
  // `observe` gets, at every retention step, the appends acknowledged so far.
  explicit held_retention(std::function<void(std::size_t)> observe = {}) {
    if (observe) hold.observe = [this, observe = std::move(observe)] { observe(seen.count.load()); };
    const auto payload = bytes("old");
    for (const std::string_view name : {"a", "b"}) {
      std::vector<append_item> items(55, append_item{name, payload});
      REQUIRE(t.log->append(items));
    }
    REQUIRE(t.log->set_retention("s", {}));
    group_commit_options o;
    o.default_retention.max_records = 5;
    o.retention_interval = std::chrono::milliseconds(1);
    o.sync_interval = std::chrono::hours(1);
    o.test_hook = hold.hook();
    gc = std::make_unique<group_committer>(*t.log, o);
    gc->set_batch_handler(seen.handler());
  }
  ~held_retention() {
    hold.g.open();
    gc.reset();
  }
};

}  // namespace

TEST_CASE("a commit on another thread goes on while the writer syncs a retention change", "[storage]") {
  temp_log t(durability::batch);
  point_hold hold{commit_point::sync};
  batch_log seen;
  std::promise<bool> changed;
  auto change_done = changed.get_future();
  group_commit_options o;
  o.sync_interval = std::chrono::hours(1);  // no periodic sync: the change's is the one held
  o.retention_interval = std::chrono::hours(1);
  o.test_hook = hold.hook();
  group_committer gc(*t.log, o);
  gc.set_batch_handler(seen.handler());
  gc.set_retention("cfg", retention{.max_records = 100}, [&](auto r) { changed.set_value(r.has_value()); });
  REQUIRE(wait_until([&] { return hold.g.reached.load(); }));  // the writer is about to fsync the change
  auto commit = append_and_commit(gc, "s", 1, 10);
  open_on_exit release{hold.g};
  REQUIRE(commit.wait_for(bounded) == std::future_status::ready);
  const commit_call call = commit.get();
  REQUIRE(call.queued);
  CHECK_FALSE(call.more);
  // Committed and acknowledged on the calling thread while the sync is
  // still held; the change is not acknowledged before its sync.
  REQUIRE(seen.count == 10);
  CHECK(change_done.wait_for(std::chrono::seconds(0)) == std::future_status::timeout);
  hold.g.open();
  REQUIRE(change_done.wait_for(bounded) == std::future_status::ready);
  CHECK(change_done.get());
  CHECK(gc.stats().syncs == 1);
  std::lock_guard lock(seen.mu);
  for (std::uint64_t i = 1; i <= 10; ++i) {
    REQUIRE(seen.results[i - 1].result);
    CHECK(seen.results[i - 1].result->seq == i);
    CHECK(seen.threads[i - 1] == call.thread);
  }
  CHECK(holds(*t.log, "s", 1, 10));
}

TEST_CASE("a commit on another thread leaves its appends to the writer while a retention step holds the log",
          "[storage]") {
  held_retention r;
  REQUIRE(wait_until([&] { return r.hold.g.reached.load(); }));  // the writer is in its first step
  auto commit = append_and_commit(*r.gc, "s", 1, 10);
  open_on_exit release{r.hold.g};
  REQUIRE(commit.wait_for(bounded) == std::future_status::ready);
  const commit_call call = commit.get();
  REQUIRE(call.queued);
  CHECK_FALSE(call.more);    // nothing left for the caller: the writer has them
  CHECK(r.seen.count == 0);  // the held step still holds the log
  CHECK(r.gc->stats().handed_off == 1);
  r.hold.g.open();
  REQUIRE(wait_until([&] { return r.seen.count == 10; }));
  {
    std::lock_guard lock(r.seen.mu);
    for (std::uint64_t i = 1; i <= 10; ++i) {
      REQUIRE(r.seen.results[i - 1].result);
      CHECK(r.seen.results[i - 1].token == i);
      CHECK(r.seen.results[i - 1].result->seq == i);
      CHECK(r.seen.threads[i - 1] != call.thread);  // the writer's
    }
  }
  CHECK(holds(*r.t.log, "s", 1, 10));
  // The pass still trims both streams to their limit.
  CHECK(wait_until([&] { return r.t.log->info("a")->records == 5 && r.t.log->info("b")->records == 5; }));
}

TEST_CASE("appends left to the writer during a retention pass are committed before its next step", "[storage]") {
  std::mutex mu;
  std::vector<std::size_t> acked_at_step;  // acknowledgements seen at each retention step
  held_retention r([&](std::size_t acked) {
    std::lock_guard lock(mu);
    acked_at_step.push_back(acked);
  });
  REQUIRE(wait_until([&] { return r.hold.g.reached.load(); }));
  auto commit = append_and_commit(*r.gc, "s", 1, 10);
  open_on_exit release{r.hold.g};
  REQUIRE(commit.wait_for(bounded) == std::future_status::ready);
  r.hold.g.open();
  // The pass goes on with its second stream's step, after the appends.
  REQUIRE(wait_until([&] {
    std::lock_guard lock(mu);
    return acked_at_step.size() >= 2;
  }));
  std::lock_guard lock(mu);
  CHECK(acked_at_step[0] == 0);
  CHECK(acked_at_step[1] == 10);
}

TEST_CASE("appends that commit_queued leaves to the writer while another thread commits are still committed",
          "[storage]") {
  temp_log t(durability::none);
  point_hold hold{commit_point::sync};  // for its idle count; nothing syncs in the none mode
  gate in_handler;
  batch_log seen;
  group_commit_options o;
  o.retention_interval = std::chrono::hours(1);
  o.test_hook = hold.hook();
  group_committer gc(*t.log, o);
  const auto record = seen.handler();
  gc.set_batch_handler([&](std::span<const group_committer::token_result> r) {
    record(r);
    if (r.front().token == 1) in_handler.wait();  // holds the log on the first committing thread
  });
  // The writer sleeps (tokened appends do not wake it): only the
  // hand-off can get it to commit what the second thread leaves.
  REQUIRE(wait_until([&] { return hold.idles.load() >= 1; }));
  auto first = append_and_commit(gc, "s", 1, 1);
  open_on_exit release_first{in_handler};
  REQUIRE(wait_until([&] { return in_handler.reached.load(); }));
  auto second = append_and_commit(gc, "s", 2, 11);
  REQUIRE(second.wait_for(bounded) == std::future_status::ready);
  const commit_call call = second.get();
  REQUIRE(call.queued);
  CHECK_FALSE(call.more);
  in_handler.open();
  REQUIRE(first.wait_for(bounded) == std::future_status::ready);
  REQUIRE(wait_until([&] { return seen.count == 11; }));
  std::lock_guard lock(seen.mu);
  for (std::uint64_t i = 1; i <= 11; ++i) {
    CHECK(seen.results[i - 1].token == i);
    REQUIRE(seen.results[i - 1].result);
    CHECK(seen.results[i - 1].result->seq == i);
  }
  CHECK(seen.threads[1] != call.thread);
  CHECK(holds(*t.log, "s", 1, 11));
}

TEST_CASE("a commit on another thread goes on while the batch mode's periodic sync runs", "[storage]") {
  temp_log t(durability::batch);
  point_hold hold{commit_point::sync};
  batch_log seen;
  group_commit_options o;
  o.sync_interval = std::chrono::milliseconds(1);
  o.retention_interval = std::chrono::hours(1);
  o.test_hook = hold.hook();
  group_committer gc(*t.log, o);
  gc.set_batch_handler(seen.handler());
  // A commit for the syncer to sync; its sync is then held.
  REQUIRE_FALSE(gc.append("s", bytes("r1"), {}, 1));
  gc.commit_queued();
  REQUIRE(wait_until([&] { return hold.g.reached.load(); }));
  auto commit = append_and_commit(gc, "s", 2, 11);
  open_on_exit release{hold.g};
  REQUIRE(commit.wait_for(bounded) == std::future_status::ready);
  CHECK(seen.count == 11);  // all committed, the sync still held
  hold.g.open();
  CHECK(wait_until([&] { return gc.stats().syncs >= 1; }));
  CHECK(holds(*t.log, "s", 1, 11));
}
