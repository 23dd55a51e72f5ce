#include "broker/cluster/channel_interest.hpp"

#include <algorithm>

namespace switchyard::broker {

bool channel_interest::add_local(std::string_view pattern, const std::vector<std::string>& peers,
                                 clock::time_point deadline) {
  auto [it, first] = local_.try_emplace(std::string(pattern), 0);
  ++it->second;
  if (!first) return false;
  // Withdrawn in this same turn and back: the peers never stopped holding it.
  if (delta_remove_.erase(it->first) != 0) return true;
  delta_add_.insert(it->first);
  if (!peers.empty()) {
    auto& p = pending_[it->first];
    p.ticket = 0;
    p.awaiting = {peers.begin(), peers.end()};
    p.deadline = deadline;
  }
  return true;
}

bool channel_interest::remove_local(std::string_view pattern, std::vector<waiter>& done) {
  const auto it = local_.find(std::string(pattern));
  if (it == local_.end()) return false;
  if (--it->second != 0) return false;
  if (delta_add_.erase(it->first) == 0) {
    delta_remove_.insert(it->first);
  } else if (const auto p = pending_.find(it->first); p != pending_.end() && p->second.ticket == 0) {
    finish(p, done);  // never announced: nothing to wait for
  }
  local_.erase(it);
  return true;
}

void channel_interest::node_added(std::string_view node) {
  for (auto& [pattern, p] : pending_) p.awaiting.emplace(node);
}

std::vector<std::string> channel_interest::patterns() const {
  std::vector<std::string> out;
  out.reserve(local_.size());
  for (const auto& [pattern, count] : local_) out.push_back(pattern);
  std::sort(out.begin(), out.end());
  return out;
}

bool channel_interest::take_delta(std::uint64_t ticket, std::vector<std::string>& add,
                                  std::vector<std::string>& remove) {
  add.assign(delta_add_.begin(), delta_add_.end());
  remove.assign(delta_remove_.begin(), delta_remove_.end());
  delta_add_.clear();
  delta_remove_.clear();
  for (const auto& p : add)
    if (const auto it = pending_.find(p); it != pending_.end() && it->second.ticket == 0) it->second.ticket = ticket;
  return !add.empty() || !remove.empty();
}

bool channel_interest::wait(std::string_view pattern, waiter w) {
  const auto it = pending_.find(std::string(pattern));
  if (it == pending_.end()) return false;
  it->second.waiters.push_back(std::move(w));
  return true;
}

void channel_interest::finish(std::unordered_map<std::string, pending>::iterator it, std::vector<waiter>& done) {
  for (auto& w : it->second.waiters) done.push_back(std::move(w));
  pending_.erase(it);
}

void channel_interest::acked(std::string_view node, std::uint64_t ticket, bool sync, std::vector<waiter>& done) {
  const std::string id(node);
  for (auto it = pending_.begin(); it != pending_.end();) {
    auto& p = it->second;
    const bool covered = p.ticket != 0 && (sync ? p.ticket <= ticket : p.ticket == ticket);
    if (covered) p.awaiting.erase(id);
    if (p.awaiting.empty() && p.ticket != 0)
      finish(it++, done);
    else
      ++it;
  }
}

void channel_interest::node_gone(std::string_view node, std::vector<waiter>& done) {
  const std::string id(node);
  for (auto it = pending_.begin(); it != pending_.end();) {
    it->second.awaiting.erase(id);
    // Not sent yet: take_delta still sends it; the next ack finishes it.
    if (it->second.awaiting.empty())
      finish(it++, done);
    else
      ++it;
  }
}

void channel_interest::expire(clock::time_point now, std::vector<waiter>& done, std::vector<std::string>& silent) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.deadline > now) {
      ++it;
      continue;
    }
    for (const auto& n : it->second.awaiting)
      if (std::find(silent.begin(), silent.end(), n) == silent.end()) silent.push_back(n);
    finish(it++, done);
  }
}

std::optional<channel_interest::clock::time_point> channel_interest::next_deadline() const {
  std::optional<clock::time_point> first;
  for (const auto& [pattern, p] : pending_)
    if (!first || p.deadline < *first) first = p.deadline;
  return first;
}

}  // namespace switchyard::broker
