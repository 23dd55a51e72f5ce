#include "broker/cluster/partition_keeper.hpp"

#include "broker/cluster/partition_map.hpp"

#include <spdlog/spdlog.h>

#include <charconv>

namespace switchyard::broker {

using cluster::txn_compare;
using cluster::txn_op;

partition_keeper::partition_keeper(cluster::etcd_client& etcd, std::string cluster_name, std::string node_id,
                                   std::shared_ptr<spdlog::logger> logger)
    : etcd_(etcd),
      node_id_(std::move(node_id)),
      prefix_("/switchyard/" + cluster_name + "/partitions/"),
      logger_(std::move(logger)),
      owners_(partition_map::partition_count),
      streams_prefix_("/switchyard/" + cluster_name + "/streams/"),
      stream_holders_(partition_map::partition_count),
      stream_logs_(partition_map::partition_count) {}

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
  stream_holders_.assign(partition_map::partition_count, {});
  stream_logs_.assign(partition_map::partition_count, {});
  for (const auto& kv : kvs)
    if (const auto p = partition_in(kv.key, prefix_); p < partition_map::partition_count)
      owners_[p] = {kv.value, kv.lease, kv.mod_revision};
    else if (const auto q = partition_in(kv.key, streams_prefix_); q < partition_map::partition_count)
      set_holder(q, kv.value);
}

void partition_keeper::set_holder(std::uint32_t partition, std::string_view value) {
  const auto slash = value.find('/');
  stream_holders_[partition] = value.substr(0, slash);
  stream_logs_[partition] = slash == std::string_view::npos ? std::string() : std::string(value.substr(slash + 1));
}

bool partition_keeper::apply(const cluster::watch_event& e) {
  if (e.kv.key.starts_with(streams_prefix_)) {
    if (const auto p = partition_in(e.kv.key, streams_prefix_); p < partition_map::partition_count)
      set_holder(p, e.type == cluster::event_type::remove ? std::string_view{} : std::string_view{e.kv.value});
    return true;
  }
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
  std::vector<std::uint32_t> free;
  for (const auto p : partition_map::preferred_partitions(v, node_id_))
    if (owners_[p].node_id.empty()) free.push_back(p);  // else held (by us, or by one that must give it back first)
  std::size_t taken = 0;
  std::vector<txn_compare> absent;
  std::vector<txn_op> puts, reads;
  std::span<const std::uint32_t> rest(free);
  while (!rest.empty()) {
    const auto batch = rest.first(std::min(rest.size(), batch_size));
    absent.clear();
    puts.clear();
    reads.clear();
    for (const auto p : batch) {
      absent.push_back(txn_compare::absent(key_of(p)));
      puts.push_back(txn_op::put(key_of(p), node_id_, lease));
      reads.push_back(txn_op::range(key_of(p)));
    }
    auto done = etcd_.txn(absent, puts, reads);
    if (!done) {
      logger_->warn("cluster: cannot claim partitions {}..: {}", batch.front(), done.error().message());
      return taken;  // etcd unreachable: the next call tries again
    }
    if (done->succeeded) {
      for (const auto p : batch) owners_[p] = {node_id_, lease, done->revision};
      taken += batch.size();
      rest = rest.subspan(batch.size());
      continue;
    }
    // Someone holds some of them: record the holders (the reads ran at the
    // compare's revision, so at least one is held) and try the others again.
    std::vector<std::uint32_t> still_free;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const auto p = batch[i];
      if (i < done->ranges.size() && !done->ranges[i].empty()) {
        const auto& kv = done->ranges[i].front();
        owners_[p] = {kv.value, kv.lease, kv.mod_revision};
      } else {
        still_free.push_back(p);
      }
    }
    if (still_free.size() == batch.size()) {  // an answer without the holders: not as documented
      logger_->warn("cluster: cannot claim partitions {}..: etcd's answer names no holder", batch.front());
      return taken;
    }
    // The unclaimed remainder: the free ones of this batch, then the rest.
    std::vector<std::uint32_t> next(still_free);
    next.insert(next.end(), rest.begin() + static_cast<std::ptrdiff_t>(batch.size()), rest.end());
    free = std::move(next);
    rest = free;
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
  std::vector<std::uint32_t> ours_now;
  for (const auto p : partitions)
    if (ours(owners_[p])) ours_now.push_back(p);
  std::size_t given = 0;
  std::vector<txn_compare> still_ours;
  std::vector<txn_op> removes, reads;
  std::span<const std::uint32_t> rest(ours_now);
  while (!rest.empty()) {
    const auto batch = rest.first(std::min(rest.size(), batch_size));
    still_ours.clear();
    removes.clear();
    reads.clear();
    for (const auto p : batch) {
      still_ours.push_back(txn_compare::mod_revision_is(key_of(p), owners_[p].revision));
      removes.push_back(txn_op::remove(key_of(p)));
      reads.push_back(txn_op::range(key_of(p)));
    }
    auto done = etcd_.txn(still_ours, removes, reads);
    if (!done) {
      logger_->warn("cluster: cannot give back partitions {}..: {}", batch.front(), done.error().message());
      return given;
    }
    if (done->succeeded) {
      for (const auto p : batch) owners_[p] = {};
      given += batch.size();
      rest = rest.subspan(batch.size());
      continue;
    }
    // Some are not ours any more (at the revision we hold): forget those
    // (the watch tells who holds them) and give back the others again.
    std::vector<std::uint32_t> still;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const auto p = batch[i];
      const bool unchanged = i < done->ranges.size() && !done->ranges[i].empty() &&
                             done->ranges[i].front().mod_revision == owners_[p].revision;
      if (unchanged)
        still.push_back(p);
      else
        owners_[p] = {};
    }
    if (still.size() == batch.size()) {  // an answer without the changed key: not as documented
      logger_->warn("cluster: cannot give back partitions {}..: etcd's answer names no change", batch.front());
      return given;
    }
    std::vector<std::uint32_t> next(still);
    next.insert(next.end(), rest.begin() + static_cast<std::ptrdiff_t>(batch.size()), rest.end());
    ours_now = std::move(next);
    rest = ours_now;
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
