#include "switchyard/client.hpp"

#include "client_log.hpp"
#include "common/asio.hpp"
#include "protocol/channel_name.hpp"
#include "protocol/frame_builder.hpp"
#include "protocol/frame_parser.hpp"
#include "protocol/limits.hpp"

#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>

namespace switchyard {

namespace wire = protocol::wire;
using client_lib::log;
using asio::redirect_error;
using asio::use_awaitable;

// ------------------------------------------------------------- event_loop

struct event_loop::impl {
  asio::io_context io{1};
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  std::thread thread;

  impl() : thread([this] { io.run(); }) {}
  // Never runs on `thread` itself (see ~event_loop).
  ~impl() {
    work.reset();
    io.stop();
    if (thread.joinable()) thread.join();
  }
  bool on_loop_thread() const noexcept { return thread.get_id() == std::this_thread::get_id(); }
};

event_loop::event_loop() : impl_(std::make_unique<impl>()) {}
event_loop::~event_loop() {
  if (impl_ && impl_->on_loop_thread()) {
    // The last reference was dropped by a handler running on this very loop,
    // and an io_context cannot be destroyed from inside its own run(): a
    // short-lived thread joins the loop thread and destroys it instead.
    std::thread([p = std::move(impl_)]() mutable { p.reset(); }).detach();
  }
}

// ------------------------------------------------------------------ client

namespace {

// Encoders for user threads and loop threads alike; frames are copied out
// before the next encode on the same thread.
protocol::frame_builder& local_builder() {
  thread_local protocol::frame_builder builder;
  return builder;
}

std::string random_client_id() {
  std::random_device rd;
  std::uniform_int_distribution<std::uint64_t> dist;
  char buf[32];
  std::snprintf(buf, sizeof buf, "c-%016llx", static_cast<unsigned long long>(dist(rd)));
  return buf;
}

std::error_code server_error(const wire::Error& e) {
  const auto code = static_cast<int>(e.code());
  if (code <= 0 || code >= 100) return make_error_code(errc::protocol_violation);
  return {code, client_category()};
}

struct sub_entry {
  subscription_id id;
  std::string pattern;
  message_handler handler;
};
using sub_list = std::vector<std::shared_ptr<const sub_entry>>;

struct inbox_entry {
  std::string id;
  inbox_handler handler;
};
using inbox_list = std::vector<std::shared_ptr<const inbox_entry>>;

}  // namespace

struct client::impl : std::enable_shared_from_this<client::impl> {
  using clock = std::chrono::steady_clock;
  // A request's answer: an error, or the answer frame (valid during the call).
  using completion = std::function<void(std::error_code, const wire::Frame*)>;

  impl(client_options o, event_loop::impl& l)
      : opts(std::move(o)), loop(l), io(l.io), socket(io), heartbeat_timer(io),
        parser(protocol::default_max_frame) {
    if (opts.client_id.empty()) opts.client_id = random_client_id();
  }

  client_options opts;
  // Borrowed: the client object owns the event_loop reference, so the loop
  // is never destroyed from its own thread when the last coroutine lets go
  // of this impl.
  event_loop::impl& loop;
  asio::io_context& io;
  asio::ip::tcp::socket socket;
  asio::steady_timer heartbeat_timer;
  protocol::frame_parser parser;

  // Welcome data: written once on the loop thread before connect() returns.
  std::uint64_t session_id = 0;
  std::uint32_t max_frame = protocol::default_max_frame;
  std::chrono::milliseconds heartbeat{protocol::default_heartbeat_interval};
  std::vector<std::string> caps;
  bool publish_ack = false;
  bool routing = false;  // "routing" capability granted

  std::atomic<bool> open{false};
  bool connect_timed_out = false;  // loop thread
  std::atomic<std::uint64_t> dropped{0};
  std::atomic<std::uint64_t> next_request{1};
  clock::time_point last_rx = clock::now();
  std::error_code server_goodbye;  // last fatal Error from the server (loop thread)
  bool closed_by_user = false;     // loop thread

  // Guarded by mu: the outbound buffer, the requests in flight and the
  // subscriptions.
  std::mutex mu;
  std::condition_variable space_cv;
  std::vector<std::uint8_t> out;      // frames waiting for the writer
  std::vector<std::uint8_t> writing;  // frames being written (loop thread)
  bool write_active = false;          // writer scheduled or running
  bool dead = false;                  // no more writes accepted
  std::unordered_map<std::uint64_t, completion> requests;
  std::shared_ptr<const sub_list> subs = std::make_shared<const sub_list>();
  std::map<std::string, int, std::less<>> pattern_refs;
  std::shared_ptr<const inbox_list> inboxes = std::make_shared<const inbox_list>();
  std::vector<std::string_view> key_scratch;  // loop thread: route keys of one delivery

  void dispatch_inbox(const wire::InboxDelivery& d, const inbox_list& handlers) {
    const std::string_view id = d.inbox_id() ? d.inbox_id()->string_view() : std::string_view{};
    key_scratch.clear();
    if (d.route_keys())
      for (const auto* k : *d.route_keys()) key_scratch.push_back(k->string_view());
    const auto* p = d.payload();
    const inbox_message m{id, key_scratch,
                          p ? std::as_bytes(std::span(p->data(), p->size())) : std::span<const std::byte>{}};
    for (const auto& h : handlers)
      if (h->id == id) h->handler(m);
  }
  subscription_id next_sub = 1;

  // ---------------------------------------------------------------- write

  // Appends one encoded frame (any thread). Waits for space unless on the
  // loop thread.
  std::error_code enqueue(protocol::bytes_view frame) {
    if (frame.size() > max_frame + protocol::frame_header_size) return errc::payload_too_large;
    std::unique_lock lock(mu);
    if (dead) return errc::not_connected;
    if (out.size() + frame.size() > opts.max_pending_bytes && !out.empty() &&
        !loop.on_loop_thread()) {
      const bool ok = space_cv.wait_for(lock, opts.request_timeout, [&] {
        return dead || out.size() + frame.size() <= opts.max_pending_bytes || out.empty();
      });
      if (dead) return errc::not_connected;
      if (!ok) return errc::timeout;
    }
    if (opts.write_immediately && !write_active && out.empty()) {
      // Nothing queued ahead of us: try the socket directly from this thread.
      const ssize_t n = ::send(socket.native_handle(), frame.data(), frame.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n == static_cast<ssize_t>(frame.size())) return {};
      // A partial write, EAGAIN or an error: the loop writer sends the rest
      // (and reports the error through the normal read/write path).
      if (n > 0) frame = frame.subspan(static_cast<std::size_t>(n));
    }
    out.insert(out.end(), frame.begin(), frame.end());
    if (!write_active) {
      write_active = true;
      asio::post(io, [self = shared_from_this()] { self->start_write(); });
    }
    return {};
  }

  // Loop thread: writes whatever is queued, then again until empty.
  void start_write() {
    {
      std::lock_guard lock(mu);
      if (out.empty() || dead) {
        write_active = false;
        return;
      }
      writing.swap(out);
    }
    space_cv.notify_all();
    asio::async_write(socket, asio::buffer(writing),
                      [self = shared_from_this()](asio_error_code ec, std::size_t) {
                        self->writing.clear();
                        if (ec) {
                          self->fail(ec, "write");
                          return;
                        }
                        self->start_write();
                      });
  }

  // ------------------------------------------------------------- requests

  // Registers `done` under a fresh request id, encodes with `encode(id)` and
  // sends. `done` runs on the loop thread (or here, at once, on a send error).
  template <class Encode>
  void request(Encode encode, completion done) {
    const std::uint64_t id = next_request.fetch_add(1, std::memory_order_relaxed);
    {
      std::unique_lock lock(mu);
      if (dead) {
        lock.unlock();
        if (done) done(errc::not_connected, nullptr);
        return;
      }
      requests.emplace(id, std::move(done));
    }
    if (auto ec = enqueue(encode(id))) complete(id, ec);
  }

  void complete(std::uint64_t id, std::error_code ec, const wire::Frame* answer = nullptr) {
    completion done;
    {
      std::lock_guard lock(mu);
      auto it = requests.find(id);
      if (it == requests.end()) return;
      done = std::move(it->second);
      requests.erase(it);
    }
    if (done) done(ec, answer);
  }

  // Blocking request (not on the loop thread): waits up to request_timeout
  // and turns the answer frame into T with `parse`.
  template <class T, class Encode, class Parse>
  std::expected<T, std::error_code> call(Encode encode, Parse parse) {
    if (loop.on_loop_thread()) return std::unexpected(make_error_code(errc::would_deadlock));
    auto promise = std::make_shared<std::promise<std::expected<T, std::error_code>>>();
    auto result = promise->get_future();
    std::uint64_t id = 0;
    request([&](std::uint64_t rid) { id = rid; return encode(rid); },
            [promise, parse](std::error_code ec, const wire::Frame* answer) {
              if (ec) promise->set_value(std::unexpected(ec));
              else if (!answer) promise->set_value(std::unexpected(make_error_code(errc::protocol_violation)));
              else promise->set_value(parse(*answer));
            });
    if (result.wait_for(opts.request_timeout) != std::future_status::ready) complete(id, errc::timeout);
    return result.get();
  }

  // Non-blocking request: `done` gets the parsed answer on the loop thread.
  template <class T, class Encode, class Parse>
  void call_async(Encode encode, Parse parse, std::function<void(std::expected<T, std::error_code>)> done) {
    request(encode, [parse, done = std::move(done)](std::error_code ec, const wire::Frame* answer) {
      if (!done) return;
      if (ec) done(std::unexpected(ec));
      else if (!answer) done(std::unexpected(make_error_code(errc::protocol_violation)));
      else done(parse(*answer));
    });
  }

  // A blocking request whose success answer carries nothing (Ok, Pong).
  template <class Encode>
  std::error_code request_sync(Encode encode) {
    auto r = call<bool>(encode, [](const wire::Frame&) -> std::expected<bool, std::error_code> { return true; });
    return r ? std::error_code{} : r.error();
  }

  // ------------------------------------------------------------ lifecycle

  // Loop thread. Ends the connection once; fails every pending request.
  void fail(std::error_code ec, std::string_view what) {
    std::unordered_map<std::uint64_t, completion> pending;
    {
      std::lock_guard lock(mu);
      if (dead && !open) return;
      dead = true;
      pending.swap(requests);
    }
    space_cv.notify_all();
    const bool was_open = open.exchange(false);
    asio_error_code ignored;
    socket.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
    socket.close(ignored);
    heartbeat_timer.cancel();
    const std::error_code reason = server_goodbye ? server_goodbye : ec;
    for (auto& [id, done] : pending)
      if (done) done(make_error_code(errc::not_connected), nullptr);
    if (!was_open || closed_by_user) return;
    log(log_level::info, "switchyard: connection {} closed on {}: {}", session_id, what, reason.message());
    if (opts.on_disconnect) opts.on_disconnect(reason);
  }

  asio::awaitable<void> heartbeat_loop(std::shared_ptr<impl> /*keep_alive*/) {
    const auto interval = opts.heartbeat_interval.count() > 0 ? opts.heartbeat_interval : heartbeat;
    const auto deadline = interval * 2 + interval / 2;
    while (open) {
      heartbeat_timer.expires_after(interval);
      asio_error_code ec;
      co_await heartbeat_timer.async_wait(redirect_error(use_awaitable, ec));
      if (ec || !open) co_return;
      if (clock::now() - last_rx > deadline) {
        fail(errc::heartbeat_timeout, "heartbeat");
        co_return;
      }
      enqueue(local_builder().ping());
    }
  }

  // --------------------------------------------------------------- reader

  // 8-byte aligned read buffer so frames verify in place.
  std::unique_ptr<std::uint64_t[]> rbuf;
  std::size_t rcap = 0, rbegin = 0, rend = 0;
  std::uint8_t* rdata() noexcept { return reinterpret_cast<std::uint8_t*>(rbuf.get()); }

  void make_room(std::size_t needed) {
    if (rbegin == rend) rbegin = rend = 0;
    const std::size_t want = std::max<std::size_t>(needed, 4096);
    if (rcap - rbegin >= want && rcap > rend) return;
    if (rcap >= want && rbegin > 0) {
      std::memmove(rdata(), rdata() + rbegin, rend - rbegin);
      rend -= rbegin;
      rbegin = 0;
      if (rcap > rend) return;
    }
    const std::size_t cap = (std::max(want, rcap * 2) + 7) / 8 * 8;
    auto fresh = std::make_unique<std::uint64_t[]>(cap / 8);
    if (rbuf) std::memcpy(fresh.get(), rdata() + rbegin, rend - rbegin);
    rend -= rbegin;
    rbegin = 0;
    rbuf = std::move(fresh);
    rcap = cap;
  }

  // Reads until at least one complete frame is buffered; returns it, or an
  // error (socket or protocol).
  asio::awaitable<std::expected<protocol::frame_view, std::error_code>> read_frame() {
    for (;;) {
      auto r = parser.next({rdata() + rbegin, rend - rbegin});
      if (!r) co_return std::unexpected(r.error());
      if (*r) co_return **r;
      make_room(parser.needed());
      asio_error_code ec;
      const std::size_t n = co_await socket.async_read_some(asio::buffer(rdata() + rend, rcap - rend),
                                                            redirect_error(use_awaitable, ec));
      if (ec) co_return std::unexpected(std::error_code(ec));
      last_rx = clock::now();
      rend += n;
    }
  }

  // Handles one frame after the welcome. Returns false to stop reading.
  bool dispatch(const wire::Frame& f, const sub_list& subscriptions, const inbox_list& inboxes) {
    switch (f.message_type()) {
      case wire::Message::Deliver: {
        const auto& d = *f.message_as_Deliver();
        const std::string_view channel = d.channel()->string_view();
        const auto* p = d.payload();
        const message m{channel, p ? std::as_bytes(std::span(p->data(), p->size())) : std::span<const std::byte>{}};
        for (const auto& s : subscriptions)
          if (protocol::pattern_matches(s->pattern, channel)) s->handler(m);
        return true;
      }
      case wire::Message::Ok:
      case wire::Message::Pong:
      case wire::Message::LeaseInfo:
      case wire::Message::LeaseListResult:
      case wire::Message::RegistryEntry:
      case wire::Message::RegistryListResult:
      case wire::Message::SendResult:
        if (f.request_id() != 0) complete(f.request_id(), {}, &f);
        return true;
      case wire::Message::InboxDelivery:
        dispatch_inbox(*f.message_as_InboxDelivery(), inboxes);
        return true;
      case wire::Message::Ping:
        enqueue(local_builder().pong(f.request_id()));
        return true;
      case wire::Message::Dropped: {
        const std::uint64_t n = f.message_as_Dropped()->count();
        dropped += n;
        log(log_level::warn, "switchyard: connection {} was a slow consumer: {} messages dropped", session_id, n);
        if (opts.on_dropped) opts.on_dropped(n);
        return true;
      }
      case wire::Message::Error: {
        const auto& e = *f.message_as_Error();
        const auto ec = server_error(e);
        if (f.request_id() != 0) {
          complete(f.request_id(), ec);
          return true;
        }
        log(log_level::warn, "switchyard: server error on connection {}: {} ({})", session_id, ec.message(),
            e.message() ? e.message()->string_view() : "");
        if (e.fatal()) server_goodbye = ec;
        return true;
      }
      default:
        log(log_level::error, "switchyard: unexpected message {} from the server",
            wire::EnumNameMessage(f.message_type()));
        fail(errc::protocol_violation, "protocol");
        return false;
    }
  }

  asio::awaitable<void> read_loop(std::shared_ptr<impl> self) {
    asio::co_spawn(io, heartbeat_loop(self), asio::detached);
    std::shared_ptr<const sub_list> subscriptions;
    std::shared_ptr<const inbox_list> inbox_handlers;
    while (open) {
      // One snapshot of the handlers per read batch: a lock per syscall,
      // not per message.
      {
        std::lock_guard lock(mu);
        subscriptions = subs;
        inbox_handlers = inboxes;
      }
      auto r = parser.next({rdata() + rbegin, rend - rbegin});
      if (!r) {
        fail(r.error(), "protocol");
        co_return;
      }
      if (!*r) {
        make_room(parser.needed());
        asio_error_code ec;
        const std::size_t n = co_await socket.async_read_some(
            asio::buffer(rdata() + rend, rcap - rend), redirect_error(use_awaitable, ec));
        if (ec) {
          fail(ec, "read");
          co_return;
        }
        last_rx = clock::now();
        rend += n;
        continue;
      }
      // Dispatch every complete frame already buffered.
      do {
        const std::size_t size = (*r)->size;
        if (!dispatch(*(*r)->frame, *subscriptions, *inbox_handlers) || !open) co_return;
        rbegin += size;
        r = parser.next({rdata() + rbegin, rend - rbegin});
        if (!r) {
          fail(r.error(), "protocol");
          co_return;
        }
      } while (*r);
    }
  }

  // Connect + hello + welcome within opts.connect_timeout. Calls `ready`
  // once with the outcome (on the loop thread), then keeps reading.
  asio::awaitable<void> run(std::shared_ptr<impl> self, std::function<void(std::error_code)> ready) {
    asio::steady_timer guard(io, opts.connect_timeout);
    guard.async_wait([self](asio_error_code ec) {
      if (ec || self->open) return;
      // Closing the socket makes the pending connect/read fail at once.
      self->connect_timed_out = true;
      asio_error_code ignored;
      self->socket.close(ignored);
    });
    auto finish = [&](std::error_code ec) {
      guard.cancel();
      if (connect_timed_out) ec = errc::timeout;
      if (ready) ready(ec);
      ready = nullptr;
    };
    asio::ip::tcp::resolver resolver(io);
    asio_error_code ec;
    const auto endpoints = co_await resolver.async_resolve(opts.host, std::to_string(opts.port),
                                                           redirect_error(use_awaitable, ec));
    if (ec) co_return finish(ec);
    co_await asio::async_connect(socket, endpoints, redirect_error(use_awaitable, ec));
    if (ec) co_return finish(ec);
    socket.set_option(asio::ip::tcp::no_delay(true), ec);
    make_room(64 * 1024);

    static constexpr std::array<std::string_view, 3> wanted{
        protocol::capability::dropped_notice, protocol::capability::publish_ack, protocol::capability::routing};
    protocol::hello_fields h;
    h.protocol_major = protocol::protocol_major;
    h.protocol_minor = protocol::protocol_minor;
    h.client_name = opts.client_name;
    h.client_version = SWITCHYARD_VERSION;
    h.client_id = opts.client_id;
    h.credentials = opts.credentials;
    h.capabilities = wanted;
    const auto hello = local_builder().hello(0, h);
    co_await asio::async_write(socket, asio::buffer(hello.data(), hello.size()), redirect_error(use_awaitable, ec));
    if (ec) co_return finish(ec);

    auto r = co_await read_frame();
    if (!r) co_return finish(r.error());
    const wire::Frame& f = *r->frame;
    if (f.message_type() == wire::Message::Error) co_return finish(server_error(*f.message_as_Error()));
    if (f.message_type() != wire::Message::Welcome) co_return finish(errc::protocol_violation);
    const auto& w = *f.message_as_Welcome();
    session_id = w.session_id();
    if (w.max_frame() >= protocol::min_max_frame) max_frame = w.max_frame();
    if (w.heartbeat_ms() > 0) heartbeat = std::chrono::milliseconds(w.heartbeat_ms());
    if (w.capabilities())
      for (const auto* c : *w.capabilities()) caps.push_back(c->str());
    publish_ack = std::find(caps.begin(), caps.end(), protocol::capability::publish_ack) != caps.end();
    routing = std::find(caps.begin(), caps.end(), protocol::capability::routing) != caps.end();
    rbegin += r->size;
    // Frames from the server may be as large as our own limit allows.
    parser.set_max_frame(std::max<std::uint32_t>(max_frame, protocol::default_max_frame));
    open = true;
    log(log_level::info, "switchyard: connected to {}:{} session {}", opts.host, opts.port, session_id);
    finish({});
    co_await read_loop(self);
  }
};

client::client(std::shared_ptr<event_loop> loop, std::shared_ptr<impl> p)
    : loop_(std::move(loop)), impl_(std::move(p)) {}

client::~client() { close(); }

void client::async_connect(client_options options, std::shared_ptr<event_loop> loop,
                           std::function<void(std::expected<std::unique_ptr<client>, std::error_code>)> done) {
  if (!loop) loop = std::make_shared<event_loop>();
  auto p = std::make_shared<impl>(std::move(options), loop->get());
  auto& io = p->io;
  asio::co_spawn(io, p->run(p, [p, loop, done = std::move(done)](std::error_code ec) {
    std::unique_ptr<client> c(new client(loop, p));
    if (!ec) {
      done(std::move(c));
      return;
    }
    c->close();  // on the loop thread: closes without waiting
    done(std::unexpected(ec));
  }), asio::detached);
}

std::expected<std::unique_ptr<client>, std::error_code> client::connect(client_options options,
                                                                        std::shared_ptr<event_loop> loop) {
  if (!loop) loop = std::make_shared<event_loop>();
  if (loop->get().on_loop_thread()) return std::unexpected(make_error_code(errc::would_deadlock));
  using result_type = std::expected<std::unique_ptr<client>, std::error_code>;
  auto promise = std::make_shared<std::promise<result_type>>();
  auto result = promise->get_future();
  const auto limit = options.connect_timeout;
  async_connect(std::move(options), loop, [promise](result_type r) { promise->set_value(std::move(r)); });
  // The connect timeout fires on the loop; the margin covers a name lookup,
  // which closing the socket cannot interrupt.
  if (result.wait_for(limit + std::chrono::seconds(2)) != std::future_status::ready)
    return std::unexpected(make_error_code(errc::timeout));
  return result.get();
}

std::error_code client::publish(std::string_view channel, std::span<const std::byte> payload) {
  if (!protocol::is_valid_channel(channel)) return errc::invalid_channel;
  const protocol::bytes_view data(reinterpret_cast<const std::uint8_t*>(payload.data()), payload.size());
  return impl_->enqueue(local_builder().publish(0, channel, data));
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

std::expected<subscription_id, std::error_code> client::subscribe(std::string_view pattern,
                                                                  message_handler handler) {
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
  auto& p = *impl_;
  if (!protocol::is_valid_pattern(pattern)) {
    done(std::unexpected(make_error_code(errc::invalid_pattern)));
    return;
  }
  subscription_id id = 0;
  bool first = false;
  {
    std::lock_guard lock(p.mu);
    if (p.dead) {
      done(std::unexpected(make_error_code(errc::not_connected)));
      return;
    }
    id = p.next_sub++;
    auto next = std::make_shared<sub_list>(*p.subs);
    next->push_back(std::make_shared<const sub_entry>(sub_entry{id, std::string(pattern), std::move(handler)}));
    p.subs = std::move(next);
    first = p.pattern_refs[std::string(pattern)]++ == 0;
  }
  if (!first) {
    done(id);
    return;
  }
  // Times out like any blocking request: a watchdog completes it with
  // errc::timeout if the broker has not answered.
  auto timer = std::make_shared<asio::steady_timer>(p.io, p.opts.request_timeout);
  const std::string pat(pattern);
  std::weak_ptr<impl> weak = impl_;
  auto rid = std::make_shared<std::uint64_t>(0);
  p.request(
      [&](std::uint64_t r) {
        *rid = r;
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
          std::lock_guard lock(self->mu);
          auto next = std::make_shared<sub_list>();
          std::string pattern;
          for (const auto& s : *self->subs) {
            if (s->id == id) pattern = s->pattern;
            else next->push_back(s);
          }
          self->subs = std::move(next);
          if (!pattern.empty() && --self->pattern_refs[pattern] == 0) self->pattern_refs.erase(pattern);
        }
        done(std::unexpected(ec));
      });
  timer->async_wait([weak, rid](asio_error_code ec) {
    if (ec) return;
    if (auto self = weak.lock()) self->complete(*rid, errc::timeout);
  });
}

std::error_code client::unsubscribe(subscription_id id) {
  auto& p = *impl_;
  std::string pattern;
  bool last = false;
  {
    std::lock_guard lock(p.mu);
    auto next = std::make_shared<sub_list>();
    for (const auto& s : *p.subs) {
      if (s->id == id) pattern = s->pattern;
      else next->push_back(s);
    }
    if (pattern.empty()) return errc::not_found;
    p.subs = std::move(next);
    last = --p.pattern_refs[pattern] == 0;
    if (last) p.pattern_refs.erase(pattern);
  }
  // The handler is already gone locally; the broker's answer is not awaited.
  if (last) p.request([&](std::uint64_t r) { return local_builder().unsubscribe(r, pattern); }, nullptr);
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
    p->closed_by_user = true;
    p->fail(errc::not_connected, "close");
    closed->set_value();
  });
  if (!p->loop.on_loop_thread()) result.wait();
}

bool client::connected() const noexcept { return impl_->open; }
std::uint64_t client::session_id() const noexcept { return impl_->session_id; }
std::uint32_t client::server_max_frame() const noexcept { return impl_->max_frame; }
std::vector<std::string> client::capabilities() const { return impl_->caps; }
std::uint64_t client::dropped_total() const noexcept { return impl_->dropped; }

// ------------------------------------------------------- routing (leases ...)

namespace {

using std::chrono::milliseconds;

template <class T>
using result = std::expected<T, std::error_code>;

std::uint32_t ms32(milliseconds d) {
  return static_cast<std::uint32_t>(std::clamp<std::int64_t>(d.count(), 0, UINT32_MAX));
}

std::error_code mismatch() { return make_error_code(errc::protocol_violation); }

result<lease_info> parse_lease(const wire::Frame& f) {
  const auto* l = f.message_as_LeaseInfo();
  if (!l) return std::unexpected(mismatch());
  return lease_info{l->lease_id(), milliseconds(l->ttl_ms()), milliseconds(l->remaining_ms())};
}

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

// Every routing call needs the capability; without it the server would
// answer unsupported_message.
#define SWITCHYARD_NEED_ROUTING()                                                  \
  if (!impl_->routing) return std::unexpected(make_error_code(errc::not_supported))

result<lease_info> client::lease_grant(milliseconds ttl) {
  SWITCHYARD_NEED_ROUTING();
  return impl_->call<lease_info>([&](std::uint64_t r) { return local_builder().lease_grant(r, ms32(ttl)); },
                                 parse_lease);
}

result<lease_info> client::lease_keepalive(lease_id id) {
  SWITCHYARD_NEED_ROUTING();
  return impl_->call<lease_info>([&](std::uint64_t r) { return local_builder().lease_keepalive(r, id); },
                                 parse_lease);
}

result<lease_info> client::lease_time_to_live(lease_id id) {
  SWITCHYARD_NEED_ROUTING();
  return impl_->call<lease_info>([&](std::uint64_t r) { return local_builder().lease_time_to_live(r, id); },
                                 parse_lease);
}

std::error_code client::lease_revoke(lease_id id) {
  if (!impl_->routing) return errc::not_supported;
  return impl_->request_sync([&](std::uint64_t r) { return local_builder().lease_revoke(r, id); });
}

result<std::vector<lease_info>> client::lease_list(std::size_t limit) {
  SWITCHYARD_NEED_ROUTING();
  return impl_->call<std::vector<lease_info>>(
      [&](std::uint64_t r) { return local_builder().lease_list(r, static_cast<std::uint32_t>(limit)); },
      [](const wire::Frame& f) -> result<std::vector<lease_info>> {
        const auto* m = f.message_as_LeaseListResult();
        if (!m) return std::unexpected(mismatch());
        std::vector<lease_info> out;
        if (m->leases())
          for (const auto* l : *m->leases())
            out.push_back({l->lease_id(), milliseconds(l->ttl_ms()), milliseconds(l->remaining_ms())});
        return out;
      });
}

result<std::uint64_t> client::registry_put(std::string_view key, std::string_view value, lease_id lease) {
  SWITCHYARD_NEED_ROUTING();
  if (lease == 0) return std::unexpected(make_error_code(errc::not_found));
  auto e = impl_->call<registry_entry>(
      [&](std::uint64_t r) { return local_builder().registry_put(r, key, value, lease, 0); }, parse_entry);
  if (!e) return std::unexpected(e.error());
  return e->version;
}

result<std::uint64_t> client::registry_put_ttl(std::string_view key, std::string_view value, milliseconds ttl) {
  SWITCHYARD_NEED_ROUTING();
  auto e = impl_->call<registry_entry>(
      [&](std::uint64_t r) { return local_builder().registry_put(r, key, value, 0, std::max<std::uint32_t>(1, ms32(ttl))); },
      parse_entry);
  if (!e) return std::unexpected(e.error());
  return e->version;
}

result<registry_entry> client::registry_get(std::string_view key) {
  SWITCHYARD_NEED_ROUTING();
  return impl_->call<registry_entry>([&](std::uint64_t r) { return local_builder().registry_get(r, key); },
                                     parse_entry);
}

std::error_code client::registry_delete(std::string_view key) {
  if (!impl_->routing) return errc::not_supported;
  return impl_->request_sync([&](std::uint64_t r) { return local_builder().registry_delete(r, key); });
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

std::error_code client::open_inbox(std::string_view id, lease_id lease, inbox_handler handler) {
  auto& p = *impl_;
  if (!p.routing) return errc::not_supported;
  // Install the handler first: a delivery may follow the Ok immediately.
  auto entry = std::make_shared<const inbox_entry>(inbox_entry{std::string(id), std::move(handler)});
  {
    std::lock_guard lock(p.mu);
    auto next = std::make_shared<inbox_list>();
    for (const auto& e : *p.inboxes)
      if (e->id != id) next->push_back(e);
    next->push_back(entry);
    p.inboxes = std::move(next);
  }
  const auto ec = p.request_sync([&](std::uint64_t r) { return local_builder().inbox_open(r, id, lease); });
  if (ec) {
    std::lock_guard lock(p.mu);
    auto next = std::make_shared<inbox_list>();
    for (const auto& e : *p.inboxes)
      if (e != entry) next->push_back(e);
    p.inboxes = std::move(next);
  }
  return ec;
}

std::error_code client::close_inbox(std::string_view id) {
  auto& p = *impl_;
  if (!p.routing) return errc::not_supported;
  {
    std::lock_guard lock(p.mu);
    auto next = std::make_shared<inbox_list>();
    for (const auto& e : *p.inboxes)
      if (e->id != id) next->push_back(e);
    p.inboxes = std::move(next);
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

result<send_result> client::send_many(std::span<const std::string_view> route_keys, std::span<const std::byte> payload) {
  SWITCHYARD_NEED_ROUTING();
  const protocol::bytes_view data(reinterpret_cast<const std::uint8_t*>(payload.data()), payload.size());
  return impl_->call<send_result>(
      [&](std::uint64_t r) { return local_builder().send(r, route_keys, data); },
      [](const wire::Frame& f) -> result<send_result> {
        const auto* m = f.message_as_SendResult();
        if (!m) return std::unexpected(mismatch());
        send_result out;
        out.routed = m->routed();
        if (m->gateways())
          for (const auto* g : *m->gateways()) out.gateways.push_back(g->str());
        return out;
      });
}

#undef SWITCHYARD_NEED_ROUTING

void client::async_lease_grant(milliseconds ttl, std::function<void(result<lease_info>)> done) {
  if (!impl_->routing) return done(std::unexpected(make_error_code(errc::not_supported)));
  impl_->call_async<lease_info>([ttl](std::uint64_t r) { return local_builder().lease_grant(r, ms32(ttl)); },
                                parse_lease, std::move(done));
}

void client::async_lease_keepalive(lease_id id, std::function<void(result<lease_info>)> done) {
  if (!impl_->routing) return done(std::unexpected(make_error_code(errc::not_supported)));
  impl_->call_async<lease_info>([id](std::uint64_t r) { return local_builder().lease_keepalive(r, id); },
                                parse_lease, std::move(done));
}

void client::async_registry_put(std::string_view key, std::string_view value, lease_id lease,
                                std::function<void(result<std::uint64_t>)> done) {
  if (!impl_->routing) return done(std::unexpected(make_error_code(errc::not_supported)));
  impl_->call_async<std::uint64_t>(
      [&](std::uint64_t r) { return local_builder().registry_put(r, key, value, lease, 0); },
      [](const wire::Frame& f) -> result<std::uint64_t> {
        const auto* e = f.message_as_RegistryEntry();
        if (!e) return std::unexpected(mismatch());
        return e->version();
      },
      std::move(done));
}

void client::async_send(std::string_view route_key, std::span<const std::byte> payload,
                        std::function<void(result<std::string_view>)> done) {
  if (!impl_->routing) return done(std::unexpected(make_error_code(errc::not_supported)));
  const std::string_view keys[] = {route_key};
  const protocol::bytes_view data(reinterpret_cast<const std::uint8_t*>(payload.data()), payload.size());
  impl_->call_async<std::string_view>(
      [&](std::uint64_t r) { return local_builder().send(r, keys, data); },
      [](const wire::Frame& f) -> result<std::string_view> {
        const auto* m = f.message_as_SendResult();
        if (!m) return std::unexpected(mismatch());
        if (m->routed() == 0 || !m->gateways() || m->gateways()->size() == 0)
          return std::unexpected(make_error_code(errc::no_route));
        return m->gateways()->Get(0)->string_view();
      },
      std::move(done));
}

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
