#include "broker/handlers/server_admin_handler.hpp"

#include <fmt/format.h>

#include <spdlog/spdlog.h>

#include <algorithm>

namespace switchyard::broker {

conn_page page_connections(std::vector<conn_key> keys, std::uint8_t sort, std::size_t limit, std::uint64_t cursor) {
  using S = protocol::wire::ConnSort;
  conn_page page;
  const auto by_id = [](const conn_key& a, const conn_key& b) { return a.id < b.id; };
  const auto field = [sort](const conn_key& k) -> std::uint64_t {
    switch (static_cast<S>(sort)) {
      case S::idle:
        return k.idle_ms;
      case S::pending_bytes:
        return k.pending_bytes;
      case S::dropped:
        return k.dropped;
      case S::subscriptions:
        return k.subscriptions;
      case S::bytes_in:
        return k.bytes_in;
      case S::bytes_out:
        return k.bytes_out;
      default:
        return 0;
    }
  };
  const bool id_order = sort == static_cast<std::uint8_t>(S::id) || sort > static_cast<std::uint8_t>(S::MAX);
  std::size_t first = 0;
  if (id_order) {
    std::sort(keys.begin(), keys.end(), by_id);
    first = static_cast<std::size_t>(std::upper_bound(keys.begin(), keys.end(), cursor,
                                                      [](std::uint64_t c, const conn_key& k) { return c < k.id; }) -
                                     keys.begin());
  } else {
    std::sort(keys.begin(), keys.end(), [&](const conn_key& a, const conn_key& b) {
      const auto fa = field(a), fb = field(b);
      return fa != fb ? fa > fb : a.id < b.id;
    });
    first = static_cast<std::size_t>(std::min<std::uint64_t>(cursor, keys.size()));
  }
  const std::size_t end = std::min(keys.size(), first + limit);
  for (std::size_t i = first; i < end; ++i) page.ids.push_back(keys[i].id);
  if (end < keys.size() && end > first) page.next_cursor = id_order ? keys[end - 1].id : end;
  return page;
}

server_admin_handler::server_admin_handler(sources from, const std::chrono::milliseconds& default_window,
                                           protocol::frame_builder& builder, std::shared_ptr<spdlog::logger> logger)
    : from_(std::move(from)), default_window_(default_window), builder_(builder), logger_(std::move(logger)) {}

void server_admin_handler::drain(peer& from, std::uint64_t rid, const protocol::wire::Drain& m) {
  const auto window = m.window_ms() > 0 ? std::chrono::milliseconds(m.window_ms()) : default_window_;
  logger_->info("conn={} asked for a drain over {} ms", from.id(), window.count());
  if (rid != 0) from.send(builder_.ok(rid));
  from_.drain(window);
}

void server_admin_handler::stats(peer& from, std::uint64_t rid, const protocol::wire::Stats&) {
  const stats_report r = from_.stats();
  std::vector<protocol::stats_setting_fields> settings;
  settings.reserve(r.settings.size());
  for (const auto& [name, value] : r.settings) settings.push_back({name, value});
  from.send(builder_.stats_result(rid, {r.version, r.instance_id, r.uptime_ms, settings, r.values}));
}

void server_admin_handler::conn_list(peer& from, std::uint64_t rid, const protocol::wire::ConnList& m) {
  const std::size_t limit = m.limit() == 0 ? default_conn_limit : std::min<std::size_t>(m.limit(), max_conn_limit);
  auto keys = from_.conn_keys();
  const std::uint64_t total = keys.size();
  const auto page = page_connections(std::move(keys), static_cast<std::uint8_t>(m.sort()), limit, m.cursor());
  const auto conns = from_.conn_info(page.ids);
  from.send(builder_.conn_list_result(rid, conns, total, page.next_cursor));
}

namespace {
protocol::flag_info_fields flag_fields(const feature_flags& flags, feature_flags::flag f) {
  const auto split = flags.connections(f);
  return {feature_flags::name_of(f), flags.percent(f), split.on, split.off};
}
}  // namespace

void server_admin_handler::flag_set(peer& from, std::uint64_t rid, const protocol::wire::FlagSet& m) {
  const std::string_view name = m.name()->string_view();
  const auto f = feature_flags::find(name);
  if (!from_.flags || !f)
    return from.send_error(rid, protocol::errc::not_found, fmt::format("no flag named '{}' (known: offers)", name));
  if (m.percent() > 100) return from.send_error(rid, protocol::errc::bad_request, "a flag's percentage is 0..100");
  const auto before = from_.flags->percent(*f);
  from_.flags->set(*f, m.percent());
  const auto split = from_.flags->connections(*f);
  logger_->info("conn={} flag {}: {}% -> {}% ({} connections on, {} off)", from.id(), name, before, m.percent(),
                split.on, split.off);
  from.send(builder_.flag_info(rid, flag_fields(*from_.flags, *f)));
}

void server_admin_handler::flag_list(peer& from, std::uint64_t rid, const protocol::wire::FlagList&) {
  std::vector<protocol::flag_info_fields> out;
  if (from_.flags)
    for (std::size_t i = 0; i < feature_flags::count; ++i)
      out.push_back(flag_fields(*from_.flags, static_cast<feature_flags::flag>(i)));
  from.send(builder_.flag_list_result(rid, out));
}

void server_admin_handler::cluster_status(peer& from, std::uint64_t rid, const protocol::wire::ClusterStatus&) {
  std::optional<cluster_status_report> r;
  if (from_.cluster_status) r = from_.cluster_status();
  if (!r) return from.send_error(rid, protocol::errc::not_found, not_in_cluster_message);
  std::vector<protocol::cluster_member_fields> members;
  members.reserve(r->members.size());
  for (const auto& m : r->members)
    members.push_back({m.node_id, m.address, m.incarnation, m.self, m.synced_in, m.patterns, m.messages_out,
                       m.messages_in, m.records_out, m.records_in, m.lost_in, m.failed_out, m.partitions});
  std::vector<protocol::etcd_endpoint_fields> etcd;
  etcd.reserve(r->etcd.size());
  for (const auto& e : r->etcd) etcd.push_back({e.endpoint, e.reachable, e.leader, e.version, e.error});
  const auto& n = r->nats;
  from.send(builder_.cluster_status_result(rid, {r->cluster_name,
                                                 r->node_id,
                                                 r->incarnation,
                                                 r->view_revision,
                                                 r->in_standing,
                                                 r->synced,
                                                 members,
                                                 etcd,
                                                 {n.state, n.server_url, n.max_payload, n.messages_in, n.messages_out,
                                                  n.dropped_in, n.dropped_out, n.reconnects},
                                                 r->local_patterns,
                                                 r->unconfirmed,
                                                 r->interest_timeouts,
                                                 r->lost_in}));
}

void server_admin_handler::cluster_takeover(peer& from, std::uint64_t rid, const protocol::wire::ClusterTakeover& m) {
  if (!from_.cluster_takeover) return from.send_error(rid, protocol::errc::not_found, not_in_cluster_message);
  const auto ticket = from.open_ticket();
  const std::string node = m.node_id()->str();
  from_.cluster_takeover(node, [this, who = from.weak_peer(), rid, ticket, node](auto r) {
    auto p = who.lock();
    if (!p || p->closed()) return;
    if (!r)
      p->send_error(rid, r.error().first, r.error().second);
    else
      p->send(builder_.cluster_takeover_result(rid, node, r->partitions, r->holders));
    p->close_ticket(ticket);
  });
}

}  // namespace switchyard::broker
