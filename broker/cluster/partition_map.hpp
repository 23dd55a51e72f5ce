#pragma once
// partition_map: which partition a route key or stream name falls in, and
// which member of a view should own each partition (docs/cluster.md,
// "Partitions").
//
// A key's partition is XXH3-64 of its bytes with seed 0, modulo
// partition_count: the same on every node and in every version (unlike
// string_hash, seeded per process). A partition's preferred owner is the
// member with the highest XXH3-64 of (partition, node id) (rendezvous
// hashing): every node computes the same owner from the same view, the
// partitions spread evenly, and when a member joins or leaves only the
// partitions it gains or loses move.
//
// Pure functions; any thread.

#include "broker/cluster/cluster_view.hpp"

#include <cstdint>
#include <string_view>
#include <vector>

namespace switchyard::broker {

class partition_map {
 public:
  // Fixed for the life of a cluster: every node must agree.
  static constexpr std::uint32_t partition_count = 1024;

  static std::uint32_t partition_of(std::string_view key) noexcept;
  // The member that should own `partition` in `view`; nullptr for an
  // empty view.
  static const cluster_member* preferred_owner(const cluster_view& view, std::uint32_t partition) noexcept;
  // The partitions `node_id` should own in `view`, ascending.
  static std::vector<std::uint32_t> preferred_partitions(const cluster_view& view, std::string_view node_id);
};

}  // namespace switchyard::broker
