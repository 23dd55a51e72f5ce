#pragma once
// Raw access to a sequence log's stored values, for tests and fuzzing only:
// puts bytes into the log's LMDB databases exactly as given, bypassing the
// encoders and the record checksum, as damage (or a hand-made log) would
// leave them, so that the log's own read paths (read, info, list, verify,
// trim) can be run on them in a real LMDB environment that stays open.
// Nothing of the broker uses this. The layout of each value is in
// storage/sequence_log.hpp ("Layout") and docs/storage.md ("On disk").

#include "storage/sequence_log.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <system_error>

namespace switchyard::storage {

// The log's four LMDB databases (keys and values: "Layout" in
// storage/sequence_log.hpp).
enum class raw_db {
  streams,
  records,
  meta,
  retention,
};

struct raw_entry {
  raw_db db = raw_db::records;
  std::span<const std::byte> key;    // 1..511 bytes (LMDB's key limit)
  std::span<const std::byte> value;  // any size LMDB takes
};

// In one write transaction: empties the streams, records and retention
// databases (meta keeps the format stamp and the last stream id unless
// `entries` replace them), then puts every entry verbatim, in order (a
// later entry with the same key replaces an earlier one). Nothing is
// checked or encoded. The log's cached last stream id is not updated from
// a "meta" entry: append to a rewritten log only if that does not matter.
// Writer thread (as append). Errors: invalid_argument (a read-only log,
// or a key LMDB refuses: empty or longer than 511 bytes), storage_full,
// io_error, other errors of LMDB's put.
std::error_code rewrite_raw(sequence_log& log, std::span<const raw_entry> entries);

// The checksum (bytes 0..8 of a record value, little-endian) that a record
// value stored under sequence `seq` must carry to pass the log's check:
// xxHash3-64 of value[16..end), seeded from `seq` and the timestamp in
// value[8..16]. Its own bytes 0..8 are not read. A value shorter than the
// 24-byte record header has no checksum: 0.
std::uint64_t record_checksum(std::uint64_t seq, std::span<const std::byte> value);

}  // namespace switchyard::storage
