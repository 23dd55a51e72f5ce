#include "broker/cluster/partition_keeper.hpp"

#include "broker/cluster/partition_map.hpp"

#include <spdlog/spdlog.h>

#include <charconv>

namespace switchyard::broker {

partition_keeper::partition_keeper(cluster::etcd_client& etcd, std::string cluster_name, std::string node_id,
                                   std::shared_ptr<spdlog::logger> logger)
    : etcd_(etcd),
      node_id_(std::move(node_id)),
      prefix_("/switchyard/" + cluster_name + "/partitions/"),
      logger_(std::move(logger)),
      owners_(partition_map::partition_count) {}

namespace {
// The partition a key under the prefix names, or partition_count.
std::uint32_t partition_in(std::string_view key, std::string_view prefix) {
  if (!key.starts_with(prefix)) return partition_map::partition_count;
  const auto digits = key.substr(prefix.size());
  std::uint32_t p = partition_map::partition_count;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), p);
  if (ec != std::errc{} || end != digits.data() + digits.size() || p >= partition_map::partition_count)
    return partition_map::partition_count;
  return p;
}
}  // namespace

void partition_keeper::reset(std::span<const cluster::kv> kvs) {
  owners_.assign(partition_map::partition_count, {});
  for (const auto& kv : kvs)
    if (const auto p = partition_in(kv.key, prefix_); p < partition_map::partition_count)
      owners_[p] = {kv.value, kv.lease, kv.mod_revision};
}

bool partition_keeper::apply(const cluster::watch_event& e) {
  if (!e.kv.key.starts_with(prefix_)) return false;
  const auto p = partition_in(e.kv.key, prefix_);
  if (p >= partition_map::partition_count) return true;  // not a key of ours: ignored
  if (e.type == cluster::event_type::remove)
    owners_[p] = {};
  else
    owners_[p] = {e.kv.value, e.kv.lease, e.kv.mod_revision};
  return true;
}

std::size_t partition_keeper::claim(const std::vector<cluster_member>& members, std::int64_t lease) {
  lease_ = lease;
  cluster_view v;
  v.members = members;
  std::size_t taken = 0;
  for (const auto p : partition_map::preferred_partitions(v, node_id_)) {
    if (!owners_[p].node_id.empty()) continue;  // held (by us, or by one that must give it back first)
    auto made = etcd_.create_if_absent(key_of(p), node_id_, lease);
    if (!made) {
      logger_->warn("cluster: cannot claim partition {}: {}", p, made.error().message());
      return taken;  // etcd unreachable: the next call tries again
    }
    if (made->succeeded) {
      owners_[p] = {node_id_, lease, made->revision};
      ++taken;
    } else if (made->current) {
      owners_[p] = {made->current->value, made->current->lease, made->current->mod_revision};
    }
  }
  return taken;
}

std::vector<std::uint32_t> partition_keeper::surplus(const std::vector<cluster_member>& members) const {
  cluster_view v;
  v.members = members;
  std::vector<std::uint32_t> out;
  for (std::uint32_t p = 0; p < partition_map::partition_count; ++p) {
    if (!ours(owners_[p])) continue;
    const auto* preferred = partition_map::preferred_owner(v, p);
    if (preferred && preferred->node_id != node_id_) out.push_back(p);
  }
  return out;
}

std::size_t partition_keeper::release(std::span<const std::uint32_t> partitions) {
  std::size_t given = 0;
  for (const auto p : partitions) {
    if (!ours(owners_[p])) continue;
    const cluster::txn_compare still_ours[] = {cluster::txn_compare::mod_revision_is(key_of(p), owners_[p].revision)};
    const cluster::txn_op remove[] = {cluster::txn_op::remove(key_of(p))};
    auto done = etcd_.txn(still_ours, remove, {});
    if (!done) {
      logger_->warn("cluster: cannot give back partition {}: {}", p, done.error().message());
      return given;
    }
    if (done->succeeded) ++given;
    owners_[p] = {};  // gone, or not ours any more: the watch tells who holds it
  }
  return given;
}

std::vector<std::uint32_t> partition_keeper::held_list() const {
  std::vector<std::uint32_t> mine;
  for (std::uint32_t p = 0; p < partition_map::partition_count; ++p)
    if (ours(owners_[p])) mine.push_back(p);
  return mine;
}

std::size_t partition_keeper::held() const noexcept {
  std::size_t n = 0;
  for (const auto& o : owners_) n += ours(o);
  return n;
}

}  // namespace switchyard::broker
