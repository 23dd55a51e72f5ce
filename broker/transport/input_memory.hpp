#pragma once
// Memory the connections of one loop hold for input (docs/protocol.md §9,
// limits table):
//
//  - the shared read buffer: every connection reads into it while it has
//    no incomplete frame (one buffer per loop instead of one per
//    connection);
//  - the spill buffers of incomplete frames, one per connection while it
//    has one. Together they hold at most max_incomplete_bytes, beyond the
//    first spill_allowance bytes of each (so that connections with an
//    ordinary frame cut by a read are never refused because others filled
//    the budget).
//
// One per loop, owned by the server; loop thread only.

#include "protocol/read_buffer.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace switchyard::broker {

class input_memory {
 public:
  // Spill bytes per connection that do not count against the limit.
  static constexpr std::size_t spill_allowance = 4 * 1024;

  explicit input_memory(std::size_t max_incomplete_bytes) : limit_(max_incomplete_bytes) {}

  // The loop's shared read buffer (see above).
  protocol::read_buffer& read_scratch() noexcept { return read_scratch_; }

  // Whether a spill buffer may go from `before` to `after` bytes of
  // capacity within the limit.
  bool may_resize(std::size_t before, std::size_t after) const noexcept {
    return charged_ - charged(before) + charged(after) <= limit_;
  }
  // A spill buffer went from `before` to `after` bytes of capacity (0: freed).
  void resized(std::size_t before, std::size_t after) noexcept {
    held_ = held_ - before + after;
    charged_ = charged_ - charged(before) + charged(after);
    peak_ = std::max<std::uint64_t>(peak_, held_);
  }

  std::size_t limit() const noexcept { return limit_; }
  // Bytes the spill buffers hold now, and the most they held at once.
  std::size_t held() const noexcept { return held_; }
  std::uint64_t peak() const noexcept { return peak_; }

 private:
  static std::size_t charged(std::size_t capacity) noexcept { return capacity - std::min(capacity, spill_allowance); }

  protocol::read_buffer read_scratch_;
  std::size_t limit_;
  std::size_t held_ = 0;
  std::size_t charged_ = 0;  // the part of held_ counted against limit_
  std::uint64_t peak_ = 0;
};

}  // namespace switchyard::broker
