#include "broker/tables/frame_arena.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

namespace switchyard::broker {

frame_arena::~frame_arena() {
  shared_.reset();
  for (const pool* p : {&shared_pool_, &lane_pool_})
    for (auto* c : p->free) std::free(c);
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
  if (c->pooled) {
    if (auto& p = pool_for(c->capacity); p.free.size() < p.max_free) {
      c->used = 0;
      p.free.push_back(c);
      return;
    }
  }
  --allocated_;
  std::free(c);
}

frame_ref frame_arena::store(std::span<const std::uint8_t> bytes, frame_lane& lane, std::size_t size) {
  const std::size_t padded = (bytes.size() + 7) / 8 * 8;
  // Large frames get a chunk of their own so they do not waste a pooled one.
  if (padded > size / 4) {
    detail::chunk* c = new_chunk(padded, false);
    std::memcpy(c->data, bytes.data(), bytes.size());
    c->used = static_cast<std::uint32_t>(padded);
    return frame_ref(c, 0, static_cast<std::uint32_t>(bytes.size()));
  }
  detail::chunk*& current = lane.current_;
  if (!current || current->capacity - current->used < padded) {
    lane.reset();
    // Last in, first out: the chunk freed most recently is still in cache.
    if (auto& p = pool_for(size); !p.free.empty()) {
      current = p.free.back();
      p.free.pop_back();
    } else {
      current = new_chunk(size, true);
    }
    current->refs = 1;  // the lane's
  }
  const std::uint32_t off = current->used;
  std::memcpy(current->data + off, bytes.data(), bytes.size());
  current->used += static_cast<std::uint32_t>(padded);
  return frame_ref(current, off, static_cast<std::uint32_t>(bytes.size()));
}

}  // namespace switchyard::broker
