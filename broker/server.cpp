#include "broker/server.hpp"

#include "broker/server_core.hpp"
#include "broker/session.hpp"
#include "common/asio.hpp"
#include "storage/log_verifier.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

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
void verify_log_or_throw(server_core& core, const std::filesystem::path& dir) {
  core.log->info("verifying the sequence log in {} before opening it", dir.string());
  storage::verify_options o;
  o.dir = dir;
  std::string detail;
  const auto r = storage::verify_log(o, &detail);
  if (!r && r.error() == storage::errc::not_found) {
    core.log->info("no sequence log in {} yet: nothing to verify", dir.string());
    return;
  }
  if (!r) throw std::runtime_error("cannot verify the sequence log in " + dir.string() + ": " + detail);
  if (!r->intact()) {
    std::string what;
    for (std::size_t i = 0; i < r->problems.size() && i < 3; ++i) what += "; " + r->problems[i].what;
    throw std::runtime_error("log corrupted: the sequence log in " + dir.string() + " failed its check (" +
                             std::to_string(r->problem_count) + " problems" + what +
                             "); see switchyard-server --verify-log --data-dir " + core.config.data_dir);
  }
  core.log->info("sequence log verified: {} streams, {} records, {} bytes in {} ms", r->streams, r->records, r->bytes,
                 r->elapsed.count());
}

lease_config lease_settings(const server_config& c) {
  lease_config l;
  l.min_ttl = c.lease_min_ttl;
  l.max_ttl = c.lease_max_ttl;
  l.sweep_period = c.sweep_period;
  l.max_expiries_per_sweep = c.max_expiries_per_sweep;
  l.stall_threshold = stall_threshold_for(c);
  return l;
}
}  // namespace

server_core::server_core(server_config c, clock_source clock)
    : config(std::move(c)),
      channels(arena, builder),
      leases(lease_settings(config), std::move(clock)),
      routing(leases) {
  log = spdlog::get("broker");
  if (!log) log = spdlog::stderr_color_mt("broker");
  log->set_level(spdlog::level::from_str(config.log_level));
}

server_core::~server_core() = default;

struct server::impl {
  explicit impl(server_config cfg)
      : core(std::move(cfg), [] { return std::chrono::steady_clock::now(); }), acceptor(io), signals(io) {}

  // Declared first: destroyed last, after the io_context has destroyed every
  // coroutine (and so every session) that points into it.
  server_core core;
  asio::io_context io{1};
  asio::ip::tcp::acceptor acceptor;
  asio::signal_set signals;
  std::uint16_t port = 0;
  bool stop_requested = false;

  asio::awaitable<void> accept_loop();
  asio::awaitable<void> sweep_loop();
  void begin_stop();
  void maybe_finish_stop();
};

asio::awaitable<void> server::impl::accept_loop() {
  for (;;) {
    asio_error_code ec;
    asio::ip::tcp::socket socket =
        co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (ec == asio::error::operation_aborted || core.stopping) co_return;
      core.log->warn("accept failed: {}", ec.message());
      // Out of descriptors and similar: back off briefly instead of spinning.
      asio::steady_timer pause(io, std::chrono::milliseconds(50));
      co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    auto s = std::make_shared<session>(core, std::move(socket), core.next_session_id++);
    std::error_code reject;
    if (core.sessions.size() - core.rejected_closing >= core.config.max_connections) {
      ++core.counters.connections_rejected;
      reject = make_error_code(protocol::errc::too_many_connections);
      core.log->warn("conn={} rejected: {} connections is the cap", s->id(), core.config.max_connections);
    } else {
      ++core.counters.connections_accepted;
    }
    core.sessions.insert(s);
    s->start(reject);
  }
}

asio::awaitable<void> server::impl::sweep_loop() {
  asio::steady_timer timer(io);
  const auto on_expire = [this](lease_id id, lease_attachment* first) {
    core.log->debug("lease={} expired", id);
    core.routing.remove_lease(id, first);
  };
  while (!core.stopping) {
    timer.expires_after(core.config.sweep_period);
    asio_error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (ec || core.stopping) co_return;
    core.refusals.report_due(*core.log);
    for (;;) {
      const auto r = core.leases.sweep(on_expire);
      core.counters.leases_expired += r.expired;
      if (r.stall_absorbed.count() > 0)
        core.log->warn("lease sweeper stalled: {} ms absorbed, every lease gets its full TTL from now",
                       r.stall_absorbed.count());
      if (!r.more_due) break;
      // Rate limit reached: let the loop serve connections before the next batch.
      co_await asio::post(io, asio::use_awaitable);
    }
  }
}

void server::impl::begin_stop() {
  if (core.stopping) return;
  core.stopping = true;
  core.log->info("stopping: closing {} sessions", core.sessions.size());
  asio_error_code ignored;
  acceptor.close(ignored);
  signals.cancel(ignored);
  // Copy: close_with_error may complete synchronously for idle sessions.
  const auto sessions = core.sessions;
  for (const auto& s : sessions) s->close_with_error(protocol::errc::shutting_down, "server stopping");
  asio::co_spawn(io, [this]() -> asio::awaitable<void> {
    // Poll until every session is gone; bounded by the shutdown grace plus
    // a margin, after which the loop stops regardless.
    const auto give_up = std::chrono::steady_clock::now() + core.config.shutdown_grace + std::chrono::milliseconds(500);
    asio::steady_timer t(io);
    while (!core.sessions.empty() && std::chrono::steady_clock::now() < give_up) {
      t.expires_after(std::chrono::milliseconds(10));
      asio_error_code ec;
      co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    io.stop();
  }, asio::detached);
}

server::server(server_config config) : impl_(std::make_unique<impl>((validate(config), std::move(config)))) {}

server::~server() {
  const auto& n = impl_->core.counters;
  impl_->core.log->info("traffic: {} published, {} delivered, {} dropped, {} sends routed, {} unrouted, {} write waits",
                        n.published, n.delivered, n.dropped, n.sends_routed, n.sends_unrouted, n.write_waits);
  // The committer's last completions post to the io_context: stop it while
  // the context still exists (those handlers are destroyed with it).
  if (auto& c = impl_->core.committer) {
    const auto st = c->stats();
    impl_->core.log->info("group commit: {} records in {} batches (largest {}), {} syncs, {} trimmed", st.records,
                          st.batches, st.largest_batch, st.syncs, st.trimmed);
    c.reset();
  }
  // Sessions hold sockets on the io_context: drop the registry's references
  // first, so that only coroutine frames own sessions.
  // The io_context, destroyed next, destroys the rest with their coroutine
  // frames while its services still exist.
  impl_->core.sessions.clear();
}

void server::start() {
  auto& core = impl_->core;
  if (!core.config.data_dir.empty()) {
    std::filesystem::create_directories(core.config.data_dir);
    storage::log_options o;
    o.dir = std::filesystem::path(core.config.data_dir) / "log";
    o.mode = core.config.durability == "batch" ? storage::durability::batch
             : core.config.durability == "none" ? storage::durability::none
                                                : storage::durability::sync;
    o.max_map_size = core.config.log_max_bytes;
    o.initial_map_size = std::min<std::size_t>(o.initial_map_size, o.max_map_size);
    if (core.config.verify_on_start) verify_log_or_throw(core, o.dir);
    storage::diagnostics diag;
    auto opened = storage::sequence_log::open(o, &diag);
    if (!opened) throw std::runtime_error(open_failure(core.config.data_dir, o.dir, opened.error(), diag));
    core.stream_log = std::move(*opened);
    storage::group_commit_options gc;
    gc.sync_interval = core.config.sync_interval;
    gc.default_retention = {core.config.retention_max_records, core.config.retention_max_age,
                            core.config.retention_max_bytes};
    core.committer = std::make_unique<storage::group_committer>(*core.stream_log, gc);
    session::install_append_handler(core, impl_->io.get_executor());
  }
  const auto address = asio::ip::make_address(listen_address(core.config.listen_host));
  const asio::ip::tcp::endpoint endpoint(address, core.config.listen_port);
  auto& acceptor = impl_->acceptor;
  asio_error_code bind_ec;
  acceptor.open(endpoint.protocol(), bind_ec);
  if (!bind_ec) acceptor.set_option(asio::socket_base::reuse_address(true), bind_ec);
  if (!bind_ec) acceptor.bind(endpoint, bind_ec);
  if (!bind_ec) acceptor.listen(asio::socket_base::max_listen_connections, bind_ec);
  if (bind_ec)
    throw std::runtime_error("cannot listen on " + core.config.listen_host + ":" +
                             std::to_string(core.config.listen_port) + ": " + bind_ec.message());
  impl_->port = acceptor.local_endpoint().port();
  if (!core.config.port_file.empty()) {
    // Write then rename, so a reader never sees a half-written port.
    const std::string tmp = core.config.port_file + ".tmp";
    bool written = false;
    {
      std::ofstream out(tmp);
      out << impl_->port << "\n";
      out.close();
      written = static_cast<bool>(out);
    }
    std::error_code ec;
    if (written) std::filesystem::rename(tmp, core.config.port_file, ec);
    if (!written || ec) {
      const std::string why = written ? ec.message() : "cannot create " + tmp;
      std::filesystem::remove(tmp, ec);  // never leave the temporary behind
      throw std::runtime_error("cannot write the port file " + core.config.port_file + ": " + why);
    }
  }
  core.log->info("listening on {}:{} data-dir={} durability={}", core.config.listen_host, impl_->port,
                 core.config.data_dir, core.stream_log ? core.config.durability : "off");
  asio::co_spawn(impl_->io, impl_->accept_loop(), asio::detached);
  asio::co_spawn(impl_->io, impl_->sweep_loop(), asio::detached);
}

std::uint16_t server::port() const noexcept { return impl_->port; }

void server::handle_signals() {
  impl_->signals.add(SIGINT);
  impl_->signals.add(SIGTERM);
  impl_->signals.async_wait([this](const std::error_code& ec, int sig) {
    if (ec) return;
    impl_->core.log->info("signal {}: shutting down", sig);
    impl_->begin_stop();
  });
}

void server::run() { impl_->io.run(); }

void server::stop() {
  asio::post(impl_->io, [this] { impl_->begin_stop(); });
}

const server_counters& server::counters() const noexcept { return impl_->core.counters; }

}  // namespace switchyard::broker
