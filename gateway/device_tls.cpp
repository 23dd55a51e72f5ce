#include "gateway/device_tls.hpp"

#include "tls/openssl_error.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>

namespace switchyard::edge {

std::expected<std::shared_ptr<device_tls>, std::string> device_tls::load(const std::string& cert_file,
                                                                         const std::string& key_file) {
  ERR_clear_error();
  std::shared_ptr<device_tls> t(new device_tls());
  t->ctx_ = SSL_CTX_new(TLS_server_method());
  SSL_CTX* ctx = t->ctx_;
  const auto failed = [](const std::string& what) {
    const std::string why = tls::last_error();
    return std::unexpected(what + (why.empty() ? "" : ": " + why));
  };
  if (!ctx) return failed("cannot make a TLS context");
  if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1) return failed("cannot require TLS 1.2");
  // No renegotiation (TLS 1.2). A device that closes without close_notify
  // reads as the end of the stream, as a plain socket's close does.
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_IGNORE_UNEXPECTED_EOF);
  // An idle socket holds no record buffers (they are taken for a read or
  // a write and given back): most devices' sockets are idle most of the
  // time, and memory per socket is what bounds a gateway. Writes may be
  // partial (a record at a time) and retried from a moved copy
  // (tls_socket's scratch record).
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS | SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // Reads take what the socket has (one recv for several records, not two
  // per record); what is left over is decrypted from the buffer before
  // the socket is waited for again (tls_socket::pending).
  SSL_CTX_set_read_ahead(ctx, 1);
  if (SSL_CTX_use_certificate_chain_file(ctx, cert_file.c_str()) != 1)
    return failed("tls-cert " + cert_file + " cannot be used");
  if (SSL_CTX_use_PrivateKey_file(ctx, key_file.c_str(), SSL_FILETYPE_PEM) != 1)
    return failed("tls-key " + key_file + " cannot be used");
  if (SSL_CTX_check_private_key(ctx) != 1)
    return failed("tls-key " + key_file + " does not match tls-cert " + cert_file);
  t->subject_ = tls::certificate_subject(ctx);
  ERR_clear_error();
  return t;
}

device_tls::~device_tls() { SSL_CTX_free(ctx_); }

}  // namespace switchyard::edge
