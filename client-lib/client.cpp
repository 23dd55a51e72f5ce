// client: the event loop, connecting, publish, subscribe, flush, close and
// the session's accessors; client::impl's subscription list.

#include "switchyard/client.hpp"

#include "client_impl_inline.hpp"
#include "common/latency_probe.hpp"

#include <openssl/crypto.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <tuple>

namespace switchyard {

// ------------------------------------------------------------- event_loop

// OpenSSL keeps per-thread state (its random generator) for a thread that
// made a TLS context or session; OPENSSL_thread_stop frees it when the
// loop's thread ends, else every event_loop that ever did TLS leaves it
// behind.
event_loop::impl::impl()
    : thread([this] {
        io.run();
        OPENSSL_thread_stop();
      }) {}

event_loop::impl::~impl() {
  work.reset();
  io.stop();
  if (thread.joinable()) thread.join();
}

event_loop::event_loop() : impl_(std::make_unique<impl>()) {}
event_loop::~event_loop() {
  if (impl_ && impl_->on_loop_thread()) {
    // The last reference was dropped by a handler running on this very loop,
    // and an io_context cannot be destroyed from inside its own run(): a
    // short-lived thread joins the loop thread and destroys it instead.
    std::thread([p = std::move(impl_)]() mutable { p.reset(); }).detach();
  }
}

client::client(std::shared_ptr<event_loop> loop, std::shared_ptr<impl> p)
    : loop_(std::move(loop)), impl_(std::move(p)) {}

client::~client() { close(); }

void client::async_connect(client_options options, std::shared_ptr<event_loop> loop,
                           std::function<void(std::expected<std::unique_ptr<client>, std::error_code>)> done) {
  if (!loop) loop = std::make_shared<event_loop>();
  auto p = std::make_shared<impl>(std::move(options), detail::access::state(*loop));
  // The brokers, in a shuffled order (a fleet does not all pick the first).
  if (p->opts.addresses.empty()) {
    p->addresses.push_back({p->opts.host, p->opts.port});
  } else {
    for (const auto& text : p->opts.addresses) {
      if (auto a = detail::parse_address(text)) {
        p->addresses.push_back(std::move(*a));
        continue;
      }
      client_lib::log(log_level::error, "switchyard: broker address \"{}\" is not host:port", text);
      p->addresses.clear();  // run() answers invalid_argument
      break;
    }
    std::shuffle(p->addresses.begin(), p->addresses.end(), std::mt19937_64(std::random_device{}()));
  }
  auto& io = p->io;
  asio::co_spawn(io,
                 p->run(p,
                        [p, loop, done = std::move(done)](std::error_code ec) {
                          std::unique_ptr<client> c(new client(loop, p));
                          if (!ec) {
                            done(std::move(c));
                            return;
                          }
                          c->close();  // on the loop thread: closes without waiting
                          done(std::unexpected(ec));
                        }),
                 asio::detached);
}

std::expected<std::unique_ptr<client>, std::error_code> client::connect(client_options options,
                                                                        std::shared_ptr<event_loop> loop) {
  if (!loop) loop = std::make_shared<event_loop>();
  if (detail::access::state(*loop).on_loop_thread()) return std::unexpected(make_error_code(errc::would_deadlock));
  using result_type = std::expected<std::unique_ptr<client>, std::error_code>;
  auto promise = std::make_shared<std::promise<result_type>>();
  auto result = promise->get_future();
  // Each address gets connect_timeout.
  const auto limit = options.connect_timeout * static_cast<int>(std::max<std::size_t>(1, options.addresses.size()));
  async_connect(std::move(options), loop, [promise](result_type r) { promise->set_value(std::move(r)); });
  // The connect timeout fires on the loop; the margin covers a name lookup,
  // which closing the socket cannot interrupt.
  if (result.wait_for(limit + std::chrono::seconds(2)) != std::future_status::ready)
    return std::unexpected(make_error_code(errc::timeout));
  // The handler that answered still holds the loop (and, after a failure,
  // the attempt with its TLS context) until it returns. Waiting for the
  // loop to get past it means the caller's references are the last ones:
  // dropping them joins the loop thread, which then frees OpenSSL's
  // per-thread state, rather than a detached thread doing so while the
  // caller may already be exiting.
  auto passed = std::make_shared<std::promise<void>>();
  auto barrier = passed->get_future();
  asio::post(detail::access::state(*loop).io, [passed] { passed->set_value(); });
  barrier.wait_for(std::chrono::seconds(2));
  return result.get();
}

std::error_code client::publish(std::string_view channel, std::span<const std::byte> payload) {
  if (!protocol::is_valid_channel(channel)) return errc::invalid_channel;
  const protocol::bytes_view data(reinterpret_cast<const std::uint8_t*>(payload.data()), payload.size());
  const auto ec = impl_->enqueue(local_builder().publish(0, channel, data));
  probe::mark(probe::point::pub_written, probe::key_of(payload.data(), payload.size()));  // --latency-probe builds only
  return ec;
}

std::error_code client::publish_confirmed(std::string_view channel, std::span<const std::byte> payload) {
  if (!protocol::is_valid_channel(channel)) return errc::invalid_channel;
  const protocol::bytes_view data(reinterpret_cast<const std::uint8_t*>(payload.data()), payload.size());
  if (!impl_->publish_ack) {
    // Without the capability the broker does not answer publishes: a ping
    // round trip after it gives the same guarantee.
    if (auto ec = impl_->enqueue(local_builder().publish(0, channel, data))) return ec;
    return flush();
  }
  return impl_->request_sync([&](std::uint64_t id) { return local_builder().publish(id, channel, data); });
}

std::expected<subscription_id, std::error_code> client::subscribe(std::string_view pattern, message_handler handler) {
  if (impl_->loop.on_loop_thread()) return std::unexpected(make_error_code(errc::would_deadlock));
  auto promise = std::make_shared<std::promise<std::expected<subscription_id, std::error_code>>>();
  auto result = promise->get_future();
  async_subscribe(pattern, std::move(handler),
                  [promise](std::expected<subscription_id, std::error_code> r) { promise->set_value(r); });
  // The request itself times out through request_timeout (see below).
  return result.get();
}

void client::async_subscribe(std::string_view pattern, message_handler handler,
                             std::function<void(std::expected<subscription_id, std::error_code>)> done) {
  detail::add_subscription(impl_, pattern, std::move(handler), nullptr, std::move(done));
}

void detail::add_subscription(const std::shared_ptr<client_state>& self, std::string_view pattern,
                              message_handler handler, std::shared_ptr<durable_state> durable,
                              std::function<void(std::expected<subscription_id, std::error_code>)> done) {
  auto& p = *self;
  if (!protocol::is_valid_pattern(pattern)) {
    done(std::unexpected(make_error_code(errc::invalid_pattern)));
    return;
  }
  subscription_id id = 0;
  bool ask_broker = false;  // the pattern's first subscription, or a durable one
  const bool entry_is_durable = durable != nullptr;
  {
    switchyard::lock_guard lock(p.mu);
    if (p.state == client_state::link::closed) {
      done(std::unexpected(make_error_code(errc::not_connected)));
      return;
    }
    id = p.next_sub++;
    auto entry =
        std::make_shared<const sub_entry>(sub_entry{id, std::string(pattern), std::move(handler), std::move(durable)});
    if (entry->durable) {
      // Replayed records reach the handler if their channel is one it
      // subscribed to (a stream may carry several channels).
      entry->durable->deliver = [weak_p = std::weak_ptr<client_state>(self),
                                 weak_e = std::weak_ptr<const sub_entry>(entry)](
                                    const std::string& stream, std::uint64_t epoch, const stream_record& rec) {
        const auto p = weak_p.lock();
        const auto e = weak_e.lock();
        if (!p || !e || !e->durable->active || rec.channel.empty() ||
            !protocol::pattern_matches(e->pattern, rec.channel))
          return;
        ++p->recovered;
        e->handler(message{rec.channel, rec.payload, stream, rec.seq, epoch, true});
      };
    }
    auto next = std::make_shared<sub_list>(*p.subs);
    next->push_back(std::move(entry));
    p.subs = std::move(next);
    ask_broker = p.pattern_refs[std::string(pattern)]++ == 0;
    // A durable subscription asks the broker even for a pattern it already
    // has: its Subscribe marks where the subscription starts, from which
    // the broker reports the first dropped delivery of every stream again
    // (StreamDropped), so the new subscription cannot miss one.
    ask_broker = ask_broker || entry_is_durable;
  }
  if (!ask_broker) {
    done(id);
    return;
  }
  // Times out like any blocking request: a watchdog completes it with
  // errc::timeout if the broker has not answered. Armed before the request
  // goes out: the answer cancels it on the loop thread, and a timer must
  // not be used from two threads at once (an async_wait here racing that
  // cancel corrupted the io_context's timer queue).
  auto timer = std::make_shared<asio::steady_timer>(p.io, p.opts.request_timeout);
  const std::string pat(pattern);
  std::weak_ptr<client_state> weak = self;
  auto rid = std::make_shared<std::atomic<std::uint64_t>>(0);
  timer->async_wait([weak, rid](asio_error_code ec) {
    if (ec) return;
    if (auto self = weak.lock()) self->complete(rid->load(), errc::timeout);
  });
  p.request(
      [&](std::uint64_t r) {
        rid->store(r);
        return local_builder().subscribe(r, pat);
      },
      [weak, id, timer, done = std::move(done)](std::error_code ec, const wire::Frame*) {
        timer->cancel();
        if (!ec) {
          done(id);
          return;
        }
        if (auto self = weak.lock()) {
          // Roll back the local entry; the broker never confirmed it.
          switchyard::lock_guard lock(self->mu);
          self->remove_sub_locked(id);
        }
        done(std::unexpected(ec));
      });
}

std::pair<std::string, bool> client::impl::remove_sub_locked(subscription_id id) {
  auto next = std::make_shared<sub_list>();
  std::string pattern;
  for (const auto& s : *subs) {
    if (s->id != id) {
      next->push_back(s);
      continue;
    }
    pattern = s->pattern;
    if (s->durable) s->durable->active = false;
  }
  if (pattern.empty()) return {};
  subs = std::move(next);
  const bool last = --pattern_refs[pattern] == 0;
  if (last) pattern_refs.erase(pattern);
  return {std::move(pattern), last};
}

std::error_code client::unsubscribe(subscription_id id) {
  auto& p = *impl_;
  std::string pattern;
  bool last = false;
  {
    switchyard::lock_guard lock(p.mu);
    std::tie(pattern, last) = p.remove_sub_locked(id);
    if (pattern.empty()) return errc::not_found;
  }
  // The handler is already gone locally; the broker's answer is not
  // awaited, nor room in a full send buffer (one Unsubscribe per
  // subscription the client held).
  if (last)
    p.request([&](std::uint64_t r) { return local_builder().unsubscribe(r, pattern); }, nullptr, false,
              detail::client_state::room::exempt);
  return {};
}

std::error_code client::flush() {
  return impl_->request_sync([](std::uint64_t id) { return local_builder().ping(id); });
}

void client::async_flush(std::function<void(std::error_code)> done) {
  impl_->request([](std::uint64_t id) { return local_builder().ping(id); },
                 [done = std::move(done)](std::error_code ec, const wire::Frame*) {
                   if (done) done(ec);
                 });
}

void client::close() {
  auto p = impl_;
  if (!p) return;
  auto closed = std::make_shared<std::promise<void>>();
  auto result = closed->get_future();
  asio::post(p->io, [p, closed] {
    p->close_now();
    closed->set_value();
  });
  if (!p->loop.on_loop_thread()) result.wait();
}

bool client::connected() const noexcept { return impl_->ready; }
std::uint64_t client::reconnect_attempts_total() const noexcept { return impl_->attempts_total; }
std::uint64_t client::session_id() const noexcept { return impl_->session_id; }
std::uint64_t client::server_instance() const noexcept { return impl_->server_instance; }
const std::string& client::server_version() const noexcept { return impl_->server_version; }
std::uint32_t client::server_max_frame() const noexcept { return impl_->max_frame; }
std::vector<std::string> client::capabilities() const {
  switchyard::lock_guard lock(impl_->mu);
  return impl_->caps;
}
std::uint64_t client::dropped_total() const noexcept { return impl_->dropped; }
std::uint64_t client::recovered_total() const noexcept { return impl_->recovered; }

// --------------------------------------------------------------- publisher

std::expected<publisher, std::error_code> publisher::connect(client_options options) {
  auto c = client::connect(std::move(options));
  if (!c) return std::unexpected(c.error());
  return publisher(std::move(*c));
}

std::error_code publisher::publish(std::string_view channel, std::string_view payload) {
  return publish(channel, std::as_bytes(std::span(payload.data(), payload.size())));
}

std::error_code publisher::publish(std::string_view channel, std::span<const std::byte> payload) {
  return client_->publish_confirmed(channel, payload);
}

}  // namespace switchyard
