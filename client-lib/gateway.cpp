#include "switchyard/gateway.hpp"

#include "client_log.hpp"

#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

namespace switchyard {

using client_lib::log;

struct gateway::impl {
  client& conn;
  gateway_options opts;
  mutable std::mutex mu;
  // Held while the lease is being replaced and everything restored, so
  // add_route / remove_route never race a renewal (taken before mu).
  std::mutex renew_mu;
  std::condition_variable wake;
  std::set<std::string, std::less<>> routes;  // guarded by mu
  lease_id lease = 0;                         // guarded by mu
  bool stopping = false;                      // guarded by mu
  bool revoke_on_stop = true;
  std::thread keeper;

  impl(client& c, gateway_options o) : conn(c), opts(std::move(o)) {}

  // Opens the inbox and puts every route under `id`. Keepalive thread or start().
  std::error_code restore(lease_id id) {
    if (auto ec = open_inbox(id)) return ec;
    std::vector<std::string> keys;
    {
      std::lock_guard lock(mu);
      keys.assign(routes.begin(), routes.end());
    }
    for (const auto& key : keys)
      if (auto r = conn.registry_put(key, opts.inbox_id, id); !r) return r.error();
    return {};
  }

  std::error_code open_inbox(lease_id id) {
    if (!opts.durable) return conn.open_inbox(opts.inbox_id, id, opts.on_message);
    // Reopened under a new lease: go on from where the old inbox was.
    auto o = *opts.durable;
    for (auto& [stream, pos] : conn.inbox_stream_positions(opts.inbox_id)) o.resume_from[stream] = pos;
    return conn.open_inbox_durable(opts.inbox_id, id, [this](const inbox_message& m) { deliver(m); }, std::move(o));
  }

  // Loop thread. A replayed send lists every key it was sent to: keep the
  // ones routed here.
  std::vector<std::string_view> mine;
  void deliver(const inbox_message& m) {
    if (!m.replayed) return opts.on_message(m);
    mine.clear();
    {
      std::lock_guard lock(mu);
      for (auto k : m.route_keys)
        if (routes.contains(k)) mine.push_back(k);
    }
    if (mine.empty()) return;
    auto copy = m;
    copy.route_keys = mine;
    opts.on_message(copy);
  }

  void report(std::error_code ec) {
    log(log_level::warn, "switchyard: gateway {}: {}", opts.inbox_id, ec.message());
    if (opts.on_error) opts.on_error(ec);
  }

  // The keepalive thread: TTL/3 between keepalives, so two can fail before
  // the lease is in danger.
  void keep_alive() {
    std::unique_lock lock(mu);
    while (!stopping) {
      wake.wait_for(lock, opts.lease_ttl / 3, [&] { return stopping; });
      if (stopping) return;
      const lease_id current = lease;
      lock.unlock();
      auto r = conn.lease_keepalive(current);
      if (!r && r.error() == errc::not_found) {
        // Lost anyway (a long stall, a server restart): start over.
        std::lock_guard renewing(renew_mu);
        auto fresh = conn.lease_grant(opts.lease_ttl);
        if (!fresh) {
          report(fresh.error());
        } else if (auto ec = restore(fresh->id)) {
          report(ec);
          (void)conn.lease_revoke(fresh->id);
        } else {
          {
            std::lock_guard relock(mu);
            lease = fresh->id;
          }
          log(log_level::info, "switchyard: gateway {}: lease {} lost, renewed as {}", opts.inbox_id, current,
              fresh->id);
          if (opts.on_lease_renewed) opts.on_lease_renewed(current, fresh->id);
        }
      } else if (!r) {
        report(r.error());
      }
      lock.lock();
    }
  }
};

gateway::gateway(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

std::expected<std::unique_ptr<gateway>, std::error_code> gateway::start(client& conn, gateway_options options) {
  if (options.inbox_id.empty() || !options.on_message) return std::unexpected(make_error_code(errc::bad_request));
  auto p = std::make_unique<impl>(conn, std::move(options));
  p->routes.insert(p->opts.routes.begin(), p->opts.routes.end());  // restore() registers them
  lease_id id = 0;
  if (p->opts.resume_lease != 0) {
    if (auto r = conn.lease_keepalive(p->opts.resume_lease)) id = r->id;
    else if (r.error() != errc::not_found) return std::unexpected(r.error());
  }
  if (id == 0) {
    auto granted = conn.lease_grant(p->opts.lease_ttl);
    if (!granted) return std::unexpected(granted.error());
    id = granted->id;
    p->opts.lease_ttl = granted->ttl;  // keep alive at a third of what the server granted
  } else if (auto ttl = conn.lease_time_to_live(id)) {
    p->opts.lease_ttl = ttl->ttl;
  }
  if (auto ec = p->restore(id)) {
    if (p->opts.resume_lease != id) (void)conn.lease_revoke(id);
    return std::unexpected(ec);
  }
  p->lease = id;
  p->keeper = std::thread([raw = p.get()] { raw->keep_alive(); });
  return std::unique_ptr<gateway>(new gateway(std::move(p)));
}

gateway::~gateway() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->wake.notify_all();
  if (impl_->keeper.joinable()) impl_->keeper.join();
  if (impl_->revoke_on_stop && impl_->conn.connected()) (void)impl_->conn.lease_revoke(lease());
}

std::error_code gateway::add_route(std::string_view route_key) {
  std::lock_guard renewing(impl_->renew_mu);
  const lease_id id = lease();
  if (auto r = impl_->conn.registry_put(route_key, impl_->opts.inbox_id, id); !r) return r.error();
  std::lock_guard lock(impl_->mu);
  impl_->routes.emplace(route_key);
  return {};
}

std::error_code gateway::remove_route(std::string_view route_key) {
  std::lock_guard renewing(impl_->renew_mu);
  {
    std::lock_guard lock(impl_->mu);
    auto it = impl_->routes.find(route_key);
    if (it == impl_->routes.end()) return errc::not_found;
    impl_->routes.erase(it);
  }
  return impl_->conn.registry_delete(route_key);
}

std::vector<std::string> gateway::routes() const {
  std::lock_guard lock(impl_->mu);
  return {impl_->routes.begin(), impl_->routes.end()};
}

lease_id gateway::lease() const {
  std::lock_guard lock(impl_->mu);
  return impl_->lease;
}

stream_positions gateway::positions() const { return impl_->conn.inbox_stream_positions(impl_->opts.inbox_id); }

const std::string& gateway::inbox_id() const noexcept { return impl_->opts.inbox_id; }

void gateway::abandon() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
    impl_->revoke_on_stop = false;
  }
  impl_->wake.notify_all();
  if (impl_->keeper.joinable()) impl_->keeper.join();
}

}  // namespace switchyard
