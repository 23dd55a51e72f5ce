#include "storage/errc.hpp"

#include <lmdb.h>

#include <cerrno>
#include <string>

namespace switchyard::storage {
namespace {

class category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "switchyard.storage"; }
  std::string message(int value) const override {
    switch (static_cast<errc>(value)) {
      case errc::not_found:
        return "no such stream";
      case errc::trimmed:
        return "position trimmed from the log";
      case errc::storage_full:
        return "storage full";
      case errc::corrupted:
        return "log corrupted (checksum mismatch or damaged database)";
      case errc::invalid_argument:
        return "invalid argument";
      case errc::io_error:
        return "storage I/O error";
      case errc::internal:
        return "unexpected storage condition";
      case errc::unsupported_format:
        return "the log on disk is in an unsupported format version";
      case errc::locked:
        return "the log is in use by another process";
    }
    return "storage error " + std::to_string(value);
  }
};

}  // namespace

const std::error_category& storage_category() noexcept {
  static const category instance;
  return instance;
}

std::error_code from_lmdb(int rc) noexcept {
  switch (rc) {
    case MDB_SUCCESS:
      return {};
    case MDB_NOTFOUND:
      return errc::not_found;
    case MDB_MAP_FULL:
    case ENOSPC:
    case EDQUOT:
      return errc::storage_full;
    case MDB_CORRUPTED:
    case MDB_PAGE_NOTFOUND:
    case MDB_INVALID:
    case MDB_VERSION_MISMATCH:
      return errc::corrupted;
    case MDB_BAD_VALSIZE:
    case EINVAL:
      return errc::invalid_argument;
    case EIO:
      return errc::io_error;
    default:
      // Other errno values keep their system meaning; other MDB_* codes
      // (readers full, txn full, map resized by another process) are ours to avoid.
      if (rc > 0) return {rc, std::system_category()};
      return errc::internal;
  }
}

}  // namespace switchyard::storage
