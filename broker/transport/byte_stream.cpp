#include "broker/transport/byte_stream.hpp"

#include "broker/transport/tls_context.hpp"
#include "tls/openssl_error.hpp"

#include <boost/asio/ssl/error.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

namespace switchyard::broker {

namespace {
// A TLS record's first byte when it carries a handshake message (the
// ClientHello is the first thing a TLS client sends).
constexpr std::uint8_t tls_handshake_record = 0x16;
// Plaintext put into one record (TLS's maximum).
constexpr std::size_t record_plaintext = 16384;
// Ciphertext buffers larger than this after a write are given back.
constexpr std::size_t keep_capacity = std::size_t{1} << 20;

asio_error_code ssl_error(unsigned long e) { return {static_cast<int>(e), asio::error::get_ssl_category()}; }

// The write side's BIO: appends what OpenSSL writes (records, handshake
// flights, alerts) to the std::vector<std::uint8_t> in its data pointer.
// Never fails and never blocks, so SSL_write completes in one call; the
// stream writes the vector to the socket itself.
// Out of memory fails the write (OpenSSL sees -1); nothing is thrown
// through OpenSSL.
int out_write(BIO* b, const char* data, int len) noexcept {
  auto* into = static_cast<std::vector<std::uint8_t>*>(BIO_get_data(b));
  if (len <= 0) return 0;
  const auto* p = reinterpret_cast<const std::uint8_t*>(data);
  try {
    into->insert(into->end(), p, p + len);
  } catch (const std::bad_alloc&) {
    return -1;
  }
  return len;
}

long out_ctrl(BIO* b, int cmd, long /*num*/, void* /*ptr*/) noexcept {
  switch (cmd) {
    case BIO_CTRL_FLUSH:
      return 1;
    case BIO_CTRL_PENDING:
    case BIO_CTRL_WPENDING:
      return static_cast<long>(static_cast<std::vector<std::uint8_t>*>(BIO_get_data(b))->size());
    default:
      return 0;
  }
}

int out_create(BIO* b) noexcept {
  BIO_set_init(b, 1);
  return 1;
}

// Made once, on first use; never freed (one per process).
const BIO_METHOD* out_method() {
  static BIO_METHOD* const method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "switchyard tls output");
    if (!m || BIO_meth_set_write(m, out_write) != 1 || BIO_meth_set_ctrl(m, out_ctrl) != 1 ||
        BIO_meth_set_create(m, out_create) != 1)
      throw std::bad_alloc();
    return m;
  }();
  return method;
}

// Where the small pieces of a gather write are put together into one
// record's plaintext. Used only within one write's sealing (which ends
// with the stage empty), so one per thread serves every connection.
struct record_stage {
  std::array<std::uint8_t, record_plaintext> bytes;
  std::size_t size = 0;
};
thread_local record_stage stage;
}  // namespace

// The server side of one TLS session over the stream's socket: reads
// records from the socket directly (a socket BIO on the non-blocking
// descriptor with read-ahead, so SSL_read never blocks and one recv takes
// several records), writes records into `pending_` (out_method) which the
// stream writes to the socket itself. Loop thread.
class tls_session {
 public:
  tls_session(std::shared_ptr<tls_context> ctx, int fd) : ctx_(std::move(ctx)), ssl_(SSL_new(ctx_->native())) {
    if (!ssl_) throw std::bad_alloc();
    BIO* in = BIO_new_socket(fd, BIO_NOCLOSE);
    BIO* out = BIO_new(out_method());
    if (!in || !out) {
      BIO_free(in);
      BIO_free(out);
      SSL_free(ssl_);
      throw std::bad_alloc();
    }
    BIO_set_data(out, &pending_);
    SSL_set_bio(ssl_, in, out);  // ssl_ owns both
    SSL_set_accept_state(ssl_);
  }
  ~tls_session() { SSL_free(ssl_); }
  tls_session(const tls_session&) = delete;
  tls_session& operator=(const tls_session&) = delete;

  // What OpenSSL wrote since the last call, to write to the socket now:
  // moved to in_flight_ (valid until the next call; the caller has at most
  // one write outstanding, so the previous one has completed).
  asio::const_buffer take_output() {
    in_flight_.swap(pending_);
    pending_.clear();
    if (pending_.capacity() > keep_capacity) pending_ = {};
    return asio::buffer(in_flight_);
  }

  // Encrypts `len` bytes at `p` into records (appended to pending_).
  bool seal(const std::uint8_t* p, std::size_t len) {
    std::size_t written = 0;
    return SSL_write_ex(ssl_, p, len, &written) == 1;  // out_method never fails: all or an error
  }

  std::shared_ptr<tls_context> ctx_;  // kept alive: a reload does not pull it from under the session
  SSL* ssl_;
  std::vector<std::uint8_t> pending_;    // ciphertext OpenSSL wrote, not yet handed to a socket write
  std::vector<std::uint8_t> in_flight_;  // ciphertext of the socket write in flight (or the last one)
  bool seal_failed_ = false;             // an SSL_write of the write being sealed failed
  // The last read filled its buffer: OpenSSL may hold whole records read
  // ahead from the socket, which may then be empty (wait_readable must not
  // wait on it). Cleared when a read ends with SSL_ERROR_WANT_READ.
  bool more_ = false;
  // An error met after a read had already taken bytes: returned by the
  // next read (so the bytes are handled first).
  asio_error_code deferred_;
  std::string detail_;        // after the handshake: what was agreed, or why it failed
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

asio_error_code byte_stream::not_tls() noexcept { return make_error_code(boost::system::errc::protocol_not_supported); }

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
      tls_->detail_ = tls::last_error();
      const long verify = SSL_get_verify_result(tls_->ssl_);
      if (verify != X509_V_OK)
        tls_->detail_ += std::string(" (client certificate: ") + X509_verify_cert_error_string(verify) + ")";
    } else if (err == SSL_ERROR_SYSCALL) {
      failure =
          errno != 0 ? asio_error_code(errno, asio::error::get_system_category()) : asio_error_code(asio::error::eof);
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
  // The client's first records (its hello) may have come with the end of
  // the handshake and been read ahead: the first wait_readable() must not
  // wait on the socket for them.
  tls_->more_ = true;
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
  // Decrypted bytes, whole records read ahead (after a read that filled
  // its buffer), or an error to report. An incomplete record waiting in
  // OpenSSL's buffer needs the socket's next bytes: waiting on the socket
  // is right then.
  return tls_->more_ || tls_->deferred_ || SSL_pending(tls_->ssl_) > 0;
}

std::size_t byte_stream::tls_read(asio::mutable_buffer into, asio_error_code& ec) {
  ec = {};
  if (into.size() == 0) return 0;
  if (tls_->deferred_) {
    ec = std::exchange(tls_->deferred_, {});
    return 0;
  }
  auto* p = static_cast<std::uint8_t*>(into.data());
  std::size_t total = 0;
  ERR_clear_error();
  // Record after record until the buffer is full or the socket has no
  // more: with read-ahead each recv takes what the socket holds (up to the
  // session's read buffer), so this is one system call for many records.
  // Bounded by the buffer (each successful call takes at least one byte).
  while (total < into.size()) {
    std::size_t n = 0;
    if (SSL_read_ex(tls_->ssl_, p + total, into.size() - total, &n) == 1) {
      total += n;
      continue;
    }
    asio_error_code failure;
    switch (SSL_get_error(tls_->ssl_, 0)) {
      case SSL_ERROR_WANT_READ:
      case SSL_ERROR_WANT_WRITE:
        tls_->more_ = false;
        if (total == 0) ec = asio::error::would_block;
        return total;
      case SSL_ERROR_ZERO_RETURN:
        failure = asio::error::eof;
        break;
      case SSL_ERROR_SYSCALL:
        failure =
            errno != 0 ? asio_error_code(errno, asio::error::get_system_category()) : asio_error_code(asio::error::eof);
        break;
      default:
        failure = ssl_error(ERR_peek_last_error());
        ERR_clear_error();
        break;
    }
    tls_->more_ = false;
    if (total == 0)
      ec = failure;
    else
      tls_->deferred_ = failure;
    return total;
  }
  tls_->more_ = true;
  return total;
}

void byte_stream::tls_seal(asio::const_buffer plain) {
  if (tls_->seal_failed_) return;
  const auto* p = static_cast<const std::uint8_t*>(plain.data());
  std::size_t left = plain.size();
  while (left > 0) {
    if (stage.size == 0 && left >= record_plaintext) {
      // Whole records straight from the caller's buffer: no copy.
      const std::size_t whole = left - left % record_plaintext;
      if (!tls_->seal(p, whole)) {
        tls_->seal_failed_ = true;
        return;
      }
      p += whole;
      left -= whole;
      continue;
    }
    const std::size_t take = std::min(left, record_plaintext - stage.size);
    std::memcpy(stage.bytes.data() + stage.size, p, take);
    stage.size += take;
    p += take;
    left -= take;
    if (stage.size == record_plaintext) {
      stage.size = 0;
      if (!tls_->seal(stage.bytes.data(), record_plaintext)) {
        tls_->seal_failed_ = true;
        return;
      }
    }
  }
}

asio::const_buffer byte_stream::tls_flush(asio_error_code& ec) {
  ec = {};
  if (!tls_->seal_failed_ && stage.size > 0 && !tls_->seal(stage.bytes.data(), stage.size)) tls_->seal_failed_ = true;
  stage.size = 0;
  if (std::exchange(tls_->seal_failed_, false)) {
    ec = ssl_error(ERR_peek_last_error());
    ERR_clear_error();
    return {};
  }
  return tls_->take_output();
}

std::size_t byte_stream::try_write(std::span<const asio::const_buffer> buffers) noexcept {
  if (tls_) return 0;
  constexpr std::size_t max_iov = 64;  // the rest, if any, is the writer's
  std::array<iovec, max_iov> iov;
  std::size_t count = 0;
  for (const auto& b : buffers) {
    if (count == max_iov) break;
    iov[count++] = {const_cast<void*>(b.data()), b.size()};
  }
  msghdr msg{};
  msg.msg_iov = iov.data();
  msg.msg_iovlen = count;
  const ssize_t n = ::sendmsg(socket_.native_handle(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  return n > 0 ? static_cast<std::size_t>(n) : 0;
}

std::size_t byte_stream::available() noexcept {
  asio_error_code ec;
  const std::size_t n = socket_.available(ec);
  // With TLS, plus what the session holds decrypted, and (a guess, this is
  // a hint) a record's worth when it may hold whole records read ahead.
  const std::size_t held =
      tls_ ? static_cast<std::size_t>(SSL_pending(tls_->ssl_)) + (tls_->more_ ? record_plaintext : 0) : 0;
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
