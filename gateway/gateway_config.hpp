#pragma once
// What switchyard-gateway is configured with. Each field is held by one row
// of gateway_settings.cpp (flag, config-file key, default, range, help,
// reloadable), which drives parsing, --help, validation and the table of
// docs/websocket.md.

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace switchyard::edge {

enum class slow_consumer_policy { drop, disconnect };

struct gateway_config {
  // Where devices connect (WebSocket upgrades at /ws).
  std::string listen_host = "127.0.0.1";
  std::uint16_t listen_port = 8080;
  std::string port_file;  // the bound port, written once listening
  // The monitoring port (/metrics, /healthz, /readyz, /stats, /); empty
  // host: off. Loopback only unless http_public.
  std::string http_host;
  std::uint16_t http_port = 0;
  bool http_public = false;
  // wss://: the certificate chain and its key (PEM); empty: plain ws://.
  std::string tls_cert;
  std::string tls_key;

  // The broker.
  std::vector<std::string> brokers{"127.0.0.1:7878"};
  std::string broker_token_file;  // a bearer token for a broker with an auth file
  // TLS to the broker (the client library's tls_options): on when any is set.
  bool broker_tls = false;
  std::string broker_tls_ca;           // CAs the broker's certificate must chain to (empty: the system's)
  std::string broker_tls_cert;         // mTLS: this gateway's certificate chain (PEM) ...
  std::string broker_tls_key;          // ... and its key
  std::string broker_tls_server_name;  // the name the broker's certificate must carry (empty: the host)
  std::string inbox_id;                // this gateway's stable id; empty: "gw-<hostname>"
  std::chrono::milliseconds lease_ttl{10'000};
  std::string route_prefix = "user:";       // route key = prefix + the token's sub
  bool plain_inbox = false;                 // true: no durable inbox (gap-free durable sends need the broker's log)
  std::uint64_t resume_max_scan = 100'000;  // records a device's resume may read per stream

  // Tokens.
  std::string jwt_secret_file;  // HS256/384/512
  std::string jwt_public_key;   // PEM file: RS*, ES* or EdDSA
  std::string jwt_issuer;
  std::string jwt_audience;
  std::chrono::seconds jwt_leeway{0};

  // Sockets.
  std::chrono::milliseconds hello_timeout{10'000};  // from accept to the hello (upgrade included)
  std::chrono::milliseconds ping_interval{25'000};
  std::chrono::milliseconds dead_after{60'000};  // nothing received this long: closed
  std::size_t max_message_bytes = 16 * 1024;
  std::uint32_t max_messages_per_s = 50;  // per socket, after the burst
  std::uint32_t message_burst = 100;
  std::size_t max_pending_bytes = 1 << 20;
  slow_consumer_policy slow_consumer = slow_consumer_policy::drop;
  std::uint32_t max_sockets = 100'000;
  std::uint32_t max_subscriptions = 64;  // per socket
  std::uint32_t max_offers_held = 256;   // per socket: offers it may still ack

  // Drain (SIGUSR2, or SIGTERM): closes spread over the window, each with a
  // reconnect hint drawn from 0 .. drain_jitter.
  std::chrono::milliseconds drain_window{10'000};
  std::chrono::milliseconds drain_jitter{1'000};

  // Server-side flags and their ramp: name -> percent of users (by a stable
  // hash of the user id).
  std::vector<std::pair<std::string, std::uint8_t>> flags;

  std::string log_level = "info";
};

}  // namespace switchyard::edge
