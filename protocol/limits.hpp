#pragma once
// Protocol constants shared by broker, client library, admin CLI and bench:
// the version, the capability names and the default limits. docs/protocol.md
// documents each of them; change both together.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace switchyard::protocol {

inline constexpr std::uint16_t protocol_major = 1;
inline constexpr std::uint16_t protocol_minor = 0;

// Frame = 4-byte little-endian length + that many bytes of FlatBuffers data.
inline constexpr std::size_t frame_header_size = 4;
// Every frame this project encodes is padded to this alignment, so frames
// read back to back into an aligned buffer stay aligned (see frame_parser).
inline constexpr std::size_t frame_alignment = 8;

// Default largest frame (value of the length prefix) a peer accepts.
inline constexpr std::uint32_t default_max_frame = 1u << 20;
// Largest frame accepted before the hello has been answered.
inline constexpr std::uint32_t pre_hello_max_frame = 16u << 10;
// Smallest max_frame a server may be configured with (must hold a hello).
inline constexpr std::uint32_t min_max_frame = pre_hello_max_frame;
inline constexpr std::chrono::milliseconds default_hello_timeout{2000};
inline constexpr std::chrono::milliseconds default_heartbeat_interval{5000};

// Verifier limits. Messages nest at most 3 tables deep (Frame -> message ->
// list item); depth 16 leaves headroom for v1.x. The table count is bound
// by the longest list a server answers with (10,000 leases, registry
// entries or records, see docs/protocol.md), plus the frame itself.
inline constexpr std::uint32_t verifier_max_depth = 16;
inline constexpr std::uint32_t max_list_items = 10'000;
inline constexpr std::uint32_t verifier_max_tables = max_list_items + 16;

// Lists answered by the server (leases, registry entries, streams): the
// number of items when the request asks for 0, and the most it answers.
inline constexpr std::uint32_t default_list_limit = 1000;
inline constexpr std::uint32_t max_list_limit = max_list_items;

// How the server fits a list answer into one frame (protocol::answer_budget):
// estimated wire bytes of the answer's fixed part and of each item besides
// its strings, rounded up. A list answer fills at most half of max_frame; a
// Records answer at most max_frame, with its payload bytes at most half.
inline constexpr std::size_t answer_overhead = 1024;
inline constexpr std::size_t lease_item_bytes = 40;        // LeaseInfo: three scalars, table, offset
inline constexpr std::size_t registry_item_overhead = 64;  // RegistryEntry besides key and value
inline constexpr std::size_t stream_item_overhead = 160;   // StreamInfo besides its name (11 scalars)
inline constexpr std::size_t record_overhead = 80;         // Record besides payload and strings
inline constexpr std::size_t string_overhead = 12;         // a string: length, terminator, offset, padding

// Largest value of each retention limit in SetRetention (records, age in
// ms, bytes): 2^53 - 1, so that a limit survives a round trip through JSON
// numbers (doubles) in admin scripts and an age fits signed 64-bit ms.
inline constexpr std::uint64_t max_retention_limit = (std::uint64_t{1} << 53) - 1;

// Capability names (the hello lists those a client understands; the welcome
// lists those granted = asked ∩ supported).
namespace capability {
// Server sends a Dropped notice after dropping deliveries for a slow consumer.
inline constexpr std::string_view dropped_notice = "dropped-notice";
// Server answers a Publish that carries a request id with Ok.
inline constexpr std::string_view publish_ack = "publish-ack";
// Leases, the routing registry, inboxes and send-to-user (message tags 12..29).
inline constexpr std::string_view routing = "routing";
// The sequence log: Append, Read (message tags 30..33), and stream
// administration: StreamInfo, StreamList, SetRetention (tags 34..38).
inline constexpr std::string_view log = "log";
// StreamDropped (tag 39): the first dropped durable delivery of each stream
// per channel or inbox, in its place in the queue (with "log" and
// "dropped-notice" also granted).
inline constexpr std::string_view stream_drops = "stream-drops";
// Server administration: Drain (tag 40), Stats and ConnList (43..46),
// FlagSet and FlagList (57..60), ClusterStatus (61, 62), ClusterTakeover
// (63, 64), and the reserved
// admin connection slots (--admin-slots) at the connection cap. Granted to any
// client that asks on a broker without an auth file; with one, to admin
// principals only.
inline constexpr std::string_view admin = "admin";
// Offers (docs/protocol.md §15): expiries on Publish and Send, offer ids,
// receipts, withdrawal, pending offers, exposure caps (tags 48..56). The
// fields and notices a receiver gets (time_left_ms, offer_id, Withdrawn)
// also need the server's flag "offers" on for the connection.
inline constexpr std::string_view offers = "offers";
}  // namespace capability

inline constexpr std::array<std::string_view, 7> supported_capabilities{
    capability::dropped_notice, capability::publish_ack, capability::routing, capability::log,
    capability::stream_drops,   capability::admin,       capability::offers};

// Ed25519 challenge-response in the hello (AuthChallenge, AuthProof).
inline constexpr std::size_t auth_public_key_size = 32;
inline constexpr std::size_t auth_nonce_size = 32;
inline constexpr std::size_t auth_signature_size = 64;
// What the client signs: this context, then the nonce. The context keeps a
// signature made for Switchyard from meaning anything elsewhere.
inline constexpr std::string_view auth_challenge_context = "switchyard-auth-v1";
inline constexpr std::size_t auth_challenge_message_size = auth_challenge_context.size() + auth_nonce_size;
// Precondition: nonce.size() == auth_nonce_size.
inline std::array<std::uint8_t, auth_challenge_message_size> auth_challenge_message(
    std::span<const std::uint8_t> nonce) noexcept {
  std::array<std::uint8_t, auth_challenge_message_size> m{};
  std::copy(auth_challenge_context.begin(), auth_challenge_context.end(), m.begin());
  std::copy(nonce.begin(), nonce.begin() + auth_nonce_size, m.begin() + auth_challenge_context.size());
  return m;
}

}  // namespace switchyard::protocol
