#pragma once
// Internal: the client's connection state (client::impl) and the event
// loop's thread, shared by client.cpp (connection, pub/sub) and
// client_routing.cpp (leases, registry, inboxes, send). Not installed.

#include "switchyard/client.hpp"

#include "access.hpp"
#include "byte_stream.hpp"
#include "client_log.hpp"
#include "stream_tracker.hpp"
#include "common/asio.hpp"
#include "protocol/channel_name.hpp"
#include "protocol/frame_builder.hpp"
#include "protocol/frame_parser.hpp"
#include "protocol/limits.hpp"
#include "protocol/read_buffer.hpp"

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <optional>
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

// ------------------------------------------------------------------ client

namespace detail {

// Encoders for user threads and loop threads alike; frames are copied out
// before the next encode on the same thread.
inline protocol::frame_builder& local_builder() {
  thread_local protocol::frame_builder builder;
  return builder;
}

inline std::string random_client_id() {
  std::random_device rd;
  std::uniform_int_distribution<std::uint64_t> dist;
  char buf[32];
  std::snprintf(buf, sizeof buf, "c-%016llx", static_cast<unsigned long long>(dist(rd)));
  return buf;
}

inline std::error_code server_error(const wire::Error& e) {
  const auto code = static_cast<int>(e.code());
  if (code <= 0 || code >= 100) return make_error_code(errc::protocol_violation);
  return {code, client_category()};
}

// The gap tracking of a durable subscription or inbox. The tracker and
// `deliver` are used on the loop thread only; `active` turns false (any
// thread) when the subscription or inbox is removed, so late read answers
// are ignored.
struct durable_state {
  std::optional<stream_tracker> tracker;  // set right after construction (its reads need a weak_ptr to this)
  stream_tracker::deliver_fn deliver;     // hands a recovered record to the entry's handler
  std::size_t read_batch = 0;
  std::atomic<bool> active{true};
};

struct sub_entry {
  subscription_id id;
  std::string pattern;
  message_handler handler;
  std::shared_ptr<durable_state> durable;  // null for a plain subscription
};
using sub_list = std::vector<std::shared_ptr<const sub_entry>>;

struct inbox_entry {
  std::string id;
  inbox_handler handler;
  std::shared_ptr<durable_state> durable;  // null for a plain inbox
  const void* owner = nullptr;             // who opened it (the gateway helper), to remove only its own
};
using inbox_list = std::vector<std::shared_ptr<const inbox_entry>>;

// SendResult -> send_result (send_many, send_durable).
inline std::expected<send_result, std::error_code> parse_send_result(const wire::Frame& f) {
  const auto* m = f.message_as_SendResult();
  if (!m) return std::unexpected(make_error_code(errc::protocol_violation));
  send_result out;
  out.routed = m->routed();
  out.seq = m->seq();
  out.epoch = m->epoch();
  if (m->gateways())
    for (const auto* g : *m->gateways()) out.gateways.push_back(g->str());
  return out;
}

// Records -> stream_read (read(), and the recovery reads).
std::expected<stream_read, std::error_code> parse_records(const wire::Frame& f);

// LeaseInfo -> lease_info; RegistryEntry -> its version (client_routing.cpp).
std::expected<lease_info, std::error_code> parse_lease(const wire::Frame& f);
std::expected<std::uint64_t, std::error_code> parse_put_version(const wire::Frame& f);

}  // namespace detail

using detail::local_builder;
using detail::durable_state;
using detail::sub_entry;
using detail::sub_list;
using detail::inbox_entry;
using detail::inbox_list;

struct client::impl : std::enable_shared_from_this<client::impl> {
  using clock = std::chrono::steady_clock;
  // A request's answer: an error, or the answer frame (valid during the call).
  using completion = std::function<void(std::error_code, const wire::Frame*)>;

  impl(client_options o, detail::loop_state& l)
      : opts(std::move(o)), loop(l), io(l.io), stream(io), heartbeat_timer(io),
        parser(protocol::default_max_frame) {
    if (opts.client_id.empty()) opts.client_id = detail::random_client_id();
  }

  client_options opts;
  // Borrowed: the client object owns the event_loop reference, so the loop
  // is never destroyed from its own thread when the last coroutine lets go
  // of this impl.
  detail::loop_state& loop;
  asio::io_context& io;
  // The connection's bytes go through it only (TLS can replace it).
  client_lib::byte_stream stream;
  asio::steady_timer heartbeat_timer;
  protocol::frame_parser parser;

  // Welcome data: written once on the loop thread before connect() returns.
  std::uint64_t session_id = 0;
  std::uint64_t server_instance = 0;  // 0: a server older than the field
  std::string server_version;
  std::uint32_t max_frame = protocol::default_max_frame;
  std::chrono::milliseconds heartbeat{protocol::default_heartbeat_interval};
  std::vector<std::string> caps;
  bool publish_ack = false;
  bool routing = false;  // "routing" capability granted
  bool log_cap = false;  // "log" capability granted
  // "stream-drops" granted: the broker reports the first dropped delivery of
  // each stream (StreamDropped), so a durable subscription's first sight of
  // a stream is its first message since the subscribe. Without it (an older
  // broker) a stream whose first messages were dropped starts at the first
  // that arrives.
  bool stream_drops = false;

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
                          p ? std::as_bytes(std::span(p->data(), p->size())) : std::span<const std::byte>{},
                          d.stream() ? d.stream()->string_view() : std::string_view{}, d.seq(), d.epoch()};
    for (const auto& h : handlers) {
      if (h->id != id) continue;
      if (h->durable && !m.stream.empty() && !h->durable->tracker->live(m.stream, m.seq, m.epoch)) continue;
      h->handler(m);
    }
  }

  // ------------------------------------------------------ durable streams

  std::atomic<std::uint64_t> recovered{0};  // records delivered from the log

  // Loop thread: the recovery read of a durable subscription or inbox; the
  // answer goes back to its tracker unless it was removed meanwhile.
  void durable_read(const std::weak_ptr<durable_state>& weak, const std::string& stream, std::uint64_t from,
                    std::size_t batch) {
    const auto count = static_cast<std::uint32_t>(std::min<std::size_t>(batch, UINT32_MAX));
    call_async<stream_read>(
        [&](std::uint64_t r) { return local_builder().read(r, stream, from, count, 0); }, detail::parse_records,
        [weak, stream](std::expected<stream_read, std::error_code> r) {
          const auto d = weak.lock();
          if (!d || !d->active) return;
          if (r) d->tracker->read_done(stream, *r, d->deliver);
          else d->tracker->read_failed(stream, r.error());
        });
  }

  // A durable_state whose reads go through this connection. Errors:
  // invalid_position (o.resume_from has a sequence without its epoch).
  std::expected<std::shared_ptr<durable_state>, std::error_code> make_durable(durable_options& o) {
    if (auto ec = detail::stream_tracker::check(o.resume_from)) return std::unexpected(ec);
    if (!stream_drops)
      log(log_level::info, "switchyard: connection {}: the broker does not report dropped first messages "
          "(no \"stream-drops\"): a stream whose first messages are dropped starts at the first that arrives",
          session_id);
    auto d = std::make_shared<durable_state>();
    d->read_batch = o.read_batch;
    std::weak_ptr<durable_state> weak_d = d;
    std::weak_ptr<impl> weak_self = weak_from_this();
    d->tracker.emplace(
        [weak_d, weak_self](const std::string& stream, std::uint64_t from) {
          const auto self = weak_self.lock();
          const auto dd = weak_d.lock();
          if (self && dd) self->durable_read(weak_d, stream, from, dd->read_batch);
        },
        std::move(o.on_unrecoverable));
    d->tracker->resume_from(o.resume_from);
    return d;
  }

  // Under mu: removes subscription `id` (a durable one stops tracking) and
  // drops a reference to its pattern. Returns the pattern ("" for an
  // unknown id) and whether that was the pattern's last subscription.
  std::pair<std::string, bool> remove_sub_locked(subscription_id id) {
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

  // Under mu: removes the inboxes `drop(entry)` selects (durable ones stop
  // tracking); `add`, if given, joins the list.
  template <class Drop>
  void replace_inboxes_locked(Drop drop, std::shared_ptr<const inbox_entry> add = nullptr) {
    auto next = std::make_shared<inbox_list>();
    for (const auto& e : *inboxes) {
      if (!drop(*e)) next->push_back(e);
      else if (e->durable) e->durable->active = false;
    }
    if (add) next->push_back(std::move(add));
    inboxes = std::move(next);
  }

  // A durable subscription's or inbox's positions (empty for null), read on
  // the loop thread, which owns the tracker.
  stream_positions positions_of(const std::shared_ptr<durable_state>& d) {
    if (!d) return {};
    return on_loop([d] { return d->tracker->positions(); });
  }

  // Runs fn on the loop thread and returns its result (directly when
  // called there).
  template <class F>
  auto on_loop(F fn) -> decltype(fn()) {
    if (loop.on_loop_thread()) return fn();
    std::packaged_task<decltype(fn())()> task(std::move(fn));
    auto result = task.get_future();
    asio::post(io, [&task] { task(); });
    return result.get();
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
      // Nothing queued ahead of us: write directly from this thread (mu
      // held, no loop write in flight, fail() waits for mu to close).
      const std::size_t n = stream.try_write(frame);
      if (n == frame.size()) return {};
      // A partial write, nothing written or an error: the loop writer sends
      // the rest (and reports the error through the normal read/write path).
      frame = frame.subspan(n);
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
    stream.async_write(asio::buffer(writing),
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

  // request() with a deadline: `done` gets errc::timeout when the broker
  // has not answered within opts.request_timeout (a late answer is then
  // ignored). Any thread; `done` runs on the loop thread, or here at once
  // on a send error. A timer per call: for occasional requests (the
  // gateway helper's), not for the hot path.
  template <class Encode>
  void timed_request(Encode encode, completion done) {
    auto timer = std::make_shared<asio::steady_timer>(io, opts.request_timeout);
    auto id = std::make_shared<std::atomic<std::uint64_t>>(0);
    // Armed before the request goes out: from then on only the completion
    // below touches the timer.
    timer->async_wait([weak = weak_from_this(), id](asio_error_code ec) {
      if (ec) return;
      if (auto self = weak.lock()) self->complete(id->load(), errc::timeout);
    });
    request(
        [&](std::uint64_t r) {
          id->store(r);
          return encode(r);
        },
        [timer, done = std::move(done)](std::error_code ec, const wire::Frame* answer) {
          timer->cancel();
          if (done) done(ec, answer);
        });
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
    request(encode, parsed<T>(std::move(parse), std::move(done)));
  }
  // The same with request_timeout (timed_request).
  template <class T, class Encode, class Parse>
  void call_timed(Encode encode, Parse parse, std::function<void(std::expected<T, std::error_code>)> done) {
    timed_request(encode, parsed<T>(std::move(parse), std::move(done)));
  }
  // A completion that hands `done` the answer turned into T by `parse`.
  template <class T, class Parse>
  static completion parsed(Parse parse, std::function<void(std::expected<T, std::error_code>)> done) {
    return [parse = std::move(parse), done = std::move(done)](std::error_code ec, const wire::Frame* answer) {
      if (!done) return;
      if (ec) done(std::unexpected(ec));
      else if (!answer) done(std::unexpected(make_error_code(errc::protocol_violation)));
      else done(parse(*answer));
    };
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
    stream.close();
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

  protocol::read_buffer rbuf;  // loop thread

  // Reads until at least one complete frame is buffered; returns it, or an
  // error (socket or protocol).
  asio::awaitable<std::expected<protocol::frame_view, std::error_code>> read_frame() {
    for (;;) {
      auto r = parser.next(rbuf.unread());
      if (!r) co_return std::unexpected(r.error());
      if (*r) co_return **r;
      rbuf.make_room(parser.needed());
      asio_error_code ec;
      const std::size_t n = co_await stream.async_read_some(asio::buffer(rbuf.tail(), rbuf.space()),
                                                            redirect_error(use_awaitable, ec));
      if (ec) co_return std::unexpected(std::error_code(ec));
      last_rx = clock::now();
      rbuf.end += n;
    }
  }

  // Handles one frame after the welcome. Returns false to stop reading.
  bool dispatch(const wire::Frame& f, const sub_list& subscriptions, const inbox_list& inboxes) {
    switch (f.message_type()) {
      case wire::Message::Deliver: {
        const auto& d = *f.message_as_Deliver();
        const std::string_view channel = d.channel()->string_view();
        const auto* p = d.payload();
        const message m{channel, p ? std::as_bytes(std::span(p->data(), p->size())) : std::span<const std::byte>{},
                        d.stream() ? d.stream()->string_view() : std::string_view{}, d.seq(), d.epoch()};
        for (const auto& s : subscriptions) {
          if (!protocol::pattern_matches(s->pattern, channel)) continue;
          if (s->durable && !m.stream.empty() && !s->durable->tracker->live(m.stream, m.seq, m.epoch)) continue;
          s->handler(m);
        }
        return true;
      }
      case wire::Message::Ok:
      case wire::Message::Pong:
      case wire::Message::LeaseInfo:
      case wire::Message::LeaseListResult:
      case wire::Message::RegistryEntry:
      case wire::Message::RegistryListResult:
      case wire::Message::SendResult:
      case wire::Message::Appended:
      case wire::Message::Records:
      case wire::Message::StreamInfoResult: case wire::Message::StreamListResult:  // client_admin.cpp
        if (f.request_id() != 0) complete(f.request_id(), {}, &f);
        return true;
      case wire::Message::InboxDelivery:
        dispatch_inbox(*f.message_as_InboxDelivery(), inboxes);
        return true;
      case wire::Message::Ping:
        enqueue(local_builder().pong(f.request_id()));
        return true;
      case wire::Message::StreamDropped: {
        // In the dropped delivery's place: the streams it names learn of
        // the loss before any later delivery of theirs.
        const auto& d = *f.message_as_StreamDropped();
        if (!d.stream()) return true;
        const std::string_view stream = d.stream()->string_view();
        if (d.channel()) {
          const std::string_view channel = d.channel()->string_view();
          for (const auto& s : subscriptions)
            if (s->durable && protocol::pattern_matches(s->pattern, channel))
              s->durable->tracker->dropped(stream, d.seq(), d.epoch());
        } else if (d.inbox_id()) {
          const std::string_view id = d.inbox_id()->string_view();
          for (const auto& h : inboxes)
            if (h->durable && h->id == id) h->durable->tracker->dropped(stream, d.seq(), d.epoch());
        }
        return true;
      }
      case wire::Message::Dropped: {
        const std::uint64_t n = f.message_as_Dropped()->count();
        dropped += n;
        log(log_level::warn, "switchyard: connection {} was a slow consumer: {} messages dropped", session_id, n);
        if (opts.on_dropped) opts.on_dropped(n);
        // Which streams lost what is unknown, and the lost messages may be
        // the last of their streams: every durable stream checks its tail.
        for (const auto& s : subscriptions)
          if (s->durable) s->durable->tracker->check_all();
        for (const auto& h : inboxes)
          if (h->durable) h->durable->tracker->check_all();
        return true;
      }
      case wire::Message::Error: {
        const auto& e = *f.message_as_Error();
        const auto ec = detail::server_error(e);
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
      auto r = parser.next(rbuf.unread());
      if (!r) {
        fail(r.error(), "protocol");
        co_return;
      }
      if (!*r) {
        rbuf.make_room(parser.needed());
        asio_error_code ec;
        const std::size_t n = co_await stream.async_read_some(
            asio::buffer(rbuf.tail(), rbuf.space()), redirect_error(use_awaitable, ec));
        if (ec) {
          fail(ec, "read");
          co_return;
        }
        last_rx = clock::now();
        rbuf.end += n;
        continue;
      }
      // Dispatch every complete frame already buffered.
      do {
        const std::size_t size = (*r)->size;
        if (!dispatch(*(*r)->frame, *subscriptions, *inbox_handlers) || !open) co_return;
        rbuf.begin += size;
        r = parser.next(rbuf.unread());
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
      // Closing the stream makes the pending connect/read fail at once.
      self->connect_timed_out = true;
      self->stream.close();
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
    ec = co_await stream.connect(endpoints);
    if (ec) co_return finish(ec);
    rbuf.reserve(64 * 1024);

    // "admin" last: asked only with client_options::admin.
    static constexpr std::array<std::string_view, 6> wanted{
        protocol::capability::dropped_notice, protocol::capability::publish_ack, protocol::capability::routing,
        protocol::capability::log, protocol::capability::stream_drops, protocol::capability::admin};
    protocol::hello_fields h;
    h.protocol_major = protocol::protocol_major;
    h.protocol_minor = protocol::protocol_minor;
    h.client_name = opts.client_name;
    h.client_version = SWITCHYARD_VERSION;
    h.client_id = opts.client_id;
    h.credentials = opts.credentials;
    h.capabilities = std::span(wanted).first(opts.admin ? wanted.size() : wanted.size() - 1);
    const auto hello = local_builder().hello(0, h);
    co_await stream.async_write(asio::buffer(hello.data(), hello.size()), redirect_error(use_awaitable, ec));
    if (ec) co_return finish(ec);

    auto r = co_await read_frame();
    if (!r) co_return finish(r.error());
    const wire::Frame& f = *r->frame;
    if (f.message_type() == wire::Message::Error) co_return finish(detail::server_error(*f.message_as_Error()));
    if (f.message_type() != wire::Message::Welcome) co_return finish(errc::protocol_violation);
    const auto& w = *f.message_as_Welcome();
    session_id = w.session_id();
    server_instance = w.server_instance();
    if (w.server_version()) server_version = w.server_version()->str();
    if (w.max_frame() >= protocol::min_max_frame) max_frame = w.max_frame();
    if (w.heartbeat_ms() > 0) heartbeat = std::chrono::milliseconds(w.heartbeat_ms());
    if (w.capabilities())
      for (const auto* c : *w.capabilities()) caps.push_back(c->str());
    publish_ack = std::find(caps.begin(), caps.end(), protocol::capability::publish_ack) != caps.end();
    routing = std::find(caps.begin(), caps.end(), protocol::capability::routing) != caps.end();
    log_cap = std::find(caps.begin(), caps.end(), protocol::capability::log) != caps.end();
    stream_drops = std::find(caps.begin(), caps.end(), protocol::capability::stream_drops) != caps.end();
    rbuf.begin += r->size;
    // Frames from the server may be as large as our own limit allows.
    parser.set_max_frame(std::max<std::uint32_t>(max_frame, protocol::default_max_frame));
    open = true;
    log(log_level::info, "switchyard: connected to {}:{} session {} server instance {:016x}", opts.host, opts.port,
        session_id, server_instance);
    finish({});
    co_await read_loop(self);
  }
};

namespace detail {

// Adds a subscription (plain, or durable with `durable` set) and asks the
// broker for it unless the pattern is already subscribed and the
// subscription is plain (a durable one always asks: its Subscribe is where
// it starts). `done` runs on the loop thread, or at once on a local error
// or a known pattern.
void add_subscription(const std::shared_ptr<client_state>& self, std::string_view pattern, message_handler handler,
                      std::shared_ptr<durable_state> durable,
                      std::function<void(std::expected<subscription_id, std::error_code>)> done);

// open_inbox / open_inbox_durable (with `durable` set) without blocking,
// for the gateway helper: the handler is installed at once (a delivery may
// follow the Ok immediately) and removed again if the broker refuses.
// `owner` tags the entry (see remove_inboxes_of). `done` runs on the loop
// thread, or at once on a local error (not_supported, invalid_position,
// not_connected); errc::timeout after request_timeout. Any thread.
void open_inbox_async(const std::shared_ptr<client_state>& self, std::string_view id, lease_id lease,
                      inbox_handler handler, std::optional<durable_options> durable, const void* owner,
                      std::function<void(std::error_code)> done);

// Removes, on this side only, the inboxes `owner` opened (the broker is not
// told). Called on the loop thread, their handlers are not called again;
// from another thread, a delivery being dispatched may still reach one.
void remove_inboxes_of(client_state& p, const void* owner);

}  // namespace detail

}  // namespace switchyard
