#include "broker/tables/lease_table.hpp"

#include <algorithm>

namespace switchyard::broker {

using std::chrono::duration_cast;
using std::chrono::milliseconds;

lease_table::lease_table(lease_config config, clock_source clock) : config_(config), clock_(std::move(clock)) {
  if (config_.sweep_period.count() < 1) config_.sweep_period = milliseconds(1);
  if (config_.min_ttl.count() < 1) config_.min_ttl = milliseconds(1);
  config_.max_ttl = std::max(config_.max_ttl, config_.min_ttl);
  if (config_.max_expiries_per_sweep == 0) config_.max_expiries_per_sweep = 1;
  epoch_ = clock_();
  last_sweep_ = epoch_;
  swept_at_ = epoch_;
  grace_ = {epoch_ - config_.max_ttl, epoch_ - config_.max_ttl};  // no stall yet: grants no grace
  wheel_.assign(static_cast<std::size_t>(config_.max_ttl / config_.sweep_period) + 2, none);
}

lease_table::~lease_table() = default;

mono_clock::time_point lease_table::now() const {
  // While the sweeper is overdue by more than the stall threshold, lease
  // time stands still; the next sweep absorbs the stall, and time resumes
  // from the same point, so a pause never makes leases look expired.
  const auto real = clock_();
  const auto frozen_at = last_sweep_ + config_.sweep_period + config_.stall_threshold;
  return std::min(real, frozen_at) - stalled_;
}

std::uint64_t lease_table::tick_of(mono_clock::time_point t) const {
  if (t <= epoch_) return 0;
  const auto since = t - epoch_;
  const auto period = mono_clock::duration(config_.sweep_period);
  return static_cast<std::uint64_t>((since + period - mono_clock::duration(1)) / period);
}

std::uint32_t lease_table::slot_of(lease_id id) const noexcept {
  id ^= config_.id_key;
  const std::uint64_t low = id & 0xffff'ffffu;
  if (low == 0 || low > slots_.size()) return none;
  const auto slot = static_cast<std::uint32_t>(low - 1);
  const lease& l = slots_[slot];
  return l.live && l.generation == static_cast<std::uint32_t>(id >> 32) ? slot : none;
}

void lease_table::link(std::uint32_t slot) {
  lease& l = slots_[slot];
  // A deadline in a tick already swept goes to the next tick to sweep.
  const std::uint64_t tick = std::max(tick_of(l.deadline), swept_tick_);
  l.bucket = static_cast<std::uint32_t>(tick % wheel_.size());
  std::uint32_t& head = wheel_[l.bucket];
  l.prev = none;
  l.next = head;
  if (head != none) slots_[head].prev = slot;
  head = slot;
}

void lease_table::unlink(std::uint32_t slot) noexcept {
  lease& l = slots_[slot];
  if (l.prev != none)
    slots_[l.prev].next = l.next;
  else
    wheel_[l.bucket] = l.next;
  if (l.next != none) slots_[l.next].prev = l.prev;
  l.prev = l.next = none;
}

lease_table::stall_grace lease_table::current_grace() const {
  // A stall not absorbed yet (the sweeper is overdue past the threshold)
  // ends, as far as leases are concerned, at the frozen lease time now()
  // reports: the next sweep records exactly that point.
  const auto real = clock_();
  if (real > last_sweep_ + config_.sweep_period + config_.stall_threshold) return {now(), swept_at_};
  return grace_;
}

mono_clock::time_point lease_table::deadline_of(const lease& l, const stall_grace& g) const noexcept {
  // A lease already due at the sweep before the stall (left by the rate
  // limit) is not revived.
  if (l.deadline <= g.cutoff) return l.deadline;
  return std::max(l.deadline, g.from + milliseconds(l.ttl_ms));
}

std::optional<lease_info> lease_table::info(std::uint32_t slot) const {
  const lease& l = slots_[slot];
  const auto t = now();
  const auto deadline = deadline_of(l, current_grace());
  if (deadline <= t) return std::nullopt;
  return lease_info{id_of(slot), milliseconds(l.ttl_ms), duration_cast<milliseconds>(deadline - t)};
}

lease_info lease_table::grant(milliseconds ttl, owner_id owner) {
  ttl = std::clamp(ttl, config_.min_ttl, config_.max_ttl);
  std::uint32_t slot;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else {
    slot = static_cast<std::uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  lease& l = slots_[slot];
  if (id_of(slot) == 0) ++l.generation;  // 0 means "no lease" on the wire
  l.live = true;
  l.owner = owner;
  l.attached = nullptr;
  l.ttl_ms = static_cast<std::uint32_t>(ttl.count());
  l.deadline = now() + ttl;
  link(slot);
  ++live_;
  return {id_of(slot), ttl, ttl};
}

std::optional<lease_info> lease_table::keepalive(lease_id id) {
  const std::uint32_t slot = slot_of(id);
  if (slot == none) return std::nullopt;
  lease& l = slots_[slot];
  const auto t = now();
  if (deadline_of(l, current_grace()) <= t) return std::nullopt;  // expired, not yet swept
  unlink(slot);
  l.deadline = t + milliseconds(l.ttl_ms);
  link(slot);
  return lease_info{id, milliseconds(l.ttl_ms), milliseconds(l.ttl_ms)};
}

bool lease_table::alive(lease_id id, mono_clock::time_point now) const {
  const std::uint32_t slot = slot_of(id);
  if (slot == none) return false;
  const lease& l = slots_[slot];
  // The common case decides without reading the clock again.
  return l.deadline > now || deadline_of(l, current_grace()) > now;
}

std::optional<lease_info> lease_table::time_to_live(lease_id id) const {
  const std::uint32_t slot = slot_of(id);
  if (slot == none) return std::nullopt;
  return info(slot);
}

std::optional<owner_id> lease_table::owner_of(lease_id id) const {
  const std::uint32_t slot = slot_of(id);
  if (slot == none || !info(slot)) return std::nullopt;
  return slots_[slot].owner;
}

std::vector<lease_info> lease_table::list(std::size_t limit, lease_id after, lease_id* next) const {
  std::vector<lease_info> out;
  if (next) *next = 0;
  // An id's low 32 bits (un-XORed) are its slot + 1: the next slot.
  std::uint64_t slot = 0;
  if (after != 0) {
    slot = (after ^ config_.id_key) & 0xffff'ffffu;
    if (slot == 0) return out;  // no id of this table
  }
  for (; slot < slots_.size(); ++slot) {
    if (!slots_[slot].live) continue;
    auto i = info(static_cast<std::uint32_t>(slot));
    if (!i) continue;  // expired, not swept yet
    if (out.size() == limit) {
      if (next && !out.empty()) *next = out.back().id;
      break;
    }
    out.push_back(*i);
  }
  return out;
}

bool lease_table::attach(lease_id id, lease_attachment& a) {
  const std::uint32_t slot = slot_of(id);
  if (slot == none || !info(slot)) return false;
  detach(a);
  lease& l = slots_[slot];
  a.lease = id;
  a.prev = nullptr;
  a.next = l.attached;
  if (l.attached) l.attached->prev = &a;
  l.attached = &a;
  return true;
}

void lease_table::detach(lease_attachment& a) noexcept {
  if (a.lease == 0) return;
  if (a.prev) {
    a.prev->next = a.next;
  } else if (const std::uint32_t slot = slot_of(a.lease); slot != none && slots_[slot].attached == &a) {
    slots_[slot].attached = a.next;
  }
  if (a.next) a.next->prev = a.prev;
  a.prev = a.next = nullptr;
  a.lease = 0;
}

void lease_table::erase(std::uint32_t slot, const remove_fn& fn) {
  unlink(slot);
  const lease_id id = id_of(slot);
  if (fn) fn(id, slots_[slot].attached);
  // Whatever the callback left attached is unlinked, so no attachment keeps
  // pointing at a lease that no longer exists.
  lease& l = slots_[slot];
  for (lease_attachment* a = l.attached; a;) {
    lease_attachment* next = a->next;
    a->prev = a->next = nullptr;
    a->lease = 0;
    a = next;
  }
  l.attached = nullptr;
  l.live = false;
  ++l.generation;  // the slot's next lease gets another id
  free_.push_back(slot);
  --live_;
}

bool lease_table::revoke(lease_id id, const remove_fn& on_remove) {
  const std::uint32_t slot = slot_of(id);
  if (slot == none) return false;
  // An expired lease the sweeper has not reached yet is removed as well,
  // but reported as unknown, like keepalive and time_to_live report it.
  const bool was_alive = info(slot).has_value();
  erase(slot, on_remove);
  return was_alive;
}

lease_table::sweep_result lease_table::sweep(const remove_fn& on_expire) {
  sweep_result result;
  const auto real = clock_();
  const auto late = real - last_sweep_ - mono_clock::duration(config_.sweep_period);
  const bool stalled = late > mono_clock::duration(config_.stall_threshold);
  if (stalled) {
    const auto absorbed = late - mono_clock::duration(config_.stall_threshold);
    stalled_ += absorbed;
    result.stall_absorbed = duration_cast<milliseconds>(absorbed);
  }
  last_sweep_ = real;

  const auto t = now();
  // The owners could not reach us during the stall either: every lease gets
  // at least its full TTL from the stall's end (applied lazily, below and in
  // deadline_of, so a stall costs nothing per lease until it is due).
  if (stalled) grace_ = {t, swept_at_};
  swept_at_ = t;
  // Every tick whose time has come: epoch + tick * period <= t.
  const auto period = mono_clock::duration(config_.sweep_period);
  const std::uint64_t last_due = t < epoch_ ? 0 : static_cast<std::uint64_t>((t - epoch_) / period);
  while (swept_tick_ <= last_due) {
    std::uint32_t slot = wheel_[swept_tick_ % wheel_.size()];
    while (slot != none) {
      const std::uint32_t next = slots_[slot].next;
      // A bucket may also hold leases of a later round (keepalives during a
      // rate-limited backlog): only those past their deadline go.
      lease& l = slots_[slot];
      if (l.deadline <= t && deadline_of(l, grace_) > t) {
        // Due, but within its grace after a stall: moved to its new deadline
        // (a later tick than any swept here).
        unlink(slot);
        l.deadline = deadline_of(l, grace_);
        link(slot);
      } else if (l.deadline <= t) {
        if (result.expired == config_.max_expiries_per_sweep) {
          result.more_due = true;
          return result;
        }
        erase(slot, on_expire);
        ++result.expired;
      }
      slot = next;
    }
    ++swept_tick_;
  }
  return result;
}

}  // namespace switchyard::broker
