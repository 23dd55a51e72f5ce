// Damage to data.mdb, in the manner of LevelDB's corruption tests: a real
// log with several streams (small records, overflow records, destinations, a
// stream with retention of its own, a trimmed one), compacted so that every
// page of the file is live, then damaged on a copy (cut short, random bytes,
// zeroed pages, damaged meta pages). Each damaged copy is opened and read,
// record by record, in a forked child process (a probe): damage LMDB itself
// trips on can still fault, and the suite must survive that. For each kind
// of damage the tests check what the log promises (docs/storage.md,
// "Damage"): no wrong data is ever returned, damage is reported (a refused
// open, or `corrupted` naming the record), the records the damage did not
// touch still read, and storage::verify_log calls the log damaged whenever
// a read noticed anything or a probe died.
//
// The page classification below reads LMDB 0.9's page headers
// (storage/data_file.hpp, lmdb_layout), as the log's own checks do.

#include "storage/data_file.hpp"
#include "storage/errc.hpp"
#include "storage/log_verifier.hpp"
#include "storage/sequence_log.hpp"
#include "tests/support/byte_pattern.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <lmdb.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

namespace sy = switchyard::storage;
namespace L = sy::lmdb_layout;
using bytes = std::vector<std::byte>;
using switchyard::test::temp_dir;
using record_id = std::pair<std::string, std::uint64_t>;  // stream, sequence

constexpr std::uint64_t kStartMs = 1'712'345'678'901;

using switchyard::test::pattern;

bytes read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE(in);
  std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bytes out(raw.size());
  std::memcpy(out.data(), raw.data(), raw.size());
  return out;
}

void write_file(const std::filesystem::path& p, const bytes& data) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  REQUIRE(out);
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  REQUIRE(out);
}

std::uint64_t le(const bytes& b, std::size_t at, std::size_t n) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(b[at + i]) << (8 * i);
  return v;
}
std::uint64_t be64(const bytes& b, std::size_t at) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < 8; ++i) v = v << 8 | static_cast<std::uint64_t>(b[at + i]);
  return v;
}

struct expected_record {
  bytes payload;
  bytes destination;
};

enum class page_kind { meta, records_branch, records_leaf, overflow, other };

// The log every test damages a copy of, built once: its records, its
// compacted data.mdb and what each page of it holds.
struct pristine_log {
  temp_dir dir{"switchyard-corruption"};
  std::map<record_id, expected_record> records;
  std::vector<std::string> streams;
  bytes file;
  std::size_t page_size = 0;
  std::vector<page_kind> kinds;                // per page
  std::map<record_id, std::uint64_t> leaf_of;  // the records-database leaf holding the record's key
  std::map<record_id, std::pair<std::uint64_t, std::uint64_t>> overflow_of;  // first page, page count
  std::map<std::uint64_t, std::string> stream_of_id;

  std::size_t pages() const { return file.size() / page_size; }
  std::vector<std::uint64_t> pages_of(page_kind k) const {
    std::vector<std::uint64_t> out;
    for (std::size_t p = 0; p < kinds.size(); ++p)
      if (kinds[p] == k) out.push_back(p);
    return out;
  }
};

void build(pristine_log& log) {
  const auto work = log.dir.path() / "work";
  std::uint64_t clock = kStartMs, epochs = 0;
  sy::log_options o;
  o.dir = work;
  o.preallocate = false;  // the file as LMDB writes it: it ends at the last page used
  o.mode = sy::durability::none;
  o.initial_map_size = std::size_t{8} << 20;
  o.max_map_size = std::size_t{64} << 20;
  o.wall_clock_ms = [&] { return clock += 7; };
  o.random64 = [&] { return 0xE90C'0000'0000'0000ull + ++epochs; };
  {
    auto opened = sy::sequence_log::open(o);
    REQUIRE(opened);
    auto& l = **opened;
    std::uint64_t seed = 1;
    const auto add = [&](const std::string& stream, std::size_t size, std::size_t destination) {
      const bytes payload = pattern(size, ++seed), subj = pattern(destination, ++seed + 1'000'000);
      auto seq = l.append(stream, payload, subj);
      REQUIRE(seq);
      log.records[{stream, *seq}] = {payload, subj};
    };
    // Names are not 16 bytes long: 16-byte keys are the records database's.
    log.streams = {"alpha", "beta.big", "gamma-mixed", "delta.own", "epsilon.trimmed"};
    for (const auto& s : log.streams) add(s, 16, 0);  // ids 1..5 in this order
    for (int i = 0; i < 150; ++i) add("alpha", 20 + static_cast<std::size_t>(i * 7 % 180), i % 3 == 0 ? 12 : 0);
    for (int i = 0; i < 30; ++i) add("beta.big", 3000 + static_cast<std::size_t>(i * 977 % 9000), 0);
    for (int i = 0; i < 80; ++i) add("gamma-mixed", i % 9 == 0 ? 5000 : 90, i % 2 ? 40 : 0);
    REQUIRE(l.set_retention("delta.own", {1000, std::chrono::hours(1), 0}));
    for (int i = 0; i < 12; ++i) add("delta.own", 64, 8);
    for (int i = 0; i < 60; ++i) add("epsilon.trimmed", 300, 0);
    auto trimmed = l.trim("epsilon.trimmed", 21, 100);
    REQUIRE(trimmed);
    REQUIRE(*trimmed == 20);
    for (std::uint64_t seq = 1; seq <= 20; ++seq) log.records.erase({"epsilon.trimmed", seq});
    for (std::size_t i = 0; i < log.streams.size(); ++i) {
      auto info = l.info(log.streams[i]);
      REQUIRE(info);
      log.stream_of_id[info->id] = log.streams[i];
    }
    REQUIRE_FALSE(l.sync());
  }
  // A compacted copy: no free pages, so every copy of a key in the file is
  // the live one.
  const auto live = log.dir.path() / "pristine";
  std::filesystem::create_directories(live);
  MDB_env* env = nullptr;
  REQUIRE(mdb_env_create(&env) == MDB_SUCCESS);
  mdb_env_set_maxdbs(env, 8);
  REQUIRE(mdb_env_open(env, work.c_str(), MDB_RDONLY, 0644) == MDB_SUCCESS);
  REQUIRE(mdb_env_copy2(env, live.c_str(), MDB_CP_COMPACT) == MDB_SUCCESS);
  MDB_stat st{};
  mdb_env_stat(env, &st);
  log.page_size = st.ms_psize;
  mdb_env_close(env);
  log.file = read_file(live / "data.mdb");
  REQUIRE(log.file.size() % log.page_size == 0);

  // What each page holds.
  const std::size_t ps = log.page_size;
  log.kinds.assign(log.pages(), page_kind::other);
  log.kinds[0] = log.kinds[1] = page_kind::meta;
  for (std::size_t p = 2; p < log.pages(); ++p) {
    const std::size_t at = p * ps;
    const auto flags = le(log.file, at + L::flags_offset, 2);
    if (flags & L::p_overflow) {
      const auto n = le(log.file, at + L::pages_offset, 4);
      for (std::size_t i = 0; i < n && p + i < log.pages(); ++i) log.kinds[p + i] = page_kind::overflow;
      p += n - 1;
      continue;
    }
    if (!(flags & (L::p_branch | L::p_leaf))) continue;
    const std::size_t nodes = (le(log.file, at + 12, 2) - L::page_header) / 2;
    bool records = nodes > 0;
    std::vector<std::pair<record_id, std::size_t>> found;  // record, node offset
    for (std::size_t i = 0; i < nodes; ++i) {
      const std::size_t node = at + le(log.file, at + L::page_header + 2 * i, 2);
      const auto ksize = le(log.file, node + 6, 2);
      // A branch page's first key is empty.
      if (ksize != 16 && !((flags & L::p_branch) && i == 0 && ksize == 0)) records = false;
      if ((flags & L::p_leaf) && ksize == 16) {
        const auto id = be64(log.file, node + 8), seq = be64(log.file, node + 16);
        if (log.stream_of_id.contains(id)) found.push_back({{log.stream_of_id.at(id), seq}, node});
      }
    }
    if (!records) continue;
    if (flags & L::p_branch) {
      log.kinds[p] = page_kind::records_branch;
      continue;
    }
    log.kinds[p] = page_kind::records_leaf;
    for (const auto& [rec, node] : found) {
      log.leaf_of[rec] = p;
      if (le(log.file, node + 4, 2) & L::f_bigdata) {
        const auto ov = le(log.file, node + L::node_header + 16, 8);
        log.overflow_of[rec] = {ov, le(log.file, ov * ps + L::pages_offset, 4)};
      }
    }
  }
  REQUIRE(log.leaf_of.size() == log.records.size());
  REQUIRE(log.overflow_of.size() >= 30);
  REQUIRE(log.pages_of(page_kind::records_branch).size() >= 1);
}

const pristine_log& pristine() {
  static const std::unique_ptr<pristine_log> log = [] {
    auto l = std::make_unique<pristine_log>();
    build(*l);
    return l;
  }();
  return *log;
}

// A damaged copy of the pristine log in a folder of its own.
struct damaged_copy {
  temp_dir dir{"switchyard-damaged"};
  std::filesystem::path log_dir() const { return dir.path() / "log"; }
  explicit damaged_copy(const bytes& file) {
    std::filesystem::create_directories(log_dir());
    write_file(log_dir() / "data.mdb", file);
  }
};

// ------------------------------------------------------------------ probes

enum class outcome { ok, corrupted, wrong, other_error };

// What a probe child saw, and how it ended.
struct probe_result {
  bool opened = false;
  int open_error = 0;  // storage errc value; -1: an error of another category
  std::string open_detail;
  std::map<record_id, outcome> reads;
  std::set<record_id> faulted;           // a child died reading these
  std::set<record_id> wrong_in_streams;  // wrong records returned by whole-stream reads
  bool streams_read = false;             // the whole-stream reads ended without a fault
  int signal = 0;                        // the last child's signal, 0 if it exited
  bool listed = false;                   // list() and info() answered (ok or an error), no fault
  std::string summary() const {
    std::ostringstream out;
    std::map<outcome, int> counts;
    for (const auto& [r, o] : reads) ++counts[o];
    out << "opened=" << opened << " open_error=" << open_error << " (" << open_detail << ") ok=" << counts[outcome::ok]
        << " corrupted=" << counts[outcome::corrupted] << " wrong=" << counts[outcome::wrong]
        << " other=" << counts[outcome::other_error] << " faulted=" << faulted.size() << " signal=" << signal
        << " streams_read=" << streams_read << " wrong_in_streams=" << wrong_in_streams.size();
    return out.str();
  }
  std::size_t count(outcome o) const {
    return static_cast<std::size_t>(
        std::count_if(reads.begin(), reads.end(), [o](const auto& e) { return e.second == o; }));
  }
};

// The child: opens the log, reads every expected record (except `skip`)
// one at a time, then lists; reports each step as a line on `fd` before
// and after it, so that the parent knows where a fault struck. Never
// returns.
[[noreturn]] void probe_child(const std::filesystem::path& dir, const std::set<record_id>& skip, int fd) {
  for (const int sig : {SIGBUS, SIGSEGV, SIGILL, SIGFPE, SIGABRT})
    ::signal(sig, SIG_DFL);  // die, not a handler's report
  const auto say = [fd](const std::string& line) {
    const std::string l = line + "\n";
    if (::write(fd, l.data(), l.size()) != static_cast<ssize_t>(l.size())) ::_exit(3);
  };
  sy::log_options o;
  o.dir = dir;
  o.preallocate = false;  // the file as LMDB writes it: it ends at the last page used
  sy::diagnostics diag;
  auto log = sy::sequence_log::open(o, &diag);
  if (!log) {
    const auto& ec = log.error();
    say("O " + std::to_string(ec.category() == sy::storage_category() ? ec.value() : -1) + " " + diag.message);
    ::_exit(0);
  }
  say("O 0");
  for (const auto& [id, want] : pristine().records) {
    if (skip.contains(id)) continue;
    const std::string name = id.first + " " + std::to_string(id.second);
    say("B " + name);
    auto r = (*log)->read(id.first, id.second, 1, std::size_t{1} << 30);
    char c = 'e';
    if (r && r->records.size() == 1 && r->records[0].seq == id.second) {
      c = r->records[0].payload == want.payload && r->records[0].destination == want.destination ? 'o' : 'w';
    } else if (r) {
      c = r->damaged_seq == id.second ? 'c' : 'w';  // a record that is there, missing
    } else if (r.error() == sy::errc::corrupted) {
      c = 'c';
    }
    say(std::string("R ") + c + " " + name);
  }
  // Whole streams in one read each: the cursor steps from leaf to leaf.
  for (const auto& s : pristine().streams) {
    say("S " + s);
    std::uint64_t from = 1;
    for (int i = 0; i < 1000; ++i) {  // past each damaged record, to the end
      auto r = (*log)->read(s, from, 100'000, std::size_t{1} << 30);
      if (!r && r.error() == sy::errc::trimmed) {
        auto info = (*log)->info(s);
        if (!info) break;
        from = info->first_seq;
        continue;
      }
      if (!r && r.error() != sy::errc::corrupted) break;
      for (const auto& rec : r ? r->records : std::vector<sy::record>{}) {
        const auto it = pristine().records.find({s, rec.seq});
        if (it == pristine().records.end() || it->second.payload != rec.payload ||
            it->second.destination != rec.destination)
          say("W " + s + " " + std::to_string(rec.seq));
      }
      if (r && r->damaged_seq == 0) break;
      from = r ? r->damaged_seq + 1 : from + 1;
    }
  }
  say("L");
  (void)(*log)->list();
  for (const auto& s : pristine().streams) (void)(*log)->info(s);
  say("l");
  ::_exit(0);
}

// Runs probe children on the log in `dir` until every record was read or
// faulted on (a child that dies is replaced by one that skips what is
// known; at most 6 children).
probe_result probe(const std::filesystem::path& dir) {
  probe_result out;
  std::set<record_id> known;
  for (int round = 0; round < 6; ++round) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(fds[0]);
      probe_child(dir, known, fds[1]);
    }
    ::close(fds[1]);
    std::string text;
    char buf[4096];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) != 0;) {
      if (n < 0 && errno == EINTR) continue;
      REQUIRE(n > 0);
      text.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fds[0]);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    std::istringstream lines(text);
    std::string line;
    std::optional<record_id> reading;
    bool in_list = false;
    while (std::getline(lines, line)) {
      std::istringstream f(line);
      std::string tag;
      f >> tag;
      if (tag == "O") {
        f >> out.open_error;
        std::getline(f, out.open_detail);
        out.opened = out.open_error == 0;
      } else if (tag == "B") {
        record_id id;
        f >> id.first >> id.second;
        reading = id;
      } else if (tag == "R") {
        char c;
        record_id id;
        f >> c >> id.first >> id.second;
        out.reads[id] = c == 'o'   ? outcome::ok
                        : c == 'c' ? outcome::corrupted
                        : c == 'w' ? outcome::wrong
                                   : outcome::other_error;
        known.insert(id);
        reading.reset();
      } else if (tag == "S") {
        in_list = true;  // nothing left to skip past a fault from here on
      } else if (tag == "W") {
        record_id id;
        f >> id.first >> id.second;
        out.wrong_in_streams.insert(id);
      } else if (tag == "L") {
        out.streams_read = true;
        in_list = true;
      } else if (tag == "l") {
        out.listed = true;
        in_list = false;
      }
    }
    out.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    REQUIRE((WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) == 0)));
    if (!out.signal || !out.opened || in_list || !reading) break;  // done, or died where nothing is left to skip
    // The next child skips the page this one died on.
    out.faulted.insert(*reading);
    const auto page = pristine().leaf_of.at(*reading);
    for (const auto& [id, leaf] : pristine().leaf_of)
      if (leaf == page) known.insert(id);
  }
  return out;
}

// Runs `body` in a forked child: what it returned, or the signal it died of.
struct child_result {
  int signal = 0;
  std::string out;
};
child_result in_child(const std::function<std::string()>& body) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    for (const int sig : {SIGBUS, SIGSEGV, SIGILL, SIGFPE, SIGABRT}) ::signal(sig, SIG_DFL);
    const std::string out = body();
    const bool written = ::write(fds[1], out.data(), out.size()) == static_cast<ssize_t>(out.size());
    ::_exit(written ? 0 : 3);
  }
  ::close(fds[1]);
  child_result r;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    REQUIRE(n > 0);
    r.out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  r.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  if (!r.signal) REQUIRE(WEXITSTATUS(status) == 0);
  return r;
}

sy::verify_report verify(const std::filesystem::path& dir) {
  sy::verify_options o;
  o.dir = dir;
  o.timeout = std::chrono::seconds(60);
  std::string detail;
  auto r = sy::verify_log(o, &detail);
  INFO(detail);
  REQUIRE(r);
  return *r;
}

// What every kind of damage must give: never a wrong record, and the
// verifier calls the log damaged whenever a probe noticed anything.
void check_common(const probe_result& r, const sy::verify_report& v) {
  INFO(r.summary());
  CHECK(r.count(outcome::wrong) == 0);
  CHECK(r.wrong_in_streams.empty());
  const bool noticed = !r.opened || r.signal != 0 || !r.faulted.empty() || r.count(outcome::corrupted) > 0 ||
                       r.count(outcome::other_error) > 0;
  if (noticed) {
    INFO("verify found " << v.problem_count << " problems, signal " << v.signal);
    CHECK_FALSE(v.intact());
  }
}

std::string describe(const sy::verify_report& v) {
  std::string out = std::to_string(v.problem_count) + " problems, signal " + std::to_string(v.signal);
  for (const auto& p : v.problems) out += "; " + p.what;
  return out;
}

}  // namespace

TEST_CASE("the pristine log opens, reads back and verifies intact", "[storage][corruption]") {
  const auto& log = pristine();
  damaged_copy copy(log.file);
  const auto r = probe(copy.log_dir());
  INFO(r.summary());
  CHECK(r.opened);
  CHECK(r.signal == 0);
  CHECK(r.count(outcome::ok) == log.records.size());
  CHECK(r.streams_read);
  CHECK(r.wrong_in_streams.empty());
  CHECK(r.listed);
  const auto v = verify(copy.log_dir());
  INFO(describe(v));
  CHECK(v.intact());
  CHECK(v.pages_checked);
  CHECK(v.records == log.records.size());
  CHECK(v.streams == log.streams.size());
}

TEST_CASE("data.mdb cut to half its size is refused at open with both sizes in the message", "[storage][corruption]") {
  const auto& log = pristine();
  bytes half(log.file.begin(), log.file.begin() + static_cast<std::ptrdiff_t>(log.file.size() / 2));
  damaged_copy copy(half);
  // In a child: without the check, the first read of a page past the end
  // raises SIGBUS.
  const auto r = probe(copy.log_dir());
  INFO(r.summary());
  CHECK(r.signal == 0);
  CHECK_FALSE(r.opened);
  CHECK(r.open_error == static_cast<int>(sy::errc::corrupted));
  CHECK(r.open_detail == " file shorter than " + std::to_string(log.file.size()) + " bytes (data.mdb is " +
                             std::to_string(half.size()) + " bytes)");
}

TEST_CASE("data.mdb cut short at any offset is refused at open and never faults", "[storage][corruption]") {
  const auto& log = pristine();
  const std::size_t ps = log.page_size, size = log.file.size();
  std::vector<std::size_t> cuts = {0,      1,          100,    ps - 1,   ps,        ps + 1,        2 * ps - 1,
                                   2 * ps, 2 * ps + 1, 3 * ps, size / 2, size - ps, size - ps + 1, size - 1};
  std::mt19937_64 rng(20240601);
  for (int i = 0; i < 16; ++i) cuts.push_back(2 * ps + rng() % (size - 2 * ps));
  for (const auto cut : cuts) {
    INFO("cut at " << cut << " of " << size);
    damaged_copy copy(bytes(log.file.begin(), log.file.begin() + static_cast<std::ptrdiff_t>(cut)));
    const auto r = probe(copy.log_dir());
    INFO(r.summary());
    CHECK(r.signal == 0);
    CHECK_FALSE(r.opened);
    CHECK(r.open_error == static_cast<int>(sy::errc::corrupted));
    CHECK_FALSE(r.open_detail.empty());
    const auto v = verify(copy.log_dir());
    CHECK_FALSE(v.intact());
    CHECK(v.signal == 0);
  }
}

TEST_CASE("random bytes over overflow pages fail only the record stored there, without a fault",
          "[storage][corruption]") {
  const auto& log = pristine();
  std::mt19937_64 rng(7);
  std::vector<record_id> big;
  for (const auto& [id, pages] : log.overflow_of) big.push_back(id);
  for (int i = 0; i < 12; ++i) {
    const auto& victim = big[rng() % big.size()];
    const auto [first, count] = log.overflow_of.at(victim);
    // 256 bytes somewhere in the record's pages, header included.
    const std::size_t span = count * log.page_size;
    const std::size_t at = first * log.page_size + rng() % (span - 256);
    INFO("record " << victim.first << "/" << victim.second << ", bytes at " << at);
    bytes data = log.file;
    for (std::size_t k = 0; k < 256; ++k) data[at + k] = static_cast<std::byte>(rng());
    damaged_copy copy(data);
    const auto r = probe(copy.log_dir());
    const auto v = verify(copy.log_dir());
    check_common(r, v);
    INFO(r.summary());
    CHECK(r.signal == 0);
    CHECK(r.opened);
    for (const auto& [id, o] : r.reads) {
      if (id == victim) continue;
      INFO(id.first << "/" << id.second);
      CHECK(o == outcome::ok);
    }
    CHECK(r.reads.at(victim) == outcome::corrupted);
    INFO(describe(v));
    REQUIRE_FALSE(v.problems.empty());
    CHECK(v.problems.front().stream == victim.first);
    CHECK(v.problems.front().seq == victim.second);
  }
}

TEST_CASE("random bytes over a records leaf page never fault or return wrong data, and spare the other pages' records",
          "[storage][corruption]") {
  const auto& log = pristine();
  std::mt19937_64 rng(11);
  const auto leaves = log.pages_of(page_kind::records_leaf);
  REQUIRE(leaves.size() >= 3);
  for (int i = 0; i < 16; ++i) {
    const auto page = leaves[rng() % leaves.size()];
    const std::size_t at = page * log.page_size + rng() % (log.page_size - 256);
    INFO("page " << page << ", bytes at " << at);
    bytes data = log.file;
    for (std::size_t k = 0; k < 256; ++k) data[at + k] = static_cast<std::byte>(rng());
    damaged_copy copy(data);
    const auto r = probe(copy.log_dir());
    const auto v = verify(copy.log_dir());
    check_common(r, v);
    INFO(r.summary());
    CHECK(r.opened);
    // LMDB asserts or faults on about half of these pages (a node whose
    // flags say "duplicates" sends it through a null pointer): the guard
    // turns that into corrupted (storage/lmdb_guard.hpp).
    CHECK(r.signal == 0);
    CHECK(r.faulted.empty());
    CHECK(r.streams_read);
    // Records on other pages are reached without touching this one.
    for (const auto& [id, o] : r.reads)
      if (log.leaf_of.at(id) != page) {
        INFO(id.first << "/" << id.second);
        CHECK(o == outcome::ok);
      }
  }
}

TEST_CASE("random bytes anywhere in data.mdb never fault or return wrong data, and verify notices what reads notice",
          "[storage][corruption]") {
  const auto& log = pristine();
  std::mt19937_64 rng(23);
  int refused = 0;
  for (int i = 0; i < 40; ++i) {
    const std::size_t at = rng() % (log.file.size() - 256);
    INFO("bytes at " << at << " (page " << at / log.page_size << ")");
    bytes data = log.file;
    for (std::size_t k = 0; k < 256; ++k) data[at + k] = static_cast<std::byte>(rng());
    damaged_copy copy(data);
    const auto r = probe(copy.log_dir());
    const auto v = verify(copy.log_dir());
    check_common(r, v);
    INFO(r.summary());
    CHECK(r.signal == 0);
    CHECK(r.faulted.empty());
    CHECK(v.signal == 0);
    refused += !r.opened;
  }
  WARN(refused << " of 40 probes refused at open");
}

TEST_CASE("a zeroed page is reported as damage and never faults", "[storage][corruption]") {
  const auto& log = pristine();
  std::vector<std::uint64_t> pages;
  for (std::size_t p = 2; p < log.pages(); p += std::max<std::size_t>(1, log.pages() / 20)) pages.push_back(p);
  for (const auto k : {page_kind::records_branch, page_kind::records_leaf, page_kind::overflow, page_kind::other})
    pages.push_back(log.pages_of(k).front());
  for (const auto page : pages) {
    INFO("page " << page << " zeroed");
    bytes data = log.file;
    std::fill_n(data.begin() + static_cast<std::ptrdiff_t>(page * log.page_size), log.page_size, std::byte{0});
    damaged_copy copy(data);
    const auto r = probe(copy.log_dir());
    const auto v = verify(copy.log_dir());
    check_common(r, v);
    INFO(r.summary());
    CHECK(r.signal == 0);
    CHECK(r.faulted.empty());
    CHECK((!r.opened || r.streams_read));  // reads stepping onto the zeroed page from the one before
    CHECK(v.signal == 0);
    CHECK_FALSE(v.intact());
    // A zeroed leaf or overflow page costs only the records on it.
    if (log.kinds[page] == page_kind::records_leaf || log.kinds[page] == page_kind::overflow) {
      CHECK(r.opened);
      for (const auto& [id, o] : r.reads) {
        const bool here =
            log.leaf_of.at(id) == page || (log.overflow_of.contains(id) && log.overflow_of.at(id).first <= page &&
                                           page < log.overflow_of.at(id).first + log.overflow_of.at(id).second);
        INFO(id.first << "/" << id.second);
        CHECK(o == (here ? outcome::corrupted : outcome::ok));
      }
    }
  }
}

TEST_CASE("a damaged meta page is refused at open or read without faults or wrong data", "[storage][corruption]") {
  const auto& log = pristine();
  const std::size_t ps = log.page_size;
  SECTION("either meta page zeroed is refused, naming it") {
    for (std::size_t meta = 0; meta < 2; ++meta) {
      bytes data = log.file;
      std::fill_n(data.begin() + static_cast<std::ptrdiff_t>(meta * ps), ps, std::byte{0});
      damaged_copy copy(data);
      const auto r = probe(copy.log_dir());
      INFO(r.summary());
      CHECK(r.signal == 0);
      CHECK_FALSE(r.opened);
      CHECK(r.open_error == static_cast<int>(sy::errc::corrupted));
      CHECK(r.open_detail == " meta page " + std::to_string(meta) + " is damaged (it is not an LMDB meta page)");
      CHECK_FALSE(verify(copy.log_dir()).intact());
    }
  }
  SECTION("a transaction id pushed ahead is refused, not trusted") {
    // The compacted copy's meta page 0 describes an empty database (txn 0)
    // and page 1 the real one (txn 1): trusting a damaged id on page 0
    // would open an empty log, and the next write would build on it.
    bytes data = log.file;
    REQUIRE(le(data, 144, 8) == 0);
    REQUIRE(le(data, ps + 144, 8) == 1);
    data[144] = std::byte{7};
    damaged_copy copy(data);
    const auto r = probe(copy.log_dir());
    INFO(r.summary());
    CHECK(r.signal == 0);
    CHECK_FALSE(r.opened);
    CHECK(r.open_error == static_cast<int>(sy::errc::corrupted));
    CHECK(r.open_detail == " the meta pages disagree (transaction ids 7 and 1)");
    CHECK_FALSE(verify(copy.log_dir()).intact());
  }
  SECTION("random bytes over the fields of either meta page") {
    std::mt19937_64 rng(31);
    for (int i = 0; i < 16; ++i) {
      const std::size_t meta = static_cast<std::size_t>(i % 2);
      // Past the page header, magic and version: the sizes, roots, last
      // page and transaction id LMDB trusts.
      const std::size_t from = meta * ps + 24, len = 8 + rng() % 128;
      INFO("meta " << meta << ": " << len << " bytes at " << from);
      bytes data = log.file;
      for (std::size_t k = 0; k < len; ++k) data[from + k] = static_cast<std::byte>(rng());
      damaged_copy copy(data);
      const auto r = probe(copy.log_dir());
      const auto v = verify(copy.log_dir());
      check_common(r, v);
    }
  }
}

TEST_CASE("a record whose stored length points past the end of the file is reported as corrupted, not read",
          "[storage][corruption]") {
  const auto& log = pristine();
  bytes data = log.file;
  // The leaf node of `id`: its first four bytes are the value's size (two
  // u16 halves), its key follows the 8-byte header, then the value (or,
  // for an overflow value, its page number).
  const auto node_of = [&](const record_id& id) {
    const std::size_t page = log.leaf_of.at(id) * log.page_size;
    for (std::size_t i = 0; i < (le(data, page + 12, 2) - L::page_header) / 2; ++i) {
      const std::size_t at = page + le(data, page + L::page_header + 2 * i, 2);
      if (le(data, at + 6, 2) == 16 && be64(data, at + 16) == id.second) return at;
    }
    FAIL("no node for " << id.first << "/" << id.second);
    return std::size_t{0};
  };
  record_id victim;
  SECTION("an inline value's length") {
    victim = {"alpha", 40};
    REQUIRE_FALSE(log.overflow_of.contains(victim));
    const auto node = node_of(victim);
    for (int b = 0; b < 4; ++b) data[node + b] = std::byte{0xFF};  // 4 GiB - 1
  }
  SECTION("an overflow value's page number") {
    victim = {"beta.big", 10};
    REQUIRE(log.overflow_of.contains(victim));
    const auto node = node_of(victim);
    // The last page of the file: the value runs past its end.
    const std::uint64_t last = log.pages() - 1;
    for (int b = 0; b < 8; ++b) data[node + L::node_header + 16 + b] = static_cast<std::byte>(last >> (8 * b));
  }
  damaged_copy copy(data);
  // In a child first: without the bounds checks, reading the record (its
  // checksum runs over the damaged length) raises SIGBUS.
  const auto r = probe(copy.log_dir());
  const auto v = verify(copy.log_dir());
  check_common(r, v);
  INFO(r.summary());
  CHECK(r.signal == 0);
  REQUIRE(r.opened);
  CHECK(r.count(outcome::ok) == log.records.size() - 1);
  CHECK(r.reads.at(victim) == outcome::corrupted);
  CHECK(v.signal == 0);
  REQUIRE(v.problem_count == 1);
  CHECK(v.problems.front().stream == victim.first);
  CHECK(v.problems.front().seq == victim.second);
  CHECK(v.problems.front().what.find("outside the data file") != std::string::npos);

  // The read names the record, and trims stop short of its page (and of
  // the pages next to it, which LMDB may merge with) instead of moving it by
  // its damaged length: without that, LMDB's delete faults.
  const auto& [stream, seq] = victim;
  const auto trims = in_child([&, stream = stream, seq = seq] {
    sy::log_options o;
    o.dir = copy.log_dir();
    o.preallocate = false;  // the file as LMDB writes it: it ends at the last page used
    auto opened = sy::sequence_log::open(o);
    if (!opened) return std::string("open failed");
    auto& l = **opened;
    std::ostringstream out;
    sy::diagnostics diag;
    auto read = l.read(stream, seq, 10, std::size_t{1} << 30, &diag);
    out << "read "
        << (read                                  ? "ok"
            : read.error() == sy::errc::corrupted ? "corrupted"
                                                  : "error")
        << "\n"
        << diag.stream << "\n"
        << diag.seq << "\n"
        << diag.message << "\n";
    auto up_to = l.read(stream, 1, 1000, std::size_t{1} << 30);
    out << (up_to ? up_to->records.size() : 999'999) << " " << (up_to ? up_to->damaged_seq : 0) << "\n";
    std::uint64_t removed = 0;
    std::error_code refused;
    for (int i = 0; i < 10 && !refused; ++i) {
      auto trimmed = l.trim(stream, seq + 1, 1000);
      if (trimmed)
        removed += *trimmed;
      else
        refused = trimmed.error();
    }
    auto after = l.info(stream);
    auto still = l.read(stream, seq, 1, std::size_t{1} << 30);
    auto next = l.read(stream, seq + 1, 1, std::size_t{1} << 30);
    out << (refused == sy::errc::corrupted) << " " << removed << " " << (after ? after->first_seq : 0) << " "
        << (!still && still.error() == sy::errc::corrupted) << " "
        << (next && next->records.size() == 1 &&
            next->records[0].payload == pristine().records.at({stream, seq + 1}).payload)
        << "\n";
    return out.str();
  });
  INFO(trims.out);
  REQUIRE(trims.signal == 0);
  std::istringstream in(trims.out);
  std::string line, diag_stream, diag_message;
  std::uint64_t diag_seq = 0, before = 0, damaged = 0;
  std::getline(in, line);
  CHECK(line == "read corrupted");
  std::getline(in, diag_stream);
  in >> diag_seq;
  in.ignore();
  std::getline(in, diag_message);
  CHECK(diag_stream == stream);
  CHECK(diag_seq == seq);
  CHECK(diag_message == "stream '" + stream + "', record " + std::to_string(seq) +
                            ": its value lies outside the data file (a damaged length or page number)");
  in >> before >> damaged;
  CHECK(before == seq - 1);
  CHECK(damaged == seq);
  int refused = 0, still_corrupted = 0, next_ok = 0;
  std::uint64_t removed = 0, first = 0;
  in >> refused >> removed >> first >> still_corrupted >> next_ok;
  CHECK(refused == 1);
  CHECK(removed < seq - 1);
  CHECK(first == 1 + removed);
  CHECK(still_corrupted == 1);
  CHECK(next_ok == 1);
}
