#pragma once
// partition_keeper: the owner keys of the partitions in etcd, as one node
// reads and writes them (docs/cluster.md, "Partitions"). Used by
// membership on its keeper thread only.
//
// An owner key "/switchyard/<cluster>/partitions/<p>" holds the owner's
// node id and is attached to the owner's lease: a dead owner's keys go when
// its lease lapses, a stopping owner's when it revokes it. A node claims
// the partitions partition_map prefers it for and nobody holds (an etcd
// transaction: create only if absent), and gives back those it holds but
// no longer should (delete only if the key's mod_revision is still its
// own: the fencing token), once the loop has stopped acting for them.
// Nobody ever takes a partition another node holds: a preferred owner
// waits for the holder to give it back or to lapse.
//
// Stream holders (docs/cluster.md, "Durable streams"): a key
// "/switchyard/<cluster>/streams/<p>" names the node whose sequence log
// holds the durable streams of partition p. It is attached to no lease
// (the log outlives a run) and written once, before that node's log holds
// anything of the partition (membership::pin_streams: create only if
// absent), by the partition's owner at the time; nothing here ever moves
// or deletes it.

#include "broker/cluster/cluster_view.hpp"
#include "cluster/etcd_client.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace spdlog {
class logger;
}

namespace switchyard::broker {

class partition_keeper {
 public:
  // Claims and give-backs go to etcd in transactions of at most this many
  // keys (etcd refuses more than --max-txn-ops, 128 by default): a node
  // takes its share of 1,024 partitions in a few round trips, not one per
  // partition, and the members' watches see a few revisions, not a
  // thousand.
  static constexpr std::size_t batch_size = 64;

  // Borrows `etcd` (the keeper thread's client) for its lifetime.
  partition_keeper(cluster::etcd_client& etcd, std::string cluster_name, std::string node_id,
                   std::shared_ptr<spdlog::logger> logger);

  // "/switchyard/<cluster>/partitions/"
  const std::string& prefix() const noexcept { return prefix_; }
  // The owners as etcd last told (partition_count entries).
  const std::vector<partition_owner>& owners() const noexcept { return owners_; }

  // Every owner and stream key afresh (join, a watch that failed).
  void reset(std::span<const cluster::kv> kvs);
  // A watch event on a key under prefix() or streams_prefix(); false for
  // another key.
  bool apply(const cluster::watch_event& e);

  // Claims each partition `members` prefers this node for that nobody
  // holds, attached to `lease`, batch_size at a time (a transaction: all
  // of a batch, or none when one is held); returns how many it took. A
  // partition someone was faster to take is left to that holder, the rest
  // of its batch claimed again; errors are logged and retried at the next
  // call.
  std::size_t claim(const std::vector<cluster_member>& members, std::int64_t lease);
  // The partitions this node holds but `members` prefers another for.
  std::vector<std::uint32_t> surplus(const std::vector<cluster_member>& members) const;
  // Gives back `partitions` (each only if its key is still this node's at
  // the revision it holds), batch_size at a time; returns how many it
  // deleted.
  std::size_t release(std::span<const std::uint32_t> partitions);
  // "/switchyard/<cluster>/streams/"
  const std::string& streams_prefix() const noexcept { return streams_prefix_; }
  // Per partition: the node holding its streams ("" before any does), and
  // the id of the log they are in ("" while a takeover's new holder has
  // not recorded its log yet). A key's value is "<node id>/<log id>" (or
  // "<node id>" alone, as a takeover writes it).
  const std::vector<std::string>& stream_holders() const noexcept { return stream_holders_; }
  const std::vector<std::string>& stream_logs() const noexcept { return stream_logs_; }
  static std::string holder_value(std::string_view node, std::string_view log) {
    return log.empty() ? std::string(node) : std::string(node) + "/" + std::string(log);
  }
  // How many partitions this node holds, and which.
  std::size_t held() const noexcept;
  std::vector<std::uint32_t> held_list() const;

 private:
  std::string key_of(std::uint32_t partition) const { return prefix_ + std::to_string(partition); }

  cluster::etcd_client& etcd_;
  const std::string node_id_;
  const std::string prefix_;
  std::shared_ptr<spdlog::logger> logger_;
  // Whether `o` is this node's current incarnation.
  bool ours(const partition_owner& o) const noexcept { return o.node_id == node_id_ && o.incarnation == lease_; }

  std::vector<partition_owner> owners_;
  const std::string streams_prefix_;
  std::vector<std::string> stream_holders_;
  std::vector<std::string> stream_logs_;
  void set_holder(std::uint32_t partition, std::string_view value);
  std::int64_t lease_ = 0;  // this node's lease, as the last claim() was given
};

}  // namespace switchyard::broker
