#include "broker/session.hpp"

#include "broker/log_subject.hpp"
#include "broker/server_core.hpp"
#include "protocol/channel_name.hpp"
#include "protocol/limits.hpp"
#include "protocol/read_buffer.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cstring>

namespace switchyard::broker {

namespace wire = protocol::wire;
using protocol::errc;
using asio::use_awaitable;
using asio::redirect_error;

namespace {

// A connection that keeps filling its reads may read up to this much per
// loop turn (see session::read_frames), into the loop's shared buffer.
constexpr std::size_t max_read_buffer = 1024 * 1024;
constexpr std::size_t initial_read_size = 64 * 1024;
// An incomplete frame up to this size is moved in front of the next read
// in the shared buffer; a larger one is read into its own buffer.
constexpr std::size_t spill_in_place = 64 * 1024;
// Spill bytes per connection that do not count against max_incomplete_bytes.
constexpr std::size_t spill_allowance = 4 * 1024;
// A connection with more than this queued counts as backlogged: no reader
// that feeds it reads more than initial_read_size per turn.
constexpr std::size_t backlog_bytes = 256 * 1024;
// While input is waiting, a writer with less than this queued lets the
// reader handle up to this many more reads before it writes.
constexpr std::size_t coalesce_bytes = 64 * 1024;
constexpr int coalesce_turns = 2;
// Input a closing connection reads and throws away before it is closed
// without waiting for the peer any longer.
constexpr std::size_t max_discard = 1024 * 1024;
// StreamDropped reports one connection may have outstanding between two
// Dropped notices (session::report_dropped_position).
constexpr std::size_t max_drop_reports = 10'000;

bool is_normal_close(const asio_error_code& ec) {
  return !ec || ec == asio::error::eof || ec == asio::error::operation_aborted ||
         ec == asio::error::connection_reset || ec == asio::error::broken_pipe;
}

}  // namespace

session::session(server_core& core, asio::ip::tcp::socket socket, std::uint64_t id)
    : core_(core),
      socket_(std::move(socket)),
      wake_(socket_.get_executor()),
      hello_timer_(socket_.get_executor()),
      heartbeat_timer_(socket_.get_executor()),
      close_timer_(socket_.get_executor()),
      id_(id),
      queue_(core.config.max_pending_bytes),
      parser_(protocol::pre_hello_max_frame),
      last_rx_(clock::now()) {
  asio_error_code ec;
  const auto ep = socket_.remote_endpoint(ec);
  peer_ = ec ? "?" : ep.address().to_string() + ":" + std::to_string(ep.port());
  socket_.set_option(asio::ip::tcp::no_delay(true), ec);
}

session::~session() = default;

void session::start(std::error_code reject) {
  auto self = shared_from_this();
  const auto ex = socket_.get_executor();
  asio::co_spawn(ex, writer(self), asio::detached);
  if (reject) {
    // Not counted against max-connections while it says goodbye.
    ++core_.rejected_closing;
    close_with_error(static_cast<errc>(reject.value()), reject.message());
    return;
  }
  reading_ = true;
  asio::co_spawn(ex, reader(self), asio::detached);
  asio::co_spawn(ex, hello_watchdog(self), asio::detached);
}

void session::kick() noexcept {
  if (writer_waiting_) {
    writer_waiting_ = false;
    wake_.cancel();
  }
}

frame_ref session::store_own(protocol::bytes_view frame) {
  // Through the lane only behind other pending frames, where adjacency
  // saves iovecs: a connection with one frame queued (most of them, most
  // of the time) holds no lane chunk.
  return queue_.has_pending() ? core_.arena.store(frame, lane_) : core_.arena.store(frame);
}

void session::send(protocol::bytes_view frame) {
  // Nothing goes after the goodbye (a fatal Error is the last frame).
  if (closed_ || goodbye_queued_) return;
  queue_.push(store_own(frame));
  kick();
}

void session::send_error(std::uint64_t request_id, errc code, std::string_view message) {
  send(core_.builder.error(request_id, code, message));
}

void session::deliver(const frame_ref& frame) {
  if (!welcomed_ || closing_) return;
  const bool queued = queue_.push_droppable(frame);
  delivered(queued);
  if (!queued && stream_drops_ && !closing_) report_dropped_position(frame.bytes());
}

void session::deliver(protocol::bytes_view frame) {
  if (!welcomed_ || closing_) return;
  const bool queued = queue_.admit(frame.size());
  if (queued) queue_.push(store_own(frame));
  delivered(queued);
  if (!queued && stream_drops_ && !closing_) report_dropped_position(frame);
}

void session::report_dropped_position(protocol::bytes_view frame) {
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
  send(core_.builder.stream_dropped(stream, seq, epoch, kind == 'c' ? target : std::string_view{},
                                    kind == 'i' ? target : std::string_view{}));
}

void session::delivered(bool queued) {
  if (queued) {
    ++core_.counters.delivered;
    if (queue_.queued_bytes() > backlog_bytes) core_.backlog_seen = true;
    kick();
    return;
  }
  core_.backlog_seen = true;
  ++core_.counters.dropped;
  if (core_.config.slow_consumer == slow_consumer_policy::disconnect && !closing_)
    close_slow_consumer("outbound queue passed max-pending-bytes");
}

void session::close_slow_consumer(std::string_view why) {
  if (closing_) return;
  // The goodbye must not wait behind the backlog this peer does not read:
  // drop what is not yet being written, so it follows the write in flight.
  queue_.drop_pending();
  lane_.reset();
  close_with_error(errc::slow_consumer, why);
}

void session::close_with_error(errc code, std::string_view message) {
  if (closing_ || closed_) return;
  closing_ = true;
  core_.log->info("conn={} closing: {} ({})", id_, protocol::errc_name(code), message);
  send(core_.builder.error(0, code, message, 0, true));
  goodbye_queued_ = true;
  // A peer that does not read must not keep the session forever.
  asio::co_spawn(socket_.get_executor(), close_watchdog(shared_from_this()), asio::detached);
}

void session::fail(asio_error_code ec, std::string_view what) {
  if (closed_) return;
  closed_ = true;
  closing_ = true;
  if (!reading_) --core_.rejected_closing;
  if (is_normal_close(ec))
    core_.log->debug("conn={} closed ({}{}{})", id_, what, ec ? ": " : "", ec ? ec.message() : "");
  else
    core_.log->warn("conn={} closed on {} error: {}", id_, what, ec.message());
  for (const auto& p : patterns_) core_.channels.unsubscribe(p, this);
  patterns_.clear();
  release_spill();
  core_.routing.disconnect(this, inbox_ids_);
  inbox_ids_.clear();
  asio_error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  wake_.cancel();
  hello_timer_.cancel();
  heartbeat_timer_.cancel();
  close_timer_.cancel();
  queue_.clear();
  lane_.reset();
  core_.sessions.erase(shared_from_this());
}

asio::awaitable<void> session::close_watchdog(std::shared_ptr<session> /*keep_alive*/) {
  close_timer_.expires_after(core_.config.shutdown_grace);
  asio_error_code ec;
  co_await close_timer_.async_wait(redirect_error(use_awaitable, ec));
  if (!ec) fail(asio::error::timed_out, "closing (peer did not read the goodbye)");
}

asio::awaitable<void> session::hello_watchdog(std::shared_ptr<session> /*keep_alive*/) {
  hello_timer_.expires_after(core_.config.hello_timeout);
  asio_error_code ec;
  co_await hello_timer_.async_wait(redirect_error(use_awaitable, ec));
  if (!ec && !welcomed_ && !closing_) {
    ++core_.counters.protocol_errors;
    close_with_error(errc::hello_timeout, "no hello within the hello timeout");
  }
}

asio::awaitable<void> session::heartbeat(std::shared_ptr<session> /*keep_alive*/) {
  const auto interval = core_.config.heartbeat_interval;
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
    send(core_.builder.ping());
  }
}

asio::awaitable<void> session::writer(std::shared_ptr<session> /*keep_alive*/) {
  std::vector<protocol::bytes_view> spans;
  std::vector<asio::const_buffer> buffers;
  while (!closed_) {
    if (!queue_.has_pending()) {
      if (closing_) {
        // Everything, the goodbye included, is written. Half-close and let
        // the peer close first (discard_input): closing with input unread
        // would reset the connection, and a reset makes the peer's kernel
        // throw away what it has not read yet, the goodbye among it. The
        // close watchdog bounds the wait; a stopping server does not wait.
        asio_error_code ec;
        socket_.shutdown(asio::ip::tcp::socket::shutdown_send, ec);
        goodbye_sent_ = true;
        if (ec || core_.stopping || peer_eof_) fail(ec, "goodbye sent");
        else if (!reading_) co_await discard_input();
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
    // not the sends, then take most of the loop. Waiting at most
    // coalesce_turns reads puts more frames into each. Never while idle (a
    // read that did not fill its buffer clears input_waiting), so latency
    // at moderate rates is unchanged.
    for (int turn = 0; turn < coalesce_turns && core_.input_waiting && !closing_ &&
                       queue_.queued_bytes() < coalesce_bytes;
         ++turn) {
      ++core_.counters.write_waits;
      co_await asio::post(socket_.get_executor(), use_awaitable);
      if (closed_) co_return;
    }
    spans.clear();
    buffers.clear();
    queue_.begin_write(spans);
    for (const auto& s : spans) buffers.emplace_back(s.data(), s.size());
    asio_error_code ec;
    co_await asio::async_write(socket_, buffers, redirect_error(use_awaitable, ec));
    if (closed_) co_return;
    queue_.end_write();
    // Drained: give the lane's chunk back, so an idle connection holds none.
    if (!queue_.has_pending()) lane_.reset();
    if (ec) {
      fail(ec, "write");
      co_return;
    }
    if (dropped_notice_ && !closing_ && queue_.notice_due()) {
      const auto n = queue_.take_dropped();
      core_.log->info("conn={} slow consumer: {} deliveries dropped", id_, n);
      send(core_.builder.dropped(n));
      drops_reported_.clear();  // the next drop of any stream is told again
      drop_reports_queued_ = 0;
    }
  }
}

asio::awaitable<void> session::reader(std::shared_ptr<session> /*keep_alive*/) {
  co_await read_frames();
  // Closing: the rest of the input is read and thrown away until the peer
  // closes (see writer).
  if (!closed_) co_await discard_input();
}

asio::awaitable<void> session::discard_input() {
  std::array<std::uint8_t, 4096> scratch;
  std::size_t discarded = 0;
  while (!closed_) {
    asio_error_code ec;
    discarded += co_await socket_.async_read_some(asio::buffer(scratch), redirect_error(use_awaitable, ec));
    if (closed_) co_return;
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

asio::awaitable<void> session::read_frames() {
  // A reader that stops will not read what may still wait: writers must not
  // hold back for it.
  struct stop_waiting {
    bool& input_waiting;
    ~stop_waiting() { input_waiting = false; }
  } on_exit{core_.input_waiting};
  asio_error_code ec;
  socket_.non_blocking(true, ec);
  if (ec) {
    fail(ec, "read");
    co_return;
  }
  bool more_waiting = false;  // the last read filled its space
  while (!closing_) {
    // Idle, the connection holds no read buffer: it waits for input, then
    // reads into the loop's shared buffer. Only the start of a frame that
    // did not arrive whole stays with the connection (spill_) between
    // reads. After a read that filled its space more input is waiting: the
    // next read only lets the loop's other work run first (as a
    // speculative read would), without waiting for readiness.
    if (more_waiting) co_await asio::post(socket_.get_executor(), use_awaitable);
    else co_await socket_.async_wait(asio::ip::tcp::socket::wait_read, redirect_error(use_awaitable, ec));
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
    protocol::read_buffer& buf = own ? spill_ : core_.read_scratch;
    if (own) {
      const std::size_t arrived = std::max<std::size_t>(socket_.available(ec), 1);
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
    const std::size_t n = socket_.read_some(asio::buffer(buf.tail(), space), ec);
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
    buf.end += n;
    core_.backlog_seen = false;  // set by deliveries this read causes
    core_.input_waiting = more_waiting;
    const std::size_t handled = handle_input(buf);
    if (closing_) co_return;
    if (!settle_input(buf, handled)) co_return;
    // A read that filled the buffer means more input is waiting. Reading
    // more per loop turn puts more frames into each write to the
    // connections this input feeds: one service sending to users on 200
    // gateways otherwise gives each gateway a write of one or two frames
    // per turn. Only while none of them is backlogged: a publisher must not
    // outrun its subscribers by reading faster than they drain.
    if (core_.backlog_seen) read_size_ = initial_read_size;
    else if (!own && n == space) read_size_ = std::min(read_size_ * 2, max_read_buffer);
  }
}

std::size_t session::handle_input(protocol::read_buffer& buf) {
  // Frames are verified a batch ahead of handling, so a handler can warm
  // the cache for the frames after its own (prefetch_ahead). A malformed
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
      prefetch_ahead(i);
      if (!handle(*batch_[i].frame)) return handled;
      buf.begin += batch_[i].size;
      ++handled;
    }
    if (bad && !closing_) {
      ++core_.counters.protocol_errors;
      const auto code = static_cast<errc>(bad.value());
      std::string why = bad.message();
      if (code == errc::frame_too_large)
        why += " (limit " + std::to_string(parser_.max_frame()) + " bytes)";
      close_with_error(code, why);
      return handled;
    }
  }
  parser_.trim_scratch();
  return handled;
}

void session::spill_back(protocol::read_buffer& shared) {
  // Nothing was read: what was moved in front of the read goes back (the
  // spill keeps its allocation, so this cannot fail).
  const std::size_t left = shared.end - shared.begin;
  if (left > 0) std::memcpy(spill_.data(), shared.data() + shared.begin, left);
  spill_.begin = 0;
  spill_.end = left;
  shared.begin = shared.end;
}

bool session::settle_input(protocol::read_buffer& buf, std::size_t handled) {
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

namespace {
// What a spill buffer of `capacity` bytes counts against
// max_incomplete_bytes: the first spill_allowance bytes of each are free, so
// that connections with an ordinary frame cut by a read are never closed
// because others filled the budget.
std::size_t charged(std::size_t capacity) noexcept { return capacity - std::min(capacity, spill_allowance); }
}  // namespace

bool session::grow_spill(std::size_t more, std::size_t limit) {
  if (spill_.space() >= more) return true;
  const std::size_t unread = spill_.end - spill_.begin;
  // Doubling (up to `limit`) keeps a large frame's copies linear; never
  // more than twice what arrived.
  const std::size_t want = std::max(unread + more, std::min(2 * spill_.capacity, limit));
  const std::size_t fresh = std::max<std::size_t>((want + 1023) / 1024 * 1024, 1024);
  if (core_.incomplete_charged - charged(spill_.capacity) + charged(fresh) > core_.config.max_incomplete_bytes) {
    ++core_.counters.protocol_errors;
    close_with_error(errc::limit_exceeded, "incomplete frames of all connections passed max-incomplete-bytes (" +
                                               std::to_string(core_.config.max_incomplete_bytes) + ")");
    return false;
  }
  resize_spill(fresh);
  return true;
}

void session::resize_spill(std::size_t capacity) {
  const std::size_t before = spill_.capacity;
  if (capacity == 0) spill_ = {};
  else spill_.reserve(capacity);
  core_.incomplete_bytes = core_.incomplete_bytes - before + spill_.capacity;
  core_.incomplete_charged = core_.incomplete_charged - charged(before) + charged(spill_.capacity);
  core_.counters.incomplete_bytes_peak = std::max<std::uint64_t>(core_.counters.incomplete_bytes_peak, core_.incomplete_bytes);
}

void session::release_spill() noexcept {
  core_.incomplete_bytes -= spill_.capacity;
  core_.incomplete_charged -= charged(spill_.capacity);
  spill_ = {};
  partial_since_ = {};
}

bool session::check_partial_deadline(clock::time_point now) {
  if (partial_since_ == clock::time_point{} || now - partial_since_ <= core_.config.frame_timeout) return true;
  ++core_.counters.protocol_errors;
  close_with_error(errc::limit_exceeded, "a frame did not complete within frame-timeout-ms (" +
                                             std::to_string(core_.config.frame_timeout.count()) + " ms)");
  return false;
}

void session::prefetch_ahead(std::size_t i) const noexcept {
  // A send's routing lookup misses the cache twice (slot, then entry): start
  // the slot two frames ahead and the entry one ahead, so both are loaded
  // by the time their frames are handled.
  if (!routing_) return;
  const auto key_of = [&](std::size_t j) -> std::string_view {
    if (j >= batch_.size() || batch_[j].frame->message_type() != wire::Message::Send) return {};
    const auto* keys = batch_[j].frame->message_as_Send()->route_keys();
    return keys && keys->size() > 0 ? keys->Get(0)->string_view() : std::string_view{};
  };
  const auto slot = [&](std::size_t j) {
    if (const auto k = key_of(j); !k.empty()) core_.routing.prefetch_slot(k);
  };
  const auto entry = [&](std::size_t j) {
    if (const auto k = key_of(j); !k.empty()) core_.routing.prefetch_entry(k);
  };
  if (i == 0) {
    // The first frames of a batch had nothing before them to do it.
    slot(0);
    slot(1);
    entry(0);
  }
  slot(i + 2);
  entry(i + 1);
}

bool session::handle(const wire::Frame& frame) {
  const std::uint64_t rid = frame.request_id();
  if (!welcomed_) {
    if (frame.message_type() != wire::Message::Hello) {
      ++core_.counters.protocol_errors;
      close_with_error(errc::hello_required, "the first frame must be a hello");
      return false;
    }
    return handle_hello(frame);
  }
  switch (frame.message_type()) {
    case wire::Message::Publish:
      handle_publish(rid, *frame.message_as_Publish());
      return true;
    case wire::Message::Ping:
      handle_ping(rid);
      return true;
    case wire::Message::Pong:
    case wire::Message::Error:  // a client's notice: logged only
      if (frame.message_type() == wire::Message::Error && frame.message_as_Error()->message())
        core_.log->debug("conn={} client error: {}", id_, frame.message_as_Error()->message()->string_view());
      return true;
    case wire::Message::Subscribe:
      handle_subscribe(rid, *frame.message_as_Subscribe());
      return true;
    case wire::Message::Unsubscribe:
      handle_unsubscribe(rid, *frame.message_as_Unsubscribe());
      return true;
    case wire::Message::Hello:
      send_error(rid, errc::bad_request, "hello already received");
      return true;
    case wire::Message::LeaseGrant:
    case wire::Message::LeaseKeepAlive:
    case wire::Message::LeaseRevoke:
    case wire::Message::LeaseTimeToLive:
    case wire::Message::LeaseList:
    case wire::Message::RegistryPut:
    case wire::Message::RegistryGet:
    case wire::Message::RegistryDelete:
    case wire::Message::RegistryList:
    case wire::Message::InboxOpen:
    case wire::Message::InboxClose:
    case wire::Message::Send:
      if (!routing_) send_error(rid, errc::unsupported_message, "this needs the \"routing\" capability in the hello");
      else handle_routing(frame);
      return true;
    case wire::Message::Append:
    case wire::Message::Read:
      if (!log_) send_error(rid, errc::unsupported_message, no_log_message());
      else if (frame.message_type() == wire::Message::Append) handle_append(rid, *frame.message_as_Append());
      else handle_read(rid, *frame.message_as_Read());
      return true;
    case wire::Message::StreamInfo:
    case wire::Message::StreamList:
    case wire::Message::SetRetention:
      if (!log_) send_error(rid, errc::unsupported_message, no_log_message());
      else handle_stream_admin(frame);
      return true;
    default:
      ++core_.counters.protocol_errors;
      close_with_error(errc::unsupported_message,
                       std::string("message type ") + wire::EnumNameMessage(frame.message_type()) +
                           " is not accepted from clients");
      return false;
  }
}

std::string_view session::no_log_message() const noexcept {
  return core_.stream_log ? std::string_view("this needs the \"log\" capability in the hello") : log_off_message;
}

std::uint64_t session::open_ticket() {
  open_tickets_.push_back(false);
  return first_open_ticket_ + open_tickets_.size() - 1;
}

void session::close_ticket(std::uint64_t ticket) {
  if (ticket < first_open_ticket_ || ticket - first_open_ticket_ >= open_tickets_.size()) return;
  open_tickets_[ticket - first_open_ticket_] = true;
  while (!open_tickets_.empty() && open_tickets_.front()) {
    open_tickets_.pop_front();
    ++first_open_ticket_;
  }
  while (!held_pongs_.empty() && first_open_ticket_ >= held_pongs_.front().second) {
    send(core_.builder.pong(held_pongs_.front().first));
    held_pongs_.pop_front();
  }
}

void session::handle_ping(std::uint64_t rid) {
  // Answered at once unless an earlier request still waits for the log; a
  // Ping behind a held one waits too, so Pongs keep their order.
  if (open_tickets_.empty() && held_pongs_.empty()) return send(core_.builder.pong(rid));
  held_pongs_.emplace_back(rid, first_open_ticket_ + open_tickets_.size());
}

bool session::handle_hello(const wire::Frame& frame) {
  const wire::Hello& hello = *frame.message_as_Hello();
  if (hello.protocol_major() != protocol::protocol_major) {
    ++core_.counters.protocol_errors;
    close_with_error(errc::unsupported_version,
                     "protocol major " + std::to_string(hello.protocol_major()) +
                         " not supported; this server speaks " + std::to_string(protocol::protocol_major) +
                         "." + std::to_string(protocol::protocol_minor));
    return false;
  }
  if (hello.client_name()) client_name_ = hello.client_name()->str();
  if (hello.client_id()) client_id_ = hello.client_id()->str();

  std::array<std::string_view, protocol::supported_capabilities.size()> granted{};
  std::size_t n_granted = 0;
  if (const auto* asked = hello.capabilities()) {
    for (const auto* cap : *asked) {
      const std::string_view c = cap->string_view();
      const auto it = std::find(protocol::supported_capabilities.begin(),
                                protocol::supported_capabilities.end(), c);
      if (it == protocol::supported_capabilities.end()) continue;
      if (std::find(granted.begin(), granted.begin() + n_granted, c) != granted.begin() + n_granted) continue;
      granted[n_granted++] = *it;
    }
  }
  // "log" (and "stream-drops", which reports log positions) only where
  // there is a log: a client asking on a server without a data folder
  // learns so from the Welcome.
  if (!core_.stream_log) {
    const auto end = std::remove_if(granted.begin(), granted.begin() + n_granted, [](std::string_view c) {
      return c == protocol::capability::log || c == protocol::capability::stream_drops;
    });
    n_granted = static_cast<std::size_t>(end - granted.begin());
  }
  for (std::size_t i = 0; i < n_granted; ++i) {
    dropped_notice_ |= granted[i] == protocol::capability::dropped_notice;
    publish_ack_ |= granted[i] == protocol::capability::publish_ack;
    routing_ |= granted[i] == protocol::capability::routing;
    log_ |= granted[i] == protocol::capability::log;
    stream_drops_ |= granted[i] == protocol::capability::stream_drops;
  }
  // StreamDropped carries a log position (log) and is reset by the Dropped
  // notice (dropped-notice).
  stream_drops_ = stream_drops_ && log_ && dropped_notice_;

  protocol::welcome_fields w;
  w.protocol_major = protocol::protocol_major;
  w.protocol_minor = protocol::protocol_minor;
  w.server_version = SWITCHYARD_VERSION;
  w.session_id = id_;
  w.heartbeat_ms = static_cast<std::uint32_t>(core_.config.heartbeat_interval.count());
  w.max_frame = core_.config.max_frame;
  w.capabilities = {granted.data(), n_granted};
  send(core_.builder.welcome(frame.request_id(), w));
  welcomed_ = true;
  hello_timer_.cancel();
  parser_.set_max_frame(core_.config.max_frame);
  core_.log->info("conn={} hello from {} name='{}' client_id='{}' version={}.{}", id_, peer_,
                  client_name_, client_id_, hello.protocol_major(), hello.protocol_minor());
  asio::co_spawn(socket_.get_executor(), heartbeat(shared_from_this()), asio::detached);
  return true;
}

void session::handle_subscribe(std::uint64_t rid, const wire::Subscribe& m) {
  const std::string_view pattern = m.pattern()->string_view();
  if (!protocol::is_valid_pattern(pattern)) {
    send_error(rid, errc::bad_request, "invalid subscription pattern");
    return;
  }
  if (patterns_.size() >= core_.config.max_subscriptions && !patterns_.contains(std::string(pattern)))
    return send_error(rid, errc::limit_exceeded,
                      "this connection holds max-subscriptions (" + std::to_string(core_.config.max_subscriptions) +
                          ") patterns");
  if (patterns_.emplace(pattern).second) core_.channels.subscribe(pattern, this);
  // A subscription starts here (a client sends Subscribe for every durable
  // subscription, even of a pattern it already has): from now on, the first
  // dropped delivery of each stream is told again (StreamDropped), so that
  // the new subscription learns of every stream whose first messages it
  // lost.
  drops_reported_.clear();
  core_.log->debug("conn={} subscribe channel={}", id_, pattern);
  if (rid != 0) send(core_.builder.ok(rid));
}

void session::handle_unsubscribe(std::uint64_t rid, const wire::Unsubscribe& m) {
  const std::string_view pattern = m.pattern()->string_view();
  auto it = patterns_.find(std::string(pattern));
  if (it == patterns_.end()) {
    send_error(rid, errc::not_found, "not subscribed to that pattern");
    return;
  }
  core_.channels.unsubscribe(pattern, this);
  patterns_.erase(it);
  if (rid != 0) send(core_.builder.ok(rid));
}

void session::handle_publish(std::uint64_t rid, const wire::Publish& m) {
  const std::string_view channel = m.channel()->string_view();
  if (!protocol::is_valid_channel(channel)) {
    send_error(rid, errc::bad_request, "invalid channel name (wildcards are for subscriptions)");
    return;
  }
  const auto* payload = m.payload();
  // A stream named by the publisher, or the channel's own when the server
  // configured the channel as durable (then no "log" capability is needed:
  // it is the server's policy, not the publisher's request).
  std::string_view stream = m.stream() ? m.stream()->string_view() : std::string_view{};
  const bool by_policy = stream.empty() && core_.durable_channel(channel);
  if (by_policy) stream = channel;
  if (!stream.empty()) {
    // Durable publish: append first, deliver once the log has it.
    const auto bytes = payload ? std::as_bytes(std::span(payload->data(), payload->size())) : std::span<const std::byte>{};
    if (!can_append(rid, stream, bytes.size(), channel_subject_size(channel), by_policy)) return;
    auto& subject = core_.subject_scratch;
    encode_channel_subject(channel, subject);
    append_to_log(rid, stream, bytes, subject, channel);
    return;
  }
  ++core_.counters.published;
  core_.channels.publish(channel, payload ? protocol::bytes_view{payload->data(), payload->size()}
                                          : protocol::bytes_view{});
  if (rid != 0 && publish_ack_) send(core_.builder.ok(rid));
}

}  // namespace switchyard::broker
