#pragma once
// Test payloads: deterministic patterns, and the bytes of a text.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace switchyard::test {

// `size` pseudo-random bytes determined by `seed` (xorshift64): distinct
// seeds give payloads that differ almost everywhere.
inline std::vector<std::byte> pattern(std::size_t size, std::uint64_t seed) {
  std::vector<std::byte> out(size);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  if (x == 0) x = 1;
  for (auto& b : out) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<std::byte>(x >> 24);
  }
  return out;
}

// The bytes of `s`, borrowed (valid while `s` is): as the client library
// takes payloads, and as the wire encoder does.
inline std::span<const std::byte> bytes_of(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }
inline std::span<const std::uint8_t> wire_bytes_of(std::string_view s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

}  // namespace switchyard::test
