#pragma once
// The HTTP monitoring port (--http; docs/operations.md, "Monitoring"):
// HTTP/1.1 on the broker's own loop, read-only, no authentication.
//
//   GET /metrics   Prometheus text format (metrics_exposition.hpp)
//   GET /healthz   200 "ok": the loop answers
//   GET /readyz    200 "ready", or 503 and why not (draining, stopping, ...)
//   GET /stats     JSON: version, settings, counters, gauges, histograms
//   GET /connz     JSON: connections; ?sort=id|idle|pending|dropped|subs|
//                  bytes-in|bytes-out &limit=N (default 100, at most 1000)
//                  &cursor=N, paged as ConnList is
//   GET /          an HTML status page that reloads itself
//
// HEAD is answered like GET without the body; other methods get 405. The
// sockets are http::http_endpoint's (bounded memory: see there); this class
// routes and renders, and reaches nothing of the broker but the functions
// it is given (sources).
//
// Loop thread only: the constructor, start(), stop() and every source call.

#include "broker/monitor/metrics_snapshot.hpp"
#include "broker/monitor/monitor_pages.hpp"
#include "broker/handlers/server_admin_handler.hpp"
#include "common/asio.hpp"
#include "http/http_endpoint.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace spdlog {
class logger;
}

namespace switchyard::broker {

class http_monitor {
 public:
  // The first streams by name (at most `max`), and whether there are more.
  struct stream_page {
    std::vector<storage::stream_info> streams;
    bool more = false;
  };
  struct sources {
    // One snapshot per request: its stats report is made from it.
    std::function<stats_report(const metrics_snapshot&)> stats;
    std::function<metrics_snapshot()> metrics;
    server_admin_handler::conn_keys_fn conn_keys;
    server_admin_handler::conn_info_fn conn_info;
    std::function<readiness()> ready;
    std::function<stream_page(std::size_t max)> streams;  // unset: no log
  };

  static constexpr std::uint32_t page_refresh_seconds = 2;

  http_monitor(asio::io_context& io, sources s, std::shared_ptr<spdlog::logger> logger);
  ~http_monitor();
  http_monitor(const http_monitor&) = delete;
  http_monitor& operator=(const http_monitor&) = delete;

  // Binds host:port (port 0: any free one), listens and starts accepting.
  // Throws std::runtime_error naming the address (in use, permission, ...).
  void start(const std::string& host, std::uint16_t port);
  std::uint16_t port() const noexcept { return endpoint_.port(); }
  // Closes the listener and every open monitoring connection. Idempotent.
  void stop();

  using response = http::http_answer;
  // What a request for `target` (path and query) gets with GET: the routing
  // and rendering without the socket.
  response answer(std::string_view target);

 private:
  response connz(std::string_view query);
  response status_page();

  sources sources_;
  http::http_endpoint endpoint_;
  // The snapshot the status page's rates are computed against.
  metrics_snapshot rate_base_;
  std::chrono::steady_clock::time_point rate_base_at_{};
  traffic_rates last_rates_;
};

}  // namespace switchyard::broker
