// Unit tests for broker::exposure_table on a hand-moved clock.

#include "broker/tables/exposure_table.hpp"

#include <catch2/catch.hpp>

#include <chrono>

namespace {
using switchyard::broker::exposure_table;
using namespace std::chrono_literals;
const exposure_table::clock::time_point t0 = exposure_table::clock::time_point{} + 1000s;
}  // namespace

TEST_CASE("exposure counts the offers of a key inside a rolling window", "[broker][offers]") {
  exposure_table t(100, 1h);
  CHECK(t.count("user:a", 10s, t0) == 0);
  for (int i = 0; i < 5; ++i) REQUIRE(t.record("user:a", t0 + std::chrono::seconds(i)));
  CHECK(t.count("user:a", 10s, t0 + 4s) == 5);
  CHECK(t.count("user:a", 10s, t0 + 10s) == 4);  // the one at t0 is 10 s old: out
  CHECK(t.count("user:a", 10s, t0 + 13500ms) == 1);
  CHECK(t.count("user:a", 10s, t0 + 14s) == 0);
  CHECK(t.count("user:b", 10s, t0) == 0);
}

TEST_CASE("exposure remembers the last sixteen offers of a key", "[broker][offers]") {
  exposure_table t(100, 1h);
  for (int i = 0; i < 40; ++i) REQUIRE(t.record("user:a", t0 + std::chrono::milliseconds(i)));
  CHECK(t.count("user:a", 1h, t0 + 1s) == exposure_table::history);
}

TEST_CASE("a window longer than the table's is cut to the table's", "[broker][offers]") {
  exposure_table t(100, 60s);
  REQUIRE(t.record("user:a", t0));
  CHECK(t.count("user:a", 1h, t0 + 59s) == 1);
  CHECK(t.count("user:a", 1h, t0 + 61s) == 0);
}

TEST_CASE("a full exposure table counts no new key and the sweep frees quiet keys", "[broker][offers]") {
  exposure_table t(2, 60s);
  REQUIRE(t.record("user:a", t0));
  REQUIRE(t.record("user:b", t0 + 30s));
  CHECK_FALSE(t.record("user:c", t0 + 30s));
  CHECK(t.record("user:a", t0 + 30s));  // a known key still counts
  CHECK(t.size() == 2);
  CHECK(t.bytes() == 2 * exposure_table::entry_bytes + 12);
  CHECK(t.sweep(t0 + 89s) == 0);
  CHECK(t.sweep(t0 + 90s) == 2);  // both last offered at t0 + 30 s
  CHECK(t.size() == 0);
  CHECK(t.bytes() == 0);
  CHECK(t.record("user:c", t0 + 90s));
}

TEST_CASE("a sweep forgets keys in the order of their last offer and stops at the first still counted",
          "[broker][offers]") {
  exposure_table t(100, 60s);
  REQUIRE(t.record("user:a", t0));
  REQUIRE(t.record("user:b", t0 + 10s));
  REQUIRE(t.record("user:c", t0 + 20s));
  REQUIRE(t.record("user:a", t0 + 30s));  // a's last offer is now the latest
  CHECK(t.sweep(t0 + 71s) == 1);          // b only: a's first offer does not count
  CHECK(t.count("user:a", 60s, t0 + 71s) == 1);
  CHECK(t.count("user:b", 60s, t0 + 71s) == 0);
  CHECK(t.count("user:c", 60s, t0 + 71s) == 1);
  CHECK(t.sweep(t0 + 81s) == 1);  // c
  CHECK(t.size() == 1);
  CHECK(t.sweep(t0 + 90s) == 1);  // a
  CHECK(t.size() == 0);
  CHECK(t.bytes() == 0);
  // Keys come back after a sweep and are ordered again.
  REQUIRE(t.record("user:b", t0 + 100s));
  REQUIRE(t.record("user:a", t0 + 101s));
  CHECK(t.sweep(t0 + 160s) == 1);
  CHECK(t.count("user:a", 60s, t0 + 160s) == 1);
}
