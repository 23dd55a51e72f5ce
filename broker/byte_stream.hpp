#pragma once
// A connection's byte stream: what the transport needs from a socket, and
// all it may use, so that nothing above it touches the socket. Plain TCP
// today. TLS (issue 12) goes behind these same members: a second transport
// next to the socket, chosen when the stream is made, which each member
// dispatches to.
//
// Reads are readiness-based: wait_readable() suspends until input (or an
// error) is there, then read_some() takes what is there without blocking.
// This lets a connection read into the loop's shared buffer only when
// there is input. Writes are gather writes of whole buffer lists.
//
// The waits return Asio's awaitable operations themselves (not a coroutine
// of ours around them, not virtual): the hot path costs what the socket
// call costs, nothing per read or write beyond it.
//
// One owner (the connection), on the loop thread. At most one
// wait_readable() and one write() may be outstanding at a time.

#include "common/asio.hpp"

#include <cstddef>
#include <string>

namespace switchyard::broker {

class byte_stream {
 public:
  // Takes an accepted socket; sets it non-blocking and TCP_NODELAY.
  explicit byte_stream(asio::ip::tcp::socket socket);

  asio::any_io_executor executor() { return socket_.get_executor(); }
  // The peer's address ("1.2.3.4:5678"; "?" if unknown), for logs.
  const std::string& remote_address() const noexcept { return remote_; }

  // `co_await wait_readable(ec)` completes once a read_some() would not
  // block (input, end of stream or an error, in `ec`). Cancelled
  // (operation_aborted) by close().
  auto wait_readable(asio_error_code& ec) {
    return socket_.async_wait(asio::ip::tcp::socket::wait_read, asio::redirect_error(asio::use_awaitable, ec));
  }
  // Takes up to `into`'s size of what is there now: would_block when
  // nothing is, eof once the peer closed its side.
  std::size_t read_some(asio::mutable_buffer into, asio_error_code& ec) { return socket_.read_some(into, ec); }
  // Bytes readable now without blocking (a hint; 0 on error).
  std::size_t available() noexcept;

  // `co_await write(buffers, ec)` writes all of `buffers` (which must stay
  // valid until it completes); the error, if any, in `ec`.
  template <class ConstBufferSequence>
  auto write(const ConstBufferSequence& buffers, asio_error_code& ec) {
    return asio::async_write(socket_, buffers, asio::redirect_error(asio::use_awaitable, ec));
  }

  // Half-closes: no more writes; the peer reads end of stream after what
  // was written.
  void shutdown_send(asio_error_code& ec) { socket_.shutdown(asio::ip::tcp::socket::shutdown_send, ec); }
  // Closes both ways at once, cancelling what waits. Idempotent.
  void close() noexcept;

 private:
  asio::ip::tcp::socket socket_;
  std::string remote_;
};

}  // namespace switchyard::broker
