#include "broker/frame_arena.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

namespace switchyard::broker {

frame_arena::~frame_arena() {
  if (current_ && --current_->refs == 0) release(current_);
  for (auto* c : free_) std::free(c);
}

detail::chunk* frame_arena::new_chunk(std::size_t capacity, bool pooled) {
  void* mem = std::aligned_alloc(8, (sizeof(detail::chunk) + capacity + 7) / 8 * 8);
  if (!mem) throw std::bad_alloc();
  auto* c = static_cast<detail::chunk*>(mem);
  c->owner = this;
  c->refs = 0;
  c->capacity = static_cast<std::uint32_t>(capacity);
  c->used = 0;
  c->pooled = pooled;
  ++allocated_;
  return c;
}

void frame_arena::release(detail::chunk* c) noexcept {
  if (c->pooled && free_.size() < max_free_chunks) {
    c->used = 0;
    free_.push_back(c);
    return;
  }
  --allocated_;
  std::free(c);
}

frame_ref frame_arena::store(std::span<const std::uint8_t> bytes) {
  const std::size_t padded = (bytes.size() + 7) / 8 * 8;
  // Large frames get a chunk of their own so they do not waste a shared one.
  if (padded > chunk_size / 4) {
    detail::chunk* c = new_chunk(padded, false);
    std::memcpy(c->data, bytes.data(), bytes.size());
    c->used = static_cast<std::uint32_t>(padded);
    return frame_ref(c, 0, static_cast<std::uint32_t>(bytes.size()));
  }
  if (!current_ || current_->capacity - current_->used < padded) {
    if (current_ && --current_->refs == 0) release(current_);
    if (!free_.empty()) {
      current_ = free_.back();
      free_.pop_back();
    } else {
      current_ = new_chunk(chunk_size, true);
    }
    current_->refs = 1;
  }
  const std::uint32_t off = current_->used;
  std::memcpy(current_->data + off, bytes.data(), bytes.size());
  current_->used += static_cast<std::uint32_t>(padded);
  return frame_ref(current_, off, static_cast<std::uint32_t>(bytes.size()));
}

}  // namespace switchyard::broker
