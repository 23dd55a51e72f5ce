#pragma once
// Internal: the byte stream a client's connection runs over. client::impl
// reads frames from it and writes frames to it and touches no socket
// itself. Plain TCP, or TLS (client_options::tls): an Asio SSL stream over
// the same socket, made afresh in each connect(). Each member tests one
// optional and calls the socket directly for a plain stream. try_write()
// returns 0 with TLS (a TLS session cannot be written outside its loop
// thread), so that callers fall back to the loop's writer. The read and
// write members are templates over Asio completion tokens rather than
// virtual functions: no type erasure and no allocation per read or write.
// Not installed.

#include "common/asio.hpp"
#include "switchyard/client.hpp"

#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>

#include <sys/socket.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <utility>

namespace switchyard::client_lib {

class byte_stream {
 public:
  explicit byte_stream(asio::io_context& io) : socket_(io) {}
  byte_stream(const byte_stream&) = delete;
  byte_stream& operator=(const byte_stream&) = delete;

  // Loop thread, before the first connect(): TLS from now on (`tls.enabled`
  // must be set). Loads the CA, certificate and key files. Errors:
  // errc::tls_failed, with the reason in tls_error().
  std::error_code configure_tls(const tls_options& tls);

  // Loop thread. Connects to the first of `endpoints` that accepts and
  // turns Nagle's algorithm off (best effort); with TLS, then runs the
  // handshake, verifying the broker as `host` unless tls_options say
  // otherwise. Errors: the socket's (refused, unreachable; an error too
  // when close() ran meanwhile), errc::tls_failed when the handshake
  // failed (the reason in tls_error()).
  asio::awaitable<std::error_code> connect(const asio::ip::tcp::resolver::results_type& endpoints,
                                           const std::string& host);
  // Why the last TLS set-up or handshake failed, for the log.
  const std::string& tls_error() const noexcept { return tls_error_; }

  // Loop thread, one read at a time: reads what is available into
  // `buffer`, at least one byte. Completion: (asio_error_code, std::size_t).
  template <class Token>
  auto async_read_some(asio::mutable_buffer buffer, Token&& token) {
    if (tls_) [[unlikely]]
      return tls_->async_read_some(buffer, std::forward<Token>(token));
    return socket_.async_read_some(buffer, std::forward<Token>(token));
  }

  // Loop thread, one write at a time: writes all of `buffer`. Completion:
  // (asio_error_code, std::size_t).
  template <class Token>
  auto async_write(asio::const_buffer buffer, Token&& token) {
    if (tls_) [[unlikely]]
      return asio::async_write(*tls_, buffer, std::forward<Token>(token));
    return asio::async_write(socket_, buffer, std::forward<Token>(token));
  }

  // Any thread, while no async_write is in flight and close() cannot run
  // (the caller's lock guarantees both): writes what the stream takes at
  // once, without blocking, and returns how many bytes. 0: it would block,
  // the stream failed (the loop's reader or writer reports that), or the
  // transport cannot be written outside the loop thread (TLS). Inline: it
  // is the publish fast path (one system call, nothing else).
  std::size_t try_write(std::span<const std::uint8_t> data) noexcept {
    if (tls_ctx_) return 0;
    const ssize_t n = ::send(socket_.native_handle(), data.data(), data.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    return n > 0 ? static_cast<std::size_t>(n) : 0;
  }

  // Loop thread: shuts both directions down and closes; pending reads and
  // writes complete with an error. Idempotent.
  void close() noexcept;

 private:
  asio::ip::tcp::socket socket_;
  tls_options tls_options_;
  std::shared_ptr<asio::ssl::context> tls_ctx_;                   // set by configure_tls
  std::optional<asio::ssl::stream<asio::ip::tcp::socket&>> tls_;  // the current connection's session
  std::string tls_error_;
};

}  // namespace switchyard::client_lib
