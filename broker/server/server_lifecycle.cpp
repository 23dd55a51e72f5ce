// server::impl: the lease sweeper, the offer timer, stop, drain and signals (server_impl.hpp).
#include "broker/server/server_impl.hpp"

#include <algorithm>
#include <csignal>

namespace switchyard::broker {

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
  leave_cluster();
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
  // Cluster mode: the other nodes take over this node's partitions.
  if (members) members->release_partitions();
  drain_order.clear();
  drain_order.reserve(registry.counted());
  // Connections being refused are closing already (and not counted).
  registry.for_each_owner([this](const std::shared_ptr<connection>& c) {
    if (!c->closing()) drain_order.push_back(c);
  });
  drain.emplace(std::chrono::steady_clock::now(), window, drain_order.size());
  drained = 0;
  logger->info(
      "draining: {} connections closed over {} ms (a batch every {} ms), each told to reconnect within "
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

void server::impl::report_refusals() {
  const auto now = std::chrono::steady_clock::now();
  if (now - refusals_logged_at < std::chrono::seconds(1)) return;
  const auto cap = counters.connections_rejected - refusals_logged.connections_rejected;
  const auto rate = counters.hellos_rate_limited - refusals_logged.hellos_rate_limited;
  const auto drain_refused = counters.hellos_draining - refusals_logged.hellos_draining;
  if (cap + rate + drain_refused == 0) return;
  logger->warn(
      "refused {} connections since the last report: {} at the cap ({} + {} admin slots), {} over the "
      "hello rate ({}/s), {} while draining",
      cap + rate + drain_refused, cap, config.max_connections, config.admin_slots, rate, config.max_hellos_per_s,
      drain_refused);
  refusals_logged = counters;
  refusals_logged_at = now;
}

}  // namespace switchyard::broker
