#pragma once
// Configuration of switchyard-server: defaults, command-line flags and the
// optional TOML config file.

#include "storage/durability.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace switchyard::broker {

enum class slow_consumer_policy { drop, disconnect };

struct server_config {
  std::string listen_host = "127.0.0.1";
  std::uint16_t listen_port = 7878;          // 0 = pick a free port
  std::string data_dir = "switchyard-data";  // created if missing
  std::string port_file;                     // if set, the bound port is written here

  // The HTTP monitoring port (http_monitor.hpp; docs/operations.md): off
  // unless http_host is set. It has no authentication, so an address
  // other hosts can reach needs http_public.
  std::string http_host;        // empty = no monitoring port
  std::uint16_t http_port = 0;  // 0 = pick a free port
  bool http_public = false;

  std::uint32_t max_frame = 1u << 20;
  std::uint32_t max_connections = 10000;
  std::chrono::milliseconds hello_timeout{2000};
  std::chrono::milliseconds heartbeat_interval{5000};
  std::size_t max_pending_bytes = 64u << 20;  // per connection, then slow consumer
  // Write coalescing under load (connection::writer; docs/protocol.md §9):
  // while the loop's last read filled its buffer (more input already
  // waiting), a connection with under write_coalesce_bytes queued lets the
  // loop run write_coalesce_turns more turns before it writes (each turn's
  // reads add frames to its queue), but never once its oldest queued frame
  // has waited write_coalesce_time. An idle loop never waits. 0 turns = off.
  int write_coalesce_turns = 2;
  std::chrono::microseconds write_coalesce_time{10'000};
  std::size_t write_coalesce_bytes = 64 * 1024;
  slow_consumer_policy slow_consumer = slow_consumer_policy::drop;
  // SIGTERM/SIGINT: how long the goodbyes (shutting_down) may take to flush
  // before the server exits anyway; also how long a closing connection waits
  // for its peer to read its goodbye.
  std::chrono::milliseconds shutdown_grace{2000};

  // Admission control (admission_control.hpp, docs/protocol.md §9.1).
  // Connections beyond max_connections kept for hellos that ask for the
  // "admin" capability (the CLI), so an operator is never locked out.
  std::uint32_t admin_slots = 4;
  // New hellos per second (a token bucket; hellos asking "admin" are
  // exempt); 0 = no limit. Burst: hellos admitted at once after a quiet
  // spell; 0 = max_hellos_per_s.
  std::uint32_t max_hellos_per_s = 0;
  std::uint32_t hello_burst = 0;
  // Drain (SIGUSR2, or a Drain request with window 0): the window over which
  // the open connections are closed.
  std::chrono::milliseconds drain_window{30'000};
  // Memory a client can make the broker hold for input: a frame must
  // complete within frame_timeout of its first byte, and the incomplete
  // frames of all connections together hold at most max_incomplete_bytes.
  std::chrono::milliseconds frame_timeout{10'000};
  std::size_t max_incomplete_bytes = std::size_t{64} << 20;
  // What one connection may hold (limit_exceeded past it), and what all of
  // them together may create.
  std::size_t max_subscriptions = 10'000;  // patterns per connection
  std::size_t max_inboxes = 1'000;         // inboxes open per connection
  std::size_t max_leases = 10'000'000;     // live leases in the server (private TTL leases included)
  std::size_t max_registry_entries = 10'000'000;

  // Offers (offer_handler.hpp; docs/offers.md): live offers and their
  // bytes in the server (past either the oldest go), offers pending per
  // route key (past it the key's oldest leaves its list), the longest
  // expiry an offer may ask, the longest exposure window (caps and
  // queries) and the route keys whose exposure is counted at once.
  std::size_t max_offers = 100'000;
  std::size_t max_offer_bytes = std::size_t{64} << 20;
  std::size_t max_pending_per_key = 16;
  std::chrono::milliseconds max_offer_expiry{3'600'000};
  std::chrono::milliseconds exposure_window{3'600'000};
  std::size_t max_exposure_keys = 200'000;
  // Server flags at start (--flag NAME=PERCENT; feature_flags.hpp): each
  // known flag starts at 100 unless named here. A reload does not change
  // them (switchyard-cli flags set does, at run time).
  std::vector<std::pair<std::string, std::uint8_t>> flags;

  // Leases (see lease_table.hpp).
  std::chrono::milliseconds lease_min_ttl{1000};
  std::chrono::milliseconds lease_max_ttl{3'600'000};
  std::chrono::milliseconds sweep_period{100};
  std::size_t max_expiries_per_sweep = 10'000;
  // A sweeper this much later than its period was stalled. Negative: the
  // default, stall_threshold_for() derives it from the lease settings.
  std::chrono::milliseconds stall_threshold{-1};

  // The sequence log, in <data_dir>/log (off when data_dir is empty).
  storage::durability durability = storage::durability::sync;
  std::chrono::milliseconds sync_interval{10};  // batch mode: fsync at most this often
  std::size_t log_max_bytes = std::size_t{8} << 30;
  // Default retention for every stream without limits of its own
  // (SetRetention), 0 = no limit; applied in the background in bounded steps.
  std::uint64_t retention_max_records = 0;
  std::chrono::milliseconds retention_max_age{0};
  std::uint64_t retention_max_bytes = 0;
  // The wall clock the log stamps records with and reads compare record
  // expiries against (ms since the Unix epoch); empty = the system clock.
  // Tests inject one; no flag sets it.
  std::function<std::uint64_t()> log_wall_clock_ms;
  // Channels configured as durable (subscription patterns): a publish to a
  // matching channel without a stream of its own is appended to the stream
  // named like the channel, then delivered with its position. Needs the log.
  std::vector<std::string> durable_channels;

  std::string log_level = "info";
  std::string log_format = "text";  // text or json (broker/server/logger_style.hpp); not changed by a reload

  // TLS on the client port (docs/security.md, "TLS"): on when tls_cert is
  // set. The certificate chain and its key (PEM); tls_ca: the CAs client
  // certificates must chain to (PEM); tls_verify_client: mTLS, a client
  // without a certificate those CAs signed is refused in the handshake.
  // TLS 1.2 at least. The files are read again on SIGHUP (new connections
  // use the new certificate; a file that does not load keeps the old one).
  std::string tls_cert;
  std::string tls_key;
  std::string tls_ca;
  bool tls_verify_client = false;
  // Authentication and permissions (docs/security.md): the auth file
  // (TOML: principals, credentials, permissions), read at start (an
  // invalid one: exit 2 with the line at fault) and on SIGHUP (an invalid
  // one keeps the rules in force). Empty: no authentication, and then a
  // non-loopback listen address is refused unless allow_anonymous is set
  // (protected mode, as Redis's).
  std::string auth_file;
  bool allow_anonymous = false;
  // A hello refused unauthorized waits this long before its answer (the
  // same for every failure), and each source address may fail this often
  // per minute (also the burst) before its hellos are answered rate_limited;
  // 0 = no limit.
  std::chrono::milliseconds auth_failure_delay{200};
  std::uint32_t auth_failures_per_min = 10;

  // Cluster mode (docs/cluster.md): on when cluster_node_id is set. The
  // node's id (unique in the cluster), the cluster's name (etcd key prefix
  // and NATS subject prefix), etcd's client endpoints and NATS's URLs, the
  // host:port clients should use to reach this node (empty = --listen's),
  // the node's etcd lease TTL, and how long a Subscribe waits for every
  // other node to hold its interest.
  std::string cluster_node_id;
  std::string cluster_name = "switchyard";
  std::vector<std::string> cluster_etcd;
  std::vector<std::string> cluster_nats;
  std::string cluster_advertise;
  std::uint32_t cluster_lease_ttl_s = 5;
  std::chrono::milliseconds cluster_interest_timeout{1000};
  std::chrono::milliseconds cluster_forward_timeout{2000};
  // Messages to other nodes waiting to be handed to NATS; past it they
  // are dropped (a channel's receivers see the gap).
  std::size_t cluster_nats_queue_bytes = 16u << 20;
  // Out of standing (cut off from etcd) this long, the node drains its
  // clients to the other nodes and exits; 0 = never.
  std::chrono::seconds cluster_drain_after{0};

  // Where the settings came from, for SIGHUP (server::reload): the --config
  // file (empty = none: nothing to reload) and the whole command line it
  // was parsed with (flags still win over the file on a reload).
  std::string config_file;
  std::vector<std::string> command_line;

  // This process's identity, sent in every Welcome (server_instance). 0 =
  // draw a random one at start (getrandom, 64 bits, never 0); tests inject
  // one. Lease ids are XORed with a key derived from it, so that a new
  // process does not hand out the ids of the one before (lease_table.hpp).
  std::uint64_t instance_id = 0;

  // Damage checks of the sequence log (docs/storage.md, "Damage"), each a
  // full walk in a child process that opens the log read-only.
  bool verify_on_start = false;  // before opening the log; refuse to start (exit 1) if it is damaged
  bool verify_log = false;       // check the log in data_dir and exit (0 intact, 1 damaged, 3 cannot check)
  bool verify_json = false;      // --json: the verify report as one JSON object on stdout
};

// Silence allowed past the last frame received before a connection is
// declared dead: two intervals plus half an interval of grace.
inline std::chrono::milliseconds heartbeat_deadline(std::chrono::milliseconds interval) {
  return interval * 2 + interval / 2;
}

// The stall threshold in force: the configured one, or by default half the
// shortest TTL less one sweep period, but at least one sweep period (a
// sweep's own duration and a busy loop must not count as stalls). Then the
// lease time that passes during a pause before it counts as a stall,
// threshold plus period, is at most half the shortest TTL (when the sweep
// period is at most a quarter of it, as with the defaults), so a lease kept
// alive at least every TTL/2 never expires because the broker was paused.
inline std::chrono::milliseconds stall_threshold_for(const server_config& c) {
  if (c.stall_threshold.count() >= 0) return c.stall_threshold;
  return std::max(c.sweep_period, c.lease_min_ttl / 2 - c.sweep_period);
}

// The address to bind for a --listen host: an IPv4 or IPv6 literal (an
// IPv6 one may be in brackets), or "localhost" (127.0.0.1). Empty when the
// host is none of these; host names are not resolved (a broker should not
// depend on DNS to start).
std::string listen_address(std::string_view host);
// True when `host` (as listen_address takes it) is a loopback address
// (127.0.0.0/8, ::1, ::ffff:127.x.y.z, localhost).
bool is_loopback_host(std::string_view host);

// Thrown by parse_server_args when the process should exit at once: after
// --help/--version (code 0, text for stdout) or a flag/config error
// (non-zero code, message).
struct cli_exit {
  int code;
  std::string output;
};

// Parses argv and the TOML file named by --config (flags win). Throws
// cli_exit (see above) or std::invalid_argument naming the bad setting.
server_config parse_server_args(int argc, const char* const* argv);

// Checks ranges; throws std::invalid_argument naming the bad setting.
void validate(const server_config& cfg);

// parse_server_args again on cfg.command_line (a SIGHUP: the config file
// is read anew, flags still win). Throws like parse_server_args.
server_config reparse_server_args(const server_config& cfg);

}  // namespace switchyard::broker
