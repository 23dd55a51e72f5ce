#pragma once
// A blocking HTTP/1.1 client for tests of the monitoring port: one
// request per connection, on 127.0.0.1, with a 10 s bound on each step.

#include "common/asio.hpp"

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace switchyard::test {

struct http_reply {
  unsigned status = 0;
  std::string content_type;
  std::string allow;
  std::string body;
  bool closed = false;  // the server closed without an answer
};

// Sends `method target` (with `extra_header` lines, each ending in \r\n,
// if given) and reads the answer.
inline http_reply http_request(std::uint16_t port, std::string_view method, std::string_view target,
                               const std::string& extra_header = {}) {
  namespace beast = boost::beast;
  namespace http = beast::http;
  asio::io_context io;
  beast::tcp_stream stream(io);
  stream.expires_after(std::chrono::seconds(10));
  stream.connect(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  std::string request = std::string(method) + " " + std::string(target) +
                        " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + extra_header + "\r\n";
  asio::write(stream, asio::buffer(request));
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64u << 20);
  parser.skip(method == "HEAD");
  beast::error_code ec;
  http::read(stream, buffer, parser, ec);
  http_reply r;
  if (ec) {
    r.closed = true;
    return r;
  }
  const auto& res = parser.get();
  r.status = res.result_int();
  r.content_type = std::string(res[http::field::content_type]);
  r.allow = std::string(res[http::field::allow]);
  r.body = res.body();
  return r;
}

inline http_reply http_get(std::uint16_t port, std::string_view target) { return http_request(port, "GET", target); }

}  // namespace switchyard::test
