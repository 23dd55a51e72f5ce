#pragma once
// route_directory: what a partition owner knows of the routes in its
// partitions (docs/cluster.md, "Routes and send-to-user"): route key ->
// the incarnation of its home node, the node whose routing_table holds the
// entry (and the gateway's lease and inbox). Nothing else: the value, the
// lease and the inbox stay at the home node, which alone delivers, so a
// stale directory can only make a send find no route, never reach another
// gateway.
//
// Soft state, rebuilt from the home nodes when a partition changes hands
// (route_relay). Memory: one entry per route key of the owned partitions
// (the key and its principal's name plus about 120 bytes), at most the sum
// of the home nodes' registries (each bounded by its
// --max-registry-entries).
//
// Loop thread only.

#include "broker/cluster/partition_map.hpp"
#include "broker/tables/string_hash.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace switchyard::broker {

// When an owner confirmed a put (docs/cluster.md, "Ownership moves"): the
// revision of the owner key it held the partition at (a later owner's is
// always greater), then its own count of confirmations. Ordered: of two
// puts of one key, the later confirmed has the greater stamp. {} = never
// confirmed: older than any confirmed put.
struct route_stamp {
  std::int64_t revision = 0;
  std::uint64_t version = 0;
  auto operator<=>(const route_stamp&) const = default;
};

class route_directory {
 public:
  route_directory() : partitions_(partition_map::partition_count) {}

  // `key` lives at the node of incarnation `home` (the last put wins), put
  // there by `principal` ("" without an auth file, or an admin), confirmed
  // as `stamp`.
  void put(std::string_view key, std::uint32_t partition, std::int64_t home, std::string_view principal = {},
           route_stamp stamp = {});
  // A home's answer to a rebuild: as put(), but only when the directory
  // has no entry for `key` or an older one (a smaller stamp): of two homes
  // that both hold a key, the later confirmed put wins, whatever order
  // their answers come in. True if taken.
  bool put_if_newer(std::string_view key, std::uint32_t partition, std::int64_t home, std::string_view principal,
                    route_stamp stamp);
  // `key` is gone from `home`: removed only if the directory still names
  // that home (a later put from another home stands). True if removed.
  bool remove(std::string_view key, std::uint32_t partition, std::int64_t home);
  // The home's incarnation, or 0 when the directory has no entry.
  std::int64_t find(std::string_view key, std::uint32_t partition) const;
  // The principal that put it ("" also when there is no entry).
  std::string_view principal(std::string_view key, std::uint32_t partition) const;
  // Forgets a partition (it changed hands).
  void clear(std::uint32_t partition);
  // Forgets every entry whose home `keep` refuses (a node left, or came
  // back as a new incarnation); returns how many went. O(entries).
  std::size_t drop_homes(const std::function<bool(std::int64_t home)>& keep);

  std::size_t size() const noexcept { return size_; }

 private:
  struct entry {
    std::int64_t home = 0;
    std::string principal;
    route_stamp stamp;
  };
  using map = std::unordered_map<std::string, entry, string_hash, std::equal_to<>>;
  std::vector<map> partitions_;
  std::size_t size_ = 0;
};

}  // namespace switchyard::broker
