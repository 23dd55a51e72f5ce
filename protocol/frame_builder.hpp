#pragma once
// Encodes protocol frames (length prefix + FlatBuffers buffer).

#include "protocol/errc.hpp"

#include <flatbuffers/flatbuffers.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace switchyard::protocol {

using bytes_view = std::span<const std::uint8_t>;

struct hello_fields {
  std::uint16_t protocol_major = 0;
  std::uint16_t protocol_minor = 0;
  std::string_view client_name;
  std::string_view client_version;
  std::string_view client_id;
  std::string_view credentials;
  std::span<const std::string_view> capabilities;
  bytes_view public_key;  // Ed25519, 32 bytes; empty: none
};

struct welcome_fields {
  std::uint16_t protocol_major = 0;
  std::uint16_t protocol_minor = 0;
  std::string_view server_version;
  std::uint64_t session_id = 0;
  std::uint32_t heartbeat_ms = 0;
  std::uint32_t max_frame = 0;
  std::span<const std::string_view> capabilities;
  std::uint64_t server_instance = 0;
};

struct lease_info_fields {
  std::uint64_t lease_id = 0;
  std::uint32_t ttl_ms = 0;
  std::uint32_t remaining_ms = 0;
};

struct record_fields {
  std::uint64_t seq = 0;
  std::uint64_t timestamp_ms = 0;
  bytes_view payload;
  // How the record was delivered live; omitted from the frame when empty.
  std::string_view channel;                      // a durable publish
  std::span<const std::string_view> route_keys;  // a durable send
  std::uint32_t time_left_ms = 0;                // an expiring record, to an "offers" reader (0 = omitted)
};

struct registry_entry_fields {
  std::string_view key;
  std::string_view value;
  std::uint64_t version = 0;
  std::uint64_t lease_id = 0;
  std::uint32_t remaining_ms = 0;
};

// StatsResult (docs/protocol.md §14).
struct stats_value_fields {
  std::string_view name;
  std::uint64_t value = 0;
  bool counter = false;  // else a gauge
};
struct stats_setting_fields {
  std::string_view name;
  std::string_view value;
};
struct stats_fields {
  std::string_view version;
  std::uint64_t instance_id = 0;
  std::uint64_t uptime_ms = 0;
  std::span<const stats_setting_fields> settings;
  std::span<const stats_value_fields> values;
};

// ConnInfo: one connection of a ConnListResult. Owns its strings (an admin
// answer, not a hot path).
struct conn_info_fields {
  std::uint64_t id = 0;
  std::string name;
  std::string client_id;
  std::string principal;
  std::string address;
  std::uint64_t age_ms = 0;
  std::uint64_t idle_ms = 0;
  std::vector<std::string_view> capabilities;  // static names (capabilities.hpp)
  std::uint32_t subscriptions = 0;
  std::vector<std::string> inboxes;
  std::vector<std::uint64_t> inbox_leases;  // the lease of each of `inboxes`
  std::uint64_t pending_bytes = 0;
  std::uint64_t dropped = 0;
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;
  bool tls = false;
};

// Retention limits as on the wire (0 = no limit).
// The offer fields of a Send (capability "offers"; docs/protocol.md §15).
struct offer_fields {
  std::uint32_t expires_in_ms = 0;
  std::uint64_t offer_id = 0;
  std::uint32_t receipt_timeout_ms = 0;
  std::string_view receipt_inbox;
  std::uint32_t cap_max = 0;
  std::uint32_t cap_window_ms = 0;
};

// One entry of PendingOffersResult.
struct pending_offer_fields {
  std::uint64_t offer_id = 0;
  bytes_view payload;
  std::uint32_t time_left_ms = 0;
  std::uint32_t age_ms = 0;
};

// One entry of FlagListResult (and the FlagInfo answer).
struct flag_info_fields {
  std::string_view name;
  std::uint8_t percent = 0;
  std::uint64_t connections_on = 0;
  std::uint64_t connections_off = 0;
};

// ClusterStatusResult (docs/protocol.md §14.1). Views: they borrow the
// caller's strings for the call.
struct cluster_member_fields {
  std::string_view node_id;
  std::string_view address;
  std::int64_t incarnation = 0;
  bool self = false;
  bool synced_in = false;
  std::uint64_t patterns = 0;
  std::uint64_t messages_out = 0;
  std::uint64_t messages_in = 0;
  std::uint64_t records_out = 0;
  std::uint64_t records_in = 0;
  std::uint64_t lost_in = 0;
  std::uint64_t failed_out = 0;
  std::uint32_t partitions = 0;
};
struct etcd_endpoint_fields {
  std::string_view endpoint;
  bool reachable = false;
  bool leader = false;
  std::string_view version;
  std::string_view error;
};
struct nats_link_fields {
  std::string_view state;
  std::string_view server_url;
  std::int64_t max_payload = 0;
  std::uint64_t messages_in = 0;
  std::uint64_t messages_out = 0;
  std::uint64_t dropped_in = 0;
  std::uint64_t dropped_out = 0;
  std::uint64_t reconnects = 0;
};
struct cluster_status_fields {
  std::string_view cluster_name;
  std::string_view node_id;
  std::int64_t incarnation = 0;
  std::int64_t view_revision = 0;
  bool in_standing = false;
  bool synced = false;
  std::span<const cluster_member_fields> members;
  std::span<const etcd_endpoint_fields> etcd;
  nats_link_fields nats;
  std::uint64_t local_patterns = 0;
  std::uint64_t unconfirmed = 0;
  std::uint64_t interest_timeouts = 0;
  std::uint64_t lost_in = 0;
};

struct retention_fields {
  std::uint64_t max_records = 0;
  std::uint64_t max_age_ms = 0;
  std::uint64_t max_bytes = 0;
};

// StreamInfoResult: a stream and the retention in force for it.
struct stream_info_fields {
  std::string_view stream;
  std::uint64_t epoch = 0;
  std::uint64_t first_seq = 0;
  std::uint64_t last_seq = 0;
  std::uint64_t records = 0;
  std::uint64_t bytes = 0;
  std::uint64_t created_ms = 0;
  retention_fields retention;
  bool own_retention = false;  // retention is the stream's own, not the server default
};

// Builds one frame at a time into a reusable buffer, so steady-state encoding
// allocates nothing. Every method returns the whole frame (4-byte
// little-endian length prefix included, size a multiple of
// frame_alignment); the view stays valid until the next call on this
// builder. Not thread-safe: use one builder per thread.
class frame_builder {
 public:
  explicit frame_builder(std::size_t initial_capacity = 1024);

  bytes_view hello(std::uint64_t request_id, const hello_fields& f);
  bytes_view welcome(std::uint64_t request_id, const welcome_fields& f);
  bytes_view error(std::uint64_t request_id, errc code, std::string_view message, std::uint32_t retry_after_ms = 0,
                   bool fatal = false, std::uint64_t first_seq = 0);
  bytes_view ping(std::uint64_t request_id = 0);
  bytes_view pong(std::uint64_t request_id = 0);
  bytes_view ok(std::uint64_t request_id);
  bytes_view subscribe(std::uint64_t request_id, std::string_view pattern);
  bytes_view unsubscribe(std::uint64_t request_id, std::string_view pattern);
  // `expires_in_ms`: capability "offers" (0 = no expiry).
  bytes_view publish(std::uint64_t request_id, std::string_view channel, bytes_view payload,
                     std::string_view stream = {}, std::uint32_t expires_in_ms = 0);
  // A delivery; with a stream, it carries the message's log position;
  // with time_left_ms > 0 (capability "offers") the time left.
  bytes_view deliver(std::string_view channel, bytes_view payload, std::string_view stream = {}, std::uint64_t seq = 0,
                     std::uint64_t epoch = 0, std::uint32_t time_left_ms = 0);
  bytes_view dropped(std::uint64_t count);

  // Leases, registry, inboxes (capability "routing").
  bytes_view lease_grant(std::uint64_t request_id, std::uint32_t ttl_ms);
  bytes_view lease_keepalive(std::uint64_t request_id, std::uint64_t lease_id);
  bytes_view lease_revoke(std::uint64_t request_id, std::uint64_t lease_id);
  bytes_view lease_time_to_live(std::uint64_t request_id, std::uint64_t lease_id);
  // `after`: the lease the page starts after (0 = the first page).
  bytes_view lease_list(std::uint64_t request_id, std::uint32_t limit, std::uint64_t after = 0);
  bytes_view lease_info(std::uint64_t request_id, const lease_info_fields& f);
  // `next_cursor`: the last lease of this page when more follow, else 0.
  bytes_view lease_list_result(std::uint64_t request_id, std::span<const lease_info_fields> leases,
                               std::uint64_t next_cursor = 0, std::uint64_t total = 0);
  bytes_view registry_put(std::uint64_t request_id, std::string_view key, std::string_view value,
                          std::uint64_t lease_id, std::uint32_t ttl_ms);
  bytes_view registry_get(std::uint64_t request_id, std::string_view key);
  bytes_view registry_delete(std::uint64_t request_id, std::string_view key);
  bytes_view registry_list(std::uint64_t request_id, std::string_view prefix, std::uint32_t limit);
  bytes_view registry_entry(std::uint64_t request_id, const registry_entry_fields& f);
  bytes_view registry_list_result(std::uint64_t request_id, std::span<const registry_entry_fields> entries, bool more);
  bytes_view inbox_open(std::uint64_t request_id, std::string_view inbox_id, std::uint64_t lease_id);
  bytes_view inbox_close(std::uint64_t request_id, std::string_view inbox_id);
  bytes_view send(std::uint64_t request_id, std::span<const std::string_view> route_keys, bytes_view payload,
                  std::string_view stream = {}, const offer_fields* offer = nullptr);
  // `outcomes` (wire::KeyOutcome values, one per key): an offer's answer;
  // empty for a plain send.
  bytes_view send_result(std::uint64_t request_id, std::span<const std::string_view> gateways, std::uint32_t routed,
                         std::uint64_t seq = 0, std::uint64_t epoch = 0, std::span<const std::uint8_t> outcomes = {},
                         std::uint32_t capped = 0);
  // time_left_ms and offer_id (capability "offers"): written only when > 0.
  bytes_view inbox_delivery(std::string_view inbox_id, std::span<const std::string_view> route_keys, bytes_view payload,
                            std::string_view stream = {}, std::uint64_t seq = 0, std::uint64_t epoch = 0,
                            std::uint32_t time_left_ms = 0, std::uint64_t offer_id = 0);

  // Offers (capability "offers").
  bytes_view offer_ack(std::uint64_t request_id, std::uint64_t offer_id, std::string_view route_key);
  // `outcome` is a wire::ReceiptOutcome value.
  bytes_view receipt(std::uint64_t offer_id, std::string_view route_key, std::string_view inbox_id,
                     std::uint8_t outcome, std::uint64_t elapsed_us);
  bytes_view withdraw(std::uint64_t request_id, std::uint64_t offer_id);
  bytes_view withdraw_result(std::uint64_t request_id, std::uint64_t offer_id, std::uint32_t dropped,
                             std::uint32_t notified, std::uint32_t pending);
  bytes_view withdrawn(std::uint64_t offer_id, std::string_view inbox_id, std::span<const std::string_view> route_keys);
  bytes_view pending_offers(std::uint64_t request_id, std::string_view route_key, std::uint32_t limit = 0);
  bytes_view pending_offers_result(std::uint64_t request_id, std::string_view route_key,
                                   std::span<const pending_offer_fields> offers);
  bytes_view exposure_query(std::uint64_t request_id, std::span<const std::string_view> route_keys,
                            std::uint32_t window_ms);
  bytes_view exposure_result(std::uint64_t request_id, std::span<const std::uint32_t> counts);

  // Server flags (capability "admin").
  bytes_view flag_set(std::uint64_t request_id, std::string_view name, std::uint8_t percent);
  bytes_view flag_list(std::uint64_t request_id);
  bytes_view flag_info(std::uint64_t request_id, const flag_info_fields& f);
  bytes_view flag_list_result(std::uint64_t request_id, std::span<const flag_info_fields> flags);

  // The sequence log (capability "log").
  bytes_view append(std::uint64_t request_id, std::string_view stream, bytes_view payload);
  bytes_view appended(std::uint64_t request_id, std::string_view stream, std::uint64_t seq, std::uint64_t epoch);
  bytes_view read(std::uint64_t request_id, std::string_view stream, std::uint64_t from_seq, std::uint32_t max_count,
                  std::uint32_t max_bytes);
  bytes_view records(std::uint64_t request_id, std::string_view stream, std::uint64_t epoch, std::uint64_t first_seq,
                     std::uint64_t last_seq, std::span<const record_fields> records, std::uint64_t expired = 0,
                     std::uint64_t next_seq = 0);

  // Stream administration (capability "log").
  bytes_view stream_info(std::uint64_t request_id, std::string_view stream);
  bytes_view stream_info_result(std::uint64_t request_id, const stream_info_fields& f);
  bytes_view stream_list(std::uint64_t request_id, std::string_view prefix, std::uint32_t limit);
  bytes_view stream_list_result(std::uint64_t request_id, std::span<const stream_info_fields> streams, bool more);
  // clear = drop the stream's own limits (`limits` is then ignored).
  bytes_view set_retention(std::uint64_t request_id, std::string_view stream, const retention_fields& limits,
                           bool clear = false);
  bytes_view stream_delete(std::uint64_t request_id, std::string_view stream);

  // The first dropped durable delivery of `stream` to `channel` or (empty
  // channel) into inbox `inbox_id` (capability "stream-drops").
  bytes_view stream_dropped(std::string_view stream, std::uint64_t seq, std::uint64_t epoch, std::string_view channel,
                            std::string_view inbox_id);

  // Server administration (capability "admin"): drain over `window_ms`
  // (0 = the server's default window).
  bytes_view drain(std::uint64_t request_id, std::uint32_t window_ms);

  // Server statistics (capability "admin").
  bytes_view stats(std::uint64_t request_id);
  bytes_view stats_result(std::uint64_t request_id, const stats_fields& f);
  // `sort` is a wire::ConnSort value.
  bytes_view conn_list(std::uint64_t request_id, std::uint8_t sort, std::uint32_t limit, std::uint64_t cursor);
  bytes_view conn_list_result(std::uint64_t request_id, std::span<const conn_info_fields> conns, std::uint64_t total,
                              std::uint64_t next_cursor);

  // Cluster status (capability "admin"). The result always carries `nats`
  // (a NatsLinkStatus table), empty strings left out as everywhere.
  bytes_view cluster_status(std::uint64_t request_id);
  bytes_view cluster_status_result(std::uint64_t request_id, const cluster_status_fields& f);
  bytes_view cluster_takeover(std::uint64_t request_id, std::string_view node_id);
  // `holders[i]` is partitions[i]'s new holder.
  bytes_view cluster_takeover_result(std::uint64_t request_id, std::string_view node_id,
                                     std::span<const std::uint32_t> partitions, std::span<const std::string> holders);

  // Authentication between Hello and Welcome (docs/security.md): the
  // server's random nonce, and the client's signature of
  // auth_challenge_message(nonce).
  bytes_view auth_challenge(bytes_view nonce);
  bytes_view auth_proof(bytes_view signature);

  // Escape hatch for tests and future messages: the builder to fill, then
  // finish(request_id, type, offset).
  flatbuffers::FlatBufferBuilder& start();
  bytes_view finish(std::uint64_t request_id, std::uint8_t message_type, flatbuffers::Offset<void> message);

 private:
  template <class T>
  bytes_view finish_as(std::uint64_t request_id, flatbuffers::Offset<T> message);

  flatbuffers::FlatBufferBuilder fbb_;
  std::vector<flatbuffers::Offset<flatbuffers::String>> strings_;
};

}  // namespace switchyard::protocol
