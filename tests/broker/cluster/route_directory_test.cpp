// route_directory: an owner's key -> home map, and how a rebuild's answers
// from two homes holding one key are settled (route_stamp order).

#include "broker/cluster/partition_map.hpp"
#include "broker/cluster/route_directory.hpp"

#include <catch2/catch.hpp>

using switchyard::broker::partition_map;
using switchyard::broker::route_directory;
using switchyard::broker::route_stamp;

namespace {
constexpr std::int64_t home_a = 101, home_b = 202;
const std::string key = "user:7";
const auto partition = partition_map::partition_of(key);
}  // namespace

TEST_CASE("a put confirmed later by a later owner is ordered after any put an earlier owner confirmed",
          "[cluster][route_directory]") {
  CHECK(route_stamp{5, 900} < route_stamp{6, 1});
  CHECK(route_stamp{6, 1} < route_stamp{6, 2});
  CHECK(route_stamp{} < route_stamp{1, 0});
}

TEST_CASE("a rebuild's answer older than the entry leaves the key with its home, in either order",
          "[cluster][route_directory]") {
  const route_stamp older{7, 3}, later{7, 9};
  SECTION("the later put's home answers first") {
    route_directory d;
    CHECK(d.put_if_newer(key, partition, home_b, "", later));
    CHECK_FALSE(d.put_if_newer(key, partition, home_a, "", older));
    CHECK(d.find(key, partition) == home_b);
  }
  SECTION("the later put's home answers last") {
    route_directory d;
    CHECK(d.put_if_newer(key, partition, home_a, "", older));
    CHECK(d.put_if_newer(key, partition, home_b, "", later));
    CHECK(d.find(key, partition) == home_b);
  }
  SECTION("a put never confirmed is older than a confirmed one") {
    route_directory d;
    CHECK(d.put_if_newer(key, partition, home_b, "", later));
    CHECK_FALSE(d.put_if_newer(key, partition, home_a, "", {}));
    CHECK(d.find(key, partition) == home_b);
  }
}

TEST_CASE("a home's answer with its earlier stamp does not undo its own later live put", "[cluster][route_directory]") {
  route_directory d;
  d.put(key, partition, home_a, "alice", {8, 1});
  CHECK(d.put_if_newer(key, partition, home_a, "bob", {7, 40}));
  CHECK(d.find(key, partition) == home_a);
  CHECK(d.principal(key, partition) == "alice");
  CHECK(d.size() == 1);
}
