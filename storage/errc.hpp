#pragma once
// Errors of the sequence log. LMDB's return codes are translated into these
// in exactly one place, from_lmdb().

#include <system_error>

namespace switchyard::storage {

enum class errc {
  not_found = 1,       // no such stream
  trimmed,             // the position is below the first retained sequence
  storage_full,        // the map reached its configured maximum, or the disk is full
  corrupted,           // a record failed its checksum, or LMDB reports corruption
  invalid_argument,    // empty stream name, oversized record or destination, ...
  io_error,            // the operating system failed a read, write or sync
  internal,            // an LMDB condition this code does not expect
  unsupported_format,  // the log on disk is in another format version (log_format_version)
  locked,              // another process has the log open (its lock file is held)
};

const std::error_category& storage_category() noexcept;

inline std::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), storage_category()}; }

// The single translation of an LMDB return code (MDB_* or errno).
// MDB_SUCCESS gives an empty error_code.
std::error_code from_lmdb(int rc) noexcept;

}  // namespace switchyard::storage

template <>
struct std::is_error_code_enum<switchyard::storage::errc> : std::true_type {};
