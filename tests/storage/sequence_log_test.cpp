// Unit tests of the LMDB sequence log: a real LMDB in a fresh temporary
// folder per test. Time and epochs never come from the system here: the
// wall clock is a variable the tests move by hand and epochs come from a
// counter, both injected through log_options.

#include "storage/errc.hpp"
#include "storage/sequence_log.hpp"
#include "tests/support/byte_pattern.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <lmdb.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace {

using namespace std::chrono_literals;
namespace sy = switchyard::storage;
using bytes = std::vector<std::byte>;
using switchyard::test::temp_dir;

// An arbitrary wall-clock start (ms since the epoch), not a round number.
constexpr std::uint64_t kStartMs = 1'712'345'678'901;
// Epochs handed out by the injected random64: kEpochBase + 0x1000 * n.
constexpr std::uint64_t kEpochBase = 0xE90C'0000'0000'0000ull;

bytes to_bytes(std::string_view s) {
  bytes out(s.size());
  std::transform(s.begin(), s.end(), out.begin(), [](char c) { return static_cast<std::byte>(c); });
  return out;
}

using switchyard::test::pattern;

template <class T>
std::string describe(const std::expected<T, std::error_code>& r) {
  return r ? std::string("ok") : r.error().category().name() + std::string(": ") + r.error().message();
}

#define REQUIRE_OK(r)         \
  do {                        \
    INFO(describe(r));        \
    REQUIRE((r).has_value()); \
  } while (0)

#define REQUIRE_ERROR(r, code)      \
  do {                              \
    REQUIRE_FALSE((r).has_value()); \
    CHECK((r).error() == (code));   \
  } while (0)

// A temporary folder plus the injected clock and epoch source. The lambdas
// capture `this`: the object stays where it was made.
struct log_env {
  temp_dir dir{"switchyard-storage"};
  std::uint64_t clock_ms = kStartMs;
  std::uint64_t epochs_drawn = 0;

  log_env() = default;
  log_env(const log_env&) = delete;
  log_env& operator=(const log_env&) = delete;

  // The log lives in a subfolder that does not exist yet: open creates it.
  std::filesystem::path log_dir() const { return dir.path() / "log"; }

  sy::log_options options(sy::durability mode = sy::durability::sync) {
    sy::log_options o;
    o.dir = log_dir();
    o.mode = mode;
    o.initial_map_size = std::size_t{4} << 20;
    o.max_map_size = std::size_t{64} << 20;
    o.wall_clock_ms = [this] { return clock_ms; };
    o.random64 = [this] { return kEpochBase + 0x1000 * ++epochs_drawn; };
    return o;
  }

  std::unique_ptr<sy::sequence_log> open(sy::log_options o) {
    auto r = sy::sequence_log::open(std::move(o));
    REQUIRE_OK(r);
    REQUIRE(*r != nullptr);
    return std::move(*r);
  }
  std::unique_ptr<sy::sequence_log> open() { return open(options()); }
};

std::uint64_t append_ok(sy::sequence_log& log, std::string_view stream, const bytes& payload,
                        const bytes& destination = {}) {
  auto r = log.append(stream, payload, destination);
  REQUIRE_OK(r);
  return *r;
}

sy::read_result read_ok(sy::sequence_log& log, std::string_view stream, std::uint64_t from,
                        std::size_t max_count = 1000, std::size_t max_bytes = std::size_t{1} << 30) {
  auto r = log.read(stream, from, max_count, max_bytes);
  REQUIRE_OK(r);
  return std::move(*r);
}

sy::stream_info info_ok(const sy::sequence_log& log, std::string_view stream) {
  auto r = log.info(stream);
  REQUIRE_OK(r);
  return *r;
}

std::vector<std::uint64_t> seqs_of(const sy::read_result& r) {
  std::vector<std::uint64_t> out;
  for (const auto& rec : r.records) out.push_back(rec.seq);
  return out;
}

std::vector<std::uint64_t> iota_seqs(std::uint64_t first, std::uint64_t last) {
  std::vector<std::uint64_t> out;
  for (std::uint64_t s = first; s <= last; ++s) out.push_back(s);
  return out;
}

// The whole LMDB data file of a closed log.
bytes read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE(in.good());
  std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bytes out(raw.size());
  std::transform(raw.begin(), raw.end(), out.begin(), [](char c) { return static_cast<std::byte>(c); });
  return out;
}

void write_file(const std::filesystem::path& p, const bytes& data) {
  std::ofstream out(p, std::ios::binary | std::ios::in | std::ios::out);
  REQUIRE(out.good());
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  out.close();
  REQUIRE_FALSE(out.fail());
}

// Offsets of every occurrence of `needle` in `hay` (LMDB copies pages on
// write, so older versions of a leaf page may still hold a record).
std::vector<std::size_t> find_all(const bytes& hay, const bytes& needle) {
  std::vector<std::size_t> out;
  auto it = hay.begin();
  for (std::size_t guard = 0; guard < 10'000; ++guard) {
    it = std::search(it, hay.end(), needle.begin(), needle.end());
    if (it == hay.end()) break;
    out.push_back(static_cast<std::size_t>(it - hay.begin()));
    ++it;
  }
  return out;
}

std::uint64_t load_le64(const bytes& b, std::size_t at) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | static_cast<std::uint64_t>(b[at + static_cast<std::size_t>(i)]);
  return v;
}

}  // namespace

// ---------------------------------------------------------------- append

TEST_CASE("append numbers each stream's records 1, 2, 3 independently of other streams", "[storage]") {
  log_env env;
  auto log = env.open();
  CHECK(append_ok(*log, "a", to_bytes("a1")) == 1);
  CHECK(append_ok(*log, "a", to_bytes("a2")) == 2);
  CHECK(append_ok(*log, "b", to_bytes("b1")) == 1);
  CHECK(append_ok(*log, "a", to_bytes("a3")) == 3);
  CHECK(append_ok(*log, "b", to_bytes("b2")) == 2);
  CHECK(append_ok(*log, "c", to_bytes("c1")) == 1);
  CHECK(append_ok(*log, "a", to_bytes("a4")) == 4);

  const auto a = read_ok(*log, "a", 1);
  REQUIRE(seqs_of(a) == iota_seqs(1, 4));
  CHECK(a.records[0].payload == to_bytes("a1"));
  CHECK(a.records[3].payload == to_bytes("a4"));
  const auto b = read_ok(*log, "b", 1);
  REQUIRE(seqs_of(b) == iota_seqs(1, 2));
  CHECK(b.records[1].payload == to_bytes("b2"));
  CHECK(info_ok(*log, "c").last_seq == 1);
}

TEST_CASE("stream_count counts each stream once, survives a reopen and includes empty streams with retention",
          "[storage]") {
  log_env env;
  {
    auto log = env.open();
    CHECK(log->stream_count().value() == 0);
    append_ok(*log, "a", to_bytes("a1"));
    append_ok(*log, "a", to_bytes("a2"));
    append_ok(*log, "b", to_bytes("b1"));
    CHECK(log->stream_count().value() == 2);
    sy::retention keep{};
    keep.max_records = 5;
    REQUIRE(log->set_retention("empty", keep));
    CHECK(log->stream_count().value() == 3);
  }
  auto again = env.open();
  CHECK(again->stream_count().value() == 3);
}

TEST_CASE("a batch append returns its items' sequences in order across old and new streams", "[storage]") {
  log_env env;
  auto log = env.open();
  append_ok(*log, "old", to_bytes("o1"));
  append_ok(*log, "old", to_bytes("o2"));

  const bytes p[] = {to_bytes("n1"), to_bytes("o3"), to_bytes("m1"), to_bytes("n2"), to_bytes("o4"), to_bytes("m2")};
  const std::vector<sy::append_item> items = {
      {"new", p[0]}, {"old", p[1]}, {"more", p[2]}, {"new", p[3]}, {"old", p[4]}, {"more", p[5]},
  };
  auto r = log->append(items);
  REQUIRE_OK(r);
  CHECK(*r == std::vector<std::uint64_t>{1, 3, 1, 2, 4, 2});

  const auto n = read_ok(*log, "new", 1);
  REQUIRE(seqs_of(n) == iota_seqs(1, 2));
  CHECK(n.records[0].payload == p[0]);
  CHECK(n.records[1].payload == p[3]);
  const auto o = read_ok(*log, "old", 1);
  REQUIRE(seqs_of(o) == iota_seqs(1, 4));
  CHECK(o.records[2].payload == p[1]);
  CHECK(o.records[3].payload == p[4]);
  const auto m = read_ok(*log, "more", 1);
  REQUIRE(seqs_of(m) == iota_seqs(1, 2));
  CHECK(m.records[0].payload == p[2]);
  CHECK(m.records[1].payload == p[5]);

  // A stream created by a batch continues normally afterwards.
  CHECK(append_ok(*log, "more", to_bytes("m3")) == 3);
  CHECK(append_ok(*log, "new", to_bytes("n3")) == 3);
}

TEST_CASE("a batch with one invalid item fails with invalid_argument and stores nothing", "[storage]") {
  log_env env;
  auto opts = env.options();
  opts.max_record_bytes = 1000;
  auto log = env.open(opts);
  append_ok(*log, "existing", to_bytes("e1"));
  const auto before = info_ok(*log, "existing");

  const bytes ok = to_bytes("fine");
  const bytes too_big(1001, std::byte{0x42});
  const std::string long_name(256, 'n');
  std::vector<sy::append_item> items = {{"existing", ok}, {"fresh", ok}};

  SECTION("empty stream name") { items.push_back({"", ok}); }
  SECTION("stream name over 255 bytes") { items.push_back({long_name, ok}); }
  SECTION("payload over max_record_bytes") { items.push_back({"fresh", too_big}); }
  items.push_back({"existing", ok});

  auto r = log->append(items);
  REQUIRE_ERROR(r, sy::errc::invalid_argument);

  const auto after = info_ok(*log, "existing");
  CHECK(after.last_seq == before.last_seq);
  CHECK(after.records == before.records);
  CHECK(after.bytes == before.bytes);
  CHECK(read_ok(*log, "existing", 1).records.size() == 1);
  REQUIRE_ERROR(log->info("fresh"), sy::errc::not_found);
  auto all = log->list();
  REQUIRE_OK(all);
  CHECK(all->size() == 1);
  // Nothing was consumed: the next append continues at last + 1.
  CHECK(append_ok(*log, "existing", ok) == 2);
  CHECK(append_ok(*log, "fresh", ok) == 1);
}

TEST_CASE("a 255-byte stream name and a payload of exactly max_record_bytes are accepted", "[storage]") {
  log_env env;
  auto opts = env.options();
  opts.max_record_bytes = 1000;
  auto log = env.open(opts);
  const std::string name(255, 'x');
  const bytes payload = pattern(1000, 7);
  CHECK(append_ok(*log, name, payload) == 1);
  const auto r = read_ok(*log, name, 1);
  REQUIRE(r.records.size() == 1);
  CHECK(r.records[0].payload == payload);
  CHECK(info_ok(*log, name).name == name);
}

TEST_CASE("single appends with an invalid name or payload fail with invalid_argument", "[storage]") {
  log_env env;
  auto opts = env.options();
  opts.max_record_bytes = 100;
  auto log = env.open(opts);
  REQUIRE_ERROR(log->append("", to_bytes("x")), sy::errc::invalid_argument);
  REQUIRE_ERROR(log->append(std::string(256, 'y'), to_bytes("x")), sy::errc::invalid_argument);
  REQUIRE_ERROR(log->append("s", bytes(101)), sy::errc::invalid_argument);
  auto all = log->list();
  REQUIRE_OK(all);
  CHECK(all->empty());
}

// ---------------------------------------------------------------- destinations

TEST_CASE("a record's destination reads back byte for byte next to its payload, empty or not", "[storage]") {
  log_env env;
  const bytes with_zeros = {std::byte{0}, std::byte{2}, std::byte{0}, std::byte{0xFF}, std::byte{0}};
  const bytes largest = pattern(sy::max_destination_bytes, 11);
  const bytes large_payload = pattern(70'000, 12);  // destination and payload over several overflow pages
  {
    auto log = env.open();
    append_ok(*log, "s", to_bytes("no destination"));
    REQUIRE(append_ok(*log, "s", to_bytes("zeros in the destination"), with_zeros) == 2);
    REQUIRE(append_ok(*log, "s", bytes{}, to_bytes("empty payload")) == 3);
    REQUIRE(append_ok(*log, "s", large_payload, largest) == 4);
    REQUIRE(append_ok(*log, "s", bytes{}, bytes{}) == 5);

    const auto r = read_ok(*log, "s", 1);
    REQUIRE(seqs_of(r) == iota_seqs(1, 5));
    CHECK(r.records[0].destination.empty());
    CHECK(r.records[0].payload == to_bytes("no destination"));
    CHECK(r.records[1].destination == with_zeros);
    CHECK(r.records[1].payload == to_bytes("zeros in the destination"));
    CHECK(r.records[2].destination == to_bytes("empty payload"));
    CHECK(r.records[2].payload.empty());
    CHECK(r.records[3].destination == largest);
    CHECK(r.records[3].payload == large_payload);
    CHECK(r.records[4].destination.empty());
    CHECK(r.records[4].payload.empty());
  }
  // The same after a reopen.
  auto log = env.open();
  const auto r = read_ok(*log, "s", 2, 3);
  REQUIRE(seqs_of(r) == iota_seqs(2, 4));
  CHECK(r.records[0].destination == with_zeros);
  CHECK(r.records[1].destination == to_bytes("empty payload"));
  CHECK(r.records[2].destination == largest);
  CHECK(r.records[2].payload == large_payload);
}

TEST_CASE("a batch append stores each item's own destination, empty ones included", "[storage]") {
  log_env env;
  auto log = env.open();
  append_ok(*log, "old", to_bytes("o1"));
  const bytes p[] = {to_bytes("n1"), to_bytes("o2"), to_bytes("n2"), to_bytes("o3"), to_bytes("n3")};
  const bytes subj[] = {to_bytes("destination of n1"), pattern(300, 21), to_bytes("x")};
  const std::vector<sy::append_item> items = {
      {"new", p[0], subj[0]}, {"old", p[1]}, {"new", p[2], subj[1]}, {"old", p[3], subj[2]}, {"new", p[4], {}},
  };
  auto r = log->append(items);
  REQUIRE_OK(r);
  CHECK(*r == std::vector<std::uint64_t>{1, 2, 2, 3, 3});

  const auto n = read_ok(*log, "new", 1);
  REQUIRE(seqs_of(n) == iota_seqs(1, 3));
  CHECK(n.records[0].destination == subj[0]);
  CHECK(n.records[0].payload == p[0]);
  CHECK(n.records[1].destination == subj[1]);
  CHECK(n.records[1].payload == p[2]);
  CHECK(n.records[2].destination.empty());
  CHECK(n.records[2].payload == p[4]);
  const auto o = read_ok(*log, "old", 1);
  REQUIRE(seqs_of(o) == iota_seqs(1, 3));
  CHECK(o.records[0].destination.empty());
  CHECK(o.records[1].destination.empty());
  CHECK(o.records[1].payload == p[1]);
  CHECK(o.records[2].destination == subj[2]);
  CHECK(o.records[2].payload == p[3]);
}

TEST_CASE("a destination of exactly max_destination_bytes is accepted and one byte more fails with invalid_argument",
          "[storage]") {
  log_env env;
  auto log = env.open();
  CHECK(sy::max_destination_bytes == 64 * 1024);
  const bytes largest(sy::max_destination_bytes, std::byte{0x5A});
  const bytes too_large(sy::max_destination_bytes + 1, std::byte{0x5A});
  CHECK_FALSE(log->check("s", 10, sy::max_destination_bytes));
  CHECK(log->check("s", 10, sy::max_destination_bytes + 1) == sy::errc::invalid_argument);

  REQUIRE_ERROR(log->append("s", to_bytes("p"), too_large), sy::errc::invalid_argument);
  REQUIRE_ERROR(log->info("s"), sy::errc::not_found);
  // In a batch, the whole batch is refused.
  const bytes ok = to_bytes("fine");
  const std::vector<sy::append_item> items = {{"s", ok}, {"s", ok, too_large}, {"t", ok}};
  REQUIRE_ERROR(log->append(items), sy::errc::invalid_argument);
  auto all = log->list();
  REQUIRE_OK(all);
  CHECK(all->empty());

  CHECK(append_ok(*log, "s", to_bytes("p"), largest) == 1);
  CHECK(read_ok(*log, "s", 1).records.at(0).destination == largest);
}

TEST_CASE("destination bytes count towards a stream's bytes, byte retention and read's max_bytes", "[storage]") {
  log_env env;
  auto log = env.open();
  // Each record: 10 payload + 90 destination bytes = 100.
  for (std::uint64_t i = 1; i <= 6; ++i) REQUIRE(append_ok(*log, "s", pattern(10, i), pattern(90, 100 + i)) == i);
  CHECK(info_ok(*log, "s").bytes == 600);

  // max_bytes 250: two records (200), not three.
  const auto r = read_ok(*log, "s", 1, 100, 250);
  REQUIRE(seqs_of(r) == iota_seqs(1, 2));
  CHECK(r.records[1].destination == pattern(90, 102));

  CHECK(*log->trim("s", 2, 100) == 1);
  CHECK(info_ok(*log, "s").bytes == 500);
  CHECK(*log->enforce("s", sy::retention{.max_bytes = 300}, 100) == 2);
  const auto i = info_ok(*log, "s");
  CHECK(i.bytes == 300);
  CHECK(i.first_seq == 4);
}

// ---------------------------------------------------------------- read

TEST_CASE("read returns payloads byte for byte with timestamps from the injected clock", "[storage]") {
  log_env env;
  auto log = env.open();
  const bytes with_zeros = {std::byte{0}, std::byte{1}, std::byte{0}, std::byte{0xFF}, std::byte{0}, std::byte{0}};
  const bytes empty;
  const bytes all_values = [] {
    bytes b(256);
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::byte>(i);
    return b;
  }();
  const bytes large = pattern(70'000, 3);  // larger than a page: an overflow page in LMDB

  env.clock_ms = kStartMs + 11;
  append_ok(*log, "s", with_zeros);
  env.clock_ms = kStartMs + 22;
  append_ok(*log, "s", empty);
  env.clock_ms = kStartMs + 33;
  append_ok(*log, "s", all_values);
  env.clock_ms = kStartMs + 44;
  append_ok(*log, "s", large);

  const auto r = read_ok(*log, "s", 1);
  REQUIRE(seqs_of(r) == iota_seqs(1, 4));
  CHECK(r.last_seq == 4);
  CHECK(r.records[0].payload == with_zeros);
  CHECK(r.records[1].payload.empty());
  CHECK(r.records[2].payload == all_values);
  CHECK(r.records[3].payload == large);
  CHECK(r.records[0].timestamp_ms == kStartMs + 11);
  CHECK(r.records[1].timestamp_ms == kStartMs + 22);
  CHECK(r.records[2].timestamp_ms == kStartMs + 33);
  CHECK(r.records[3].timestamp_ms == kStartMs + 44);
}

TEST_CASE("read returns at most max_count records", "[storage]") {
  log_env env;
  auto log = env.open();
  for (int i = 1; i <= 10; ++i) append_ok(*log, "s", pattern(10, static_cast<std::uint64_t>(i)));
  CHECK(seqs_of(read_ok(*log, "s", 1, 3)) == iota_seqs(1, 3));
  CHECK(seqs_of(read_ok(*log, "s", 4, 3)) == iota_seqs(4, 6));
  CHECK(seqs_of(read_ok(*log, "s", 9, 3)) == iota_seqs(9, 10));
  CHECK(seqs_of(read_ok(*log, "s", 5, 1)) == iota_seqs(5, 5));
  const auto none = read_ok(*log, "s", 1, 0);
  CHECK(none.records.empty());
  CHECK(none.last_seq == 10);
  const auto r = read_ok(*log, "s", 7, 2);
  REQUIRE(r.records.size() == 2);
  CHECK(r.records[0].payload == pattern(10, 7));
  CHECK(r.records[1].payload == pattern(10, 8));
}

TEST_CASE("read stops before max_bytes but always returns the first record", "[storage]") {
  log_env env;
  auto log = env.open();
  for (int i = 1; i <= 6; ++i) append_ok(*log, "s", pattern(100, static_cast<std::uint64_t>(i)));
  append_ok(*log, "s", pattern(5000, 7));
  append_ok(*log, "s", pattern(100, 8));

  CHECK(seqs_of(read_ok(*log, "s", 1, 100, 300)) == iota_seqs(1, 3));  // exactly fits
  CHECK(seqs_of(read_ok(*log, "s", 1, 100, 299)) == iota_seqs(1, 2));
  CHECK(seqs_of(read_ok(*log, "s", 2, 100, 50)) == iota_seqs(2, 2));  // first record even if larger
  CHECK(seqs_of(read_ok(*log, "s", 1, 100, 0)) == iota_seqs(1, 1));
  const auto big = read_ok(*log, "s", 7, 100, 10);
  REQUIRE(seqs_of(big) == iota_seqs(7, 7));
  CHECK(big.records[0].payload == pattern(5000, 7));
  CHECK(seqs_of(read_ok(*log, "s", 5, 100, 1000)) == iota_seqs(5, 6));   // the 5000-byte record does not fit
  CHECK(seqs_of(read_ok(*log, "s", 1, 2, 100'000)) == iota_seqs(1, 2));  // the count limit still applies
}

TEST_CASE("read from past the last sequence returns no records and the last sequence", "[storage]") {
  log_env env;
  auto log = env.open();
  append_ok(*log, "s", to_bytes("1"));
  append_ok(*log, "s", to_bytes("2"));
  const auto epoch = info_ok(*log, "s").epoch;
  for (const std::uint64_t from : {std::uint64_t{3}, std::uint64_t{4}, std::uint64_t{1'000'000}}) {
    const auto r = read_ok(*log, "s", from);
    CHECK(r.records.empty());
    CHECK(r.last_seq == 2);
    CHECK(r.epoch == epoch);
  }
}

TEST_CASE("read, info and trim of an unknown stream fail with not_found", "[storage]") {
  log_env env;
  auto log = env.open();
  REQUIRE_ERROR(log->read("nope", 1, 10, 1000), sy::errc::not_found);
  REQUIRE_ERROR(log->info("nope"), sy::errc::not_found);
  REQUIRE_ERROR(log->trim("nope", 5, 10), sy::errc::not_found);
  REQUIRE_ERROR(log->enforce("nope", sy::retention{.max_records = 1}, 10), sy::errc::not_found);
  append_ok(*log, "other", to_bytes("x"));
  REQUIRE_ERROR(log->read("nope", 1, 10, 1000), sy::errc::not_found);
  REQUIRE_ERROR(log->read("othe", 1, 10, 1000), sy::errc::not_found);  // a prefix is another name
}

// ---------------------------------------------------------------- info, list

TEST_CASE("info reports first, last, records, bytes, created time and the injected epoch", "[storage]") {
  log_env env;
  auto log = env.open();
  env.clock_ms = kStartMs + 500;
  append_ok(*log, "s", bytes(10));
  env.clock_ms = kStartMs + 900;
  append_ok(*log, "s", bytes(25));
  append_ok(*log, "s", bytes(0));

  const auto i = info_ok(*log, "s");
  CHECK(i.name == "s");
  CHECK(i.first_seq == 1);
  CHECK(i.last_seq == 3);
  CHECK(i.records == 3);
  CHECK(i.bytes == 35);
  CHECK(i.created_ms == kStartMs + 500);  // the first append, not the latest
  CHECK(i.epoch == kEpochBase + 0x1000);
  CHECK(env.epochs_drawn == 1);  // drawn once, at creation
  CHECK(read_ok(*log, "s", 1).epoch == i.epoch);
}

TEST_CASE("list reports every stream and each new stream gets its own epoch and id", "[storage]") {
  log_env env;
  auto log = env.open();
  env.clock_ms = kStartMs + 1;
  append_ok(*log, "beta", bytes(7));
  env.clock_ms = kStartMs + 2;
  append_ok(*log, "alpha", bytes(3));
  append_ok(*log, "alpha", bytes(4));

  auto all = log->list();
  REQUIRE_OK(all);
  REQUIRE(all->size() == 2);
  std::map<std::string, sy::stream_info> by_name;
  for (const auto& s : *all) by_name[s.name] = s;
  REQUIRE(by_name.count("alpha") == 1);
  REQUIRE(by_name.count("beta") == 1);
  const auto& a = by_name["alpha"];
  const auto& b = by_name["beta"];
  CHECK(b.epoch == kEpochBase + 0x1000);
  CHECK(a.epoch == kEpochBase + 0x2000);
  CHECK(a.id != b.id);
  CHECK(a.first_seq == 1);
  CHECK(a.last_seq == 2);
  CHECK(a.records == 2);
  CHECK(a.bytes == 7);
  CHECK(a.created_ms == kStartMs + 2);
  CHECK(b.last_seq == 1);
  CHECK(b.bytes == 7);
  CHECK(b.created_ms == kStartMs + 1);
  // list and info agree.
  const auto ia = info_ok(*log, "alpha");
  CHECK(ia.id == a.id);
  CHECK(ia.epoch == a.epoch);
  CHECK(ia.bytes == a.bytes);
}

TEST_CASE("list of an empty log is empty", "[storage]") {
  log_env env;
  auto log = env.open();
  auto all = log->list();
  REQUIRE_OK(all);
  CHECK(all->empty());
}

// ---------------------------------------------------------------- reopen

TEST_CASE("reopening the log keeps records and stream metadata and sequences continue", "[storage]") {
  log_env env;
  std::vector<sy::stream_info> before;
  {
    auto log = env.open();
    for (int i = 1; i <= 5; ++i) {
      env.clock_ms = kStartMs + static_cast<std::uint64_t>(i);
      append_ok(*log, "a", pattern(40, static_cast<std::uint64_t>(i)));
    }
    append_ok(*log, "b", pattern(40, 100));
    append_ok(*log, "b", pattern(40, 101));
    REQUIRE(*log->trim("a", 3, 10) == 2);
    auto l = log->list();
    REQUIRE_OK(l);
    before = *l;
  }
  env.clock_ms = kStartMs + 10'000;
  auto log = env.open();
  auto l = log->list();
  REQUIRE_OK(l);
  REQUIRE(l->size() == before.size());
  for (std::size_t i = 0; i < before.size(); ++i) {
    CHECK((*l)[i].name == before[i].name);
    CHECK((*l)[i].id == before[i].id);
    CHECK((*l)[i].epoch == before[i].epoch);
    CHECK((*l)[i].first_seq == before[i].first_seq);
    CHECK((*l)[i].last_seq == before[i].last_seq);
    CHECK((*l)[i].records == before[i].records);
    CHECK((*l)[i].bytes == before[i].bytes);
    CHECK((*l)[i].created_ms == before[i].created_ms);
  }
  const auto a = read_ok(*log, "a", 3);
  REQUIRE(seqs_of(a) == iota_seqs(3, 5));
  for (const auto& rec : a.records) {
    CHECK(rec.payload == pattern(40, rec.seq));
    CHECK(rec.timestamp_ms == kStartMs + rec.seq);
  }
  REQUIRE_ERROR(log->read("a", 2, 10, 1000), sy::errc::trimmed);
  CHECK(append_ok(*log, "a", to_bytes("a6")) == 6);
  CHECK(append_ok(*log, "b", to_bytes("b3")) == 3);
  const auto b = read_ok(*log, "b", 1);
  REQUIRE(seqs_of(b) == iota_seqs(1, 3));
  CHECK(b.records[0].payload == pattern(40, 100));
  CHECK(b.records[2].payload == to_bytes("b3"));
  CHECK(b.records[2].timestamp_ms == kStartMs + 10'000);
  CHECK(env.epochs_drawn == 2);  // no new epoch for continued streams
}

TEST_CASE("streams created after a reopen get fresh ids and never mix records with older streams", "[storage]") {
  log_env env;
  {
    auto log = env.open();
    append_ok(*log, "a", to_bytes("a1"));
    append_ok(*log, "b", to_bytes("b1"));
    append_ok(*log, "b", to_bytes("b2"));
  }
  std::set<std::uint64_t> ids;
  {
    auto log = env.open();
    append_ok(*log, "c", to_bytes("c1"));
    append_ok(*log, "b", to_bytes("b3"));
    append_ok(*log, "c", to_bytes("c2"));
    append_ok(*log, "a", to_bytes("a2"));
  }
  auto log = env.open();
  append_ok(*log, "d", to_bytes("d1"));
  append_ok(*log, "c", to_bytes("c3"));
  append_ok(*log, "d", to_bytes("d2"));

  auto l = log->list();
  REQUIRE_OK(l);
  REQUIRE(l->size() == 4);
  for (const auto& s : *l) ids.insert(s.id);
  CHECK(ids.size() == 4);
  std::set<std::uint64_t> epochs;
  for (const auto& s : *l) epochs.insert(s.epoch);
  CHECK(epochs.size() == 4);

  const std::map<std::string, std::vector<std::string>> expected = {
      {"a", {"a1", "a2"}}, {"b", {"b1", "b2", "b3"}}, {"c", {"c1", "c2", "c3"}}, {"d", {"d1", "d2"}}};
  for (const auto& [name, payloads] : expected) {
    INFO("stream " << name);
    const auto r = read_ok(*log, name, 1);
    REQUIRE(seqs_of(r) == iota_seqs(1, payloads.size()));
    for (std::size_t i = 0; i < payloads.size(); ++i) CHECK(r.records[i].payload == to_bytes(payloads[i]));
    CHECK(info_ok(*log, name).records == payloads.size());
  }
}

// ---------------------------------------------------------------- trim

TEST_CASE("trim removes records from the front and moves first_seq", "[storage]") {
  log_env env;
  auto log = env.open();
  for (int i = 1; i <= 6; ++i) append_ok(*log, "s", pattern(10 * static_cast<std::size_t>(i), 0));

  auto t = log->trim("s", 3, 100);
  REQUIRE_OK(t);
  CHECK(*t == 2);
  auto i = info_ok(*log, "s");
  CHECK(i.first_seq == 3);
  CHECK(i.last_seq == 6);
  CHECK(i.records == 4);
  CHECK(i.bytes == 30 + 40 + 50 + 60);
  CHECK(seqs_of(read_ok(*log, "s", 3)) == iota_seqs(3, 6));

  // Below the first retained: nothing to do.
  t = log->trim("s", 2, 100);
  REQUIRE_OK(t);
  CHECK(*t == 0);
  CHECK(info_ok(*log, "s").first_seq == 3);
}

TEST_CASE("read below the first retained sequence fails with trimmed", "[storage]") {
  log_env env;
  auto log = env.open();
  for (int i = 1; i <= 5; ++i) append_ok(*log, "s", pattern(8, static_cast<std::uint64_t>(i)));
  REQUIRE(*log->trim("s", 4, 100) == 3);
  REQUIRE_ERROR(log->read("s", 1, 10, 1000), sy::errc::trimmed);
  REQUIRE_ERROR(log->read("s", 3, 10, 1000), sy::errc::trimmed);
  const auto r = read_ok(*log, "s", 4);
  REQUIRE(seqs_of(r) == iota_seqs(4, 5));
  CHECK(r.records[0].payload == pattern(8, 4));
}

TEST_CASE("trimming everything never reuses sequences: the next append continues at last + 1", "[storage]") {
  log_env env;
  {
    auto log = env.open();
    append_ok(*log, "old", to_bytes("x"));  // an older stream, so "s" is not the only one
    for (int i = 1; i <= 4; ++i) append_ok(*log, "s", pattern(16, static_cast<std::uint64_t>(i)));
    auto t = log->trim("s", 1000, 100);
    REQUIRE_OK(t);
    CHECK(*t == 4);
    const auto i = info_ok(*log, "s");
    CHECK(i.records == 0);
    CHECK(i.bytes == 0);
    CHECK(i.last_seq == 4);
    CHECK(i.first_seq == 5);  // last + 1 when empty
    CHECK(read_ok(*log, "s", 5).records.empty());
    REQUIRE_ERROR(log->read("s", 4, 10, 1000), sy::errc::trimmed);

    CHECK(append_ok(*log, "s", to_bytes("five")) == 5);
    CHECK(info_ok(*log, "s").first_seq == 5);
    // The same for a stream that is not the newest one.
    REQUIRE(*log->trim("old", 2, 10) == 1);
    CHECK(append_ok(*log, "old", to_bytes("y")) == 2);
    REQUIRE(*log->trim("s", 6, 10) == 1);
  }
  auto log = env.open();
  const auto i = info_ok(*log, "s");
  CHECK(i.first_seq == 6);
  CHECK(i.last_seq == 5);
  CHECK(append_ok(*log, "s", to_bytes("six")) == 6);
  const auto r = read_ok(*log, "s", 6);
  REQUIRE(seqs_of(r) == iota_seqs(6, 6));
  CHECK(r.records[0].payload == to_bytes("six"));
}

TEST_CASE("trim removes at most max_records records per call", "[storage]") {
  log_env env;
  auto log = env.open();
  for (int i = 1; i <= 10; ++i) append_ok(*log, "s", pattern(5, static_cast<std::uint64_t>(i)));
  CHECK(*log->trim("s", 9, 3) == 3);
  CHECK(info_ok(*log, "s").first_seq == 4);
  CHECK(*log->trim("s", 9, 3) == 3);
  CHECK(info_ok(*log, "s").first_seq == 7);
  CHECK(*log->trim("s", 9, 3) == 2);  // only 7 and 8 are below 9
  CHECK(info_ok(*log, "s").first_seq == 9);
  CHECK(*log->trim("s", 9, 3) == 0);
  CHECK(*log->trim("s", 11, 0) == 0);
  const auto i = info_ok(*log, "s");
  CHECK(i.first_seq == 9);
  CHECK(i.records == 2);
  CHECK(i.bytes == 10);
}

TEST_CASE("reads from the first retained sequence stay contiguous across trims and appends", "[storage]") {
  log_env env;
  auto log = env.open();
  std::uint64_t next = 1;
  for (int round = 0; round < 8; ++round) {
    for (int k = 0; k < 5; ++k) {
      CHECK(append_ok(*log, "s", pattern(20, next)) == next);
      append_ok(*log, "noise", pattern(20, 1000 + next));  // interleaved records of another stream
      ++next;
    }
    REQUIRE_OK(log->trim("s", next - 2, 3));
    const auto i = info_ok(*log, "s");
    REQUIRE(i.last_seq == next - 1);
    REQUIRE(i.records == i.last_seq - i.first_seq + 1);
    const auto r = read_ok(*log, "s", i.first_seq);
    REQUIRE(seqs_of(r) == iota_seqs(i.first_seq, i.last_seq));
    for (const auto& rec : r.records) CHECK(rec.payload == pattern(20, rec.seq));
  }
  CHECK(info_ok(*log, "noise").records == 40);
}

// ---------------------------------------------------------------- retention

TEST_CASE("enforce trims by record count, bounded per call, and repeated calls converge", "[storage]") {
  log_env env;
  auto log = env.open();
  for (int i = 1; i <= 10; ++i) append_ok(*log, "s", pattern(10, static_cast<std::uint64_t>(i)));
  const sy::retention limits{.max_records = 4};

  auto r = log->enforce("s", limits, 2);
  REQUIRE_OK(r);
  CHECK(*r == 2);
  CHECK(info_ok(*log, "s").first_seq == 3);

  std::size_t total = 2;
  int calls = 0;
  for (; calls < 10; ++calls) {
    r = log->enforce("s", limits, 2);
    REQUIRE_OK(r);
    CHECK(*r <= 2);
    if (*r == 0) break;
    total += *r;
  }
  CHECK(calls == 2);
  CHECK(total == 6);
  const auto i = info_ok(*log, "s");
  CHECK(i.records == 4);
  CHECK(i.first_seq == 7);
  CHECK(i.last_seq == 10);
  CHECK(seqs_of(read_ok(*log, "s", 7)) == iota_seqs(7, 10));
  CHECK(*log->enforce("s", limits, 100) == 0);
}

TEST_CASE("enforce trims by payload bytes, bounded per call, and repeated calls converge", "[storage]") {
  log_env env;
  auto log = env.open();
  for (int i = 1; i <= 10; ++i) append_ok(*log, "s", pattern(100, static_cast<std::uint64_t>(i)));
  const sy::retention limits{.max_bytes = 350};

  CHECK(*log->enforce("s", limits, 4) == 4);
  CHECK(info_ok(*log, "s").bytes == 600);
  CHECK(*log->enforce("s", limits, 4) == 3);
  CHECK(*log->enforce("s", limits, 4) == 0);
  const auto i = info_ok(*log, "s");
  CHECK(i.bytes == 300);
  CHECK(i.records == 3);
  CHECK(i.first_seq == 8);
  const auto r = read_ok(*log, "s", 8);
  REQUIRE(seqs_of(r) == iota_seqs(8, 10));
  CHECK(r.records[0].payload == pattern(100, 8));
}

TEST_CASE("enforce trims by age on the injected wall clock, bounded per call", "[storage]") {
  log_env env;
  auto log = env.open();
  for (std::uint64_t i = 0; i < 5; ++i) {
    env.clock_ms = kStartMs + 1000 * i;  // record i + 1 written at start + i s
    append_ok(*log, "s", pattern(10, i + 1));
  }
  const sy::retention limits{.max_age = 7500ms};

  env.clock_ms = kStartMs + 4000;  // nothing older than 7.5 s yet
  CHECK(*log->enforce("s", limits, 100) == 0);

  env.clock_ms = kStartMs + 10'000;  // records from before start + 2.5 s are too old: 1, 2, 3
  CHECK(*log->enforce("s", limits, 2) == 2);
  CHECK(*log->enforce("s", limits, 2) == 1);
  CHECK(*log->enforce("s", limits, 2) == 0);
  auto i = info_ok(*log, "s");
  CHECK(i.first_seq == 4);
  CHECK(i.records == 2);

  env.clock_ms = kStartMs + 60'000;  // everything is too old now
  CHECK(*log->enforce("s", limits, 100) == 2);
  i = info_ok(*log, "s");
  CHECK(i.records == 0);
  CHECK(i.first_seq == 6);
  CHECK(append_ok(*log, "s", to_bytes("fresh")) == 6);
  CHECK(*log->enforce("s", limits, 100) == 0);  // the new record is young
}

TEST_CASE("enforce with no limits removes nothing", "[storage]") {
  log_env env;
  auto log = env.open();
  for (int i = 1; i <= 3; ++i) append_ok(*log, "s", pattern(10, static_cast<std::uint64_t>(i)));
  env.clock_ms += 365ull * 24 * 3600 * 1000;
  CHECK(*log->enforce("s", sy::retention{}, 100) == 0);
  CHECK(info_ok(*log, "s").records == 3);
}

// ---------------------------------------------------------------- corruption

namespace {

// A record value on disk: checksum (u64 LE), timestamp (u64 LE), destination
// length (u32 LE), reserved (u32), destination, payload.
constexpr std::size_t kValueHeader = 24;
constexpr std::size_t kDestinationSize = 40;

bytes destination_of(std::uint64_t seq) { return pattern(kDestinationSize, 7000 + seq); }

// Appends `n` records with distinctive 64-byte payloads and 40-byte
// destinations to stream "s" of a fresh log in `env`, and closes it. Record i
// (1-based) has payload pattern(64, 5000 + i), destination destination_of(i) and
// timestamp kStartMs + 1000 * i.
void write_distinctive_records(log_env& env, int n) {
  auto log = env.open();
  append_ok(*log, "before", to_bytes("another stream"));
  for (int i = 1; i <= n; ++i) {
    const auto seq = static_cast<std::uint64_t>(i);
    env.clock_ms = kStartMs + 1000 * seq;
    REQUIRE(append_ok(*log, "s", pattern(64, 5000 + seq), destination_of(seq)) == seq);
  }
  append_ok(*log, "after", to_bytes("yet another stream"));
}

// Offsets of the start of every stored copy of record `seq`'s value in the
// data file (LMDB copies pages on write, so older page versions may hold
// it too), found through its destination and confirmed by its timestamp.
std::vector<std::size_t> value_offsets(const bytes& data, std::uint64_t seq) {
  std::vector<std::size_t> out;
  for (const auto at : find_all(data, destination_of(seq))) {
    REQUIRE(at >= kValueHeader);
    const std::size_t start = at - kValueHeader;
    if (load_le64(data, start + 8) != kStartMs + 1000 * seq) continue;
    CHECK(load_le64(data, start + 16) == kDestinationSize);  // length, then reserved 0
    out.push_back(start);
  }
  return out;
}

// Flips `mask` in byte `offset` of every stored copy of record `bad`'s
// value, in the closed log of `env`.
void flip_in_value(log_env& env, std::uint64_t bad, std::size_t offset, std::byte mask) {
  const auto file = env.log_dir() / "data.mdb";
  auto data = read_file(file);
  const auto starts = value_offsets(data, bad);
  REQUIRE_FALSE(starts.empty());
  for (const auto start : starts) data[start + offset] ^= mask;
  write_file(file, data);
}

// Reads ranges around the damaged record `bad` of the `n` written by
// write_distinctive_records: a read from it fails with corrupted naming
// stream and sequence, a range running into it stops before it and names
// it, and ranges before and after it read the right payloads.
void check_damage_is_contained(sy::sequence_log& log, std::uint64_t bad, std::uint64_t n) {
  sy::diagnostics diag;
  REQUIRE_ERROR(log.read("s", bad, 1, 1 << 20, &diag), sy::errc::corrupted);
  CHECK(diag.stream == "s");
  CHECK(diag.seq == bad);
  CHECK(diag.message.find("stream 's', record " + std::to_string(bad)) != std::string::npos);
  const auto up_to = read_ok(log, "s", 1, 100, 1 << 20);
  CHECK(seqs_of(up_to) == iota_seqs(1, bad - 1));
  CHECK(up_to.damaged_seq == bad);
  const auto one_before = read_ok(log, "s", bad - 1, 2, 1 << 20);
  CHECK(seqs_of(one_before) == iota_seqs(bad - 1, bad - 1));
  CHECK(one_before.damaged_seq == bad);

  const auto before = read_ok(log, "s", 1, bad - 1);
  REQUIRE(seqs_of(before) == iota_seqs(1, bad - 1));
  for (const auto& rec : before.records) {
    CHECK(rec.payload == pattern(64, 5000 + rec.seq));
    CHECK(rec.destination == destination_of(rec.seq));
    CHECK(rec.timestamp_ms == kStartMs + 1000 * rec.seq);
  }
  const auto after = read_ok(log, "s", bad + 1);
  REQUIRE(seqs_of(after) == iota_seqs(bad + 1, n));
  CHECK(after.damaged_seq == 0);
  for (const auto& rec : after.records) {
    CHECK(rec.payload == pattern(64, 5000 + rec.seq));
    CHECK(rec.destination == destination_of(rec.seq));
    CHECK(rec.timestamp_ms == kStartMs + 1000 * rec.seq);
  }
  // The other streams and the metadata are untouched.
  CHECK(read_ok(log, "before", 1).records.at(0).payload == to_bytes("another stream"));
  CHECK(read_ok(log, "after", 1).records.at(0).payload == to_bytes("yet another stream"));
  CHECK(info_ok(log, "s").last_seq == n);
}

}  // namespace

TEST_CASE("a flipped payload byte on disk is reported as corrupted and other ranges still read", "[storage]") {
  log_env env;
  constexpr int n = 8;
  constexpr std::uint64_t bad = 5;
  write_distinctive_records(env, n);

  const auto file = env.log_dir() / "data.mdb";
  auto data = read_file(file);
  const auto hits = find_all(data, pattern(64, 5000 + bad));
  REQUIRE_FALSE(hits.empty());
  // Every copy of the record (older page versions included) gets the flip,
  // so the live one surely has it.
  for (const auto at : hits) data[at + 17] ^= std::byte{0x01};
  write_file(file, data);
  // Only that record was touched: the neighbours' payloads are still intact.
  const auto reread = read_file(file);
  CHECK_FALSE(find_all(reread, pattern(64, 5000 + bad - 1)).empty());
  CHECK_FALSE(find_all(reread, pattern(64, 5000 + bad + 1)).empty());
  CHECK(find_all(reread, pattern(64, 5000 + bad)).empty());

  auto log = env.open();
  check_damage_is_contained(*log, bad, n);
}

TEST_CASE("a flipped byte of a record's stored timestamp is reported as corrupted", "[storage]") {
  log_env env;
  constexpr int n = 6;
  constexpr std::uint64_t bad = 3;
  write_distinctive_records(env, n);

  flip_in_value(env, bad, 8 + 1, std::byte{0x10});  // the timestamp +/- 4096 ms: still a plausible time

  auto log = env.open();
  check_damage_is_contained(*log, bad, n);
}

TEST_CASE("a flipped byte of a record's stored checksum is reported as corrupted", "[storage]") {
  log_env env;
  constexpr int n = 4;
  constexpr std::uint64_t bad = 2;
  write_distinctive_records(env, n);

  flip_in_value(env, bad, 0, std::byte{0x80});  // the checksum itself

  auto log = env.open();
  check_damage_is_contained(*log, bad, n);
}

TEST_CASE("a flipped byte of a record's stored destination is reported as corrupted", "[storage]") {
  log_env env;
  constexpr int n = 5;
  constexpr std::uint64_t bad = 3;
  write_distinctive_records(env, n);
  flip_in_value(env, bad, kValueHeader + 7, std::byte{0x04});
  // Only that record's destination changed.
  const auto data = read_file(env.log_dir() / "data.mdb");
  CHECK(find_all(data, destination_of(bad)).empty());
  CHECK_FALSE(find_all(data, destination_of(bad - 1)).empty());
  CHECK_FALSE(find_all(data, pattern(64, 5000 + bad)).empty());

  auto log = env.open();
  check_damage_is_contained(*log, bad, n);
}

TEST_CASE("a damaged destination length or reserved field of a record is reported as corrupted", "[storage]") {
  log_env env;
  constexpr int n = 5;
  constexpr std::uint64_t bad = 4;
  write_distinctive_records(env, n);
  // 40 -> 41 moves the destination/payload boundary inside the value; 40 + 2^31
  // points far past its end; the reserved field must stay 0.
  SECTION("length off by one") { flip_in_value(env, bad, 16, std::byte{0x01}); }
  SECTION("length past the value") { flip_in_value(env, bad, 19, std::byte{0x80}); }
  SECTION("reserved field") { flip_in_value(env, bad, 20, std::byte{0x01}); }

  auto log = env.open();
  check_damage_is_contained(*log, bad, n);
}

// ---------------------------------------------------------------- map size

TEST_CASE("the map grows when full, up to its maximum, and everything reads back", "[storage]") {
  log_env env;
  auto opts = env.options(sy::durability::batch);
  opts.initial_map_size = std::size_t{1} << 20;
  opts.max_map_size = std::size_t{64} << 20;
  auto log = env.open(opts);
  const auto initial = log->map_size();
  CHECK(initial <= (std::size_t{1} << 20));

  // 20 batches of 16 x 64 KiB over two streams: 20 MiB of payload.
  constexpr std::size_t record_size = 64 << 10;
  std::map<std::string, std::uint64_t> last;
  for (int batch = 0; batch < 20; ++batch) {
    std::vector<bytes> payloads;
    std::vector<sy::append_item> items;
    std::vector<std::string> names;
    for (int k = 0; k < 16; ++k) {
      const std::string name = k % 2 ? "odd" : "even";
      names.push_back(name);
      payloads.push_back(pattern(record_size, (name == "odd" ? 1'000'000 : 0) + last[name] + 1));
      ++last[name];
    }
    for (std::size_t k = 0; k < payloads.size(); ++k) items.push_back({names[k], payloads[k]});
    auto r = log->append(items);
    INFO("batch " << batch);
    REQUIRE_OK(r);
    REQUIRE(r->size() == 16);
  }
  CHECK(log->map_size() > initial);
  CHECK(log->map_size() >= (std::size_t{20} << 20));
  CHECK(log->map_size() <= (std::size_t{64} << 20));
  CHECK_FALSE(log->sync());

  auto check_all = [&](sy::sequence_log& l) {
    for (const std::string name : {"even", "odd"}) {
      const auto i = info_ok(l, name);
      CHECK(i.records == 160);
      CHECK(i.bytes == 160 * record_size);
      std::uint64_t from = 1;
      for (int guard = 0; guard < 200 && from <= 160; ++guard) {
        const auto r = read_ok(l, name, from, 1000, 4 << 20);
        REQUIRE_FALSE(r.records.empty());
        for (const auto& rec : r.records) {
          REQUIRE(rec.seq == from);
          REQUIRE(rec.payload == pattern(record_size, (name == "odd" ? 1'000'000 : 0) + rec.seq));
          ++from;
        }
      }
      CHECK(from == 161);
    }
  };
  check_all(*log);
  log.reset();
  auto again = env.open(opts);
  check_all(*again);
  CHECK(append_ok(*again, "even", pattern(record_size, 4242)) == 161);
}

TEST_CASE("appends past a full map fail with storage_full and acknowledged records stay readable", "[storage]") {
  log_env env;
  auto opts = env.options();
  opts.initial_map_size = std::size_t{1} << 20;
  opts.max_map_size = std::size_t{1} << 20;
  auto log = env.open(opts);

  // Record i has pattern(size_of(i), i): sizes vary so pages fill unevenly.
  auto size_of = [](std::uint64_t i) { return static_cast<std::size_t>(1500 + (i * 37) % 2000); };
  std::uint64_t acked = 0;
  std::uint64_t acked_bytes = 0;
  std::error_code failure;
  for (std::uint64_t i = 1; i <= 2000; ++i) {
    auto r = log->append("s", pattern(size_of(i), i));
    if (!r) {
      failure = r.error();
      break;
    }
    REQUIRE(*r == i);
    acked = i;
    acked_bytes += size_of(i);
  }
  REQUIRE(failure == sy::errc::storage_full);
  CHECK(acked > 50);
  // Appends stop at the map's append ceiling: max_map_size less the
  // reserve kept for trims (a quarter at most).
  CHECK(log->map_size() <= (std::size_t{1} << 20));
  CHECK(log->map_size() >= (std::size_t{3} << 18));

  auto check_acked = [&](sy::sequence_log& l, std::uint64_t last) {
    const auto i = info_ok(l, "s");
    CHECK(i.first_seq == 1);
    CHECK(i.last_seq == last);
    CHECK(i.records == last);
    const auto r = read_ok(l, "s", 1, 100'000, std::size_t{1} << 30);
    REQUIRE(seqs_of(r) == iota_seqs(1, last));
    for (const auto& rec : r.records) REQUIRE(rec.payload == pattern(size_of(rec.seq), rec.seq));
  };
  check_acked(*log, acked);
  CHECK(info_ok(*log, "s").bytes == acked_bytes);

  // A small append may or may not still fit; either way nothing breaks.
  auto small = log->append("s", to_bytes("tiny"));
  if (small) {
    CHECK(*small == acked + 1);
  } else {
    CHECK(small.error() == sy::errc::storage_full);
  }
  auto fresh = log->append("new-stream", to_bytes("tiny"));
  if (!fresh) {
    CHECK(fresh.error() == sy::errc::storage_full);
    REQUIRE_ERROR(log->info("new-stream"), sy::errc::not_found);
  }
  const std::uint64_t last = small ? acked + 1 : acked;
  auto check_all = [&](sy::sequence_log& l) {
    const auto r = read_ok(l, "s", 1, 100'000, std::size_t{1} << 30);
    REQUIRE(seqs_of(r) == iota_seqs(1, last));
    for (std::uint64_t s = 1; s <= acked; ++s) REQUIRE(r.records[s - 1].payload == pattern(size_of(s), s));
    if (small) CHECK(r.records.back().payload == to_bytes("tiny"));
  };
  check_all(*log);

  log.reset();
  auto again = env.open(opts);
  check_all(*again);
  const auto i = info_ok(*again, "s");
  CHECK(i.last_seq == last);
  CHECK(i.records == last);
  CHECK(i.bytes == acked_bytes + (small ? 4 : 0));
}

namespace {

// Fills stream "s" of a log with a 1 MiB map (no growth) with 1000-byte
// records (record i is pattern(1000, i)) until an append fails with
// storage_full. Returns how many were acknowledged.
std::uint64_t fill_until_full(sy::sequence_log& log) {
  std::uint64_t acked = 0;
  for (std::uint64_t i = 1; i <= 5000; ++i) {
    auto r = log.append("s", pattern(1000, i));
    if (!r) {
      REQUIRE(r.error() == sy::errc::storage_full);
      REQUIRE(acked > 200);
      return acked;
    }
    REQUIRE(*r == i);
    acked = i;
  }
  FAIL("a 1 MiB map took 5000 records of 1000 bytes");
  return acked;
}

sy::log_options tiny_map(log_env& env) {
  auto opts = env.options();
  opts.initial_map_size = std::size_t{1} << 20;
  opts.max_map_size = std::size_t{1} << 20;
  return opts;
}

}  // namespace

TEST_CASE("a trim of a full log succeeds from the reserve and keeps every record after it", "[storage]") {
  log_env env;
  auto log = env.open(tiny_map(env));
  const std::uint64_t acked = fill_until_full(*log);

  // Appends stop short of the maximum, so a trim always has pages to use.
  auto t = log->trim("s", acked, 100);
  REQUIRE_OK(t);
  CHECK(*t == 100);
  CHECK(info_ok(*log, "s").first_seq == 101);
  const auto first = info_ok(*log, "s").first_seq;
  const auto r = read_ok(*log, "s", first, 100'000, std::size_t{1} << 30);
  REQUIRE(seqs_of(r) == iota_seqs(first, acked));
  for (const auto& rec : r.records) REQUIRE(rec.payload == pattern(1000, rec.seq));
}

// Regression: a log filled to its maximum once refused every trim as well
// (a delete needs fresh pages), so it stayed wedged. Appends now stop short
// of max_map_size, keeping a reserve for trims and retention.
TEST_CASE("after storage_full, trimming the front makes room for new appends", "[storage]") {
  log_env env;
  auto log = env.open(tiny_map(env));
  const std::uint64_t acked = fill_until_full(*log);
  INFO("acknowledged " << acked << " records of 1000 bytes in a 1 MiB map");

  for (std::uint64_t step = 1; step <= 20; ++step) {
    INFO("one-record trim number " << step);
    auto t = log->trim("s", acked, 1);
    REQUIRE_OK(t);
    REQUIRE(*t == 1);
  }
  // One bounded step of the background retention.
  auto e = log->enforce("s", sy::retention{.max_records = acked / 2}, 100);
  REQUIRE_OK(e);
  CHECK(*e == 100);
  CHECK(info_ok(*log, "s").first_seq == 121);
  for (std::uint64_t k = 1; k <= 20; ++k) CHECK(append_ok(*log, "s", pattern(1000, acked + k)) == acked + k);
  const auto r = read_ok(*log, "s", 121, 100'000, std::size_t{1} << 30);
  REQUIRE(seqs_of(r) == iota_seqs(121, acked + 20));
  for (const auto& rec : r.records) REQUIRE(rec.payload == pattern(1000, rec.seq));
}

// ---------------------------------------------------------------- durability

TEST_CASE("the default durability mode is sync and sync() succeeds", "[storage]") {
  log_env env;
  sy::log_options opts = env.options();
  CHECK(opts.mode == sy::durability::sync);
  auto log = env.open(opts);
  CHECK(log->mode() == sy::durability::sync);
  append_ok(*log, "s", to_bytes("x"));
  CHECK_FALSE(log->sync());
}

TEST_CASE("the batch and none durability modes behave the same functionally", "[storage]") {
  const auto mode = GENERATE(sy::durability::batch, sy::durability::none);
  log_env env;
  {
    auto log = env.open(env.options(mode));
    CHECK(log->mode() == mode);
    for (int i = 1; i <= 5; ++i)
      CHECK(append_ok(*log, "s", pattern(30, static_cast<std::uint64_t>(i))) == static_cast<std::uint64_t>(i));
    CHECK_FALSE(log->sync());
    REQUIRE(*log->trim("s", 2, 10) == 1);
    const auto r = read_ok(*log, "s", 2);
    REQUIRE(seqs_of(r) == iota_seqs(2, 5));
    CHECK(r.records[0].payload == pattern(30, 2));
    CHECK(append_ok(*log, "s", to_bytes("six")) == 6);
    CHECK_FALSE(log->sync());
  }
  auto log = env.open(env.options(mode));
  CHECK(log->mode() == mode);
  const auto r = read_ok(*log, "s", 2);
  REQUIRE(seqs_of(r) == iota_seqs(2, 6));
  CHECK(r.records[4].payload == to_bytes("six"));
  CHECK(append_ok(*log, "s", to_bytes("seven")) == 7);
}

TEST_CASE("in the sync mode each commit that writes counts one fsync, a trim that removes nothing none", "[storage]") {
  log_env env;
  auto log = env.open();
  const auto opened = log->fsyncs();  // a new log's format stamp is a commit of its own
  append_ok(*log, "s", to_bytes("a"));
  CHECK(log->fsyncs() == opened + 1);
  const bytes b = to_bytes("b"), c = to_bytes("c");
  const sy::append_item two[] = {{"s", b}, {"t", c}};
  REQUIRE(log->append(two));
  CHECK(log->fsyncs() == opened + 2);  // one transaction
  CHECK(*log->trim("s", 1, 10) == 0);  // nothing below sequence 1: nothing written
  CHECK(log->fsyncs() == opened + 2);
  CHECK_FALSE(log->sync());
  CHECK(log->fsyncs() == opened + 3);
}

TEST_CASE("in the batch and none modes only sync() counts an fsync", "[storage]") {
  const auto mode = GENERATE(sy::durability::batch, sy::durability::none);
  log_env env;
  auto log = env.open(env.options(mode));
  CHECK(log->fsyncs() == 0);
  for (int i = 1; i <= 3; ++i) append_ok(*log, "s", pattern(30, static_cast<std::uint64_t>(i)));
  CHECK(log->fsyncs() == 0);
  CHECK_FALSE(log->sync());
  CHECK(log->fsyncs() == 1);
}

TEST_CASE("open with an empty directory path fails with invalid_argument", "[storage]") {
  sy::log_options opts;
  auto r = sy::sequence_log::open(opts);
  REQUIRE_ERROR(r, sy::errc::invalid_argument);
}

// ---------------------------------------------------------------- format version

namespace {

// Runs `body(txn, meta dbi)` in a write transaction on a closed log's LMDB
// environment, as another (older or newer) version of the code would, and
// commits.
template <class Body>
void with_raw_meta(const std::filesystem::path& dir, Body body) {
  MDB_env* env = nullptr;
  REQUIRE(mdb_env_create(&env) == MDB_SUCCESS);
  REQUIRE(mdb_env_set_maxdbs(env, 4) == MDB_SUCCESS);
  REQUIRE(mdb_env_open(env, dir.c_str(), 0, 0644) == MDB_SUCCESS);
  MDB_txn* txn = nullptr;
  REQUIRE(mdb_txn_begin(env, nullptr, 0, &txn) == MDB_SUCCESS);
  MDB_dbi meta = 0;
  REQUIRE(mdb_dbi_open(txn, "meta", 0, &meta) == MDB_SUCCESS);
  body(txn, meta);
  REQUIRE(mdb_txn_commit(txn) == MDB_SUCCESS);
  mdb_env_close(env);
}

MDB_val key_of(std::string_view s) { return {s.size(), const_cast<char*>(s.data())}; }

// The stored format version, or nullopt without one.
std::optional<std::uint64_t> stored_format(const std::filesystem::path& dir) {
  std::optional<std::uint64_t> out;
  with_raw_meta(dir, [&](MDB_txn* txn, MDB_dbi meta) {
    MDB_val k = key_of("format_version"), v{};
    const int rc = mdb_get(txn, meta, &k, &v);
    if (rc == MDB_NOTFOUND) return;
    REQUIRE(rc == MDB_SUCCESS);
    REQUIRE(v.mv_size == 8);
    const auto* p = static_cast<const std::byte*>(v.mv_data);
    out = load_le64(bytes(p, p + 8), 0);
  });
  return out;
}

void store_format(const std::filesystem::path& dir, std::optional<std::uint64_t> version) {
  with_raw_meta(dir, [&](MDB_txn* txn, MDB_dbi meta) {
    MDB_val k = key_of("format_version");
    if (!version) {
      REQUIRE(mdb_del(txn, meta, &k, nullptr) == MDB_SUCCESS);
      return;
    }
    unsigned char buf[8];
    for (int i = 0; i < 8; ++i) buf[i] = static_cast<unsigned char>(*version >> (8 * i));
    MDB_val v{sizeof buf, buf};
    REQUIRE(mdb_put(txn, meta, &k, &v, 0) == MDB_SUCCESS);
  });
}

}  // namespace

TEST_CASE("a new log records its on-disk format version in the meta database", "[storage]") {
  log_env env;
  CHECK(sy::log_format_version == 2);
  { auto log = env.open(); }
  CHECK(stored_format(env.log_dir()) == sy::log_format_version);
  {
    auto log = env.open();  // reopening accepts it and changes nothing
    append_ok(*log, "s", to_bytes("one"));
  }
  CHECK(stored_format(env.log_dir()) == sy::log_format_version);
}

TEST_CASE("opening a log of another on-disk format fails with unsupported_format and leaves it untouched",
          "[storage]") {
  log_env env;
  {
    auto log = env.open();
    REQUIRE(append_ok(*log, "s", to_bytes("kept"), to_bytes("destination")) == 1);
  }
  std::optional<std::uint64_t> other;
  SECTION("a newer format") { other = sy::log_format_version + 1; }
  SECTION("format 1 stamped explicitly") { other = 1; }
  SECTION("no version but data: format 1, from before versions were recorded") { other = std::nullopt; }
  store_format(env.log_dir(), other);

  auto r = sy::sequence_log::open(env.options());
  REQUIRE_ERROR(r, sy::errc::unsupported_format);
  CHECK(r.error().message().find("format") != std::string::npos);
  // Nothing was rewritten: the version is what it was, and the data is
  // still there for the code that understands it.
  CHECK(stored_format(env.log_dir()) == other);
  store_format(env.log_dir(), sy::log_format_version);
  auto log = env.open();
  const auto rec = read_ok(*log, "s", 1);
  REQUIRE(rec.records.size() == 1);
  CHECK(rec.records[0].payload == to_bytes("kept"));
  CHECK(rec.records[0].destination == to_bytes("destination"));
}

// ---------------------------------------------------------------- errors

TEST_CASE("from_lmdb translates LMDB and errno codes into storage errors", "[storage]") {
  CHECK_FALSE(sy::from_lmdb(MDB_SUCCESS));
  CHECK(sy::from_lmdb(MDB_NOTFOUND) == sy::errc::not_found);
  CHECK(sy::from_lmdb(MDB_MAP_FULL) == sy::errc::storage_full);
  CHECK(sy::from_lmdb(MDB_CORRUPTED) == sy::errc::corrupted);
  CHECK(sy::from_lmdb(MDB_PAGE_NOTFOUND) == sy::errc::corrupted);
  CHECK(sy::from_lmdb(ENOSPC) == sy::errc::storage_full);
  CHECK(sy::from_lmdb(EIO) == sy::errc::io_error);
  CHECK(sy::from_lmdb(MDB_READERS_FULL) == sy::errc::internal);
  CHECK(sy::from_lmdb(MDB_KEYEXIST) == sy::errc::internal);
  CHECK(sy::from_lmdb(MDB_TXN_FULL) == sy::errc::internal);
  // Storage errors are in the storage category.
  CHECK(sy::from_lmdb(MDB_MAP_FULL).category() == sy::storage_category());
  CHECK(sy::from_lmdb(EIO).category() == sy::storage_category());
}

TEST_CASE("storage error messages are non-empty and distinct", "[storage]") {
  const sy::errc all[] = {sy::errc::not_found,
                          sy::errc::trimmed,
                          sy::errc::storage_full,
                          sy::errc::corrupted,
                          sy::errc::invalid_argument,
                          sy::errc::io_error,
                          sy::errc::internal,
                          sy::errc::unsupported_format,
                          sy::errc::locked};
  std::set<std::string> messages;
  for (const auto e : all) {
    const std::error_code ec = e;
    CHECK(ec.category() == sy::storage_category());
    CHECK(ec.value() == static_cast<int>(e));
    INFO("errc " << static_cast<int>(e));
    CHECK_FALSE(ec.message().empty());
    messages.insert(ec.message());
  }
  CHECK(messages.size() == std::size(all));
  CHECK(std::string(sy::storage_category().name()).size() > 0);
}
