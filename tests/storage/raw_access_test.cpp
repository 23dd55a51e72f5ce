// storage/raw_access.hpp: values put verbatim into a real log (the seam the
// log_record fuzz target uses), and the record checksum as appends write it.

#include "storage/errc.hpp"
#include "storage/raw_access.hpp"
#include "storage/sequence_log.hpp"
#include "tests/support/byte_pattern.hpp"
#include "tests/support/raw_log_values.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <lmdb.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

namespace {

namespace sy = switchyard::storage;
using bytes = std::vector<std::byte>;
using switchyard::test::bytes_of;
using switchyard::test::put_le;
using switchyard::test::record_key;
using switchyard::test::record_value;
using switchyard::test::stream_meta;
using switchyard::test::temp_dir;

constexpr std::uint64_t kNowMs = 1'712'345'678'901;

std::unique_ptr<sy::sequence_log> open_log(const temp_dir& dir) {
  sy::log_options o;
  o.dir = dir.path() / "log";
  o.mode = sy::durability::none;
  o.initial_map_size = 1u << 20;
  o.wall_clock_ms = [] { return kNowMs; };
  auto log = sy::sequence_log::open(o);
  REQUIRE(log);
  return std::move(*log);
}

std::string str(const bytes& b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

}  // namespace

TEST_CASE("rewrite_raw replaces streams, records and retention entries with the values given", "[storage][raw]") {
  temp_dir dir{"switchyard-raw"};
  auto log = open_log(dir);
  REQUIRE(log->append("old", bytes_of("gone")));
  REQUIRE(log->set_retention("old", sy::retention{5, {}, 0}));

  const bytes r1 = record_value(1, 1000, "\x01orders", "one"), r2 = record_value(2, 2000, "", "two");
  const bytes meta = stream_meta(1, 1, 2, 2, (r1.size() - 24) + (r2.size() - 24), kNowMs);
  const bytes k1 = record_key(1, 1), k2 = record_key(1, 2);
  bytes limits;
  for (const std::uint64_t f : {3, 0, 0}) put_le<std::uint64_t>(limits, f);
  const sy::raw_entry entries[] = {{sy::raw_db::streams, bytes_of("s"), meta},
                                   {sy::raw_db::records, k1, r1},
                                   {sy::raw_db::records, k2, r2},
                                   {sy::raw_db::retention, bytes_of("s"), limits}};
  REQUIRE_FALSE(sy::rewrite_raw(*log, entries));

  CHECK(log->info("old").error() == sy::errc::not_found);
  auto info = log->info("s");
  REQUIRE(info);
  CHECK(info->id == 1);
  CHECK(info->epoch == 77);
  CHECK(info->records == 2);
  REQUIRE(info->own_retention);
  CHECK(info->own_retention->max_records == 3);
  auto r = log->read("s", 1, 10, 1u << 20);
  REQUIRE(r);
  REQUIRE(r->records.size() == 2);
  CHECK(r->records[0].timestamp_ms == 1000);
  CHECK(str(r->records[0].destination) == "\x01orders");
  CHECK(str(r->records[0].payload) == "one");
  CHECK(r->records[1].timestamp_ms == 2000);
  CHECK(r->records[1].destination.empty());
  CHECK(str(r->records[1].payload) == "two");
  CHECK(log->verify().intact());  // the format stamp and last stream id were kept
}

TEST_CASE("a value rewritten with a flipped byte or under another sequence reads as corrupted", "[storage][raw]") {
  temp_dir dir{"switchyard-raw"};
  auto log = open_log(dir);
  bytes flipped = record_value(1, 1000, "", "payload");
  flipped.back() ^= std::byte{1};
  const bytes other_seq = record_value(5, 1000, "", "payload");
  for (const bytes* value : {static_cast<const bytes*>(&flipped), &other_seq}) {
    const bytes meta = stream_meta(1, 1, 1, 1, value->size() - 24), key = record_key(1, 1);
    const sy::raw_entry entries[] = {{sy::raw_db::streams, bytes_of("s"), meta}, {sy::raw_db::records, key, *value}};
    REQUIRE_FALSE(sy::rewrite_raw(*log, entries));
    sy::diagnostics diag;
    auto r = log->read("s", 1, 10, 1u << 20, &diag);
    REQUIRE_FALSE(r);
    CHECK(r.error() == sy::errc::corrupted);
    CHECK(diag.seq == 1);
    CHECK(diag.message.find("checksum mismatch") != std::string::npos);
    CHECK_FALSE(log->verify().intact());
  }
}

TEST_CASE("record_checksum is the checksum an append stores", "[storage][raw]") {
  temp_dir dir{"switchyard-raw"};
  const auto payload = switchyard::test::pattern(300, 1);
  {
    auto log = open_log(dir);
    REQUIRE(log->append("s", bytes_of("first")));
    REQUIRE(log->append("s", payload, bytes_of("\x01orders")) == 2u);
  }
  // The log is closed: LMDB may open the environment again in this process.
  MDB_env* env = nullptr;
  MDB_txn* t = nullptr;
  MDB_dbi records = 0;
  REQUIRE(mdb_env_create(&env) == MDB_SUCCESS);
  REQUIRE(mdb_env_set_maxdbs(env, 8) == MDB_SUCCESS);
  REQUIRE(mdb_env_open(env, (dir.path() / "log").c_str(), MDB_RDONLY, 0644) == MDB_SUCCESS);
  REQUIRE(mdb_txn_begin(env, nullptr, MDB_RDONLY, &t) == MDB_SUCCESS);
  REQUIRE(mdb_dbi_open(t, "records", 0, &records) == MDB_SUCCESS);
  bytes key = record_key(1, 2);
  MDB_val k{key.size(), key.data()}, v{};
  REQUIRE(mdb_get(t, records, &k, &v) == MDB_SUCCESS);
  const std::span<const std::byte> value(static_cast<const std::byte*>(v.mv_data), v.mv_size);
  std::uint64_t stored = 0;
  for (int i = 7; i >= 0; --i) stored = stored << 8 | static_cast<std::uint64_t>(value[i]);
  CHECK(value.size() == 24 + 7 + payload.size());
  CHECK(sy::record_checksum(2, value) == stored);
  CHECK(sy::record_checksum(1, value) != stored);
  CHECK(sy::record_checksum(2, value.first(16)) == 0);  // shorter than a header
  mdb_txn_abort(t);
  mdb_env_close(env);
}
