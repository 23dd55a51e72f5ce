#pragma once
// Reference-counted storage for encoded outbound frames.
//
// A delivery is encoded once, appended to the current chunk, and every
// subscriber's outbound queue holds a frame_ref to the same bytes. Frames are
// appended back to back, so consecutive deliveries that a connection receives
// are usually adjacent in memory and go out as one iovec. Chunks are recycled
// through small free lists, so the steady state allocates nothing.
//
// Frames only one connection gets (its answers, a delivery into its inbox)
// go through that connection's frame_lane instead: they sit back to back in
// the lane's chunk however they interleave in time with other connections'
// frames, so a gateway's queue goes out as one iovec, not one per frame.
//
// Single-threaded: the arena, its lanes and every frame_ref into it belong
// to the broker's event-loop thread (reference counts are not atomic).

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace switchyard::broker {

class frame_arena;

namespace detail {
struct chunk {
  frame_arena* owner;
  std::uint32_t refs;
  std::uint32_t capacity;
  std::uint32_t used;
  bool pooled;  // standard-size chunk that returns to the free list
  alignas(8) std::uint8_t data[];
};
}  // namespace detail

// A counted reference to one encoded frame. Copying adds a reference; the
// last reference returns the chunk to its arena. Cheap to move.
class frame_ref {
 public:
  frame_ref() = default;
  frame_ref(const frame_ref& o) noexcept : c_(o.c_), off_(o.off_), len_(o.len_) {
    if (c_) ++c_->refs;
  }
  frame_ref(frame_ref&& o) noexcept : c_(o.c_), off_(o.off_), len_(o.len_) { o.c_ = nullptr; }
  frame_ref& operator=(frame_ref o) noexcept {
    std::swap(c_, o.c_);
    std::swap(off_, o.off_);
    std::swap(len_, o.len_);
    return *this;
  }
  ~frame_ref() { reset(); }

  void reset() noexcept;
  explicit operator bool() const noexcept { return c_ != nullptr; }
  const std::uint8_t* data() const noexcept { return c_->data + off_; }
  std::size_t size() const noexcept { return len_; }
  std::span<const std::uint8_t> bytes() const noexcept { return {data(), len_}; }
  // True when `next` starts right where this frame ends (same chunk).
  bool adjacent(const frame_ref& next) const noexcept { return c_ == next.c_ && off_ + len_ == next.off_; }

 private:
  friend class frame_arena;
  frame_ref(detail::chunk* c, std::uint32_t off, std::uint32_t len) noexcept : c_(c), off_(off), len_(len) {
    ++c_->refs;
  }
  detail::chunk* c_ = nullptr;
  std::uint32_t off_ = 0;
  std::uint32_t len_ = 0;
};

// Where one connection's own frames go (frame_arena::store(bytes, lane)).
// Holds a reference to its current chunk until reset(): the owner resets it
// whenever its queue drains, so an idle connection holds no chunk. Must be
// reset or destroyed before its arena.
class frame_lane {
 public:
  frame_lane() = default;
  frame_lane(const frame_lane&) = delete;
  frame_lane& operator=(const frame_lane&) = delete;
  ~frame_lane() { reset(); }
  // Drops the hold on the current chunk (it returns to the arena once no
  // frame_ref points into it). Later frames start a fresh chunk.
  void reset() noexcept;

 private:
  friend class frame_arena;
  detail::chunk* current_ = nullptr;
};

class frame_arena {
 public:
  // Shared frames fill big chunks. A lane's chunk holds a few loop turns of
  // one connection's small frames, and thousands of lanes may hold one
  // each: small, so a lane costs at most 8 KiB beyond what it queued.
  static constexpr std::size_t chunk_size = 256 * 1024;
  static constexpr std::size_t lane_chunk_size = 8 * 1024;
  static constexpr std::size_t max_free_chunks = 32;         // 8 MiB
  static constexpr std::size_t max_free_lane_chunks = 1024;  // 8 MiB

  frame_arena() = default;
  frame_arena(const frame_arena&) = delete;
  frame_arena& operator=(const frame_arena&) = delete;
  // Precondition: no frame_ref into this arena is alive.
  ~frame_arena();

  // Copies `bytes` (one encoded frame, size a multiple of 8) into the arena
  // and returns the first reference to it.
  frame_ref store(std::span<const std::uint8_t> bytes) { return store(bytes, shared_, chunk_size); }
  // The same, after the frames stored earlier through `lane` (adjacent to
  // the last one while its chunk has room). A frame over a quarter of a
  // lane chunk goes to the shared chunks instead: big enough to be its own
  // iovec. `lane` must belong to this arena's thread; it is borrowed for
  // the call only.
  frame_ref store(std::span<const std::uint8_t> bytes, frame_lane& lane) {
    return bytes.size() > lane_chunk_size / 4 ? store(bytes) : store(bytes, lane, lane_chunk_size);
  }

  // Chunks currently allocated (live or cached), for tests and metrics.
  std::size_t chunks_allocated() const noexcept { return allocated_; }

 private:
  friend class frame_ref;
  friend class frame_lane;
  // Free chunks of one size, most recently freed last.
  struct pool {
    std::vector<detail::chunk*> free;
    std::size_t max_free;
  };
  pool& pool_for(std::size_t capacity) noexcept { return capacity == lane_chunk_size ? lane_pool_ : shared_pool_; }
  frame_ref store(std::span<const std::uint8_t> bytes, frame_lane& lane, std::size_t size);
  detail::chunk* new_chunk(std::size_t capacity, bool pooled);
  void release(detail::chunk* c) noexcept;

  frame_lane shared_;
  pool shared_pool_{{}, max_free_chunks};     // chunk_size chunks
  pool lane_pool_{{}, max_free_lane_chunks};  // lane_chunk_size chunks
  std::size_t allocated_ = 0;
};

inline void frame_ref::reset() noexcept {
  if (c_ && --c_->refs == 0) c_->owner->release(c_);
  c_ = nullptr;
}

inline void frame_lane::reset() noexcept {
  if (current_ && --current_->refs == 0) current_->owner->release(current_);
  current_ = nullptr;
}

}  // namespace switchyard::broker
