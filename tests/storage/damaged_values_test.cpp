// The sequence log on stored values a damaged log can hold, put in place
// verbatim (storage::rewrite_raw): the cases the log_record fuzz target
// (fuzz/log_record_fuzz.cpp) found, each failing without its fix.

#include "storage/errc.hpp"
#include "storage/raw_access.hpp"
#include "storage/sequence_log.hpp"
#include "tests/support/raw_log_values.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace {

namespace sy = switchyard::storage;
using bytes = std::vector<std::byte>;
using switchyard::test::bytes_of;
using switchyard::test::record_key;
using switchyard::test::record_value;
using switchyard::test::stream_meta;
using switchyard::test::temp_dir;

std::unique_ptr<sy::sequence_log> open_log(const temp_dir& dir) {
  sy::log_options o;
  o.dir = dir.path() / "log";
  o.mode = sy::durability::none;
  o.initial_map_size = 1u << 20;
  o.wall_clock_ms = [] { return std::uint64_t{1'712'345'678'901}; };
  auto log = sy::sequence_log::open(o);
  REQUIRE(log);
  return std::move(*log);
}

std::string str(const bytes& b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

}  // namespace

TEST_CASE("a trim stops at a missing record instead of trimming past it into unreadable metadata",
          "[storage][damage]") {
  temp_dir dir{"switchyard-damaged"};
  auto log = open_log(dir);
  // Stream s holds 1..3 by its metadata; record 2 is missing.
  const bytes r1 = record_value(1, 10, "", "one"), r3 = record_value(3, 30, "", "three");
  const bytes meta = stream_meta(1, 1, 3, 3, 3 + 5 + 3), k1 = record_key(1, 1), k3 = record_key(1, 3);
  const sy::raw_entry entries[] = {
      {sy::raw_db::streams, bytes_of("s"), meta}, {sy::raw_db::records, k1, r1}, {sy::raw_db::records, k3, r3}};
  REQUIRE_FALSE(sy::rewrite_raw(*log, entries));

  auto n = log->trim("s", 4, 10);
  REQUIRE(n);
  CHECK(*n == 1);  // record 1; not record 3 past the hole
  auto info = log->info("s");
  REQUIRE(info);  // the metadata still reads: first 2, last 3, 2 records
  CHECK(info->first_seq == 2);
  CHECK(info->records == 2);
  // The hole is now at the front: trims (and retention) stop there.
  CHECK(log->trim("s", 4, 10).error() == sy::errc::corrupted);
  CHECK(log->enforce("s", sy::retention{1, {}, 0}, 10).error() == sy::errc::corrupted);
  auto r = log->read("s", 3, 10, 1u << 20);
  REQUIRE(r);
  REQUIRE(r->records.size() == 1);
  CHECK(str(r->records[0].payload) == "three");
}

TEST_CASE("a trim of an empty stream leaves records stored past its last sequence alone", "[storage][damage]") {
  temp_dir dir{"switchyard-damaged"};
  auto log = open_log(dir);
  // Stream s is empty (first 3, last 2); a record sits under its id at 5.
  const bytes r5 = record_value(5, 50, "", "stray"), meta = stream_meta(1, 3, 2, 0, 0), k5 = record_key(1, 5);
  const sy::raw_entry entries[] = {{sy::raw_db::streams, bytes_of("s"), meta}, {sy::raw_db::records, k5, r5}};
  REQUIRE_FALSE(sy::rewrite_raw(*log, entries));

  auto n = log->trim("s", std::numeric_limits<std::uint64_t>::max(), 10);
  REQUIRE(n);
  CHECK(*n == 0);
  auto info = log->info("s");
  REQUIRE(info);  // not a record count gone below zero
  CHECK(info->first_seq == 3);
  CHECK(info->last_seq == 2);
  CHECK(info->records == 0);
  const auto report = log->verify();  // the stray record is still there to be seen
  CHECK(std::any_of(report.problems.begin(), report.problems.end(),
                    [](const sy::verify_problem& p) { return p.stream == "s" && p.seq == 5; }));
}

TEST_CASE("verify finds a stream that ends at the last sequence there is intact", "[storage][damage]") {
  temp_dir dir{"switchyard-damaged"};
  auto log = open_log(dir);
  // Metadata that reads (first = last = 2^64 - 1, one record) and its record:
  // nothing is damaged, however unlikely the sequence.
  constexpr std::uint64_t last = std::numeric_limits<std::uint64_t>::max();
  const bytes r = record_value(last, 10, "", "end"), meta = stream_meta(1, last, last, 1, 3), k = record_key(1, last);
  bytes last_id;
  switchyard::test::put_le<std::uint64_t>(last_id, 1);
  const sy::raw_entry entries[] = {{sy::raw_db::streams, bytes_of("s"), meta},
                                   {sy::raw_db::records, k, r},
                                   {sy::raw_db::meta, bytes_of("last_stream_id"), last_id}};
  REQUIRE_FALSE(sy::rewrite_raw(*log, entries));
  auto read = log->read("s", last, 10, 1u << 20);
  REQUIRE(read);
  REQUIRE(read->records.size() == 1);
  CHECK(read->damaged_seq == 0);
  const auto report = log->verify();
  for (const auto& p : report.problems) UNSCOPED_INFO(p.what);
  CHECK(report.intact());  // not "record 0 missing (records up to 2^64 - 1 too)"
}

TEST_CASE("a stream trimmed empty at the last sequence there is reads empty and verifies intact", "[storage][damage]") {
  temp_dir dir{"switchyard-damaged"};
  auto log = open_log(dir);
  constexpr std::uint64_t last = std::numeric_limits<std::uint64_t>::max();
  const bytes r = record_value(last, 10, "", "end"), meta = stream_meta(1, last, last, 1, 3), k = record_key(1, last);
  bytes last_id;
  switchyard::test::put_le<std::uint64_t>(last_id, 1);
  const sy::raw_entry entries[] = {{sy::raw_db::streams, bytes_of("s"), meta},
                                   {sy::raw_db::records, k, r},
                                   {sy::raw_db::meta, bytes_of("last_stream_id"), last_id}};
  REQUIRE_FALSE(sy::rewrite_raw(*log, entries));
  REQUIRE(log->trim("s", last, 10) == 0u);
  REQUIRE(log->enforce("s", sy::retention{0, {}, 1}, 10) == 1u);  // over its byte limit

  // first = last + 1 wraps to 0: still the empty stream after last.
  auto info = log->info("s");
  REQUIRE(info);
  CHECK(info->records == 0);
  CHECK(info->last_seq == last);
  auto read = log->read("s", info->first_seq, 10, 1u << 20);
  REQUIRE(read);  // not "record 0 missing"
  CHECK(read->records.empty());
  const auto report = log->verify();
  for (const auto& p : report.problems) UNSCOPED_INFO(p.what);
  CHECK(report.intact());
}
