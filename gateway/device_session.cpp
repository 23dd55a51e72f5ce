#include "gateway/device_session.hpp"

#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include <algorithm>
#include <chrono>
#include <variant>

namespace switchyard::edge {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using asio::use_awaitable;

namespace {

constexpr std::size_t max_header_bytes = 8192;
constexpr std::size_t idle_buffer_bytes = 4096;  // a read buffer grown past this is given back after the message

template <class... F>
struct overloaded : F... {
  using F::operator()...;
};
template <class... F>
overloaded(F...) -> overloaded<F...>;  // clang-14 has no deduction for aggregates

steady_time now() { return std::chrono::steady_clock::now(); }

// The session's stream over `socket`: TLS when `tls` is set.
template <class Variant>
Variant make_stream(asio::ip::tcp::socket socket, std::shared_ptr<device_tls> tls) {
  using plain = std::variant_alternative_t<0, Variant>;
  using secure = std::variant_alternative_t<1, Variant>;
  if (tls) return Variant(std::in_place_type<secure>, std::move(socket), std::move(tls));
  return Variant(std::in_place_type<plain>, std::move(socket));
}

}  // namespace

device_session::device_session(asio::ip::tcp::socket socket, std::shared_ptr<device_tls> tls, session_host& host,
                               const session_limits& limits, std::uint64_t id, steady_time at)
    : ws_(make_stream<decltype(ws_)>(std::move(socket), std::move(tls))),
      host_(host),
      limits_(limits),
      id_(id),
      in_(max_header_bytes),
      wake_(on_ws([](auto& ws) { return ws.get_executor(); })),
      tokens_(limits.message_burst),
      tokens_at_(at) {
  timers_.accepted = at;
  timers_.last_received = at;
  timers_.last_ping = at;
}

device_session::~device_session() = default;

void device_session::start() {
  asio::co_spawn(
      wake_.get_executor(), [self = shared_from_this()] { return self->run(); }, asio::detached);
}

asio::awaitable<void> device_session::run() {
  const auto self = shared_from_this();  // alive while the socket is read
  beast::error_code ec;
  if (auto* secure = std::get_if<tls_ws>(&ws_)) {
    // Within the hello timeout, as the upgrade is.
    co_await secure->next_layer().async_handshake(asio::redirect_error(use_awaitable, ec));
    if (ec || closing()) {
      tls_failed_ = true;
      co_return finish();
    }
  }
  http::request_parser<http::empty_body> parser;
  parser.header_limit(max_header_bytes);
  co_await on_ws([&](auto& ws) {
    return http::async_read(ws.next_layer(), in_, parser, asio::redirect_error(use_awaitable, ec));
  });
  if (ec || closing()) co_return finish();
  const auto& request = parser.get();
  const bool upgrade = websocket::is_upgrade(request) && request.target() == "/ws";
  const bool admitted = upgrade && host_.admit();
  if (!admitted) {
    // Not a WebSocket upgrade at /ws, or refused (the socket cap, a drain):
    // an HTTP answer, then the socket is closed.
    http::response<http::string_body> res{
        !upgrade ? (request.target() == "/ws" ? http::status::upgrade_required : http::status::not_found)
                 : http::status::service_unavailable,
        request.version()};
    if (upgrade) res.set(http::field::retry_after, "1");
    res.set(http::field::content_type, "text/plain");
    res.body() = !upgrade ? "switchyard-gateway: WebSocket upgrades at /ws only\n"
                          : "switchyard-gateway: too_many_sockets or draining; retry later\n";
    res.keep_alive(false);
    res.prepare_payload();
    co_await on_ws(
        [&](auto& ws) { return http::async_write(ws.next_layer(), res, asio::redirect_error(use_awaitable, ec)); });
    co_return finish();
  }
  co_await on_ws([&](auto& ws) {
    ws.read_message_max(limits_.max_message_bytes);
    ws.auto_fragment(false);
    ws.control_callback([this](websocket::frame_type, beast::string_view) { timers_.last_received = now(); });
    ws.set_option(websocket::stream_base::decorator(
        [](websocket::response_type& res) { res.set(http::field::server, "switchyard-gateway/" SWITCHYARD_VERSION); }));
    return ws.async_accept(request, asio::redirect_error(use_awaitable, ec));
  });
  if (ec || closing()) co_return finish();
  timers_.upgraded = true;
  timers_.last_received = timers_.last_ping = now();
  in_.clear();
  in_.shrink_to_fit();
  in_.max_size(limits_.max_message_bytes + 1024);  // the upgrade's header limit no more: read_message_max rules
  writer_started_ = true;
  asio::co_spawn(
      wake_.get_executor(), [self] { return self->writer(); }, asio::detached);

  for (;;) {
    co_await on_ws([&](auto& ws) { return ws.async_read(in_, asio::redirect_error(use_awaitable, ec)); });
    if (ec) break;  // closed (by either side), reset, or a message over the limit (Beast closes with 1009)
    timers_.last_received = now();
    if (!closing()) {
      if (!on_ws([](auto& ws) { return ws.got_text(); }))
        close(device_errc::too_large, "binary frames are not accepted");
      else
        handle({static_cast<const char*>(in_.cdata().data()), in_.size()});
    }
    in_.consume(in_.size());
    if (in_.capacity() > idle_buffer_bytes) in_.shrink_to_fit();
  }
  finish();
}

asio::awaitable<void> device_session::writer() {
  const auto self = shared_from_this();
  beast::error_code ec;
  while (!finished_ && !closing()) {
    if (out_.empty()) {
      wake_.expires_at(asio::steady_timer::time_point::max());
      co_await wake_.async_wait(asio::redirect_error(use_awaitable, ec));
      continue;
    }
    const text frame = std::move(out_.front());
    out_.pop_front();
    co_await on_ws(
        [&](auto& ws) { return ws.async_write(asio::buffer(*frame), asio::redirect_error(use_awaitable, ec)); });
    pending_bytes_ -= std::min(pending_bytes_, frame->size());
    if (ec) {
      abort();  // the reader ends too, and finish() tells the host
      break;
    }
    if (on_drained_ && pending_bytes_ <= drained_to_ && !closing()) std::exchange(on_drained_, nullptr)();
    if (out_.empty() && dropped_ > 0 && !closing()) {
      auto notice = std::make_shared<const std::string>(dropped_text(dropped_));
      dropped_ = 0;
      pending_bytes_ += notice->size();
      out_.push_back(std::move(notice));
    }
  }
}

void device_session::handle(std::string_view frame) {
  if (!take_token(now())) return close(device_errc::rate_limited);
  auto parsed = parse_device_message(frame);
  if (!parsed) return close(parsed.error().code, parsed.error().reason);
  const bool hello = std::holds_alternative<hello_message>(*parsed);
  if (hello && timers_.hello_received) return close(device_errc::hello_required, "a second hello");
  if (!hello && !welcomed())
    return close(device_errc::hello_required, timers_.hello_received ? "wait for the welcome" : "hello first");
  std::visit(overloaded{
                 [this](hello_message& m) {
                   timers_.hello_received = true;
                   host_.hello(*this, std::move(m));
                 },
                 [this](heartbeat_message&) { send(heartbeat_text()); },
                 [this](subscribe_message& m) { host_.subscribe(*this, m); },
                 [this](unsubscribe_message& m) { host_.unsubscribe(*this, m); },
                 [this](ack_message& m) { host_.ack(*this, m); },
             },
             *parsed);
}

bool device_session::take_token(steady_time at) {
  const double elapsed = std::chrono::duration<double>(at - tokens_at_).count();
  tokens_at_ = at;
  tokens_ = std::min<double>(limits_.message_burst, tokens_ + elapsed * limits_.max_messages_per_s);
  if (tokens_ < 1.0) return false;
  tokens_ -= 1.0;
  return true;
}

bool device_session::hold(std::size_t bytes) {
  if (finished_ || closing()) return false;
  if (pending_bytes_ + held_bytes_ + bytes > limits_.max_pending_bytes) {
    close(device_errc::slow_consumer, "too much to hold while reading back");
    return false;
  }
  held_bytes_ += bytes;
  return true;
}

void device_session::when_drained_to(std::size_t bytes, std::function<void()> fn) {
  if (finished_ || closing()) return;
  if (pending_bytes_ <= bytes) return fn();
  drained_to_ = bytes;
  on_drained_ = std::move(fn);
}

void device_session::send(text frame, bool must_arrive) {
  if (finished_ || closing()) return;
  if (pending_bytes_ + held_bytes_ + frame->size() > limits_.max_pending_bytes) {
    if (limits_.disconnect_slow || must_arrive) return close(device_errc::slow_consumer);
    ++dropped_;
    ++dropped_total_;
    return;
  }
  pending_bytes_ += frame->size();
  out_.push_back(std::move(frame));
  if (out_.size() == 1) wake_.cancel();
}

void device_session::welcome(std::string user, std::string welcome_frame, std::optional<steady_time> token_expiry) {
  user_ = std::move(user);
  timers_.token_expiry = token_expiry;
  send(std::move(welcome_frame));
}

void device_session::close(device_errc code, std::string_view detail) {
  if (finished_ || closing()) return;
  timers_.closing_since = now();
  closed_for_ = code;
  out_.clear();
  pending_bytes_ = 0;
  wake_.cancel();
  if (!timers_.upgraded) {
    abort();  // the pending handshake or HTTP read ends; run() finishes
    return;
  }
  const auto& row = row_of(code);
  const websocket::close_reason reason(static_cast<websocket::close_code>(row.close_code ? row.close_code : 1008),
                                       close_reason(code, detail));
  on_ws([&](auto& ws) {
    ws.async_close(reason, [self = shared_from_this()](beast::error_code ec) {
      if (ec) self->abort();  // otherwise the read loop sees the device's close frame
    });
  });
}

void device_session::abort() {
  beast::error_code ignored;
  on_ws([&](auto& ws) { beast::get_lowest_layer(ws).close(ignored); });
}

void device_session::ping(steady_time at) {
  if (!timers_.upgraded || ping_in_flight_ || finished_ || closing()) return;
  timers_.last_ping = at;
  ping_in_flight_ = true;
  on_ws([&](auto& ws) {
    ws.async_ping({}, [self = shared_from_this()](beast::error_code) { self->ping_in_flight_ = false; });
  });
}

void device_session::finish() {
  if (finished_) return;
  finished_ = true;
  abort();
  wake_.cancel();
  out_.clear();
  on_drained_ = nullptr;
  host_.closed(*this);
}

}  // namespace switchyard::edge
