#pragma once
// What the HTTP monitoring port (http_monitor) answers, rendered from data
// the server gathered: /stats and /connz as JSON (the same fields as
// `switchyard-cli stats --json` and `conns --json`) and `/`, a small
// server-rendered HTML status page that reloads itself. Pure functions of
// their arguments: they borrow them for the call only.

#include "broker/monitor/metrics_snapshot.hpp"
#include "broker/handlers/server_admin_handler.hpp"
#include "protocol/frame_builder.hpp"
#include "storage/sequence_log.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace switchyard::broker {

// Whether the server should get new clients (GET /readyz), and if not why.
struct readiness {
  bool ready = false;
  std::string reason;  // empty when ready: "draining", "stopping", "not listening yet", ...
};

// Traffic per second between two snapshots, `seconds` apart (0: no earlier
// snapshot yet, rates unknown).
struct traffic_rates {
  double seconds = 0;
  double published = 0;
  double delivered = 0;
  double dropped = 0;
  double sends_routed = 0;
  double appends = 0;
  double bytes_in = 0;
  double bytes_out = 0;
};

// The rates between an earlier and a later snapshot of one server.
traffic_rates rates_between(const metrics_snapshot& earlier, const metrics_snapshot& later, double seconds);

// GET /stats: {"version", "server_instance", "uptime_ms", "settings":{...},
// "counters":{...}, "gauges":{...}, "histograms":{name:{"count","sum_seconds",
// "p50_le_us","p99_le_us","p999_le_us"}}}.
std::string stats_json(const stats_report& stats, const metrics_snapshot& m);

// GET /connz: {"total", "next_cursor", "conns":[...]}, each connection as
// `switchyard-cli conns --json` prints it.
std::string connz_json(std::span<const protocol::conn_info_fields> conns, std::uint64_t total,
                       std::uint64_t next_cursor);

// GET /: everything the page shows.
struct status_view {
  const stats_report* stats = nullptr;
  const metrics_snapshot* metrics = nullptr;
  traffic_rates rates;
  readiness ready;
  std::span<const protocol::conn_info_fields> conns;  // the first page, by pending bytes
  std::uint64_t conns_total = 0;
  std::span<const storage::stream_info> streams;  // the first streams by name
  bool streams_more = false;
  std::uint32_t refresh_seconds = 2;  // the page reloads itself this often
};
std::string status_html(const status_view& v);

}  // namespace switchyard::broker
