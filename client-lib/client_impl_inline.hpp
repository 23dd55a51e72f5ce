#pragma once
// Internal: the definitions of client::impl (client_impl.hpp) that every
// file calling them must see. Not installed.
//
// - The member templates: requests (request, timed_request, call,
//   call_async, call_timed, parsed, request_sync), on_loop and
//   replace_inboxes_locked.
// - The per-message path called from several files: local_builder (every
//   encode), enqueue (publish, send_nowait, ack, the loop's own frames,
//   every request), hold_locked (enqueue's publishes while reconnecting)
//   and start_write (posted by enqueue). Without LTO an out-of-line
//   definition would cost a call per message.
//
// Their contracts are at their declarations in client_impl.hpp.

#include "client_impl.hpp"

#include <future>

namespace switchyard {

namespace detail {

// Encoders for user threads and loop threads alike; frames are copied out
// before the next encode on the same thread.
inline protocol::frame_builder& local_builder() {
  thread_local protocol::frame_builder builder;
  return builder;
}

}  // namespace detail

using detail::local_builder;

// ---------------------------------------------------------- inbox list

template <class Drop>
void client::impl::replace_inboxes_locked(Drop drop, std::shared_ptr<const inbox_entry> add) {
  auto next = std::make_shared<inbox_list>();
  for (const auto& e : *inboxes) {
    if (!drop(*e))
      next->push_back(e);
    else if (e->durable)
      e->durable->active = false;
  }
  if (add) next->push_back(std::move(add));
  inboxes = std::move(next);
}

// -------------------------------------------------------------- threads

template <class F>
auto client::impl::on_loop(F fn) -> decltype(fn()) {
  if (loop.on_loop_thread()) return fn();
  std::packaged_task<decltype(fn())()> task(std::move(fn));
  auto result = task.get_future();
  asio::post(io, [&task] { task(); });
  return result.get();
}

// ---------------------------------------------------------------- write

inline std::error_code client::impl::enqueue(protocol::bytes_view frame, bool internal, std::uint64_t request_id,
                                             room r) {
  if (frame.size() > max_frame + protocol::frame_header_size) return errc::payload_too_large;
  switchyard::unique_lock lock(mu);
  for (;;) {
    if (state == link::closed || (state == link::down && internal)) return errc::not_connected;
    if (state == link::down || (state == link::restoring && !internal)) return hold_locked(frame, request_id);
    if (out.size() + frame.size() <= opts.max_pending_bytes || out.empty() || loop.on_loop_thread() ||
        r == room::exempt)
      break;
    if (!opts.wait_for_space) return errc::buffer_full;
    const bool ok = space_cv.wait_for(lock.native(), opts.request_timeout, [&]() SWITCHYARD_REQUIRES(mu) {
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

inline std::error_code client::impl::hold_locked(protocol::bytes_view frame, std::uint64_t request_id) {
  if (request_id == 0) {
    if (held_publish_bytes + frame.size() > opts.reconnect.buffer_bytes) return errc::buffer_full;
    held_publish_bytes += frame.size();
  }
  held.insert(held.end(), frame.begin(), frame.end());
  held_frames.push_back({frame.size(), request_id});
  return {};
}

inline void client::impl::start_write() {
  {
    switchyard::lock_guard lock(mu);
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

template <class Encode>
void client::impl::request(Encode encode, completion done, bool internal, room r) {
  const std::uint64_t id = next_request.fetch_add(1, std::memory_order_relaxed);
  {
    switchyard::unique_lock lock(mu);
    if (state == link::closed || (internal && state == link::down)) {
      lock.unlock();
      if (done) done(errc::not_connected, nullptr);
      return;
    }
    requests.emplace(id, std::move(done));
  }
  if (auto ec = enqueue(encode(id), internal, id, r)) complete(id, ec);
}

template <class Encode>
void client::impl::timed_request(Encode encode, completion done) {
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

template <class T, class Encode, class Parse>
std::expected<T, std::error_code> client::impl::call(Encode encode, Parse parse) {
  if (loop.on_loop_thread()) return std::unexpected(make_error_code(errc::would_deadlock));
  auto promise = std::make_shared<std::promise<std::expected<T, std::error_code>>>();
  auto result = promise->get_future();
  std::uint64_t id = 0;
  request(
      [&](std::uint64_t rid) {
        id = rid;
        return encode(rid);
      },
      [promise, parse](std::error_code ec, const wire::Frame* answer) {
        if (ec)
          promise->set_value(std::unexpected(ec));
        else if (!answer)
          promise->set_value(std::unexpected(make_error_code(errc::protocol_violation)));
        else
          promise->set_value(parse(*answer));
      });
  if (result.wait_for(opts.request_timeout) != std::future_status::ready) complete(id, errc::timeout);
  return result.get();
}

template <class T, class Encode, class Parse>
void client::impl::call_async(Encode encode, Parse parse, std::function<void(std::expected<T, std::error_code>)> done) {
  request(encode, parsed<T>(std::move(parse), std::move(done)));
}

template <class T, class Encode, class Parse>
void client::impl::call_timed(Encode encode, Parse parse, std::function<void(std::expected<T, std::error_code>)> done) {
  timed_request(encode, parsed<T>(std::move(parse), std::move(done)));
}

template <class T, class Parse>
auto client::impl::parsed(Parse parse, std::function<void(std::expected<T, std::error_code>)> done) -> completion {
  return [parse = std::move(parse), done = std::move(done)](std::error_code ec, const wire::Frame* answer) {
    if (!done) return;
    if (ec)
      done(std::unexpected(ec));
    else if (!answer)
      done(std::unexpected(make_error_code(errc::protocol_violation)));
    else
      done(parse(*answer));
  };
}

template <class Encode>
std::error_code client::impl::request_sync(Encode encode) {
  auto r = call<bool>(encode, [](const wire::Frame&) -> std::expected<bool, std::error_code> { return true; });
  return r ? std::error_code{} : r.error();
}

}  // namespace switchyard
