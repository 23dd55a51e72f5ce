#pragma once
// What can go wrong between a device and switchyard-gateway, written once:
// each code has its name on the wire (the "code" of an error message), the
// WebSocket close code it ends the socket with (0: the socket stays, the
// device gets an error message), and its meaning. docs/websocket.md's table
// is generated from the same rows (device_errc_markdown(); a test compares).

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <system_error>

namespace switchyard::edge {

enum class device_errc {
  bad_message = 1,    // not a JSON object, an unknown "t", a field of the wrong type
  unauthorized,       // the token is missing, malformed, badly signed, or names no user
  token_expired,      // the token's exp has passed (or its nbf is still ahead)
  forbidden,          // the token does not allow this channel
  hello_timeout,      // no hello within --hello-timeout-ms of the upgrade
  hello_required,     // a message before the hello (or a second hello)
  too_large,          // a message over --max-message-bytes
  rate_limited,       // more than --max-messages-per-s (after the burst)
  slow_consumer,      // more than --max-pending-bytes waiting to be written (--slow-consumer disconnect)
  heartbeat_timeout,  // nothing received for --dead-after-ms
  unavailable,        // the broker cannot be reached just now: retry later
  going_away,         // the gateway drains or stops: reconnect (elsewhere) after the hint
  too_many_sockets,   // the gateway holds --max-sockets already (refused at the upgrade)
  not_found,          // an unsubscribe of a channel not subscribed, an ack of an offer not held
  internal,           // a bug of the gateway's
};

struct device_error_row {
  device_errc code;
  std::string_view name;     // on the wire: {"t":"error","code":name} and the close reason's first word
  std::uint16_t close_code;  // the WebSocket close code; 0: not closing, an error message instead
  bool retry;                // a reconnect may succeed as is (the client library reconnects)
  std::string_view meaning;  // docs/websocket.md
};

// Every code, in enum order.
std::span<const device_error_row> device_errors() noexcept;
const device_error_row& row_of(device_errc e) noexcept;

const std::error_category& device_category() noexcept;
inline std::error_code make_error_code(device_errc e) noexcept { return {static_cast<int>(e), device_category()}; }

// The table of docs/websocket.md, "Errors and close codes" (Markdown).
std::string device_errc_markdown();

}  // namespace switchyard::edge

template <>
struct std::is_error_code_enum<switchyard::edge::device_errc> : std::true_type {};
