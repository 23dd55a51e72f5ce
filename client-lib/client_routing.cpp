// client: leases, the routing registry, inboxes and send-to-user.

#include "switchyard/client.hpp"

#include "client_impl_inline.hpp"

namespace switchyard {

// ------------------------------------------------------- routing (leases ...)

namespace {

using std::chrono::milliseconds;

template <class T>
using result = std::expected<T, std::error_code>;

std::uint32_t ms32(milliseconds d) {
  return static_cast<std::uint32_t>(std::clamp<std::int64_t>(d.count(), 0, UINT32_MAX));
}

std::error_code mismatch() { return make_error_code(errc::protocol_violation); }

registry_entry to_entry(const wire::RegistryEntry& e) {
  return {e.key() ? e.key()->str() : std::string{}, e.value() ? e.value()->str() : std::string{}, e.version(),
          e.lease_id(), milliseconds(e.remaining_ms())};
}

result<registry_entry> parse_entry(const wire::Frame& f) {
  const auto* e = f.message_as_RegistryEntry();
  if (!e) return std::unexpected(mismatch());
  return to_entry(*e);
}

}  // namespace

result<lease_info> detail::parse_lease(const wire::Frame& f) {
  const auto* l = f.message_as_LeaseInfo();
  if (!l) return std::unexpected(mismatch());
  return lease_info{l->lease_id(), milliseconds(l->ttl_ms()), milliseconds(l->remaining_ms())};
}

result<std::uint64_t> detail::parse_put_version(const wire::Frame& f) {
  const auto* e = f.message_as_RegistryEntry();
  if (!e) return std::unexpected(mismatch());
  return e->version();
}

result<std::string> detail::parse_entry_value(const wire::Frame& f) {
  const auto* e = f.message_as_RegistryEntry();
  if (!e) return std::unexpected(mismatch());
  return e->value() ? e->value()->str() : std::string{};
}

result<send_result> detail::parse_send_result(const wire::Frame& f) {
  const auto* m = f.message_as_SendResult();
  if (!m) return std::unexpected(mismatch());
  send_result out;
  out.routed = m->routed();
  out.seq = m->seq();
  out.epoch = m->epoch();
  if (m->gateways())
    for (const auto* g : *m->gateways()) out.gateways.push_back(g->str());
  return out;
}

using detail::parse_lease;

// Every routing call needs the capability; without it the server would
// answer unsupported_message.
#define SWITCHYARD_NEED_ROUTING() \
  if (!impl_->routing) return std::unexpected(make_error_code(errc::not_supported))

// Leases granted or kept alive here are restored after a reconnect (a
// lost one is re-granted; calls with its old id then reach the new one:
// resolve_lease). Registry entries put under a lease are restored with it.

result<lease_info> client::lease_grant(milliseconds ttl) {
  SWITCHYARD_NEED_ROUTING();
  auto r =
      impl_->call<lease_info>([&](std::uint64_t r) { return local_builder().lease_grant(r, ms32(ttl)); }, parse_lease);
  if (r) impl_->track_lease(r->id, r->ttl);
  return r;
}

result<lease_info> client::lease_keepalive(lease_id id) {
  SWITCHYARD_NEED_ROUTING();
  id = impl_->resolve_lease(id);
  auto r =
      impl_->call<lease_info>([&](std::uint64_t r) { return local_builder().lease_keepalive(r, id); }, parse_lease);
  if (r) impl_->track_lease(r->id, r->ttl);
  return r;
}

result<lease_info> client::lease_time_to_live(lease_id id) {
  SWITCHYARD_NEED_ROUTING();
  id = impl_->resolve_lease(id);
  return impl_->call<lease_info>([&](std::uint64_t r) { return local_builder().lease_time_to_live(r, id); },
                                 parse_lease);
}

std::error_code client::lease_revoke(lease_id id) {
  if (!impl_->routing) return errc::not_supported;
  id = impl_->resolve_lease(id);
  const auto ec = impl_->request_sync([&](std::uint64_t r) { return local_builder().lease_revoke(r, id); });
  if (!ec || ec == errc::not_found) impl_->forget_lease(id);
  return ec;
}

result<std::vector<lease_info>> client::lease_list(std::size_t limit, lease_id after, lease_id* next_cursor,
                                                   std::uint64_t* total) {
  SWITCHYARD_NEED_ROUTING();
  const auto n = static_cast<std::uint32_t>(std::min<std::size_t>(limit, UINT32_MAX));
  auto page = std::make_shared<std::pair<lease_id, std::uint64_t>>(0, 0);  // next cursor, total
  auto r = impl_->call<std::vector<lease_info>>(
      [&](std::uint64_t r) { return local_builder().lease_list(r, n, after); },
      [page](const wire::Frame& f) -> result<std::vector<lease_info>> {
        const auto* m = f.message_as_LeaseListResult();
        if (!m) return std::unexpected(mismatch());
        std::vector<lease_info> out;
        if (m->leases())
          for (const auto* l : *m->leases())
            out.push_back({l->lease_id(), milliseconds(l->ttl_ms()), milliseconds(l->remaining_ms())});
        *page = {m->next_cursor(), m->total()};
        return out;
      });
  if (next_cursor) *next_cursor = r ? page->first : 0;
  if (total) *total = r ? page->second : 0;
  return r;
}

result<std::uint64_t> client::registry_put(std::string_view key, std::string_view value, lease_id lease) {
  SWITCHYARD_NEED_ROUTING();
  if (lease == 0) return std::unexpected(make_error_code(errc::not_found));
  lease = impl_->resolve_lease(lease);
  impl_->cancel_put_retry(key);
  auto e = impl_->call<registry_entry>(
      [&](std::uint64_t r) { return local_builder().registry_put(r, key, value, lease, 0); }, parse_entry);
  if (!e) return std::unexpected(e.error());
  impl_->track_put(key, value, lease);
  return e->version;
}

result<std::uint64_t> client::registry_put_ttl(std::string_view key, std::string_view value, milliseconds ttl) {
  SWITCHYARD_NEED_ROUTING();
  impl_->cancel_put_retry(key);
  auto e = impl_->call<registry_entry>(
      [&](std::uint64_t r) {
        return local_builder().registry_put(r, key, value, 0, std::max<std::uint32_t>(1, ms32(ttl)));
      },
      parse_entry);
  if (!e) return std::unexpected(e.error());
  impl_->forget_put(key);  // an entry with a TTL of its own is not restored
  return e->version;
}

result<registry_entry> client::registry_get(std::string_view key) {
  SWITCHYARD_NEED_ROUTING();
  return impl_->call<registry_entry>([&](std::uint64_t r) { return local_builder().registry_get(r, key); },
                                     parse_entry);
}

std::error_code client::registry_delete(std::string_view key) {
  if (!impl_->routing) return errc::not_supported;
  impl_->cancel_put_retry(key);
  const auto ec = impl_->request_sync([&](std::uint64_t r) { return local_builder().registry_delete(r, key); });
  if (!ec || ec == errc::not_found) impl_->forget_put(key);
  return ec;
}

result<std::vector<registry_entry>> client::registry_list(std::string_view prefix, std::size_t limit, bool* more) {
  SWITCHYARD_NEED_ROUTING();
  auto cut = std::make_shared<bool>(false);
  auto r = impl_->call<std::vector<registry_entry>>(
      [&](std::uint64_t id) { return local_builder().registry_list(id, prefix, static_cast<std::uint32_t>(limit)); },
      [cut](const wire::Frame& f) -> result<std::vector<registry_entry>> {
        const auto* m = f.message_as_RegistryListResult();
        if (!m) return std::unexpected(mismatch());
        std::vector<registry_entry> out;
        if (m->entries())
          for (const auto* e : *m->entries()) out.push_back(to_entry(*e));
        *cut = m->more();
        return out;
      });
  if (more) *more = *cut;
  return r;
}

namespace {

// Installs the handler of inbox `id` (replacing one of the same id); a
// delivery may follow the broker's Ok immediately.
std::shared_ptr<const inbox_entry> install_inbox(detail::client_state& p, std::string_view id, lease_id lease,
                                                 inbox_handler handler, std::shared_ptr<durable_state> durable,
                                                 const void* owner = nullptr) {
  auto entry = std::make_shared<const inbox_entry>(
      inbox_entry{std::string(id), std::move(handler), std::move(durable), owner, lease});
  if (entry->durable) {
    // Replayed records carry every route key of the original send.
    entry->durable->deliver = [weak_p = p.weak_from_this(), weak_e = std::weak_ptr<const inbox_entry>(entry)](
                                  const std::string& stream, std::uint64_t epoch, const stream_record& rec) {
      const auto self = weak_p.lock();
      const auto e = weak_e.lock();
      if (!self || !e || !e->durable->active || rec.route_keys.empty()) return;
      std::vector<std::string_view> keys(rec.route_keys.begin(), rec.route_keys.end());
      ++self->recovered;
      e->handler(inbox_message{e->id, keys, rec.payload, stream, rec.seq, epoch, true});
    };
  }
  switchyard::lock_guard lock(p.mu);
  p.replace_inboxes_locked([&](const inbox_entry& e) { return e.id == id; }, entry);
  return entry;
}

// Removes `entry` again (the broker refused it).
void uninstall_inbox(detail::client_state& p, const inbox_entry* entry) {
  switchyard::lock_guard lock(p.mu);
  p.replace_inboxes_locked([&](const inbox_entry& e) { return &e == entry; });
}

// open_inbox and open_inbox_durable: installs the handler first, removes
// it again if the broker refuses.
std::error_code open_inbox_entry(detail::client_state& p, std::string_view id, lease_id lease, inbox_handler handler,
                                 std::shared_ptr<durable_state> durable) {
  if (!p.routing) return errc::not_supported;
  lease = p.resolve_lease(lease);
  const auto entry = install_inbox(p, id, lease, std::move(handler), std::move(durable));
  const auto ec = p.request_sync([&](std::uint64_t r) { return local_builder().inbox_open(r, id, lease); });
  if (ec) uninstall_inbox(p, entry.get());
  return ec;
}

}  // namespace

void detail::open_inbox_async(const std::shared_ptr<client_state>& self, std::string_view id, lease_id lease,
                              inbox_handler handler, std::optional<durable_options> options, const void* owner,
                              std::function<void(std::error_code)> done) {
  auto& p = *self;
  // The checks of open_inbox_durable and open_inbox_entry, in their order.
  std::shared_ptr<durable_state> durable;
  if (options) {
    if (!p.log_cap) return done(errc::not_supported);
    auto made = p.make_durable(*options);
    if (!made) return done(made.error());
    durable = std::move(*made);
  }
  if (!p.routing) return done(errc::not_supported);
  const bool resume = options && !options->resume_from.empty();
  lease = p.resolve_lease(lease);
  auto entry = install_inbox(p, id, lease, std::move(handler), std::move(durable), owner);
  p.timed_request([&](std::uint64_t r) { return local_builder().inbox_open(r, id, lease); },
                  [weak = std::weak_ptr<client_state>(self), entry, resume, done = std::move(done)](
                      std::error_code ec, const wire::Frame*) {
                    if (ec) {
                      if (const auto s = weak.lock()) uninstall_inbox(*s, entry.get());
                    } else if (resume && entry->durable->active) {
                      // As open_inbox_durable: read what was missed since the positions.
                      entry->durable->tracker->check_all();
                    }
                    done(ec);
                  });
}

void detail::remove_inboxes_of(client_state& p, const void* owner) {
  switchyard::lock_guard lock(p.mu);
  p.replace_inboxes_locked([&](const inbox_entry& e) { return e.owner == owner; });
}

std::error_code client::open_inbox(std::string_view id, lease_id lease, inbox_handler handler) {
  return open_inbox_entry(*impl_, id, lease, std::move(handler), nullptr);
}

std::error_code client::open_inbox_durable(std::string_view id, lease_id lease, inbox_handler handler,
                                           durable_options options) {
  auto& p = *impl_;
  if (!p.log_cap) return errc::not_supported;
  auto made = p.make_durable(options);
  if (!made) return made.error();
  auto durable = std::move(*made);
  const bool resume = !options.resume_from.empty();
  if (auto ec = open_inbox_entry(p, id, lease, std::move(handler), durable)) return ec;
  if (resume)
    asio::post(p.io, [durable] {
      if (durable->active) durable->tracker->check_all();
    });
  return {};
}

stream_positions client::inbox_stream_positions(std::string_view id) const {
  auto& p = *impl_;
  std::shared_ptr<durable_state> d;
  {
    switchyard::lock_guard lock(p.mu);
    for (const auto& e : *p.inboxes)
      if (e->id == id) d = e->durable;
  }
  return p.positions_of(d);
}

std::error_code client::close_inbox(std::string_view id) {
  auto& p = *impl_;
  if (!p.routing) return errc::not_supported;
  {
    switchyard::lock_guard lock(p.mu);
    p.replace_inboxes_locked([&](const inbox_entry& e) { return e.id == id; });
  }
  return p.request_sync([&](std::uint64_t r) { return local_builder().inbox_close(r, id); });
}

result<std::string> client::send(std::string_view route_key, std::span<const std::byte> payload) {
  const std::string_view keys[] = {route_key};
  auto r = send_many(keys, payload);
  if (!r) return std::unexpected(r.error());
  if (r->routed == 0 || r->gateways.empty()) return std::unexpected(make_error_code(errc::no_route));
  return std::move(r->gateways.front());
}

std::error_code client::send_nowait(std::string_view route_key, std::span<const std::byte> payload) {
  if (!impl_->routing) return errc::not_supported;
  const std::string_view keys[] = {route_key};
  const protocol::bytes_view data(reinterpret_cast<const std::uint8_t*>(payload.data()), payload.size());
  return impl_->enqueue(local_builder().send(0, keys, data));
}

result<send_result> client::send_many(std::span<const std::string_view> route_keys,
                                      std::span<const std::byte> payload) {
  SWITCHYARD_NEED_ROUTING();
  const protocol::bytes_view data(reinterpret_cast<const std::uint8_t*>(payload.data()), payload.size());
  return impl_->call<send_result>([&](std::uint64_t r) { return local_builder().send(r, route_keys, data); },
                                  detail::parse_send_result);
}

#undef SWITCHYARD_NEED_ROUTING

// The async forms record leases and entries like the blocking ones.
void client::async_lease_grant(milliseconds ttl, std::function<void(result<lease_info>)> done) {
  if (!impl_->routing) return done(std::unexpected(make_error_code(errc::not_supported)));
  impl_->call_async<lease_info>([ttl](std::uint64_t r) { return local_builder().lease_grant(r, ms32(ttl)); },
                                parse_lease,
                                [weak = impl_->weak_from_this(), done = std::move(done)](result<lease_info> r) {
                                  if (const auto p = weak.lock(); p && r) p->track_lease(r->id, r->ttl);
                                  if (done) done(std::move(r));
                                });
}

void client::async_lease_keepalive(lease_id id, std::function<void(result<lease_info>)> done) {
  if (!impl_->routing) return done(std::unexpected(make_error_code(errc::not_supported)));
  id = impl_->resolve_lease(id);
  impl_->call_async<lease_info>([id](std::uint64_t r) { return local_builder().lease_keepalive(r, id); }, parse_lease,
                                [weak = impl_->weak_from_this(), done = std::move(done)](result<lease_info> r) {
                                  if (const auto p = weak.lock(); p && r) p->track_lease(r->id, r->ttl);
                                  if (done) done(std::move(r));
                                });
}

void client::async_registry_put(std::string_view key, std::string_view value, lease_id lease,
                                std::function<void(result<std::uint64_t>)> done) {
  if (!impl_->routing) return done(std::unexpected(make_error_code(errc::not_supported)));
  lease = impl_->resolve_lease(lease);
  impl_->cancel_put_retry(key);
  impl_->call_async<std::uint64_t>(
      [&](std::uint64_t r) { return local_builder().registry_put(r, key, value, lease, 0); }, detail::parse_put_version,
      [weak = impl_->weak_from_this(), key = std::string(key), value = std::string(value), lease,
       done = std::move(done)](result<std::uint64_t> r) {
        if (const auto p = weak.lock(); p && r) p->track_put(key, value, lease);
        if (done) done(std::move(r));
      });
}

void client::async_send(std::string_view route_key, std::span<const std::byte> payload,
                        std::function<void(result<std::string_view>)> done) {
  if (!impl_->routing) return done(std::unexpected(make_error_code(errc::not_supported)));
  const std::string_view keys[] = {route_key};
  const protocol::bytes_view data(reinterpret_cast<const std::uint8_t*>(payload.data()), payload.size());
  impl_->call_async<std::string_view>([&](std::uint64_t r) { return local_builder().send(r, keys, data); },
                                      [](const wire::Frame& f) -> result<std::string_view> {
                                        const auto* m = f.message_as_SendResult();
                                        if (!m) return std::unexpected(mismatch());
                                        if (m->routed() == 0 || !m->gateways() || m->gateways()->size() == 0)
                                          return std::unexpected(make_error_code(errc::no_route));
                                        return m->gateways()->Get(0)->string_view();
                                      },
                                      std::move(done));
}

}  // namespace switchyard
