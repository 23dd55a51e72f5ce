#pragma once
// Protocol error codes. The values are the wire values of
// `switchyard.protocol.wire.ErrorCode` (switchyard.fbs); a static_assert in errc.cpp
// keeps the two in step.

#include <cstdint>
#include <string_view>
#include <system_error>

namespace switchyard::protocol {

enum class errc : std::uint16_t {
  bad_request = 1,
  malformed_frame = 2,
  frame_too_large = 3,
  unsupported_version = 4,
  unsupported_message = 5,
  hello_required = 6,
  hello_timeout = 7,
  heartbeat_timeout = 8,
  too_many_connections = 9,
  unauthorized = 10,
  rate_limited = 11,
  draining = 12,
  shutting_down = 13,
  slow_consumer = 14,
  not_found = 15,
  no_route = 16,
  trimmed = 17,
  storage_full = 18,
  internal = 19,
  inbox_taken = 20,
  corrupted = 21,
  limit_exceeded = 22,
  forbidden = 23,
  unavailable = 24,
  outcome_unknown = 25,
};

// The highest code this build knows; codes above it (from a newer peer) are
// reported as-is with a generic message.
inline constexpr errc last_known_errc = errc::outcome_unknown;

const std::error_category& protocol_category() noexcept;

inline std::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), protocol_category()}; }

// Short stable name of a code ("frame_too_large"), for logs and JSON.
std::string_view errc_name(errc e) noexcept;

}  // namespace switchyard::protocol

template <>
struct std::is_error_code_enum<switchyard::protocol::errc> : std::true_type {};
