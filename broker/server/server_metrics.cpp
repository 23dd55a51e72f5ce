// server::impl: metrics, Stats, the connection list, readiness and the monitoring port (server_impl.hpp).
#include "broker/server/server_impl.hpp"

#include "broker/config/setting_table.hpp"
#include "broker/monitor/metric_catalog.hpp"

#include <algorithm>
#include <unordered_map>

namespace switchyard::broker {

void server::impl::start_http() {
  http_monitor::sources s{
      [this](const metrics_snapshot& m) { return stats(m); },
      [this] { return metrics(); },
      [this] { return conn_keys(); },
      [this](std::span<const std::uint64_t> ids) { return conn_info(ids); },
      [this] { return ready(); },
      {},
  };
  if (durable)
    s.streams = [this](std::size_t max) {
      http_monitor::stream_page page;
      if (auto list = durable->log().list("", max, &page.more)) page.streams = std::move(*list);
      return page;
    };
  http = std::make_unique<http_monitor>(io, std::move(s), logger);
  http->start(config.http_host, config.http_port);
  logger->info("monitoring on http://{}:{}/ (/metrics, /healthz, /readyz, /stats, /connz)", config.http_host,
               http->port());
}

readiness server::impl::ready() const {
  if (registry.stopping()) return {false, "stopping"};
  if (admission.draining()) return {false, "draining"};
  if (!listening) return {false, "not listening yet"};
  if (!config.data_dir.empty() && !durable) return {false, "the sequence log is not open"};
  if (members && !members->in_standing())
    return {false, "out of standing in the cluster (etcd lease not renewed in time)"};
  if (bus && !bus->nats_connected()) return {false, "the NATS link is down"};
  if (bus && !bus->synced()) return {false, "waiting for the other nodes' channel interest"};
  return {true, {}};
}

void server::impl::log_metrics() const {
  const auto m = metrics();
  const auto& n = m.counters;
  logger->info(
      "SIGUSR1: {} connections ({} being refused), {} subscriptions, {} leases, {} registry entries, {} "
      "inboxes; {} accepted, refused: {} over the cap, {} rate limited, {} draining; {} drained; {} "
      "published, {} delivered, {} dropped, {} sends routed, {} unrouted; {}",
      m.connections, m.connections_rejecting, m.subscriptions, m.leases, m.registry_entries, m.inboxes,
      n.connections_accepted, n.connections_rejected, n.hellos_rate_limited, n.hellos_draining, n.connections_drained,
      n.published, n.delivered, n.dropped, n.sends_routed, n.sends_unrouted,
      m.ready ? "ready" : (m.draining ? "draining" : "stopping"));
}

metrics_snapshot server::impl::metrics() const {
  metrics_snapshot m;
  m.counters = counters;
  m.draining = admission.draining();
  m.ready = !m.draining && !registry.stopping();
  m.connections = registry.size();
  m.connections_rejecting = registry.size() - registry.counted();
  registry.for_each([&m](const connection& c) {
    m.queued_bytes += c.queued_bytes();
    m.queued_bytes_max = std::max(m.queued_bytes_max, c.queued_bytes());
  });
  cluster_metrics(m);
  m.subscriptions = channels.size() - m.cluster_remote_patterns;
  m.leases = leases.size();
  m.registry_entries = routing.entries();
  m.inboxes = routing.inboxes();
  m.incomplete_bytes = input.held();
  m.incomplete_bytes_peak = input.peak();
  m.arena_chunks = arena.chunks_allocated();
  if (offers) {
    const auto& t = offers->offers();
    m.offers = t.size();
    m.offer_bytes = t.bytes();
    m.offers_pending = t.pending_entries();
    m.offers_evicted = t.evicted();
    m.pending_pushed_out = t.pending_pushed_out();
    m.exposure_keys = offers->exposure_counts().size();
    m.exposure_bytes = offers->exposure_counts().bytes();
  }
  m.flag_offers_percent = flags.percent(feature_flags::flag::offers);
  const auto split = flags.connections(feature_flags::flag::offers);
  m.flag_offers_on = split.on;
  m.flag_offers_off = split.off;
  if (durable) {
    m.log_enabled = true;
    m.appends_waiting = durable->waiting();
    m.group_commit = durable->stats();
    m.append_latency = durable->append_latency();
    // An entry count, no walk; a damaged index leaves the gauge at 0 (the
    // stream requests report the damage).
    m.streams = durable->log().stream_count().value_or(0);
  }
  return m;
}

stats_report server::impl::stats(const metrics_snapshot& snapshot) const {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  stats_report r;
  r.version = SWITCHYARD_VERSION;
  r.instance_id = config.instance_id;
  r.uptime_ms =
      static_cast<std::uint64_t>(duration_cast<milliseconds>(std::chrono::steady_clock::now() - started_at).count());
  const auto setting = [&r](std::string name, std::string value) {
    r.settings.emplace_back(std::move(name), std::move(value));
  };
  setting("listen", fmt::format("{}:{}", config.listen_host, port));
  setting("http", http ? fmt::format("{}:{}", config.http_host, http->port()) : std::string("off"));
  setting("tls", config.tls_cert.empty() ? "off" : (config.tls_verify_client ? "on, clients verified" : "on"));
  setting("auth", config.auth_file.empty() ? "off (anonymous)" : config.auth_file);
  for (const auto& s : settings()) {
    if (!s.in_stats) continue;
    std::string name(s.name);
    std::replace(name.begin(), name.end(), '-', '_');
    const std::string value = s.show(config);
    setting(std::move(name), value.empty() ? "(none)" : value);
  }
  for (const auto& m : metrics_of(snapshot)) r.values.push_back({m.name, m.value, m.counter});
  return r;
}

std::vector<conn_key> server::impl::conn_keys() const {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  const auto now = std::chrono::steady_clock::now();
  std::vector<conn_key> keys;
  keys.reserve(registry.size());
  registry.for_each([&](const connection& c) {
    if (!c.welcomed() || c.closing()) return;
    keys.push_back({c.id(),
                    static_cast<std::uint64_t>(
                        std::max<std::int64_t>(0, duration_cast<milliseconds>(now - c.last_received()).count())),
                    c.queued_bytes(), c.dropped_count(), c.subscriptions().size(), c.bytes_in(), c.bytes_out()});
  });
  return keys;
}

std::vector<protocol::conn_info_fields> server::impl::conn_info(std::span<const std::uint64_t> ids) const {
  std::unordered_map<std::uint64_t, const connection*> by_id;
  registry.for_each([&](const connection& c) { by_id.emplace(c.id(), &c); });
  const auto now = std::chrono::steady_clock::now();
  std::vector<protocol::conn_info_fields> out;
  out.reserve(ids.size());
  for (const auto id : ids) {
    const auto it = by_id.find(id);
    if (it == by_id.end()) continue;
    auto& f = out.emplace_back(it->second->info(now));
    for (const auto& box : f.inboxes) f.inbox_leases.push_back(routing.inbox_lease(box).value_or(0));
  }
  return out;
}

}  // namespace switchyard::broker
