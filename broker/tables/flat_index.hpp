#pragma once
// An index of caller-owned nodes by their string key, for lookups that miss
// the cache: the routing registry's, one per send to a user.
//
// Open addressing with linear probing over one array of 8-byte slots, at
// most half full. A slot holds the node's address in its low 48 bits and 16
// bits of the key's hash above them, so a lookup reads one slot line and
// touches a node only when those bits match: two cache misses per hit,
// where std::unordered_map takes three (bucket, the node before, the node).
// Erasing shifts the following run back (no tombstones), so probe lengths
// depend only on what is in the index. The array halves when it falls below
// 1/8 full, so a mass expiry gives its memory back.
//
// Not owning: insert() borrows the node until it is erased. Single-threaded.
// Precondition (checked in debug builds): node addresses fit in 48 bits, as
// user-space addresses do on x86-64 and arm64 Linux (not with arm64 memory
// tagging or 5-level paging's high addresses, which nobody hands out by
// default).

#include "broker/tables/string_hash.hpp"

#include <bit>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <new>
#include <string>
#include <string_view>
#include <vector>

namespace switchyard::broker {

template <class Node, std::string Node::*Key, class Hash = string_hash>
class flat_index {
 public:
  flat_index() = default;
  flat_index(const flat_index&) = delete;
  flat_index& operator=(const flat_index&) = delete;

  std::size_t size() const noexcept { return size_; }
  std::size_t capacity() const noexcept { return slots_.size(); }

  // The node whose key equals `key`, or null.
  Node* find(std::string_view key) const noexcept {
    if (size_ == 0) return nullptr;
    const std::size_t h = hash_(key);
    const std::uint64_t tag = tag_of(h);
    for (std::size_t i = h & mask_;; i = (i + 1) & mask_) {
      const std::uint64_t s = slots_[i];
      if (s == 0) return nullptr;
      if ((s & tag_mask) == tag) {
        Node* n = node_of(s);
        if (n->*Key == key) return n;
      }
    }
  }

  // Hints for a caller that knows which keys it will look up next: start
  // loading the key's slot line, and (once that line is likely loaded) the
  // node its first matching slot points to. Never required for
  // correctness; cheap when wrong.
  void prefetch_slot(std::string_view key) const noexcept {
    if (size_ != 0) __builtin_prefetch(&slots_[hash_(key) & mask_]);
  }
  void prefetch_node(std::string_view key) const noexcept {
    if (size_ == 0) return;
    const std::size_t h = hash_(key);
    const std::uint64_t s = slots_[h & mask_];
    if (s != 0 && (s & tag_mask) == tag_of(h)) __builtin_prefetch(node_of(s));
  }

  // Adds `node`. Precondition: no node with its key is in the index.
  void insert(Node* node) {
    if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.empty() ? min_capacity : slots_.size() * 2);
    place(node, hash_(std::string_view(node->*Key)));
    ++size_;
  }

  // Removes `node`. Precondition: it is in the index.
  void erase(const Node* node) noexcept {
    std::size_t i = hash_(std::string_view(node->*Key)) & mask_;
    while (node_of(slots_[i]) != node) i = (i + 1) & mask_;
    // Backward shift: move each later slot of the run into the hole unless
    // its home lies cyclically in (hole, slot], where it must stay.
    for (std::size_t j = (i + 1) & mask_;; j = (j + 1) & mask_) {
      const std::uint64_t s = slots_[j];
      if (s == 0) break;
      const std::size_t home = hash_(std::string_view(node_of(s)->*Key)) & mask_;
      if (((j - home) & mask_) >= ((j - i) & mask_)) {
        slots_[i] = s;
        i = j;
      }
    }
    slots_[i] = 0;
    --size_;
    if (slots_.size() > min_capacity && size_ * 8 < slots_.size()) {
      // Optional: without memory for the smaller array, stay as large.
      try {
        rehash(slots_.size() / 2);
      } catch (const std::bad_alloc&) {
      }
    }
  }

  // Calls f(Node&) for every node, in no particular order. f must not
  // insert or erase.
  template <class F>
  void for_each(F&& f) const {
    for (const std::uint64_t s : slots_)
      if (s != 0) f(*node_of(s));
  }

 private:
  static constexpr std::size_t min_capacity = 16;
  static constexpr unsigned tag_shift = 48;
  static constexpr std::uint64_t tag_mask = ~std::uint64_t{0} << tag_shift;
  static_assert(sizeof(void*) == 8, "flat_index packs a tag above 48-bit addresses");

  static std::uint64_t tag_of(std::size_t h) noexcept {
    // The top hash bits: the slot index uses the low ones.
    return (static_cast<std::uint64_t>(h) >> tag_shift) << tag_shift;
  }
  static Node* node_of(std::uint64_t s) noexcept { return reinterpret_cast<Node*>(s & ~tag_mask); }

  void place(Node* node, std::size_t h) noexcept {
    const auto addr = reinterpret_cast<std::uint64_t>(node);
    assert((addr & tag_mask) == 0 && addr != 0);
    std::size_t i = h & mask_;
    while (slots_[i] != 0) i = (i + 1) & mask_;
    slots_[i] = addr | tag_of(h);
  }

  void rehash(std::size_t capacity) {
    assert(std::has_single_bit(capacity) && capacity >= size_ * 2);
    std::vector<std::uint64_t> old(capacity, 0);
    old.swap(slots_);
    mask_ = capacity - 1;
    for (const std::uint64_t s : old)
      if (s != 0) place(node_of(s), hash_(std::string_view(node_of(s)->*Key)));
  }

  std::vector<std::uint64_t> slots_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
  [[no_unique_address]] Hash hash_;
};

}  // namespace switchyard::broker
