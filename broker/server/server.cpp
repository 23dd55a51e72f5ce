#include "broker/server/server_impl.hpp"

#include "broker/server/logger_style.hpp"
#include "storage/log_verifier.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <sys/random.h>

#include <cerrno>
#include <csignal>
#include <filesystem>
#include <fstream>

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

server::impl::impl(server_config cfg)
    : config(with_identity(std::move(cfg))),
      logger(make_logger(config.log_level, config.log_format)),
      leases(lease_settings(config), [] { return std::chrono::steady_clock::now(); }),
      routing(leases),
      fan(channels, routing, arena, builder, counters),
      input(config.max_incomplete_bytes),
      admission(config, counters, std::chrono::steady_clock::now()),
      auth(config) {}

std::shared_ptr<spdlog::logger> server::impl::make_logger(const std::string& level, const std::string& format) {
  auto log = spdlog::get("broker");
  if (!log) log = spdlog::stderr_color_mt("broker");
  log->set_level(spdlog::level::from_str(level));
  apply_logger_style(*log, is_logger_style(format) ? format : "text");
  return log;
}

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
  // On a single node it reports nothing: ClusterStatus answers not_found
  // (docs/protocol.md §14.1).
  admin_sources.cluster_status = [this] { return cluster_status(); };
  admin_sources.cluster_takeover = [this](std::string_view node, server_admin_handler::takeover_done done) {
    cluster_takeover(node, std::move(done));
  };
  server_admin = std::make_unique<server_admin_handler>(std::move(admin_sources), config.drain_window, builder, logger);
  offers = std::make_unique<offer_handler>(
      config, routing, fan, builder, counters, [] { return std::chrono::steady_clock::now(); }, logger);
  offers->on_offer_added([this](std::chrono::steady_clock::time_point first) {
    if (first < offer_timer.expiry()) offer_timer.cancel();  // offer_loop re-reads its next deadline
  });
  routing_requests->use_offers(offers.get());
  dispatch = std::make_unique<dispatcher>(dispatcher::handlers{*pubsub, *routing_requests, log_requests.get(),
                                                               stream_admin.get(), server_admin.get(), offers.get()},
                                          counters, logger);
  context = std::unique_ptr<connection_context>(new connection_context{config, arena, builder, *dispatch, pressure,
                                                                       input, registry, admission, auth, counters,
                                                                       flags, writes, logger, durable != nullptr});
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
  impl_->leave_cluster();
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
  if (!d.config.cluster_node_id.empty()) d.join_cluster();
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
                 d.tls
                     ? " tls=" + d.tls->subject() + (d.tls->verifies_clients() ? " (client certificates required)" : "")
                     : std::string());
  asio::co_spawn(d.io, d.accept_loop(), asio::detached);
  asio::co_spawn(d.io, d.sweep_loop(), asio::detached);
  asio::co_spawn(d.io, d.offer_loop(), asio::detached);
  if (d.members) asio::co_spawn(d.io, d.standing_watch_loop(), asio::detached);
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

bool server::drained_for_lost_standing() const noexcept { return impl_->drained_for_lost_standing; }
bool server::streams_taken_over() const noexcept { return impl_->streams_taken_over; }

metrics_snapshot server::metrics() const { return impl_->metrics(); }

void server::post_metrics(std::function<void(const metrics_snapshot&)> done) {
  asio::post(impl_->io, [this, done = std::move(done)] { done(impl_->metrics()); });
}

}  // namespace switchyard::broker
