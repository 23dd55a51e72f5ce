#include "broker/byte_stream.hpp"

#include "broker/tls_context.hpp"

#include <boost/asio/ssl/error.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <sys/socket.h>

#include <cerrno>
#include <cstdint>
#include <vector>

namespace switchyard::broker {

namespace {
// A TLS record's first byte when it carries a handshake message (the
// ClientHello is the first thing a TLS client sends).
constexpr std::uint8_t tls_handshake_record = 0x16;
// Plaintext put into one record (TLS's maximum).
constexpr std::size_t record_plaintext = 16384;
// Staging buffers larger than this after a write are given back.
constexpr std::size_t keep_capacity = std::size_t{1} << 20;

asio_error_code ssl_error(unsigned long e) {
  return {static_cast<int>(e), asio::error::get_ssl_category()};
}
}  // namespace

// The server side of one TLS session over the stream's socket: reads
// records from the socket directly (a socket BIO on the non-blocking
// descriptor, so SSL_read never blocks), writes records into a memory BIO
// whose contents the stream writes to the socket itself. Loop thread.
class tls_session {
 public:
  tls_session(std::shared_ptr<tls_context> ctx, int fd) : ctx_(std::move(ctx)), ssl_(SSL_new(ctx_->native())) {
    if (!ssl_) throw std::bad_alloc();
    BIO* in = BIO_new_socket(fd, BIO_NOCLOSE);
    out_ = BIO_new(BIO_s_mem());
    if (!in || !out_) {
      BIO_free(in);
      BIO_free(out_);
      SSL_free(ssl_);
      throw std::bad_alloc();
    }
    SSL_set_bio(ssl_, in, out_);  // ssl_ owns both
    SSL_set_accept_state(ssl_);
  }
  ~tls_session() { SSL_free(ssl_); }
  tls_session(const tls_session&) = delete;
  tls_session& operator=(const tls_session&) = delete;

  // Moves what OpenSSL wrote into the memory BIO to cipher_; returns it.
  asio::const_buffer take_output() {
    const auto pending = static_cast<std::size_t>(BIO_pending(out_));
    if (cipher_.capacity() > keep_capacity && pending < keep_capacity) cipher_ = {};
    cipher_.resize(pending);
    if (pending > 0) BIO_read(out_, cipher_.data(), static_cast<int>(pending));
    return asio::buffer(cipher_);
  }

  std::shared_ptr<tls_context> ctx_;  // kept alive: a reload does not pull it from under the session
  SSL* ssl_;
  BIO* out_ = nullptr;  // owned by ssl_
  std::vector<std::uint8_t> plain_;   // staged plaintext of the write being sealed
  std::vector<std::uint8_t> cipher_;  // ciphertext of the write in flight
  std::string detail_;                // after the handshake: what was agreed, or why it failed
  std::string peer_subject_;  // the client certificate's subject, RFC 2253 ("CN=gw-1,O=Example"); empty: none
};

byte_stream::byte_stream(asio::ip::tcp::socket socket, std::shared_ptr<tls_context> tls) : socket_(std::move(socket)) {
  asio_error_code ec;
  const auto ep = socket_.remote_endpoint(ec);
  remote_ = ec ? "?" : ep.address().to_string() + ":" + std::to_string(ep.port());
  socket_.set_option(asio::ip::tcp::no_delay(true), ec);
  // Reads are readiness-based (read_some after wait_readable): never block.
  socket_.non_blocking(true, ec);
  if (tls) tls_ = std::make_unique<tls_session>(std::move(tls), socket_.native_handle());
}

byte_stream::byte_stream(byte_stream&&) noexcept = default;
byte_stream& byte_stream::operator=(byte_stream&&) noexcept = default;
byte_stream::~byte_stream() = default;

asio_error_code byte_stream::not_tls() noexcept {
  return make_error_code(boost::system::errc::protocol_not_supported);
}

asio::awaitable<asio_error_code> byte_stream::handshake() {
  using asio::redirect_error;
  using asio::use_awaitable;
  asio_error_code ec;
  // A plain client speaks first too (its hello): look at its first byte
  // without taking it, so the caller can answer in plain text.
  for (;;) {
    co_await socket_.async_wait(asio::ip::tcp::socket::wait_read, redirect_error(use_awaitable, ec));
    if (ec) co_return ec;
    std::uint8_t first = 0;
    const ssize_t n = ::recv(socket_.native_handle(), &first, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) co_return asio::error::eof;
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
      co_return asio_error_code(errno, asio::error::get_system_category());
    }
    if (first != tls_handshake_record) {
      tls_->detail_ = "the client's first byte is not a TLS handshake record: a plain client on a TLS port";
      co_return not_tls();
    }
    break;
  }
  for (;;) {
    ERR_clear_error();
    const int r = SSL_do_handshake(tls_->ssl_);
    const int err = r == 1 ? SSL_ERROR_NONE : SSL_get_error(tls_->ssl_, r);
    asio_error_code failure;
    if (err == SSL_ERROR_SSL) {
      failure = ssl_error(ERR_peek_last_error());
      tls_->detail_ = last_tls_error();
      const long verify = SSL_get_verify_result(tls_->ssl_);
      if (verify != X509_V_OK)
        tls_->detail_ += std::string(" (client certificate: ") + X509_verify_cert_error_string(verify) + ")";
    } else if (err == SSL_ERROR_SYSCALL) {
      failure = errno != 0 ? asio_error_code(errno, asio::error::get_system_category())
                           : asio_error_code(asio::error::eof);
      tls_->detail_ = "the client closed during the handshake";
    } else if (err == SSL_ERROR_ZERO_RETURN) {
      failure = asio::error::eof;
      tls_->detail_ = "the client closed during the handshake";
    }
    // What the handshake wrote (its next flight, or the alert telling the
    // client why it failed) goes out first.
    const asio::const_buffer out = tls_->take_output();
    if (out.size() > 0) {
      asio_error_code wec;
      co_await asio::async_write(socket_, out, redirect_error(use_awaitable, wec));
      if (wec && !failure) co_return wec;
    }
    if (failure) co_return failure;
    if (r == 1) break;
    if (err == SSL_ERROR_WANT_READ) {
      co_await socket_.async_wait(asio::ip::tcp::socket::wait_read, redirect_error(use_awaitable, ec));
      if (ec) co_return ec;
    } else if (err != SSL_ERROR_WANT_WRITE) {  // (the memory BIO never asks to wait for writing)
      tls_->detail_ = "unexpected OpenSSL state " + std::to_string(err);
      co_return ssl_error(0);
    }
  }
  tls_->detail_ = std::string(SSL_get_version(tls_->ssl_)) + " " + SSL_get_cipher_name(tls_->ssl_);
  if (X509* peer = SSL_get0_peer_certificate(tls_->ssl_)) {
    char name[512];
    X509_NAME_oneline(X509_get_subject_name(peer), name, sizeof name);
    tls_->detail_ += std::string(", client ") + name;
    if (BIO* mem = BIO_new(BIO_s_mem())) {
      if (X509_NAME_print_ex(mem, X509_get_subject_name(peer), 0, XN_FLAG_RFC2253) >= 0) {
        char* text = nullptr;
        const long n = BIO_get_mem_data(mem, &text);
        if (n > 0 && text) tls_->peer_subject_.assign(text, static_cast<std::size_t>(n));
      }
      BIO_free(mem);
    }
  }
  co_return asio_error_code{};
}

std::size_t byte_stream::send_plain(asio::const_buffer data) noexcept {
  const ssize_t n = ::send(socket_.native_handle(), data.data(), data.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  return n > 0 ? static_cast<std::size_t>(n) : 0;
}

const std::string& byte_stream::peer_subject() const noexcept {
  static const std::string none;
  return tls_ ? tls_->peer_subject_ : none;
}

std::string byte_stream::tls_description() const { return tls_ ? tls_->detail_ : std::string("plain TCP"); }

bool byte_stream::tls_has_pending() const noexcept {
  // Decrypted bytes only: an incomplete record waiting in OpenSSL's buffer
  // needs the socket's next bytes, so waiting on the socket is right then.
  return SSL_pending(tls_->ssl_) > 0;
}

std::size_t byte_stream::tls_read(asio::mutable_buffer into, asio_error_code& ec) {
  ec = {};
  if (into.size() == 0) return 0;
  ERR_clear_error();
  std::size_t n = 0;
  if (SSL_read_ex(tls_->ssl_, into.data(), into.size(), &n) == 1) return n;
  switch (SSL_get_error(tls_->ssl_, 0)) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
      ec = asio::error::would_block;
      break;
    case SSL_ERROR_ZERO_RETURN:
      ec = asio::error::eof;
      break;
    case SSL_ERROR_SYSCALL:
      ec = errno != 0 ? asio_error_code(errno, asio::error::get_system_category()) : asio_error_code(asio::error::eof);
      break;
    default:
      ec = ssl_error(ERR_peek_last_error());
      ERR_clear_error();
      break;
  }
  return 0;
}

void byte_stream::tls_stage(asio::const_buffer plain) {
  const auto* p = static_cast<const std::uint8_t*>(plain.data());
  tls_->plain_.insert(tls_->plain_.end(), p, p + plain.size());
}

asio::const_buffer byte_stream::tls_seal(asio_error_code& ec) {
  ec = {};
  auto& plain = tls_->plain_;
  ERR_clear_error();
  for (std::size_t at = 0; at < plain.size();) {
    const std::size_t len = std::min(record_plaintext, plain.size() - at);
    std::size_t written = 0;
    // Into the memory BIO: never would block.
    if (SSL_write_ex(tls_->ssl_, plain.data() + at, len, &written) != 1) {
      ec = ssl_error(ERR_peek_last_error());
      ERR_clear_error();
      plain.clear();
      return {};
    }
    at += written;
  }
  plain.clear();
  if (plain.capacity() > keep_capacity) plain = {};
  return tls_->take_output();
}

std::size_t byte_stream::available() noexcept {
  asio_error_code ec;
  const std::size_t n = socket_.available(ec);
  const std::size_t held = tls_ ? static_cast<std::size_t>(SSL_pending(tls_->ssl_)) : 0;
  return (ec ? 0 : n) + held;
}

void byte_stream::shutdown_send(asio_error_code& ec) {
  if (tls_) {
    // close_notify, best effort: a peer that misses it still reads end of
    // stream from the TCP half-close.
    ERR_clear_error();
    SSL_shutdown(tls_->ssl_);
    ERR_clear_error();
    const asio::const_buffer out = tls_->take_output();
    if (out.size() > 0) ::send(socket_.native_handle(), out.data(), out.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  }
  socket_.shutdown(asio::ip::tcp::socket::shutdown_send, ec);
}

void byte_stream::close() noexcept {
  asio_error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
}

}  // namespace switchyard::broker
