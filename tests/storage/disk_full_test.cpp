// The sequence log on a filesystem that really fills up: a 16 MiB tmpfs
// (320 MiB for the one test that needs a stream that large),
// far smaller than the log's max_map_size (8 GiB by default), so the disk,
// not the map, is what runs out. Needs root to mount (CI runs tests as
// root); elsewhere each test skips itself with a warning.

#include "storage/errc.hpp"
#include "storage/group_committer.hpp"
#include "storage/sequence_log.hpp"
#include "tests/support/byte_pattern.hpp"
#include "tests/support/tmpfs.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <lmdb.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

namespace {

namespace sy = switchyard::storage;
using bytes = std::vector<std::byte>;
using switchyard::test::tmpfs_mount;
using switchyard::test::wait_until;

constexpr std::size_t kDisk = std::size_t{16} << 20;

using switchyard::test::pattern;

std::string describe(const std::error_code& ec) { return ec ? ec.category().name() + (": " + ec.message()) : "ok"; }

// A log in <mount>/log with the default limits (8 GiB map), so only the
// disk can fill; reopenable.
struct full_disk_log {
  tmpfs_mount disk{kDisk};
  sy::log_options options;
  std::unique_ptr<sy::sequence_log> log;

  explicit full_disk_log(sy::durability mode = sy::durability::sync) {
    options.dir = disk.path() / "log";
    options.mode = mode;
  }
  ~full_disk_log() { log.reset(); }  // before the unmount

  void open() {
    log.reset();
    auto r = sy::sequence_log::open(options);
    INFO(describe(r ? std::error_code{} : r.error()));
    REQUIRE(r);
    log = std::move(*r);
  }
};

// Record k of stream s: pattern(size, s * 1'000'000 + k).
std::uint64_t seed_of(int stream, std::uint64_t seq) { return static_cast<std::uint64_t>(stream) * 1'000'000 + seq; }

// Appends `size`-byte records round-robin to streams "s0".."s<n-1>" until
// one fails; returns that error (REQUIREs it comes within `bound` appends)
// and counts the acknowledged ones per stream in `acked` (sequence = count).
std::error_code fill(sy::sequence_log& log, std::size_t size, int streams, std::map<int, std::uint64_t>& acked,
                     int bound = 20'000) {
  for (int i = 0; i < bound; ++i) {
    const int s = i % streams;
    const std::uint64_t seq = acked[s] + 1;
    auto r = log.append("s" + std::to_string(s), pattern(size, seed_of(s, seq)));
    if (!r) return r.error();
    REQUIRE(*r == seq);
    acked[s] = seq;
  }
  FAIL("a 16 MiB filesystem took " << bound << " records of " << size << " bytes");
  return {};
}

// Every acknowledged record from `first` on reads back byte for byte
// (record k of stream s was `size(k)` bytes).
template <class Size>
void check_readable(sy::sequence_log& log, int s, std::uint64_t first, std::uint64_t last, Size size) {
  const std::string name = "s" + std::to_string(s);
  auto info = log.info(name);
  REQUIRE(info);
  CHECK(info->first_seq == first);
  CHECK(info->last_seq == last);
  std::uint64_t next = first;
  for (int guard = 0; guard < 10'000 && next <= last; ++guard) {
    auto r = log.read(name, next, 1000, std::size_t{4} << 20);
    INFO(describe(r ? std::error_code{} : r.error()));
    REQUIRE(r);
    REQUIRE_FALSE(r->records.empty());
    for (const auto& rec : r->records) {
      REQUIRE(rec.seq == next);
      REQUIRE(rec.payload == pattern(size(rec.seq), seed_of(s, rec.seq)));
      ++next;
    }
  }
  CHECK(next == last + 1);
}

// Appends until even a one-byte record is refused: records of decreasing
// size, so the last free pages of the file are used too.
std::uint64_t fill_tightly(sy::sequence_log& log, std::string_view stream) {
  std::uint64_t ok = 0;
  const bytes big(std::size_t{256} << 10, std::byte{0x42});
  for (const std::size_t size : {std::size_t{256} << 10, std::size_t{16} << 10, std::size_t{3000}, std::size_t{500},
                                 std::size_t{40}, std::size_t{1}}) {
    for (int i = 0; i < 20'000; ++i) {
      auto r = log.append(stream, std::span(big.data(), size));
      if (!r) {
        REQUIRE(r.error() == sy::errc::storage_full);
        break;
      }
      ++ok;
    }
  }
  return ok;
}

}  // namespace

namespace {

// Fills a fresh log on the mount with one stream of `size`-byte records
// until an append fails: that failure must be storage_full. Then every
// acknowledged record reads back, before and after reopening on the full
// disk. LMDB writes a commit's pages in runs: a run the disk takes only in
// part is a short write, which LMDB reports as EIO (1,000- and 10,000-byte
// records both get one there on a 16 MiB tmpfs).
void first_failure_is_storage_full(full_disk_log& t, std::size_t size) {
  INFO("records of " << size << " bytes");
  t.log.reset();
  std::filesystem::remove_all(t.options.dir);
  t.open();
  std::map<int, std::uint64_t> acked;
  const auto failure = fill(*t.log, size, 1, acked, 100'000);
  INFO("first failure: " << describe(failure) << " after " << acked[0] << " records");
  REQUIRE(failure == sy::errc::storage_full);
  // The disk, not the 8 GiB map, was the limit; most of it holds records.
  CHECK(acked[0] * size > kDisk / 2);
  CHECK(t.disk.free_bytes() < (std::size_t{1} << 20));
  // More attempts keep failing the same way, big or small, new stream or old.
  for (const std::size_t n : {size, std::size_t{100'000}, std::size_t{1}}) {
    auto r = t.log->append("s0", pattern(n, 7));
    if (!r) CHECK(r.error() == sy::errc::storage_full);
  }
  auto fresh = t.log->append("brand-new", pattern(size, 8));
  if (!fresh) CHECK(fresh.error() == sy::errc::storage_full);
  const auto last = t.log->info("s0")->last_seq;  // a tiny record may have fitted
  auto size_of = [&](std::uint64_t seq) { return seq <= acked[0] ? size : std::size_t{1}; };
  auto check = [&] {
    auto r = t.log->read("s0", 1, 100'000, std::size_t{1} << 30);
    REQUIRE(r);
    REQUIRE(r->records.size() == last);
    for (const auto& rec : r->records) {
      if (rec.seq <= acked[0]) REQUIRE(rec.payload == pattern(size_of(rec.seq), seed_of(0, rec.seq)));
    }
  };
  check();
  t.open();  // on the full disk
  check();
}

}  // namespace

TEST_CASE(
    "on a full filesystem the first refused append fails with storage_full and acknowledged records stay readable",
    "[storage][disk-full]") {
  full_disk_log t;
  SKIP_UNLESS_MOUNTED(t.disk);
  for (const std::size_t size : {std::size_t{1000}, std::size_t{10'000}, std::size_t{4000}})
    first_failure_is_storage_full(t, size);
}

TEST_CASE("without preallocation the first refused append on a full filesystem fails with storage_full too",
          "[storage][disk-full]") {
  // LMDB reports the short write of a filling disk as EIO; on a nearly
  // full filesystem the log reports storage_full instead.
  full_disk_log t;
  SKIP_UNLESS_MOUNTED(t.disk);
  t.options.preallocate = false;
  for (const std::size_t size : {std::size_t{1000}, std::size_t{10'000}, std::size_t{4000}}) {
    first_failure_is_storage_full(t, size);
    CHECK(t.log->space().allocated == 0);
  }
}

TEST_CASE("trims succeed on a full filesystem however tightly appends filled it, cycle after cycle",
          "[storage][disk-full]") {
  full_disk_log t(sy::durability::none);
  SKIP_UNLESS_MOUNTED(t.disk);
  t.open();
  CHECK(t.log->space().allocated > 0);
  CHECK(t.log->space().reserve > 0);
  // Each cycle: append until even one byte is refused, then trim one to
  // three records, the least that frees anything; the trim's pages must
  // come from the reserve every append left.
  std::uint64_t appended = 0, trimmed = 0;
  for (int cycle = 0; cycle < 80; ++cycle) {
    INFO("cycle " << cycle);
    appended += fill_tightly(*t.log, cycle % 2 ? "odd" : "even");
    for (const char* stream : {"even", "odd"}) {
      auto info = t.log->info(stream);
      if (!info || info->records == 0) continue;
      auto r = t.log->trim(stream, UINT64_MAX, 1 + static_cast<std::size_t>(cycle % 3));
      INFO(stream << ": " << describe(r ? std::error_code{} : r.error()));
      REQUIRE(r);
      CHECK(*r >= 1);
      trimmed += *r;
    }
  }
  CHECK(appended > 1000);
  CHECK(trimmed >= 80);
  // And a large retention step at the end, from the same reserve.
  auto e = t.log->enforce("even", sy::retention{.max_records = 1}, 1000);
  INFO(describe(e ? std::error_code{} : e.error()));
  REQUIRE(e);
}

TEST_CASE("after storage_full on a full filesystem, retention makes room and appends succeed without reopening",
          "[storage][disk-full]") {
  full_disk_log t;
  SKIP_UNLESS_MOUNTED(t.disk);
  t.open();
  std::map<int, std::uint64_t> acked;
  REQUIRE(fill(*t.log, 2000, 1, acked) == sy::errc::storage_full);
  const std::uint64_t last = acked[0];
  const std::uint64_t keep = last / 2;
  // Bounded retention steps until the stream is at its limit.
  for (int step = 0; step < 100; ++step) {
    auto e = t.log->enforce("s0", sy::retention{.max_records = keep}, 1000);
    INFO("step " << step << ": " << describe(e ? std::error_code{} : e.error()));
    REQUIRE(e);
    if (*e == 0) break;
  }
  REQUIRE(t.log->info("s0")->records == keep);
  const std::uint64_t first = last - keep + 1;
  // A thousand more records fit in the pages retention freed (they are a
  // small part of what went).
  for (std::uint64_t k = 1; k <= 1000; ++k) {
    auto r = t.log->append("s0", pattern(2000, seed_of(0, last + k)));
    INFO("append " << k << ": " << describe(r ? std::error_code{} : r.error()));
    REQUIRE(r);
    REQUIRE(*r == last + k);
  }
  check_readable(*t.log, 0, first, last + 1000, [](std::uint64_t) { return 2000; });
}

TEST_CASE("a stream that filled the filesystem can be deleted there, and appends then use its space",
          "[storage][disk-full]") {
  for (const std::size_t size : {std::size_t{100}, std::size_t{3000}}) {
    INFO("records of " << size << " bytes");
    full_disk_log t(sy::durability::none);
    SKIP_UNLESS_MOUNTED(t.disk);
    t.open();
    std::map<int, std::uint64_t> acked;
    REQUIRE(fill(*t.log, size, 2, acked, 200'000) == sy::errc::storage_full);
    auto gone = t.log->delete_stream("s0");
    INFO(describe(gone ? std::error_code{} : gone.error()));
    REQUIRE(gone);
    CHECK(gone->records == acked[0]);
    CHECK(t.log->info("s0").error() == sy::errc::not_found);
    check_readable(*t.log, 1, 1, acked[1], [&](std::uint64_t) { return size; });
    // Half the disk is free for appends again (LMDB reuses a freed page
    // from the commit after next).
    for (std::uint64_t k = 1; k <= acked[0] / 2; ++k) {
      auto r = t.log->append("fresh", pattern(size, k));
      INFO("append " << k << ": " << describe(r ? std::error_code{} : r.error()));
      REQUIRE(r);
    }
    CHECK(t.log->verify().intact());
  }
}

TEST_CASE("a stream too large to delete in one transaction on a full filesystem is trimmed in steps, then deleted",
          "[storage][disk-full]") {
  // 320 MiB of 16 KiB records: deleting them all frees about 80,000 pages,
  // whose free-list entry (about 160 contiguous pages) is more than the
  // disk reserve appends leave (about 80 pages), so the one transaction
  // fails with storage_full on the full disk and delete_stream trims first.
  tmpfs_mount disk{std::size_t{320} << 20};
  SKIP_UNLESS_MOUNTED(disk);
  std::unique_ptr<sy::sequence_log> log;
  {
    sy::log_options o;
    o.dir = disk.path() / "log";
    o.mode = sy::durability::none;
    auto r = sy::sequence_log::open(o);
    REQUIRE(r);
    log = std::move(*r);
  }
  std::map<int, std::uint64_t> acked;
  REQUIRE(fill(*log, 16u << 10, 1, acked, 40'000) == sy::errc::storage_full);
  auto gone = log->delete_stream("s0");
  INFO(describe(gone ? std::error_code{} : gone.error()));
  REQUIRE(gone);
  CHECK(gone->records == acked[0]);  // as it was before the steps
  CHECK(gone->first_seq == 1);
  CHECK(log->info("s0").error() == sy::errc::not_found);
  auto all = log->list();
  REQUIRE(all);
  CHECK(all->empty());
  CHECK(log->verify().intact());
  REQUIRE(log->append("s0", pattern(100, 1)));
  log.reset();  // before the unmount
}

TEST_CASE("after storage_full, appends succeed again without reopening once space is freed on the filesystem",
          "[storage][disk-full]") {
  full_disk_log t;
  SKIP_UNLESS_MOUNTED(t.disk);
  // Another user of the filesystem holds 4 MiB of it.
  REQUIRE(t.disk.write_file("other-data", std::size_t{4} << 20));
  t.open();
  std::map<int, std::uint64_t> acked;
  REQUIRE(fill(*t.log, 4000, 1, acked) == sy::errc::storage_full);
  const std::uint64_t last = acked[0];
  auto refused = t.log->append("s0", pattern(4000, seed_of(0, last + 1)));
  REQUIRE_FALSE(refused);
  CHECK(refused.error() == sy::errc::storage_full);

  std::filesystem::remove(t.disk.path() / "other-data");
  // 2 MiB more, in the space the other user gave back.
  for (std::uint64_t k = 1; k <= 500; ++k) {
    auto r = t.log->append("s0", pattern(4000, seed_of(0, last + k)));
    INFO("append " << k << ": " << describe(r ? std::error_code{} : r.error()));
    REQUIRE(r);
    REQUIRE(*r == last + k);
  }
  check_readable(*t.log, 0, 1, last + 500, [](std::uint64_t) { return 4000; });
}

TEST_CASE("a log reopens on a full filesystem and retention and appends work there", "[storage][disk-full]") {
  full_disk_log t;
  SKIP_UNLESS_MOUNTED(t.disk);
  t.open();
  std::map<int, std::uint64_t> acked;
  REQUIRE(fill(*t.log, 3000, 2, acked) == sy::errc::storage_full);
  t.log.reset();
  REQUIRE(t.disk.free_bytes() < (std::size_t{1} << 20));

  t.open();
  for (int s = 0; s < 2; ++s) check_readable(*t.log, s, 1, acked[s], [](std::uint64_t) { return 3000; });
  auto refused = t.log->append("s0", pattern(3000, seed_of(0, acked[0] + 1)));
  REQUIRE_FALSE(refused);
  CHECK(refused.error() == sy::errc::storage_full);
  // Retention runs from the reserve the earlier appends left in the file.
  auto e = t.log->enforce("s0", sy::retention{.max_records = 10}, 1000);
  INFO(describe(e ? std::error_code{} : e.error()));
  REQUIRE(e);
  CHECK(*e > 0);
  const auto first = t.log->info("s0")->first_seq;
  for (std::uint64_t k = 1; k <= 50; ++k) {
    auto r = t.log->append("s0", pattern(3000, seed_of(0, acked[0] + k)));
    INFO("append " << k << ": " << describe(r ? std::error_code{} : r.error()));
    REQUIRE(r);
  }
  check_readable(*t.log, 0, first, acked[0] + 50, [](std::uint64_t) { return 3000; });
  check_readable(*t.log, 1, 1, acked[1], [](std::uint64_t) { return 3000; });
}

TEST_CASE("a committer on a full filesystem refuses with storage_full and a retention change makes room again",
          "[storage][disk-full]") {
  full_disk_log t;
  SKIP_UNLESS_MOUNTED(t.disk);
  t.open();
  sy::group_commit_options o;
  o.retention_interval = std::chrono::milliseconds(5);
  sy::group_committer gc(*t.log, o);
  const auto payload = pattern(3000, 1);
  // Batches of 64 until one is refused outright.
  std::atomic<int> ok{0}, full{0}, other{0};
  auto done = [&](std::expected<sy::append_ack, std::error_code> r) {
    if (r)
      ++ok;
    else if (r.error() == sy::errc::storage_full)
      ++full;
    else
      ++other;
  };
  int queued = 0;
  for (int batch = 0; batch < 200 && full == 0; ++batch) {
    for (int i = 0; i < 64; ++i) gc.append("busy", payload, done);
    queued += 64;
    REQUIRE(wait_until([&] { return ok + full + other == queued; }));
  }
  REQUIRE(full > 0);
  CHECK(other == 0);
  const int acked = ok;

  // The operator gives the stream a limit: the committer applies it on the
  // full disk, then appends fit again.
  std::atomic<int> changed{0};
  gc.set_retention("busy", sy::retention{.max_records = 100}, [&](auto r) { changed = r ? 1 : -1; });
  REQUIRE(wait_until([&] { return changed != 0; }));
  REQUIRE(changed == 1);
  REQUIRE(wait_until([&] { return t.log->info("busy")->records <= 100; }));
  // The committer counts a step's trim once the step is done: the last
  // step's may come just after the log shows it (seen under load).
  CHECK(wait_until([&] { return gc.stats().trimmed >= static_cast<std::uint64_t>(acked - 100); }));
  ok = 0;
  full = 0;
  for (int i = 0; i < 64; ++i) gc.append("busy", payload, done);
  REQUIRE(wait_until([&] { return ok + full + other == 64; }));
  CHECK(ok == 64);
  CHECK(t.log->info("busy")->records <= 100 + 64);
}

TEST_CASE("a log of another on-disk format is refused without preallocating its file", "[storage][disk-full]") {
  // Preallocation comes after the format check: a refused log is left as
  // it was, its file size included. No tmpfs needed.
  switchyard::test::temp_dir dir{"switchyard-format"};
  sy::log_options o;
  o.dir = dir.path() / "log";
  {
    auto log = sy::sequence_log::open(o);
    REQUIRE(log);
    REQUIRE((*log)->append("s", pattern(10, 1)));
  }
  // Restamp it with a newer format version, straight through LMDB, and
  // give the file back its unallocated size.
  {
    MDB_env* env = nullptr;
    REQUIRE(mdb_env_create(&env) == MDB_SUCCESS);
    REQUIRE(mdb_env_set_maxdbs(env, 8) == MDB_SUCCESS);
    REQUIRE(mdb_env_open(env, o.dir.c_str(), 0, 0644) == MDB_SUCCESS);
    MDB_txn* txn = nullptr;
    REQUIRE(mdb_txn_begin(env, nullptr, 0, &txn) == MDB_SUCCESS);
    MDB_dbi meta = 0;
    REQUIRE(mdb_dbi_open(txn, "meta", 0, &meta) == MDB_SUCCESS);
    unsigned char version[8] = {static_cast<unsigned char>(sy::log_format_version + 1)};
    MDB_val k{14, const_cast<char*>("format_version")}, v{sizeof version, version};
    REQUIRE(mdb_put(txn, meta, &k, &v, 0) == MDB_SUCCESS);
    REQUIRE(mdb_txn_commit(txn) == MDB_SUCCESS);
    MDB_envinfo info{};
    mdb_env_info(env, &info);
    MDB_stat st{};
    mdb_env_stat(env, &st);
    mdb_env_close(env);
    std::filesystem::resize_file(o.dir / "data.mdb", (info.me_last_pgno + 1) * st.ms_psize);
  }
  const auto size = std::filesystem::file_size(o.dir / "data.mdb");
  auto refused = sy::sequence_log::open(o);
  REQUIRE_FALSE(refused);
  CHECK(refused.error() == sy::errc::unsupported_format);
  CHECK(std::filesystem::file_size(o.dir / "data.mdb") == size);
}
