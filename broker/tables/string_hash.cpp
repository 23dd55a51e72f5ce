#include "broker/tables/string_hash.hpp"

#include <cstdint>
#include <random>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace switchyard::broker {

namespace {

// One seed per process, so that nobody can precompute keys that collide
// (route keys come from clients: a run of crafted collisions would make
// every lookup in the registry probe long). Nothing depends on the order
// it gives: lists are sorted before they are returned.
std::uint64_t process_seed() {
  std::random_device rd;
  return (std::uint64_t{rd()} << 32) | rd();
}

}  // namespace

std::size_t string_hash::operator()(std::string_view s) const noexcept {
  static const std::uint64_t seed = process_seed();
  return static_cast<std::size_t>(XXH3_64bits_withSeed(s.data(), s.size(), seed));
}

}  // namespace switchyard::broker
