#pragma once
// The one mapping from the broker's internal errors to wire error codes
// (docs/protocol.md §8). Every error a client sees goes through it:
//
//   protocol::errc (protocol_category)   the same code
//   storage::errc  (storage_category)    not_found -> not_found
//                                        trimmed -> trimmed
//                                        storage_full -> storage_full
//                                        corrupted -> corrupted
//                                        invalid_argument -> bad_request
//                                        anything else -> internal
//   any other category                   internal

#include "protocol/errc.hpp"

#include <system_error>

namespace switchyard::broker {

protocol::errc wire_code(std::error_code ec) noexcept;

}  // namespace switchyard::broker
