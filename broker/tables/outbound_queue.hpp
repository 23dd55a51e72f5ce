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

#include "broker/tables/frame_arena.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <utility>
#include <vector>

namespace switchyard::broker {

// What a queued delivery may carry besides its bytes (capability "offers",
// docs/protocol.md §15). The default (no deadline, no offer) costs nothing
// at write time.
struct delivery_meta {
  // Never written at or after this instant ({} = no expiry).
  std::chrono::steady_clock::time_point deadline{};
  // The offer it belongs to (0 = none): outbound_queue::cancel drops it.
  std::uint64_t offer_id = 0;
  // The frame carries time_left_ms and is this queue's own copy: the
  // writer sets the field to the time left just before writing it.
  bool refresh_time_left = false;

  bool plain() const noexcept { return deadline == std::chrono::steady_clock::time_point{} && offer_id == 0; }
};

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
  bool push_droppable(const frame_ref& f, const delivery_meta& meta) {
    if (!admit(f.size())) return false;
    push(f, meta);
    return true;
  }
  // Queues a control frame (answers, pings, errors): never dropped, so the
  // limit can be exceeded by control traffic alone. Inline: every delivery
  // of a plain frame comes through here.
  void push(frame_ref f) {
    queued_bytes_ += f.size();
    pending_.push_back(std::move(f));
  }
  // The same for a delivery that admit() let in, with what the writer must
  // know of it (a deadline, an offer id).
  void push(frame_ref f, const delivery_meta& meta);

  // The most one write takes (begin_write), unless a single frame is larger.
  static constexpr std::size_t max_write_bytes = 256 * 1024;

  bool has_pending() const noexcept { return head_ < pending_.size(); }
  bool writing() const noexcept { return !in_flight_.empty(); }
  // Frames the current write carries (begin_write to end_write).
  std::size_t frames_in_flight() const noexcept { return in_flight_.size(); }
  std::size_t queued_bytes() const noexcept { return queued_bytes_; }
  std::size_t max_bytes() const noexcept { return max_bytes_; }

  // Moves pending frames in flight, in order, up to max_write_bytes (at
  // least one frame), and appends their bytes to `out`, merging frames
  // that are adjacent in memory. Frames whose deadline is at or before
  // `now` are dropped instead (expired), as are cancelled ones; frames
  // with refresh_time_left get the time left at `now`. `out` may stay
  // empty when every frame taken was dropped. Precondition: !writing().
  void begin_write(std::vector<std::span<const std::uint8_t>>& out, std::chrono::steady_clock::time_point now = {});
  // Releases the frames in flight (the write finished).
  void end_write() noexcept;

  // Deliveries dropped since the last take_dropped().
  std::uint64_t dropped() const noexcept { return dropped_; }
  std::uint64_t take_dropped() noexcept { return std::exchange(dropped_, 0); }
  // Total dropped over the queue's life.
  std::uint64_t dropped_total() const noexcept { return dropped_total_; }

  // Drops every pending (not yet in flight) frame of offer `offer_id`;
  // returns how many. They go at the next begin_write (their bytes count
  // until then).
  std::size_t cancel(std::uint64_t offer_id) noexcept;
  // Frames begin_write dropped as expired, and as cancelled, since the
  // last take.
  std::uint64_t take_expired() noexcept { return std::exchange(expired_, 0); }
  std::uint64_t take_cancelled() noexcept { return std::exchange(cancelled_, 0); }

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
  // A pending frame with a meta that is not plain, by its place in the
  // sequence of frames ever pushed. Kept apart so that plain frames (all
  // of them, for most connections) cost what they did before: 16 bytes
  // each and no check but marked_.empty() per write.
  struct marked {
    std::uint64_t seq = 0;
    delivery_meta meta;
    bool cancelled = false;
  };
  // Moves pending_[head_, end) in flight, dropping expired and cancelled
  // frames; `end` as begin_write chose it.
  void take_marked(std::size_t end, std::chrono::steady_clock::time_point now);
  std::vector<frame_ref> pending_;  // from head_ on; compacted as head_ passes half
  std::size_t head_ = 0;
  std::uint64_t head_seq_ = 0;  // the sequence number of pending_[head_]
  std::vector<frame_ref> in_flight_;
  std::deque<marked> marked_;  // in sequence order; all pending (not in flight)
  std::uint64_t expired_ = 0;
  std::uint64_t cancelled_ = 0;
};

}  // namespace switchyard::broker
