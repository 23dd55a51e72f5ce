#pragma once
// Internal: the byte stream a client's connection runs over. client::impl
// reads frames from it and writes frames to it and touches no socket
// itself. Plain TCP today; TLS (issue 12) goes behind these same members: a
// second transport next to the socket, set up in connect(), for which
// try_write() returns 0 (a TLS session cannot be written outside its loop
// thread), so that callers fall back to the loop's writer. The read and
// write members are templates over Asio completion tokens rather than
// virtual functions: no type erasure and no allocation per read or write.
// Not installed.

#include "common/asio.hpp"

#include <sys/socket.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

namespace switchyard::client_lib {

class byte_stream {
 public:
  explicit byte_stream(asio::io_context& io) : socket_(io) {}
  byte_stream(const byte_stream&) = delete;
  byte_stream& operator=(const byte_stream&) = delete;

  // Loop thread. Connects to the first of `endpoints` that accepts and
  // turns Nagle's algorithm off (best effort). Errors: the socket's
  // (refused, unreachable; an error too when close() ran meanwhile).
  asio::awaitable<asio_error_code> connect(const asio::ip::tcp::resolver::results_type& endpoints);

  // Loop thread, one read at a time: reads what is available into
  // `buffer`, at least one byte. Completion: (asio_error_code, std::size_t).
  template <class Token>
  auto async_read_some(asio::mutable_buffer buffer, Token&& token) {
    return socket_.async_read_some(buffer, std::forward<Token>(token));
  }

  // Loop thread, one write at a time: writes all of `buffer`. Completion:
  // (asio_error_code, std::size_t).
  template <class Token>
  auto async_write(asio::const_buffer buffer, Token&& token) {
    return asio::async_write(socket_, buffer, std::forward<Token>(token));
  }

  // Any thread, while no async_write is in flight and close() cannot run
  // (the caller's lock guarantees both): writes what the stream takes at
  // once, without blocking, and returns how many bytes. 0: it would block,
  // the stream failed (the loop's reader or writer reports that), or the
  // transport cannot be written outside the loop thread. Inline: it is the
  // publish fast path (one system call, nothing else).
  std::size_t try_write(std::span<const std::uint8_t> data) noexcept {
    const ssize_t n = ::send(socket_.native_handle(), data.data(), data.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    return n > 0 ? static_cast<std::size_t>(n) : 0;
  }

  // Loop thread: shuts both directions down and closes; pending reads and
  // writes complete with an error. Idempotent.
  void close() noexcept;

 private:
  asio::ip::tcp::socket socket_;
};

}  // namespace switchyard::client_lib
