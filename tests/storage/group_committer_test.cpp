// Group commit over a real LMDB log in a temporary folder. Completions run
// on the committer's writer thread; a completion that waits on a latch is
// how these tests hold the writer still while more appends queue up.

#include "storage/group_committer.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <condition_variable>
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
            if (!r) ++failures;
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

TEST_CASE("the committer stores each append's subject with its payload, in one batch", "[storage]") {
  temp_log t;
  gate g;
  std::atomic<int> done{0};
  group_committer gc(*t.log);
  gc.append("s", bytes("first"), bytes("held"), [&](auto) {
    g.wait();
    ++done;
  });
  REQUIRE(wait_until([&] { return g.reached.load(); }));
  // These queue up behind the held commit and go in one batch: subjects of
  // different sizes, none, and a subject with an empty payload.
  for (int i = 0; i < 20; ++i) {
    const std::string subject = i % 3 == 0 ? "" : "subject " + std::string(static_cast<std::size_t>(i), 'k');
    gc.append("s", bytes("payload " + std::to_string(i)), bytes(subject), [&](auto r) { done += r ? 1 : 1000; });
  }
  gc.append("s", {}, bytes("no payload"), [&](auto r) { done += r ? 1 : 1000; });
  g.open();
  REQUIRE(wait_until([&] { return done == 22; }));
  CHECK(gc.stats().largest_batch == 21);

  auto read = t.log->read("s", 1, 100, 1 << 20);
  REQUIRE(read);
  REQUIRE(read->records.size() == 22);
  CHECK(read->records[0].subject == bytes("held"));
  CHECK(read->records[0].payload == bytes("first"));
  for (int i = 0; i < 20; ++i) {
    const auto& rec = read->records[static_cast<std::size_t>(i) + 1];
    const std::string subject = i % 3 == 0 ? "" : "subject " + std::string(static_cast<std::size_t>(i), 'k');
    CHECK(rec.subject == bytes(subject));
    CHECK(rec.payload == bytes("payload " + std::to_string(i)));
  }
  CHECK(read->records[21].subject == bytes("no payload"));
  CHECK(read->records[21].payload.empty());
}

TEST_CASE("an append with an oversized subject fails at once with invalid_argument", "[storage]") {
  temp_log t;
  group_committer gc(*t.log);
  std::error_code bad;
  bool called_inline = false;
  const std::vector<std::byte> too_large(max_subject_bytes + 1, std::byte{1});
  gc.append("s", bytes("x"), too_large, [&](auto r) {
    called_inline = true;
    bad = r ? std::error_code{} : r.error();
  });
  CHECK(called_inline);
  CHECK(bad == errc::invalid_argument);
  std::atomic<std::uint64_t> seq{0};
  const std::vector<std::byte> largest(max_subject_bytes, std::byte{2});
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
  std::atomic<std::size_t> count{0};
  group_committer::batch_handler handler() {
    return [this](std::span<const group_committer::token_result> r) {
      std::lock_guard lock(mu);
      sizes.push_back(r.size());
      results.insert(results.end(), r.begin(), r.end());
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

TEST_CASE("a backlog longer than a batch keeps each append's own stream, subject and payload", "[storage]") {
  temp_log t;
  gate g;
  batch_log seen;
  group_committer gc(*t.log, {.max_batch_records = 7});
  gc.set_batch_handler(seen.handler());
  gc.append("hold", bytes("x"), [&](auto) { g.wait(); });
  REQUIRE(wait_until([&] { return g.reached.load(); }));
  // Names, subjects and payloads of different lengths, so that any offset
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
      CHECK(str(r.subject) == std::string(i % 3, 's'));
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
  group_committer gc(*t.log, {.max_batch_records = 4});
  gc.set_batch_handler([&](std::span<const group_committer::token_result> r) {
    std::lock_guard lock(mu);
    calls.emplace_back(std::this_thread::get_id(), r.size());
    for (const auto& x : r) tokens.push_back(x.token);
  });
  // Let the writer thread settle into its wait first: an append with a
  // completion wakes it, and it sleeps again after committing it (tokened
  // appends do not wake it).
  std::atomic<bool> settled{false};
  gc.append("warmup", bytes("w"), [&](auto) { settled = true; });
  REQUIRE(wait_until([&] { return settled.load(); }));
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
  std::atomic<int> done{0};
  gc.set_batch_handler([&](std::span<const group_committer::token_result> r) { done += static_cast<int>(r.size()); });
  for (std::uint64_t i = 1; i <= 5; ++i) REQUIRE_FALSE(gc.append("over", payload, {}, i));
  while (gc.commit_queued()) {
  }
  REQUIRE(wait_until([&] { return done == 5; }));
  auto info = t.log->info("over");
  REQUIRE(info);
  CHECK(info->records == 1000 + 5 - (5 + 16));
  CHECK(info->first_seq == 22);
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
