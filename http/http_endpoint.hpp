#pragma once
// A read-only HTTP/1.1 endpoint for monitoring (the broker's --http and the
// gateway's --http): it accepts, reads GET and HEAD requests (other methods
// get 405) and answers each with what the owner's answer function makes of
// the request's target. The owner decides what is served; this class only
// moves bytes, with bounded memory: at most max_clients connections (more
// are closed at accept), a request's header at most 8 KiB and no body, one
// request at a time per connection, and idle_timeout to send each request.
//
// Threads: the io_context's (one thread): the constructor, start(), stop()
// and every call of the answer function.

#include "common/asio.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace spdlog {
class logger;
}

namespace switchyard::http {

// One answer: status, content type, body.
struct http_answer {
  unsigned status = 200;
  std::string content_type;
  std::string body;
};

// A text/plain answer.
http_answer plain(unsigned status, std::string body);

class http_endpoint {
 public:
  // What a GET of `target` (path and query) gets. Called on the io thread.
  using answer_fn = std::function<http_answer(std::string_view target)>;

  static constexpr std::size_t max_clients = 64;
  static constexpr std::size_t max_header_bytes = 8 * 1024;
  static constexpr std::chrono::seconds idle_timeout{30};

  // `server` names the program in the Server header ("switchyard");
  // `what` names the endpoint in errors ("monitoring (--http)").
  http_endpoint(asio::io_context& io, answer_fn answer, std::shared_ptr<spdlog::logger> logger, std::string server,
                std::string what);
  ~http_endpoint();
  http_endpoint(const http_endpoint&) = delete;
  http_endpoint& operator=(const http_endpoint&) = delete;

  // Binds `address` (a numeric IPv4 or IPv6 address) and `port` (0: any
  // free one), listens and starts accepting. Throws std::runtime_error
  // naming the address (in use, permission, ...).
  void start(const std::string& address, std::uint16_t port);
  std::uint16_t port() const noexcept { return port_; }
  // Closes the listener and every open connection. Idempotent.
  void stop();

 private:
  struct client;
  asio::awaitable<void> accept_loop();
  asio::awaitable<void> serve(std::shared_ptr<client> c);

  asio::io_context& io_;
  answer_fn answer_;
  std::shared_ptr<spdlog::logger> logger_;
  std::string server_;
  std::string what_;
  asio::ip::tcp::acceptor acceptor_;
  std::uint16_t port_ = 0;
  bool stopped_ = false;
  std::vector<std::weak_ptr<client>> clients_;
};

}  // namespace switchyard::http
