#pragma once
// The Switchyard client: one connection to a broker.
//
//   auto c = switchyard::client::connect({.host = "127.0.0.1", .port = 7878});
//   if (!c) { /* c.error().message() */ }
//   (*c)->subscribe("orders.*.created", [](const switchyard::message& m) { ... });
//   (*c)->publish("orders.eu.created", "payload");
//
// Threading: every client runs its I/O on an event_loop (one thread; several
// clients may share one). Handlers and callbacks run on that thread, one at
// a time, and must not block for long. All member functions are thread-safe.
// The blocking ones (connect, subscribe, flush, publish_confirmed) wait up to
// the options' timeouts and return errc::would_deadlock when called on the
// loop thread itself (use the async_ forms there).
//
// Delivery is at most once. A slow consumer's missed messages are reported
// through on_dropped.
//
// Reconnect (client_options::reconnect, on by default; docs/reconnect.md):
// when the connection drops, requests in flight fail with
// errc::connection_lost (their outcome is unknown), publishes and
// send_nowait are held in a bounded buffer, and requests made meanwhile
// wait for the restored session (blocking ones up to request_timeout, then
// errc::timeout, and are then never sent). connected() is false until the
// session is restored.

#include "switchyard/error.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace switchyard {

namespace detail {
struct access;  // the library's own way in (not installed)
}  // namespace detail

// One thread running I/O for any number of clients. Destroying the last
// reference stops the thread (after every client using it is gone).
class event_loop {
 public:
  event_loop();
  ~event_loop();
  event_loop(const event_loop&) = delete;
  event_loop& operator=(const event_loop&) = delete;

 private:
  friend struct detail::access;
  struct impl;
  std::unique_ptr<impl> impl_;
};

// A delivered message. Both views borrow the library's read buffer and are
// valid only during the handler call: copy what you keep.
struct message {
  std::string_view channel;
  std::span<const std::byte> payload;
  // For a message published with a stream: its place in the log (empty
  // stream and 0 otherwise).
  std::string_view stream;
  std::uint64_t seq = 0;
  std::uint64_t epoch = 0;
  // A durable subscription's message read from the log to fill a gap
  // (false: it came live).
  bool replayed = false;
  // Capability "offers", for a message published with an expiry (and the
  // broker's flag "offers" on for this connection): the time it had left
  // when the broker wrote it, at least 1 ms; 0 = no expiry, or not told.
  std::chrono::milliseconds time_left{0};

  std::string_view payload_text() const noexcept {
    return {reinterpret_cast<const char*>(payload.data()), payload.size()};
  }
};

using message_handler = std::function<void(const message&)>;
using subscription_id = std::uint64_t;

// A payload sent to users, delivered into a gateway's inbox. The views are
// valid only during the handler call.
struct inbox_message {
  std::string_view inbox;                        // the inbox it was delivered to
  std::span<const std::string_view> route_keys;  // the users (route keys) it is for
  std::span<const std::byte> payload;
  // For a durable send: its place in the log (empty stream and 0 otherwise).
  std::string_view stream;
  std::uint64_t seq = 0;
  std::uint64_t epoch = 0;
  // Read from the log to fill a gap of a durable inbox. Its route_keys are
  // then every key of the original send, routed here or not: deliver to
  // the ones this gateway holds.
  bool replayed = false;
  // Capability "offers" (and the broker's flag "offers" on for this
  // connection), for a send with an expiry: the time it had left when the
  // broker wrote it (0 = no expiry, or not told). Past it the offer is
  // stale: do not show it to the user.
  std::chrono::milliseconds time_left{0};
  // The offer's id (0 = not an offer): client::ack(*this) once the users'
  // devices took it (the sender's receipts, the pending list).
  std::uint64_t offer_id = 0;

  std::string_view payload_text() const noexcept {
    return {reinterpret_cast<const char*>(payload.data()), payload.size()};
  }
};
using inbox_handler = std::function<void(const inbox_message&)>;

using lease_id = std::uint64_t;

struct lease_info {
  lease_id id = 0;
  std::chrono::milliseconds ttl{0};        // as granted (the server clamps asks)
  std::chrono::milliseconds remaining{0};  // until expiry
};

struct registry_entry {
  std::string key;
  std::string value;
  std::uint64_t version = 0;  // server-wide revision of the last put
  lease_id lease = 0;         // 0: the entry has a TTL of its own
  std::chrono::milliseconds remaining{0};
};

struct append_ack {
  std::uint64_t seq = 0;    // the record's sequence in its stream
  std::uint64_t epoch = 0;  // the stream's epoch: changes only if the stream was recreated
};

struct stream_record {
  std::uint64_t seq = 0;
  std::uint64_t timestamp_ms = 0;  // wall clock at append (ms since the Unix epoch)
  std::vector<std::byte> payload;
  // How the record was delivered live: the channel of a publish_durable,
  // the route keys of a send_durable; both empty for a plain append.
  std::string channel;
  std::vector<std::string> route_keys;
  // Appended with an expiry (capability "offers", and the broker's flag
  // "offers" on for this connection): the time it had left when read
  // (0 = no expiry, or not told).
  std::chrono::milliseconds time_left{0};
};

struct stream_read {
  std::uint64_t epoch = 0;
  std::uint64_t first_seq = 0;  // first retained
  std::uint64_t last_seq = 0;   // last appended
  std::vector<stream_record> records;
  // Records of the range read that the broker left out because their
  // expiry had passed (appended with one: send_durable / publish_durable
  // with expires_in). Every sequence below next_seq that is not in
  // `records` is one of them; they are gone, not lost.
  std::uint64_t expired = 0;
  // Where the next read goes on (one past the last record returned or
  // left out; from a broker before expiries, the last record's seq + 1).
  std::uint64_t next_seq = 0;
};

// ---- Gap-free delivery of durable streams ----
//
// A durable subscription (subscribe_durable) or inbox (open_inbox_durable)
// tracks, per stream, the last sequence it delivered and the stream's
// epoch. Messages that carry a stream are handed over exactly once and in
// sequence order: when a sequence jumps (the broker dropped deliveries to a
// slow consumer), when the broker reports dropped messages, and when the
// subscription resumes from positions saved on an earlier connection, the
// library reads the missing range from the log, delivers it (with
// `replayed` set), then goes on with live delivery. A stream starts at the
// first of its messages published after the subscription: the broker
// reports a dropped first message (capability "stream-drops") before any
// later one of that stream, and the library reads from it. A stream's records must
// all be meant for the subscriber: replayed records published to channels
// the pattern does not match are skipped, plain appends too.
//
// When a position cannot be recovered, because the range was trimmed by
// retention, the stream was recreated (new epoch) or deleted, the library
// calls on_unrecoverable instead of pretending: reload from your source of
// truth, then say where delivery goes on.

struct stream_position {
  std::uint64_t seq = 0;  // last delivered
  // The stream's epoch. When resuming, {0, 0} means "never saw this
  // stream" (read it from its first record, whatever its epoch); a
  // position with a sequence but epoch 0 is refused (errc::invalid_position):
  // a stream recreated since could not be told from it.
  std::uint64_t epoch = 0;
};
using stream_positions = std::map<std::string, stream_position, std::less<>>;

enum class position_lost {
  trimmed,        // records after the position were removed by retention
  epoch_changed,  // the stream was recreated: its sequences started again
  stream_gone,    // no such stream any more
};

struct unrecoverable_position {
  std::string_view stream;
  position_lost reason;
  stream_position last_delivered;     // what the application has seen
  std::uint64_t first_available = 0;  // first retained sequence now (0: stream gone)
  std::uint64_t epoch = 0;            // the stream's epoch now (0: stream gone)
};

enum class resume_at {
  first_available,  // deliver everything the log still has after the position
  next_live,        // skip to the end of the log: only what comes next
};

struct durable_options {
  // Positions from an earlier connection (client::stream_positions): each
  // stream is read from seq + 1 as soon as the subscription is on.
  // Streams not listed start at their first message published after the
  // subscription (see above). Each needs its epoch (see stream_position).
  stream_positions resume_from;
  // Runs on the loop thread. Unset: resume_at::first_available, and a
  // warning in the log. (stream_gone ignores the answer: the stream
  // starts again at its next live message.)
  std::function<resume_at(const unrecoverable_position&)> on_unrecoverable;
  // Records per recovery read (0 = the server's default).
  std::size_t read_batch = 0;
};

// Retention limits of a stream; 0 = no limit.
struct stream_retention {
  std::uint64_t max_records = 0;
  std::chrono::milliseconds max_age{0};  // by the records' wall-clock timestamps
  std::uint64_t max_bytes = 0;           // payload plus destination bytes (docs/storage.md)
};

// What the broker's log knows about a stream (stream_info, stream_list).
struct stream_summary {
  std::string name;
  std::uint64_t epoch = 0;       // random at creation: a new epoch means the stream was recreated
  std::uint64_t first_seq = 0;   // first retained (last_seq + 1 when it holds no records)
  std::uint64_t last_seq = 0;    // last appended (0 = none yet)
  std::uint64_t records = 0;     // records retained
  std::uint64_t bytes = 0;       // payload plus destination bytes retained
  std::uint64_t created_ms = 0;  // wall clock at creation, ms since the Unix epoch
  stream_retention retention;    // in force for this stream
  bool own_retention = false;    // true: the stream's own limits; false: the broker's default
};

// The broker's identity and figures (client::stats). docs/operations.md
// explains every value's name.
struct server_stats {
  std::string version;
  std::uint64_t instance_id = 0;
  std::chrono::milliseconds uptime{0};
  std::vector<std::pair<std::string, std::string>> settings;  // name, value (a summary of its configuration)
  struct value {
    std::string name;
    std::uint64_t value = 0;
    bool counter = false;  // only grows while the broker runs; else a gauge
  };
  std::vector<value> values;  // in the broker's order (counters, then gauges)
};

// One open connection of the broker (client::connections).
struct connection_summary {
  std::uint64_t id = 0;  // the broker's connection id, as in its logs
  std::string name;      // client_options::client_name
  std::string client_id;
  std::string principal;  // empty without an auth file
  std::string address;    // host:port as the broker sees it
  std::chrono::milliseconds age{0};
  std::chrono::milliseconds idle{0};  // since it last sent anything
  std::vector<std::string> capabilities;
  std::uint32_t subscriptions = 0;
  std::vector<std::string> inboxes;
  std::vector<lease_id> inbox_leases;  // the lease of each inbox, same order
  std::uint64_t pending_bytes = 0;     // queued for it, not yet written
  std::uint64_t dropped = 0;           // deliveries dropped for it (slow consumer)
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;
  bool tls = false;
};

// How client::connections orders the list.
enum class connection_order : std::uint8_t { id, idle, pending_bytes, dropped, subscriptions, bytes_in, bytes_out };

// One page of client::connections.
struct connection_page {
  std::vector<connection_summary> connections;
  std::uint64_t total = 0;        // open connections past their hello, in all
  std::uint64_t next_cursor = 0;  // give it for the next page; 0: this was the last
};

// A broker node's view of its cluster (client::cluster_status;
// docs/protocol.md §14.1, docs/cli.md "cluster status"). Counters count
// since the node started; "out" is from the node to a member, "in" from
// the member to the node.
struct cluster_status_info {
  std::string cluster_name;
  std::string node_id;             // the node that answered
  std::int64_t incarnation = 0;    // its etcd lease id (a new one at each start)
  std::int64_t view_revision = 0;  // the etcd revision of its view of the members
  bool in_standing = false;        // its lease was renewed in time: it may act for the cluster
  bool synced = false;             // every other member sent it its interest
  struct member {
    std::string node_id;
    std::string address;  // where clients connect to it
    std::int64_t incarnation = 0;
    bool self = false;           // the node that answered
    bool synced_in = false;      // it sent the node its whole interest
    std::uint64_t patterns = 0;  // patterns of its interest
    std::uint64_t messages_out = 0;
    std::uint64_t messages_in = 0;
    std::uint64_t records_out = 0;  // deliveries carried by those messages
    std::uint64_t records_in = 0;
    std::uint64_t lost_in = 0;     // messages from it lost in transit (the link's numbering shows a gap)
    std::uint64_t failed_out = 0;  // messages to it that NATS refused
    std::uint32_t partitions = 0;  // partitions it owns (docs/cluster.md, "Partitions")
  };
  std::vector<member> members;  // by node id, the node itself included
  struct etcd_endpoint {
    std::string endpoint;
    bool reachable = false;
    bool leader = false;  // etcd's leader is the member at this endpoint
    std::string version;  // etcd's, when reachable
    std::string error;    // why not reachable
  };
  std::vector<etcd_endpoint> etcd;
  struct nats_link {
    std::string state;       // idle, connected, reconnecting or closed
    std::string server_url;  // the NATS server connected to (the last one while reconnecting)
    std::int64_t max_payload = 0;
    std::uint64_t messages_in = 0;
    std::uint64_t messages_out = 0;
    std::uint64_t dropped_in = 0;   // inbound messages dropped (the node's mailbox full)
    std::uint64_t dropped_out = 0;  // outbound messages refused (the send queue full)
    std::uint64_t reconnects = 0;
  } nats;
  std::uint64_t local_patterns = 0;     // patterns of the node's own subscribers
  std::uint64_t unconfirmed = 0;        // interest announcements waiting for the other members' acks
  std::uint64_t interest_timeouts = 0;  // announcements answered at their deadline (a member silent)
  std::uint64_t lost_in = 0;            // lost_in over every link, links ended since included
};

// What a cluster takeover did (client::cluster_takeover; docs/cluster.md,
// "Durable streams"): the partitions whose streams moved away from the
// node declared lost, and each one's new holder.
struct cluster_takeover_info {
  std::string node_id;
  std::vector<std::uint32_t> partitions;  // ascending
  std::vector<std::string> holders;       // per partition
};

struct send_result {
  std::vector<std::string> gateways;  // per route key: the inbox it went to, or "" (no route)
  std::size_t routed = 0;
  std::uint64_t seq = 0;    // send_durable: the record's sequence in its stream
  std::uint64_t epoch = 0;  // send_durable: the stream's epoch
};

// ---- Offers (capability "offers"; docs/gateway-guide.md, "Offers") ----
//
// An offer is a send to users that is only good for a while: the broker
// never writes it to a gateway after its expiry, the gateways get its id
// and the time it has left, and acknowledge it (client::ack) when the
// user's device took it. The sender may ask for a receipt per user
// (acked, or timeout), withdraw the offer, cap how many offers a user
// gets in a window, and ask which offers are still pending for a user.

struct offer_options {
  // The sender's id for the offer, unique among its live offers (0 = a
  // plain send with an expiry: no receipts, withdraw, pending list). Needs
  // expires_in > 0.
  std::uint64_t offer_id = 0;
  // Never written to a gateway after this; 0 = no expiry (not with
  // offer_id). Values above 2^32 - 1 ms are sent as that.
  std::chrono::milliseconds expires_in{0};
  // > 0 (needs offer_id): one receipt per routed key, when its gateway
  // acked it or after this long without an ack (client_options::on_receipt).
  std::chrono::milliseconds receipt_timeout{0};
  // Receipts go to the connection holding this inbox when they are due
  // (a dispatcher that reconnects and reopens its inbox still gets them);
  // empty: to this connection.
  std::string receipt_inbox;
  // > 0: exposure cap: a key that got cap_max offers in the last
  // cap_window already is not sent this one (key_outcome::capped).
  std::uint32_t cap_max = 0;
  std::chrono::milliseconds cap_window{0};
};

// What became of one route key of an offer. A value this library does not
// know (a later broker's) reads as no_route: not delivered.
enum class key_outcome : std::uint8_t { routed = 0, no_route = 1, capped = 2 };

struct offer_result {
  std::vector<std::string> gateways;  // per route key: the inbox it went to, or "" (not delivered)
  std::vector<key_outcome> outcomes;  // per route key, in order
  std::uint32_t routed = 0;           // keys routed
  std::uint32_t capped = 0;           // keys over the exposure cap
};

// A key's receipt outcome. Other values may come from a later broker.
enum class receipt_outcome : std::uint8_t {
  acked = 0,    // the gateway acknowledged it (client::ack)
  timeout = 1,  // no ack within offer_options::receipt_timeout
};

// One key's receipt (client_options::on_receipt).
struct receipt {
  std::uint64_t offer_id = 0;
  std::string route_key;
  std::string inbox_id;  // the gateway's inbox the offer went to
  receipt_outcome outcome = receipt_outcome::acked;
  std::chrono::microseconds elapsed{0};  // from the send to the ack (or the timeout)
};

// To a gateway that was written an offer its sender withdrew
// (client_options::on_withdrawn): take it back from these users.
struct withdrawn_notice {
  std::uint64_t offer_id = 0;
  std::string inbox_id;
  std::vector<std::string> route_keys;
};

struct withdraw_result {
  std::uint32_t dropped = 0;   // copies still queued for gateways, dropped before they were written
  std::uint32_t notified = 0;  // gateways sent a withdrawn notice
  std::uint32_t pending = 0;   // pending entries removed (keys not acked yet)
};

// An offer still pending for a user: unexpired and not acked.
struct pending_offer {
  std::uint64_t offer_id = 0;
  std::vector<std::byte> payload;
  std::chrono::milliseconds time_left{0};  // before it expires
  std::chrono::milliseconds age{0};        // since it was sent

  std::string_view payload_text() const noexcept {
    return {reinterpret_cast<const char*>(payload.data()), payload.size()};
  }
};

// A broker flag (client::set_flag, client::flags): on for the connections
// whose client id hashes below `percent` of 100.
struct flag_info {
  std::string name;
  unsigned percent = 0;               // 0..100
  std::uint64_t connections_on = 0;   // open connections that declared its capability, inside the percentage
  std::uint64_t connections_off = 0;  // ... and outside it
};

// ---- Reconnect ----
//
// A client whose connection drops (broker restart, kill -9, network, a
// drain) connects again by itself and restores its session before anything
// else goes out; see docs/reconnect.md. Defaults below. The first connect()
// is not retried: it fails fast when no broker answers.
struct reconnect_options {
  bool enabled = true;  // false: the old behaviour (connection lost = client done)
  std::chrono::milliseconds base_delay{
      500};  // attempt n waits uniform(0, min(max_delay, base_delay * 2^n)), n = 0, 1, ...
  std::chrono::milliseconds max_delay{30'000};
  std::chrono::milliseconds stable_after{10'000};  // the attempt counter resets once a connection stayed up this long
  std::uint32_t max_attempts = 0;                  // 0 = no limit; past it the client closes (errc::reconnect_failed)
  std::chrono::milliseconds max_downtime{0};       // 0 = no limit; same
  std::size_t buffer_bytes = 8u << 20;  // publishes kept while disconnected; past it publish fails (errc::buffer_full)
};

struct reconnect_info {
  std::uint32_t attempts = 0;  // connection attempts it took (1 = the first one worked)
  // Of those, attempts the broker answered with a refusal and a retry hint
  // (rate_limited, too_many_connections, draining); the others found no
  // broker listening or failed on the way.
  std::uint32_t refused = 0;
  std::chrono::milliseconds downtime{0};  // from the loss to the restored session
  bool new_server_instance = false;       // the broker process changed (server_instance differs)
  // Leases this client held that the broker no longer knew (a new server
  // instance, or expired meanwhile), each replaced by a new grant with the
  // same TTL: {old, new}. The client maps the old ids to the new ones in
  // every call that takes a lease id, so code holding an old id goes on
  // working; lease_list() shows the new ids.
  std::vector<std::pair<lease_id, lease_id>> leases_replaced;
};

// TLS to the broker (docs/security.md, "TLS"): for a broker started with
// --tls-cert. Off by default. The broker's certificate is verified against
// ca_file and its name against server_name unless verify_server is false.
// A broker that does not speak TLS, a certificate that does not verify, or
// a broker that refuses this client's certificate fails connect() with
// errc::tls_failed (the client's log says why); a file here that does not
// load fails it the same way.
struct tls_options {
  bool enabled = false;
  // CAs (PEM file) the broker's certificate must chain to; empty: the
  // system's default CAs (/etc/ssl/certs).
  std::string ca_file;
  // mTLS (a broker with --tls-verify-client): this client's certificate
  // chain and its private key, PEM, unencrypted. Both or neither.
  std::string cert_file;
  std::string key_file;
  // The DNS name or IP address the broker's certificate must carry (in its
  // subjectAltName); a DNS name is also sent as SNI. Empty: the host being
  // connected to (host, or the entry of addresses).
  std::string server_name;
  // false: the broker's certificate is not checked at all; the traffic is
  // encrypted but anyone in the path can read and change it. For tests.
  bool verify_server = true;
};

struct client_options {
  std::string host = "127.0.0.1";
  std::uint16_t port = 7878;
  std::string client_name = "switchyard-client";  // shown in the broker's logs
  std::string client_id;                          // stable id; empty = random per client

  // Authentication (docs/security.md), for a broker with an auth file; it
  // refuses a client without valid credentials with errc::unauthorized
  // (connect() fails; a reconnect gives up: on_closed). At most one of:
  //  - token: a bearer token, sent in the hello (use TLS on a network);
  //  - key_file / key: an Ed25519 secret key (the file `switchyard-cli
  //    keygen` writes, or its 64 hex digits in `key`). The broker sends a
  //    random challenge and checks the signature; the key never leaves this
  //    process. A key that does not load fails connect() with
  //    std::errc::invalid_argument (the log says why);
  //  - neither, with TLS and tls.cert_file: the broker may bind a principal
  //    to the client certificate's subject.
  std::string token;
  std::string key_file;
  std::string key;
  // Ask for the "admin" capability: server administration (drain) and the
  // broker's reserved admin connection slots at its connection cap, and no
  // hello rate limit. A broker with an auth file grants it to admin
  // principals only. For operators' tools such as switchyard-cli.
  bool admin = false;

  std::chrono::milliseconds connect_timeout{5000};  // TCP connect + hello/welcome
  std::chrono::milliseconds request_timeout{5000};  // blocking subscribe / flush / confirmed publish
  // 0 = ping as often as the server asks in its welcome. The connection is
  // declared dead after 2.5 intervals without any frame from the server.
  std::chrono::milliseconds heartbeat_interval{0};

  // Bytes of publishes waiting to be written. Past it, publish() waits (up
  // to request_timeout, then errc::timeout) except on the loop thread.
  std::size_t max_pending_bytes = 8u << 20;
  // true: past max_pending_bytes, a call off the loop thread that writes a
  // frame (publish, send_nowait, ack, the async_ forms, the requests of
  // the blocking ones) waits for room, up to request_timeout (then
  // errc::timeout). false: it fails at once with errc::buffer_full instead
  // (an async_ form then calls `done` with it at once, on the calling
  // thread), for code on a thread that must never block, such as a
  // server's I/O thread. unsubscribe() never waits for room either way.
  bool wait_for_space = true;
  // false: publishes are batched and written by the loop thread (best
  // throughput). true: publish() writes to the socket itself when nothing
  // else is waiting (lowest latency, one system call per message).
  bool write_immediately = false;

  // TLS to the broker (see tls_options). With TLS, publish() never writes
  // to the socket itself (write_immediately has no effect): the loop
  // thread encrypts and writes.
  tls_options tls;

  // Called on the loop thread when the server reports dropped deliveries
  // (slow consumer), with the number lost.
  std::function<void(std::uint64_t dropped)> on_dropped;
  // Called on the loop thread when the connection ends for any reason
  // other than close(): the server's error code when it sent one
  // (shutting_down, draining, heartbeat_timeout, ...), else the socket
  // error. With reconnect on, on every loss, before the first attempt.
  std::function<void(std::error_code)> on_disconnect;

  // Brokers to connect to, "host:port" ("[::1]:7878" for IPv6), tried in
  // a shuffled order (the first connect() tries each once, in that order;
  // reconnect attempts go round them). Empty: host and port above. One
  // that does not parse fails connect() with std::errc::invalid_argument.
  std::vector<std::string> addresses;
  reconnect_options reconnect;
  // Called on the loop thread once a lost session is restored:
  // subscriptions (plain and durable, whose gaps are then read from the
  // log), leases granted or kept alive here, the inboxes and registry
  // entries put under them, all before this callback and before buffered
  // publishes go out.
  std::function<void(const reconnect_info&)> on_reconnect;
  // Called on the loop thread once when the client is done for good other
  // than by close(): it gave up reconnecting (errc::reconnect_failed), the
  // broker refused a reconnect for good (unauthorized,
  // unsupported_version), or, with reconnect disabled, the connection was
  // lost (the same code as on_disconnect, which fired just before).
  std::function<void(std::error_code)> on_closed;

  // Capability "offers", called on the loop thread. on_receipt: a receipt
  // for an offer sent with offer_options::receipt_timeout, by this
  // connection or to an inbox it holds (receipt_inbox). on_withdrawn: an
  // offer written to one of this connection's inboxes was withdrawn.
  // Unset: they are dropped (a debug line in the log).
  std::function<void(const receipt&)> on_receipt;
  std::function<void(const withdrawn_notice&)> on_withdrawn;
};

class client {
 public:
  // Connects, sends the hello and waits for the welcome. With no loop given,
  // the client gets an event_loop of its own.
  static std::expected<std::unique_ptr<client>, std::error_code> connect(client_options options,
                                                                         std::shared_ptr<event_loop> loop = nullptr);
  // Same without blocking: `done` runs on the loop thread with the client
  // or the error (errc::timeout after options.connect_timeout).
  static void async_connect(client_options options, std::shared_ptr<event_loop> loop,
                            std::function<void(std::expected<std::unique_ptr<client>, std::error_code>)> done);

  ~client();  // close()
  client(const client&) = delete;
  client& operator=(const client&) = delete;

  // Queues a publish (at most once, no answer). Errors: invalid_channel,
  // payload_too_large, not_connected, timeout (buffer full too long).
  // While reconnecting it is held (reconnect_options::buffer_bytes; past
  // it errc::buffer_full) and written, in order, once the session is
  // restored; held publishes are dropped if the client gives up.
  std::error_code publish(std::string_view channel, std::span<const std::byte> payload);
  std::error_code publish(std::string_view channel, std::string_view payload) {
    return publish(channel, std::as_bytes(std::span(payload.data(), payload.size())));
  }
  // A publish that expires (capability "offers"): the broker never writes
  // it to a subscriber more than `expires_in` after it read it; receivers
  // see the time it had left (message::time_left). 0 = no expiry (a plain
  // publish). Errors as publish, and not_supported (no "offers" granted),
  // bad_request (a negative expires_in).
  std::error_code publish(std::string_view channel, std::span<const std::byte> payload,
                          std::chrono::milliseconds expires_in);
  std::error_code publish(std::string_view channel, std::string_view payload, std::chrono::milliseconds expires_in) {
    return publish(channel, std::as_bytes(std::span(payload.data(), payload.size())), expires_in);
  }
  // Publishes and waits until the broker has routed it (blocking).
  std::error_code publish_confirmed(std::string_view channel, std::span<const std::byte> payload);

  // Subscribes to a pattern (`*` = one token, `>` = the rest) and waits for
  // the broker's confirmation. The handler runs on the loop thread.
  std::expected<subscription_id, std::error_code> subscribe(std::string_view pattern, message_handler handler);
  // Same, without waiting: `done` runs on the loop thread with the outcome.
  void async_subscribe(std::string_view pattern, message_handler handler,
                       std::function<void(std::expected<subscription_id, std::error_code>)> done);
  // A subscription with gap-free delivery of durable streams (see above):
  // messages that carry a stream reach `handler` once each, in order,
  // recovered from the log when the live path lost them; others pass
  // through as with subscribe(). Needs the "log" capability
  // (errc::not_supported); options.resume_from with a sequence but no
  // epoch is refused (errc::invalid_position). Blocking, like subscribe();
  // it always asks the broker, even for a pattern already subscribed
  // (that request is where the subscription starts).
  std::expected<subscription_id, std::error_code> subscribe_durable(std::string_view pattern, message_handler handler,
                                                                    durable_options options = {});
  // The last delivered position of every stream a durable subscription has
  // seen: keep it to resume on a new connection. Empty for an unknown id or
  // a plain subscription. Works after the connection is gone.
  stream_positions stream_positions_of(subscription_id id) const;

  // Removes a subscription; never blocks (safe inside a handler): it waits
  // neither for the broker's answer nor for room in a full send buffer
  // (its frame goes past max_pending_bytes: one per subscription held).
  // Called on the loop thread (from a handler), the handler is not called
  // again; from another thread, a message already being dispatched may
  // still reach it. Errors: not_found.
  std::error_code unsubscribe(subscription_id id);

  // Round trip to the broker: when it returns success, everything this
  // client sent before was processed by the broker.
  std::error_code flush();
  void async_flush(std::function<void(std::error_code)> done);

  // ---- Leases, the routing registry, inboxes, send-to-user ----
  // All blocking (request_timeout); errors: not_found (unknown or expired
  // lease / key), no_route, inbox_taken, not_connected, timeout,
  // not_supported (the server did not grant "routing").

  std::expected<lease_info, std::error_code> lease_grant(std::chrono::milliseconds ttl);
  std::expected<lease_info, std::error_code> lease_keepalive(lease_id id);
  std::expected<lease_info, std::error_code> lease_time_to_live(lease_id id);
  std::error_code lease_revoke(lease_id id);
  // A page of the broker's live leases, at most `limit` (0 = the broker's
  // default, 1000; at most 10000), after the lease `after` (0 = the first
  // page, else the *next_cursor of the page before). The order is the
  // broker's own (a lease keeps its place while it lives, not the ids'
  // numeric order), so a walk page by page lists every lease that lives
  // throughout exactly once. `*next_cursor` (if given) is 0 when this page
  // is the last; `*total` (if given) counts the broker's leases. A cursor
  // is good only with the broker process that gave it. A broker older
  // than the cursor answers the first page, with no next cursor.
  std::expected<std::vector<lease_info>, std::error_code> lease_list(std::size_t limit = 0, lease_id after = 0,
                                                                     lease_id* next_cursor = nullptr,
                                                                     std::uint64_t* total = nullptr);

  // Binds key -> value to a lease; returns the entry's new version.
  std::expected<std::uint64_t, std::error_code> registry_put(std::string_view key, std::string_view value,
                                                             lease_id lease);
  // Same with a TTL of the entry's own instead of a lease.
  std::expected<std::uint64_t, std::error_code> registry_put_ttl(std::string_view key, std::string_view value,
                                                                 std::chrono::milliseconds ttl);
  std::expected<registry_entry, std::error_code> registry_get(std::string_view key);
  std::error_code registry_delete(std::string_view key);
  // Entries whose key starts with `prefix`, in key order (limit 0 = server
  // default, 1000); `more`, if given, says whether the list was cut.
  std::expected<std::vector<registry_entry>, std::error_code> registry_list(std::string_view prefix,
                                                                            std::size_t limit = 0,
                                                                            bool* more = nullptr);

  // Opens inbox `id` on this connection under `lease`; `handler` runs on the
  // loop thread for every delivery. Errors: inbox_taken, not_found (lease).
  std::error_code open_inbox(std::string_view id, lease_id lease, inbox_handler handler);
  std::error_code close_inbox(std::string_view id);
  // open_inbox with gap-free delivery of durable sends (see above); replayed
  // deliveries carry every route key of the original send. Errors as
  // open_inbox, and invalid_position as subscribe_durable.
  std::error_code open_inbox_durable(std::string_view id, lease_id lease, inbox_handler handler,
                                     durable_options options = {});
  // Positions of a durable inbox (empty if none), as stream_positions_of().
  stream_positions inbox_stream_positions(std::string_view id) const;
  // Records delivered from the log to fill gaps, over all durable
  // subscriptions and inboxes of this client.
  std::uint64_t recovered_total() const noexcept;

  // Sends a payload to the user behind `route_key`: returns the gateway
  // (inbox id) it was routed to, or errc::no_route.
  std::expected<std::string, std::error_code> send(std::string_view route_key, std::span<const std::byte> payload);
  std::expected<std::string, std::error_code> send(std::string_view route_key, std::string_view payload) {
    return send(route_key, std::as_bytes(std::span(payload.data(), payload.size())));
  }
  // Fire and forget, like publish: no answer, so no round trip per send. A
  // send without a route is dropped; the server reports it as a non-fatal
  // error with request id 0, which the library logs. Errors:
  // not_supported, not_connected, payload_too_large, timeout (buffer full),
  // buffer_full (held while reconnecting, like publish).
  std::error_code send_nowait(std::string_view route_key, std::span<const std::byte> payload);
  // One payload to many users (a room): one delivery per gateway.
  std::expected<send_result, std::error_code> send_many(std::span<const std::string_view> route_keys,
                                                        std::span<const std::byte> payload);

  // ---- Offers (capability "offers"; see offer_options above) ----
  // Errors of all: not_supported (the broker did not grant "offers"),
  // not_connected, timeout, and bad_request for arguments the broker would
  // refuse (checked before sending).

  // Sends an offer to the users behind `route_keys` (one delivery per
  // gateway, like send_many) and returns what became of each key; a key
  // without a route is key_outcome::no_route, not an error, even when it
  // is the only one. Blocking. bad_request: offer_id without expires_in,
  // receipt_timeout without offer_id, a negative duration.
  std::expected<offer_result, std::error_code> send_offer(std::span<const std::string_view> route_keys,
                                                          std::span<const std::byte> payload,
                                                          const offer_options& options);
  std::expected<offer_result, std::error_code> send_offer(std::span<const std::string_view> route_keys,
                                                          std::string_view payload, const offer_options& options) {
    return send_offer(route_keys, std::as_bytes(std::span(payload.data(), payload.size())), options);
  }
  // The gateway's side: the user's device took offer `offer_id` (sent to
  // `route_key`; empty = every key of that offer delivered to this
  // connection). The sender gets its receipt and the key leaves the
  // pending list. Fire and forget, like send_nowait: an unknown, expired
  // or withdrawn offer is reported by the broker as an error with request
  // id 0, which the library logs. Errors: not_supported, not_connected,
  // timeout (buffer full; buffer_full at once without wait_for_space),
  // buffer_full (held while reconnecting).
  std::error_code ack(std::uint64_t offer_id, std::string_view route_key = {});
  // Acknowledges m.offer_id for every route key of m (one ack each; an m
  // without keys acks every key of the offer delivered to this
  // connection). Errors as above, and bad_request when m is not an offer
  // (offer_id 0).
  std::error_code ack(const inbox_message& m);
  // Withdraws a live offer sent by this principal: copies not written yet
  // are dropped, gateways that got it are told (on_withdrawn), its pending
  // entries go. Blocking. Errors:
  // not_found (unknown, expired or withdrawn already), forbidden (another
  // principal's offer).
  std::expected<withdraw_result, std::error_code> withdraw(std::uint64_t offer_id);
  // The offers still pending for `route_key` (unexpired, not acked),
  // oldest first, at most `limit` (0 = all the broker keeps per key): what
  // a gateway shows a user who reconnects. Blocking.
  std::expected<std::vector<pending_offer>, std::error_code> pending_offers(std::string_view route_key,
                                                                            std::size_t limit = 0);
  // How many offers each key got in the last `window` (at most the
  // broker's exposure window), in key order. Blocking.
  std::expected<std::vector<std::uint32_t>, std::error_code> exposure(std::span<const std::string_view> route_keys,
                                                                      std::chrono::milliseconds window);

  // ---- The sequence log (capability "log") ----
  // Appends a record; returns once it is durable (fsynced in the server's
  // default mode). Errors: storage_full, bad_request, internal (the server
  // runs without a data dir), not_supported.
  std::expected<append_ack, std::error_code> append(std::string_view stream, std::span<const std::byte> payload);
  void async_append(std::string_view stream, std::span<const std::byte> payload,
                    std::function<void(std::expected<append_ack, std::error_code>)> done);
  // Sends to users through the log: appended to `stream` first, then routed
  // and delivered (carrying stream, seq and epoch) once durable. The record
  // is in the log even for keys without a route. Blocking.
  std::expected<send_result, std::error_code> send_durable(std::span<const std::string_view> route_keys,
                                                           std::string_view stream, std::span<const std::byte> payload);
  // The same with an expiry (capability "offers" too; 0 = none): never
  // written to a gateway `expires_in` after the broker read it, and left
  // out of reads (and so of gap recovery) once the record's timestamp plus
  // `expires_in` has passed. Errors also not_supported (no "offers"),
  // bad_request (negative, or above the broker's max-offer-expiry-ms).
  std::expected<send_result, std::error_code> send_durable(std::span<const std::string_view> route_keys,
                                                           std::string_view stream, std::span<const std::byte> payload,
                                                           std::chrono::milliseconds expires_in);
  // Publishes to `channel` through the log: appended to `stream` first,
  // delivered (carrying stream, seq and epoch) once durable; returns the
  // record's position. Blocking.
  std::expected<append_ack, std::error_code> publish_durable(std::string_view channel, std::string_view stream,
                                                             std::span<const std::byte> payload);
  // The same with an expiry, as send_durable above.
  std::expected<append_ack, std::error_code> publish_durable(std::string_view channel, std::string_view stream,
                                                             std::span<const std::byte> payload,
                                                             std::chrono::milliseconds expires_in);
  // Records from `from_seq` (0 = the first retained) on, at most max_count
  // (0 = server default) and about max_bytes (0 = server default). Errors:
  // not_found (no such stream), trimmed (from_seq was trimmed: read from 0
  // to learn where the stream starts now), corrupted (the record at
  // from_seq is damaged; the broker's message names it, and a read from the
  // next sequence goes on past it; a read that meets damage later returns
  // the records before it), bad_request (stream name not 1..255 bytes).
  std::expected<stream_read, std::error_code> read(std::string_view stream, std::uint64_t from_seq = 0,
                                                   std::size_t max_count = 0, std::size_t max_bytes = 0);

  // ---- Stream administration (capability "log"; blocking, request_timeout) ----
  // Errors: not_found (no such stream), bad_request (stream name 1..255
  // bytes, a limit above 2^53 - 1), internal (the broker has no data dir),
  // not_supported, not_connected, timeout.
  std::expected<stream_summary, std::error_code> stream_info(std::string_view stream);
  // Streams whose name starts with `prefix`, in name order, at most `limit`
  // (0 = the broker's default, 1000; at most 10000); `more`, if given, says
  // whether the list was cut.
  std::expected<std::vector<stream_summary>, std::error_code> stream_list(std::string_view prefix = "",
                                                                          std::size_t limit = 0, bool* more = nullptr);
  // Gives the stream retention limits of its own, replacing earlier ones
  // (all 0 = keep everything, whatever the broker's default); an unknown
  // stream is created, empty. Returns once the change is on disk, with the
  // stream as it is then; the broker trims by the new limits in the
  // background, starting at once.
  std::expected<stream_summary, std::error_code> set_stream_retention(std::string_view stream,
                                                                      const stream_retention& limits);
  // Drops the stream's own limits: the broker's default applies again.
  // Errors as above; not_found for an unknown stream (nothing is created).
  std::expected<stream_summary, std::error_code> clear_stream_retention(std::string_view stream);
  // Deletes the stream: its records, its metadata and its own retention,
  // at once, after the appends this client sent before (a later append
  // starts a new stream of that name, with a new epoch, from sequence 1).
  // Returns once the deletion is on disk, with the stream as it was just
  // before. Durable subscriptions and inboxes that tracked it report
  // stream_gone or epoch_changed (on_unrecoverable). Errors: not_found,
  // bad_request (name), corrupted (a damaged record: nothing is deleted),
  // storage_full, forbidden (an auth file's non-admin principal), and
  // those above. A broker older than this request closes the connection.
  std::expected<stream_summary, std::error_code> delete_stream(std::string_view stream);

  // ---- Server administration (capability "admin": client_options::admin) ----
  // Drains the broker: it refuses new connections (draining) and closes its
  // open ones, this one included, in batches spread evenly over `window`
  // (0 = the broker's --drain-window-ms), then exits. Returns once the
  // broker accepted the request (blocking, request_timeout). Errors:
  // not_supported (admin not granted), not_connected, timeout.
  std::error_code drain(std::chrono::milliseconds window);
  // The broker's version, uptime, settings and every counter and gauge.
  // Errors: not_supported (admin not granted), forbidden, not_connected,
  // timeout.
  std::expected<server_stats, std::error_code> stats();
  // A page of the broker's open connections in `order`, at most `limit`
  // (0 = 100; at most 1000), after `cursor` (0 = the first page, else the
  // next_cursor of the page before). In id order a walk sees every
  // connection that stays open; in the other orders the cursor counts
  // entries, so connections that move between pages may be seen twice or
  // not at all. Errors as stats().
  std::expected<connection_page, std::error_code> connections(connection_order order = connection_order::id,
                                                              std::size_t limit = 0, std::uint64_t cursor = 0);

  // Turns broker flag `name` on for `percent` (0..100) of the connections
  // (by a hash of their client id), at once; returns the flag as it is
  // then. Errors: not_supported (admin not granted), not_found (no such
  // flag), bad_request (percent above 100, checked before sending),
  // forbidden, not_connected, timeout.
  std::expected<flag_info, std::error_code> set_flag(std::string_view name, unsigned percent);
  // Every flag of the broker. Errors as stats().
  std::expected<std::vector<flag_info>, std::error_code> flags();

  // The broker node's view of its cluster: membership, the members and the
  // links to them, etcd's endpoints, the NATS connection. Errors:
  // not_found (the broker is not in cluster mode), and those of stats(). A
  // broker older than this request closes the connection.
  std::expected<cluster_status_info, std::error_code> cluster_status();
  // Declares the durable streams held by node `node_id` lost: their
  // partitions get new holders, where they start again, empty, with new
  // epochs. For a node gone for good. Errors: not_found (not in cluster
  // mode), bad_request (empty, the node asked, or a member now),
  // unavailable (the node asked is cut off from etcd, or etcd did not
  // answer: ask again), and those of stats().
  std::expected<cluster_takeover_info, std::error_code> cluster_takeover(std::string_view node_id);

  // Non-blocking forms for pipelining (many requests in flight): `done`
  // runs on the loop thread; views in it are valid during the call only.
  void async_lease_grant(std::chrono::milliseconds ttl,
                         std::function<void(std::expected<lease_info, std::error_code>)> done);
  void async_lease_keepalive(lease_id id, std::function<void(std::expected<lease_info, std::error_code>)> done);
  void async_registry_put(std::string_view key, std::string_view value, lease_id lease,
                          std::function<void(std::expected<std::uint64_t, std::error_code>)> done);
  void async_send(std::string_view route_key, std::span<const std::byte> payload,
                  std::function<void(std::expected<std::string_view, std::error_code>)> done);
  // send_offer without waiting (capability "offers"): `done` gets what
  // send_offer returns. Refused arguments (bad_request) and not_supported
  // call `done` at once, on the calling thread.
  void async_send_offer(std::span<const std::string_view> route_keys, std::span<const std::byte> payload,
                        const offer_options& options,
                        std::function<void(std::expected<offer_result, std::error_code>)> done);

  // Closes the connection (and stops reconnecting); pending requests fail
  // with not_connected, held publishes are dropped.
  // Blocks until the loop has let go of the connection (not on the loop
  // thread, where it closes without waiting). Idempotent.
  void close();

  // True while a session is up (false while reconnecting).
  bool connected() const noexcept;
  // Reconnect attempts made by this client, over its whole life.
  std::uint64_t reconnect_attempts_total() const noexcept;
  std::uint64_t session_id() const noexcept;  // from the welcome
  // The server process's random instance id, from the welcome; 0 from a
  // server older than the field. Another value after a reconnect means a
  // new server process: the leases, inboxes and registry entries of the
  // old one are gone (its lease ids answer not_found).
  std::uint64_t server_instance() const noexcept;
  const std::string& server_version() const noexcept;  // from the welcome, e.g. "0.1.0"
  std::uint32_t server_max_frame() const noexcept;     // from the welcome
  std::vector<std::string> capabilities() const;       // granted by the server
  std::uint64_t dropped_total() const noexcept;        // sum of dropped notices

 private:
  friend struct detail::access;
  struct impl;
  client(std::shared_ptr<event_loop> loop, std::shared_ptr<impl> p);
  std::shared_ptr<event_loop> loop_;  // declared first: released after impl_
  std::shared_ptr<impl> impl_;
};

// A minimal blocking publisher for scripts and simple services: each
// publish waits until the broker has routed it.
class publisher {
 public:
  static std::expected<publisher, std::error_code> connect(client_options options);
  std::error_code publish(std::string_view channel, std::string_view payload);
  std::error_code publish(std::string_view channel, std::span<const std::byte> payload);
  client& connection() noexcept { return *client_; }

 private:
  explicit publisher(std::unique_ptr<client> c) : client_(std::move(c)) {}
  std::unique_ptr<client> client_;
};

}  // namespace switchyard
