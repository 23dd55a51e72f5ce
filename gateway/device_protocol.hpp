#pragma once
// The messages between a device and switchyard-gateway: one JSON object
// per WebSocket text frame, its kind in "t" (docs/websocket.md is the
// reference; a test checks that every kind here is documented there).
// Parsing is strict about what it reads (types, sizes) and ignores fields
// it does not know, so a newer device works with an older gateway. Pure
// functions: no I/O, no state.

#include "gateway/device_errc.hpp"

#include <cstddef>
#include <cstdint>
#include <expected>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace switchyard::edge {

// Limits on what a device's message may hold.
inline constexpr std::size_t max_token_bytes = 8192;
inline constexpr std::size_t max_app_bytes = 64;
inline constexpr std::size_t max_caps = 16;
inline constexpr std::size_t max_cap_bytes = 32;
inline constexpr std::size_t max_resume_streams = 64;
inline constexpr std::size_t max_channel_bytes = 255;

struct resume_point {
  std::uint64_t seq = 0;  // the last one the device received
  std::uint64_t epoch = 0;
};

// ---- device -> gateway

struct hello_message {
  std::string token;                                        // the JWT
  std::string app;                                          // "web/1.4.2": logged, counted per version
  std::vector<std::string> caps;                            // capabilities the device declares ("offers", ...)
  std::map<std::string, resume_point, std::less<>> resume;  // per durable stream
};
struct heartbeat_message {};
struct subscribe_message {
  std::uint64_t id = 0;  // echoed in the answer (0: none asked)
  std::string channel;
};
struct unsubscribe_message {
  std::uint64_t id = 0;
  std::string channel;
};
struct ack_message {
  std::uint64_t offer = 0;
};
using device_message =
    std::variant<hello_message, heartbeat_message, subscribe_message, unsubscribe_message, ack_message>;

struct parse_failure {
  device_errc code = device_errc::bad_message;
  std::string reason;  // what is wrong, for the close reason (at most 100 bytes)
};

// One text frame from a device. Errors: bad_message with the reason.
std::expected<device_message, parse_failure> parse_device_message(std::string_view text);

// ---- gateway -> device (each returns the frame's text)

struct welcome_fields {
  std::string_view user;
  std::string_view session;
  std::uint64_t ping_ms = 0;
  std::uint64_t dead_ms = 0;
  std::span<const std::string> caps;                    // the capabilities granted
  std::span<const std::pair<std::string, bool>> flags;  // the gateway's flags, on or off for this device
};
std::string welcome_text(const welcome_fields& w);

struct delivery_fields {
  std::span<const std::byte> payload;
  std::string_view stream;  // empty: not durable
  std::uint64_t seq = 0;
  std::uint64_t epoch = 0;
  bool replayed = false;
  std::uint64_t offer = 0;   // 0: not an offer
  std::uint64_t ttl_ms = 0;  // an offer's (or an expiring message's) time left; 0: none
};
// "msg" (or "offer" with an offer id).
std::string delivery_text(const delivery_fields& d);
std::string publication_text(std::string_view channel, std::span<const std::byte> payload);
std::string withdrawn_text(std::uint64_t offer);
std::string heartbeat_text();
std::string ok_text(std::uint64_t id);
std::string error_text(std::uint64_t id, device_errc code, std::string_view message);
std::string dropped_text(std::uint64_t count);
// A resume position that could not be honoured: `reason` is "trimmed",
// "epoch_changed", "stream_gone" or "limit"; `first_seq` and `epoch` say
// where the log stands (0 when the stream is gone).
std::string trimmed_text(std::string_view stream, std::string_view reason, std::uint64_t first_seq,
                         std::uint64_t epoch);

// The close reason of a socket closed for `code`: "<name>" or
// "<name>: <detail>", cut to the 123 bytes a close frame allows (at a
// UTF-8 boundary).
std::string close_reason(device_errc code, std::string_view detail = {});

}  // namespace switchyard::edge
