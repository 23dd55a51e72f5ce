#include "broker/cluster/route_directory.hpp"

namespace switchyard::broker {

void route_directory::put(std::string_view key, std::uint32_t partition, std::int64_t home, std::string_view principal,
                          route_stamp stamp) {
  auto& m = partitions_[partition];
  if (auto it = m.find(key); it != m.end()) {
    it->second.home = home;
    it->second.principal.assign(principal);
    it->second.stamp = stamp;
    return;
  }
  m.emplace(std::string(key), entry{home, std::string(principal), stamp});
  ++size_;
}

bool route_directory::put_if_newer(std::string_view key, std::uint32_t partition, std::int64_t home,
                                   std::string_view principal, route_stamp stamp) {
  auto& m = partitions_[partition];
  if (auto it = m.find(key); it != m.end()) {
    if (it->second.home != home && !(it->second.stamp < stamp)) return false;
    if (it->second.home == home && stamp < it->second.stamp) return true;  // its own later put stands
    it->second.home = home;
    it->second.principal.assign(principal);
    it->second.stamp = stamp;
    return true;
  }
  m.emplace(std::string(key), entry{home, std::string(principal), stamp});
  ++size_;
  return true;
}

bool route_directory::remove(std::string_view key, std::uint32_t partition, std::int64_t home) {
  auto& m = partitions_[partition];
  const auto it = m.find(key);
  if (it == m.end() || it->second.home != home) return false;
  m.erase(it);
  --size_;
  return true;
}

std::int64_t route_directory::find(std::string_view key, std::uint32_t partition) const {
  const auto& m = partitions_[partition];
  const auto it = m.find(key);
  return it == m.end() ? 0 : it->second.home;
}

std::string_view route_directory::principal(std::string_view key, std::uint32_t partition) const {
  const auto& m = partitions_[partition];
  const auto it = m.find(key);
  return it == m.end() ? std::string_view() : std::string_view(it->second.principal);
}

void route_directory::clear(std::uint32_t partition) {
  size_ -= partitions_[partition].size();
  map().swap(partitions_[partition]);
}

std::size_t route_directory::drop_homes(const std::function<bool(std::int64_t home)>& keep) {
  std::size_t dropped = 0;
  for (auto& m : partitions_) dropped += std::erase_if(m, [&](const auto& kv) { return !keep(kv.second.home); });
  size_ -= dropped;
  return dropped;
}

}  // namespace switchyard::broker
