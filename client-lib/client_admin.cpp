// client: stream administration on the broker's log (StreamInfo,
// StreamList, SetRetention, StreamDelete; capability "log"), and server
// administration (Drain, Stats, ConnList, ClusterStatus; capability
// "admin").

#include "switchyard/client.hpp"

#include "client_impl_inline.hpp"

#include <algorithm>

namespace switchyard {

namespace {

template <class T>
using result = std::expected<T, std::error_code>;

// Whether the broker granted "admin" to this session.
template <class State>
bool granted_admin(State& c) {
  switchyard::lock_guard lock(c.mu);
  return std::find(c.caps.begin(), c.caps.end(), protocol::capability::admin) != c.caps.end();
}

stream_summary to_summary(const wire::StreamInfoResult& m) {
  stream_summary s;
  if (m.stream()) s.name = m.stream()->str();
  s.epoch = m.epoch();
  s.first_seq = m.first_seq();
  s.last_seq = m.last_seq();
  s.records = m.records();
  s.bytes = m.bytes();
  s.created_ms = m.created_ms();
  // Ages above 2^63 ms cannot come from a conforming broker (at most 2^53 - 1).
  const auto age = std::min<std::uint64_t>(m.max_age_ms(), std::uint64_t{1} << 62);
  s.retention = {m.max_records(), std::chrono::milliseconds(static_cast<std::int64_t>(age)), m.max_bytes()};
  s.own_retention = m.own_retention();
  return s;
}

result<stream_summary> parse_info(const wire::Frame& f) {
  const auto* m = f.message_as_StreamInfoResult();
  if (!m) return std::unexpected(make_error_code(errc::protocol_violation));
  return to_summary(*m);
}

result<cluster_status_info> parse_cluster_status(const wire::Frame& f) {
  const auto* m = f.message_as_ClusterStatusResult();
  if (!m) return std::unexpected(make_error_code(errc::protocol_violation));
  const auto text = [](const flatbuffers::String* x) { return x ? x->str() : std::string(); };
  cluster_status_info s;
  s.cluster_name = text(m->cluster_name());
  s.node_id = text(m->node_id());
  s.incarnation = m->incarnation();
  s.view_revision = m->view_revision();
  s.in_standing = m->in_standing();
  s.synced = m->synced();
  if (m->members())
    for (const auto* x : *m->members())
      s.members.push_back({text(x->node_id()), text(x->address()), x->incarnation(), x->self(), x->synced_in(),
                           x->patterns(), x->messages_out(), x->messages_in(), x->records_out(), x->records_in(),
                           x->lost_in(), x->failed_out(), x->partitions()});
  if (m->etcd())
    for (const auto* x : *m->etcd())
      s.etcd.push_back({text(x->endpoint()), x->reachable(), x->leader(), text(x->version()), text(x->error())});
  if (const auto* n = m->nats())
    s.nats = {text(n->state()),  text(n->server_url()), n->max_payload(), n->messages_in(),
              n->messages_out(), n->dropped_in(),       n->dropped_out(), n->reconnects()};
  s.local_patterns = m->local_patterns();
  s.unconfirmed = m->unconfirmed();
  s.interest_timeouts = m->interest_timeouts();
  s.lost_in = m->lost_in();
  return s;
}

// A negative age is sent as a huge one, which the broker refuses (bad_request).
protocol::retention_fields to_fields(const stream_retention& r) {
  return {r.max_records, static_cast<std::uint64_t>(r.max_age.count()), r.max_bytes};
}

}  // namespace

result<stream_summary> client::stream_info(std::string_view stream) {
  if (!impl_->log_cap) return std::unexpected(make_error_code(errc::not_supported));
  return impl_->call<stream_summary>([&](std::uint64_t r) { return local_builder().stream_info(r, stream); },
                                     parse_info);
}

result<std::vector<stream_summary>> client::stream_list(std::string_view prefix, std::size_t limit, bool* more) {
  if (!impl_->log_cap) return std::unexpected(make_error_code(errc::not_supported));
  const auto n = static_cast<std::uint32_t>(std::min<std::size_t>(limit, UINT32_MAX));
  auto cut = std::make_shared<bool>(false);
  auto r = impl_->call<std::vector<stream_summary>>(
      [&](std::uint64_t id) { return local_builder().stream_list(id, prefix, n); },
      [cut](const wire::Frame& f) -> result<std::vector<stream_summary>> {
        const auto* m = f.message_as_StreamListResult();
        if (!m) return std::unexpected(make_error_code(errc::protocol_violation));
        std::vector<stream_summary> out;
        if (m->streams()) {
          out.reserve(m->streams()->size());
          for (const auto* s : *m->streams()) out.push_back(to_summary(*s));
        }
        *cut = m->more();
        return out;
      });
  if (more) *more = r && *cut;
  return r;
}

result<stream_summary> client::set_stream_retention(std::string_view stream, const stream_retention& limits) {
  if (!impl_->log_cap) return std::unexpected(make_error_code(errc::not_supported));
  return impl_->call<stream_summary>(
      [&](std::uint64_t r) { return local_builder().set_retention(r, stream, to_fields(limits)); }, parse_info);
}

result<stream_summary> client::clear_stream_retention(std::string_view stream) {
  if (!impl_->log_cap) return std::unexpected(make_error_code(errc::not_supported));
  return impl_->call<stream_summary>(
      [&](std::uint64_t r) { return local_builder().set_retention(r, stream, {}, true); }, parse_info);
}

result<stream_summary> client::delete_stream(std::string_view stream) {
  if (!impl_->log_cap) return std::unexpected(make_error_code(errc::not_supported));
  return impl_->call<stream_summary>([&](std::uint64_t r) { return local_builder().stream_delete(r, stream); },
                                     parse_info);
}

std::error_code client::drain(std::chrono::milliseconds window) {
  if (!granted_admin(*impl_)) return errc::not_supported;
  const auto ms = static_cast<std::uint32_t>(std::clamp<std::int64_t>(window.count(), 0, UINT32_MAX));
  return impl_->request_sync([&](std::uint64_t r) { return local_builder().drain(r, ms); });
}

result<server_stats> client::stats() {
  if (!granted_admin(*impl_)) return std::unexpected(make_error_code(errc::not_supported));
  return impl_->call<server_stats>(
      [](std::uint64_t r) { return local_builder().stats(r); },
      [](const wire::Frame& f) -> result<server_stats> {
        const auto* m = f.message_as_StatsResult();
        if (!m) return std::unexpected(make_error_code(errc::protocol_violation));
        server_stats s;
        if (m->version()) s.version = m->version()->str();
        s.instance_id = m->instance_id();
        s.uptime =
            std::chrono::milliseconds(static_cast<std::int64_t>(std::min<std::uint64_t>(m->uptime_ms(), INT64_MAX)));
        if (m->settings())
          for (const auto* x : *m->settings())
            s.settings.emplace_back(x->name()->str(), x->value() ? x->value()->str() : std::string());
        if (m->values())
          for (const auto* v : *m->values()) s.values.push_back({v->name()->str(), v->value(), v->counter()});
        return s;
      });
}

result<cluster_status_info> client::cluster_status() {
  if (!granted_admin(*impl_)) return std::unexpected(make_error_code(errc::not_supported));
  return impl_->call<cluster_status_info>([](std::uint64_t r) { return local_builder().cluster_status(r); },
                                          parse_cluster_status);
}

result<cluster_takeover_info> client::cluster_takeover(std::string_view node_id) {
  if (!granted_admin(*impl_)) return std::unexpected(make_error_code(errc::not_supported));
  return impl_->call<cluster_takeover_info>(
      [node = std::string(node_id)](std::uint64_t r) { return local_builder().cluster_takeover(r, node); },
      [](const wire::Frame& f) -> result<cluster_takeover_info> {
        const auto* m = f.message_as_ClusterTakeoverResult();
        if (!m) return std::unexpected(make_error_code(errc::protocol_violation));
        cluster_takeover_info out;
        if (m->node_id()) out.node_id = m->node_id()->str();
        if (m->partitions()) out.partitions.assign(m->partitions()->begin(), m->partitions()->end());
        if (m->holders())
          for (const auto* h : *m->holders()) out.holders.push_back(h ? h->str() : std::string());
        return out;
      });
}

result<connection_page> client::connections(connection_order order, std::size_t limit, std::uint64_t cursor) {
  if (!granted_admin(*impl_)) return std::unexpected(make_error_code(errc::not_supported));
  const auto n = static_cast<std::uint32_t>(std::min<std::size_t>(limit, UINT32_MAX));
  const auto ms = [](std::uint64_t v) {
    return std::chrono::milliseconds(static_cast<std::int64_t>(std::min<std::uint64_t>(v, INT64_MAX)));
  };
  return impl_->call<connection_page>(
      [&](std::uint64_t r) { return local_builder().conn_list(r, static_cast<std::uint8_t>(order), n, cursor); },
      [ms](const wire::Frame& f) -> result<connection_page> {
        const auto* m = f.message_as_ConnListResult();
        if (!m) return std::unexpected(make_error_code(errc::protocol_violation));
        const auto text = [](const flatbuffers::String* x) { return x ? x->str() : std::string(); };
        connection_page page;
        page.total = m->total();
        page.next_cursor = m->next_cursor();
        if (!m->conns()) return page;
        for (const auto* c : *m->conns()) {
          connection_summary s;
          s.id = c->id();
          s.name = text(c->name());
          s.client_id = text(c->client_id());
          s.principal = text(c->principal());
          s.address = text(c->address());
          s.age = ms(c->age_ms());
          s.idle = ms(c->idle_ms());
          if (c->capabilities())
            for (const auto* x : *c->capabilities()) s.capabilities.push_back(x->str());
          s.subscriptions = c->subscriptions();
          if (c->inboxes())
            for (const auto* x : *c->inboxes()) s.inboxes.push_back(x->str());
          if (c->inbox_leases()) s.inbox_leases.assign(c->inbox_leases()->begin(), c->inbox_leases()->end());
          s.pending_bytes = c->pending_bytes();
          s.dropped = c->dropped();
          s.bytes_in = c->bytes_in();
          s.bytes_out = c->bytes_out();
          s.tls = c->tls();
          page.connections.push_back(std::move(s));
        }
        return page;
      });
}

}  // namespace switchyard
