// Unit tests for broker::feature_flags: the ramp by bucket, its
// boundaries, and the connection counts.

#include "broker/tables/feature_flags.hpp"

#include <catch2/catch.hpp>

#include <string>

namespace {
using switchyard::broker::feature_flags;
using F = feature_flags::flag;

// A client id whose bucket is `bucket` (searched, bounded).
std::string client_in_bucket(std::uint8_t bucket) {
  for (int i = 0; i < 100000; ++i) {
    std::string id = "client-" + std::to_string(i);
    if (feature_flags::bucket_of(id) == bucket) return id;
  }
  FAIL("no client id found in bucket " << int(bucket));
  return {};
}
}  // namespace

TEST_CASE("a client's bucket is stable and below one hundred", "[broker][flags]") {
  CHECK(feature_flags::bucket_of("driver-42") == feature_flags::bucket_of("driver-42"));
  for (int i = 0; i < 1000; ++i) CHECK(feature_flags::bucket_of(std::to_string(i)) < 100);
}

TEST_CASE("flags are found by name", "[broker][flags]") {
  CHECK(feature_flags::find("offers") == F::offers);
  CHECK_FALSE(feature_flags::find("nope"));
  CHECK(feature_flags::name_of(F::offers) == "offers");
}

TEST_CASE("a flag at zero is off for every bucket and at one hundred on for every bucket", "[broker][flags]") {
  feature_flags f;
  CHECK(f.percent(F::offers) == 100);
  for (std::uint8_t b = 0; b < 100; ++b) CHECK(f.on(F::offers, b));
  f.set(F::offers, 0);
  for (std::uint8_t b = 0; b < 100; ++b) CHECK_FALSE(f.on(F::offers, b));
  f.set(F::offers, 200);  // clamped
  CHECK(f.percent(F::offers) == 100);
}

TEST_CASE("at ten percent a client in bucket nine is in and one in bucket ten is out", "[broker][flags]") {
  feature_flags f(10);
  const auto nine = client_in_bucket(9), ten = client_in_bucket(10);
  CHECK(f.on(F::offers, feature_flags::bucket_of(nine)));
  CHECK_FALSE(f.on(F::offers, feature_flags::bucket_of(ten)));
}

TEST_CASE("the connections on and off follow the percentage at once", "[broker][flags]") {
  feature_flags f(10);
  f.joined(F::offers, 9);
  f.joined(F::offers, 10);
  f.joined(F::offers, 99);
  CHECK(f.connections(F::offers).on == 1);
  CHECK(f.connections(F::offers).off == 2);
  f.set(F::offers, 0);  // instant rollback
  CHECK(f.connections(F::offers).on == 0);
  CHECK(f.connections(F::offers).off == 3);
  f.set(F::offers, 100);
  CHECK(f.connections(F::offers).on == 3);
  f.left(F::offers, 99);
  CHECK(f.connections(F::offers).on == 2);
}
