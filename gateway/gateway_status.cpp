#include "gateway/gateway_status.hpp"

#include "text/html.hpp"
#include "text/json_writer.hpp"

#include <array>

namespace switchyard::edge {

namespace {

constexpr std::array metrics{
    gateway_metric{"sockets", "WebSocket connections open now (upgraded or not).", false,
                   [](const gateway_counters& c) { return c.sockets; }},
    gateway_metric{"users", "Users whose route this gateway holds on the broker.", false,
                   [](const gateway_counters& c) { return c.users; }},
    gateway_metric{"pending_bytes", "Bytes queued to devices, all sockets.", false,
                   [](const gateway_counters& c) { return c.pending_bytes; }},
    gateway_metric{"accepted_total", "TCP connections accepted.", true,
                   [](const gateway_counters& c) { return c.accepted; }},
    gateway_metric{"welcomed_total", "Hellos accepted (devices welcomed).", true,
                   [](const gateway_counters& c) { return c.welcomed; }},
    gateway_metric{"refused_total", "Upgrades refused with 503 (socket cap, drain) and connections closed at accept.",
                   true, [](const gateway_counters& c) { return c.refused; }},
    gateway_metric{"unauthorized_total", "Hellos refused for their token (unauthorized, token_expired).", true,
                   [](const gateway_counters& c) { return c.unauthorized; }},
    gateway_metric{"tls_failed_total",
                   "TLS handshakes that failed (wss:// only): not TLS, no common version or cipher, "
                   "or closed during the handshake.",
                   true, [](const gateway_counters& c) { return c.tls_failed; }},
    gateway_metric{"closed_total", "Sockets ended, for any reason.", true,
                   [](const gateway_counters& c) { return c.closed; }},
    gateway_metric{"delivered_total", "Frames queued to devices (sends, publications, offers).", true,
                   [](const gateway_counters& c) { return c.delivered; }},
    gateway_metric{"dropped_total", "Frames dropped for slow consumers (--slow-consumer drop).", true,
                   [](const gateway_counters& c) { return c.dropped; }},
    gateway_metric{"replayed_total", "Frames read back from the broker's log for resuming devices.", true,
                   [](const gateway_counters& c) { return c.replayed; }},
    gateway_metric{"offers_acked_total", "Offer acks from devices passed to the broker.", true,
                   [](const gateway_counters& c) { return c.offers_acked; }},
};

using text::html_escape;

}  // namespace

std::span<const gateway_metric> gateway_metrics() { return metrics; }

std::string gateway_prometheus_text(const gateway_counters& c, const gateway_health& h) {
  std::string out;
  const auto one = [&out](std::string_view name, std::string_view help, bool counter, std::uint64_t v) {
    out += "# HELP switchyard_gateway_" + std::string(name) + " " + std::string(help) + "\n";
    out += "# TYPE switchyard_gateway_" + std::string(name) + (counter ? " counter\n" : " gauge\n");
    out += "switchyard_gateway_" + std::string(name) + " " + std::to_string(v) + "\n";
  };
  for (const auto& m : metrics) one(m.name, m.help, m.counter, m.value(c));
  out += "# HELP switchyard_gateway_closes_total Sockets the gateway closed, by reason (docs/websocket.md).\n";
  out += "# TYPE switchyard_gateway_closes_total counter\n";
  for (const auto& r : device_errors())
    if (r.close_code != 0)
      out += "switchyard_gateway_closes_total{reason=\"" + std::string(r.name) + "\"} " +
             std::to_string(c.closes_for(r.code)) + "\n";
  one("broker_connected", "1 while the gateway's connection to the broker is up.", false, h.broker_connected ? 1 : 0);
  one("draining", "1 while the gateway drains.", false, h.draining ? 1 : 0);
  one("uptime_seconds", "Seconds since the gateway started.", false, h.uptime_ms / 1000);
  return out;
}

std::string gateway_stats_json(const gateway_counters& c, const gateway_health& h) {
  text::json_writer w;
  w.begin_object().string("version", SWITCHYARD_VERSION).string("inbox", h.inbox).number("uptime_ms", h.uptime_ms);
  w.boolean("broker_connected", h.broker_connected).boolean("draining", h.draining);
  w.key("figures").begin_object();
  for (const auto& m : metrics) w.number(m.name, m.value(c));
  w.end_object();
  w.key("closes").begin_object();
  for (const auto& r : device_errors())
    if (r.close_code != 0) w.number(r.name, c.closes_for(r.code));
  w.end_object();
  return w.end_object().str();
}

std::string gateway_status_html(const gateway_counters& c, const gateway_health& h) {
  std::string out =
      "<!doctype html><html><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"2\">"
      "<title>switchyard-gateway</title><style>body{font:14px system-ui,sans-serif;margin:2rem}"
      "td,th{padding:.2rem .8rem;text-align:left}td.n{text-align:right;font-variant-numeric:tabular-nums}"
      "</style></head><body><h1>switchyard-gateway " SWITCHYARD_VERSION "</h1><p>inbox <b>" +
      html_escape(h.inbox) + "</b> &middot; broker " + (h.broker_connected ? "connected" : "<b>unreachable</b>") +
      (h.draining ? " &middot; <b>draining</b>" : "") + " &middot; up " + std::to_string(h.uptime_ms / 1000) +
      " s</p><table><tr><th>figure</th><th>value</th><th></th></tr>";
  for (const auto& m : metrics)
    out += "<tr><td>" + std::string(m.name) + "</td><td class=\"n\">" + std::to_string(m.value(c)) + "</td><td>" +
           html_escape(m.help) + "</td></tr>";
  out += "</table><h2>Closed by the gateway</h2><table>";
  for (const auto& r : device_errors())
    if (r.close_code != 0)
      out += "<tr><td>" + std::string(r.name) + " (" + std::to_string(r.close_code) + ")</td><td class=\"n\">" +
             std::to_string(c.closes_for(r.code)) + "</td></tr>";
  return out + "</table></body></html>\n";
}

http::http_answer gateway_status_answer(std::string_view target, const gateway_counters& c, const gateway_health& h) {
  const std::string_view path = target.substr(0, target.find('?'));
  if (path == "/healthz") return http::plain(200, "ok\n");
  if (path == "/readyz") {
    if (h.draining) return http::plain(503, "not ready: draining\n");
    if (!h.broker_connected) return http::plain(503, "not ready: the broker is unreachable\n");
    return http::plain(200, "ready\n");
  }
  if (path == "/metrics") return {200, "text/plain; version=0.0.4; charset=utf-8", gateway_prometheus_text(c, h)};
  if (path == "/stats") return {200, "application/json", gateway_stats_json(c, h) + "\n"};
  if (path == "/" || path == "/index.html") return {200, "text/html; charset=utf-8", gateway_status_html(c, h)};
  return http::plain(404, "not found: try /, /metrics, /healthz, /readyz or /stats\n");
}

}  // namespace switchyard::edge
