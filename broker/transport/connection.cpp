#include "broker/transport/connection.hpp"

#include "common/latency_probe.hpp"

#include "auth/credentials.hpp"
#include "broker/admission/authenticator.hpp"
#include "broker/transport/connection_registry.hpp"
#include "broker/dispatch/dispatcher.hpp"
#include "broker/tables/feature_flags.hpp"
#include "broker/transport/input_memory.hpp"
#include "broker/transport/loop_pressure.hpp"
#include "broker/requests/wire_error.hpp"
#include "protocol/limits.hpp"
#include "protocol/read_buffer.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>

namespace switchyard::broker {

namespace wire = protocol::wire;
using asio::redirect_error;
using asio::use_awaitable;
using protocol::errc;

namespace {

// A connection that keeps filling its reads may read up to this much per
// loop turn (see connection::read_frames), into the loop's shared buffer.
constexpr std::size_t max_read_buffer = 1024 * 1024;
constexpr std::size_t initial_read_size = 64 * 1024;
// An incomplete frame up to this size is moved in front of the next read
// in the shared buffer; a larger one is read into its own buffer.
constexpr std::size_t spill_in_place = 64 * 1024;
// Input a closing connection reads and throws away before it is closed
// without waiting for the peer any longer.
constexpr std::size_t max_discard = 1024 * 1024;
// StreamDropped reports one connection may have outstanding between two
// Dropped notices (connection::report_dropped_position).
constexpr std::size_t max_drop_reports = 10'000;

bool is_normal_close(const asio_error_code& ec) {
  return !ec || ec == asio::error::eof || ec == asio::error::operation_aborted || ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe || ec == asio::error::not_connected;  // the peer was gone before our half-close
                                                                              // (a refused client that read its error)
}

}  // namespace

connection::connection(connection_context& context, byte_stream stream, std::uint64_t id)
    : peer(id, context.builder),
      ctx_(context),
      stream_(std::move(stream)),
      wake_(stream_.executor()),
      hello_timer_(stream_.executor()),
      heartbeat_timer_(stream_.executor()),
      close_timer_(stream_.executor()),
      peer_address_(stream_.remote_address()),
      queue_(context.config.max_pending_bytes),
      parser_(protocol::pre_hello_max_frame),
      read_size_(initial_read_size),
      last_rx_(clock::now()),
      accepted_at_(last_rx_),
      queued_since_(last_rx_) {}

connection::~connection() = default;

void connection::start(std::optional<refusal> refused) {
  auto self = shared_from_this();
  const auto ex = stream_.executor();
  asio::co_spawn(ex, writer(self), asio::detached);
  if (refused) {
    refuse(*refused);
    return;
  }
  reading_ = true;
  asio::co_spawn(ex, reader(self), asio::detached);
  asio::co_spawn(ex, hello_watchdog(self), asio::detached);
}

void connection::report_lost(std::uint64_t count) {
  if (!granted_.dropped_notice || closing_ || closed_) return;
  ctx_.logger->debug("conn={} {} message(s) lost between nodes: Dropped notice", id(), count);
  send(ctx_.builder.dropped(count));
}

void connection::kick() {
  if (!writer_waiting_ || write_listed_) return;
  queued_since_ = clock::now();  // the queue was empty: this frame is the oldest
  if (!ctx_.writes.open()) return wake_writer();
  write_listed_ = true;
  ctx_.writes.add(shared_from_this());
}

void connection::wake_writer() noexcept {
  if (!writer_waiting_) return;
  writer_waiting_ = false;
  wake_.cancel();
}

void connection::write_now() {
  write_listed_ = false;
  if (!writer_waiting_) return;
  // Left to the writer: under load (its turns coalesce writes), TLS (the
  // stream seals in its write), a goodbye (the writer's close sequence).
  if (closed_ || closing_ || stream_.is_tls() || ctx_.pressure.input_waiting() || !queue_.has_pending())
    return wake_writer();
  if (!take_write()) {
    if (queue_.has_pending()) wake_writer();
    return;
  }
  probe::mark_remembered(probe::point::broker_writing, false);  // --latency-probe builds only
  written_now_ = stream_.try_write(buffers_);
  if (written_now_ < writing_bytes_) return wake_writer();  // the rest (or the error) is the writer's
  probe::mark_remembered(probe::point::broker_written, true);
  if (wrote({}) && queue_.has_pending()) wake_writer();
}

bool connection::take_write() {
  // One clock read per write: how long the oldest frame waited; frames
  // queued from now on wait behind this write.
  const auto write_start = clock::now();
  ctx_.counters.delivery_latency.observe(write_start - queued_since_);
  queued_since_ = write_start;
  spans_.clear();
  buffers_.clear();
  written_now_ = 0;
  queue_.begin_write(spans_, write_start);
  if (const auto n = queue_.take_expired()) ctx_.counters.expired += n;
  if (const auto n = queue_.take_cancelled()) ctx_.counters.withdrawn_queued += n;
  if (spans_.empty()) {
    // Every frame taken had expired or was withdrawn: nothing to write.
    queue_.end_write();
    return false;
  }
  ++ctx_.counters.writes;
  ctx_.counters.frames_written += queue_.frames_in_flight();
  writing_bytes_ = 0;
  for (const auto& s : spans_) {
    buffers_.emplace_back(s.data(), s.size());
    writing_bytes_ += s.size();
  }
  return true;
}

bool connection::wrote(asio_error_code ec) {
  queue_.end_write();
  // Drained: give the lane's chunk back, so an idle connection holds none.
  if (!queue_.has_pending()) {
    lane_.reset();
    if (dropping_ && !ec) {
      dropping_ = false;
      ctx_.logger->info("conn={} slow consumer caught up: {} deliveries dropped since it connected", id(), dropped_);
    }
  }
  if (ec) {
    fail(ec, "write");
    return false;
  }
  bytes_out_ += writing_bytes_;
  ctx_.counters.bytes_out += writing_bytes_;
  if (granted_.dropped_notice && !closing_ && queue_.notice_due()) {
    const auto n = queue_.take_dropped();
    ctx_.logger->info("conn={} slow consumer: {} deliveries dropped", id(), n);
    send(ctx_.builder.dropped(n));
    drops_reported_.clear();  // the next drop of any stream is told again
    drop_reports_queued_ = 0;
  }
  return true;
}

frame_ref connection::store_own(protocol::bytes_view frame) {
  // Through the lane only behind other pending frames, where adjacency
  // saves iovecs: a connection with one frame queued (most of them, most
  // of the time) holds no lane chunk.
  return queue_.has_pending() ? ctx_.arena.store(frame, lane_) : ctx_.arena.store(frame);
}

void connection::send(protocol::bytes_view frame) {
  // Nothing goes after the goodbye (a fatal Error is the last frame).
  if (closed_ || goodbye_queued_) return;
  queue_.push(store_own(frame));
  kick();
}

void connection::deliver(const frame_ref& frame) {
  if (!welcomed_ || closing_) return;
  const bool queued = queue_.push_droppable(frame);
  delivered(queued);
  if (!queued && granted_.stream_drops && !closing_) report_dropped_position(frame.bytes());
}

void connection::deliver(protocol::bytes_view frame) {
  if (!welcomed_ || closing_) return;
  const bool queued = queue_.admit(frame.size());
  if (queued) queue_.push(store_own(frame));
  delivered(queued);
  if (!queued && granted_.stream_drops && !closing_) report_dropped_position(frame);
}

void connection::deliver(const frame_ref& frame, const delivery_meta& meta) {
  if (!welcomed_ || closing_) return;
  delivered(queue_.push_droppable(frame, meta));
}

void connection::deliver(protocol::bytes_view frame, const delivery_meta& meta) {
  if (!welcomed_ || closing_) return;
  // A frame that carries time_left_ms is rewritten when written: it must
  // be this connection's own copy (store_own copies).
  const bool queued = queue_.admit(frame.size());
  if (queued) queue_.push(store_own(frame), meta);
  delivered(queued);
}

bool connection::wants_offer_fields() const noexcept {
  return offers_member_ && ctx_.flags.on(feature_flags::flag::offers, offers_bucket_);
}

std::size_t connection::withdraw(std::uint64_t offer_id) {
  if (closed_) return 0;
  return queue_.cancel(offer_id);
}

void connection::report_dropped_position(protocol::bytes_view frame) {
  // Our own encoding, verified when it was built: read it in place.
  const auto* f = wire::GetSizePrefixedFrame(frame.data());
  std::string_view stream, target;
  std::uint64_t seq = 0, epoch = 0;
  char kind = 0;
  if (const auto* d = f->message_as_Deliver()) {
    if (!d->stream()) return;
    stream = d->stream()->string_view();
    target = d->channel()->string_view();
    seq = d->seq();
    epoch = d->epoch();
    kind = 'c';
  } else if (const auto* d = f->message_as_InboxDelivery()) {
    if (!d->stream()) return;
    stream = d->stream()->string_view();
    target = d->inbox_id() ? d->inbox_id()->string_view() : std::string_view{};
    seq = d->seq();
    epoch = d->epoch();
    kind = 'i';
  }
  if (stream.empty()) return;
  // Key: kind, stream length (2 bytes), stream, channel or inbox. Built in
  // a reused string; the set allocates only for a pair not yet told.
  drop_key_.clear();
  drop_key_.push_back(kind);
  drop_key_.push_back(static_cast<char>(stream.size() & 0xFF));
  drop_key_.push_back(static_cast<char>(stream.size() >> 8));
  drop_key_.append(stream);
  drop_key_.append(target);
  if (drops_reported_.contains(drop_key_)) return;
  // Other clients' publishes decide how many pairs there are: a consumer
  // that reads nothing must not make us hold (or queue reports for) them
  // without end. Counted until the Dropped notice (the queue drained), not
  // reset by a Subscribe.
  if (drop_reports_queued_ >= max_drop_reports) {
    close_slow_consumer("deliveries of more than " + std::to_string(max_drop_reports) +
                        " streams dropped while the connection read nothing");
    return;
  }
  ++drop_reports_queued_;
  drops_reported_.insert(drop_key_);
  // The views above point into `frame`, which may be the builder's own
  // buffer: encode from the key's copy.
  const std::string_view key = drop_key_;
  stream = key.substr(3, stream.size());
  target = key.substr(3 + stream.size());
  send(ctx_.builder.stream_dropped(stream, seq, epoch, kind == 'c' ? target : std::string_view{},
                                   kind == 'i' ? target : std::string_view{}));
}

void connection::delivered(bool queued) {
  if (queued) {
    ++ctx_.counters.delivered;
    ctx_.pressure.note_queued(queue_.queued_bytes());
    kick();
    return;
  }
  ctx_.pressure.note_backlog();
  ++ctx_.counters.dropped;
  ++dropped_;
  if (!dropping_) {
    dropping_ = true;
    ++ctx_.counters.slow_consumers;
    ctx_.logger->info("conn={} slow consumer: {} bytes queued, dropping deliveries until it catches up", id(),
                      queue_.queued_bytes());
  }
  if (ctx_.config.slow_consumer == slow_consumer_policy::disconnect && !closing_)
    close_slow_consumer("outbound queue passed max-pending-bytes");
}

void connection::close_slow_consumer(std::string_view why) {
  if (closing_) return;
  // The goodbye must not wait behind the backlog this peer does not read:
  // drop what is not yet being written, so it follows the write in flight.
  queue_.drop_pending();
  lane_.reset();
  close_with_error(errc::slow_consumer, why);
}

void connection::close_with_error(errc code, std::string_view message) {
  close_with_retry(code, message, std::chrono::milliseconds(0));
}

void connection::refuse(const refusal& r) {
  if (closing_ || closed_) return;
  // Not counted against max-connections while it says goodbye.
  refused_ = true;
  ctx_.registry.rejected_closing(1);
  close_with_retry(r.code, r.message, r.retry_after);
}

void connection::close_with_retry(errc code, std::string_view message, std::chrono::milliseconds retry_after) {
  if (closing_ || closed_) return;
  closing_ = true;
  goodbye(code, message, retry_after);
}

void connection::goodbye(errc code, std::string_view message, std::chrono::milliseconds retry_after) {
  // Refusals come in storms: not one info line each.
  const bool refused_hello = refused_ && !welcomed_;
  ctx_.logger->log(refused_hello ? spdlog::level::debug : spdlog::level::info, "conn={} closing: {} ({})", id(),
                   protocol::errc_name(code), message);
  const auto hint = static_cast<std::uint32_t>(
      std::clamp<std::int64_t>(retry_after.count(), 0, std::numeric_limits<std::uint32_t>::max()));
  send(ctx_.builder.error(0, code, message, hint, true));
  goodbye_queued_ = true;
  // A peer that does not read must not keep the session forever.
  asio::co_spawn(stream_.executor(), close_watchdog(shared_from_this()), asio::detached);
}

void connection::fail(asio_error_code ec, std::string_view what) {
  if (closed_) return;
  closed_ = true;
  closing_ = true;
  if (refused_) ctx_.registry.rejected_closing(-1);
  // Connections refused at accept or before their hello are summarised
  // elsewhere (report_refusals, the hello timeout): one line each would
  // flood the log in a storm.
  if (is_normal_close(ec) && welcomed_)
    ctx_.logger->info("conn={} closed ({}{}{}) after {} ms: {} bytes in, {} out, {} dropped", id(), what,
                      ec ? ": " : "", ec ? ec.message() : "",
                      std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - accepted_at_).count(),
                      bytes_in_, bytes_out_, dropped_);
  else if (is_normal_close(ec))
    ctx_.logger->debug("conn={} closed ({}{}{})", id(), what, ec ? ": " : "", ec ? ec.message() : "");
  else
    ctx_.logger->warn("conn={} closed on {} error: {}", id(), what, ec.message());
  // The handlers forget it (subscriptions, inboxes): no delivery reaches
  // it from here on.
  ctx_.dispatch.disconnected(*this);
  if (offers_member_) {
    offers_member_ = false;
    ctx_.flags.left(feature_flags::flag::offers, offers_bucket_);
  }
  release_spill();
  stream_.close();
  wake_.cancel();
  hello_timer_.cancel();
  heartbeat_timer_.cancel();
  close_timer_.cancel();
  queue_.clear();
  lane_.reset();
  ctx_.registry.remove(*this);
}

asio::awaitable<void> connection::close_watchdog(std::shared_ptr<connection> /*keep_alive*/) {
  close_timer_.expires_after(ctx_.config.shutdown_grace);
  asio_error_code ec;
  co_await close_timer_.async_wait(redirect_error(use_awaitable, ec));
  if (!ec) fail(asio::error::timed_out, "closing (peer did not read the goodbye)");
}

asio::awaitable<void> connection::hello_watchdog(std::shared_ptr<connection> /*keep_alive*/) {
  hello_timer_.expires_after(ctx_.config.hello_timeout);
  asio_error_code ec;
  co_await hello_timer_.async_wait(redirect_error(use_awaitable, ec));
  if (!ec && !welcomed_ && !closing_) {
    ++ctx_.counters.protocol_errors;
    close_with_error(errc::hello_timeout, "no hello within the hello timeout");
  }
}

asio::awaitable<void> connection::auth_refusal(std::shared_ptr<connection> /*keep_alive*/) {
  // The hello timer is free: the hello was handled (this cancels its watchdog).
  hello_timer_.expires_after(ctx_.config.auth_failure_delay);
  asio_error_code ec;
  co_await hello_timer_.async_wait(redirect_error(use_awaitable, ec));
  if (!closed_ && !goodbye_queued_) goodbye(errc::unauthorized, "authentication failed", {});
}

bool connection::fail_auth(std::string_view why) {
  ++ctx_.counters.auth_failures;
  challenge_.reset();
  // The same answer for every cause, after the same delay: the client
  // learns nothing about which part was wrong. The log says (never the
  // credential itself).
  ctx_.logger->info("conn={} from {}: authentication failed ({}); client_id='{}'", id(), peer_address_, why,
                    client_id_);
  closing_ = true;  // nothing more is handled or delivered
  asio::co_spawn(stream_.executor(), auth_refusal(shared_from_this()), asio::detached);
  return false;
}

asio::awaitable<void> connection::heartbeat(std::shared_ptr<connection> /*keep_alive*/) {
  const auto interval = ctx_.config.heartbeat_interval;
  const auto deadline = heartbeat_deadline(interval);
  while (!closing_) {
    heartbeat_timer_.expires_after(interval);
    asio_error_code ec;
    co_await heartbeat_timer_.async_wait(redirect_error(use_awaitable, ec));
    if (ec || closing_) co_return;
    const auto now = clock::now();
    if (now - last_rx_ > deadline) {
      close_with_error(errc::heartbeat_timeout, "no frame from the client within 2.5 heartbeat intervals");
      co_return;
    }
    if (!check_partial_deadline(now)) co_return;
    send(ctx_.builder.ping());
  }
}

asio::awaitable<void> connection::writer(std::shared_ptr<connection> /*keep_alive*/) {
  while (!closed_) {
    if (queue_.writing()) {
      // write_now wrote part of this write: the rest.
      std::size_t skip = written_now_;
      auto first = buffers_.begin();
      while (skip > 0 && skip >= first->size()) skip -= (first++)->size();
      buffers_.erase(buffers_.begin(), first);
      if (skip > 0) buffers_.front() += skip;
      asio_error_code ec;
      co_await stream_.write(buffers_, ec);
      probe::mark_remembered(probe::point::broker_written, true);  // --latency-probe builds only
      if (closed_ || !wrote(ec)) co_return;
      continue;
    }
    if (!queue_.has_pending()) {
      if (closing_) {
        // Everything, the goodbye included, is written. Half-close and let
        // the peer close first (discard_input): closing with input unread
        // would reset the connection, and a reset makes the peer's kernel
        // throw away what it has not read yet, the goodbye among it. The
        // close watchdog bounds the wait; a stopping server does not wait.
        asio_error_code ec;
        stream_.shutdown_send(ec);
        goodbye_sent_ = true;
        if (ec || ctx_.registry.stopping() || peer_eof_)
          fail(ec, "goodbye sent");
        else if (!reading_)
          co_await discard_input();
        co_return;
      }
      wake_.expires_at(asio::steady_timer::time_point::max());
      writer_waiting_ = true;
      asio_error_code ignored;
      co_await wake_.async_wait(redirect_error(use_awaitable, ignored));
      writer_waiting_ = false;
      continue;
    }
    // Under load, one write per connection per turn means hundreds of small
    // writes when one service sends to users on many gateways; the writes,
    // not the sends, then take most of the loop. While more input is
    // already waiting, let the loop run a few more turns (its reads add
    // frames to this queue) unless the byte budget is queued or the oldest
    // frame has waited the time budget (server_config::write_coalesce_*).
    // Never while idle (a read that did not fill its buffer clears
    // input_waiting), so latency at moderate rates is unchanged.
    for (int turn = 0; turn < ctx_.config.write_coalesce_turns && ctx_.pressure.input_waiting() && !closing_ &&
                       queue_.queued_bytes() < ctx_.config.write_coalesce_bytes &&
                       clock::now() - queued_since_ < ctx_.config.write_coalesce_time;
         ++turn) {
      ++ctx_.counters.write_waits;
      co_await asio::post(stream_.executor(), use_awaitable);
      if (closed_) co_return;
    }
    if (!take_write()) continue;
    asio_error_code ec;
    probe::mark_remembered(probe::point::broker_writing, false);  // --latency-probe builds only
    co_await stream_.write(buffers_, ec);
    probe::mark_remembered(probe::point::broker_written, true);
    if (closed_ || !wrote(ec)) co_return;
  }
}

asio::awaitable<void> connection::reader(std::shared_ptr<connection> /*keep_alive*/) {
  co_await read_frames();
  // Closing: the rest of the input is read and thrown away until the peer
  // closes (see writer).
  if (!closed_) co_await discard_input();
}

asio::awaitable<void> connection::discard_input() {
  std::array<std::uint8_t, 4096> scratch;
  std::size_t discarded = 0;
  while (!closed_) {
    asio_error_code ec;
    co_await stream_.wait_readable(ec);
    if (closed_) co_return;
    if (!ec) discarded += stream_.read_some(asio::buffer(scratch), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) continue;
    if (ec == asio::error::eof && !goodbye_sent_) {
      // The peer has half-closed: the goodbye still goes out, then the
      // writer closes (see writer).
      peer_eof_ = true;
      co_return;
    }
    if (ec || discarded > max_discard) {
      fail(ec, "closing");
      co_return;
    }
  }
}

asio::awaitable<void> connection::read_frames() {
  // A reader that stops will not read what may still wait: writers must not
  // hold back for it.
  struct stop_waiting {
    loop_pressure& pressure;
    ~stop_waiting() { pressure.reader_stopped(); }
  } on_exit{ctx_.pressure};
  asio_error_code ec;
  bool more_waiting = false;  // the last read filled its space
  while (!closing_) {
    // Idle, the connection holds no read buffer: it waits for input, then
    // reads into the loop's shared buffer. Only the start of a frame that
    // did not arrive whole stays with the connection (spill_) between
    // reads. After a read that filled its space more input is waiting: the
    // next read only lets the loop's other work run first (as a
    // speculative read would), without waiting for readiness.
    if (more_waiting)
      co_await asio::post(stream_.executor(), use_awaitable);
    else
      co_await stream_.wait_readable(ec);
    if (ec) {
      fail(ec, "read");
      co_return;
    }
    if (closing_) co_return;
    const std::size_t unread = spill_.end - spill_.begin;
    // A large incomplete frame is read straight into spill_, which grows by
    // what the socket holds (never by the declared length); a small one is
    // moved in front of the next read in the shared buffer.
    const bool own = unread > spill_in_place;
    protocol::read_buffer& buf = own ? spill_ : ctx_.input.read_scratch();
    if (own) {
      const std::size_t arrived = std::max<std::size_t>(stream_.available(), 1);
      if (!grow_spill(std::min(parser_.needed() - std::min(parser_.needed(), unread), arrived), parser_.needed()))
        co_return;
    } else {
      if (buf.capacity < max_read_buffer + spill_in_place) buf.reserve(max_read_buffer + spill_in_place);
      if (unread > 0) std::memcpy(buf.data(), spill_.data() + spill_.begin, unread);
      spill_.begin = spill_.end = 0;
      buf.begin = 0;
      buf.end = unread;
    }
    const std::size_t space = own ? buf.space() : read_size_;
    const std::size_t n = stream_.read_some(asio::buffer(buf.tail(), space), ec);
    probe::hold();  // --latency-probe builds only
    // A read into spill_ reads only what the frame needs: filling it says
    // nothing about more input.
    more_waiting = !ec && !own && n == space;
    if (ec == asio::error::would_block || ec == asio::error::try_again) {
      if (!own) spill_back(buf);
      ec = {};
      continue;
    }
    if (ec) {
      fail(ec, "read");
      co_return;
    }
    last_rx_ = clock::now();
    bytes_in_ += n;
    ctx_.counters.bytes_in += n;
    buf.end += n;
    ctx_.pressure.begin_read(more_waiting);  // deliveries this read causes note a backlog
    ctx_.writes.begin();
    const std::size_t handled = handle_input(buf);
    ctx_.writes.end([](connection& c) { c.write_now(); });
    if (closing_) co_return;
    if (!settle_input(buf, handled)) co_return;
    // A read that filled the buffer means more input is waiting. Reading
    // more per loop turn puts more frames into each write to the
    // connections this input feeds: one service sending to users on 200
    // gateways otherwise gives each gateway a write of one or two frames
    // per turn. Only while none of them is backlogged: a publisher must not
    // outrun its subscribers by reading faster than they drain.
    if (ctx_.pressure.backlog_seen())
      read_size_ = initial_read_size;
    else if (!own && n == space)
      read_size_ = std::min(read_size_ * 2, max_read_buffer);
  }
}

namespace {
// The start of a TLS handshake record: content type 22, then a record
// version 3.1 to 3.4 (TLS 1.0 to 1.3). As a frame's length prefix it is
// over 64 KiB, so no valid first frame starts like this.
bool looks_like_tls(std::span<const std::uint8_t> bytes) {
  return bytes.size() >= 3 && bytes[0] == 0x16 && bytes[1] == 0x03 && bytes[2] >= 0x01 && bytes[2] <= 0x04;
}
}  // namespace

std::size_t connection::handle_input(protocol::read_buffer& buf) {
  // Frames are verified a batch ahead of handling, so a handler can warm
  // the cache for the frames after its own (dispatcher::look_ahead). A malformed
  // frame closes the connection after the frames before it are handled.
  std::size_t handled = 0;
  bool more = true;
  while (more && !closing_) {
    batch_.clear();
    std::error_code bad;
    std::size_t ahead = 0;
    more = false;
    while (batch_.size() < max_batch) {
      auto r = parser_.next(buf.unread().subspan(ahead));
      if (!r) {
        bad = r.error();
        break;
      }
      if (!*r) break;
      batch_.push_back(**r);
      ahead += (*r)->size;
      // A frame in the parser's scratch copy (misaligned input) ends the
      // batch: the next parse would overwrite it. So does a frame before
      // the hello is handled: the hello raises the frame limit the frames
      // after it are parsed with.
      const bool last = (*r)->in_scratch || !welcomed_;
      more = last || batch_.size() == max_batch;
      if (last) break;
    }
    for (std::size_t i = 0; i < batch_.size() && !closing_; ++i) {
      if (welcomed_) ctx_.dispatch.look_ahead(*this, batch_, i);
      if (!handle(*batch_[i].frame, buf.unread().first(batch_[i].size))) return handled;
      buf.begin += batch_[i].size;
      ++handled;
    }
    if (bad && !closing_) {
      ++ctx_.counters.protocol_errors;
      const auto code = wire_code(bad);
      std::string why = bad.message();
      if (code == errc::frame_too_large) why += " (limit " + std::to_string(parser_.max_frame()) + " bytes)";
      if (!welcomed_ && looks_like_tls(buf.unread())) {
        // A TLS client on a plain port: its ClientHello reads as a frame
        // far over the limit before the hello. Say so (the client's TLS
        // fails on the plain-text answer at once).
        ctx_.logger->info("conn={} from {}: a TLS handshake on a plain port (this broker has no --tls-cert); closing",
                          id(), peer_address_);
        why = "this port does not speak TLS";
      }
      close_with_error(code, why);
      return handled;
    }
  }
  parser_.trim_scratch();
  return handled;
}

void connection::spill_back(protocol::read_buffer& shared) {
  // Nothing was read: what was moved in front of the read goes back (the
  // spill keeps its allocation, so this cannot fail).
  const std::size_t left = shared.end - shared.begin;
  if (left > 0) std::memcpy(spill_.data(), shared.data() + shared.begin, left);
  spill_.begin = 0;
  spill_.end = left;
  shared.begin = shared.end;
}

bool connection::settle_input(protocol::read_buffer& buf, std::size_t handled) {
  const std::size_t left = buf.end - buf.begin;
  if (left == 0) {
    release_spill();
    return true;
  }
  if (&buf != &spill_) {
    // The start of an incomplete frame moves from the shared buffer into
    // the connection's own, sized to what arrived.
    if (!grow_spill(left, left)) return false;
    std::memcpy(spill_.tail(), buf.data() + buf.begin, left);
    spill_.end += left;
    buf.begin = buf.end;
  } else if (spill_.capacity > spill_in_place && spill_.capacity > 2 * left) {
    // After a large frame, what is left is the start of the next one: keep
    // no more than twice that.
    resize_spill(std::max<std::size_t>((left + 1023) / 1024 * 1024, 1024));
  }
  // A frame has frame_timeout to complete from its first byte.
  const auto now = clock::now();
  if (handled > 0 || partial_since_ == clock::time_point{}) partial_since_ = now;
  return check_partial_deadline(now);
}

bool connection::grow_spill(std::size_t more, std::size_t limit) {
  if (spill_.space() >= more) return true;
  const std::size_t unread = spill_.end - spill_.begin;
  // Doubling (up to `limit`) keeps a large frame's copies linear; never
  // more than twice what arrived.
  const std::size_t want = std::max(unread + more, std::min(2 * spill_.capacity, limit));
  const std::size_t fresh = std::max<std::size_t>((want + 1023) / 1024 * 1024, 1024);
  if (!ctx_.input.may_resize(spill_.capacity, fresh)) {
    ++ctx_.counters.protocol_errors;
    close_with_error(errc::limit_exceeded, "incomplete frames of all connections passed max-incomplete-bytes (" +
                                               std::to_string(ctx_.config.max_incomplete_bytes) + ")");
    return false;
  }
  resize_spill(fresh);
  return true;
}

void connection::resize_spill(std::size_t capacity) {
  const std::size_t before = spill_.capacity;
  if (capacity == 0)
    spill_ = {};
  else
    spill_.reserve(capacity);
  ctx_.input.resized(before, spill_.capacity);
}

void connection::release_spill() noexcept {
  ctx_.input.resized(spill_.capacity, 0);
  spill_ = {};
  partial_since_ = {};
}

bool connection::check_partial_deadline(clock::time_point now) {
  if (partial_since_ == clock::time_point{} || now - partial_since_ <= ctx_.config.frame_timeout) return true;
  ++ctx_.counters.protocol_errors;
  close_with_error(errc::limit_exceeded, "a frame did not complete within frame-timeout-ms (" +
                                             std::to_string(ctx_.config.frame_timeout.count()) + " ms)");
  return false;
}

bool connection::receives(std::string_view channel) const {
  const auth::principal* p = principal();
  if (!p || p->admin) return true;
  const auto& rule = p->rule(auth::operation::subscribe);
  return rule.allows_everything() || rule.allows(channel);
}

bool connection::handle(const wire::Frame& frame, protocol::bytes_view raw) {
  if (welcomed_) return ctx_.dispatch.dispatch(*this, frame, raw);
  if (challenge_) return handle_proof(frame);
  if (frame.message_type() != wire::Message::Hello) {
    ++ctx_.counters.protocol_errors;
    close_with_error(errc::hello_required, "the first frame must be a hello");
    return false;
  }
  return handle_hello(frame);
}

bool connection::handle_hello(const wire::Frame& frame) {
  const wire::Hello& hello = *frame.message_as_Hello();
  if (hello.protocol_major() != protocol::protocol_major) {
    ++ctx_.counters.protocol_errors;
    close_with_error(errc::unsupported_version, "protocol major " + std::to_string(hello.protocol_major()) +
                                                    " not supported; this server speaks " +
                                                    std::to_string(protocol::protocol_major) + "." +
                                                    std::to_string(protocol::protocol_minor));
    return false;
  }
  if (hello.client_name()) client_name_ = hello.client_name()->str();
  if (hello.client_id()) client_id_ = hello.client_id()->str();
  const auto caps = negotiate(hello, ctx_.log_available);
  if (!ctx_.auth.enabled()) return welcome(frame.request_id(), caps, nullptr);

  const auto* key = hello.public_key();
  authenticator::credentials given;
  if (hello.credentials()) given.token = hello.credentials()->string_view();
  if (key) given.public_key = {key->data(), key->size()};
  given.tls_subject = stream_.peer_subject();
  auto decided = ctx_.auth.on_hello(given, authenticator::address_of(peer_address_), clock::now());
  switch (decided.next) {
    case authenticator::step::welcome:
      return welcome(frame.request_id(), caps, std::move(decided.who));
    case authenticator::step::refuse:
      return fail_auth(decided.why);
    case authenticator::step::rate_limited:
      ++ctx_.counters.auth_rate_limited;
      refuse({errc::rate_limited, decided.retry_after, "too many failed authentications from this address"});
      return false;
    case authenticator::step::challenge:
      break;
  }
  challenge_ = std::make_unique<pending_challenge>();
  challenge_->nonce = auth::random_nonce();
  std::copy(key->begin(), key->end(), challenge_->public_key.begin());  // on_hello checked the size
  challenge_->hello_request_id = frame.request_id();
  challenge_->caps = caps;
  send(ctx_.builder.auth_challenge(challenge_->nonce));
  return true;
}

bool connection::handle_proof(const wire::Frame& frame) {
  if (frame.message_type() != wire::Message::AuthProof)
    return fail_auth("a frame other than AuthProof after the challenge");
  const auto* sig = frame.message_as_AuthProof()->signature();
  const std::span<const std::uint8_t> signature =
      sig ? std::span<const std::uint8_t>(sig->data(), sig->size()) : std::span<const std::uint8_t>{};
  auto decided = ctx_.auth.on_proof(challenge_->public_key, challenge_->nonce, signature,
                                    authenticator::address_of(peer_address_), clock::now());
  if (decided.next != authenticator::step::welcome) return fail_auth(decided.why);
  const auto pending = std::move(challenge_);
  return welcome(pending->hello_request_id, pending->caps, std::move(decided.who));
}

bool connection::welcome(std::uint64_t request_id, negotiated_capabilities caps,
                         std::shared_ptr<const auth::principal> who) {
  if (who) {
    if (!who->admin) withhold_admin(caps);
    const owner_id owner = ctx_.auth.owner_of(who->name);
    set_principal(std::move(who), owner);
  }
  if (auto r = ctx_.admission.on_hello(caps.set.admin, ctx_.registry.counted(), clock::now())) {
    refuse(*r);
    return false;
  }
  granted_ = caps.set;

  protocol::welcome_fields w;
  w.protocol_major = protocol::protocol_major;
  w.protocol_minor = protocol::protocol_minor;
  w.server_version = SWITCHYARD_VERSION;
  w.session_id = id();
  w.heartbeat_ms = static_cast<std::uint32_t>(ctx_.config.heartbeat_interval.count());
  w.max_frame = ctx_.config.max_frame;
  w.capabilities = {caps.names.data(), caps.count};
  w.server_instance = ctx_.config.instance_id;
  send(ctx_.builder.welcome(request_id, w));
  welcomed_ = true;
  if (granted_.offers) {
    // Without a client id the connection id stands in (not stable across
    // reconnects: docs/protocol.md §15.6).
    offers_bucket_ = feature_flags::bucket_of(client_id_.empty() ? std::to_string(id()) : client_id_);
    offers_member_ = true;
    ctx_.flags.joined(feature_flags::flag::offers, offers_bucket_);
  }
  hello_timer_.cancel();
  parser_.set_max_frame(ctx_.config.max_frame);
  ctx_.logger->info("conn={} hello from {} name='{}' client_id='{}'{}{}", id(), peer_address_, client_name_, client_id_,
                    principal() ? " principal=" : "", principal() ? principal()->name : std::string());
  asio::co_spawn(stream_.executor(), heartbeat(shared_from_this()), asio::detached);
  return true;
}

protocol::conn_info_fields connection::info(clock::time_point now) const {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  protocol::conn_info_fields f;
  f.id = id();
  f.name = client_name_;
  f.client_id = client_id_;
  if (const auto* who = principal()) f.principal = who->name;
  f.address = peer_address_;
  f.age_ms = static_cast<std::uint64_t>(duration_cast<milliseconds>(now - accepted_at_).count());
  f.idle_ms =
      static_cast<std::uint64_t>(std::max<std::int64_t>(0, duration_cast<milliseconds>(now - last_rx_).count()));
  f.capabilities = names_of(granted_);
  f.subscriptions = static_cast<std::uint32_t>(subscriptions().size());
  f.inboxes = inboxes();
  f.pending_bytes = queue_.queued_bytes();
  f.dropped = dropped_;
  f.bytes_in = bytes_in_;
  f.bytes_out = bytes_out_;
  f.tls = stream_.is_tls();
  return f;
}

}  // namespace switchyard::broker
