#pragma once
// A connection's byte stream: what the transport needs from a socket, and
// all it may use. Plain TCP now (tcp_stream); TLS (issue 12) will be a
// second implementation, so nothing above this interface may touch the
// socket.
//
// Reads are readiness-based: wait_readable() suspends until input (or an
// error) is there, then read_some() takes what is there without blocking.
// This lets a connection read into the loop's shared buffer only when
// there is input. Writes are gather writes of whole buffer lists.
//
// One owner (the connection), on the loop thread. At most one
// wait_readable() and one write() may be outstanding at a time.

#include "common/asio.hpp"

#include <cstddef>
#include <span>
#include <string>

namespace switchyard::broker {

class byte_stream {
 public:
  virtual ~byte_stream() = default;

  virtual asio::any_io_executor executor() = 0;
  // The peer's address ("1.2.3.4:5678"; "?" if unknown), for logs.
  virtual std::string remote_address() const = 0;

  // Completes once a read_some() would not block (input, end of stream or
  // an error). Cancelled (operation_aborted) by close().
  virtual asio::awaitable<asio_error_code> wait_readable() = 0;
  // Takes up to `into`'s size of what is there now: would_block when
  // nothing is, eof once the peer closed its side.
  virtual std::size_t read_some(asio::mutable_buffer into, asio_error_code& ec) = 0;
  // Bytes readable now without blocking (a hint; 0 on error).
  virtual std::size_t available() = 0;

  // Writes all of `buffers` (which must stay valid until it completes):
  // the error, if any.
  virtual asio::awaitable<asio_error_code> write(std::span<const asio::const_buffer> buffers) = 0;

  // Half-closes: no more writes; the peer reads end of stream after what
  // was written.
  virtual void shutdown_send(asio_error_code& ec) = 0;
  // Closes both ways at once, cancelling what waits. Idempotent.
  virtual void close() noexcept = 0;
};

}  // namespace switchyard::broker
