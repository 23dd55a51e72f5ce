#include "broker/server/server.hpp"

#include "broker/admission/admission_control.hpp"
#include "broker/tables/channel_table.hpp"
#include "broker/transport/connection.hpp"
#include "broker/transport/connection_registry.hpp"
#include "broker/dispatch/dispatcher.hpp"
#include "broker/tables/drain_schedule.hpp"
#include "broker/requests/durable_pipeline.hpp"
#include "broker/delivery/fanout.hpp"
#include "broker/tables/frame_arena.hpp"
#include "broker/transport/input_memory.hpp"
#include "broker/tables/lease_table.hpp"
#include "broker/handlers/log_handler.hpp"
#include "broker/transport/loop_pressure.hpp"
#include "broker/handlers/offer_handler.hpp"
#include "broker/handlers/pubsub_handler.hpp"
#include "broker/handlers/routing_handler.hpp"
#include "broker/tables/routing_table.hpp"
#include "broker/monitor/http_monitor.hpp"
#include "broker/handlers/server_admin_handler.hpp"
#include "broker/config/setting_table.hpp"
#include "broker/monitor/metric_catalog.hpp"
#include "broker/server/logger_style.hpp"
#include "broker/handlers/stream_admin_handler.hpp"
#include "broker/transport/tls_context.hpp"
#include "broker/admission/authenticator.hpp"
#include "auth/auth_config.hpp"
#include "common/asio.hpp"
#include "storage/log_verifier.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <sys/random.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <optional>
#include <vector>

namespace switchyard::broker {

namespace {
// Why the log would not open, for the operator: what is wrong and what to do.
std::string open_failure(const std::string& data_dir, const std::filesystem::path& dir, std::error_code ec,
                         const storage::diagnostics& diag) {
  std::string out = "cannot open the sequence log in " + dir.string() + ": ";
  if (ec == storage::errc::locked)
    return out + "the data folder " + data_dir + " is in use by another switchyard-server (" +
           (diag.pid != 0 ? "pid " + std::to_string(diag.pid) : std::string("pid unknown")) +
           "); stop it, or give this one another --data-dir";
  if (ec == storage::errc::corrupted)
    return out + "log corrupted: " + (diag.message.empty() ? ec.message() : diag.message) +
           "; check it with switchyard-server --verify-log --data-dir " + data_dir +
           ", then restore the folder from a backup or move it away (docs/storage.md, \"Damage\")";
  return out + ec.message() + (diag.message.empty() ? std::string{} : " (" + diag.message + ")");
}

// --verify-on-start: the whole log checked in a child process before it is
// opened; throws (the server does not start) when it is damaged or cannot
// be checked. A folder without a log yet passes.
void verify_log_or_throw(spdlog::logger& logger, const server_config& config, const std::filesystem::path& dir) {
  logger.info("verifying the sequence log in {} before opening it", dir.string());
  storage::verify_options o;
  o.dir = dir;
  std::string detail;
  const auto r = storage::verify_log(o, &detail);
  if (!r && r.error() == storage::errc::not_found) {
    logger.info("no sequence log in {} yet: nothing to verify", dir.string());
    return;
  }
  if (!r) throw std::runtime_error("cannot verify the sequence log in " + dir.string() + ": " + detail);
  if (!r->intact()) {
    std::string what;
    for (std::size_t i = 0; i < r->problems.size() && i < 3; ++i) what += "; " + r->problems[i].what;
    throw std::runtime_error("log corrupted: the sequence log in " + dir.string() + " failed its check (" +
                             std::to_string(r->problem_count) + " problems" + what +
                             "); see switchyard-server --verify-log --data-dir " + config.data_dir);
  }
  logger.info("sequence log verified: {} streams, {} records, {} bytes in {} ms", r->streams, r->records, r->bytes,
                 r->elapsed.count());
}

// 64 bits from the kernel's random source (getrandom), never 0. Throws
// (a start-up error) if the kernel gives none.
std::uint64_t random_instance_id() {
  std::uint64_t id = 0;
  for (int attempt = 0; attempt < 100 && id == 0; ++attempt) {
    const ssize_t n = ::getrandom(&id, sizeof id, 0);
    if (n == static_cast<ssize_t>(sizeof id)) continue;
    id = 0;
    if (n < 0 && errno != EINTR) break;
  }
  if (id == 0) throw std::runtime_error("cannot draw a random server instance id (getrandom failed)");
  return id;
}

// The config with its instance id drawn when none was injected.
server_config with_identity(server_config c) {
  if (c.instance_id == 0) c.instance_id = random_instance_id();
  return c;
}

// splitmix64's finalizer: a bijection that spreads every bit of the
// instance id over the lease id key, so the key is not the id the welcome
// shows (and two close injected ids still give unrelated keys).
std::uint64_t lease_id_key(std::uint64_t instance) {
  std::uint64_t z = instance + 0x9e37'79b9'7f4a'7c15;
  z = (z ^ (z >> 30)) * 0xbf58'476d'1ce4'e5b9;
  z = (z ^ (z >> 27)) * 0x94d0'49bb'1331'11eb;
  return z ^ (z >> 31);
}

lease_config lease_settings(const server_config& c) {
  lease_config l;
  l.id_key = lease_id_key(c.instance_id);
  l.min_ttl = c.lease_min_ttl;
  l.max_ttl = c.lease_max_ttl;
  l.sweep_period = c.sweep_period;
  l.max_expiries_per_sweep = c.max_expiries_per_sweep;
  l.stall_threshold = stall_threshold_for(c);
  return l;
}
}  // namespace


struct server::impl {
  explicit impl(server_config cfg)
      : config(with_identity(std::move(cfg))),
        logger(make_logger(config.log_level, config.log_format)),
        leases(lease_settings(config), [] { return std::chrono::steady_clock::now(); }),
        routing(leases),
        fan(channels, routing, arena, builder, counters),
        input(config.max_incomplete_bytes),
        admission(config, counters, std::chrono::steady_clock::now()),
        auth(config) {}

  static std::shared_ptr<spdlog::logger> make_logger(const std::string& level, const std::string& format) {
    auto log = spdlog::get("broker");
    if (!log) log = spdlog::stderr_color_mt("broker");
    log->set_level(spdlog::level::from_str(level));
    apply_logger_style(*log, is_logger_style(format) ? format : "text");
    return log;
  }

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

  // A drain under way (begin_drain): its schedule, the connections open
  // when it began in the order they are closed, and how many of them were
  // handled (closed, or found gone).
  std::optional<drain_schedule> drain;
  std::vector<std::weak_ptr<connection>> drain_order;
  std::size_t drained = 0;
  // Refusals last logged (report_refusals), and when.
  server_counters refusals_logged;
  std::chrono::steady_clock::time_point refusals_logged_at{};

  void open_log();
  void wire_handlers();
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

void server::impl::open_log() {
  std::error_code made;
  std::filesystem::create_directories(config.data_dir, made);
  if (made) throw std::runtime_error("cannot use --data-dir " + config.data_dir + ": " + made.message());
  storage::log_options o;
  o.dir = std::filesystem::path(config.data_dir) / "log";
  o.mode = config.durability;
  o.max_map_size = config.log_max_bytes;
  o.wall_clock_ms = config.log_wall_clock_ms;
  o.initial_map_size = std::min<std::size_t>(o.initial_map_size, o.max_map_size);
  if (config.verify_on_start) verify_log_or_throw(*logger, config, o.dir);
  storage::diagnostics diag;
  auto opened = storage::sequence_log::open(o, &diag);
  if (!opened) throw std::runtime_error(open_failure(config.data_dir, o.dir, opened.error(), diag));
  storage::group_commit_options gc;
  gc.sync_interval = config.sync_interval;
  gc.default_retention = {config.retention_max_records, config.retention_max_age, config.retention_max_bytes};
  durable = std::make_unique<durable_pipeline>(std::move(*opened), gc, io.get_executor(), fan, builder, logger);
}

void server::impl::wire_handlers() {
  pubsub = std::make_unique<pubsub_handler>(config, channels, fan, durable.get(), builder, logger);
  routing_requests = std::make_unique<routing_handler>(config, leases, routing, fan, durable.get(), builder, logger);
  if (durable) {
    log_requests = std::make_unique<log_handler>(config, *durable, builder, counters, logger);
    stream_admin = std::make_unique<stream_admin_handler>(config, *durable, io.get_executor(), builder, logger);
  }
  server_admin_handler::sources admin_sources{
      [this](std::chrono::milliseconds window) { begin_drain(window); },
      [this] { return stats(); },
      [this] { return conn_keys(); },
      [this](std::span<const std::uint64_t> ids) { return conn_info(ids); },
  };
  for (const auto& [name, percent] : config.flags)
    if (const auto f = feature_flags::find(name)) flags.set(*f, percent);
  admin_sources.flags = &flags;
  server_admin = std::make_unique<server_admin_handler>(std::move(admin_sources), config.drain_window, builder, logger);
  offers = std::make_unique<offer_handler>(config, routing, fan, builder, counters,
                                           [] { return std::chrono::steady_clock::now(); }, logger);
  offers->on_offer_added([this](std::chrono::steady_clock::time_point first) {
    if (first < offer_timer.expiry()) offer_timer.cancel();  // offer_loop re-reads its next deadline
  });
  routing_requests->use_offers(offers.get());
  dispatch = std::make_unique<dispatcher>(
      dispatcher::handlers{*pubsub, *routing_requests, log_requests.get(), stream_admin.get(), server_admin.get(),
                           offers.get()},
      counters, logger);
  context = std::unique_ptr<connection_context>(new connection_context{
      config, arena, builder, *dispatch, pressure, input, registry, admission, auth, counters, flags, logger,
      durable != nullptr});
}

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
  return {true, {}};
}

asio::awaitable<void> server::impl::accept_loop() {
  for (;;) {
    asio_error_code ec;
    asio::ip::tcp::socket socket = co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (ec == asio::error::operation_aborted || registry.stopping()) co_return;
      logger->warn("accept failed: {}", ec.message());
      // Out of descriptors and similar: back off briefly instead of spinning.
      asio::steady_timer pause(io, std::chrono::milliseconds(50));
      co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    if (tls) asio::co_spawn(io, tls_accept(std::move(socket)), asio::detached);
    else admit(byte_stream(std::move(socket)));
  }
}

void server::impl::admit(byte_stream stream) {
  auto c = std::make_shared<connection>(*context, std::move(stream), registry.next_id());
  auto refused = admission.on_accept(registry.counted(), std::chrono::steady_clock::now());
  if (!refused) ++counters.connections_accepted;
  registry.add(c);
  c->start(std::move(refused));
}

asio::awaitable<void> server::impl::tls_accept(asio::ip::tcp::socket socket) {
  // The handshake holds a place under the connection cap until it ends
  // (admission_control: beyond the cap, closed without a handshake).
  if (!admission.on_tls_accept(registry.counted())) {
    asio_error_code ignored;
    socket.close(ignored);
    co_return;
  }
  struct handshake_slot {
    admission_control* admission;
    void release() noexcept { if (admission) std::exchange(admission, nullptr)->tls_handshake_done(); }
    ~handshake_slot() { release(); }
  } slot{&admission};
  auto stream = std::make_unique<byte_stream>(std::move(socket), tls);
  // A client that connects and says nothing must not hold the socket: the
  // handshake has the hello timeout.
  asio::steady_timer deadline(io);
  deadline.expires_after(config.hello_timeout);
  bool timed_out = false;
  deadline.async_wait([&stream, &timed_out](const asio_error_code& ec) {
    if (ec) return;
    timed_out = true;
    stream->close();
  });
  const asio_error_code ec = co_await stream->handshake();
  deadline.cancel();
  if (registry.stopping()) co_return;
  if (!ec) {
    logger->debug("TLS from {}: {}", stream->remote_address(), stream->tls_description());
    slot.release();  // counted by the registry from now on
    admit(std::move(*stream));
    co_return;
  }
  ++counters.protocol_errors;
  if (ec == byte_stream::not_tls()) {
    // A plain client: its hello waits unread. Tell it in its own protocol,
    // best effort (the socket is non-blocking; the frame is small).
    logger->info("TLS from {}: refused, {}", stream->remote_address(), stream->tls_description());
    const auto goodbye = builder.error(0, protocol::errc::bad_request,
                                       "this port speaks TLS: connect with TLS (client_options::tls)", 0, true);
    stream->send_plain(asio::buffer(goodbye.data(), goodbye.size()));
  } else {
    logger->info("TLS from {}: handshake failed: {}{}{}", stream->remote_address(),
                 timed_out ? "no handshake within the hello timeout" : ec.message(),
                 timed_out ? "" : " ", timed_out ? "" : "(" + stream->tls_description() + ")");
  }
  // Closing with the client's bytes unread would reset the connection,
  // and a reset can discard the answer (the alert, or the plain-text
  // goodbye) before the client reads it: half-close, read and discard
  // until the client closes, for at most a second.
  asio_error_code ignored;
  stream->shutdown_send(ignored);
  deadline.expires_after(std::min<std::chrono::milliseconds>(config.hello_timeout, std::chrono::seconds(1)));
  deadline.async_wait([&stream](const asio_error_code& ec) {
    if (!ec) stream->close();
  });
  std::array<std::uint8_t, 4096> scratch;
  for (std::size_t discarded = 0; discarded < 64 * scratch.size();) {
    asio_error_code rec;
    co_await stream->socket_wait_readable(rec);
    if (rec) break;
    const std::size_t n = stream->read_plain(asio::buffer(scratch), rec);
    if (rec && rec != asio::error::would_block && rec != asio::error::try_again) break;
    discarded += n;
  }
  deadline.cancel();
  stream->close();
}

bool server::impl::reload_tls(const server_config& from) {
  if (!tls) return true;
  auto fresh = tls_context::load(from);
  if (!fresh) {
    logger->error("SIGHUP: TLS certificate not reloaded, new connections keep the old one: {}", fresh.error());
    return false;
  }
  tls = std::move(*fresh);
  logger->info("SIGHUP: TLS certificate reloaded from {} ({}); new connections use it", from.tls_cert, tls->subject());
  return true;
}

asio::awaitable<void> server::impl::sweep_loop() {
  asio::steady_timer timer(io);
  const auto on_expire = [this](lease_id id, lease_attachment* first) {
    logger->debug("lease={} expired", id);
    routing.remove_lease(id, first);
  };
  while (!registry.stopping()) {
    timer.expires_after(config.sweep_period);
    asio_error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (ec || registry.stopping()) co_return;
    if (durable) durable->report_refusals_due();
    report_refusals();
    const auto routes_before = routing.entries();
    const auto inboxes_before = routing.inboxes();
    std::size_t expired = 0;
    for (;;) {
      const auto r = leases.sweep(on_expire);
      counters.leases_expired += r.expired;
      expired += r.expired;
      if (r.stall_absorbed.count() > 0)
        logger->warn("lease sweeper stalled: {} ms absorbed, every lease gets its full TTL from now",
                     r.stall_absorbed.count());
      if (!r.more_due) break;
      // Rate limit reached: let the loop serve connections before the next batch.
      co_await asio::post(io, asio::use_awaitable);
    }
    // Registry entries and inboxes only shrink here by expiry (requests
    // run between batches can add some: then the figure is a lower bound).
    expiries_unlogged.leases += expired;
    expiries_unlogged.routes += routes_before - std::min(routes_before, routing.entries());
    expiries_unlogged.inboxes += inboxes_before - std::min(inboxes_before, routing.inboxes());
    report_expiries();
  }
}

asio::awaitable<void> server::impl::offer_loop() {
  while (!registry.stopping()) {
    const auto next = offers->sweep();
    offer_timer.expires_at(next ? *next : asio::steady_timer::time_point::max());
    asio_error_code ec;
    co_await offer_timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    // Cancelled: an earlier deadline came (on_offer_added), or the server stops.
  }
}

void server::impl::report_expiries() {
  const auto now = std::chrono::steady_clock::now();
  if (expiries_unlogged.leases == 0 || now - expiries_logged_at < std::chrono::seconds(1)) return;
  logger->info("lease sweep: {} leases expired since the last report, {} routes and {} inboxes removed with them",
               expiries_unlogged.leases, expiries_unlogged.routes, expiries_unlogged.inboxes);
  expiries_unlogged = {};
  expiries_logged_at = now;
}

void server::impl::begin_stop() {
  if (registry.stopping()) return;
  logger->info("stopping: closing {} connections", registry.size());
  asio_error_code ignored;
  acceptor.close(ignored);
  signals.cancel(ignored);
  if (http) http->stop();
  offer_timer.cancel();
  registry.close_all(protocol::errc::shutting_down, "server stopping");
  asio::co_spawn(io, stop_when_closed(config.shutdown_grace), asio::detached);
}

asio::awaitable<void> server::impl::stop_when_closed(std::chrono::milliseconds grace) {
  // Poll until every connection is gone; bounded by the grace plus a
  // margin, after which the loop stops regardless.
  const auto give_up = std::chrono::steady_clock::now() + grace + std::chrono::milliseconds(500);
  asio::steady_timer t(io);
  while (registry.size() > 0 && std::chrono::steady_clock::now() < give_up) {
    t.expires_after(std::chrono::milliseconds(10));
    asio_error_code ec;
    co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  io.stop();
}

void server::impl::begin_drain(std::chrono::milliseconds window) {
  if (registry.stopping() || admission.draining()) {
    logger->info("drain over {} ms asked: already {}; nothing changes", window.count(),
                 registry.stopping() ? "stopping" : "draining");
    return;
  }
  window = std::max(window, std::chrono::milliseconds(1));
  const auto reconnect = admission_control::reconnect_window_for(window);
  admission.begin_drain(reconnect);
  drain_order.clear();
  drain_order.reserve(registry.counted());
  // Connections being refused are closing already (and not counted).
  registry.for_each_owner([this](const std::shared_ptr<connection>& c) {
    if (!c->closing()) drain_order.push_back(c);
  });
  drain.emplace(std::chrono::steady_clock::now(), window, drain_order.size());
  drained = 0;
  logger->info("draining: {} connections closed over {} ms (a batch every {} ms), each told to reconnect within "
               "{} ms; new connections are refused with draining",
               drain_order.size(), window.count(), drain->period().count(), reconnect.count());
  asio::co_spawn(io, drain_loop(), asio::detached);
}

asio::awaitable<void> server::impl::drain_loop() {
  asio::steady_timer timer(io);
  const auto reconnect = admission.reconnect_window();
  const std::string why = "the server is draining; reconnect (to another broker if there is one) within " +
                          std::to_string(reconnect.count()) + " ms";
  for (;;) {
    if (registry.stopping()) co_return;  // SIGTERM meanwhile: the fast path took over
    const auto now = std::chrono::steady_clock::now();
    const auto target = drain->target(now);
    for (; drained < target; ++drained) {
      auto c = drain_order[drained].lock();
      drain_order[drained].reset();
      if (!c || c->closing()) continue;  // gone (or going) by itself
      c->close_with_retry(protocol::errc::draining, why, reconnect);
      ++counters.connections_drained;
    }
    // Done once every connection of the drain is gone (only refusals may
    // be open), or once the window is over and all were told.
    if (registry.counted() == 0 || drained == drain_order.size()) break;
    timer.expires_after(drain->period());
    asio_error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  logger->info("drain: {} connections told to reconnect elsewhere; exiting once they are gone", drained);
  asio_error_code ignored;
  acceptor.close(ignored);
  co_await stop_when_closed(config.shutdown_grace);
}

void server::impl::wait_signal() {
  signals.async_wait([this](const std::error_code& ec, int sig) {
    if (ec) return;
    switch (sig) {
      case SIGHUP:
        logger->info("SIGHUP: re-reading the configuration");
        reload();
        break;
      case SIGUSR1:
        log_metrics();
        break;
      case SIGUSR2:
        logger->info("SIGUSR2: draining over --drain-window-ms ({} ms)", config.drain_window.count());
        begin_drain(config.drain_window);
        break;
      default:
        logger->info("signal {}: shutting down", sig);
        begin_stop();
        return;
    }
    if (!registry.stopping()) wait_signal();
  });
}

void server::impl::reload_auth() {
  if (config.auth_file.empty()) return;
  auto loaded = auth::auth_config::load(config.auth_file);
  if (!loaded) {
    logger->error("SIGHUP: auth file not applied, the rules in force stay: {}",
                  loaded.error().to_string(config.auth_file));
    return;
  }
  auto rules = std::make_shared<const auth::auth_config>(std::move(*loaded));
  auth.set_rules(rules);
  std::size_t updated = 0;
  std::vector<std::shared_ptr<connection>> removed;
  registry.for_each_owner([&](const std::shared_ptr<connection>& c) {
    const auth::principal* p = c->principal();
    if (!p) return;
    if (auto fresh = rules->by_name(p->name)) {
      c->set_principal(std::move(fresh), c->owner());
      ++updated;
    } else {
      removed.push_back(c);
    }
  });
  // Closed after the walk: closing may change the registry.
  for (const auto& c : removed)
    c->close_with_error(protocol::errc::unauthorized,
                        "principal '" + c->principal()->name + "' was removed from the auth file");
  channels.permissions_changed();
  logger->info("SIGHUP: auth file {} reloaded: {} principals; {} connections updated, {} closed (principal removed)",
               config.auth_file, rules->principals().size(), updated, removed.size());
}

void server::impl::reload() {
  reload_auth();
  if (config.config_file.empty()) {
    reload_tls(config);
    logger->log(config.auth_file.empty() ? spdlog::level::warn : spdlog::level::info,
                "SIGHUP: the server was started without --config: no settings to re-read{}",
                tls || !config.auth_file.empty() ? " (the TLS and auth files were re-read)" : ", nothing changed");
    return;
  }
  server_config fresh;
  try {
    fresh = reparse_server_args(config);
  } catch (const cli_exit& e) {
    // CLI11's first line says what is wrong (the rest is "Run with --help").
    std::string why = e.output.substr(0, e.output.find('\n'));
    logger->error("SIGHUP: {} was not applied, the running configuration stays: {}", config.config_file, why);
    reload_tls(config);
    return;
  } catch (const std::exception& e) {
    logger->error("SIGHUP: {} was not applied, the running configuration stays: {}", config.config_file, e.what());
    reload_tls(config);
    return;
  }
  // The TLS files are read again (rotated certificates keep their paths),
  // from the paths in the file if it changed them. Turning TLS on or off
  // takes a restart; files that do not load change nothing (logged).
  std::vector<std::string> fixed;
  const auto tls_files_of = [](server_config& to, const server_config& from) {
    to.tls_cert = from.tls_cert;
    to.tls_key = from.tls_key;
    to.tls_ca = from.tls_ca;
    to.tls_verify_client = from.tls_verify_client;
  };
  if (tls && !fresh.tls_cert.empty()) {
    server_config paths = config;
    tls_files_of(paths, fresh);
    if (!reload_tls(paths)) tls_files_of(fresh, config);  // not loaded: the running paths stay
  } else {
    reload_tls(config);
    // TLS off, or turned off: its files' settings take a restart.
    for (const auto& s : settings())
      if (s.name.starts_with("tls-") && s.show(config) != s.show(fresh)) fixed.emplace_back(s.name);
    tls_files_of(fresh, config);
  }
  // Every setting the file changed is applied or named as needing a
  // restart (setting_table.hpp): nothing is skipped silently.
  std::vector<std::string> changed;
  for (const auto& s : settings()) {
    const std::string was = s.show(config), now = s.show(fresh);
    if (was == now) continue;
    if (s.effect == takes_effect::at_restart) {
      fixed.emplace_back(s.name);
      continue;
    }
    const auto shown = [&s](const std::string& v) {
      return (v.empty() ? std::string("(none)") : v) + (s.unit.empty() || s.unit == "bytes" ? "" : " " + std::string(s.unit));
    };
    changed.push_back(std::string(s.name) + " " + shown(was) + " -> " + shown(now));
    s.assign(config, fresh);
  }
  // Each use reads the running config; these keep state derived from it.
  logger->set_level(spdlog::level::from_str(config.log_level));
  admission.reconfigure(std::chrono::steady_clock::now());
  std::string list;
  for (const auto& c : changed) list += (list.empty() ? "" : ", ") + c;
  logger->info("SIGHUP: {} re-read: {}", config.config_file, changed.empty() ? std::string("nothing changed") : list);
  if (!fixed.empty()) {
    std::string names;
    for (const auto& f : fixed) names += (names.empty() ? "" : ", ") + f;
    logger->warn("SIGHUP: {} changed in the file but take effect only at a restart", names);
  }
}

void server::impl::report_refusals() {
  const auto now = std::chrono::steady_clock::now();
  if (now - refusals_logged_at < std::chrono::seconds(1)) return;
  const auto cap = counters.connections_rejected - refusals_logged.connections_rejected;
  const auto rate = counters.hellos_rate_limited - refusals_logged.hellos_rate_limited;
  const auto drain_refused = counters.hellos_draining - refusals_logged.hellos_draining;
  if (cap + rate + drain_refused == 0) return;
  logger->warn("refused {} connections since the last report: {} at the cap ({} + {} admin slots), {} over the "
               "hello rate ({}/s), {} while draining",
               cap + rate + drain_refused, cap, config.max_connections, config.admin_slots, rate,
               config.max_hellos_per_s, drain_refused);
  refusals_logged = counters;
  refusals_logged_at = now;
}

void server::impl::log_metrics() const {
  const auto m = metrics();
  const auto& n = m.counters;
  logger->info("SIGUSR1: {} connections ({} being refused), {} subscriptions, {} leases, {} registry entries, {} "
               "inboxes; {} accepted, refused: {} over the cap, {} rate limited, {} draining; {} drained; {} "
               "published, {} delivered, {} dropped, {} sends routed, {} unrouted; {}",
               m.connections, m.connections_rejecting, m.subscriptions, m.leases, m.registry_entries, m.inboxes,
               n.connections_accepted, n.connections_rejected, n.hellos_rate_limited, n.hellos_draining,
               n.connections_drained, n.published, n.delivered, n.dropped, n.sends_routed, n.sends_unrouted,
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
  m.subscriptions = channels.size();
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
  r.uptime_ms = static_cast<std::uint64_t>(
      duration_cast<milliseconds>(std::chrono::steady_clock::now() - started_at).count());
  const auto setting = [&r](std::string name, std::string value) { r.settings.emplace_back(std::move(name), std::move(value)); };
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
                    static_cast<std::uint64_t>(std::max<std::int64_t>(
                        0, duration_cast<milliseconds>(now - c.last_received()).count())),
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

server::server(server_config config) : impl_(std::make_unique<impl>((validate(config), std::move(config)))) {}

server::~server() {
  const auto& n = impl_->counters;
  if (impl_->listening)
    impl_->logger->info(
        "traffic: {} published, {} delivered, {} dropped, {} sends routed, {} unrouted, {} write waits, "
        "{} writes carrying {} frames",
        n.published, n.delivered, n.dropped, n.sends_routed, n.sends_unrouted, n.write_waits, n.writes,
        n.frames_written);
  // The committer's last completions post to the io_context: stop it while
  // the context still exists (those handlers are destroyed with it).
  if (auto& d = impl_->durable) {
    const auto st = d->stats();
    if (impl_->listening)
      impl_->logger->info("group commit: {} records in {} batches (largest {}), {} syncs, {} trimmed", st.records,
                          st.batches, st.largest_batch, st.syncs, st.trimmed);
    d->stop();
  }
  // Connections hold streams on the io_context: drop the registry's
  // references first, so that only coroutine frames own connections. The
  // io_context, destroyed next, destroys the rest with their coroutine
  // frames while its services still exist.
  impl_->registry.clear();
}

void server::start() {
  auto& d = *impl_;
  if (!d.config.auth_file.empty()) {
    auto loaded = auth::auth_config::load(d.config.auth_file);
    if (!loaded) throw startup_error("auth file " + loaded.error().to_string(d.config.auth_file));
    d.auth.set_rules(std::make_shared<const auth::auth_config>(std::move(*loaded)));
    d.logger->info("auth: {} principals from {}", d.auth.rules()->principals().size(), d.config.auth_file);
  }
  if (!d.config.data_dir.empty()) d.open_log();
  d.wire_handlers();
  if (!d.config.tls_cert.empty()) {
    auto loaded = tls_context::load(d.config);
    if (!loaded) throw std::runtime_error("TLS: " + loaded.error());
    d.tls = std::move(*loaded);
  }
  const auto address = asio::ip::make_address(listen_address(d.config.listen_host));
  const asio::ip::tcp::endpoint endpoint(address, d.config.listen_port);
  auto& acceptor = d.acceptor;
  asio_error_code bind_ec;
  acceptor.open(endpoint.protocol(), bind_ec);
  if (!bind_ec) acceptor.set_option(asio::socket_base::reuse_address(true), bind_ec);
  if (!bind_ec) acceptor.bind(endpoint, bind_ec);
  if (!bind_ec) acceptor.listen(asio::socket_base::max_listen_connections, bind_ec);
  if (bind_ec)
    throw std::runtime_error("cannot listen on " + d.config.listen_host + ":" + std::to_string(d.config.listen_port) +
                             ": " + bind_ec.message());
  d.port = acceptor.local_endpoint().port();
  // Before the broker counts as listening: a monitoring port that cannot
  // bind stops the start with nothing announced (no port file, no totals).
  if (!d.config.http_host.empty()) d.start_http();
  d.listening = true;
  if (!d.config.port_file.empty()) {
    // Write then rename, so a reader never sees a half-written port.
    const std::string tmp = d.config.port_file + ".tmp";
    bool written = false;
    {
      std::ofstream out(tmp);
      out << d.port << "\n";
      out.close();
      written = static_cast<bool>(out);
    }
    std::error_code ec;
    if (written) std::filesystem::rename(tmp, d.config.port_file, ec);
    if (!written || ec) {
      const std::string why = written ? ec.message() : "cannot create " + tmp;
      std::filesystem::remove(tmp, ec);  // never leave the temporary behind
      throw std::runtime_error("cannot write the port file " + d.config.port_file + ": " + why);
    }
  }
  d.logger->info("listening on {}:{} data-dir={} durability={}{}", d.config.listen_host, d.port, d.config.data_dir,
                 d.durable ? std::string(storage::durability_name(d.config.durability)) : std::string("off"),
                 d.tls ? " tls=" + d.tls->subject() + (d.tls->verifies_clients() ? " (client certificates required)" : "")
                       : std::string());
  asio::co_spawn(d.io, d.accept_loop(), asio::detached);
  asio::co_spawn(d.io, d.sweep_loop(), asio::detached);
  asio::co_spawn(d.io, d.offer_loop(), asio::detached);
}

std::uint16_t server::port() const noexcept { return impl_->port; }

std::uint16_t server::http_port() const noexcept { return impl_->http ? impl_->http->port() : 0; }

std::uint64_t server::instance_id() const noexcept { return impl_->config.instance_id; }

void server::handle_signals() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2}) impl_->signals.add(sig);
  impl_->wait_signal();
}

void server::run() { impl_->io.run(); }

void server::reload() {
  asio::post(impl_->io, [d = impl_.get()] { d->reload(); });
}

void server::stop() {
  asio::post(impl_->io, [this] { impl_->begin_stop(); });
}


const server_counters& server::counters() const noexcept { return impl_->counters; }

metrics_snapshot server::metrics() const { return impl_->metrics(); }

void server::post_metrics(std::function<void(const metrics_snapshot&)> done) {
  asio::post(impl_->io, [this, done = std::move(done)] { done(impl_->metrics()); });
}

}  // namespace switchyard::broker
