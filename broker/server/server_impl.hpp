#pragma once
// server::impl, private to broker/server/: what the server owns and the
// functions of each role, defined in the file of that role:
//   server.cpp            construction, start-up (the log, the handlers, the
//                         acceptor) and the public server:: functions
//   server_accept.cpp     the accept loop, TLS handshakes, admitting a connection
//   server_lifecycle.cpp  the lease sweeper, the offer timer, stop, drain,
//                         signals, the once-a-second refusal and expiry lines
//   server_reload.cpp     SIGHUP: the config file (setting_table), TLS and auth files
//   server_metrics.cpp    metrics, Stats, the connection list, readiness and
//                         the monitoring port
//   server_cluster.cpp    cluster mode: joining (etcd, NATS), leaving, and
//                         what the node tells of its cluster
// Everything here runs on the loop thread unless it says otherwise.

#include "broker/server/server.hpp"

#include "broker/admission/admission_control.hpp"
#include "broker/admission/authenticator.hpp"
#include "broker/cluster/membership.hpp"
#include "broker/cluster/node_bus.hpp"
#include "broker/cluster/offer_relay.hpp"
#include "broker/cluster/route_relay.hpp"
#include "broker/cluster/stream_relay.hpp"
#include "broker/delivery/fanout.hpp"
#include "broker/dispatch/dispatcher.hpp"
#include "broker/handlers/log_handler.hpp"
#include "broker/handlers/offer_handler.hpp"
#include "broker/handlers/pubsub_handler.hpp"
#include "broker/handlers/routing_handler.hpp"
#include "broker/handlers/server_admin_handler.hpp"
#include "broker/handlers/stream_admin_handler.hpp"
#include "broker/monitor/http_monitor.hpp"
#include "broker/requests/durable_pipeline.hpp"
#include "broker/tables/channel_table.hpp"
#include "broker/tables/drain_schedule.hpp"
#include "broker/tables/frame_arena.hpp"
#include "broker/tables/lease_table.hpp"
#include "broker/tables/routing_table.hpp"
#include "broker/transport/connection.hpp"
#include "broker/transport/connection_registry.hpp"
#include "broker/transport/input_memory.hpp"
#include "broker/transport/loop_pressure.hpp"
#include "broker/transport/write_batch.hpp"
#include "broker/transport/tls_context.hpp"
#include "common/asio.hpp"

#include <spdlog/spdlog.h>

#include <optional>
#include <vector>

namespace switchyard::broker {

struct server::impl {
  // Draws the instance id if none was injected, makes the logger and the
  // tables; start() does the rest. Throws on an invalid lease setting.
  explicit impl(server_config cfg);

  // The "broker" logger (the one registered, e.g. by a test, or a new one
  // on stderr) at `level`, with the line style `format`.
  static std::shared_ptr<spdlog::logger> make_logger(const std::string& level, const std::string& format);

  // Everything a connection borrows is declared before the io_context, so
  // it is destroyed after it: the io_context destroys every coroutine (and
  // so every connection) first. The arena outlives everything that holds
  // frame_refs.
  server_config config;
  std::shared_ptr<spdlog::logger> logger;
  frame_arena arena;
  protocol::frame_builder builder;  // the loop's scratch encoder
  server_counters counters;
  channel_table channels;
  lease_table leases;
  routing_table routing;
  fanout fan;
  loop_pressure pressure;
  write_batch writes;  // the connections a read queued frames for, written at its end
  input_memory input;
  connection_registry registry;
  admission_control admission;
  authenticator auth;
  feature_flags flags;
  // Created by start(): they depend on whether there is a sequence log.
  std::unique_ptr<durable_pipeline> durable;
  std::unique_ptr<pubsub_handler> pubsub;
  std::unique_ptr<routing_handler> routing_requests;
  std::unique_ptr<log_handler> log_requests;
  std::unique_ptr<stream_admin_handler> stream_admin;
  std::unique_ptr<server_admin_handler> server_admin;
  std::unique_ptr<offer_handler> offers;
  std::unique_ptr<dispatcher> dispatch;
  std::unique_ptr<connection_context> context;

  // TLS on the client port (null: plain). Replaced by a reload; sessions
  // hold the context they were made from.
  std::shared_ptr<tls_context> tls;

  asio::io_context io{1};
  asio::ip::tcp::acceptor acceptor{io};
  // Wakes offer_loop at the next offer deadline.
  asio::steady_timer offer_timer{io};
  // The monitoring port (--http), if on; destroyed before the io_context.
  std::unique_ptr<http_monitor> http;
  asio::signal_set signals{io};
  std::uint16_t port = 0;
  // Cluster mode (--cluster-node-id; null on a single node): the links to
  // the other nodes and the membership, made by join_cluster(); declared
  // after the io_context, so destroyed before it.
  std::unique_ptr<node_bus> bus;
  std::unique_ptr<route_relay> relay;       // routes and send-to-user across nodes (uses bus)
  std::unique_ptr<offer_relay> offer_asks;  // offers across nodes (uses bus)
  std::unique_ptr<stream_relay> streams;    // durable streams across nodes (uses bus and members)
  std::unique_ptr<membership> members;

  // A drain under way (begin_drain): its schedule, the connections open
  // when it began in the order they are closed, and how many of them were
  // handled (closed, or found gone).
  std::optional<drain_schedule> drain;
  bool drained_for_lost_standing = false;  // standing_watch_loop began the drain
  bool streams_taken_over = false;         // this node's streams were declared lost: drained, then stopped
  std::vector<std::weak_ptr<connection>> drain_order;
  std::size_t drained = 0;
  // Refusals last logged (report_refusals), and when.
  server_counters refusals_logged;
  std::chrono::steady_clock::time_point refusals_logged_at{};

  void open_log();
  void wire_handlers();
  // Cluster mode, at start once the port is bound (blocks): connects to
  // NATS, joins through etcd, applies the first view. Throws
  // std::runtime_error naming what failed.
  void join_cluster();
  // Leaves etcd (the lease revoked: the other nodes drop this one at once)
  // and NATS. Idempotent; loop thread or after the loop stopped.
  void leave_cluster();
  // Cluster mode, on the loop every 250 ms: once the node has been out of
  // standing for cluster-drain-after-s (0: never), begins a drain over
  // drain-window-ms (and so exits). Ends when the server stops or drains.
  asio::awaitable<void> standing_watch_loop();
  // Fills the cluster figures of `m`.
  void cluster_metrics(metrics_snapshot& m) const;
  // The ClusterStatus answer; nullopt on a single node.
  std::optional<cluster_status_report> cluster_status() const;
  // ClusterTakeover (docs/cluster.md, "Durable streams"): checks, then
  // moves `node`'s stream partitions to their owners (or this node).
  void cluster_takeover(std::string_view node, server_admin_handler::takeover_done done);
  // --http: starts the monitoring port on the loop (throws like start()).
  void start_http();
  // GET /readyz: listening, the log open (with a data folder), not draining
  // or stopping.
  readiness ready() const;
  asio::awaitable<void> accept_loop();
  // Registers and starts a connection on an accepted (and, with TLS,
  // handshaken) stream.
  void admit(byte_stream stream);
  // TLS: the handshake, bounded by the hello timeout, then admit(). A
  // failed handshake is logged (info: the client's address and why) and
  // the socket closed; a plain client is told in plain text first.
  asio::awaitable<void> tls_accept(asio::ip::tcp::socket socket);
  // SIGHUP: loads the certificate, key and CA files of `from` again; on
  // success new connections use them, else the old ones stay (logged).
  // Returns whether it did (true also with TLS off: nothing to do).
  bool reload_tls(const server_config& from);
  // SIGHUP: reads the auth file again. Valid: its rules are in force at
  // once, every connection's principal is replaced by the new one of the
  // same name (a removed one is closed with unauthorized), and the channel
  // table's matches are recomputed. Invalid: the rules in force stay (logged).
  void reload_auth();
  asio::awaitable<void> sweep_loop();
  // Receipt timeouts and offer expiries (offer_handler::sweep), at each
  // deadline; idle while there is no live offer.
  asio::awaitable<void> offer_loop();
  void begin_stop();
  // Drains (docs/protocol.md §9.1; SIGUSR2 and the Drain request):
  // admission_control refuses new connections with `draining` from now on;
  // drain_loop closes the open ones in batches spread evenly over `window`,
  // each told `draining` with a reconnect window of min(window, 10 s); run()
  // returns once the last one is gone or the window ended (and their
  // goodbyes flushed, at most the shutdown grace). A second call while
  // draining or stopping does nothing.
  void begin_drain(std::chrono::milliseconds window);
  asio::awaitable<void> drain_loop();
  // Waits until every connection is gone or `grace` passed, then stops
  // the loop (run() returns).
  asio::awaitable<void> stop_when_closed(std::chrono::milliseconds grace);
  void wait_signal();
  // SIGHUP: re-reads the config file; applies what can change at run time.
  void reload();
  // At most once a second, one warning line with the connections refused
  // since the last one (refusals are logged one by one at debug only: they
  // come in storms).
  void report_refusals();
  // Lease expiries not logged yet, and when the last line went out: at
  // most one info line a second sums the sweeps since (report_expiries).
  struct expiry_totals {
    std::size_t leases = 0, routes = 0, inboxes = 0;
  } expiries_unlogged;
  std::chrono::steady_clock::time_point expiries_logged_at{};
  void report_expiries();
  // SIGUSR1: logs the counters and gauges.
  void log_metrics() const;
  metrics_snapshot metrics() const;
  // The Stats answer: identity, a summary of the settings, metrics_of().
  stats_report stats() const { return stats(metrics()); }
  // The same, its figures taken from `m` (a snapshot the caller also uses).
  stats_report stats(const metrics_snapshot& m) const;
  // ConnList's sources: the sort keys of the connections past their hello,
  // and one connection's entry (with the leases of its inboxes).
  std::vector<conn_key> conn_keys() const;
  std::vector<protocol::conn_info_fields> conn_info(std::span<const std::uint64_t> ids) const;

  const std::chrono::steady_clock::time_point started_at = std::chrono::steady_clock::now();
  bool listening = false;  // start() got as far as listening: there is traffic to report at the end
};

}  // namespace switchyard::broker
