#pragma once
// A connection's read buffer, kept 8-byte aligned so that frames can be
// verified in place (FlatBuffers wants aligned scalars). Shared by the
// broker's sessions and the client library. Single-threaded.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>

namespace switchyard::protocol {

struct read_buffer {
  std::unique_ptr<std::uint64_t[]> words;
  std::size_t capacity = 0;
  std::size_t begin = 0;  // first unread byte
  std::size_t end = 0;    // one past the last byte read

  std::uint8_t* data() noexcept { return reinterpret_cast<std::uint8_t*>(words.get()); }
  // The bytes read and not yet consumed.
  std::span<const std::uint8_t> unread() noexcept { return {data() + begin, end - begin}; }
  // Where the next read goes, and how much fits.
  std::uint8_t* tail() noexcept { return data() + end; }
  std::size_t space() const noexcept { return capacity - end; }

  // Reallocates to `bytes` (rounded up to 8), keeping the unread bytes at
  // the front. Precondition: bytes >= end - begin.
  void reserve(std::size_t bytes) {
    auto fresh = std::make_unique_for_overwrite<std::uint64_t[]>((bytes + 7) / 8);
    if (end > begin) std::memcpy(fresh.get(), data() + begin, end - begin);
    end -= begin;
    begin = 0;
    words = std::move(fresh);
    capacity = (bytes + 7) / 8 * 8;
  }
  // Makes room for at least `needed` more bytes (at least 4 KiB), moving
  // the unread tail to the (aligned) front when that is enough, else
  // doubling.
  void make_room(std::size_t needed) {
    if (begin == end) begin = end = 0;
    const std::size_t want = std::max<std::size_t>(needed, 4096);
    if (capacity - begin >= want && capacity > end) return;
    if (capacity >= want && begin > 0) {
      std::memmove(data(), data() + begin, end - begin);
      end -= begin;
      begin = 0;
      if (capacity > end) return;
    }
    reserve(std::max(want, capacity * 2));
  }
};

}  // namespace switchyard::protocol
