#include "switchyard/gateway.hpp"

#include "client_impl_inline.hpp"

#include <algorithm>
#include <deque>
#include <set>

namespace switchyard {

using detail::client_state;

// The gateway's state. After start(), everything but the snapshots under
// `mu` lives on the client's loop thread: the keepalive timer, the queue of
// route changes and renewals, and every callback. Callbacks given to the
// client hold weak references and do nothing once `stopped` is set.
struct gateway::impl : std::enable_shared_from_this<gateway::impl> {
  using step = std::function<void()>;
  // A route change or a renewal: runs on the loop thread and calls
  // `finished` once done (then the next one starts).
  using op = std::function<void(step finished)>;

  // The routes of `o` are the gateway's first (restore() registers them).
  impl(client& c, gateway_options o)
      : conn(c),
        core(detail::access::state(c)),
        opts(std::move(o)),
        routes(opts.routes.begin(), opts.routes.end()),
        timer(core->io) {}

  client& conn;                        // borrowed: outlives the gateway (start's contract)
  std::shared_ptr<client_state> core;  // conn's state: its loop, its requests
  gateway_options opts;                // lease_ttl as granted, once started

  // Read by any thread (routes(), lease()); written on the loop thread
  // (and by the constructor, before any other thread knows the gateway).
  mutable switchyard::mutex mu;
  std::set<std::string, std::less<>> routes SWITCHYARD_GUARDED_BY(mu);
  lease_id lease SWITCHYARD_GUARDED_BY(mu) = 0;

  // Loop thread only.
  asio::steady_timer timer;        // the next keepalive
  bool stopped = false;            // ~gateway: no callback of this gateway runs any more
  bool keepalive_stopped = false;  // abandon()
  bool revoke_on_stop = true;      // false after abandon(); read by ~gateway after it stopped the loop side
  std::deque<op> ops;              // waiting behind the running one
  bool op_running = false;
  std::vector<std::string_view> mine;  // deliver(): the route keys of a replay held here

  lease_id current_lease() const {
    switchyard::lock_guard lock(mu);
    return lease;
  }

  // Runs `fn` on the loop thread and waits for it (directly when called
  // there): from then on no callback of this gateway runs concurrently.
  template <class F>
  void on_loop(F fn) {
    core->on_loop([&] { fn(); });
  }

  // ------------------------------------------------------------- ops queue

  // Loop thread: runs `o` after every op submitted before it has finished,
  // so that route changes and a renewal never interleave.
  void submit(op o) {
    ops.push_back(std::move(o));
    if (!op_running) next_op();
  }

  void next_op() {
    if (ops.empty()) {
      op_running = false;
      return;
    }
    op_running = true;
    auto o = std::move(ops.front());
    ops.pop_front();
    o([weak = weak_from_this()] {
      if (const auto self = weak.lock()) self->next_op();
    });
  }

  using result_fn = std::function<void(std::error_code)>;
  using route_op = std::function<void(result_fn result, step finished)>;

  // Any thread: runs `o` through the queue; `done` gets the error code it
  // hands to its `result`, on the loop thread.
  void run_async(route_op o, result_fn done) {
    if (!done) done = [](std::error_code) {};
    asio::post(core->io, [self = shared_from_this(), done = std::move(done), o = std::move(o)]() mutable {
      if (self->stopped) return done(make_error_code(errc::not_connected));
      self->submit([done = std::move(done), o = std::move(o)](step finished) { o(done, std::move(finished)); });
    });
  }

  // Any thread but the loop's: run_async, waiting for the outcome.
  std::error_code run_and_wait(route_op o) {
    auto result = std::make_shared<std::promise<std::error_code>>();
    auto outcome = result->get_future();
    run_async(std::move(o), [result](std::error_code ec) { result->set_value(ec); });
    return outcome.get();
  }

  // The op that puts route_key under the gateway's lease. The ops hold the
  // gateway's state: an async caller does not wait for them.
  route_op add_op(std::string key) {
    return [self = shared_from_this(), key = std::move(key)](result_fn result, step finished) {
      const lease_id id = self->current_lease();
      self->core->call_timed<std::uint64_t>(
          [&](std::uint64_t r) { return local_builder().registry_put(r, key, self->opts.inbox_id, id, 0); },
          detail::parse_put_version,
          [self, key, id, result, finished](std::expected<std::uint64_t, std::error_code> r) {
            if (r && !self->stopped) {  // a gateway destroyed meanwhile restores nothing
              self->core->track_put(key, self->opts.inbox_id, id);
              switchyard::lock_guard lock(self->mu);
              self->routes.insert(key);
            }
            result(r ? std::error_code{} : r.error());
            finished();
          });
    };
  }

  // The op that removes route_key (not_found when it is not one of ours).
  // The broker's entry is deleted only while it still names this gateway's
  // inbox: a user who moved to another gateway keeps the route that one put
  // (a put there between this check and the delete is lost: a window of
  // one round trip).
  route_op remove_op(std::string key) {
    return [self = shared_from_this(), key = std::move(key)](result_fn result, step finished) {
      {
        switchyard::lock_guard lock(self->mu);
        auto it = self->routes.find(key);
        if (it == self->routes.end()) {
          result(errc::not_found);
          return finished();
        }
        self->routes.erase(it);
      }
      self->core->forget_put(key);
      self->core->call_timed<std::string>(
          [&](std::uint64_t r) { return local_builder().registry_get(r, key); }, detail::parse_entry_value,
          [self, key, result, finished](std::expected<std::string, std::error_code> value) {
            if (!value || *value != self->opts.inbox_id) {
              // Gone already, or another gateway's now: nothing to delete.
              result(!value && value.error() != errc::not_found ? value.error() : std::error_code{});
              return finished();
            }
            self->core->timed_request([&](std::uint64_t r) { return local_builder().registry_delete(r, key); },
                                      [result, finished](std::error_code ec, const protocol::wire::Frame*) {
                                        result(ec == errc::not_found ? std::error_code{} : ec);
                                        finished();
                                      });
          });
    };
  }

  // ------------------------------------------------------------ keepalive

  void arm() {
    if (stopped || keepalive_stopped) return;
    timer.expires_after(opts.lease_ttl / 3);
    timer.async_wait([weak = weak_from_this()](asio_error_code ec) {
      const auto self = weak.lock();
      if (!ec && self) self->tick();
    });
  }

  // TTL/3 between keepalives, so two can fail before the lease is in
  // danger. The next wait starts once the answer (or a renewal) is in.
  // While the client reconnects there is no keepalive: its restore keeps
  // the lease alive, or replaces it (lease_replaced) along with the inbox
  // and routes, so the two never renew the same loss.
  void tick() {
    if (stopped || keepalive_stopped) return;
    if (core->reconnecting()) return arm();
    const lease_id current = core->resolve_lease(current_lease());
    core->call_timed<lease_info>(
        [current](std::uint64_t r) { return local_builder().lease_keepalive(r, current); }, detail::parse_lease,
        [weak = weak_from_this(), current](std::expected<lease_info, std::error_code> r) {
          const auto self = weak.lock();
          if (!self || self->stopped || self->keepalive_stopped) return;
          if (!r && r.error() == errc::not_found && self->core->resolve_lease(current) != current) {
            self->arm();  // the client replaced it meanwhile (lease_replaced has the new id)
            return;
          }
          if (!r && r.error() == errc::not_found) {
            // Lost while connected (a long stall, a revoke): start over.
            self->submit([weak = self->weak_from_this(), current](step finished) {
              if (const auto s = weak.lock(); s && !s->stopped) s->renew(current, std::move(finished));
            });
            return;
          }
          if (!r) self->report(r.error());
          self->arm();
        });
  }

  // Loop thread, as an op: grants a new lease, restores inbox and routes
  // under it and calls on_lease_renewed; on failure reports and gives the
  // new lease back. The keepalive goes on afterwards either way.
  void renew(lease_id lost, step finished) {
    core->call_timed<lease_info>(
        [ttl = opts.lease_ttl](std::uint64_t r) {
          return local_builder().lease_grant(
              r, static_cast<std::uint32_t>(std::clamp<std::int64_t>(ttl.count(), 0, UINT32_MAX)));
        },
        detail::parse_lease,
        [weak = weak_from_this(), lost, finished](std::expected<lease_info, std::error_code> fresh) {
          const auto self = weak.lock();
          if (!self || self->stopped) return finished();
          if (!fresh) {
            self->report(fresh.error());
            self->arm();
            return finished();
          }
          self->core->track_lease(fresh->id, fresh->ttl);
          self->restore(fresh->id, [weak, lost, id = fresh->id, ttl = fresh->ttl, finished](std::error_code ec) {
            const auto self = weak.lock();
            if (!self || self->stopped) return finished();
            if (ec) {
              self->report(ec);
              self->revoke_nowait(id);
            } else {
              // The client restores the new lease from now on, and calls
              // with the old id reach it.
              self->core->move_lease(lost, id, ttl);
              {
                switchyard::lock_guard lock(self->mu);
                self->lease = id;
              }
              client_lib::log(log_level::info, "switchyard: gateway {}: lease {} lost, renewed as {}",
                              self->opts.inbox_id, lost, id);
              if (self->opts.on_lease_renewed) self->opts.on_lease_renewed(lost, id);
            }
            self->arm();
            finished();
          });
        });
  }

  // Loop thread: opens the inbox under `id` and puts every route under it
  // (pipelined). `done` gets the first error once every answer is in.
  void restore(lease_id id, std::function<void(std::error_code)> done) {
    std::optional<durable_options> durable = opts.durable;
    if (durable) {
      // Reopened under a new lease: go on from where the old inbox was.
      for (auto& [stream, pos] : conn.inbox_stream_positions(opts.inbox_id)) durable->resume_from[stream] = pos;
    }
    auto handler = [weak = weak_from_this()](const inbox_message& m) {
      const auto self = weak.lock();
      if (self && !self->stopped) self->deliver(m);
    };
    detail::open_inbox_async(
        core, opts.inbox_id, id, std::move(handler), std::move(durable), this,
        [weak = weak_from_this(), id, done = std::move(done)](std::error_code ec) {
          const auto self = weak.lock();
          if (!self || self->stopped) return done(make_error_code(errc::not_connected));
          if (ec) return done(ec);
          std::vector<std::string> keys;
          {
            switchyard::lock_guard lock(self->mu);
            keys.assign(self->routes.begin(), self->routes.end());
          }
          if (keys.empty()) return done({});
          struct progress {
            std::size_t left;
            std::error_code first;
          };
          auto state = std::make_shared<progress>(progress{keys.size(), {}});
          for (const auto& key : keys)
            self->core->call_timed<std::uint64_t>(
                [&](std::uint64_t r) { return local_builder().registry_put(r, key, self->opts.inbox_id, id, 0); },
                detail::parse_put_version,
                [state, done, core = self->core, key, value = self->opts.inbox_id,
                 id](std::expected<std::uint64_t, std::error_code> r) {
                  if (r) core->track_put(key, value, id);  // restored by the client after a reconnect
                  if (!r && !state->first) state->first = r.error();
                  if (--state->left == 0) done(state->first);
                });
        });
  }

  void revoke_nowait(lease_id id) {
    core->forget_lease(id);
    core->request([id](std::uint64_t r) { return local_builder().lease_revoke(r, id); }, nullptr);
  }

  // Loop thread, from the client's restore after a reconnect: it replaced
  // `old` by `fresh` and restored the inbox and routes under it.
  void lease_replaced(lease_id old, lease_id fresh) {
    if (stopped) return;
    {
      switchyard::lock_guard lock(mu);
      if (lease != old) return;
      lease = fresh;
    }
    client_lib::log(log_level::info, "switchyard: gateway {}: lease {} lost over a reconnect, renewed as {}",
                    opts.inbox_id, old, fresh);
    if (opts.on_lease_renewed) opts.on_lease_renewed(old, fresh);
  }

  // ----------------------------------------------------------- deliveries

  // Loop thread. A replayed send lists every key it was sent to: keep the
  // ones routed here.
  void deliver(const inbox_message& m) {
    if (!m.replayed) return opts.on_message(m);
    mine.clear();
    {
      switchyard::lock_guard lock(mu);
      for (auto k : m.route_keys)
        if (routes.contains(k)) mine.push_back(k);
    }
    if (mine.empty()) return;
    auto copy = m;
    copy.route_keys = mine;
    opts.on_message(copy);
  }

  void report(std::error_code ec) {
    client_lib::log(log_level::warn, "switchyard: gateway {}: {}", opts.inbox_id, ec.message());
    if (opts.on_error) opts.on_error(ec);
  }

  // Loop thread: nothing of this gateway runs any more, and its inbox
  // handler is gone from the client.
  void stop() {
    stopped = true;
    timer.cancel();
    ops.clear();
    detail::remove_inboxes_of(*core, this);
    switchyard::lock_guard lock(core->mu);
    core->lease_listeners.erase(this);
  }
};

gateway::gateway(std::shared_ptr<impl> p) : impl_(std::move(p)) {}

std::expected<std::unique_ptr<gateway>, std::error_code> gateway::start(client& conn, gateway_options options) {
  if (options.inbox_id.empty() || !options.on_message) return std::unexpected(make_error_code(errc::bad_request));
  auto p = std::make_shared<impl>(conn, std::move(options));
  if (p->core->loop.on_loop_thread()) return std::unexpected(make_error_code(errc::would_deadlock));
  lease_id id = 0;
  if (p->opts.resume_lease != 0) {
    if (auto r = conn.lease_keepalive(p->opts.resume_lease))
      id = r->id;
    else if (r.error() != errc::not_found)
      return std::unexpected(r.error());
  }
  if (id == 0) {
    auto granted = conn.lease_grant(p->opts.lease_ttl);
    if (!granted) return std::unexpected(granted.error());
    id = granted->id;
    p->opts.lease_ttl = granted->ttl;  // keep alive at a third of what the server granted
  } else if (auto ttl = conn.lease_time_to_live(id)) {
    p->opts.lease_ttl = ttl->ttl;
  }
  // On the loop thread: restore, then (on success) the first keepalive wait.
  std::promise<std::error_code> restored;
  auto outcome = restored.get_future();
  asio::post(p->core->io, [p, id, &restored] {
    p->restore(id, [p, id, &restored](std::error_code ec) {
      if (ec) {
        detail::remove_inboxes_of(*p->core, p.get());
      } else {
        {
          switchyard::lock_guard lock(p->mu);
          p->lease = id;
        }
        {
          switchyard::lock_guard lock(p->core->mu);
          p->core->lease_listeners[p.get()] = [weak = std::weak_ptr<impl>(p)](lease_id old, lease_id fresh) {
            if (const auto self = weak.lock()) self->lease_replaced(old, fresh);
          };
        }
        p->arm();
      }
      restored.set_value(ec);
    });
  });
  if (auto ec = outcome.get()) {
    if (p->opts.resume_lease != id) (void)conn.lease_revoke(id);
    return std::unexpected(ec);
  }
  return std::unique_ptr<gateway>(new gateway(std::move(p)));
}

gateway::~gateway() {
  auto& p = *impl_;
  p.on_loop([&p] { p.stop(); });
  const lease_id id = p.current_lease();
  p.core->forget_lease(id);  // gone with the gateway: not restored after a reconnect
  if (!p.revoke_on_stop) return;
  if (p.core->loop.on_loop_thread())
    p.revoke_nowait(id);
  else if (p.conn.connected())
    (void)p.conn.lease_revoke(id);
}

std::error_code gateway::add_route(std::string_view route_key) {
  auto& p = *impl_;
  if (p.core->loop.on_loop_thread()) return errc::would_deadlock;
  return p.run_and_wait(p.add_op(std::string(route_key)));
}

std::error_code gateway::remove_route(std::string_view route_key) {
  auto& p = *impl_;
  if (p.core->loop.on_loop_thread()) return errc::would_deadlock;
  return p.run_and_wait(p.remove_op(std::string(route_key)));
}

void gateway::async_add_route(std::string_view route_key, std::function<void(std::error_code)> done) {
  impl_->run_async(impl_->add_op(std::string(route_key)), std::move(done));
}

void gateway::async_remove_route(std::string_view route_key, std::function<void(std::error_code)> done) {
  impl_->run_async(impl_->remove_op(std::string(route_key)), std::move(done));
}

std::vector<std::string> gateway::routes() const {
  switchyard::lock_guard lock(impl_->mu);
  return {impl_->routes.begin(), impl_->routes.end()};
}

std::error_code gateway::ack(const inbox_message& m) { return impl_->conn.ack(m); }

lease_id gateway::lease() const { return impl_->current_lease(); }

stream_positions gateway::positions() const { return impl_->conn.inbox_stream_positions(impl_->opts.inbox_id); }

const std::string& gateway::inbox_id() const noexcept { return impl_->opts.inbox_id; }

void gateway::abandon() {
  auto& p = *impl_;
  p.on_loop([&p] {
    p.keepalive_stopped = true;
    p.revoke_on_stop = false;
    p.timer.cancel();
    // As if the process had died: the client does not restore it either.
    p.core->forget_lease(p.current_lease());
  });
}

}  // namespace switchyard
