#include "broker/tables/offer_table.hpp"

#include <algorithm>

namespace switchyard::broker {

std::size_t offer_table::offer::bytes() const noexcept {
  std::size_t n = offer_overhead + payload.size() + receipt_inbox.size() + principal.size();
  for (const auto& k : keys) n += key_overhead + k.key.size() + k.inbox.size();
  return n;
}

offer_table::offer* offer_table::find(std::uint64_t id) {
  const auto it = offers_.find(id);
  return it == offers_.end() ? nullptr : &it->second;
}

void offer_table::unlist_key(std::uint64_t id, key_state& k) {
  if (!k.pending) return;
  k.pending = false;
  const auto it = pending_.find(std::string_view(k.key));
  if (it == pending_.end()) return;
  auto& ids = it->second;
  if (const auto pos = std::find(ids.begin(), ids.end(), id); pos != ids.end()) {
    ids.erase(pos);
    --pending_entries_;
    pending_bytes_ -= pending_entry_bytes;
  }
  if (ids.empty()) {
    pending_bytes_ -= pending_list_overhead + it->first.size();
    pending_.erase(it);
  }
}

void offer_table::unlist(offer& o) {
  for (auto& k : o.keys) unlist_key(o.id, k);
}

void offer_table::add(offer o) {
  const std::uint64_t id = o.id;
  bytes_ += o.bytes();
  if (o.wants_receipts()) receipts_.emplace(o.receipt_due, id);
  expiries_.emplace(o.expires, id);
  order_.push_back(id);
  auto& stored = offers_.emplace(id, std::move(o)).first->second;
  for (auto& k : stored.keys) {
    auto list = pending_.find(std::string_view(k.key));
    if (list != pending_.end() && list->second.size() >= limits_.max_pending_per_key && !list->second.empty()) {
      // The key's oldest pending offer leaves the list (it stays live for
      // acks, withdrawal and its other keys).
      const std::uint64_t oldest = list->second.front();
      if (offer* old = find(oldest))
        for (auto& ok : old->keys)
          if (ok.key == k.key && ok.pending) {
            unlist_key(oldest, ok);
            ++pushed_out_;
            break;
          }
      list = pending_.find(std::string_view(k.key));  // emptied lists are erased
    }
    if (list == pending_.end()) {
      list = pending_.emplace(k.key, std::vector<std::uint64_t>{}).first;
      pending_bytes_ += pending_list_overhead + k.key.size();
    }
    list->second.push_back(id);
    ++pending_entries_;
    pending_bytes_ += pending_entry_bytes;
  }
  while ((offers_.size() > limits_.max_offers || bytes() > limits_.max_bytes) && !order_.empty()) {
    const std::uint64_t oldest = order_.front();
    if (oldest == id) break;  // never the one just added
    order_.pop_front();
    if (remove(oldest)) ++evicted_;
  }
}

std::size_t offer_table::ack(std::uint64_t id, std::string_view key, std::span<const std::string> inboxes,
                             const std::function<void(offer&, key_state&)>& each) {
  offer* o = find(id);
  if (!o) return 0;
  std::size_t n = 0;
  for (auto& k : o->keys) {
    if (k.acked) continue;
    const bool match = key.empty() ? std::find(inboxes.begin(), inboxes.end(), k.inbox) != inboxes.end() : k.key == key;
    if (!match) continue;
    k.acked = true;
    unlist_key(id, k);
    ++n;
    each(*o, k);
  }
  return n;
}

std::optional<offer_table::offer> offer_table::remove(std::uint64_t id) {
  const auto it = offers_.find(id);
  if (it == offers_.end()) return std::nullopt;
  unlist(it->second);
  bytes_ -= it->second.bytes();
  offer o = std::move(it->second);
  offers_.erase(it);
  // Heaps and order_ keep the id: stale entries are skipped when met.
  while (!order_.empty() && !offers_.contains(order_.front())) order_.pop_front();
  return o;
}

std::vector<const offer_table::offer*> offer_table::pending(std::string_view key, clock::time_point now,
                                                            std::size_t limit) const {
  std::vector<const offer*> out;
  const auto it = pending_.find(key);
  if (it == pending_.end()) return out;
  for (const std::uint64_t id : it->second) {
    const auto o = offers_.find(id);
    if (o == offers_.end() || o->second.expires <= now) continue;
    out.push_back(&o->second);
    if (limit != 0 && out.size() >= limit) break;
  }
  return out;
}

void offer_table::sweep(clock::time_point now, const std::function<void(offer&, key_state&)>& timed_out,
                        const std::function<void(offer&)>& expired) {
  while (!receipts_.empty() && receipts_.top().first <= now) {
    const auto [due, id] = receipts_.top();
    receipts_.pop();
    offer* o = find(id);
    if (!o || o->receipt_due != due) continue;
    for (auto& k : o->keys)
      if (!k.acked && !k.receipt_sent) {
        k.receipt_sent = true;
        timed_out(*o, k);
      }
  }
  while (!expiries_.empty() && expiries_.top().first <= now) {
    const auto [at, id] = expiries_.top();
    expiries_.pop();
    offer* o = find(id);
    if (!o || o->expires != at) continue;
    expired(*o);
    remove(id);
  }
}

std::optional<offer_table::clock::time_point> offer_table::next_deadline() const {
  std::optional<clock::time_point> next;
  if (!receipts_.empty()) next = receipts_.top().first;
  if (!expiries_.empty() && (!next || expiries_.top().first < *next)) next = expiries_.top().first;
  return next;
}

}  // namespace switchyard::broker
