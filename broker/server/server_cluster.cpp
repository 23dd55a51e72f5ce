// server::impl's cluster mode (docs/cluster.md): joining, leaving, and the
// figures the node reports of its cluster.

#include "broker/server/server_impl.hpp"

#include "broker/cluster/partition_map.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include <fcntl.h>
#include <unistd.h>

namespace switchyard::broker {

namespace {
// The id of the log in `log_dir` for the cluster's stream keys: read from
// its file, or made (128 random bits, hex) and written there on first use.
// A log made afresh (a lost or replaced data folder) gets a new one.
std::string log_id_of(const std::filesystem::path& log_dir) {
  const auto file = log_dir / "cluster-log-id";
  if (std::ifstream in(file); in) {
    std::string id;
    if (std::getline(in, id) && id.size() == 32 && id.find_first_not_of("0123456789abcdef") == std::string::npos)
      return id;
    throw std::runtime_error("cluster: " + file.string() + " is damaged (32 hex digits expected)");
  }
  std::random_device rd;
  std::string id;
  for (int i = 0; i < 4; ++i) id += fmt::format("{:08x}", rd());
  // Durable before etcd names it: written, fsynced, renamed, the folder
  // fsynced.
  const auto tmp = log_dir / "cluster-log-id.tmp";
  const std::string line = id + "\n";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const bool written =
      fd >= 0 && ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) && ::fsync(fd) == 0;
  if (fd >= 0) ::close(fd);
  if (!written) throw std::runtime_error("cluster: cannot write " + tmp.string());
  std::filesystem::rename(tmp, file);
  if (const int dir = ::open(log_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  return id;
}
}  // namespace

void server::impl::join_cluster() {
  const std::string log_id = durable ? log_id_of(std::filesystem::path(config.data_dir) / "log") : std::string();
  node_bus_options bo;
  bo.cluster_name = config.cluster_name;
  bo.node_id = config.cluster_node_id;
  bo.nats_servers = config.cluster_nats;
  bo.interest_timeout = config.cluster_interest_timeout;
  bo.max_frame = config.max_frame;
  bo.nats_queue_bytes = config.cluster_nats_queue_bytes;
  bus = std::make_unique<node_bus>(io, std::move(bo), channels, fan, logger);
  // A link that lost messages: every subscriber here may have missed some.
  bus->on_link_loss([this](std::uint64_t lost) {
    registry.for_each_owner([lost](const std::shared_ptr<connection>& c) {
      if (!c->subscriptions().empty()) c->report_lost(lost);
    });
  });
  // NATS first: a node is subscribed to its subject before etcd lists it,
  // so nothing the others send it once they see it is missed.
  bus->start();
  pubsub->use_cluster(bus.get());
  route_relay_options ro;
  ro.forward_timeout = config.cluster_forward_timeout;
  relay = std::make_unique<route_relay>(
      io, ro, *bus, routing, fan, [this] { return members && members->in_standing(); }, logger);
  routing_requests->use_cluster(relay.get());
  offer_asks = std::make_unique<offer_relay>(io, *bus, config.cluster_forward_timeout, logger);
  if (offers) offers->use_cluster(relay.get(), offer_asks.get());
  {
    stream_relay_options so;
    so.forward_timeout = config.cluster_forward_timeout;
    so.max_frame = config.max_frame;
    so.log_id = log_id;
    streams = std::make_unique<stream_relay>(
        io, so, *bus, log_requests != nullptr, [this] { return members && members->in_standing(); },
        [this](std::uint32_t partition) {
          if (members) members->pin_streams(partition);
        },
        logger);
    streams->set_runner([this](peer& from, const protocol::wire::Frame& frame, std::string_view stream) {
      if (dispatch->stream_of(from, frame) != stream) return false;
      // A request about no stream: only a StreamList (asked of every member).
      if (stream.empty() && frame.message_type() != protocol::wire::Message::StreamList) return false;
      // A Send reads the lease clock at the start of a batch: one frame is
      // a batch of its own.
      if (frame.message_type() == protocol::wire::Message::Send) {
        const protocol::frame_view one{&frame, 0, false};
        dispatch->look_ahead(from, {&one, 1}, 0);
      }
      dispatch->dispatch(from, frame);
      return true;
    });
    streams->on_taken_over([this](const std::vector<std::uint32_t>& partitions) {
      if (streams_taken_over) return;
      logger->error(
          "cluster: the streams of {} partition(s) this node held were declared lost (cluster takeover, while it was "
          "cut off) and have new holders; its log holds a history the cluster no longer has: draining and stopping",
          partitions.size());
      streams_taken_over = true;
      begin_drain(config.drain_window);
    });
    if (log_requests) dispatch->use_cluster(streams.get());
    // StreamList lists the streams whose partition this node's log holds
    // now (after a takeover, another log holds what this one kept).
    if (stream_admin)
      stream_admin->set_list_filter([this](std::string_view stream) {
        const auto* view = bus ? bus->view() : nullptr;
        if (!view || view->stream_holders.empty()) return true;
        return view->stream_holders[partition_map::partition_of(stream)] == config.cluster_node_id;
      });
    // An append that became durable while this node was cut off is not
    // acknowledged: the cluster may have declared this log's streams lost
    // meanwhile (docs/cluster.md, "Durable streams").
    if (durable)
      durable->set_send_router([this](peer* from, std::uint64_t rid, std::uint64_t ticket,
                                      std::span<const std::string_view> keys, protocol::bytes_view payload,
                                      const log_position& position, std::chrono::steady_clock::time_point deadline) {
        relay->send_durable(from, rid, ticket, keys, payload, position, deadline);
      });
    if (durable)
      durable->set_ack_gate([this]() -> std::string {
        if (!members || members->in_standing()) return {};
        return "this node is out of standing in its cluster (cut off from etcd): the stream may have been declared "
               "lost meanwhile; read it to find out";
      });
  }

  const bool wildcard = config.listen_host == "0.0.0.0" || config.listen_host == "::" || config.listen_host == "[::]";
  if (config.cluster_advertise.empty() && wildcard)
    throw std::runtime_error("--cluster-advertise is needed when --listen is a wildcard address (" +
                             config.listen_host + "): the other nodes and the clients need one they can reach");
  membership_options mo;
  mo.cluster_name = config.cluster_name;
  mo.node_id = config.cluster_node_id;
  mo.advertise =
      config.cluster_advertise.empty() ? config.listen_host + ":" + std::to_string(port) : config.cluster_advertise;
  mo.etcd_endpoints = config.cluster_etcd;
  mo.lease_ttl = std::chrono::seconds(config.cluster_lease_ttl_s);
  mo.log_id = log_id;
  members = std::make_unique<membership>(io.get_executor(), std::move(mo), logger);
  // The partitions of the streams already in the log: this node's, or
  // (another node holds them) taken over while it was away.
  std::map<std::uint32_t, std::string> logged;  // partition -> one of its streams, to name it
  if (durable && streams) {
    auto all = durable->log().list();
    if (!all) throw std::runtime_error("cannot list the streams of the log: " + all.error().message());
    for (const auto& s : *all) logged.emplace(partition_map::partition_of(s.name), s.name);
  }
  auto view = members->join(
      [this](std::shared_ptr<const cluster_view> v) {
        if (!bus) return;
        bus->apply_view(std::move(v), members->incarnation());
        if (relay) relay->view_changed();
        if (streams) streams->view_changed();
      },
      // Standing is read from the membership where it is needed (the
      // clock decides it); the loop has nothing to keep.
      [](bool) {});
  // Partitions etcd says this node holds in another log: its data folder
  // was lost or replaced, and their streams with it.
  if (durable && view->stream_logs.size() == view->stream_holders.size())
    for (std::size_t p = 0; p < view->stream_holders.size(); ++p)
      if (view->stream_holders[p] == config.cluster_node_id && !view->stream_logs[p].empty() &&
          view->stream_logs[p] != log_id) {
        members->leave();
        throw std::runtime_error(
            "cluster: etcd records this node as the holder of the streams of partition " + std::to_string(p) +
            " (and maybe others) in log " + view->stream_logs[p] + ", but the log in " + config.data_dir + " is " +
            log_id +
            " (a new or replaced data folder): those streams are lost. Declare it: stop this node, run "
            "switchyard-cli cluster takeover " +
            config.cluster_node_id + " --yes against another node, then start this one again");
      }
  // The streams in the log: each partition must be this node's, in this
  // log, or nobody's yet (then recorded as this node's, before anything
  // is served). Checked first, pinned after: a refused start writes
  // nothing.
  std::vector<std::uint32_t> unpinned;
  for (const auto& [p, name] : logged) {
    if (p >= view->stream_holders.size()) continue;
    const auto& holder = view->stream_holders[p];
    const auto& log = view->stream_logs[p];
    if (holder.empty()) {
      unpinned.push_back(p);
      continue;
    }
    if (holder == config.cluster_node_id && log == log_id) continue;
    members->leave();
    throw std::runtime_error(
        "cluster: the log in " + config.data_dir + " holds stream '" + name + "' (and maybe others) of partition " +
        std::to_string(p) + ", whose streams etcd records in " +
        (holder == config.cluster_node_id ? std::string("this node's") : "node '" + holder + "'s") +
        (log.empty() ? std::string(" log-to-be (a takeover named it)") : " log " + log) +
        ": this log's copy is not the cluster's (a takeover declared it lost, or another node held the partition "
        "first); move the data folder aside, keeping it if its records matter, and start again");
  }
  if (!unpinned.empty())
    if (const auto others = members->pin_at_start(unpinned); !others.empty()) {
      members->leave();
      throw std::runtime_error("cluster: the log in " + config.data_dir + " holds streams of partition " +
                               std::to_string(others.front()) +
                               " (and maybe others), which another node came to hold while this one started: move "
                               "the data folder aside, keeping it if its records matter, and start again");
    }
  bus->apply_view(std::move(view), members->incarnation());
  relay->view_changed();
  if (streams) streams->view_changed();
  logger->info("cluster: node '{}' of '{}', {} member(s); advertised as {}", config.cluster_node_id,
               config.cluster_name, bus->view()->members.size(), members->options().advertise);
}

void server::impl::leave_cluster() {
  // Outcomes and answers other nodes wait for go out first.
  if (relay) relay->flush_now();
  if (streams) streams->flush_now();
  if (durable) {
    durable->set_ack_gate(nullptr);
    durable->set_send_router(nullptr);
  }
  if (members) members->leave();
  if (pubsub) pubsub->use_cluster(nullptr);
  if (routing_requests) routing_requests->use_cluster(nullptr);
  if (offers) offers->use_cluster(nullptr, nullptr);
  if (dispatch) dispatch->use_cluster(nullptr);
  if (stream_admin) stream_admin->set_list_filter(nullptr);
  // The relay first: it answers the durable sends still waiting, some on
  // remote_peers of the stream relay, whose answers then go out with it.
  relay.reset();
  offer_asks.reset();
  if (streams) streams->flush_now();
  streams.reset();
  if (bus) bus->stop();
}

void server::impl::cluster_takeover(std::string_view node, server_admin_handler::takeover_done done) {
  using protocol::errc;
  const auto refuse = [&](errc code, std::string why) { done(std::unexpected(std::make_pair(code, std::move(why)))); };
  if (!bus || !members || !bus->view())
    return refuse(errc::not_found, std::string(server_admin_handler::not_in_cluster_message));
  const auto& view = *bus->view();
  if (node.empty()) return refuse(errc::bad_request, "node_id is empty");
  if (node == config.cluster_node_id)
    return refuse(errc::bad_request,
                  "node '" + std::string(node) + "' is the node asked: ask another node to take over its streams");
  if (view.find(node))
    return refuse(errc::bad_request, "node '" + std::string(node) +
                                         "' is a member now: a takeover is for a node that is gone for good (stop "
                                         "it first, and wait for its etcd lease to lapse if it died)");
  if (!members->in_standing()) return refuse(errc::unavailable, "this node is out of standing (cut off from etcd)");
  if (admission.draining()) return refuse(errc::unavailable, "this node is draining: ask another node");
  // Each partition to its owner now (a member), else to this node.
  membership::moves wanted;
  std::vector<std::string> expected;
  for (std::uint32_t p = 0; p < view.stream_holders.size(); ++p) {
    if (view.stream_holders[p] != node) continue;
    expected.push_back(partition_keeper::holder_value(node, p < view.stream_logs.size() ? view.stream_logs[p] : ""));
    // A member with a log only (one without could never serve them).
    if (const auto* owner = view.owner(p); owner && owner->has_log)
      wanted.emplace_back(p, owner->node_id);
    else if (durable)
      wanted.emplace_back(p, config.cluster_node_id);
    else
      return refuse(errc::unavailable, "partition " + std::to_string(p) +
                                           "'s owner has no sequence log, nor has this node: ask a node with one");
  }
  if (wanted.empty()) return done(server_admin_handler::takeover_result{});
  logger->warn("cluster: takeover of the streams of node '{}' ({} partition(s)) asked", node, wanted.size());
  members->take_over(std::string(node), std::move(wanted), std::move(expected), [done = std::move(done)](auto r) {
    if (!r) return done(std::unexpected(std::make_pair(errc::unavailable, r.error())));
    server_admin_handler::takeover_result out;
    for (auto& [p, to] : *r) {
      out.partitions.push_back(p);
      out.holders.push_back(std::move(to));
    }
    done(std::move(out));
  });
}

asio::awaitable<void> server::impl::standing_watch_loop() {
  using clock = std::chrono::steady_clock;
  asio::steady_timer timer(io);
  std::optional<clock::time_point> lost_since;
  for (;;) {
    timer.expires_after(std::chrono::milliseconds(250));
    asio_error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (ec || registry.stopping() || admission.draining() || !members) co_return;
    const auto now = clock::now();
    if (members->in_standing()) {
      lost_since.reset();
      continue;
    }
    if (!lost_since) lost_since = now;
    // Reloadable: read each time; counted from when standing was lost.
    const auto after = config.cluster_drain_after;
    if (after.count() == 0 || now - *lost_since < after) continue;
    logger->error(
        "cluster: out of standing (cut off from etcd) for {} s (cluster-drain-after-s): draining the clients to the "
        "other nodes, then exiting",
        after.count());
    drained_for_lost_standing = true;
    begin_drain(config.drain_window);
    co_return;
  }
}

void server::impl::cluster_metrics(metrics_snapshot& m) const {
  if (!bus) return;
  const auto s = bus->status();
  m.cluster = true;
  m.cluster_members = bus->view() ? bus->view()->members.size() : 0;
  m.cluster_in_standing = members && members->in_standing();
  m.cluster_nats_connected = s.nats.state == cluster::link_state::connected;
  m.cluster_messages_out = s.totals.messages_out;
  m.cluster_messages_in = s.totals.messages_in;
  m.cluster_records_out = s.totals.records_out;
  m.cluster_records_in = s.totals.records_in;
  m.cluster_lost = s.totals.lost_in;
  m.cluster_send_failed = s.totals.failed_out;
  m.cluster_interest_timeouts = s.interest_timeouts;
  m.cluster_dropped = s.dropped_unknown + s.dropped_malformed;
  m.cluster_remote_patterns = s.remote_patterns;
  if (relay) {
    const auto r = relay->counters();
    m.cluster_sends_forwarded = r.sends_forwarded;
    m.cluster_outcome_unknown = r.sends_unknown;
    m.cluster_unavailable = r.unavailable;
    m.cluster_puts_confirmed = r.puts_confirmed;
    m.cluster_rebuilt = r.rebuilds;
    m.cluster_directory_entries = r.directory_entries;
    m.cluster_partitions_owned = r.partitions_held;
    m.cluster_partitions_unowned = r.partitions_unowned;
    m.cluster_partitions_rebuilding = r.partitions_rebuilding;
  }
  if (streams) {
    const auto s = streams->counters();
    m.cluster_stream_forwarded = s.forwarded;
    m.cluster_stream_served = s.served;
    m.cluster_stream_partitions = s.held_partitions;
    m.cluster_outcome_unknown += s.unknown;
    m.cluster_unavailable += s.unavailable;
  }
}

}  // namespace switchyard::broker

namespace switchyard::broker {

std::optional<cluster_status_report> server::impl::cluster_status() const {
  if (!bus || !members) return std::nullopt;
  const auto s = bus->status();
  cluster_status_report r;
  r.cluster_name = config.cluster_name;
  r.node_id = config.cluster_node_id;
  r.incarnation = members->incarnation();
  r.in_standing = members->in_standing();
  r.synced = bus->synced();
  if (const auto* view = bus->view()) {
    r.view_revision = view->revision;
    for (const auto& m : view->members) {
      cluster_status_report::member out;
      out.node_id = m.node_id;
      out.address = m.address;
      out.incarnation = m.incarnation;
      out.self = m.node_id == config.cluster_node_id;
      for (const auto& o : view->owners) out.partitions += o.node_id == m.node_id && o.incarnation == m.incarnation;
      for (const auto& p : s.peers) {
        if (p.member.node_id != m.node_id) continue;
        out.synced_in = p.synced_in;
        out.patterns = p.patterns;
        out.messages_out = p.counters.messages_out;
        out.messages_in = p.counters.messages_in;
        out.records_out = p.counters.records_out;
        out.records_in = p.counters.records_in;
        out.lost_in = p.counters.lost_in;
        out.failed_out = p.counters.failed_out;
      }
      r.members.push_back(std::move(out));
    }
  }
  for (const auto& e : members->etcd_health())
    r.etcd.push_back({e.endpoint, e.reachable, e.leader, e.version, e.error});
  r.nats.state = std::string(cluster::to_string(s.nats.state));
  r.nats.server_url = s.nats.server_url;
  r.nats.max_payload = s.nats.max_payload;
  r.nats.messages_in = s.nats.messages_in;
  r.nats.messages_out = s.nats.messages_out;
  r.nats.dropped_in = s.nats.dropped_in;
  r.nats.dropped_out = s.nats.dropped_out;
  r.nats.reconnects = s.nats.reconnects;
  r.local_patterns = s.local_patterns;
  r.unconfirmed = s.unconfirmed;
  r.interest_timeouts = s.interest_timeouts;
  r.lost_in = s.lost_in;
  return r;
}

}  // namespace switchyard::broker
