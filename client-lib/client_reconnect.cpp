// client: reconnecting after a lost connection, and restoring the session
// (subscriptions, leases, inboxes, registry entries) before anything else
// goes out; the records of what to restore (the leases and registry
// entries made through this client). Reconnecting runs on the client's
// loop thread; the records and the state queries are used from any thread.

#include "switchyard/client.hpp"

#include "client_impl_inline.hpp"

#include <charconv>

namespace switchyard {

std::optional<detail::broker_address> detail::parse_address(std::string_view text) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == text.size()) return std::nullopt;
  std::string_view host = text.substr(0, colon);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return std::nullopt;
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string_view::npos) {
    return std::nullopt;  // an IPv6 address needs its brackets
  }
  const std::string_view digits = text.substr(colon + 1);
  unsigned port = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
  if (ec != std::errc{} || end != digits.data() + digits.size() || port == 0 || port > 65535) return std::nullopt;
  return broker_address{std::string(host), static_cast<std::uint16_t>(port)};
}

namespace {

// Counts the answers of one restore phase; `then` runs once all are in
// (each request's completion calls done(); the phase itself holds one).
struct phase_barrier {
  std::size_t left = 1;
  std::function<void()> then;
  void add() { ++left; }
  void done() {
    if (--left == 0 && then) std::exchange(then, nullptr)();
  }
};

// A refusal that no retry will change.
bool refused_for_good(std::error_code ec) { return ec == errc::unauthorized || ec == errc::unsupported_version; }

std::uint32_t ms32(std::chrono::milliseconds d) {
  return static_cast<std::uint32_t>(std::clamp<std::int64_t>(d.count(), 0, UINT32_MAX));
}

}  // namespace

void client::impl::start_reconnect() {
  const bool draining = server_goodbye == errc::draining;
  backoff.lost(goodbye_retry_after, draining);
  // A drain asks the client to go elsewhere: the next broker first.
  if (draining && addresses.size() > 1) address_index = (address_index + 1) % addresses.size();
  asio::co_spawn(io, reconnect_loop(shared_from_this(), server_instance), asio::detached);
}

asio::awaitable<void> client::impl::reconnect_loop(std::shared_ptr<impl> self, std::uint64_t instance_before) {
  std::uint32_t refused = 0;
  for (;;) {
    if (closed_by_user) co_return;
    const auto delay = backoff.next_delay();
    if (!delay) {
      log(log_level::warn, "switchyard: no broker answered in {} attempts ({} ms)", backoff.attempts(),
          backoff.downtime().count());
      close_down(make_error_code(errc::reconnect_failed), make_error_code(errc::reconnect_failed));
      co_return;
    }
    retry_timer.expires_after(*delay);
    asio_error_code wait_ec;
    co_await retry_timer.async_wait(redirect_error(use_awaitable, wait_ec));
    if (closed_by_user) co_return;
    ++attempts_total;
    const auto& to = addresses[address_index];
    std::chrono::milliseconds retry_after{0};
    const std::error_code ec = co_await handshake(self, to, retry_after);
    if (closed_by_user) co_return;
    if (ec) {
      log(log_level::debug, "switchyard: reconnect attempt {} to {}:{} failed: {}", backoff.attempts(), to.host,
          to.port, ec.message());
      if (refused_for_good(ec)) {
        close_down(ec, ec);
        co_return;
      }
      if (ec == errc::rate_limited || ec == errc::too_many_connections || ec == errc::draining) ++refused;
      backoff.attempt_failed(retry_after);
      address_index = (address_index + 1) % addresses.size();
      continue;
    }
    {
      switchyard::lock_guard lock(mu);
      state = link::restoring;
    }
    reconnect_info info;
    info.attempts = backoff.attempts();
    info.refused = refused;
    info.new_server_instance = server_instance != instance_before;
    asio::co_spawn(io, read_loop(self), asio::detached);
    restore(generation, std::move(info));
    co_return;
  }
}

void client::impl::restore(std::uint64_t gen, reconnect_info info) {
  auto self = shared_from_this();
  // What this session had. Entries added meanwhile (held requests) go out
  // after the restore, in their own order.
  std::vector<std::string> patterns;
  std::vector<std::shared_ptr<durable_state>> durable_subs;
  std::map<lease_id, std::chrono::milliseconds> leases;
  {
    switchyard::lock_guard lock(mu);
    for (const auto& [pattern, refs] : pattern_refs) patterns.push_back(pattern);
    for (const auto& s : *subs)
      if (s->durable) durable_subs.push_back(s->durable);
    leases = owned_leases;
  }
  auto lost = std::make_shared<std::vector<std::pair<lease_id, std::chrono::milliseconds>>>();
  auto info_p = std::make_shared<reconnect_info>(std::move(info));

  // Phase 3: inboxes (under their lease or its replacement) and the
  // registry entries of replaced leases; durable streams read their gaps.
  auto phase3 = [self, gen, info_p, durable_subs] {
    if (gen != self->generation) return;
    auto& p = *self;
    for (const auto& d : durable_subs)
      if (d->active) d->tracker->check_all();
    std::set<lease_id> fresh;
    for (const auto& [old, now] : info_p->leases_replaced) fresh.insert(now);
    std::shared_ptr<const inbox_list> boxes;
    std::vector<std::pair<std::string, detail::owned_put>> puts;
    {
      switchyard::lock_guard lock(p.mu);
      boxes = p.inboxes;
      for (const auto& [key, put] : p.owned_puts)
        if (fresh.contains(put.lease)) puts.emplace_back(key, put);
    }
    auto barrier = std::make_shared<phase_barrier>();
    barrier->then = [self, gen, info_p] { self->restored(gen, *info_p); };
    for (const auto& box : *boxes) {
      barrier->add();
      p.reopen_inbox(gen, box, 0, [barrier] { barrier->done(); });
    }
    for (auto& [key, put] : puts) {
      barrier->add();
      p.reput(gen, std::move(key), std::move(put), 0, [barrier] { barrier->done(); });
    }
    barrier->done();
  };

  // Phase 2: a new lease (same TTL) for each one the broker did not know.
  auto phase2 = [self, gen, lost, info_p, phase3] {
    if (gen != self->generation) return;
    auto barrier = std::make_shared<phase_barrier>();
    barrier->then = phase3;
    for (const auto& [old, ttl] : *lost) {
      barrier->add();
      self->request([ttl](std::uint64_t r) { return local_builder().lease_grant(r, ms32(ttl)); },
                    [self, gen, info_p, old, ttl, barrier](std::error_code ec, const wire::Frame* f) {
                      auto granted = ec ? std::expected<lease_info, std::error_code>(std::unexpected(ec))
                                        : detail::parse_lease(*f);
                      if (!granted) {
                        log(log_level::warn, "switchyard: lease {} was lost and no new one was granted: {}", old,
                            granted.error().message());
                      } else if (gen == self->generation) {
                        self->move_lease(old, granted->id, granted->ttl);
                        info_p->leases_replaced.emplace_back(old, granted->id);
                        log(log_level::info, "switchyard: lease {} was lost over the reconnect; replaced by {}", old,
                            granted->id);
                      }
                      barrier->done();
                    },
                    true);
    }
    barrier->done();
  };

  // Phase 1: subscriptions again, and every lease kept alive (or found lost).
  auto barrier = std::make_shared<phase_barrier>();
  barrier->then = phase2;
  for (const auto& pattern : patterns) {
    barrier->add();
    request([&](std::uint64_t r) { return local_builder().subscribe(r, pattern); },
            [pattern, barrier](std::error_code ec, const wire::Frame*) {
              if (ec)
                log(log_level::warn, "switchyard: resubscribing {} after a reconnect failed: {}", pattern,
                    ec.message());
              barrier->done();
            },
            true);
  }
  for (const auto& [id, ttl] : leases) {
    barrier->add();
    request([id](std::uint64_t r) { return local_builder().lease_keepalive(r, id); },
            [id, ttl, lost, barrier](std::error_code ec, const wire::Frame*) {
              if (ec == errc::not_found)
                lost->emplace_back(id, ttl);
              else if (ec)
                log(log_level::warn, "switchyard: keepalive of lease {} after a reconnect failed: {}", id,
                    ec.message());
              barrier->done();
            },
            true);
  }
  barrier->done();
}

void client::impl::reopen_inbox(std::uint64_t gen, std::shared_ptr<const inbox_entry> box, int tries,
                                std::function<void()> answered) {
  const lease_id lease = resolve_lease(box->lease);
  request([&](std::uint64_t r) { return local_builder().inbox_open(r, box->id, lease); },
          [self = shared_from_this(), gen, box, tries, answered](std::error_code ec, const wire::Frame*) {
            if (!ec) {
              if (box->durable && box->durable->active) box->durable->tracker->check_all();
            } else if (ec == errc::inbox_taken && tries < max_inbox_retries && gen == self->generation) {
              // The broker has not noticed yet that our previous connection
              // is gone (it does within its heartbeat timeout): try again.
              auto timer = std::make_shared<asio::steady_timer>(self->io, inbox_retry_delay);
              timer->async_wait([self, gen, box, tries, timer](asio_error_code wait_ec) {
                if (wait_ec || gen != self->generation || !self->inbox_installed(box.get())) return;
                self->reopen_inbox(gen, box, tries + 1, nullptr);
              });
            } else {
              log(log_level::warn, "switchyard: reopening inbox {} after a reconnect failed: {}", box->id,
                  ec.message());
            }
            if (answered) answered();
          },
          tries == 0);
}

void client::impl::reput(std::uint64_t gen, std::string key, detail::owned_put put, int tries,
                         std::function<void()> answered) {
  request([&](std::uint64_t r) { return local_builder().registry_put(r, key, put.value, put.lease, 0); },
          [self = shared_from_this(), gen, key, put, tries, answered](std::error_code ec, const wire::Frame*) {
            if (ec == errc::unavailable && gen == self->generation) {
              if (tries == 0)
                log(log_level::info,
                    "switchyard: registry entry {} not restored yet (its owner in the cluster is out of reach): "
                    "retrying",
                    key);
              // uniform(delay / 2, delay), the delay doubling up to the cap.
              const auto wait = self->backoff.half_jitter(
                  std::min(put_retry_max_delay, put_retry_delay * (std::int64_t{1} << std::min(tries, 10))));
              std::uint64_t token = 0;
              {
                switchyard::lock_guard lock(self->mu);
                token = ++self->next_put_retry;
                self->put_retries[key] = token;
              }
              auto timer = std::make_shared<asio::steady_timer>(self->io, wait);
              timer->async_wait([self, gen, key, put, tries, token, timer](asio_error_code wait_ec) {
                {
                  // Still ours, under the same lease, and not written by the
                  // user since (cancel_put_retry)?
                  switchyard::lock_guard lock(self->mu);
                  const auto retry = self->put_retries.find(key);
                  if (retry == self->put_retries.end() || retry->second != token) return;
                  self->put_retries.erase(retry);
                  if (wait_ec || gen != self->generation || self->closed_by_user) return;
                  const auto it = self->owned_puts.find(key);
                  if (it == self->owned_puts.end() || it->second.lease != put.lease || it->second.value != put.value)
                    return;
                }
                self->reput(gen, key, put, tries + 1, nullptr);
              });
            } else if (ec) {
              log(log_level::warn, "switchyard: restoring registry entry {} after a reconnect failed: {}", key,
                  ec.message());
            } else if (tries > 0) {
              log(log_level::info, "switchyard: registry entry {} restored after {} retries", key, tries);
            }
            if (answered) answered();
          },
          tries == 0);
}

void client::impl::cancel_put_retry(std::string_view key) {
  switchyard::lock_guard lock(mu);
  if (const auto it = put_retries.find(key); it != put_retries.end()) put_retries.erase(it);
}

void client::impl::restored(std::uint64_t gen, reconnect_info info) {
  if (gen != generation) return;
  // The gateway helpers learn their new lease ids first (unless close()
  // ran meanwhile).
  std::vector<std::function<void(lease_id, lease_id)>> listeners;
  {
    switchyard::lock_guard lock(mu);
    if (state != link::restoring) return;
    for (const auto& [owner, fn] : lease_listeners) listeners.push_back(fn);
  }
  for (const auto& [old, fresh] : info.leases_replaced)
    for (const auto& fn : listeners) fn(old, fresh);
  // Held frames go out in order, before anything sent from now on; held
  // requests that timed out meanwhile are left out.
  {
    switchyard::lock_guard lock(mu);
    if (state != link::restoring) return;
    std::size_t at = 0;
    for (const auto& h : held_frames) {
      if (h.request_id == 0 || requests.contains(h.request_id))
        out.insert(out.end(), held.begin() + static_cast<std::ptrdiff_t>(at),
                   held.begin() + static_cast<std::ptrdiff_t>(at + h.size));
      at += h.size;
    }
    drop_held_locked();
    state = link::up;
    if (!out.empty() && !write_active) {
      write_active = true;
      asio::post(io, [self = shared_from_this()] { self->start_write(); });
    }
  }
  space_cv.notify_all();
  info.downtime = backoff.downtime();
  backoff.connected();
  ready = true;
  log(log_level::info, "switchyard: session restored after {} attempts, {} ms down{}", info.attempts,
      info.downtime.count(), info.new_server_instance ? " (new server instance)" : "");
  if (opts.on_reconnect) opts.on_reconnect(info);
}

bool client::impl::inbox_installed(const inbox_entry* box) {
  switchyard::lock_guard lock(mu);
  return std::any_of(inboxes->begin(), inboxes->end(), [box](const auto& e) { return e.get() == box; });
}

bool client::impl::reconnecting() {
  switchyard::lock_guard lock(mu);
  return state == link::down || state == link::restoring;
}

void client::impl::drop_held_locked() {
  held.clear();
  held_frames.clear();
  held_publish_bytes = 0;
}

// ------------------------------------------------------ session records

lease_id client::impl::resolve_lease(lease_id id) {
  switchyard::lock_guard lock(mu);
  const auto it = lease_moves.find(id);
  return it == lease_moves.end() ? id : it->second;
}

void client::impl::track_lease(lease_id id, std::chrono::milliseconds ttl) {
  switchyard::lock_guard lock(mu);
  owned_leases[id] = ttl;
}

void client::impl::forget_lease(lease_id id) {
  switchyard::lock_guard lock(mu);
  owned_leases.erase(id);
  std::erase_if(owned_puts, [id](const auto& kv) { return kv.second.lease == id; });
}

void client::impl::move_lease(lease_id old, lease_id fresh, std::chrono::milliseconds ttl) {
  switchyard::lock_guard lock(mu);
  owned_leases.erase(old);
  owned_leases[fresh] = ttl;
  for (auto& [from, to] : lease_moves)
    if (to == old) to = fresh;
  lease_moves[old] = fresh;
  for (auto& [key, put] : owned_puts)
    if (put.lease == old) put.lease = fresh;
}

void client::impl::track_put(std::string_view key, std::string_view value, lease_id lease) {
  switchyard::lock_guard lock(mu);
  owned_puts.insert_or_assign(std::string(key), detail::owned_put{std::string(value), lease});
}

void client::impl::forget_put(std::string_view key) {
  switchyard::lock_guard lock(mu);
  if (auto it = owned_puts.find(key); it != owned_puts.end()) owned_puts.erase(it);
}

}  // namespace switchyard
