#include "gateway/gateway_settings.hpp"

#include "settings/parse_args.hpp"
#include "common/asio.hpp"
#include "settings/setting_rows.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace switchyard::edge {

namespace {

using namespace switchyard::settings;
using c = gateway_config;

constexpr std::array<std::string_view, 1> flag_names{"offers"};

std::vector<gateway_setting> build() {
  std::vector<row<c>> rows;
  const auto add = [&rows](row<c> r) { rows.push_back(std::move(r)); };

  // Where devices connect.
  add(address("listen", &c::listen_host, &c::listen_port,
              "host:port for devices' WebSockets (upgrades at /ws; port 0 = any free port)"));
  add(text("port-file", &c::port_file, "write the bound port to this file once listening"));
  add(address("http", &c::http_host, &c::http_port,
              "host:port of the monitoring port (/metrics, /healthz, /readyz, /stats, /; port 0 = any free port). "
              "Off by default")
          .doc("host:port of the monitoring port: `/metrics` (Prometheus), `/healthz`, `/readyz` (503 while "
               "draining or while the broker is unreachable), `/stats` (JSON), `/` (a status page); port 0 = any free "
               "port"));
  add(toggle("http-public", &c::http_public,
             "allow --http on an address other hosts can reach (the monitoring port has no authentication)"));

  add(text("tls-cert", &c::tls_cert,
           "wss://: PEM file of the certificate chain devices see; with --tls-key. Re-read on SIGHUP")
          .doc("TLS for devices (`wss://`): PEM file of the gateway's certificate chain; needs `--tls-key`. TLS 1.2 "
               "at least; the port then speaks TLS only. A SIGHUP reads both files again (new sockets get the new "
               "certificate, open ones keep theirs); switching TLS on or off takes a restart")
          .reloadable());
  add(text("tls-key", &c::tls_key, "private key of --tls-cert (PEM, unencrypted)")
          .doc("the private key of `--tls-cert` (PEM, unencrypted)")
          .reloadable());

  // The broker.
  add(repeated("broker", &c::brokers, "a broker's host:port (repeat for a cluster's nodes)")
          .doc("a broker's `host:port`; repeat it for the nodes of a cluster (the client library goes round them "
               "when one is lost)"));
  add(text("broker-token-file", &c::broker_token_file,
           "file holding the bearer token this gateway presents to a broker with an auth file"));
  add(toggle("broker-tls", &c::broker_tls, "TLS to the broker (implied by any other --broker-tls-* option)"));
  add(text("broker-tls-ca", &c::broker_tls_ca,
           "PEM file of the CAs the broker's certificate must chain to (empty: the system's CAs)"));
  add(text("broker-tls-cert", &c::broker_tls_cert, "mTLS: PEM file of this gateway's certificate chain"));
  add(text("broker-tls-key", &c::broker_tls_key, "mTLS: PEM file of this gateway's private key"));
  add(text("broker-tls-server-name", &c::broker_tls_server_name,
           "the name (DNS or IP) the broker's certificate must carry (empty: the host of --broker)"));
  add(text("inbox-id", &c::inbox_id, "this gateway's inbox id on the broker (stable across restarts)")
          .default_rule("`gw-<hostname>`"));
  add(duration("lease-ttl-ms", &c::lease_ttl, "TTL of this gateway's lease: its routes vanish this long after it died")
          .range({100}, {3'600'000}, count_of(&c::lease_ttl)));
  add(text("route-prefix", &c::route_prefix, "route key of a user: this prefix followed by the token's sub"));
  add(toggle("no-durable-inbox", &c::plain_inbox,
             "open a plain inbox: durable sends are not recovered after a lost broker connection")
          .doc("open a plain inbox instead of a durable one (a durable inbox recovers, from the broker's log, "
               "durable sends lost on the way to the gateway; it needs a broker with a log, and without one the "
               "gateway falls back to a plain inbox by itself)"));
  add(integer("resume-max-scan", &c::resume_max_scan,
              "records a device's resume may read per stream; past it the device is told \"limit\"")
          .range({1}, {100'000'000}, value_of(&c::resume_max_scan)));

  // Tokens.
  add(text("jwt-secret-file", &c::jwt_secret_file,
           "file holding the HMAC secret of HS256/HS384/HS512 tokens (a trailing newline is ignored)"));
  add(text("jwt-public-key", &c::jwt_public_key,
           "PEM file of the public key of RS256.., ES256.. or EdDSA (Ed25519) tokens"));
  add(text("jwt-issuer", &c::jwt_issuer, "required iss of tokens (empty: not checked)"));
  add(text("jwt-audience", &c::jwt_audience, "required aud of tokens (empty: not checked)"));
  add(duration("jwt-leeway-s", &c::jwt_leeway, "clock skew allowed on exp and nbf")
          .range({0}, {300}, count_of(&c::jwt_leeway)));

  // Sockets.
  add(duration("hello-timeout-ms", &c::hello_timeout,
               "from accept to the device's hello (the upgrade included); then closed (4004)")
          .range({100}, {300'000}, count_of(&c::hello_timeout)));
  add(duration("ping-interval-ms", &c::ping_interval, "a WebSocket ping to each device this often")
          .range({100}, {600'000}, count_of(&c::ping_interval)));
  add(duration("dead-after-ms", &c::dead_after, "nothing received from a device this long: closed (4008)")
          .default_rule("2 x `--ping-interval-ms` + 10 s",
                        [](c& cfg) { cfg.dead_after = 2 * cfg.ping_interval + std::chrono::seconds(10); })
          .range(follows<c>("ping-interval-ms",
                            [](const c& cfg) { return static_cast<std::int64_t>(cfg.ping_interval.count()); }),
                 {3'600'000}, count_of(&c::dead_after)));
  add(integer("max-message-bytes", &c::max_message_bytes, "largest message a device may send", "bytes")
          .range({1024}, {1 << 20}, value_of(&c::max_message_bytes)));
  add(integer("max-messages-per-s", &c::max_messages_per_s, "messages a device may send per second, after the burst")
          .range({1}, {100'000}, value_of(&c::max_messages_per_s)));
  add(integer("message-burst", &c::message_burst, "messages a device may send at once above the rate")
          .range({1}, {100'000}, value_of(&c::message_burst)));
  add(integer("max-pending-bytes", &c::max_pending_bytes,
              "per socket: bytes waiting to be written; past it the device is a slow consumer", "bytes")
          .range({4096}, {256 << 20}, value_of(&c::max_pending_bytes)));
  add(choice("slow-consumer", &c::slow_consumer, std::array<std::string_view, 2>{"drop", "disconnect"},
             "drop (count, then a \"dropped\" message) or disconnect (close 4007)"));
  add(integer("max-sockets", &c::max_sockets, "sockets held at most; past it upgrades get HTTP 503")
          .range({1}, {10'000'000}, value_of(&c::max_sockets)));
  add(integer("max-subscriptions", &c::max_subscriptions, "channel subscriptions per socket")
          .range({0}, {10'000}, value_of(&c::max_subscriptions)));
  add(integer("max-offers-held", &c::max_offers_held, "per socket: offers it may still ack (the oldest is forgotten)")
          .range({1}, {100'000}, value_of(&c::max_offers_held)));

  // Drain.
  add(duration("drain-window-ms", &c::drain_window, "a drain closes the sockets spread over this window")
          .range({0}, {3'600'000}, count_of(&c::drain_window)));
  add(duration("drain-jitter-ms", &c::drain_jitter,
               "a drained device is told to wait a random 0 .. this before reconnecting")
          .range({0}, {600'000}, count_of(&c::drain_jitter)));

  add(flag_ramp<c>(
          "flag", &c::flags,
          [](std::string_view name) {
            return std::find(flag_names.begin(), flag_names.end(), name) != flag_names.end();
          },
          "offers", "server-side flag ramp, NAME=PERCENT of users (repeatable); known: offers")
          .doc("server-side flag ramp, `NAME=PERCENT` of users by a stable hash of the user id (repeatable; known: "
               "`offers`); a SIGHUP applies a change to the sockets already open too (a rollback takes a signal)")
          .reloadable());
  add(text("log-level", &c::log_level, "trace, debug, info, warn, error, critical or off",
           {"trace", "debug", "info", "warn", "error", "critical", "off"})
          .reloadable());

  std::vector<gateway_setting> out;
  out.reserve(rows.size());
  for (auto& r : rows) out.push_back(std::move(r.s));
  return out;
}

}  // namespace

std::span<const gateway_setting> gateway_settings() {
  static const std::vector<gateway_setting> table = build();
  return table;
}

std::span<const std::string_view> gateway_flag_names() { return flag_names; }

gateway_config parse_gateway_args(int argc, const char* const* argv) {
  CLI::App app{"switchyard-gateway: WebSocket gateway for devices, on a Switchyard broker", "switchyard-gateway"};
  app.set_version_flag("--version", std::string(SWITCHYARD_VERSION));
  gateway_config cfg;
  try {
    cfg = parse_args<gateway_config>(app, gateway_settings(), argc, argv);
  } catch (const CLI::ParseError& e) {
    std::ostringstream out, err;
    const int code = app.exit(e, out, err);
    throw gateway_cli_exit{code, out.str() + err.str()};
  }
  check<gateway_config>(gateway_settings(), cfg);
  if (cfg.jwt_secret_file.empty() && cfg.jwt_public_key.empty())
    throw std::invalid_argument("no token key: give --jwt-secret-file or --jwt-public-key");
  if (cfg.brokers.empty()) throw std::invalid_argument("broker: give at least one host:port");
  for (const auto& b : cfg.brokers)
    if (split_host_port("broker", b).second == 0)
      throw std::invalid_argument("--broker " + b + ": port 0 is not a broker's port");
  if (cfg.tls_cert.empty() != cfg.tls_key.empty())
    throw std::invalid_argument("tls-cert and tls-key go together: set both or neither");
  if (!cfg.broker_tls_ca.empty() || !cfg.broker_tls_cert.empty() || !cfg.broker_tls_key.empty() ||
      !cfg.broker_tls_server_name.empty())
    cfg.broker_tls = true;
  if (cfg.broker_tls_cert.empty() != cfg.broker_tls_key.empty())
    throw std::invalid_argument("broker-tls-cert and broker-tls-key go together: set both or neither");
  if (cfg.route_prefix.size() > 64) throw std::invalid_argument("route-prefix must be at most 64 bytes");
  for (auto* host : {&cfg.listen_host, &cfg.http_host})
    if (*host == "localhost") *host = "127.0.0.1";
  asio_error_code ec;
  if (cfg.http_host.empty()) {
    if (cfg.http_public) throw std::invalid_argument("http-public needs --http");
  } else if (const auto ip = asio::ip::make_address(cfg.http_host, ec); ec) {
    throw std::invalid_argument("http host \"" + cfg.http_host + "\" is not an IPv4 or IPv6 address or localhost");
  } else if (!ip.is_loopback() && !cfg.http_public) {
    throw std::invalid_argument("refusing to serve monitoring on " + cfg.http_host +
                                ": the HTTP port has no authentication. Serve it on 127.0.0.1, or give "
                                "--http-public to expose it on purpose");
  }
  return cfg;
}

std::string gateway_settings_markdown() {
  return markdown<gateway_config>(
      gateway_settings(), gateway_config{},
      "| `--config` | – | – | – | TOML file with any of these settings, long names as keys |\n");
}

}  // namespace switchyard::edge
