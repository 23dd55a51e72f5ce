#pragma once
// What switchyard-gateway's monitoring port (--http) serves, rendered from
// its counters: each figure is one row of one table (name, help, counter
// or gauge), which drives /metrics (Prometheus text), /stats (JSON) and the
// status page alike. Pure functions: no I/O.
//
//   GET /metrics   Prometheus text format
//   GET /healthz   200 "ok": the gateway's loop answers
//   GET /readyz    200 "ready", or 503 and why not (draining, the broker
//                  unreachable): a load balancer sends no new devices then
//   GET /stats     JSON: version, inbox, figures
//   GET /          an HTML status page that reloads itself

#include "gateway/device_errc.hpp"

#include "http/http_endpoint.hpp"

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace switchyard::edge {

struct gateway_counters {
  std::uint64_t accepted = 0;       // TCP connections accepted
  std::uint64_t welcomed = 0;       // hellos accepted
  std::uint64_t refused = 0;        // upgrades answered 503 (cap, drain) and connections closed at accept
  std::uint64_t closed = 0;         // sockets done, for any reason
  std::uint64_t unauthorized = 0;   // hellos refused for the token
  std::uint64_t tls_failed = 0;     // TLS handshakes that failed (wss:// only)
  std::uint64_t delivered = 0;      // frames queued to devices
  std::uint64_t dropped = 0;        // frames dropped for slow consumers
  std::uint64_t offers_acked = 0;   // device acks passed to the broker
  std::uint64_t replayed = 0;       // frames read back from the log for resuming devices
  std::uint64_t sockets = 0;        // gauge: open now
  std::uint64_t users = 0;          // gauge: users with a route held
  std::uint64_t pending_bytes = 0;  // gauge: bytes queued to devices, all sockets
  // Sockets the gateway closed, per device_errc (index: its value).
  std::array<std::uint64_t, 32> closes{};
  std::uint64_t closes_for(device_errc e) const { return closes[static_cast<std::size_t>(e)]; }
};

struct gateway_health {
  bool broker_connected = false;
  bool draining = false;
  std::string inbox;
  std::uint64_t uptime_ms = 0;
};

// One figure of the table.
struct gateway_metric {
  std::string_view name;  // switchyard_gateway_<name>
  std::string_view help;
  bool counter;  // else a gauge
  std::uint64_t (*value)(const gateway_counters&);
};
std::span<const gateway_metric> gateway_metrics();

std::string gateway_prometheus_text(const gateway_counters& c, const gateway_health& h);
std::string gateway_stats_json(const gateway_counters& c, const gateway_health& h);
std::string gateway_status_html(const gateway_counters& c, const gateway_health& h);

// The answer to a GET of `target` on the monitoring port.
http::http_answer gateway_status_answer(std::string_view target, const gateway_counters& c, const gateway_health& h);

}  // namespace switchyard::edge
