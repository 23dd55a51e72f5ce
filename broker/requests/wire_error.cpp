#include "broker/requests/wire_error.hpp"

#include "storage/errc.hpp"

namespace switchyard::broker {

protocol::errc wire_code(std::error_code ec) noexcept {
  using protocol::errc;
  if (ec.category() == protocol::protocol_category()) {
    const int v = ec.value();
    if (v >= 1 && v <= static_cast<int>(protocol::last_known_errc)) return static_cast<errc>(v);
    return errc::internal;
  }
  if (ec.category() == storage::storage_category()) {
    switch (static_cast<storage::errc>(ec.value())) {
      case storage::errc::not_found:
        return errc::not_found;
      case storage::errc::trimmed:
        return errc::trimmed;
      case storage::errc::storage_full:
        return errc::storage_full;
      case storage::errc::corrupted:
        return errc::corrupted;
      case storage::errc::invalid_argument:
        return errc::bad_request;
      default:
        return errc::internal;
    }
  }
  return errc::internal;
}

}  // namespace switchyard::broker
