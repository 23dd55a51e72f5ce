// partition_map: keys to partitions, partitions to their preferred owners.

#include "broker/cluster/partition_map.hpp"

#include <catch2/catch.hpp>

#include <map>
#include <string>

using switchyard::broker::cluster_member;
using switchyard::broker::cluster_view;
using switchyard::broker::partition_map;

namespace {
cluster_view view_of(std::initializer_list<const char*> ids) {
  cluster_view v;
  for (const auto* id : ids) v.members.push_back(cluster_member{id, "127.0.0.1:1", 1});
  return v;
}
}  // namespace

TEST_CASE("a key's partition is the same in every process: XXH3 with seed 0", "[cluster]") {
  // Fixed values: a change here would split a running cluster.
  CHECK(partition_map::partition_of("") == 0x2d06800538d394c2ULL % 1024);
  CHECK(partition_map::partition_of("user:alice") == partition_map::partition_of(std::string("user:") + "alice"));
  CHECK(partition_map::partition_of("user:alice") < partition_map::partition_count);
}

TEST_CASE("every node computes the same owner for each partition from the same view", "[cluster]") {
  const auto a = view_of({"a", "b", "c"});
  const auto b = view_of({"a", "b", "c"});
  for (std::uint32_t p = 0; p < partition_map::partition_count; ++p)
    CHECK(partition_map::preferred_owner(a, p)->node_id == partition_map::preferred_owner(b, p)->node_id);
  CHECK(partition_map::preferred_owner(cluster_view{}, 0) == nullptr);
}

TEST_CASE("partitions spread evenly over the members", "[cluster]") {
  const auto v = view_of({"a", "b", "c"});
  std::size_t total = 0;
  for (const auto* id : {"a", "b", "c"}) {
    const auto mine = partition_map::preferred_partitions(v, id);
    // 1024 / 3 = 341; rendezvous hashing stays within a few percent.
    CHECK(mine.size() > 290);
    CHECK(mine.size() < 400);
    total += mine.size();
  }
  CHECK(total == partition_map::partition_count);
}

TEST_CASE("when a member leaves only its partitions move, and to the others", "[cluster]") {
  const auto three = view_of({"a", "b", "c"});
  const auto two = view_of({"a", "c"});
  for (std::uint32_t p = 0; p < partition_map::partition_count; ++p) {
    const auto before = partition_map::preferred_owner(three, p)->node_id;
    const auto after = partition_map::preferred_owner(two, p)->node_id;
    if (before != "b") CHECK(after == before);
  }
}
