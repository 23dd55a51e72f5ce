#pragma once
// Stored values of the sequence log, built by hand for storage::rewrite_raw
// (storage/raw_access.hpp): record keys, format-2 record values and stream
// metadata, laid out as storage/sequence_log.hpp describes them.

#include "storage/raw_access.hpp"
#include "tests/support/byte_pattern.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace switchyard::test {

using raw_bytes = std::vector<std::byte>;

template <class T>
void put_le(raw_bytes& out, T v) {
  for (std::size_t i = 0; i < sizeof v; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
}

// A records key: big-endian stream id, big-endian sequence.
inline raw_bytes record_key(std::uint64_t id, std::uint64_t seq) {
  raw_bytes k;
  for (int i = 7; i >= 0; --i) k.push_back(static_cast<std::byte>(id >> (8 * i)));
  for (int i = 7; i >= 0; --i) k.push_back(static_cast<std::byte>(seq >> (8 * i)));
  return k;
}

// A format-2 record value for sequence `seq`, with the checksum it needs
// (storage::record_checksum).
inline raw_bytes record_value(std::uint64_t seq, std::uint64_t ts, std::string_view dest, std::string_view payload) {
  raw_bytes v;
  put_le<std::uint64_t>(v, 0);
  put_le<std::uint64_t>(v, ts);
  put_le<std::uint32_t>(v, static_cast<std::uint32_t>(dest.size()));
  put_le<std::uint32_t>(v, 0);
  for (const auto b : bytes_of(dest)) v.push_back(b);
  for (const auto b : bytes_of(payload)) v.push_back(b);
  const std::uint64_t sum = storage::record_checksum(seq, v);
  for (int i = 0; i < 8; ++i) v[i] = static_cast<std::byte>(sum >> (8 * i));
  return v;
}

// A stream's metadata: id, epoch 77, first, last, records, bytes, created.
inline raw_bytes stream_meta(std::uint64_t id, std::uint64_t first, std::uint64_t last, std::uint64_t records,
                             std::uint64_t bytes, std::uint64_t created_ms = 0) {
  raw_bytes v;
  for (const std::uint64_t f : {id, std::uint64_t{77}, first, last, records, bytes, created_ms})
    put_le<std::uint64_t>(v, f);
  return v;
}

}  // namespace switchyard::test
