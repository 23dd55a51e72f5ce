// storage::verify_log: the whole-log check in a child process, on real
// logs in temporary folders, healthy and damaged (through LMDB itself where
// the damage must still decode, by editing data.mdb where it must not).

#include "storage/data_file.hpp"
#include "storage/errc.hpp"
#include "storage/log_verifier.hpp"
#include "storage/sequence_log.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <lmdb.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace sy = switchyard::storage;
namespace L = sy::lmdb_layout;
using switchyard::test::temp_dir;

std::vector<std::byte> text(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), reinterpret_cast<const std::byte*>(s.data()) + s.size()};
}

struct log_dir {
  temp_dir dir{"switchyard-verify"};
  std::filesystem::path path() const { return dir.path() / "log"; }

  std::unique_ptr<sy::sequence_log> open() {
    sy::log_options o;
    o.dir = path();
    o.preallocate = false;  // the file as LMDB writes it: it ends at the last page used
    o.mode = sy::durability::none;
    o.initial_map_size = std::size_t{4} << 20;
    o.max_map_size = std::size_t{64} << 20;
    auto r = sy::sequence_log::open(o);
    REQUIRE(r);
    return std::move(*r);
  }

  // Three streams, one of them trimmed (so LMDB's free list is not empty).
  void fill() {
    auto log = open();
    for (int i = 1; i <= 200; ++i) REQUIRE(log->append("orders", text("order " + std::to_string(i))));
    for (int i = 1; i <= 50; ++i) REQUIRE(log->append("big", std::vector<std::byte>(5000, std::byte(i))));
    for (int i = 1; i <= 300; ++i) REQUIRE(log->append("trimmed", text(std::string(100, 'x'))));
    REQUIRE(log->trim("trimmed", 251, 1000));
    REQUIRE_FALSE(log->sync());
  }

  // Runs `change` in a write transaction of the raw LMDB environment.
  template <class F>
  void edit(F change) {
    MDB_env* env = nullptr;
    REQUIRE(mdb_env_create(&env) == MDB_SUCCESS);
    mdb_env_set_maxdbs(env, 8);
    REQUIRE(mdb_env_set_mapsize(env, std::size_t{256} << 20) == MDB_SUCCESS);
    REQUIRE(mdb_env_open(env, path().c_str(), 0, 0644) == MDB_SUCCESS);
    MDB_txn* t = nullptr;
    REQUIRE(mdb_txn_begin(env, nullptr, 0, &t) == MDB_SUCCESS);
    change(t);
    REQUIRE(mdb_txn_commit(t) == MDB_SUCCESS);
    mdb_env_close(env);
  }
};

std::vector<std::byte> record_key(std::uint64_t stream, std::uint64_t seq) {
  std::vector<std::byte> k(16);
  for (int i = 0; i < 8; ++i) {
    k[i] = static_cast<std::byte>(stream >> (56 - 8 * i));
    k[8 + i] = static_cast<std::byte>(seq >> (56 - 8 * i));
  }
  return k;
}

sy::verify_report verify_ok(const std::filesystem::path& dir) {
  sy::verify_options o;
  o.dir = dir;
  o.timeout = std::chrono::seconds(60);
  std::string detail;
  auto r = sy::verify_log(o, &detail);
  INFO(detail);
  REQUIRE(r);
  return *r;
}

std::string all_problems(const sy::verify_report& r) {
  std::string out;
  for (const auto& p : r.problems) out += p.what + "\n";
  return out;
}

}  // namespace

TEST_CASE("verify_log finds a healthy log intact and accounts for every page, free ones included",
          "[storage][verify]") {
  log_dir d;
  d.fill();
  std::vector<sy::verify_progress> seen;
  sy::verify_options o;
  o.dir = d.path();
  o.progress = [&](const sy::verify_progress& p) { seen.push_back(p); };
  auto r = sy::verify_log(o);
  REQUIRE(r);
  INFO(all_problems(*r));
  CHECK(r->intact());
  CHECK(r->pages_checked);
  CHECK(r->streams == 3);
  CHECK(r->records == 200 + 50 + 50);
  REQUIRE_FALSE(seen.empty());
  CHECK(seen.back().records == 300);
}

TEST_CASE("verify_log runs next to the process that has the log open", "[storage][verify]") {
  log_dir d;
  d.fill();
  auto log = d.open();  // holds the lock: the check opens read-only and takes none
  REQUIRE(log->append("orders", text("while verifying")));
  const auto r = verify_ok(d.path());
  INFO(all_problems(r));
  CHECK(r.intact());
  CHECK(r.records == 301);
  REQUIRE(log->append("orders", text("and after")));
}

TEST_CASE("verify_log names a missing record and the stream's broken metadata", "[storage][verify]") {
  log_dir d;
  d.fill();
  d.edit([](MDB_txn* t) {
    MDB_dbi records = 0;
    REQUIRE(mdb_dbi_open(t, "records", 0, &records) == MDB_SUCCESS);
    auto k = record_key(1, 77);  // "orders" is stream 1
    MDB_val key{k.size(), k.data()};
    REQUIRE(mdb_del(t, records, &key, nullptr) == MDB_SUCCESS);
  });
  const auto r = verify_ok(d.path());
  INFO(all_problems(r));
  CHECK_FALSE(r.intact());
  REQUIRE(r.problem_count == 1);
  CHECK(r.problems[0].stream == "orders");
  CHECK(r.problems[0].seq == 77);
  CHECK(r.problems[0].what == "stream 'orders', record 77: missing");
  CHECK(r.pages_checked);  // LMDB's own pages are consistent: the record was deleted properly

  // The reader sees the hole as damage too, and reads around it.
  sy::log_options o;
  o.dir = d.path();
  o.preallocate = false;  // the file as LMDB writes it: it ends at the last page used
  auto log = sy::sequence_log::open(o);
  REQUIRE(log);
  auto before = (*log)->read("orders", 70, 100, 1 << 20);
  REQUIRE(before);
  CHECK(before->records.size() == 7);
  CHECK(before->damaged_seq == 77);
  sy::diagnostics diag;
  auto at = (*log)->read("orders", 77, 1, 1 << 20, &diag);
  REQUIRE_FALSE(at);
  CHECK(at.error() == sy::errc::corrupted);
  CHECK(diag.message == "stream 'orders', record 77: missing (a hole in the sequence)");
  auto after = (*log)->read("orders", 78, 1000, 1 << 20);
  REQUIRE(after);
  CHECK(after->records.size() == 123);
}

TEST_CASE("verify_log reports records whose stream has no metadata", "[storage][verify]") {
  log_dir d;
  d.fill();
  d.edit([](MDB_txn* t) {
    MDB_dbi streams = 0;
    REQUIRE(mdb_dbi_open(t, "streams", 0, &streams) == MDB_SUCCESS);
    MDB_val key{3, const_cast<char*>("big")};
    REQUIRE(mdb_del(t, streams, &key, nullptr) == MDB_SUCCESS);
  });
  const auto r = verify_ok(d.path());
  INFO(all_problems(r));
  REQUIRE(r.problem_count == 1);
  CHECK(r.problems[0].what == "records of stream id 2, which no stream has");
}

TEST_CASE("verify_log reports LMDB page counts that do not add up", "[storage][verify]") {
  log_dir d;
  d.fill();
  // The "records" database's leaf page count, in its entry in LMDB's main
  // database (an MDB_db: pad, flags, depth, then branch, leaf, overflow
  // page counts as u64): one more than there are. Reads never look at it.
  auto file = d.path() / "data.mdb";
  std::vector<char> data;
  {
    std::ifstream in(file, std::ios::binary);
    data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  // Find the live entry through LMDB: the value the main database holds
  // for "records" is the MDB_db.
  MDB_env* env = nullptr;
  REQUIRE(mdb_env_create(&env) == MDB_SUCCESS);
  mdb_env_set_maxdbs(env, 8);
  REQUIRE(mdb_env_open(env, d.path().c_str(), MDB_RDONLY, 0644) == MDB_SUCCESS);
  MDB_txn* t = nullptr;
  REQUIRE(mdb_txn_begin(env, nullptr, MDB_RDONLY, &t) == MDB_SUCCESS);
  MDB_dbi main_db = 0;
  REQUIRE(mdb_dbi_open(t, nullptr, 0, &main_db) == MDB_SUCCESS);
  MDB_val key{7, const_cast<char*>("records")}, value{};
  REQUIRE(mdb_get(t, main_db, &key, &value) == MDB_SUCCESS);
  REQUIRE(value.mv_size == 48);
  std::vector<char> entry(static_cast<char*>(value.mv_data), static_cast<char*>(value.mv_data) + 48);
  mdb_txn_abort(t);
  mdb_env_close(env);
  // The same 48 bytes in the file (the live main-database leaf is the only
  // place they appear, with its old versions: patch them all).
  int patched = 0;
  for (std::size_t at = 0; at + 48 <= data.size(); ++at)
    if (std::memcmp(data.data() + at, entry.data(), 48) == 0) {
      ++data[at + 16];  // md_leaf_pages, low byte
      ++patched;
    }
  REQUIRE(patched >= 1);
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
  }
  const auto r = verify_ok(d.path());
  INFO(all_problems(r));
  REQUIRE(r.problem_count == 1);
  CHECK(r.problems[0].what.find("LMDB's pages do not add up") == 0);
}

TEST_CASE("verify_log reports a page LMDB faults on as damage and finishes its report", "[storage][verify]") {
  log_dir d;
  {
    auto log = d.open();
    const auto payload = text("tiny record");
    const std::vector<sy::append_item> items(20, sy::append_item{"tiny", payload});
    REQUIRE(log->append(items));  // one transaction: a file of a few pages
  }
  // A small file (every page is within 64 KiB of its end): point the first
  // node of the records leaf 65,000 bytes into the page, past the end of
  // the file but inside LMDB's map, so LMDB reads the node from there and
  // faults (SIGBUS); the walk's guard turns that into an error.
  auto file = d.path() / "data.mdb";
  std::vector<unsigned char> data;
  {
    std::ifstream in(file, std::ios::binary);
    data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  REQUIRE(data.size() < 65'000);
  MDB_env* env = nullptr;
  REQUIRE(mdb_env_create(&env) == MDB_SUCCESS);
  MDB_stat st{};
  REQUIRE(mdb_env_open(env, d.path().c_str(), MDB_RDONLY, 0644) == MDB_SUCCESS);
  mdb_env_stat(env, &st);
  mdb_env_close(env);
  const std::size_t ps = st.ms_psize;
  int patched = 0;
  for (std::size_t page = 2; page < data.size() / ps; ++page) {
    unsigned char* p = data.data() + page * ps;
    const unsigned flags = p[L::flags_offset] | p[L::flags_offset + 1] << 8;
    const unsigned lower = p[12] | p[13] << 8;
    if (!(flags & L::p_leaf) || lower <= L::page_header) continue;
    const unsigned first = p[16] | p[17] << 8;
    const unsigned ksize = p[first + 6] | p[first + 7] << 8;
    if (ksize != 16) continue;  // not the records database
    p[16] = 65000 & 0xFF;
    p[17] = 65000 >> 8;
    ++patched;
  }
  REQUIRE(patched >= 1);  // the live leaf, and any old copy of it on a free page
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  }
  const auto r = verify_ok(d.path());
  INFO(all_problems(r));
  CHECK_FALSE(r.intact());
  CHECK(r.signal == 0);
  REQUIRE(r.problem_count == 1);
  CHECK(r.problems[0].what ==
        "walking the records from the first: LMDB reports MDB_CORRUPTED: Located page was wrong type; "
        "the records after it were not checked");
}

TEST_CASE("verify_log reports a check that dies of a signal as damage", "[storage][verify]") {
  // A FIFO where data.mdb should be holds the check in open(); the signal
  // it then gets stands for a fault outside LMDB's guarded calls.
  temp_dir d{"switchyard-verify"};
  std::filesystem::create_directories(d.path() / "log");
  REQUIRE(::mkfifo((d.path() / "log" / "data.mdb").c_str(), 0644) == 0);
  sy::verify_options o;
  o.dir = d.path() / "log";
  o.timeout = std::chrono::seconds(30);
  std::expected<sy::verify_report, std::error_code> r;
  std::thread check([&] { r = sy::verify_log(o); });
  // The child: the process whose parent is this one (bounded wait).
  pid_t child = 0;
  for (int i = 0; i < 500 && child == 0; ++i) {
    for (const auto& e : std::filesystem::directory_iterator("/proc")) {
      std::ifstream stat(e.path() / "stat");
      std::string pid, comm, state;
      pid_t ppid = 0;
      if (stat >> pid >> comm >> state >> ppid && ppid == ::getpid()) child = static_cast<pid_t>(std::stol(pid));
    }
    if (child == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(child != 0);
  REQUIRE(::kill(child, SIGBUS) == 0);
  check.join();
  REQUIRE(r);
  CHECK_FALSE(r->intact());
  CHECK(r->signal == SIGBUS);
  REQUIRE(r->problems.size() == 1);
  CHECK(r->problems[0].what ==
        "the check died of SIGBUS after 0 records: the log is damaged in a way the check could not report");
}

TEST_CASE("verify_log kills a check that does not finish in time and says so", "[storage][verify]") {
  temp_dir d{"switchyard-verify"};
  std::filesystem::create_directories(d.path() / "log");
  // A FIFO where data.mdb should be: opening it blocks for ever.
  REQUIRE(::mkfifo((d.path() / "log" / "data.mdb").c_str(), 0644) == 0);
  sy::verify_options o;
  o.dir = d.path() / "log";
  o.timeout = std::chrono::milliseconds(200);
  auto r = sy::verify_log(o);
  REQUIRE(r);
  CHECK(r->timed_out);
  CHECK_FALSE(r->intact());
  REQUIRE(r->problems.size() == 1);
  CHECK(r->problems[0].what == "the check did not finish within 200 ms (a loop in a damaged B-tree, or a slow disk)");
}

TEST_CASE("verify_log of a folder without a log is not_found, not damage", "[storage][verify]") {
  temp_dir d{"switchyard-verify"};
  std::string detail;
  sy::verify_options o;
  o.dir = d.path() / "log";
  auto r = sy::verify_log(o, &detail);
  REQUIRE_FALSE(r);
  CHECK(r.error() == sy::errc::not_found);
  CHECK(detail == "no sequence log in " + o.dir.string() + " (no data.mdb)");
  CHECK_FALSE(std::filesystem::exists(o.dir));  // a read-only open creates nothing
}

TEST_CASE("a data file that ends early only where LMDB's free list lies opens and verifies intact",
          "[storage][verify]") {
  // LMDB never writes pages freed in the transaction that allocated them
  // (mdb_page_flush skips "loose" pages), so a file may end before the
  // last page its meta names when those are free. Transactions that add
  // and delete in a scratch database of a young log make that happen
  // (seeded, so the same every run; bounded).
  std::unique_ptr<log_dir> found;
  for (int trial = 0; trial < 60 && !found; ++trial) {
    auto d = std::make_unique<log_dir>();
    {
      auto log = d->open();
      for (int i = 1; i <= 50; ++i) REQUIRE(log->append("orders", text("order " + std::to_string(i))));
    }
    std::mt19937 rng(static_cast<unsigned>(trial));
    std::vector<char> value(2500, 'v');
    for (int round = 0; round < 3 && !found; ++round) {
      d->edit([&](MDB_txn* t) {
        MDB_dbi scratch = 0;
        REQUIRE(mdb_dbi_open(t, "scratch", MDB_CREATE, &scratch) == MDB_SUCCESS);
        const std::uint64_t n = 10 + rng() % 3000, base = static_cast<std::uint64_t>(round) << 32;
        int failures = 0;
        for (std::uint64_t i = 0; i < n; ++i) {
          const std::uint64_t k = base | i;
          MDB_val key{sizeof k, const_cast<std::uint64_t*>(&k)}, val{rng() % 2500, value.data()};
          failures += mdb_put(t, scratch, &key, &val, 0) != MDB_SUCCESS;
        }
        for (std::uint64_t i = 0, m = rng() % (n + 1); i < m; ++i) {
          const std::uint64_t k = base | (rng() % n);
          MDB_val key{sizeof k, const_cast<std::uint64_t*>(&k)};
          const int rc = mdb_del(t, scratch, &key, nullptr);
          failures += rc != MDB_SUCCESS && rc != MDB_NOTFOUND;
        }
        REQUIRE(failures == 0);
      });
      MDB_env* env = nullptr;
      REQUIRE(mdb_env_create(&env) == MDB_SUCCESS);
      mdb_env_set_maxdbs(env, 8);
      REQUIRE(mdb_env_open(env, d->path().c_str(), MDB_RDONLY, 0644) == MDB_SUCCESS);
      MDB_envinfo info{};
      MDB_stat st{};
      mdb_env_info(env, &info);
      mdb_env_stat(env, &st);
      mdb_env_close(env);
      if ((info.me_last_pgno + 1) * st.ms_psize > std::filesystem::file_size(d->path() / "data.mdb"))
        found = std::move(d);
    }
  }
  REQUIRE(found);
  std::string detail;
  CHECK_FALSE(sy::data_file::check(found->path() / "data.mdb", &detail));
  INFO(detail);
  sy::log_options o;
  o.dir = found->path();
  o.preallocate = false;  // the file as LMDB writes it: it ends at the last page used
  auto log = sy::sequence_log::open(o);
  REQUIRE(log);
  auto orders = (*log)->read("orders", 1, 1000, 1 << 20);
  REQUIRE(orders);
  CHECK(orders->records.size() == 50);
  log->reset();
  const auto r = verify_ok(found->path());
  INFO(all_problems(r));
  CHECK(r.intact());
  CHECK(r.pages_checked);
}
