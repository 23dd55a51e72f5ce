#pragma once
// Reference-counted storage for encoded outbound frames.
//
// A delivery is encoded once, appended to the current chunk, and every
// subscriber's outbound queue holds a frame_ref to the same bytes. Frames are
// appended back to back, so consecutive deliveries that a connection receives
// are usually adjacent in memory and go out as one iovec. Chunks are recycled
// through a small free list, so the steady state allocates nothing.
//
// Single-threaded: the arena and every frame_ref into it belong to the
// broker's event-loop thread (reference counts are not atomic).

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
  bool adjacent(const frame_ref& next) const noexcept {
    return c_ == next.c_ && off_ + len_ == next.off_;
  }

 private:
  friend class frame_arena;
  frame_ref(detail::chunk* c, std::uint32_t off, std::uint32_t len) noexcept
      : c_(c), off_(off), len_(len) {
    ++c_->refs;
  }
  detail::chunk* c_ = nullptr;
  std::uint32_t off_ = 0;
  std::uint32_t len_ = 0;
};

class frame_arena {
 public:
  static constexpr std::size_t chunk_size = 256 * 1024;
  static constexpr std::size_t max_free_chunks = 32;

  frame_arena() = default;
  frame_arena(const frame_arena&) = delete;
  frame_arena& operator=(const frame_arena&) = delete;
  // Precondition: no frame_ref into this arena is alive.
  ~frame_arena();

  // Copies `bytes` (one encoded frame, size a multiple of 8) into the arena
  // and returns the first reference to it.
  frame_ref store(std::span<const std::uint8_t> bytes);

  // Chunks currently allocated (live or cached), for tests and metrics.
  std::size_t chunks_allocated() const noexcept { return allocated_; }

 private:
  friend class frame_ref;
  detail::chunk* new_chunk(std::size_t capacity, bool pooled);
  void release(detail::chunk* c) noexcept;

  detail::chunk* current_ = nullptr;  // holds one reference while current
  std::vector<detail::chunk*> free_;
  std::size_t allocated_ = 0;
};

inline void frame_ref::reset() noexcept {
  if (c_ && --c_->refs == 0) c_->owner->release(c_);
  c_ = nullptr;
}

}  // namespace switchyard::broker
