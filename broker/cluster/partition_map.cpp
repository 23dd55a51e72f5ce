#include "broker/cluster/partition_map.hpp"

#include <xxhash.h>

#include <array>
#include <cstring>

namespace switchyard::broker {

namespace {
// The weight of `node_id` for `partition`: XXH3-64 with the partition as
// the seed (seeds are part of XXH3's definition: stable across versions).
std::uint64_t weight(std::uint32_t partition, std::string_view node_id) noexcept {
  return XXH3_64bits_withSeed(node_id.data(), node_id.size(), partition);
}
}  // namespace

std::uint32_t partition_map::partition_of(std::string_view key) noexcept {
  return static_cast<std::uint32_t>(XXH3_64bits_withSeed(key.data(), key.size(), 0) % partition_count);
}

const cluster_member* partition_map::preferred_owner(const cluster_view& view, std::uint32_t partition) noexcept {
  const cluster_member* best = nullptr;
  std::uint64_t best_weight = 0;
  for (const auto& m : view.members) {
    const auto w = weight(partition, m.node_id);
    // Ties (astronomically rare) go to the smaller node id: members are in id order.
    if (!best || w > best_weight) best = &m, best_weight = w;
  }
  return best;
}

std::vector<std::uint32_t> partition_map::preferred_partitions(const cluster_view& view, std::string_view node_id) {
  std::vector<std::uint32_t> out;
  for (std::uint32_t p = 0; p < partition_count; ++p)
    if (const auto* m = preferred_owner(view, p); m && m->node_id == node_id) out.push_back(p);
  return out;
}

}  // namespace switchyard::broker
