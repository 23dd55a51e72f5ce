#include "broker/monitor/http_monitor.hpp"

#include "broker/monitor/metrics_exposition.hpp"
#include "broker/config/server_config.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <optional>
#include <stdexcept>
#include <utility>

namespace switchyard::broker {

namespace {

constexpr const char* json_type = "application/json";

using http::plain;

// A JSON error body: {"error":"..."}.
http_monitor::response json_error(unsigned status, std::string_view message) {
  std::string body = R"({"error":")";
  for (const char c : message) body += (c == '"' || c == '\\') ? '\'' : c;  // our own texts: no controls
  body += "\"}\n";
  return {status, std::string(json_type), std::move(body)};
}

std::optional<std::uint64_t> whole_number(std::string_view s) {
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<std::uint8_t> sort_of(std::string_view name) {
  static constexpr std::pair<std::string_view, std::uint8_t> orders[]{
      {"id", 0}, {"idle", 1}, {"pending", 2}, {"dropped", 3}, {"subs", 4}, {"bytes-in", 5}, {"bytes-out", 6}};
  for (const auto& [n, v] : orders)
    if (n == name) return v;
  return std::nullopt;
}

}  // namespace

http_monitor::http_monitor(asio::io_context& io, sources s, std::shared_ptr<spdlog::logger> logger)
    : sources_(std::move(s)),
      endpoint_(
          io, [this](std::string_view target) { return answer(target); }, std::move(logger), "switchyard",
          "monitoring (--http)") {}

http_monitor::~http_monitor() { stop(); }

void http_monitor::start(const std::string& host, std::uint16_t port) { endpoint_.start(listen_address(host), port); }

void http_monitor::stop() { endpoint_.stop(); }

http_monitor::response http_monitor::answer(std::string_view target) {
  const auto q = target.find('?');
  const std::string_view path = target.substr(0, q);
  const std::string_view query = q == std::string_view::npos ? std::string_view{} : target.substr(q + 1);
  if (path == "/healthz") return plain(200, "ok\n");
  if (path == "/readyz") {
    const auto r = sources_.ready();
    return r.ready ? plain(200, "ready\n") : plain(503, "not ready: " + r.reason + "\n");
  }
  if (path == "/metrics") {
    const auto m = sources_.metrics();
    const auto st = sources_.stats(m);
    return {200, "text/plain; version=0.0.4; charset=utf-8",
            prometheus_text(m, {st.version, st.instance_id, st.uptime_ms})};
  }
  if (path == "/stats") {
    const auto m = sources_.metrics();
    return {200, std::string(json_type), stats_json(sources_.stats(m), m) + "\n"};
  }
  if (path == "/connz") return connz(query);
  if (path == "/" || path == "/index.html") return status_page();
  return plain(404, "not found: try /, /metrics, /healthz, /readyz, /stats or /connz\n");
}

http_monitor::response http_monitor::connz(std::string_view query) {
  std::uint8_t sort = 0;
  std::size_t limit = server_admin_handler::default_conn_limit;
  std::uint64_t cursor = 0;
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (pair.empty()) continue;
    const auto eq = pair.find('=');
    const std::string_view key = pair.substr(0, eq);
    const std::string_view value = eq == std::string_view::npos ? std::string_view{} : pair.substr(eq + 1);
    if (key == "sort") {
      const auto s = sort_of(value);
      if (!s) return json_error(400, "sort must be one of id, idle, pending, dropped, subs, bytes-in, bytes-out");
      sort = *s;
    } else if (key == "limit") {
      const auto n = whole_number(value);
      if (!n || *n < 1 || *n > server_admin_handler::max_conn_limit)
        return json_error(400,
                          fmt::format("limit must be a number from 1 to {}", server_admin_handler::max_conn_limit));
      limit = static_cast<std::size_t>(*n);
    } else if (key == "cursor") {
      const auto n = whole_number(value);
      if (!n) return json_error(400, "cursor must be a whole number (the next_cursor of the page before)");
      cursor = *n;
    } else {
      return json_error(
          400, fmt::format("unknown parameter '{}': use sort, limit and cursor", std::string(key.substr(0, 64))));
    }
  }
  auto keys = sources_.conn_keys();
  const std::uint64_t total = keys.size();
  const auto page = page_connections(std::move(keys), sort, limit, cursor);
  const auto conns = sources_.conn_info(page.ids);
  return {200, std::string(json_type), connz_json(conns, total, page.next_cursor) + "\n"};
}

http_monitor::response http_monitor::status_page() {
  const auto m = sources_.metrics();
  const auto st = sources_.stats(m);
  const auto now = std::chrono::steady_clock::now();
  // Rates against the snapshot of an earlier view at least a second old;
  // views in between show the rates computed last.
  if (rate_base_at_ == std::chrono::steady_clock::time_point{}) {
    rate_base_ = m;
    rate_base_at_ = now;
  } else if (const std::chrono::duration<double> since = now - rate_base_at_; since.count() >= 1.0) {
    last_rates_ = rates_between(rate_base_, m, since.count());
    rate_base_ = m;
    rate_base_at_ = now;
  }
  auto keys = sources_.conn_keys();
  const std::uint64_t total = keys.size();
  const auto page = page_connections(std::move(keys), 2 /* pending bytes */, 50, 0);
  const auto conns = sources_.conn_info(page.ids);
  stream_page streams;
  if (sources_.streams) streams = sources_.streams(50);
  status_view v;
  v.stats = &st;
  v.metrics = &m;
  v.rates = last_rates_;
  v.ready = sources_.ready();
  v.conns = conns;
  v.conns_total = total;
  v.streams = streams.streams;
  v.streams_more = streams.more;
  v.refresh_seconds = page_refresh_seconds;
  return {200, "text/html; charset=utf-8", status_html(v)};
}

}  // namespace switchyard::broker
