#pragma once
// A connection's bounded queue of outbound frames, with slow-consumer
// accounting.
//
// Frames wait in `pending`; the writer moves all of them to `in flight` in
// one step, writes them with one gather write, then completes. Byte
// accounting covers both, so a consumer that does not read is detected even
// while a write is stuck in the kernel. Single-threaded (the broker loop).

#include "broker/frame_arena.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace switchyard::broker {

class outbound_queue {
 public:
  explicit outbound_queue(std::size_t max_bytes) : max_bytes_(max_bytes) {}

  // Whether a delivery of `bytes` fits under the limit; when it does not,
  // it counts as dropped. A caller that gets true pushes it.
  bool admit(std::size_t bytes) noexcept;
  // Queues a delivery unless that would take the queued bytes past the
  // limit; then it is dropped and counted. Returns false when dropped.
  bool push_droppable(const frame_ref& f) {
    if (!admit(f.size())) return false;
    push(f);
    return true;
  }
  // Queues a control frame (answers, pings, errors): never dropped, so the
  // limit can be exceeded by control traffic alone.
  void push(frame_ref f);

  bool has_pending() const noexcept { return !pending_.empty(); }
  bool writing() const noexcept { return !in_flight_.empty(); }
  std::size_t queued_bytes() const noexcept { return queued_bytes_; }
  std::size_t max_bytes() const noexcept { return max_bytes_; }

  // Moves every pending frame in flight and appends their bytes to `out`,
  // merging frames that are adjacent in memory. Precondition: !writing().
  void begin_write(std::vector<std::span<const std::uint8_t>>& out);
  // Releases the frames in flight (the write finished).
  void end_write() noexcept;

  // Deliveries dropped since the last take_dropped().
  std::uint64_t dropped() const noexcept { return dropped_; }
  std::uint64_t take_dropped() noexcept { return std::exchange(dropped_, 0); }
  // Total dropped over the queue's life.
  std::uint64_t dropped_total() const noexcept { return dropped_total_; }

  // True when a drop notice is due: deliveries were dropped and the queue
  // has drained below half its limit.
  bool notice_due() const noexcept { return dropped_ > 0 && queued_bytes_ <= max_bytes_ / 2; }

  void clear() noexcept;

 private:
  std::size_t max_bytes_;
  std::size_t queued_bytes_ = 0;
  std::uint64_t dropped_ = 0;
  std::uint64_t dropped_total_ = 0;
  std::vector<frame_ref> pending_;
  std::vector<frame_ref> in_flight_;
};

}  // namespace switchyard::broker
