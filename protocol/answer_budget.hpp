#pragma once
// Fits a list answer (leases, registry entries, streams, records) into one
// frame: items are taken while the estimated encoded size stays within the
// budget. The estimates are the constants of protocol/limits.hpp; every
// server answer that lists things uses this, so they stay in one place.
// Not thread-safe (one per answer being built).

#include "protocol/limits.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace switchyard::protocol {

class answer_budget {
 public:
  // A list answer (LeaseList, RegistryList, StreamList results): at most
  // half of `max_frame`, leaving room for the estimates' error.
  static answer_budget for_list(std::uint32_t max_frame) noexcept { return {max_frame / 2, false}; }
  // A Records answer: up to `max_frame`, and its first record always goes
  // (a record is at most max_frame / 2 of payload, so it fits).
  static answer_budget for_records(std::uint32_t max_frame) noexcept { return {max_frame, true}; }

  // Adds an item of `bytes` (estimated wire size) if it fits; false (and
  // nothing added) when it would pass the budget.
  bool take(std::size_t bytes) noexcept {
    if (used_ + bytes > limit_ && !(first_always_ && items_ == 0)) return false;
    used_ += bytes;
    ++items_;
    return true;
  }
  // Adds fixed bytes (e.g. the stream name of a Records answer).
  void reserve(std::size_t bytes) noexcept { used_ += bytes; }
  // How many items of `item_bytes` each fit (at least one): for answers
  // whose items all have the same size.
  std::size_t count_of(std::size_t item_bytes) const noexcept {
    return std::max<std::size_t>(1, (limit_ > used_ ? limit_ - used_ : 0) / std::max<std::size_t>(1, item_bytes));
  }

 private:
  answer_budget(std::size_t limit, bool first_always) noexcept : limit_(limit), first_always_(first_always) {}

  std::size_t used_ = answer_overhead;
  std::size_t limit_;
  std::size_t items_ = 0;
  bool first_always_;
};

}  // namespace switchyard::protocol
