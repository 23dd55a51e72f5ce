#pragma once
// Error codes of the Switchyard client library.
//
// Codes 1..99 are reported by the server and have the same values as the
// protocol's error codes (docs/protocol.md); codes from 100 are detected by
// the library itself. Compare with `ec == switchyard::errc::no_route`.
// Connection failures from the operating system (refused, reset, ...) come
// through as std::system_category / generic codes.

#include <string_view>
#include <system_error>

namespace switchyard {

enum class errc {
  // Reported by the server.
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
  forbidden = 23,        // this principal may not do that (docs/security.md); the connection stays
  unavailable = 24,      // cluster mode: no owner in reach for this now (docs/cluster.md); retry
  outcome_unknown = 25,  // cluster mode: forwarded, no answer in time; it may or may not have taken effect

  // Detected by the library.
  not_connected = 100,       // the connection is closed (or was never open)
  timeout = 101,             // no answer within the options' timeout
  invalid_channel = 102,     // not a valid channel name (see docs/protocol.md)
  invalid_pattern = 103,     // not a valid subscription pattern
  payload_too_large = 104,   // the frame would exceed the server's max_frame
  would_deadlock = 105,      // a blocking call made on the client's event-loop thread
  protocol_violation = 106,  // the server sent something this library cannot accept
  not_supported = 107,       // the server did not grant the capability this needs
  invalid_position = 108,    // a stream position to resume from has a sequence but no epoch
  connection_lost = 109,     // a request in flight when the connection dropped (its outcome is unknown)
  buffer_full = 110,         // reconnecting, and reconnect_options::buffer_bytes of publishes are held already; or
                             // the send buffer is full and client_options::wait_for_space is false
  reconnect_failed = 111,    // the client gave up reconnecting (max_attempts / max_downtime): it is closed
  tls_failed =
      112,  // TLS set-up or handshake failed (certificate, CA, name, or a broker without TLS); the log says why
  not_a_broker = 113,  // the address answered, but not with a Switchyard frame (another service, or the wrong port)
};

const std::error_category& client_category() noexcept;

// Short stable name of a code, for logs and JSON ("no_route", "timeout"):
// a server-reported code (1..99) has the protocol's name for it
// (docs/protocol.md), a library code the name of its enumerator. A value
// this build does not know is "unknown".
std::string_view error_name(errc e) noexcept;

inline std::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), client_category()}; }

}  // namespace switchyard

template <>
struct std::is_error_code_enum<switchyard::errc> : std::true_type {};
