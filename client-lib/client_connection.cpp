// client: the connection's session (client::impl, client_impl.hpp): its
// construction, the hello (handshake, run), reading and dispatching the
// broker's frames (deliveries to handlers, answers to requests), the
// heartbeat, and ending the session (fail, close). Everything here but the
// constructor and complete() runs on the client's loop thread.

#include "switchyard/client.hpp"

#include "client_impl_inline.hpp"
#include "common/latency_probe.hpp"

#include <algorithm>
#include <array>
#include <random>
#include <unordered_set>

namespace switchyard {

namespace {

std::string random_client_id() {
  std::random_device rd;
  std::uniform_int_distribution<std::uint64_t> dist;
  char buf[32];
  std::snprintf(buf, sizeof buf, "c-%016llx", static_cast<unsigned long long>(dist(rd)));
  return buf;
}

// A server Error's code as a client error (protocol_violation when it is
// not one of the wire codes).
std::error_code server_error(const wire::Error& e) {
  const auto code = static_cast<int>(e.code());
  if (code <= 0 || code >= 100) return make_error_code(errc::protocol_violation);
  return {code, client_category()};
}

}  // namespace

client::impl::impl(client_options o, detail::loop_state& l)
    : opts(std::move(o)),
      loop(l),
      io(l.io),
      stream(io),
      heartbeat_timer(io),
      parser(protocol::default_max_frame),
      retry_timer(io),
      backoff(opts.reconnect) {
  if (opts.client_id.empty()) opts.client_id = random_client_id();
}

// ------------------------------------------------------------- requests

void client::impl::complete(std::uint64_t id, std::error_code ec, const wire::Frame* answer) {
  completion done;
  {
    switchyard::lock_guard lock(mu);
    auto it = requests.find(id);
    if (it == requests.end()) return;
    done = std::move(it->second);
    requests.erase(it);
  }
  if (done) done(ec, answer);
}

// ------------------------------------------------------------ lifecycle

void client::impl::fail(std::error_code ec, std::string_view what) {
  const bool was_open = open.exchange(false);
  ready = false;
  stream.close();
  heartbeat_timer.cancel();
  const bool reconnect = was_open && established && opts.reconnect.enabled && !closed_by_user;
  std::unordered_map<std::uint64_t, completion> pending;
  {
    switchyard::lock_guard lock(mu);
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

void client::impl::close_down(std::error_code request_error, std::error_code reason) {
  std::unordered_map<std::uint64_t, completion> pending;
  {
    switchyard::lock_guard lock(mu);
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

void client::impl::close_now() {
  closed_by_user = true;
  retry_timer.cancel();
  fail(errc::not_connected, "close");
  close_down(make_error_code(errc::not_connected), {});
}

asio::awaitable<void> client::impl::heartbeat_loop(std::shared_ptr<impl> /*keep_alive*/) {
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

asio::awaitable<std::expected<protocol::frame_view, std::error_code>> client::impl::read_frame() {
  for (;;) {
    auto r = parser.next(rbuf.unread());
    if (!r) co_return std::unexpected(r.error());
    if (*r) co_return **r;
    rbuf.make_room(parser.needed());
    asio_error_code ec;
    const std::size_t n =
        co_await stream.async_read_some(asio::buffer(rbuf.tail(), rbuf.space()), redirect_error(use_awaitable, ec));
    if (ec) co_return std::unexpected(std::error_code(ec));
    last_rx = clock::now();
    rbuf.end += n;
  }
}

inline void client::impl::dispatch_inbox(const wire::InboxDelivery& d, const inbox_list& handlers) {
  const inbox_message m = detail::to_inbox_message(d, key_scratch);
  for (const auto& h : handlers) {
    if (h->id != m.inbox) continue;
    if (h->durable && !m.stream.empty() && !h->durable->tracker->live(m.stream, m.seq, m.epoch)) continue;
    h->handler(m);
  }
}

bool client::impl::dispatch(const wire::Frame& f, const sub_list& subscriptions, const inbox_list& inboxes) {
  switch (f.message_type()) {
    case wire::Message::Deliver: {
      const message m = detail::to_message(*f.message_as_Deliver());
      if constexpr (probe::enabled) {
        const std::uint64_t key = probe::key_of(m.payload.data(), m.payload.size());
        probe::mark_held(probe::point::sub_read, key);
        probe::mark(probe::point::sub_handler, key);
      }
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
    case wire::Message::StreamInfoResult:
    case wire::Message::StreamListResult:  // client_admin.cpp
    case wire::Message::StatsResult:
    case wire::Message::ConnListResult:  // client_admin.cpp
    case wire::Message::WithdrawResult:
    case wire::Message::PendingOffersResult:  // client_offers.cpp
    case wire::Message::ExposureResult:
    case wire::Message::FlagInfo:
    case wire::Message::FlagListResult:
    case wire::Message::ClusterStatusResult:  // client_admin.cpp
    case wire::Message::ClusterTakeoverResult:
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
      const auto ec = server_error(e);
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

asio::awaitable<void> client::impl::read_loop(std::shared_ptr<impl> self) {
  asio::co_spawn(io, heartbeat_loop(self), asio::detached);
  const std::uint64_t gen = generation;  // a later connection's buffer is not this loop's
  std::shared_ptr<const sub_list> subscriptions;
  std::shared_ptr<const inbox_list> inbox_handlers;
  while (open) {
    // One snapshot of the handlers per read batch: a lock per syscall,
    // not per message.
    {
      switchyard::lock_guard lock(mu);
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
      const std::size_t n =
          co_await stream.async_read_some(asio::buffer(rbuf.tail(), rbuf.space()), redirect_error(use_awaitable, ec));
      probe::hold();  // --latency-probe builds only
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

// ---------------------------------------------------------------- hello

asio::awaitable<std::error_code> client::impl::handshake(std::shared_ptr<impl> self, const detail::broker_address& to,
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
  const auto endpoints =
      co_await resolver.async_resolve(to.host, std::to_string(to.port), redirect_error(use_awaitable, ec));
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
      protocol::capability::dropped_notice, protocol::capability::publish_ack,
      protocol::capability::routing,        protocol::capability::log,
      protocol::capability::stream_drops,   protocol::capability::offers,
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
    co_return outcome(server_error(*f.message_as_Error()));
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
    switchyard::lock_guard lock(mu);
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

asio::awaitable<void> client::impl::run(std::shared_ptr<impl> self, std::function<void(std::error_code)> ready_fn) {
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
    switchyard::lock_guard lock(mu);
    state = link::up;
  }
  ready = true;
  answer({});
  co_await read_loop(self);
}

}  // namespace switchyard
