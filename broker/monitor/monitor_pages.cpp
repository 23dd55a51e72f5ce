#include "broker/monitor/monitor_pages.hpp"

#include "broker/monitor/metric_catalog.hpp"
#include "text/html.hpp"
#include "text/json_writer.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace switchyard::broker {

namespace {

double per_second(std::uint64_t before, std::uint64_t after, double seconds) {
  return after >= before && seconds > 0 ? static_cast<double>(after - before) / seconds : 0.0;
}

using text::html_escape;

// 1234567 -> "1,234,567".
std::string grouped(std::uint64_t v) {
  std::string digits = std::to_string(v), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string rate(double v) {
  return v >= 100 ? grouped(static_cast<std::uint64_t>(v + 0.5)) : fmt::format("{:.1f}", v);
}

std::string bytes(double v) {
  if (v >= 1e9) return fmt::format("{:.1f} GB", v / 1e9);
  if (v >= 1e6) return fmt::format("{:.1f} MB", v / 1e6);
  if (v >= 1e3) return fmt::format("{:.1f} kB", v / 1e3);
  return fmt::format("{:.0f} B", v);
}

// An elapsed time in its two largest units ("4.5s", "3h05m").
std::string elapsed(std::uint64_t ms) {
  if (ms < 1000) return fmt::format("{}ms", ms);
  if (ms < 60'000) return fmt::format("{}.{}s", ms / 1000, ms % 1000 / 100);
  const std::uint64_t s = ms / 1000;
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  if (s < 86'400) return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
  return fmt::format("{}d{:02}h", s / 86'400, s % 86'400 / 3600);
}

// A quantile's bucket bound for people: "<= 250us", "<= 2.5ms", "> 10s".
std::string bound(std::uint64_t us) {
  if (us == UINT64_MAX) return "&gt; 10s";
  if (us < 1000) return fmt::format("&le; {}us", us);
  if (us < 1'000'000) return fmt::format("&le; {}ms", static_cast<double>(us) / 1000);
  return fmt::format("&le; {}s", static_cast<double>(us) / 1e6);
}

std::uint64_t value_of(const stats_report& s, std::string_view name) {
  for (const auto& v : s.values)
    if (v.name == name) return v.value;
  return 0;
}

}  // namespace

traffic_rates rates_between(const metrics_snapshot& a, const metrics_snapshot& b, double seconds) {
  traffic_rates r;
  if (seconds <= 0) return r;
  r.seconds = seconds;
  r.published = per_second(a.counters.published, b.counters.published, seconds);
  r.delivered = per_second(a.counters.delivered, b.counters.delivered, seconds);
  r.dropped = per_second(a.counters.dropped, b.counters.dropped, seconds);
  r.sends_routed = per_second(a.counters.sends_routed, b.counters.sends_routed, seconds);
  r.appends = per_second(a.group_commit.records, b.group_commit.records, seconds);
  r.bytes_in = per_second(a.counters.bytes_in, b.counters.bytes_in, seconds);
  r.bytes_out = per_second(a.counters.bytes_out, b.counters.bytes_out, seconds);
  return r;
}

std::string stats_json(const stats_report& st, const metrics_snapshot& m) {
  text::json_writer j;
  j.begin_object().string("version", st.version);
  j.string("server_instance", std::to_string(st.instance_id));
  j.number("uptime_ms", st.uptime_ms);
  j.key("settings").begin_object();
  for (const auto& [name, value] : st.settings) j.string(name, value);
  j.end_object().key("counters").begin_object();
  for (const auto& v : st.values)
    if (v.counter) j.number(v.name, v.value);
  j.end_object().key("gauges").begin_object();
  for (const auto& v : st.values)
    if (!v.counter) j.number(v.name, v.value);
  j.end_object().key("histograms").begin_object();
  for (const auto& h : histograms_of(m)) {
    const auto q = [&](double p) {
      const auto b = h.values->quantile_bound_us(p);
      return b == UINT64_MAX ? std::uint64_t{0} : b;  // 0: past the last bound (or no values)
    };
    j.key(h.name).begin_object().number("count", h.values->count());
    j.key("sum_seconds").decimal(static_cast<double>(h.values->sum_ns()) / 1e9, 6);
    j.number("p50_le_us", q(0.5)).number("p99_le_us", q(0.99)).number("p999_le_us", q(0.999)).end_object();
  }
  j.end_object().end_object();
  return j.str();
}

std::string connz_json(std::span<const protocol::conn_info_fields> conns, std::uint64_t total,
                       std::uint64_t next_cursor) {
  text::json_writer j;
  j.begin_object().number("total", total).number("next_cursor", next_cursor);
  j.key("conns").begin_array();
  for (const auto& c : conns) {
    j.begin_object().number("id", c.id).string("name", c.name).string("client_id", c.client_id);
    j.string("principal", c.principal).string("address", c.address);
    j.number("age_ms", c.age_ms).number("idle_ms", c.idle_ms);
    j.key("capabilities").begin_array();
    for (const auto cap : c.capabilities) j.string(cap);
    j.end_array().number("subscriptions", c.subscriptions).key("inboxes").begin_array();
    for (std::size_t i = 0; i < c.inboxes.size(); ++i) {
      j.begin_object().string("id", c.inboxes[i]);
      j.string("lease", std::to_string(i < c.inbox_leases.size() ? c.inbox_leases[i] : 0)).end_object();
    }
    j.end_array().number("pending_bytes", c.pending_bytes).number("dropped", c.dropped);
    j.number("bytes_in", c.bytes_in).number("bytes_out", c.bytes_out).boolean("tls", c.tls).end_object();
  }
  j.end_array().end_object();
  return j.str();
}

std::string status_html(const status_view& v) {
  const auto& st = *v.stats;
  const auto& m = *v.metrics;
  std::string out;
  out.reserve(16 * 1024);
  auto it = std::back_inserter(out);
  fmt::format_to(it,
                 "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                 "<meta http-equiv=\"refresh\" content=\"{}\">"
                 "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
                 "<title>Switchyard {}</title>\n<style>\n"
                 "body{{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1d2330;background:#f7f8fa}}\n"
                 "h1{{font-size:20px;margin:0 0 .2em}} h2{{font-size:15px;margin:1.4em 0 .4em}}\n"
                 ".sub{{color:#5b6475}} .state{{display:inline-block;padding:.1em .6em;border-radius:1em;"
                 "color:#fff;font-weight:600}} .ready{{background:#2e7d32}} .notready{{background:#c62828}}\n"
                 ".tiles{{display:flex;flex-wrap:wrap;gap:.6em}} .tile{{background:#fff;border:1px solid #dde1e8;"
                 "border-radius:6px;padding:.5em .8em;min-width:8.5em}}\n"
                 ".tile b{{display:block;font-size:20px;font-variant-numeric:tabular-nums}} .tile span{{color:#5b6475;"
                 "font-size:12px}}\n"
                 "table{{border-collapse:collapse;background:#fff;border:1px solid #dde1e8}} "
                 "th,td{{padding:.25em .7em;border-bottom:1px solid #eef0f4;text-align:left}} "
                 "td.n,th.n{{text-align:right;font-variant-numeric:tabular-nums}} th{{background:#eef0f4;"
                 "font-weight:600}}\n"
                 "footer{{margin-top:1.5em;color:#5b6475;font-size:12px}} a{{color:#1f5fbf}}\n"
                 "</style></head><body>\n",
                 v.refresh_seconds, html_escape(st.version));
  fmt::format_to(it,
                 "<h1>Switchyard {} <span class=\"state {}\" id=\"state\">{}</span></h1>\n"
                 "<div class=\"sub\">instance {} &middot; up {}",
                 html_escape(st.version), v.ready.ready ? "ready" : "notready",
                 v.ready.ready ? "ready" : html_escape("not ready: " + v.ready.reason), st.instance_id,
                 elapsed(st.uptime_ms));
  for (const auto& [name, value] : st.settings)
    if (name == "listen" || name == "durability" || name == "tls" || name == "auth")
      fmt::format_to(it, " &middot; {} {}", html_escape(name), html_escape(value));
  out += "</div>\n";

  const auto tile = [&](std::string_view label, const std::string& value, std::string_view id) {
    fmt::format_to(it, "<div class=\"tile\"><b id=\"{}\">{}</b><span>{}</span></div>", id, value, label);
  };
  if (v.rates.seconds > 0)
    fmt::format_to(it, "<h2>Traffic per second <span class=\"sub\">(over the last {:.1f} s)</span></h2>\n",
                   v.rates.seconds);
  else
    out += "<h2>Traffic per second <span class=\"sub\">(known at the next refresh)</span></h2>\n";
  out += "<div class=\"tiles\">";
  tile("published", rate(v.rates.published), "rate-published");
  tile("delivered", rate(v.rates.delivered), "rate-delivered");
  tile("sends routed", rate(v.rates.sends_routed), "rate-sends");
  tile("log appends", rate(v.rates.appends), "rate-appends");
  tile("dropped", rate(v.rates.dropped), "rate-dropped");
  tile("in", bytes(v.rates.bytes_in) + "/s", "rate-in");
  tile("out", bytes(v.rates.bytes_out) + "/s", "rate-out");
  out += "</div>\n<h2>Now</h2>\n<div class=\"tiles\">";
  tile("connections", grouped(m.connections), "connections");
  tile("subscriptions", grouped(m.subscriptions), "subscriptions");
  tile("leases", grouped(m.leases), "leases");
  tile("routes", grouped(m.registry_entries), "routes");
  tile("inboxes", grouped(m.inboxes), "inboxes");
  tile("streams", m.log_enabled ? grouped(m.streams) : std::string("no log"), "streams");
  tile("queued", bytes(static_cast<double>(m.queued_bytes)), "queued");
  out += "</div>\n<h2>Totals</h2>\n<div class=\"tiles\">";
  tile("published", grouped(value_of(st, "published_total")), "published-total");
  tile("delivered", grouped(value_of(st, "delivered_total")), "delivered-total");
  tile("dropped", grouped(value_of(st, "dropped_total")), "dropped-total");
  tile("leases expired", grouped(value_of(st, "leases_expired_total")), "expired-total");
  tile("protocol errors", grouped(value_of(st, "protocol_errors_total")), "protocol-errors-total");
  tile("auth failures", grouped(value_of(st, "auth_failures_total")), "auth-failures-total");
  out +=
      "</div>\n<h2>Latency</h2>\n<table><tr><th></th><th class=\"n\">count</th><th class=\"n\">p50</th>"
      "<th class=\"n\">p99</th><th class=\"n\">p99.9</th></tr>\n";
  for (const auto& h : histograms_of(m)) {
    if (h.values->count() == 0) {
      fmt::format_to(it,
                     "<tr><td>{}</td><td class=\"n\">0</td><td class=\"n\">-</td><td class=\"n\">-</td>"
                     "<td class=\"n\">-</td></tr>\n",
                     h.name);
      continue;
    }
    fmt::format_to(it,
                   "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>"
                   "<td class=\"n\">{}</td></tr>\n",
                   h.name, grouped(h.values->count()), bound(h.values->quantile_bound_us(0.5)),
                   bound(h.values->quantile_bound_us(0.99)), bound(h.values->quantile_bound_us(0.999)));
  }
  out += "</table>\n";

  fmt::format_to(it, "<h2>Connections <span class=\"sub\">({} of {}, most queued first)</span></h2>\n", v.conns.size(),
                 v.conns_total);
  out +=
      "<table id=\"conns\"><tr><th class=\"n\">id</th><th>name</th><th>principal</th><th>address</th>"
      "<th class=\"n\">age</th><th class=\"n\">idle</th><th class=\"n\">subs</th><th>inboxes</th>"
      "<th class=\"n\">queued</th><th class=\"n\">dropped</th><th class=\"n\">in</th><th class=\"n\">out</th></tr>\n";
  for (const auto& c : v.conns) {
    std::string boxes;
    for (const auto& b : c.inboxes) boxes += (boxes.empty() ? "" : ", ") + b;
    fmt::format_to(it,
                   "<tr><td class=\"n\">{}</td><td>{}</td><td>{}</td><td>{}{}</td><td class=\"n\">{}</td>"
                   "<td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}</td>"
                   "<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>\n",
                   c.id, html_escape(c.name.empty() ? "-" : c.name),
                   html_escape(c.principal.empty() ? "-" : c.principal), html_escape(c.address), c.tls ? " (tls)" : "",
                   elapsed(c.age_ms), elapsed(c.idle_ms), c.subscriptions, html_escape(boxes.empty() ? "-" : boxes),
                   bytes(static_cast<double>(c.pending_bytes)), grouped(c.dropped),
                   bytes(static_cast<double>(c.bytes_in)), bytes(static_cast<double>(c.bytes_out)));
  }
  out += "</table>\n";

  if (m.log_enabled) {
    fmt::format_to(it, "<h2>Streams <span class=\"sub\">({} of {}{})</span></h2>\n", v.streams.size(),
                   grouped(m.streams), v.streams_more ? ", by name" : "");
    out +=
        "<table id=\"streams\"><tr><th>name</th><th class=\"n\">first</th><th class=\"n\">last</th>"
        "<th class=\"n\">records</th><th class=\"n\">bytes</th></tr>\n";
    for (const auto& s : v.streams)
      fmt::format_to(it,
                     "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>"
                     "<td class=\"n\">{}</td></tr>\n",
                     html_escape(s.name), s.first_seq, s.last_seq, grouped(s.records),
                     bytes(static_cast<double>(s.bytes)));
    out += "</table>\n";
  }
  fmt::format_to(it,
                 "<footer>Reloads every {} s. Machine-readable: <a href=\"/metrics\">/metrics</a> &middot; "
                 "<a href=\"/stats\">/stats</a> &middot; <a href=\"/connz\">/connz</a> &middot; "
                 "<a href=\"/healthz\">/healthz</a> &middot; <a href=\"/readyz\">/readyz</a></footer>\n"
                 "</body></html>\n",
                 v.refresh_seconds);
  return out;
}

}  // namespace switchyard::broker
