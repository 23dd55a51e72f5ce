#include "http/http_endpoint.hpp"

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

#include <stdexcept>
#include <utility>

namespace switchyard::http {

namespace beast = boost::beast;
namespace bhttp = beast::http;
using asio::use_awaitable;

struct http_endpoint::client {
  explicit client(asio::ip::tcp::socket s) : stream(std::move(s)) {}
  beast::tcp_stream stream;
};

http_answer plain(unsigned status, std::string body) { return {status, "text/plain; charset=utf-8", std::move(body)}; }

http_endpoint::http_endpoint(asio::io_context& io, answer_fn answer, std::shared_ptr<spdlog::logger> logger,
                             std::string server, std::string what)
    : io_(io),
      answer_(std::move(answer)),
      logger_(std::move(logger)),
      server_(std::move(server)),
      what_(std::move(what)),
      acceptor_(io) {}

http_endpoint::~http_endpoint() { stop(); }

void http_endpoint::start(const std::string& address, std::uint16_t port) {
  asio_error_code ec;
  const auto ip = asio::ip::make_address(address, ec);
  const asio::ip::tcp::endpoint endpoint(ip, port);
  if (!ec) acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    throw std::runtime_error("cannot serve " + what_ + " on " + address + ":" + std::to_string(port) + ": " +
                             ec.message());
  port_ = acceptor_.local_endpoint().port();
  asio::co_spawn(io_, accept_loop(), asio::detached);
}

void http_endpoint::stop() {
  if (stopped_) return;
  stopped_ = true;
  asio_error_code ignored;
  acceptor_.close(ignored);
  for (auto& w : clients_)
    if (auto c = w.lock()) c->stream.socket().close(ignored);
  clients_.clear();
}

asio::awaitable<void> http_endpoint::accept_loop() {
  while (!stopped_) {
    asio_error_code ec;
    auto socket = co_await acceptor_.async_accept(asio::redirect_error(use_awaitable, ec));
    if (stopped_) co_return;
    if (ec) {
      if (ec == asio::error::operation_aborted) co_return;
      // Out of descriptors and the like: wait a little rather than spin.
      logger_->warn("{}: accept failed: {}", what_, ec.message());
      asio::steady_timer pause(io_, std::chrono::milliseconds(100));
      co_await pause.async_wait(asio::redirect_error(use_awaitable, ec));
      continue;
    }
    std::erase_if(clients_, [](const std::weak_ptr<client>& w) { return w.expired(); });
    if (clients_.size() >= max_clients) {
      socket.close(ec);  // bounded: never more than max_clients
      continue;
    }
    auto c = std::make_shared<client>(std::move(socket));
    clients_.push_back(c);
    asio::co_spawn(io_, serve(std::move(c)), asio::detached);
  }
}

asio::awaitable<void> http_endpoint::serve(std::shared_ptr<client> c) {
  beast::flat_buffer buffer(max_header_bytes);
  // A bounded number of requests per connection; then the client reconnects.
  for (int served = 0; served < 10'000 && !stopped_; ++served) {
    bhttp::request_parser<bhttp::empty_body> parser;
    parser.header_limit(max_header_bytes);
    parser.body_limit(0);
    c->stream.expires_after(idle_timeout);
    beast::error_code ec;
    co_await bhttp::async_read(c->stream, buffer, parser, asio::redirect_error(use_awaitable, ec));
    if (ec) {
      if (ec != bhttp::error::end_of_stream && ec != beast::error::timeout && ec != asio::error::operation_aborted &&
          ec != asio::error::connection_reset && ec != asio::error::eof && !stopped_) {
        // A malformed request: say so and close.
        bhttp::response<bhttp::string_body> bad{bhttp::status::bad_request, 11};
        bad.set(bhttp::field::content_type, "text/plain; charset=utf-8");
        bad.set(bhttp::field::connection, "close");
        bad.body() = "bad request: " + ec.message() + "\n";
        bad.prepare_payload();
        c->stream.expires_after(std::chrono::seconds(5));
        co_await bhttp::async_write(c->stream, bad, asio::redirect_error(use_awaitable, ec));
      }
      break;
    }
    if (stopped_) break;
    const auto& req = parser.get();
    http_answer r;
    const bool head = req.method() == bhttp::verb::head;
    if (req.method() != bhttp::verb::get && !head)
      r = plain(405, "method not allowed: this port answers GET and HEAD\n");
    else
      r = answer_(std::string_view(req.target().data(), req.target().size()));
    bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(r.status), req.version()};
    res.set(bhttp::field::server, server_);
    res.set(bhttp::field::content_type, r.content_type);
    res.set(bhttp::field::cache_control, "no-store");
    if (r.status == 405) res.set(bhttp::field::allow, "GET, HEAD");
    res.keep_alive(req.keep_alive());
    const auto length = r.body.size();
    if (!head) res.body() = std::move(r.body);
    res.prepare_payload();
    if (head) res.content_length(length);
    c->stream.expires_after(idle_timeout);
    if (head) {
      bhttp::response_serializer<bhttp::string_body> sr{res};
      sr.split(true);
      co_await bhttp::async_write_header(c->stream, sr, asio::redirect_error(use_awaitable, ec));
    } else {
      co_await bhttp::async_write(c->stream, res, asio::redirect_error(use_awaitable, ec));
    }
    if (ec || !res.keep_alive()) break;
  }
  beast::error_code ignored;
  c->stream.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
  c->stream.close();
}

}  // namespace switchyard::http
