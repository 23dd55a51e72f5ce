#pragma once
// A device's TLS stream (wss://, server side), what Beast's
// websocket::stream runs over: OpenSSL reads and writes the TCP socket's
// descriptor itself (non-blocking), and the stream waits for the socket
// with Asio's async_wait when OpenSSL wants to read or write.
//
// Why not asio::ssl::stream: it keeps two 17 KiB buffers of its own and a
// BIO pair that grows two more per socket, about 64 KiB per socket even
// while idle (measured: 74 KB per idle wss:// socket against 10 KB per
// ws:// one; docs/benchmarks.md). Here an idle socket holds the SSL object
// only: OpenSSL's record buffers are given back while empty
// (SSL_MODE_RELEASE_BUFFERS, set by device_tls).
//
// The contract of an Asio AsyncStream: one read and one write may be
// under way at once; completions are never run inside the initiating call.
// Everything runs on the thread of the socket's io_context.

#include "gateway/device_tls.hpp"

#include "common/asio.hpp"

#include <boost/asio/compose.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core/role.hpp>
#include <boost/beast/websocket/teardown.hpp>

#include <cstddef>
#include <memory>
#include <optional>
#include <utility>

struct ssl_st;

namespace switchyard::edge {

class tls_socket {
 public:
  using executor_type = asio::ip::tcp::socket::executor_type;
  using next_layer_type = asio::ip::tcp::socket;

  // Takes the accepted socket (made non-blocking); `tls` is kept while the
  // stream lives. Nothing is read or written before async_handshake().
  tls_socket(asio::ip::tcp::socket socket, std::shared_ptr<device_tls> tls);
  ~tls_socket();
  tls_socket(const tls_socket&) = delete;
  tls_socket& operator=(const tls_socket&) = delete;

  executor_type get_executor() noexcept { return socket_.get_executor(); }
  next_layer_type& next_layer() noexcept { return socket_; }

  // The server side of the handshake. Completes with void(error_code).
  template <class Token>
  auto async_handshake(Token&& token) {
    return asio::async_compose<Token, void(asio_error_code)>(io_op<handshake_step, false>{*this, handshake_step{this}},
                                                             token, socket_);
  }
  // Decrypted bytes into the first non-empty buffer of `buffers` (which
  // the caller keeps alive until completion). void(error_code, size_t);
  // asio::error::eof once the device closed (close_notify or not).
  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    return asio::async_compose<Token, void(asio_error_code, std::size_t)>(
        io_op<read_step<MutableBuffers>, true>{*this, read_step<MutableBuffers>{this, buffers}}, token, socket_);
  }
  // Encrypts and writes a prefix of `buffers` (the caller keeps them alive
  // until completion): up to 16 KiB of several buffers go as one record.
  // void(error_code, size_t).
  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    return asio::async_compose<Token, void(asio_error_code, std::size_t)>(
        io_op<write_step<ConstBuffers>, true>{*this, write_step<ConstBuffers>{this, buffers}}, token, socket_);
  }

  // Sends close_notify if the socket takes it now (never waits).
  void shutdown_now() noexcept;

  // What one OpenSSL call came to: done (n bytes), or wait for the socket
  // and call again, or failed (ec; asio::error::eof for the device's close).
  enum class step { done, want_read, want_write, failed };
  struct outcome {
    step next;
    std::size_t n = 0;
    asio_error_code ec{};
  };
  outcome handshake();
  outcome read(void* data, std::size_t size);
  outcome write(const void* data, std::size_t size);
  // Bytes waiting in OpenSSL (decrypted, or records read ahead): a read
  // would not need the socket.
  bool pending() const noexcept;

 private:
  // Each step: one OpenSSL call; `reads`: wait for input before the first.
  struct handshake_step {
    static constexpr bool reads = false;
    tls_socket* s;
    outcome operator()() const { return s->handshake(); }
  };
  template <class Buffers>
  struct read_step {
    static constexpr bool reads = true;
    tls_socket* s;
    Buffers buffers;
    outcome operator()() const {
      for (auto it = asio::buffer_sequence_begin(buffers); it != asio::buffer_sequence_end(buffers); ++it) {
        const asio::mutable_buffer b = *it;
        if (b.size() != 0) return s->read(b.data(), b.size());
      }
      return {step::done};
    }
  };
  template <class Buffers>
  struct write_step {
    static constexpr bool reads = false;
    tls_socket* s;
    Buffers buffers;
    outcome operator()() const {
      auto it = asio::buffer_sequence_begin(buffers);
      const auto end = asio::buffer_sequence_end(buffers);
      while (it != end && asio::const_buffer(*it).size() == 0) ++it;
      if (it == end) return {step::done};
      const asio::const_buffer first = *it;
      if (std::next(it) == end || first.size() >= record_bytes) return s->write(first.data(), first.size());
      // Several buffers (a frame's header and its payload): one record.
      // The same bytes are copied again on a retry, as OpenSSL requires
      // (SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER: the copy may move).
      const std::size_t n = asio::buffer_copy(asio::buffer(scratch(), record_bytes), buffers);
      return s->write(scratch(), n);
    }
  };
  static constexpr std::size_t record_bytes = 16 * 1024;
  static char* scratch() noexcept;  // this thread's record_bytes

  // The composed operation: `attempt` until it is done or failed, waiting
  // for the socket in between. A result reached before any wait is
  // delivered through a post (never inside the initiating call).
  template <class Attempt, bool Sized>
  struct io_op {
    tls_socket& s;
    Attempt attempt;
    bool waited = false;
    std::optional<outcome> result = {};

    template <class Self>
    void operator()(Self& self, asio_error_code ec = {}) {
      if (result) return finish(self, *result);
      if (ec) return finish(self, {step::failed, 0, ec});
      // A read waits for the socket first, unless OpenSSL holds decrypted
      // bytes: the common case of an idle socket costs no failed recv.
      if constexpr (Attempt::reads) {
        if (!waited && !s.pending()) {
          waited = true;
          return s.socket_.async_wait(asio::socket_base::wait_read, std::move(self));
        }
      }
      const outcome r = attempt();
      if (r.next == step::want_read || r.next == step::want_write) {
        waited = true;
        return s.socket_.async_wait(
            r.next == step::want_read ? asio::socket_base::wait_read : asio::socket_base::wait_write, std::move(self));
      }
      if (waited) return finish(self, r);
      result = r;
      waited = true;
      asio::post(s.get_executor(), std::move(self));
    }
    template <class Self>
    void finish(Self& self, const outcome& r) {
      if constexpr (Sized)
        self.complete(r.ec, r.n);
      else
        self.complete(r.ec);
    }
  };

  // One OpenSSL call on ssl_, `openssl(size_t& n) -> int`, and what it
  // came to (settle). Defined and used in tls_socket.cpp only.
  template <class Call>
  outcome call(Call openssl);
  outcome settle(int ret, std::size_t n);

  asio::ip::tcp::socket socket_;
  std::shared_ptr<device_tls> tls_;
  ssl_st* ssl_ = nullptr;
};

// Beast's WebSocket close over a tls_socket: close_notify (not waiting for
// the device's), then what Beast does for a TCP socket (shutdown, read to
// the end, close).
void teardown(boost::beast::role_type role, tls_socket& s, asio_error_code& ec);

template <class Handler>
void async_teardown(boost::beast::role_type role, tls_socket& s, Handler&& handler) {
  s.shutdown_now();
  boost::beast::websocket::async_teardown(role, s.next_layer(), std::forward<Handler>(handler));
}

}  // namespace switchyard::edge
