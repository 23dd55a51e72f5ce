#include "broker/config/setting_table.hpp"

#include "broker/tables/feature_flags.hpp"

#include "protocol/limits.hpp"
#include "settings/setting_rows.hpp"

#include <CLI/CLI.hpp>

#include <array>
#include <chrono>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace switchyard::broker {

namespace {

// The machinery is settings/'s (setting_rows.hpp); the rows below are
// the broker's.
using std::chrono::milliseconds;
using row = settings::row<server_config>;
using settings::address;
using settings::as_int64;
using settings::choice;
using settings::count_of;
using settings::duration;
using settings::flag_ramp;
using settings::follows;
using settings::integer;
using settings::offset_of;
using settings::repeated;
using settings::text;
using settings::toggle;
using settings::unbounded;
using settings::value_of;

std::vector<setting> build() {
  using c = server_config;
  std::vector<row> rows;
  const auto add = [&rows](row r) { rows.push_back(std::move(r)); };

  // Where it listens and keeps its data.
  add(address("listen", &c::listen_host, &c::listen_port, "host:port to listen on (port 0 = any free port)")
          .doc("host:port (port 0 = any free port)"));
  add(text("data-dir", &c::data_dir, "data folder (created if missing)")
          .doc("data folder, created if missing; the sequence log lives in `<data-dir>/log` (an empty value turns "
               "the log off)")
          .stats());
  add(text("port-file", &c::port_file, "write the bound port to this file once listening")
          .doc("write the bound port there once listening"));
  add(address("http", &c::http_host, &c::http_port,
              "host:port of the HTTP monitoring port (/metrics, /healthz, /readyz, /stats, /connz, /; port 0 = any "
              "free port). Off by default")
          .doc("host:port of the HTTP monitoring port: `/metrics` (Prometheus), `/healthz`, `/readyz`, `/stats`, "
               "`/connz`, `/` (a status page); port 0 = any free port (\"The monitoring port\" below)"));
  add(toggle("http-public", &c::http_public,
             "allow --http on an address other hosts can reach (the monitoring port has no authentication)")
          .doc("allow `--http` on an address other hosts can reach (the monitoring port has no authentication; "
               "refused otherwise, exit 2)"));

  // Connections and frames.
  add(integer("max-frame", &c::max_frame, "largest accepted frame in bytes", "bytes")
          .range({protocol::min_max_frame}, {64 << 20}, value_of(&c::max_frame))
          .stats());
  add(integer("max-connections", &c::max_connections, "connection cap")
          .doc("connection cap; excess connections get `too_many_connections` with a retry hint "
               "([`docs/protocol.md`](protocol.md) §9.1)")
          .range({1}, {unbounded}, value_of(&c::max_connections))
          .reloadable()
          .stats());
  add(integer("admin-slots", &c::admin_slots,
              "connections beyond max-connections kept for clients asking the \"admin\" capability (the CLI)")
          .doc("connections beyond `--max-connections` kept for clients asking the `admin` capability "
               "(`switchyard-cli`), so an operator is never locked out (with `--auth-file`, admin principals only; "
               "without one, anyone may ask)")
          .range({0}, {1000}, value_of(&c::admin_slots))
          .reloadable());
  add(integer("max-hellos-per-s", &c::max_hellos_per_s,
              "new hellos admitted per second (token bucket; admin hellos exempt); others get rate_limited with a "
              "retry hint. 0 = no limit")
          .doc("new hellos admitted per second (token bucket; admin hellos exempt); excess hellos get `rate_limited` "
               "with a retry hint that spreads them one token apart; 0 = no limit")
          .reloadable());
  add(integer("hello-burst", &c::hello_burst, "hellos admitted at once after a quiet spell (0 = max-hellos-per-s)")
          .doc("hellos admitted at once after a quiet spell (0 = `--max-hellos-per-s`; needs it)")
          .reloadable());
  add(duration("drain-window-ms", &c::drain_window,
               "SIGUSR2 (or a Drain request without a window): close the connections spread over this long, then "
               "exit")
          .doc("SIGUSR2 (or `switchyard-cli drain` without `--window`): close the connections spread over this "
               "long, then exit")
          .range({1}, {86'400'000}, count_of(&c::drain_window))
          .reloadable());
  add(duration("shutdown-grace-ms", &c::shutdown_grace,
               "SIGTERM: time the shutting_down goodbyes may take before the server exits anyway")
          .doc("SIGTERM: how long the `shutting_down` goodbyes may take before the server exits anyway")
          .range({1}, {600'000}, count_of(&c::shutdown_grace))
          .reloadable());
  add(duration("hello-timeout-ms", &c::hello_timeout, "time a new connection has to send its hello")
          .range({1}, {unbounded}, count_of(&c::hello_timeout))
          .reloadable());
  // At most an hour: the deadline (heartbeat_deadline, 2.5 intervals) must
  // not overflow, and the Welcome carries the interval as 32 bits.
  add(duration("heartbeat-ms", &c::heartbeat_interval,
               "server ping interval; a connection silent for 2.5 intervals is closed")
          .range({10}, {3'600'000}, count_of(&c::heartbeat_interval))
          .stats());
  add(integer("max-pending-bytes", &c::max_pending_bytes,
              "per-connection outbound queue limit; past it the connection is a slow consumer", "bytes")
          .doc("per-connection outbound queue; past it the connection is a slow consumer")
          .range(follows<c>("max-frame", [](const c& x) { return as_int64(x.max_frame); }), {unbounded},
                 value_of(&c::max_pending_bytes))
          .stats());
  add(integer("write-coalesce-turns", &c::write_coalesce_turns,
              "under load (more input already waiting), a connection's write waits up to this many loop turns for "
              "more frames; never while idle; 0 = off")
          .doc("under load (the last read filled its buffer), a connection's write waits up to this many loop "
               "turns for more frames; never while the loop is idle; 0 = off")
          .range({0}, {64}, value_of(&c::write_coalesce_turns))
          .reloadable());
  add(duration("write-coalesce-us", &c::write_coalesce_time,
               "a write that waits for more frames never waits past this long after its oldest queued frame")
          .doc("a write that waits for more frames never waits once its oldest queued frame has waited this long "
               "(0 = off)")
          .range({0}, {1'000'000}, count_of(&c::write_coalesce_time))
          .reloadable());
  add(integer("write-coalesce-bytes", &c::write_coalesce_bytes,
              "a connection with this much queued writes at once, under load or not", "bytes")
          .default_rule("65536, at most `--max-pending-bytes`",
                        [](c& x) { x.write_coalesce_bytes = std::min<std::size_t>(64 * 1024, x.max_pending_bytes); })
          .range({1}, follows<c>("max-pending-bytes", [](const c& x) { return as_int64(x.max_pending_bytes); }),
                 value_of(&c::write_coalesce_bytes))
          .reloadable());
  add(duration("frame-timeout-ms", &c::frame_timeout,
               "a frame must complete this long after its first byte arrived, or the connection is closed")
          .doc("a frame must complete this long after its first byte, or the connection is closed "
               "(`limit_exceeded`)")
          .range({1}, {unbounded}, count_of(&c::frame_timeout))
          .reloadable());
  add(integer("max-incomplete-bytes", &c::max_incomplete_bytes,
              "memory all connections' incomplete frames may hold together; past it the connection whose frame "
              "would grow is closed",
              "bytes")
          .doc("memory the incomplete frames of all connections may hold together; past it the connection whose "
               "frame would grow is closed")
          .range(follows<c>("max-frame", [](const c& x) { return as_int64(x.max_frame); }), {unbounded},
                 value_of(&c::max_incomplete_bytes)));

  // What clients may make the broker hold.
  add(integer("max-subscriptions", &c::max_subscriptions, "subscription patterns one connection may hold")
          .range({1}, {unbounded}, value_of(&c::max_subscriptions))
          .reloadable());
  add(integer("max-inboxes", &c::max_inboxes, "inboxes one connection may have open")
          .range({1}, {unbounded}, value_of(&c::max_inboxes))
          .reloadable());
  add(integer("max-leases", &c::max_leases, "live leases in the server (a registry entry's own TTL is one)")
          .doc("live leases in the server (an entry with its own TTL takes one)")
          .range({1}, {unbounded}, value_of(&c::max_leases))
          .reloadable());
  add(integer("max-registry-entries", &c::max_registry_entries, "registry entries in the server")
          .range({1}, {unbounded}, value_of(&c::max_registry_entries))
          .reloadable());

  // Offers (the tables are sized at start).
  add(integer("max-offers", &c::max_offers, "live offers in the server; past it the oldest are forgotten")
          .doc("live offers in the server; past it the oldest are forgotten (`offers_evicted_total`; "
               "[`docs/offers.md`](offers.md))")
          .range({1}, {unbounded}, value_of(&c::max_offers)));
  add(integer("max-offer-bytes", &c::max_offer_bytes,
              "bytes of live offers (payloads, keys, bookkeeping); past it the oldest are forgotten", "bytes")
          .doc("bytes live offers may hold (payloads, keys, bookkeeping, the users' pending lists); past it the "
               "oldest are forgotten")
          .range({1}, {unbounded}, value_of(&c::max_offer_bytes)));
  add(integer("max-pending-per-key", &c::max_pending_per_key,
              "offers pending per route key; past it the key's oldest leaves its pending list")
          .range({1}, {unbounded}, value_of(&c::max_pending_per_key)));
  add(duration("max-offer-expiry-ms", &c::max_offer_expiry, "longest expiry a publish, send or offer may ask")
          .range({1}, {unbounded}, count_of(&c::max_offer_expiry))
          .reloadable());
  add(duration("exposure-window-ms", &c::exposure_window,
               "longest rolling window of an exposure cap or query; counts older than this are forgotten")
          .range({1}, {unbounded}, count_of(&c::exposure_window)));
  add(integer("max-exposure-keys", &c::max_exposure_keys,
              "route keys whose offers are counted for caps at once; offers to new keys past it are not counted")
          .doc("route keys whose offers are counted for caps at once (about 230 bytes each); offers to new keys "
               "past it are not counted (`exposure_untracked_total`)")
          .range({1}, {unbounded}, value_of(&c::max_exposure_keys)));
  add(flag_ramp<c>(
          "flag", &c::flags, [](std::string_view name) { return feature_flags::find(name).has_value(); }, "offers",
          "NAME=PERCENT: a server flag's share of connections at start (0..100; known: offers; default "
          "100); repeatable")
          .doc("`NAME=PERCENT`: a server flag's share of connections at start (repeatable; the only flag is "
               "`offers`, [`docs/protocol.md`](protocol.md) §15.6). `switchyard-cli flags set` changes flags at "
               "once; a reload does not")
          .default_rule("`offers=100`"));
  add(choice("slow-consumer", &c::slow_consumer, std::array<std::string_view, 2>{"drop", "disconnect"},
             "what to do with a slow consumer: drop or disconnect")
          .doc("`drop` (count, then send a \"dropped N\" notice) or `disconnect`")
          .reloadable()
          .stats());

  // Leases.
  add(duration("lease-min-ttl-ms", &c::lease_min_ttl, "shortest lease TTL granted (shorter asks are raised)")
          .range({1}, {unbounded}, count_of(&c::lease_min_ttl)));
  add(duration("lease-max-ttl-ms", &c::lease_max_ttl, "longest lease TTL granted (longer asks are lowered)")
          .range(follows<c>("lease-min-ttl-ms",
                            [](const c& x) { return static_cast<std::int64_t>(x.lease_min_ttl.count()); }),
                 {7 * 24 * 3'600'000}, count_of(&c::lease_max_ttl)));
  add(duration("sweep-ms", &c::sweep_period, "lease sweeper period: leases expire at most this late")
          .range({1},
                 follows<c>("lease-min-ttl-ms",
                            [](const c& x) { return static_cast<std::int64_t>(x.lease_min_ttl.count()); }),
                 count_of(&c::sweep_period)));
  add(integer("max-expiries-per-sweep", &c::max_expiries_per_sweep,
              "leases expired per sweep at most; the rest wait for the next turn")
          .range({1}, {unbounded}, value_of(&c::max_expiries_per_sweep)));
  {
    row r = duration("stall-threshold-ms", &c::stall_threshold,
                     "a sweeper this late was stalled: every lease then gets its full TTL from the stall's end");
    // Unset is -1 (stall_threshold_for derives it); a given value may not be negative.
    r.s.add = [help = r.s.help](CLI::App& app, server_config& into) {
      return app.add_option_function<std::int64_t>(
          "--stall-threshold-ms",
          [&into](std::int64_t v) {
            if (v < 0) throw std::invalid_argument("stall-threshold-ms must not be negative");
            into.stall_threshold = milliseconds(v);
          },
          std::string(help));
    };
    r.s.show = [](const server_config& x) {
      return x.stall_threshold.count() < 0 ? std::string() : std::to_string(x.stall_threshold.count());
    };
    add(std::move(r)
            .doc("a sweeper this late was stalled: every lease then gets at least its full TTL from the end of the "
                 "stall")
            .default_rule("`lease-min-ttl-ms`/2 − `sweep-ms`, at least `sweep-ms` (400)")
            .check("at least `--sweep-ms`, and with it at most half of `--lease-min-ttl-ms`", [](const c& x) {
              if (x.stall_threshold.count() < 0) return;  // the default
              // threshold + sweep > min_ttl / 2, without the sum (a huge threshold overflowed)
              if (x.stall_threshold < x.sweep_period || x.stall_threshold > x.lease_min_ttl / 2 - x.sweep_period)
                throw std::invalid_argument(
                    "stall-threshold-ms must be at least sweep-ms, and with sweep-ms at most half of "
                    "lease-min-ttl-ms (a longer pause could expire leases that were kept alive in time); leave it "
                    "unset for the default");
            }));
  }

  // The sequence log.
  add(choice("durability", &c::durability, std::array<std::string_view, 3>{"sync", "batch", "none"},
             "sequence log: sync (acknowledged = fsynced), batch (fsync every --sync-interval-ms) or none")
          .doc("sequence log: `sync` (acknowledged = fsynced), `batch` (fsync every `--sync-interval-ms`), `none`")
          .stats());
  add(duration("sync-interval-ms", &c::sync_interval, "batch durability: fsync at most this often")
          .range({1}, {unbounded}, count_of(&c::sync_interval)));
  add(integer("log-max-bytes", &c::log_max_bytes,
              "largest size of the sequence log; then appends fail with storage_full", "bytes")
          .doc("largest sequence log; then (or when the disk is full) appends fail with `storage_full`")
          .range({4 << 20}, {unbounded}, value_of(&c::log_max_bytes)));
  add(integer("retention-max-records", &c::retention_max_records, "keep at most this many records per stream (0 = all)")
          .doc("keep at most this many records per stream (0 = all); trimmed in each commit and in the background"));
  add(duration("retention-max-age-ms", &c::retention_max_age, "drop records older than this (0 = keep)")
          .range({0}, {unbounded}, count_of(&c::retention_max_age)));
  add(integer("retention-max-bytes", &c::retention_max_bytes,
              "keep at most this many record bytes (payload + delivery destination) per stream (0 = all)", "bytes"));
  add(repeated("durable-channel", &c::durable_channels,
               "channel pattern whose publishes go through the log (stream = channel name); repeatable")
          .doc("channel pattern whose plain publishes go through the log, into the stream named like the channel "
               "(repeatable; needs `--data-dir`)"));
  add(toggle("verify-on-start", &c::verify_on_start,
             "check the whole sequence log (in a child process) before opening it; refuse to start if damaged")
          .doc("check the whole sequence log (in a child process) before opening it; a damaged log: exit 1 "
               "([`docs/storage.md`](storage.md), \"Damage\")"));
  add(toggle("verify-log", &c::verify_log,
             "check the sequence log in --data-dir and exit: 0 intact, 1 damaged, 3 cannot check (safe next to a "
             "running broker)")
          .doc("check the sequence log in `--data-dir` and exit: 0 intact, 1 damaged, 3 nothing to check; safe "
               "next to a running broker"));
  add(toggle("json", &c::verify_json, "with --verify-log: print the report as one JSON object on stdout")
          .doc("with `--verify-log`: the report as one JSON object on stdout"));

  // TLS: the files are read again on SIGHUP (on or off is fixed at start).
  add(text("tls-cert", &c::tls_cert,
           "TLS on the client port: certificate chain (PEM); with --tls-key. Re-read on SIGHUP")
          .doc("TLS on the client port: the broker's certificate chain (PEM); needs `--tls-key`. TLS 1.2 at least; "
               "plain clients are refused ([`docs/security.md`](security.md), \"TLS\"). Read again on SIGHUP; "
               "turning TLS on or off takes a restart")
          .reloadable());
  add(text("tls-key", &c::tls_key, "private key of --tls-cert (PEM, unencrypted)")
          .doc("the private key of `--tls-cert` (PEM, unencrypted)")
          .reloadable());
  add(text("tls-ca", &c::tls_ca, "CAs (PEM) that client certificates must chain to").reloadable());
  add(toggle("tls-verify-client", &c::tls_verify_client,
             "mTLS: refuse clients without a certificate signed by --tls-ca")
          .doc("mTLS: refuse clients without a certificate signed by `--tls-ca` (needs `--tls-ca`)")
          .reloadable());

  // Authentication.
  add(text("auth-file", &c::auth_file,
           "authentication and permissions: TOML file of principals (docs/security.md). Re-read on SIGHUP")
          .doc("authentication and permissions: a TOML file of principals, their credentials (token hashes, Ed25519 "
               "public keys, client certificate subjects) and what each may do ([`docs/security.md`](security.md)); "
               "an invalid file: exit 2 with its line. The file is read again on SIGHUP; naming another file takes "
               "a restart"));
  add(toggle("allow-anonymous", &c::allow_anonymous,
             "without --auth-file, listen on a non-loopback address all the same (anyone may do anything)")
          .doc("without `--auth-file`, listen on a non-loopback address all the same: anyone who connects may do "
               "everything (protected mode refuses that otherwise, exit 2)"));
  add(duration("auth-failure-delay-ms", &c::auth_failure_delay, "how long a refused hello waits for its unauthorized")
          .doc("a hello that fails authentication is answered `unauthorized` after this delay, the same for every "
               "cause")
          .range({0}, {10'000}, count_of(&c::auth_failure_delay))
          .reloadable());
  add(integer("auth-failures-per-min", &c::auth_failures_per_min,
              "failed hellos per source address per minute before it is rate limited (0 = no limit)")
          .doc("failed authentications per source address per minute (and burst) before its hellos are answered "
               "`rate_limited`; 0 = no limit")
          .reloadable());

  // Cluster mode (docs/cluster.md).
  const auto name_check = [](std::string_view flag, std::string_view v) {
    if (v.empty() || v.size() > 64 ||
        v.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != std::string::npos)
      throw std::invalid_argument(std::string(flag) + " must be 1..64 letters, digits, '_' or '-'");
  };
  add(text("cluster-node-id", &c::cluster_node_id,
           "cluster mode: this node's id, unique in the cluster (needs --cluster-etcd and --cluster-nats). Off by "
           "default: one node")
          .doc("cluster mode ([`docs/cluster.md`](cluster.md)): this node's id, unique in the cluster; needs "
               "`--cluster-etcd` and `--cluster-nats`. Empty: a single node, as without cluster mode")
          .check("1..64 letters, digits, `_`, `-`",
                 [name_check](const server_config& c) {
                   if (c.cluster_node_id.empty()) return;
                   name_check("cluster-node-id", c.cluster_node_id);
                   if (c.cluster_etcd.empty() || c.cluster_nats.empty())
                     throw std::invalid_argument("cluster-node-id needs --cluster-etcd and --cluster-nats");
                 })
          .stats());
  add(text("cluster-name", &c::cluster_name,
           "cluster mode: the cluster's name (etcd key prefix /switchyard/<name>/, NATS subjects <name>.*)")
          .doc("the cluster's name: its keys in etcd are under `/switchyard/<name>/`, its NATS subjects `<name>.*`; "
               "clusters sharing etcd and NATS need different names")
          .check("1..64 letters, digits, `_`, `-`",
                 [name_check](const server_config& c) { name_check("cluster-name", c.cluster_name); }));
  add(repeated("cluster-etcd", &c::cluster_etcd,
               "cluster mode: an etcd client endpoint, host:port or http://host:port (repeatable)")
          .doc("an etcd client endpoint, `host:port` or `http://host:port` (repeatable; list every member)"));
  add(repeated("cluster-nats", &c::cluster_nats, "cluster mode: a NATS server URL, nats://host:port (repeatable)")
          .doc("a NATS server URL, `nats://host:port` (repeatable; the first is the node's nearest). NATS's "
               "`max_payload` must exceed `--max-frame` by 1 KiB (checked at start)"));
  add(text("cluster-advertise", &c::cluster_advertise,
           "cluster mode: host:port clients use to reach this node (default: --listen's)")
          .default_rule("`--listen`'s address"));
  add(integer("cluster-lease-ttl-s", &c::cluster_lease_ttl_s,
              "cluster mode: TTL of the node's etcd lease; a node silent this long leaves the cluster", "s")
          .doc("TTL of the node's etcd lease: a node that cannot renew it (dead, cut off from etcd, or its loop "
               "stuck) leaves the cluster this long after its last renewal")
          .range({2}, {60}, value_of(&c::cluster_lease_ttl_s)));
  add(duration("cluster-interest-timeout-ms", &c::cluster_interest_timeout,
               "cluster mode: how long a Subscribe waits for every other node to hold its interest")
          .doc("how long a Subscribe waits for every other node to acknowledge its interest; a node silent longer "
               "is presumed down, the Subscribe answered, and the node sent the whole interest when it answers")
          .range({100}, {60'000}, count_of(&c::cluster_interest_timeout)));
  add(duration("cluster-forward-timeout-ms", &c::cluster_forward_timeout,
               "cluster mode: how long a request forwarded to another node waits for its answer")
          .doc("how long a request this node forwards to another node (a send to a user whose gateway is "
               "elsewhere, a route put confirmed by its partition's owner, a request about a durable stream "
               "another node holds) waits for the answer; then it is answered outcome_unknown (a send or a stream "
               "request: it may or may not have been carried out) or unavailable (a put)")
          .range({100}, {60'000}, count_of(&c::cluster_forward_timeout)));
  add(integer("cluster-nats-queue-bytes", &c::cluster_nats_queue_bytes,
              "cluster mode: messages to other nodes waiting to be handed to NATS; past it they are dropped", "bytes")
          .doc("messages to other nodes waiting to be handed to NATS (a slow or unreachable NATS server makes "
               "them wait; the link uses at least `--max-frame` plus 1 KiB). Past it they are dropped: a channel's "
               "subscribers on the other nodes see "
               "the gap (`Dropped`), a forwarded request is answered at its timeout. A rebuild's answer, the one "
               "large thing a node sends at once, is paced to stay within a quarter of it")
          .range({1 << 20}, {unbounded}, value_of(&c::cluster_nats_queue_bytes)));
  add(duration("cluster-drain-after-s", &c::cluster_drain_after,
               "cluster mode: out of standing (cut off from etcd) this long, drain the clients to the other nodes "
               "and exit 75; 0 = never")
          .doc("a node out of standing (cut off from etcd) this long drains its clients to the other nodes over "
               "`drain-window-ms`, as SIGUSR2 does, and exits 75, for its supervisor to start it again. 0: never "
               "(the default: when etcd itself is down every node is cut off at once, and draining them all would "
               "turn an etcd outage into a total one)")
          .range({0}, {86'400}, count_of(&c::cluster_drain_after))
          .reloadable());

  // Logs.
  add(text("log-level", &c::log_level, "trace, debug, info, warn, error, critical or off",
           {"trace", "debug", "info", "warn", "error", "critical", "off"})
          .reloadable());
  add(text("log-format", &c::log_format,
           "text (ISO 8601 time with UTC offset, logger, level, message) or json (one object per line: time, level, "
           "logger, msg)",
           {"text", "json"})
          .doc("`text`: one line per event, `2026-12-01T16:12:05.123+00:00 [broker] [info] ...` (ISO 8601 with the "
               "UTC offset); `json`: one object per line, `{\"time\":...,\"level\":...,\"logger\":\"broker\","
               "\"msg\":...}`, for log shippers"));

  std::vector<setting> out;
  out.reserve(rows.size());
  for (auto& r : rows) out.push_back(std::move(r.s));
  return out;
}

}  // namespace

std::span<const setting> settings() {
  static const std::vector<setting> table = build();
  return table;
}

const setting* find_setting(std::string_view name) { return settings::find(settings(), name); }

std::span<const std::size_t> internal_fields() {
  static const std::vector<std::size_t> fields{
      offset_of(&server_config::config_file),
      offset_of(&server_config::command_line),
      offset_of(&server_config::instance_id),
      offset_of(&server_config::log_wall_clock_ms),
  };
  return fields;
}

std::string settings_markdown() {
  return settings::markdown(settings(), server_config{},
                            "| `--config` | – | – | – | TOML file with any of these settings, long names as keys |\n");
}

}  // namespace switchyard::broker
