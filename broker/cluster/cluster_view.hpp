#pragma once
// What a node knows of its cluster (docs/cluster.md): the members etcd
// lists, as one immutable snapshot. membership builds a new snapshot on its
// own thread for every change and posts it to the loop; the loop only ever
// reads snapshots, never a view under change.

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace switchyard::broker {

struct cluster_member {
  std::string node_id;
  std::string address;           // where clients connect to it (--cluster-advertise)
  std::int64_t incarnation = 0;  // its etcd lease: a new one at each start (or re-registration)
  bool has_log = false;          // it runs with a sequence log (--data-dir): it may hold streams
};

// Who owns a partition (partition_map), as etcd records it.
struct partition_owner {
  std::string node_id;           // empty: nobody
  std::int64_t incarnation = 0;  // the owner's lease, to which the owner key is attached
  // The owner key's mod_revision: the fencing token every owner-side
  // action carries (a later owner's is always greater).
  std::int64_t revision = 0;
};

struct cluster_view {
  std::int64_t revision = 0;            // etcd's revision the snapshot is at
  std::vector<cluster_member> members;  // ordered by node_id; includes this node
  // One entry per partition (partition_map::partition_count), or empty
  // before the first reading of the owner keys.
  std::vector<partition_owner> owners;
  // Per partition (or empty, as owners): the node whose sequence log holds
  // the partition's durable streams ("" before any does); see
  // partition_keeper.
  std::vector<std::string> stream_holders;
  // Per partition: the id of the holder's log its streams are in ("" when
  // none, or while a takeover's new holder has not recorded its log yet).
  std::vector<std::string> stream_logs;

  // The owner of `partition` when it is a member in this view with the
  // incarnation its owner key is attached to; nullptr when nobody (alive)
  // holds it.
  const cluster_member* owner(std::uint32_t partition) const noexcept {
    if (partition >= owners.size() || owners[partition].node_id.empty()) return nullptr;
    const auto* m = find(owners[partition].node_id);
    return m && m->incarnation == owners[partition].incarnation ? m : nullptr;
  }

  const cluster_member* find(std::string_view node_id) const noexcept {
    const auto it = std::lower_bound(members.begin(), members.end(), node_id,
                                     [](const cluster_member& m, std::string_view id) { return m.node_id < id; });
    return it != members.end() && it->node_id == node_id ? &*it : nullptr;
  }
};

// One etcd endpoint as the node's health probe last found it.
struct etcd_endpoint_health {
  std::string endpoint;
  bool reachable = false;
  bool leader = false;  // the member at this endpoint is etcd's leader
  std::string version;  // etcd's version ("3.4.23"), when reachable
  std::string error;    // why not reachable
};

}  // namespace switchyard::broker
