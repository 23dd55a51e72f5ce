#pragma once
// A connection's byte stream: what the transport needs from a socket, and
// all it may use, so that nothing above it touches the socket. Plain TCP,
// or TLS (a session over the same socket, chosen when the stream is made;
// each member tests one pointer and calls the socket directly when it is
// null, so a plain stream costs what it cost before TLS existed: no
// allocation, no virtual call).
//
// Reads are readiness-based: wait_readable() suspends until input (or an
// error) is there, then read_some() takes what is there without blocking.
// This lets a connection read into the loop's shared buffer only when
// there is input. Writes are gather writes of whole buffer lists.
//
// TLS is userspace TLS (OpenSSL 3): this machine's kernel has no `tls`
// module, so kernel TLS is not used (docs/security.md, "TLS"). The session
// reads records straight from the socket and decrypts into read_some()'s
// buffer; bytes it decrypted but that did not fit stay in the session, and
// wait_readable() completes at once while there are any (the socket may
// never become readable for them); OpenSSL reads ahead, so one recv takes
// several records and a read decrypts record after record until its buffer
// is full or the socket has no more. A write seals the buffer list into
// records of 16 KiB of plaintext (a buffer's whole records straight from
// it, the small pieces gathered first) and writes all the ciphertext with
// one socket write.
//
// The waits return Asio's asynchronous operations themselves (not a
// coroutine of ours around them, not virtual): the hot path costs what the
// socket call costs, nothing per read or write beyond it.
//
// One owner (the connection), on the loop thread. At most one
// wait_readable() and one write() may be outstanding at a time.

#include "common/asio.hpp"

#include <cstddef>
#include <memory>
#include <span>
#include <string>

namespace switchyard::broker {

class tls_context;
class tls_session;

class byte_stream {
 public:
  // Takes an accepted socket; sets it non-blocking and TCP_NODELAY. With
  // `tls`, the stream is the server side of a TLS session made from that
  // context (which it keeps alive); handshake() must complete before any
  // other member is used.
  explicit byte_stream(asio::ip::tcp::socket socket, std::shared_ptr<tls_context> tls = nullptr);
  byte_stream(byte_stream&&) noexcept;
  byte_stream& operator=(byte_stream&&) noexcept;
  ~byte_stream();

  asio::any_io_executor executor() { return socket_.get_executor(); }
  // The peer's address ("1.2.3.4:5678"; "?" if unknown), for logs.
  const std::string& remote_address() const noexcept { return remote_; }
  bool is_tls() const noexcept { return tls_ != nullptr; }

  // TLS only, once, before anything else: runs the server side of the
  // handshake. Errors: `not_tls` when the client's first byte is not a TLS
  // handshake record (a plain client on a TLS port: the caller may answer
  // in plain text, nothing was read), OpenSSL's (ssl category; what() says
  // why: wrong version, no certificate, unknown CA), or the socket's.
  // Cancelled by close().
  asio::awaitable<asio_error_code> handshake();
  // The error handshake() returns when the client does not speak TLS.
  static asio_error_code not_tls() noexcept;
  // After handshake() failed with not_tls(): writes `data` unencrypted, as
  // much as the socket takes at once (a plain-text goodbye). Returns the
  // bytes written.
  std::size_t send_plain(asio::const_buffer data) noexcept;
  // After handshake() failed: waits for the socket to be readable, and
  // reads what is there unencrypted (to discard it before closing).
  auto socket_wait_readable(asio_error_code& ec) {
    return socket_.async_wait(asio::ip::tcp::socket::wait_read, asio::redirect_error(asio::use_awaitable, ec));
  }
  std::size_t read_plain(asio::mutable_buffer into, asio_error_code& ec) { return socket_.read_some(into, ec); }
  // After a successful handshake: "TLSv1.3 TLS_AES_256_GCM_SHA384", and the
  // client certificate's subject when there was one.
  std::string tls_description() const;
  // After a successful handshake with a client certificate: its subject
  // in RFC 2253 form ("CN=gw-1,O=Example"), which an auth file's
  // tls_subjects name. Empty for plain TCP or no client certificate.
  const std::string& peer_subject() const noexcept;

  // `co_await wait_readable(ec)` completes once a read_some() would not
  // block (input, end of stream or an error, in `ec`); with TLS, at once
  // while the session holds input not yet read. Cancelled
  // (operation_aborted) by close().
  auto wait_readable(asio_error_code& ec) {
    auto token = asio::redirect_error(asio::use_awaitable, ec);  // holds a reference to ec only
    return asio::async_initiate<decltype(token), void(asio_error_code)>(
        [this](auto handler) {
          if (tls_ && tls_has_pending()) [[unlikely]] {
            asio::post(socket_.get_executor(), [h = std::move(handler)]() mutable { std::move(h)(asio_error_code{}); });
            return;
          }
          socket_.async_wait(asio::ip::tcp::socket::wait_read, std::move(handler));
        },
        token);
  }
  // Takes up to `into`'s size of what is there now: would_block when
  // nothing is, eof once the peer closed its side.
  std::size_t read_some(asio::mutable_buffer into, asio_error_code& ec) {
    if (tls_) [[unlikely]]
      return tls_read(into, ec);
    return socket_.read_some(into, ec);
  }
  // Bytes readable now without blocking (a hint; 0 on error). With TLS:
  // decrypted bytes held plus the ciphertext waiting in the socket.
  std::size_t available() noexcept;

  // `co_await write(buffers, ec)` writes all of `buffers` (which must stay
  // valid until it completes); the error, if any, in `ec`.
  template <class ConstBufferSequence>
  auto write(const ConstBufferSequence& buffers, asio_error_code& ec) {
    auto token = asio::redirect_error(asio::use_awaitable, ec);
    return asio::async_initiate<decltype(token), void(asio_error_code, std::size_t)>(
        [this](auto handler, const ConstBufferSequence* b) {
          if (!tls_) [[likely]] {
            asio::async_write(socket_, *b, std::move(handler));
            return;
          }
          for (auto it = asio::buffer_sequence_begin(*b); it != asio::buffer_sequence_end(*b); ++it)
            tls_seal(asio::const_buffer(*it));
          asio_error_code sealed;
          const asio::const_buffer out = tls_flush(sealed);
          if (sealed) {
            asio::post(socket_.get_executor(),
                       [h = std::move(handler), sealed]() mutable { std::move(h)(sealed, std::size_t{0}); });
            return;
          }
          asio::async_write(socket_, out, std::move(handler));
        },
        token, &buffers);
  }

  // Plain TCP only: writes what the socket takes of `buffers` now, without
  // blocking, and returns how many bytes (0 with TLS, when it would block,
  // or on an error, which the next write() meets again).
  std::size_t try_write(std::span<const asio::const_buffer> buffers) noexcept;

  // Half-closes: no more writes; the peer reads end of stream after what
  // was written (with TLS, after a close_notify, sent best effort).
  void shutdown_send(asio_error_code& ec);
  // Closes both ways at once, cancelling what waits. Idempotent.
  void close() noexcept;

 private:
  bool tls_has_pending() const noexcept;
  std::size_t tls_read(asio::mutable_buffer into, asio_error_code& ec);
  // One write's plaintext, buffer by buffer: whole 16 KiB records are
  // sealed straight from `plain`, smaller pieces are gathered into a
  // record first (so small frames share records). tls_flush() seals what
  // is left and returns the write's ciphertext (valid until the next
  // write); its error: OpenSSL's, when a record could not be sealed.
  void tls_seal(asio::const_buffer plain);
  asio::const_buffer tls_flush(asio_error_code& ec);

  asio::ip::tcp::socket socket_;
  std::string remote_;
  std::unique_ptr<tls_session> tls_;  // null: plain TCP
};

}  // namespace switchyard::broker
