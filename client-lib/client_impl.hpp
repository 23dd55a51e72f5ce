#pragma once
// Internal: the client's connection state (client::impl) and the event
// loop's thread, shared by client.cpp (connection, pub/sub) and
// client_routing.cpp (leases, registry, inboxes, send). Not installed.

#include "switchyard/client.hpp"

#include "access.hpp"
#include "byte_stream.hpp"
#include "client_log.hpp"
#include "offer_frames.hpp"
#include "reconnect_backoff.hpp"
#include "signing_key.hpp"
#include "stream_tracker.hpp"
#include "common/asio.hpp"
#include "protocol/channel_name.hpp"
#include "protocol/frame_builder.hpp"
#include "protocol/frame_parser.hpp"
#include "protocol/limits.hpp"
#include "protocol/read_buffer.hpp"

#include <openssl/crypto.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>

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

  // OpenSSL keeps per-thread state (its random generator) for a thread
  // that made a TLS context or session; OPENSSL_thread_stop frees it when
  // the loop's thread ends, else every event_loop that ever did TLS
  // leaves it behind.
  impl()
      : thread([this] {
          io.run();
          OPENSSL_thread_stop();
        }) {}
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
  lease_id lease = 0;                      // opened under it (reopened under it, or its replacement, after a reconnect)
};
using inbox_list = std::vector<std::shared_ptr<const inbox_entry>>;

// One broker address of client_options::addresses (or host/port).
struct broker_address {
  std::string host;
  std::uint16_t port = 0;
};
// "host:port" or "[v6]:port"; nullopt when it is neither.
std::optional<broker_address> parse_address(std::string_view text);

// What the client registered on the broker and restores after a reconnect
// (client_reconnect.cpp). Guarded by client::impl::mu.
struct owned_put {
  std::string value;
  lease_id lease = 0;
};

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
        parser(protocol::default_max_frame), retry_timer(io), backoff(opts.reconnect) {
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
  bool tls_configured = false;  // loop thread: stream.configure_tls() done
  // client_options::key / key_file, loaded at the first handshake (loop thread).
  std::optional<client_lib::signing_key> key;
  asio::steady_timer heartbeat_timer;
  protocol::frame_parser parser;

  // Welcome data: written on the loop thread before connect() returns, and
  // again at each reconnect (atomics: read by any thread).
  std::atomic<std::uint64_t> session_id{0};
  std::atomic<std::uint64_t> server_instance{0};  // 0: a server older than the field
  std::string server_version;  // written only when it changes (a broker upgrade)
  std::atomic<std::uint32_t> max_frame{protocol::default_max_frame};
  std::chrono::milliseconds heartbeat{protocol::default_heartbeat_interval};
  std::vector<std::string> caps;  // guarded by mu
  std::atomic<bool> publish_ack{false};
  std::atomic<bool> routing{false};  // "routing" capability granted
  std::atomic<bool> log_cap{false};  // "log" capability granted
  std::atomic<bool> offers{false};   // "offers" capability granted (client_offers.cpp)
  // "stream-drops" granted: the broker reports the first dropped delivery of
  // each stream (StreamDropped), so a durable subscription's first sight of
  // a stream is its first message since the subscribe. Without it (an older
  // broker) a stream whose first messages were dropped starts at the first
  // that arrives.
  std::atomic<bool> stream_drops{false};

  // The socket's session is up (the read loop runs); a restored session is
  // only `ready` once restore() finished.
  std::atomic<bool> open{false};
  std::atomic<bool> ready{false};  // connected(): a session is up and restored
  std::atomic<std::uint64_t> dropped{0};
  std::atomic<std::uint64_t> next_request{1};
  clock::time_point last_rx = clock::now();
  std::error_code server_goodbye;  // last fatal Error from the server (loop thread)
  std::chrono::milliseconds goodbye_retry_after{0};  // its retry_after_ms (loop thread)
  bool closed_by_user = false;     // loop thread

  // ---- reconnect (loop thread unless said otherwise) ----
  std::vector<detail::broker_address> addresses;  // shuffled; set by run()
  std::size_t address_index = 0;                  // the one in use or tried last
  std::uint64_t generation = 0;  // +1 per connection: callbacks of an earlier one are ignored
  asio::steady_timer retry_timer;
  detail::reconnect_backoff backoff;
  std::atomic<std::uint64_t> attempts_total{0};
  bool established = false;  // a session was up once: losses are reconnected from then on

  // Guarded by mu: the outbound buffer, the requests in flight and the
  // subscriptions.
  std::mutex mu;
  std::condition_variable space_cv;
  std::vector<std::uint8_t> out;      // frames waiting for the writer
  std::vector<std::uint8_t> writing;  // frames being written (loop thread)
  bool write_active = false;          // writer scheduled or running
  // The connection's state for writers:
  //  up         frames go to `out`;
  //  restoring  restore()'s own frames (internal) go to `out`, others are held;
  //  down       reconnecting: user frames are held, internal ones refused;
  //  closed     for good: everything is refused (not_connected).
  enum class link { up, restoring, down, closed };
  link state = link::up;
  // Frames held while not up, written in order once restored: publishes
  // (counted against reconnect.buffer_bytes) and requests made meanwhile
  // (their id: skipped if the request timed out).
  struct held_frame {
    std::size_t size;
    std::uint64_t request_id;  // 0: a publish or send_nowait
  };
  std::vector<std::uint8_t> held;
  std::vector<held_frame> held_frames;
  std::size_t held_publish_bytes = 0;
  // What restore() brings back (besides subs and inboxes).
  std::map<lease_id, std::chrono::milliseconds> owned_leases;  // id -> TTL as granted
  std::unordered_map<lease_id, lease_id> lease_moves;          // an old id -> the grant that replaced it
  std::map<std::string, detail::owned_put, std::less<>> owned_puts;
  // Told (on the loop thread, during restore) of every lease replaced:
  // the gateway helper, keyed by its address.
  std::map<const void*, std::function<void(lease_id old_lease, lease_id new_lease)>> lease_listeners;
  std::unordered_map<std::uint64_t, completion> requests;
  std::shared_ptr<const sub_list> subs = std::make_shared<const sub_list>();
  std::map<std::string, int, std::less<>> pattern_refs;
  std::shared_ptr<const inbox_list> inboxes = std::make_shared<const inbox_list>();
  std::vector<std::string_view> key_scratch;  // loop thread: route keys of one delivery

  void dispatch_inbox(const wire::InboxDelivery& d, const inbox_list& handlers) {
    const inbox_message m = detail::to_inbox_message(d, key_scratch);
    for (const auto& h : handlers) {
      if (h->id != m.inbox) continue;
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
          session_id.load());
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
  // loop thread. `internal`: restore()'s and the heartbeat's own frames,
  // which go out while the session is being restored and are refused
  // while it is down; the others are held (hold_locked) until it is
  // restored. `request_id`: the request the frame carries (0: none).
  std::error_code enqueue(protocol::bytes_view frame, bool internal = false, std::uint64_t request_id = 0) {
    if (frame.size() > max_frame + protocol::frame_header_size) return errc::payload_too_large;
    std::unique_lock lock(mu);
    for (;;) {
      if (state == link::closed || (state == link::down && internal)) return errc::not_connected;
      if (state == link::down || (state == link::restoring && !internal)) return hold_locked(frame, request_id);
      if (out.size() + frame.size() <= opts.max_pending_bytes || out.empty() || loop.on_loop_thread()) break;
      const bool ok = space_cv.wait_for(lock, opts.request_timeout, [&] {
        return state != link::up || out.size() + frame.size() <= opts.max_pending_bytes || out.empty();
      });
      if (!ok) return errc::timeout;
      if (state == link::up) break;
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

  // Under mu, while not up: keeps `frame` for the restored session.
  // Publishes count against reconnect.buffer_bytes (errc::buffer_full past
  // it); a request's frame is bounded by its own timeout.
  std::error_code hold_locked(protocol::bytes_view frame, std::uint64_t request_id) {
    if (request_id == 0) {
      if (held_publish_bytes + frame.size() > opts.reconnect.buffer_bytes) return errc::buffer_full;
      held_publish_bytes += frame.size();
    }
    held.insert(held.end(), frame.begin(), frame.end());
    held_frames.push_back({frame.size(), request_id});
    return {};
  }

  // Loop thread: writes whatever is queued, then again until empty. A
  // write of an earlier connection that completes late only restarts the
  // writer (its buffer is not shared with the next connection's: the
  // writer stays active until that completion).
  void start_write() {
    {
      std::lock_guard lock(mu);
      if (out.empty() || (state != link::up && state != link::restoring)) {
        write_active = false;
        return;
      }
      writing.swap(out);
    }
    space_cv.notify_all();
    stream.async_write(asio::buffer(writing),
                       [self = shared_from_this(), gen = generation](asio_error_code ec, std::size_t) {
                         self->writing.clear();
                         if (ec && gen == self->generation) self->fail(ec, "write");
                         self->start_write();
                       });
  }

  // ------------------------------------------------------------- requests

  // Registers `done` under a fresh request id, encodes with `encode(id)` and
  // sends. `done` runs on the loop thread (or here, at once, on a send error).
  // While the session is down or being restored, the request is held and
  // sent once it is restored (`internal`: restore()'s own, sent while
  // restoring, refused with not_connected while down).
  template <class Encode>
  void request(Encode encode, completion done, bool internal = false) {
    const std::uint64_t id = next_request.fetch_add(1, std::memory_order_relaxed);
    {
      std::unique_lock lock(mu);
      if (state == link::closed || (internal && state == link::down)) {
        lock.unlock();
        if (done) done(errc::not_connected, nullptr);
        return;
      }
      requests.emplace(id, std::move(done));
    }
    if (auto ec = enqueue(encode(id), internal, id)) complete(id, ec);
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

  // Loop thread. Ends the connection once. Requests in flight fail with
  // errc::connection_lost (not_connected after close()). With reconnect on
  // and a session established before (not close()), the client goes
  // `down`, calls on_disconnect and starts reconnecting; requests and
  // publishes held for the restored session stay. Otherwise it is closed
  // for good (on_disconnect, then on_closed).
  void fail(std::error_code ec, std::string_view what) {
    const bool was_open = open.exchange(false);
    ready = false;
    stream.close();
    heartbeat_timer.cancel();
    const bool reconnect = was_open && established && opts.reconnect.enabled && !closed_by_user;
    std::unordered_map<std::uint64_t, completion> pending;
    {
      std::lock_guard lock(mu);
      if (state == link::closed) return;
      if (!was_open && state == link::down) return;  // a late error of a connection already handled
      state = reconnect ? link::down : link::closed;
      out.clear();
      std::unordered_set<std::uint64_t> waiting;  // held requests, not sent yet
      if (reconnect)
        for (const auto& h : held_frames)
          if (h.request_id != 0) waiting.insert(h.request_id);
      for (auto it = requests.begin(); it != requests.end();) {
        if (waiting.contains(it->first)) {
          ++it;
          continue;
        }
        pending.emplace(it->first, std::move(it->second));
        it = requests.erase(it);
      }
      if (!reconnect) drop_held_locked();
    }
    space_cv.notify_all();
    const std::error_code reason = server_goodbye ? server_goodbye : ec;
    const auto lost = make_error_code(closed_by_user || !was_open ? errc::not_connected : errc::connection_lost);
    for (auto& [id, done] : pending)
      if (done) done(lost, nullptr);
    if (!was_open || closed_by_user) return;
    log(log_level::info, "switchyard: connection {} closed on {}: {}", session_id.load(), what, reason.message());
    if (opts.on_disconnect) opts.on_disconnect(reason);
    if (reconnect) {
      start_reconnect();
    } else if (opts.on_closed) {
      opts.on_closed(reason);
    }
  }

  // Under mu: forgets everything held for a restored session.
  void drop_held_locked() {
    held.clear();
    held_frames.clear();
    held_publish_bytes = 0;
  }

  // Loop thread: the client is done for good while down (close() or giving
  // up). Every request fails with `request_error`, held frames are
  // dropped; on_closed(reason) when `reason` is set.
  void close_down(std::error_code request_error, std::error_code reason) {
    std::unordered_map<std::uint64_t, completion> pending;
    {
      std::lock_guard lock(mu);
      if (state == link::closed) return;
      state = link::closed;
      out.clear();
      pending.swap(requests);
      drop_held_locked();
    }
    space_cv.notify_all();
    ready = false;
    for (auto& [id, done] : pending)
      if (done) done(request_error, nullptr);
    if (reason) {
      log(log_level::warn, "switchyard: giving up on the broker connection: {}", reason.message());
      if (opts.on_closed) opts.on_closed(reason);
    }
  }

  // Loop thread: close(). Stops reconnecting too.
  void close_now() {
    closed_by_user = true;
    retry_timer.cancel();
    fail(errc::not_connected, "close");
    close_down(make_error_code(errc::not_connected), {});
  }

  asio::awaitable<void> heartbeat_loop(std::shared_ptr<impl> /*keep_alive*/) {
    const auto interval = opts.heartbeat_interval.count() > 0 ? opts.heartbeat_interval : heartbeat;
    const auto deadline = interval * 2 + interval / 2;
    const std::uint64_t gen = generation;
    while (open) {
      heartbeat_timer.expires_after(interval);
      asio_error_code ec;
      co_await heartbeat_timer.async_wait(redirect_error(use_awaitable, ec));
      if (ec || !open || gen != generation) co_return;
      if (clock::now() - last_rx > deadline) {
        fail(errc::heartbeat_timeout, "heartbeat");
        co_return;
      }
      enqueue(local_builder().ping(), true);
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
        const message m = detail::to_message(*f.message_as_Deliver());
        for (const auto& s : subscriptions) {
          if (!protocol::pattern_matches(s->pattern, m.channel)) continue;
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
      case wire::Message::StatsResult: case wire::Message::ConnListResult:         // client_admin.cpp
      case wire::Message::WithdrawResult: case wire::Message::PendingOffersResult:  // client_offers.cpp
      case wire::Message::ExposureResult:
      case wire::Message::FlagInfo: case wire::Message::FlagListResult:
        if (f.request_id() != 0) complete(f.request_id(), {}, &f);
        return true;
      case wire::Message::Receipt: {
        const auto& r = *f.message_as_Receipt();
        if (!opts.on_receipt) {
          log(log_level::debug, "switchyard: connection {}: receipt for offer {} dropped (no on_receipt)",
              session_id.load(), r.offer_id());
          return true;
        }
        opts.on_receipt(detail::to_receipt(r));
        return true;
      }
      case wire::Message::Withdrawn: {
        const auto& w = *f.message_as_Withdrawn();
        if (!opts.on_withdrawn) {
          log(log_level::debug, "switchyard: connection {}: offer {} withdrawn (no on_withdrawn)", session_id.load(),
              w.offer_id());
          return true;
        }
        opts.on_withdrawn(detail::to_withdrawn(w));
        return true;
      }
      case wire::Message::InboxDelivery:
        dispatch_inbox(*f.message_as_InboxDelivery(), inboxes);
        return true;
      case wire::Message::Ping:
        enqueue(local_builder().pong(f.request_id()), true);
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
        log(log_level::warn, "switchyard: connection {} was a slow consumer: {} messages dropped", session_id.load(), n);
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
        log(log_level::warn, "switchyard: server error on connection {}: {} ({})", session_id.load(), ec.message(),
            e.message() ? e.message()->string_view() : "");
        if (e.fatal()) {
          server_goodbye = ec;
          goodbye_retry_after = std::chrono::milliseconds(e.retry_after_ms());
        }
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
    const std::uint64_t gen = generation;  // a later connection's buffer is not this loop's
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
        if (gen != generation) co_return;
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

  // Connect + hello + welcome to `to` within opts.connect_timeout, on the
  // loop thread. On success the new session's welcome data is in place,
  // `generation` moved on and `open` is set (the caller starts the read
  // loop). A refused hello returns the server's code, and its
  // retry_after_ms in `retry_after`.
  asio::awaitable<std::error_code> handshake(std::shared_ptr<impl> self, const detail::broker_address& to,
                                             std::chrono::milliseconds& retry_after) {
    auto timed_out = std::make_shared<bool>(false);
    auto finished = std::make_shared<bool>(false);
    asio::steady_timer guard(io, opts.connect_timeout);
    guard.async_wait([self, timed_out, finished](asio_error_code ec) {
      if (ec || *finished) return;
      // Closing the stream makes the pending connect/read fail at once.
      *timed_out = true;
      self->stream.close();
    });
    auto outcome = [&](std::error_code ec) -> std::error_code {
      *finished = true;
      guard.cancel();
      if (*timed_out) return errc::timeout;
      if (ec) stream.close();
      return ec;
    };
    stream.close();  // a fresh socket for every attempt
    rbuf.begin = rbuf.end = 0;
    asio::ip::tcp::resolver resolver(io);
    asio_error_code ec;
    const auto endpoints = co_await resolver.async_resolve(to.host, std::to_string(to.port),
                                                           redirect_error(use_awaitable, ec));
    if (ec) co_return outcome(ec);
    if (opts.tls.enabled && !tls_configured) {
      if (const auto bad = stream.configure_tls(opts.tls)) {
        log(log_level::error, "switchyard: TLS set-up failed: {}", stream.tls_error());
        co_return outcome(bad);
      }
      tls_configured = true;
    }
    if (const auto connect_ec = co_await stream.connect(endpoints, to.host)) {
      if (connect_ec == errc::tls_failed && !*timed_out)
        log(log_level::warn, "switchyard: TLS handshake with {}:{} failed: {}", to.host, to.port, stream.tls_error());
      co_return outcome(connect_ec);
    }
    if (!rbuf.words) rbuf.reserve(64 * 1024);

    // "admin" last: asked only with client_options::admin.
    static constexpr std::array<std::string_view, 7> wanted{
        protocol::capability::dropped_notice, protocol::capability::publish_ack, protocol::capability::routing,
        protocol::capability::log,            protocol::capability::stream_drops, protocol::capability::offers,
        protocol::capability::admin};
    if (!key && (!opts.key.empty() || !opts.key_file.empty())) {
      auto loaded = client_lib::signing_key::load(opts.key, opts.key_file);
      if (!loaded) {
        log(log_level::error, "switchyard: {}", loaded.error());
        co_return outcome(std::make_error_code(std::errc::invalid_argument));
      }
      key.emplace(std::move(*loaded));
    }
    protocol::hello_fields h;
    if (key) h.public_key = key->public_key();
    h.protocol_major = protocol::protocol_major;
    h.protocol_minor = protocol::protocol_minor;
    h.client_name = opts.client_name;
    h.client_version = SWITCHYARD_VERSION;
    h.client_id = opts.client_id;
    h.credentials = opts.token;
    h.capabilities = std::span(wanted).first(opts.admin ? wanted.size() : wanted.size() - 1);
    const auto hello = local_builder().hello(0, h);
    co_await stream.async_write(asio::buffer(hello.data(), hello.size()), redirect_error(use_awaitable, ec));
    if (ec) co_return outcome(ec);

    auto r = co_await read_frame();
    if (!r && opts.tls.enabled && r.error().category() == asio::error::get_ssl_category() && !*timed_out) {
      // TLS 1.3: the broker checks the client's certificate after the
      // client's side of the handshake is done; its refusal arrives here.
      log(log_level::warn, "switchyard: TLS with {}:{} failed after the handshake: {}", to.host, to.port,
          r.error().message());
      co_return outcome(errc::tls_failed);
    }
    // The first bytes back are not a Switchyard frame (no "SWY1" frame, or
    // a length no broker sends): another service listens there.
    if (!r && r.error().category() == protocol::protocol_category()) co_return outcome(errc::not_a_broker);
    if (!r) co_return outcome(r.error());
    if (r->frame->message_type() == wire::Message::AuthChallenge && key) {
      // Sign the nonce (docs/security.md, "Credentials"), then the Welcome.
      const auto* nonce = r->frame->message_as_AuthChallenge()->nonce();
      if (!nonce || nonce->size() != protocol::auth_nonce_size) co_return outcome(errc::protocol_violation);
      const auto signature = key->sign(protocol::auth_challenge_message({nonce->data(), nonce->size()}));
      rbuf.begin += r->size;
      const auto proof = local_builder().auth_proof(signature);
      co_await stream.async_write(asio::buffer(proof.data(), proof.size()), redirect_error(use_awaitable, ec));
      if (ec) co_return outcome(ec);
      r = co_await read_frame();
      if (!r) co_return outcome(r.error());
    }
    const wire::Frame& f = *r->frame;
    if (f.message_type() == wire::Message::Error) {
      retry_after = std::chrono::milliseconds(f.message_as_Error()->retry_after_ms());
      co_return outcome(detail::server_error(*f.message_as_Error()));
    }
    if (f.message_type() != wire::Message::Welcome) co_return outcome(errc::protocol_violation);
    if (closed_by_user) co_return outcome(errc::not_connected);
    const auto& w = *f.message_as_Welcome();
    session_id = w.session_id();
    server_instance = w.server_instance();
    if (w.server_version() && w.server_version()->string_view() != server_version)
      server_version = w.server_version()->str();
    if (w.max_frame() >= protocol::min_max_frame) max_frame = w.max_frame();
    if (w.heartbeat_ms() > 0) heartbeat = std::chrono::milliseconds(w.heartbeat_ms());
    std::vector<std::string> granted;
    if (w.capabilities())
      for (const auto* c : *w.capabilities()) granted.push_back(c->str());
    auto has = [&](std::string_view cap) { return std::find(granted.begin(), granted.end(), cap) != granted.end(); };
    publish_ack = has(protocol::capability::publish_ack);
    routing = has(protocol::capability::routing);
    log_cap = has(protocol::capability::log);
    stream_drops = has(protocol::capability::stream_drops);
    offers = has(protocol::capability::offers);
    {
      std::lock_guard lock(mu);
      caps = std::move(granted);
    }
    rbuf.begin += r->size;
    // Frames from the server may be as large as our own limit allows.
    parser.set_max_frame(std::max<std::uint32_t>(max_frame, protocol::default_max_frame));
    ++generation;
    server_goodbye = {};
    goodbye_retry_after = std::chrono::milliseconds(0);
    last_rx = clock::now();
    open = true;
    log(log_level::info, "switchyard: connected to {}:{} session {} server instance {:016x}", to.host, to.port,
        session_id.load(), server_instance.load());
    co_return outcome({});
  }

  // The first connect: each address once, in the shuffled order, until one
  // answers. Calls `ready_fn` once with the outcome (on the loop thread) and
  // destroys it right after (what it holds, such as the event_loop, is not
  // kept for the session's life), then keeps reading. Not retried:
  // connect() fails fast when no broker answers.
  asio::awaitable<void> run(std::shared_ptr<impl> self, std::function<void(std::error_code)> ready_fn) {
    const auto answer = [&ready_fn](std::error_code outcome) {
      const auto fn = std::move(ready_fn);
      ready_fn = nullptr;
      fn(outcome);
    };
    std::error_code ec = make_error_code(std::errc::invalid_argument);
    for (std::size_t i = 0; i < addresses.size() && !closed_by_user; ++i) {
      address_index = i;
      std::chrono::milliseconds ignored{0};
      ec = co_await handshake(self, addresses[i], ignored);
      if (!ec) break;
    }
    if (ec) {
      answer(ec);
      co_return;
    }
    established = true;
    backoff.connected();
    {
      std::lock_guard lock(mu);
      state = link::up;
    }
    ready = true;
    answer({});
    co_await read_loop(self);
  }

  // ------------------------------------------------------------ reconnect
  // (client_reconnect.cpp; all on the loop thread)

  // After a loss: schedules the attempts (reconnect_loop).
  void start_reconnect();
  asio::awaitable<void> reconnect_loop(std::shared_ptr<impl> self, std::uint64_t instance_before);
  // A new session is up: subscriptions, leases, inboxes and registry
  // entries go back, then held frames, then on_reconnect.
  void restore(std::uint64_t gen, reconnect_info info);
  // Reopens `box` under its lease (or the lease's replacement) and calls
  // `answered` (if set) with the first answer; inbox_taken is retried in
  // the background (max_inbox_retries, inbox_retry_delay apart) while this
  // session lasts. `tries` 0: part of restore() (sent while restoring).
  void reopen_inbox(std::uint64_t gen, std::shared_ptr<const inbox_entry> box, int tries,
                    std::function<void()> answered);
  static constexpr int max_inbox_retries = 30;
  static constexpr std::chrono::milliseconds inbox_retry_delay{500};
  bool inbox_installed(const inbox_entry* box) {
    std::lock_guard lock(mu);
    return std::any_of(inboxes->begin(), inboxes->end(), [box](const auto& e) { return e.get() == box; });
  }
  // The last phase of restore(): the session is up for everyone.
  void restored(std::uint64_t gen, reconnect_info info);

  // Any thread: a lost session is being re-established (neither up nor
  // closed for good).
  bool reconnecting() {
    std::lock_guard lock(mu);
    return state == link::down || state == link::restoring;
  }

  // ------------------------------------------------------ session records
  // (any thread; they lock mu)

  // The id that replaced `id` after a reconnect (itself if none).
  lease_id resolve_lease(lease_id id) {
    std::lock_guard lock(mu);
    const auto it = lease_moves.find(id);
    return it == lease_moves.end() ? id : it->second;
  }
  // A lease granted (or kept alive) through this client: restored after a
  // reconnect.
  void track_lease(lease_id id, std::chrono::milliseconds ttl) {
    std::lock_guard lock(mu);
    owned_leases[id] = ttl;
  }
  // Revoked, or given up by its owner: neither it nor its entries come back.
  void forget_lease(lease_id id) {
    std::lock_guard lock(mu);
    owned_leases.erase(id);
    std::erase_if(owned_puts, [id](const auto& kv) { return kv.second.lease == id; });
  }
  // `fresh` replaced `old` (a re-grant): calls with `old` go to `fresh`,
  // and the entries under `old` are restored under `fresh`.
  void move_lease(lease_id old, lease_id fresh, std::chrono::milliseconds ttl) {
    std::lock_guard lock(mu);
    owned_leases.erase(old);
    owned_leases[fresh] = ttl;
    for (auto& [from, to] : lease_moves)
      if (to == old) to = fresh;
    lease_moves[old] = fresh;
    for (auto& [key, put] : owned_puts)
      if (put.lease == old) put.lease = fresh;
  }
  void track_put(std::string_view key, std::string_view value, lease_id lease) {
    std::lock_guard lock(mu);
    owned_puts.insert_or_assign(std::string(key), detail::owned_put{std::string(value), lease});
  }
  void forget_put(std::string_view key) {
    std::lock_guard lock(mu);
    if (auto it = owned_puts.find(key); it != owned_puts.end()) owned_puts.erase(it);
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
