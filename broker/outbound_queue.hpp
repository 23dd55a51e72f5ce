#pragma once
// A connection's bounded queue of outbound frames, with slow-consumer
// accounting.
//
// Frames wait in `pending`; the writer moves them to `in flight` in one
// step (at most max_write_bytes, so that what is in flight stays small
// enough for a slow reader to get through), writes them with one gather
// write, then completes. Byte accounting covers both, so a consumer that
// does not read is detected even while a write is stuck in the kernel.
// Single-threaded (the broker loop).

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

  // The most one write takes (begin_write), unless a single frame is larger.
  static constexpr std::size_t max_write_bytes = 256 * 1024;

  bool has_pending() const noexcept { return head_ < pending_.size(); }
  bool writing() const noexcept { return !in_flight_.empty(); }
  std::size_t queued_bytes() const noexcept { return queued_bytes_; }
  std::size_t max_bytes() const noexcept { return max_bytes_; }

  // Moves pending frames in flight, in order, up to max_write_bytes (at
  // least one frame), and appends their bytes to `out`, merging frames
  // that are adjacent in memory. Precondition: !writing().
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

  // Drops every pending frame, keeping the ones in flight (a write cannot
  // be cut short mid-frame); returns how many went. For a connection that
  // is closed for not reading: its goodbye then comes right after what is
  // in flight.
  std::size_t drop_pending() noexcept;

  void clear() noexcept;

 private:
  std::size_t max_bytes_;
  std::size_t queued_bytes_ = 0;
  std::uint64_t dropped_ = 0;
  std::uint64_t dropped_total_ = 0;
  std::vector<frame_ref> pending_;  // from head_ on; compacted as head_ passes half
  std::size_t head_ = 0;
  std::vector<frame_ref> in_flight_;
};

}  // namespace switchyard::broker
