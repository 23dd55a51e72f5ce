#pragma once
// The delivery destination the broker stores with each record of the sequence
// log (storage::append_item::destination), so that a reader of the log knows
// where the record was delivered live: the channel of a durable publish, or
// the route keys of a durable send. The storage layer treats these bytes
// as opaque; this is the only place that knows their encoding:
//
//   empty                      none (a plain Append); a lone kind byte 0
//                              decodes as none too
//   0x01, channel bytes        channel: the rest of the destination
//   0x02, count (u16 LE), then count x (length (u16 LE), key bytes)
//                              route keys, in the send's order, routed or
//                              not; empty keys allowed
//
// A channel or route-keys destination of a message sent with an expiry
// has bit 0x80 set in its kind byte, and the expiry (u32 LE, ms after the
// record's timestamp, > 0) right after it; the rest follows as above.
//
// A destination is at most storage::max_destination_bytes (64 KiB): a channel
// (at most 255 bytes) always fits; route keys may not (see
// route_keys_destination_size).

#include <cstddef>
#include <cstdint>
#include <expected>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace switchyard::broker {

enum class destination_kind : std::uint8_t { none = 0, channel = 1, route_keys = 2 };

// The kind byte's flag for "an expiry follows", and the bytes it adds.
inline constexpr std::uint8_t destination_expiry_flag = 0x80;
inline constexpr std::size_t destination_expiry_bytes = 4;

// Size of the encoded destination of a durable publish to `channel` (add
// destination_expiry_bytes for one with an expiry).
std::size_t channel_destination_size(std::string_view channel) noexcept;
// Size of the encoded destination of a durable send to `keys`; more than
// storage::max_destination_bytes when they do not fit in a destination (so that the
// log's check refuses them).
std::size_t route_keys_destination_size(std::span<const std::string_view> keys) noexcept;

// Replace `out`'s contents with the encoded destination (its capacity is kept,
// so a reused buffer allocates nothing once warm), with the expiry when
// `expires_in_ms` > 0. Precondition for route keys:
// route_keys_destination_size(keys) (+ destination_expiry_bytes) <=
// storage::max_destination_bytes.
void encode_channel_destination(std::string_view channel, std::vector<std::byte>& out, std::uint32_t expires_in_ms = 0);
void encode_route_keys_destination(std::span<const std::string_view> keys, std::vector<std::byte>& out,
                                   std::uint32_t expires_in_ms = 0);

// A decoded destination. Its views point into the destination bytes it was decoded
// from; route keys are route_keys[first_key, first_key + key_count) of the
// vector passed to decode_destination.
struct destination_view {
  destination_kind kind = destination_kind::none;
  std::string_view channel;
  std::size_t first_key = 0;
  std::size_t key_count = 0;
  // ms after the record's timestamp at which it expires (0 = never).
  std::uint32_t expires_in_ms = 0;
};

// Decodes a stored destination, appending its route keys (if any) to
// `route_keys`. Errors: std::errc::bad_message (unknown kind, truncated,
// trailing bytes, an expiry flag on "none", a zero or truncated expiry);
// `route_keys` is then left as it was.
std::expected<destination_view, std::error_code> decode_destination(std::span<const std::byte> destination,
                                                                    std::vector<std::string_view>& route_keys);

}  // namespace switchyard::broker
