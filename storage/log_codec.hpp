#pragma once
// The sequence log's on-disk codec: record keys, record values (header and
// checksum), stream metadata and retention values, byte for byte as the
// "Layout" comment of storage/sequence_log.hpp describes them (the one
// description of the four databases and of the "meta" keys; docs/storage.md,
// "On disk", for operators). Private to storage.
//
// Pure functions over bytes the caller owns: nothing here calls LMDB, does
// I/O or keeps state, so any thread may call them. They check sizes only
// where they say so; whether a value may be read at all (inside the map and
// the data file) is storage/damage_check.hpp's business, done before a byte
// of it reaches these functions.

#include "storage/errc.hpp"
#include "storage/sequence_log.hpp"

#include <lmdb.h>
#include <xxhash.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <expected>
#include <string_view>
#include <system_error>

namespace switchyard::storage::log_codec {

// Record value: checksum (u64), timestamp (u64), destination length (u32),
// reserved (u32, 0), destination, payload; all little-endian.
inline constexpr std::size_t record_header = 24;
inline constexpr std::size_t checksummed_from = 16;  // the checksum covers value[16, end)
// Record key: big-endian stream id, big-endian sequence.
inline constexpr std::size_t record_key_size = 16;
// A "streams" value: seven little-endian u64 (stream_meta below).
inline constexpr std::size_t meta_size = 7 * 8;
// A "retention" value: max records, max age (ms), max bytes; readers take
// these first bytes only.
inline constexpr std::size_t retention_size = 3 * 8;
// The keys of the "meta" database (their values: storage/sequence_log.hpp).
inline constexpr std::string_view last_stream_key = "last_stream_id";
inline constexpr std::string_view format_key = "format_version";

static_assert(max_destination_bytes <= UINT32_MAX, "the destination length is a u32 on disk");

// Little-endian integers of the on-disk values, whatever the host. `p`
// points to sizeof(T) bytes the caller owns.
template <class T>
void put_le(std::byte* p, T v) {
  for (std::size_t i = 0; i < sizeof v; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
template <class T>
T get_le(const std::byte* p) {
  T v = 0;
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(&v, p, sizeof v);  // one load, not one per byte
    return v;
  }
  for (std::size_t i = 0; i < sizeof v; ++i) v |= static_cast<T>(static_cast<T>(p[i]) << (8 * i));
  return v;
}
// Big-endian u64 (record keys sort by them).
inline void put_be64(std::byte* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>(v >> (56 - 8 * i));
}
inline std::uint64_t get_be64(const std::byte* p) {
  std::uint64_t v = 0;
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(&v, p, sizeof v);
    return std::byteswap(v);
  }
  for (int i = 0; i < 8; ++i) v = v << 8 | static_cast<std::uint64_t>(p[i]);
  return v;
}

// ---- The databases ----

// The log's LMDB databases, by the names they have in data.mdb.
inline constexpr const char* streams_db = "streams";
inline constexpr const char* records_db = "records";
inline constexpr const char* meta_db = "meta";
inline constexpr const char* retention_db = "retention";

// Their handles, as sequence_log::open() opened them: set once at open,
// then read-only (any thread) for the environment's lifetime.
struct dbs {
  MDB_dbi streams = 0, records = 0, metadata = 0, own_retention = 0;
  bool has_retention = true;  // false: a read-only open of a log from before "retention"
};

// ---- Record keys ----

// A record's key, built in place (16 bytes, no allocation). val() points
// into the object: valid while it lives and is not moved.
struct record_key {
  std::byte bytes[record_key_size];
  record_key(std::uint64_t stream, std::uint64_t seq) {
    put_be64(bytes, stream);
    put_be64(bytes + 8, seq);
  }
  MDB_val val() { return {sizeof bytes, bytes}; }
};

// The stream id and the sequence of a key of record_key_size bytes at `k`.
inline std::uint64_t key_stream(const std::byte* k) { return get_be64(k); }
inline std::uint64_t key_seq(const std::byte* k) { return get_be64(k + 8); }

// ---- Record values ----

// The checksum of a record value of `size` bytes (at least record_header)
// at `value`: hashes everything from checksummed_from on (destination
// length, reserved, destination, payload) and binds it to the sequence and
// timestamp through the seed, so a flipped byte anywhere in the value fails
// the check. Inline: every record read and verified computes it.
inline std::uint64_t checksum(std::uint64_t seq, std::uint64_t timestamp, const std::byte* value, std::size_t size) {
  return XXH3_64bits_withSeed(value + checksummed_from, size - checksummed_from,
                              seq ^ (timestamp * 0x9E3779B97F4A7C15ull));
}

// The header fields of a record value at `v` (at least record_header bytes).
inline std::uint64_t stored_checksum(const std::byte* v) { return get_le<std::uint64_t>(v); }
inline std::uint64_t record_timestamp(const std::byte* v) { return get_le<std::uint64_t>(v + 8); }
inline std::uint32_t destination_size(const std::byte* v) { return get_le<std::uint32_t>(v + 16); }
// Whether the header at `v` is sound past its checksum: the destination fits
// the `body` bytes after the header, and the reserved field is 0.
inline bool destination_fits(const std::byte* v, std::size_t body) {
  return destination_size(v) <= body && get_le<std::uint32_t>(v + 20) == 0;
}
// Whether the value of `size` bytes at `v`, stored under `seq`, carries the
// checksum it must.
inline bool checksum_matches(std::uint64_t seq, const std::byte* v, std::size_t size) {
  return stored_checksum(v) == checksum(seq, record_timestamp(v), v, size);
}

// Writes the header fields after the checksum (timestamp, destination
// length, reserved) into the value at `v`; seal_record() writes the
// checksum once destination and payload are in place.
inline void write_record_head(std::byte* v, std::uint64_t timestamp, std::uint32_t destination) {
  put_le<std::uint64_t>(v + 8, timestamp);
  put_le<std::uint32_t>(v + 16, destination);
  put_le<std::uint32_t>(v + 20, 0);
}
inline void seal_record(std::byte* v, std::size_t size, std::uint64_t seq, std::uint64_t timestamp) {
  put_le<std::uint64_t>(v, checksum(seq, timestamp, v, size));
}

// ---- Stream metadata ("streams" values) ----

struct stream_meta {
  std::uint64_t id = 0, epoch = 0, first = 1, last = 0, records = 0, bytes = 0, created = 0;

  // Writes meta_size bytes to `p`.
  void encode(std::byte* p) const;
  // Decodes a value as LMDB handed it out (its bytes readable: checked by
  // the caller). Errors: corrupted (not meta_size bytes). Nothing else is
  // checked here (storage/damage_check.hpp checks consistency).
  static std::expected<stream_meta, std::error_code> decode(const MDB_val& v);
  // As info() reports it, without the stream's own retention.
  stream_info info(std::string_view name) const;
};

// ---- Retention values ("retention" values) ----

// Writes retention_size bytes to `p` (max_age must not be negative).
void encode_retention(const retention& limits, std::byte* p);
// A "retention" value (its bytes readable: checked by the caller); later
// versions may append fields after the first retention_size bytes. Errors:
// corrupted (shorter, or a max age past what milliseconds hold).
std::expected<retention, std::error_code> decode_retention(const MDB_val& v);

}  // namespace switchyard::storage::log_codec
