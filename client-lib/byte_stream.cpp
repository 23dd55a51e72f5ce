#include "byte_stream.hpp"

#include "switchyard/error.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

namespace switchyard::client_lib {

namespace {
// OpenSSL's errors on this thread as text (clears them).
std::string openssl_errors() {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(e, text, sizeof text);
    if (!out.empty()) out += "; ";
    out += text;
  }
  return out;
}
}  // namespace

std::error_code byte_stream::configure_tls(const tls_options& tls) {
  tls_options_ = tls;
  auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
  SSL_CTX* native = ctx->native_handle();
  ERR_clear_error();
  const auto failed = [this](const std::string& what) {
    const std::string why = openssl_errors();
    tls_error_ = what + (why.empty() ? "" : ": " + why);
    return make_error_code(errc::tls_failed);
  };
  if (SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION) != 1) return failed("cannot require TLS 1.2");
  SSL_CTX_set_options(native, SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF);
  if (tls.verify_server) {
    const int loaded = tls.ca_file.empty() ? SSL_CTX_set_default_verify_paths(native)
                                           : SSL_CTX_load_verify_locations(native, tls.ca_file.c_str(), nullptr);
    if (loaded != 1)
      return failed("tls ca_file " + (tls.ca_file.empty() ? "(system default)" : tls.ca_file) + " cannot be used");
    SSL_CTX_set_verify(native, SSL_VERIFY_PEER, nullptr);
  } else {
    SSL_CTX_set_verify(native, SSL_VERIFY_NONE, nullptr);
  }
  if (tls.cert_file.empty() != tls.key_file.empty()) return failed("tls cert_file and key_file go together");
  if (!tls.cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(native, tls.cert_file.c_str()) != 1)
      return failed("tls cert_file " + tls.cert_file + " cannot be used");
    if (SSL_CTX_use_PrivateKey_file(native, tls.key_file.c_str(), SSL_FILETYPE_PEM) != 1)
      return failed("tls key_file " + tls.key_file + " cannot be used");
    if (SSL_CTX_check_private_key(native) != 1)
      return failed("tls key_file " + tls.key_file + " does not match cert_file " + tls.cert_file);
  }
  tls_ctx_ = std::move(ctx);
  return {};
}

asio::awaitable<std::error_code> byte_stream::connect(const asio::ip::tcp::resolver::results_type& endpoints,
                                                      const std::string& host) {
  asio_error_code ec;
  co_await asio::async_connect(socket_, endpoints, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return ec;
  asio_error_code ignored;  // without TCP_NODELAY the stream still works, only slower
  socket_.set_option(asio::ip::tcp::no_delay(true), ignored);
  if (!tls_ctx_) co_return std::error_code{};

  tls_.emplace(socket_, *tls_ctx_);
  SSL* ssl = tls_->native_handle();
  // Asio asks OpenSSL to free a session's record buffers whenever they are
  // empty, which costs an allocation and a free per record read or
  // written; a client has few sessions, so it keeps them.
  SSL_clear_mode(ssl, SSL_MODE_RELEASE_BUFFERS);
  const std::string& name = tls_options_.server_name.empty() ? host : tls_options_.server_name;
  asio_error_code parse_ec;
  const bool is_ip = !asio::ip::make_address(name, parse_ec).is_unspecified() && !parse_ec;
  ERR_clear_error();
  if (!is_ip) SSL_set_tlsext_host_name(ssl, name.c_str());  // SNI: DNS names only
  if (tls_options_.verify_server) {
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
    const int set = is_ip ? X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str()) : SSL_set1_host(ssl, name.c_str());
    if (set != 1) {
      tls_error_ = "cannot verify the broker as \"" + name + "\": " + openssl_errors();
      co_return make_error_code(errc::tls_failed);
    }
  }
  co_await tls_->async_handshake(asio::ssl::stream_base::client, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    tls_error_ = ec.message();
    if (const long v = SSL_get_verify_result(ssl); v != X509_V_OK)
      tls_error_ += std::string(" (broker certificate: ") + X509_verify_cert_error_string(v) + ")";
    if (ec == asio::error::eof || ec == asio::ssl::error::stream_truncated)
      tls_error_ +=
          " (the broker closed the connection: it may require a client certificate, or be at its "
          "connection cap)";
    if (!socket_.is_open()) co_return ec;  // closed meanwhile (the connect timeout): not a TLS verdict
    co_return make_error_code(errc::tls_failed);
  }
  co_return std::error_code{};
}

void byte_stream::close() noexcept {
  asio_error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
}

}  // namespace switchyard::client_lib
