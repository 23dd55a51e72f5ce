#include "broker/server_config.hpp"

#include "broker/feature_flags.hpp"
#include "broker/toml_config.hpp"

#include "protocol/channel_name.hpp"
#include "protocol/limits.hpp"

#include <CLI/CLI.hpp>

#include <charconv>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <utility>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

namespace switchyard::broker {

std::string listen_address(std::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host == "localhost") return "127.0.0.1";
  const std::string text(host);
  in_addr v4{};
  if (::inet_pton(AF_INET, text.c_str(), &v4) == 1) return text;  // dotted quad only ("127.0.0" is not)
  if (text.find(':') == std::string::npos) return {};
  // IPv6, numeric only (no DNS), scope ids included ("fe80::1%eth0").
  addrinfo hints{};
  hints.ai_flags = AI_NUMERICHOST;
  hints.ai_family = AF_INET6;
  addrinfo* found = nullptr;
  if (::getaddrinfo(text.c_str(), nullptr, &hints, &found) != 0) return {};
  ::freeaddrinfo(found);
  return text;
}

bool is_loopback_host(std::string_view host) {
  const std::string address = listen_address(host);
  if (address.empty()) return false;
  in_addr v4{};
  if (::inet_pton(AF_INET, address.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, address.c_str(), &v6) != 1) return false;
  if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
  return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
}

void validate(const server_config& cfg) {
  auto bad = [](const std::string& what) { throw std::invalid_argument(what); };
  if (cfg.max_frame < protocol::min_max_frame || cfg.max_frame > (64u << 20))
    bad("max-frame must be between 16384 and 67108864 bytes");
  if (cfg.max_connections < 1) bad("max-connections must be at least 1");
  if (cfg.admin_slots > 1000) bad("admin-slots must be at most 1000");
  if (cfg.hello_burst > 0 && cfg.max_hellos_per_s == 0) bad("hello-burst needs max-hellos-per-s");
  if (cfg.shutdown_grace.count() < 1 || cfg.shutdown_grace > std::chrono::minutes(10))
    bad("shutdown-grace-ms must be between 1 and 600000");
  if (cfg.drain_window.count() < 1 || cfg.drain_window > std::chrono::hours(24))
    bad("drain-window-ms must be between 1 and 86400000");
  if (cfg.hello_timeout.count() < 1) bad("hello-timeout-ms must be at least 1");
  // At most an hour: the deadline (heartbeat_deadline, 2.5 intervals) must
  // not overflow, and the Welcome carries the interval as 32 bits.
  if (cfg.heartbeat_interval.count() < 10 || cfg.heartbeat_interval > std::chrono::hours(1))
    bad("heartbeat-ms must be between 10 and 3600000");
  if (cfg.max_pending_bytes < cfg.max_frame) bad("max-pending-bytes must be at least max-frame");
  if (cfg.write_coalesce_turns < 0 || cfg.write_coalesce_turns > 64)
    bad("write-coalesce-turns must be between 0 and 64");
  if (cfg.write_coalesce_time.count() < 0 || cfg.write_coalesce_time > std::chrono::seconds(1))
    bad("write-coalesce-us must be between 0 and 1000000");
  if (cfg.write_coalesce_bytes < 1 || cfg.write_coalesce_bytes > cfg.max_pending_bytes)
    bad("write-coalesce-bytes must be between 1 and max-pending-bytes");
  if (cfg.frame_timeout.count() < 1) bad("frame-timeout-ms must be at least 1");
  if (cfg.max_incomplete_bytes < cfg.max_frame) bad("max-incomplete-bytes must be at least max-frame");
  if (cfg.max_offers < 1 || cfg.max_offer_bytes < 1 || cfg.max_pending_per_key < 1 || cfg.max_exposure_keys < 1)
    bad("max-offers, max-offer-bytes, max-pending-per-key and max-exposure-keys must be at least 1");
  if (cfg.max_subscriptions < 1 || cfg.max_inboxes < 1 || cfg.max_leases < 1 || cfg.max_registry_entries < 1)
    bad("max-subscriptions, max-inboxes, max-leases and max-registry-entries must be at least 1");
  if (cfg.listen_host.empty()) bad("listen address needs a host");
  if (listen_address(cfg.listen_host).empty())
    bad("listen host \"" + cfg.listen_host + "\" is not an IPv4 or IPv6 address or localhost");
  std::error_code fs_ec;
  if (!cfg.http_host.empty() && listen_address(cfg.http_host).empty())
    bad("http host \"" + cfg.http_host + "\" is not an IPv4 or IPv6 address or localhost");
  if (!cfg.http_host.empty() && !cfg.http_public && !is_loopback_host(cfg.http_host))
    bad("refusing to serve monitoring on " + cfg.http_host +
        ": the HTTP port has no authentication and shows connection names, principals and addresses. Serve it "
        "on 127.0.0.1 (behind a proxy or an SSH tunnel), or give --http-public to expose it on purpose");
  if (cfg.http_public && cfg.http_host.empty()) bad("http-public needs --http");
  if (!cfg.port_file.empty() && std::filesystem::is_directory(cfg.port_file, fs_ec))
    bad("port-file \"" + cfg.port_file + "\" is a directory; name a file");
  if (cfg.lease_min_ttl.count() < 1) bad("lease-min-ttl-ms must be at least 1");
  if (cfg.lease_max_ttl < cfg.lease_min_ttl || cfg.lease_max_ttl > std::chrono::hours(24 * 7))
    bad("lease-max-ttl-ms must be between lease-min-ttl-ms and one week");
  if (cfg.sweep_period.count() < 1 || cfg.sweep_period > cfg.lease_min_ttl)
    bad("sweep-ms must be between 1 and lease-min-ttl-ms");
  if (cfg.lease_max_ttl / cfg.sweep_period > 50'000'000) bad("lease-max-ttl-ms / sweep-ms is too large");
  if (cfg.max_expiries_per_sweep < 1) bad("max-expiries-per-sweep must be at least 1");
  if (cfg.stall_threshold.count() >= 0 &&
      // threshold + sweep > min_ttl / 2, without the sum (a huge threshold overflowed)
      (cfg.stall_threshold < cfg.sweep_period || cfg.stall_threshold > cfg.lease_min_ttl / 2 - cfg.sweep_period))
    bad("stall-threshold-ms must be at least sweep-ms, and with sweep-ms at most half of lease-min-ttl-ms (a "
        "longer pause could expire leases that were kept alive in time); leave it unset for the default");
  if (cfg.sync_interval.count() < 1) bad("sync-interval-ms must be at least 1");
  if (cfg.log_max_bytes < (std::size_t{4} << 20)) bad("log-max-bytes must be at least 4 MiB");
  if (cfg.retention_max_age.count() < 0) bad("retention-max-age-ms must not be negative");
  for (const auto& pattern : cfg.durable_channels)
    if (!protocol::is_valid_pattern(pattern)) bad("durable-channel \"" + pattern + "\" is not a valid channel pattern");
  if (!cfg.durable_channels.empty() && cfg.data_dir.empty())
    bad("durable-channel needs the sequence log: set --data-dir");
  if ((cfg.verify_log || cfg.verify_on_start) && cfg.data_dir.empty())
    bad("verify-log and verify-on-start check the sequence log: set --data-dir");
  if (cfg.tls_cert.empty() != cfg.tls_key.empty()) bad("tls-cert and tls-key go together: set both or neither");
  if (!cfg.tls_ca.empty() && cfg.tls_cert.empty()) bad("tls-ca needs TLS: set tls-cert and tls-key");
  if (cfg.tls_verify_client && cfg.tls_ca.empty())
    bad("tls-verify-client needs tls-ca (the CAs client certificates must chain to)");
  if (cfg.verify_json && !cfg.verify_log) bad("json is an output of --verify-log");
  if (cfg.auth_failure_delay.count() < 0 || cfg.auth_failure_delay > std::chrono::seconds(10))
    bad("auth-failure-delay-ms must be between 0 and 10000");
  if (!cfg.auth_file.empty() && cfg.allow_anonymous)
    bad("allow-anonymous and auth-file exclude each other: with an auth file every client authenticates");
  // Protected mode: no authentication on an address others can reach is a
  // mistake unless said on purpose.
  if (cfg.auth_file.empty() && !cfg.allow_anonymous && !cfg.verify_log && !is_loopback_host(cfg.listen_host))
    bad("refusing to listen on " + cfg.listen_host +
        " without authentication (protected mode): anyone who reaches the port could publish, subscribe and "
        "revoke anything. Give --auth-file FILE (docs/security.md), or --allow-anonymous to accept anonymous "
        "clients on purpose, or listen on 127.0.0.1");
}

namespace {

// "host:port" of --listen or --http. Throws std::invalid_argument naming
// the option.
std::pair<std::string, std::uint16_t> split_host_port(std::string_view option, const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos) throw std::invalid_argument(std::string(option) + " must be host:port");
  const std::string_view port_text = std::string_view(text).substr(colon + 1);
  unsigned port = 0;
  const auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc{} || end != port_text.data() + port_text.size() || port_text.empty() || port > 65535)
    throw std::invalid_argument(std::string(option) + " port must be a number 0..65535");
  return {text.substr(0, colon), static_cast<std::uint16_t>(port)};
}

}  // namespace

server_config parse_server_args(int argc, const char* const* argv) {
  server_config cfg;
  CLI::App app{"switchyard-server: message broker for real-time gateway fleets", "switchyard-server"};
  app.set_version_flag("--version", std::string(SWITCHYARD_VERSION));
  app.set_config("--config", "", "TOML file with any of the options below (long names as keys)");
  app.allow_config_extras(false);
  auto toml = std::make_shared<toml_config>();
  app.config_formatter(toml);

  std::string listen = cfg.listen_host + ":" + std::to_string(cfg.listen_port);
  std::int64_t hello_ms = cfg.hello_timeout.count();
  std::int64_t heartbeat_ms = cfg.heartbeat_interval.count();
  std::int64_t coalesce_us = cfg.write_coalesce_time.count();
  std::string slow = "drop";
  std::int64_t min_ttl_ms = cfg.lease_min_ttl.count();
  std::int64_t max_ttl_ms = cfg.lease_max_ttl.count();
  std::int64_t sweep_ms = cfg.sweep_period.count();
  std::int64_t stall_ms = cfg.stall_threshold.count();
  std::int64_t sync_ms = cfg.sync_interval.count();
  std::int64_t retention_age_ms = 0;
  std::int64_t frame_timeout_ms = cfg.frame_timeout.count();
  std::int64_t grace_ms = cfg.shutdown_grace.count();
  std::int64_t drain_ms = cfg.drain_window.count();
  std::int64_t auth_delay_ms = cfg.auth_failure_delay.count();

  app.add_option("--listen", listen, "host:port to listen on (port 0 = any free port)")
      ->capture_default_str();
  app.add_option("--data-dir", cfg.data_dir, "data folder (created if missing)")->capture_default_str();
  app.add_option("--port-file", cfg.port_file, "write the bound port to this file once listening");
  std::string http;
  app.add_option("--http", http,
                 "host:port of the HTTP monitoring port (/metrics, /healthz, /readyz, /stats, /connz, /; port 0 = "
                 "any free port). Off by default");
  app.add_flag("--http-public", cfg.http_public,
               "allow --http on an address other hosts can reach (the monitoring port has no authentication)");
  app.add_option("--max-frame", cfg.max_frame, "largest accepted frame in bytes")->capture_default_str();
  app.add_option("--max-connections", cfg.max_connections, "connection cap")->capture_default_str();
  app.add_option("--admin-slots", cfg.admin_slots,
                 "connections beyond max-connections kept for clients asking the \"admin\" capability (the CLI)")
      ->capture_default_str();
  app.add_option("--max-hellos-per-s", cfg.max_hellos_per_s,
                 "new hellos admitted per second (token bucket; admin hellos exempt); others get rate_limited with "
                 "a retry hint. 0 = no limit")
      ->capture_default_str();
  app.add_option("--hello-burst", cfg.hello_burst,
                 "hellos admitted at once after a quiet spell (0 = max-hellos-per-s)")
      ->capture_default_str();
  app.add_option("--shutdown-grace-ms", grace_ms,
                 "SIGTERM: time the shutting_down goodbyes may take before the server exits anyway")
      ->capture_default_str();
  app.add_option("--drain-window-ms", drain_ms,
                 "SIGUSR2 (or a Drain request without a window): close the connections spread over this long, "
                 "then exit")
      ->capture_default_str();
  app.add_option("--hello-timeout-ms", hello_ms, "time a new connection has to send its hello")
      ->capture_default_str();
  app.add_option("--heartbeat-ms", heartbeat_ms,
                 "server ping interval; a connection silent for 2.5 intervals is closed")
      ->capture_default_str();
  app.add_option("--max-pending-bytes", cfg.max_pending_bytes,
                 "per-connection outbound queue limit; past it the connection is a slow consumer")
      ->capture_default_str();
  app.add_option("--write-coalesce-turns", cfg.write_coalesce_turns,
                 "under load (more input already waiting), a connection's write waits up to this many loop turns "
                 "for more frames; never while idle; 0 = off")
      ->capture_default_str();
  app.add_option("--write-coalesce-us", coalesce_us,
                 "a write that waits for more frames never waits past this long after its oldest queued frame")
      ->capture_default_str();
  app.add_option("--write-coalesce-bytes", cfg.write_coalesce_bytes,
                 "a connection with this much queued writes at once, under load or not")
      ->capture_default_str();
  app.add_option("--frame-timeout-ms", frame_timeout_ms,
                 "a frame must complete this long after its first byte arrived, or the connection is closed")
      ->capture_default_str();
  app.add_option("--max-incomplete-bytes", cfg.max_incomplete_bytes,
                 "memory all connections' incomplete frames may hold together; past it the connection whose "
                 "frame would grow is closed")
      ->capture_default_str();
  app.add_option("--max-subscriptions", cfg.max_subscriptions, "subscription patterns one connection may hold")
      ->capture_default_str();
  app.add_option("--max-inboxes", cfg.max_inboxes, "inboxes one connection may have open")->capture_default_str();
  app.add_option("--max-leases", cfg.max_leases, "live leases in the server (a registry entry's own TTL is one)")
      ->capture_default_str();
  app.add_option("--max-registry-entries", cfg.max_registry_entries, "registry entries in the server")
      ->capture_default_str();
  std::int64_t offer_expiry_ms = cfg.max_offer_expiry.count();
  std::int64_t exposure_window_ms = cfg.exposure_window.count();
  std::vector<std::string> flags;
  app.add_option("--max-offers", cfg.max_offers, "live offers in the server; past it the oldest are forgotten")
      ->capture_default_str();
  app.add_option("--max-offer-bytes", cfg.max_offer_bytes,
                 "bytes of live offers (payloads, keys, bookkeeping); past it the oldest are forgotten")
      ->capture_default_str();
  app.add_option("--max-pending-per-key", cfg.max_pending_per_key,
                 "offers pending per route key; past it the key's oldest leaves its pending list")
      ->capture_default_str();
  app.add_option("--max-offer-expiry-ms", offer_expiry_ms, "longest expiry a publish, send or offer may ask")
      ->capture_default_str();
  app.add_option("--exposure-window-ms", exposure_window_ms,
                 "longest rolling window of an exposure cap or query; counts older than this are forgotten")
      ->capture_default_str();
  app.add_option("--max-exposure-keys", cfg.max_exposure_keys,
                 "route keys whose offers are counted for caps at once; offers to new keys past it are not counted")
      ->capture_default_str();
  app.add_option("--flag", flags,
                 "NAME=PERCENT: a server flag's share of connections at start (0..100; known: offers; default 100); "
                 "repeatable");
  app.add_option("--slow-consumer", slow, "what to do with a slow consumer: drop or disconnect")
      ->check(CLI::IsMember({"drop", "disconnect"}))
      ->capture_default_str();
  app.add_option("--log-level", cfg.log_level, "trace, debug, info, warn, error, critical or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}))
      ->capture_default_str();
  app.add_option("--log-format", cfg.log_format,
                 "text (ISO 8601 time with UTC offset, logger, level, message) or json (one object per line: "
                 "time, level, logger, msg)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();

  app.add_option("--tls-cert", cfg.tls_cert,
                 "TLS on the client port: certificate chain (PEM); with --tls-key. Re-read on SIGHUP");
  app.add_option("--tls-key", cfg.tls_key, "private key of --tls-cert (PEM, unencrypted)");
  app.add_option("--tls-ca", cfg.tls_ca, "CAs (PEM) that client certificates must chain to");
  app.add_flag("--tls-verify-client", cfg.tls_verify_client,
               "mTLS: refuse clients without a certificate signed by --tls-ca");

  app.add_option("--auth-file", cfg.auth_file,
                 "authentication and permissions: TOML file of principals (docs/security.md). Re-read on SIGHUP");
  app.add_flag("--allow-anonymous", cfg.allow_anonymous,
               "without --auth-file, listen on a non-loopback address all the same (anyone may do anything)");
  app.add_option("--auth-failure-delay-ms", auth_delay_ms, "how long a refused hello waits for its unauthorized")
      ->capture_default_str();
  app.add_option("--auth-failures-per-min", cfg.auth_failures_per_min,
                 "failed hellos per source address per minute before it is rate limited (0 = no limit)")
      ->capture_default_str();

  app.add_option("--lease-min-ttl-ms", min_ttl_ms, "shortest lease TTL granted (shorter asks are raised)")
      ->capture_default_str();
  app.add_option("--lease-max-ttl-ms", max_ttl_ms, "longest lease TTL granted (longer asks are lowered)")
      ->capture_default_str();
  app.add_option("--sweep-ms", sweep_ms, "lease sweeper period: leases expire at most this late")->capture_default_str();
  app.add_option("--max-expiries-per-sweep", cfg.max_expiries_per_sweep,
                 "leases expired per sweep at most; the rest wait for the next turn")
      ->capture_default_str();
  app.add_option("--stall-threshold-ms", stall_ms,
                 "a sweeper this late was stalled: every lease then gets its full TTL from the stall's end "
                 "(default: lease-min-ttl-ms / 2 - sweep-ms)");

  std::string durability_text(storage::durability_name(cfg.durability));
  app.add_option("--durability", durability_text,
                 "sequence log: sync (acknowledged = fsynced), batch (fsync every --sync-interval-ms) or none")
      ->check(CLI::IsMember({"sync", "batch", "none"}))
      ->capture_default_str();
  app.add_option("--sync-interval-ms", sync_ms, "batch durability: fsync at most this often")->capture_default_str();
  app.add_option("--log-max-bytes", cfg.log_max_bytes, "largest size of the sequence log; then appends fail with storage_full")
      ->capture_default_str();

  app.add_option("--retention-max-records", cfg.retention_max_records, "keep at most this many records per stream (0 = all)")
      ->capture_default_str();
  app.add_option("--retention-max-age-ms", retention_age_ms, "drop records older than this (0 = keep)")->capture_default_str();
  app.add_option("--retention-max-bytes", cfg.retention_max_bytes, "keep at most this many record bytes (payload + delivery destination) per stream (0 = all)")
      ->capture_default_str();

  app.add_option("--durable-channel", cfg.durable_channels,
                 "channel pattern whose publishes go through the log (stream = channel name); repeatable");

  app.add_flag("--verify-on-start", cfg.verify_on_start,
               "check the whole sequence log (in a child process) before opening it; refuse to start if damaged");
  app.add_flag("--verify-log", cfg.verify_log,
               "check the sequence log in --data-dir and exit: 0 intact, 1 damaged, 3 cannot check (safe next to a "
               "running broker)");
  app.add_flag("--json", cfg.verify_json, "with --verify-log: print the report as one JSON object on stdout");

  std::vector<std::string> keys;
  for (const auto* opt : app.get_options())
    for (const auto& name : opt->get_lnames())
      if (name != "config" && name != "help" && name != "version") keys.push_back(name);
  toml->known_keys(std::move(keys));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::ostringstream out, err;
    const int code = app.exit(e, out, err);
    throw cli_exit{code, out.str() + err.str()};
  }

  std::tie(cfg.listen_host, cfg.listen_port) = split_host_port("--listen", listen);
  if (!http.empty()) std::tie(cfg.http_host, cfg.http_port) = split_host_port("--http", http);
  cfg.hello_timeout = std::chrono::milliseconds(hello_ms);
  cfg.heartbeat_interval = std::chrono::milliseconds(heartbeat_ms);
  cfg.write_coalesce_time = std::chrono::microseconds(coalesce_us);
  cfg.slow_consumer = slow == "disconnect" ? slow_consumer_policy::disconnect : slow_consumer_policy::drop;
  cfg.lease_min_ttl = std::chrono::milliseconds(min_ttl_ms);
  cfg.lease_max_ttl = std::chrono::milliseconds(max_ttl_ms);
  cfg.sweep_period = std::chrono::milliseconds(sweep_ms);
  if (stall_ms < 0 && app.count("--stall-threshold-ms") > 0) throw std::invalid_argument("stall-threshold-ms must not be negative");
  cfg.stall_threshold = std::chrono::milliseconds(stall_ms);
  cfg.sync_interval = std::chrono::milliseconds(sync_ms);
  cfg.durability = storage::parse_durability(durability_text).value_or(storage::durability::sync);  // checked above
  cfg.retention_max_age = std::chrono::milliseconds(retention_age_ms);
  cfg.frame_timeout = std::chrono::milliseconds(frame_timeout_ms);
  if (grace_ms < 1 || drain_ms < 1) throw std::invalid_argument("shutdown-grace-ms and drain-window-ms must be at least 1");
  cfg.shutdown_grace = std::chrono::milliseconds(grace_ms);
  cfg.drain_window = std::chrono::milliseconds(drain_ms);
  cfg.auth_failure_delay = std::chrono::milliseconds(auth_delay_ms);
  if (offer_expiry_ms < 1 || exposure_window_ms < 1)
    throw std::invalid_argument("max-offer-expiry-ms and exposure-window-ms must be at least 1");
  cfg.max_offer_expiry = std::chrono::milliseconds(offer_expiry_ms);
  cfg.exposure_window = std::chrono::milliseconds(exposure_window_ms);
  for (const auto& f : flags) {
    const auto eq = f.find('=');
    const std::string name = f.substr(0, eq);
    if (eq == std::string::npos || !feature_flags::find(name))
      throw std::invalid_argument("--flag " + f + ": expected NAME=PERCENT with a known flag (offers)");
    const std::string pct = f.substr(eq + 1);
    if (pct.empty() || pct.size() > 3 || pct.find_first_not_of("0123456789") != std::string::npos || std::stoi(pct) > 100)
      throw std::invalid_argument("--flag " + f + ": the percentage is 0..100");
    cfg.flags.emplace_back(name, static_cast<std::uint8_t>(std::stoi(pct)));
  }
  if (const auto* file = app.get_config_ptr(); file && file->count() > 0) cfg.config_file = file->as<std::string>();
  cfg.command_line.assign(argv, argv + argc);
  validate(cfg);
  return cfg;
}

server_config reparse_server_args(const server_config& cfg) {
  std::vector<const char*> argv;
  argv.reserve(cfg.command_line.size());
  for (const auto& a : cfg.command_line) argv.push_back(a.c_str());
  return parse_server_args(static_cast<int>(argv.size()), argv.data());
}

}  // namespace switchyard::broker
