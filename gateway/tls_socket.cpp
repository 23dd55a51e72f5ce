#include "gateway/tls_socket.hpp"

#include <boost/asio/ssl/error.hpp>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <cerrno>

namespace switchyard::edge {

tls_socket::tls_socket(asio::ip::tcp::socket socket, std::shared_ptr<device_tls> tls)
    : socket_(std::move(socket)), tls_(std::move(tls)), ssl_(SSL_new(tls_->native())) {
  asio_error_code ignored;
  socket_.non_blocking(true, ignored);
  if (ssl_ && SSL_set_fd(ssl_, socket_.native_handle()) == 1) {
    SSL_set_accept_state(ssl_);
  } else {
    SSL_free(ssl_);
    ssl_ = nullptr;  // every operation fails
  }
  ERR_clear_error();
}

tls_socket::~tls_socket() { SSL_free(ssl_); }

char* tls_socket::scratch() noexcept {
  thread_local char buffer[record_bytes];
  return buffer;
}

tls_socket::outcome tls_socket::settle(int ret, std::size_t n) {
  if (ret == 1) return {step::done, n};
  const int error = SSL_get_error(ssl_, ret);
  outcome r{step::failed};
  switch (error) {
    case SSL_ERROR_WANT_READ:
      r.next = step::want_read;
      break;
    case SSL_ERROR_WANT_WRITE:
      r.next = step::want_write;
      break;
    case SSL_ERROR_ZERO_RETURN:  // close_notify, or (SSL_OP_IGNORE_UNEXPECTED_EOF) the TCP end
      r.ec = asio::error::eof;
      break;
    case SSL_ERROR_SYSCALL:
      r.ec = errno != 0 ? asio_error_code(errno, asio::error::get_system_category()) : asio::error::eof;
      break;
    default:  // SSL_ERROR_SSL: a protocol error (not TLS, no common cipher, a bad record)
      r.ec = asio_error_code(static_cast<int>(ERR_peek_last_error()), asio::error::get_ssl_category());
      break;
  }
  ERR_clear_error();
  return r;
}

template <class Call>
tls_socket::outcome tls_socket::call(Call openssl) {
  if (!ssl_) return {step::failed, 0, asio::error::no_memory};
  ERR_clear_error();  // SSL_get_error reads the queue: only this call's errors
  errno = 0;
  std::size_t n = 0;
  const int ret = openssl(n);
  return settle(ret, n);
}

tls_socket::outcome tls_socket::handshake() {
  return call([this](std::size_t&) { return SSL_do_handshake(ssl_); });
}

tls_socket::outcome tls_socket::read(void* data, std::size_t size) {
  return call([&](std::size_t& n) { return SSL_read_ex(ssl_, data, size, &n); });
}

tls_socket::outcome tls_socket::write(const void* data, std::size_t size) {
  return call([&](std::size_t& n) { return SSL_write_ex(ssl_, data, size, &n); });
}

bool tls_socket::pending() const noexcept { return ssl_ && SSL_has_pending(ssl_) == 1; }

void tls_socket::shutdown_now() noexcept {
  if (!ssl_ || !SSL_is_init_finished(ssl_)) return;
  ERR_clear_error();
  SSL_shutdown(ssl_);  // queues close_notify; a socket that cannot take it now does without
  ERR_clear_error();
}

void teardown(boost::beast::role_type role, tls_socket& s, asio_error_code& ec) {
  s.shutdown_now();
  boost::beast::websocket::teardown(role, s.next_layer(), ec);
}

}  // namespace switchyard::edge
