#include "broker/transport/tls_context.hpp"

#include "broker/config/server_config.hpp"
#include "tls/openssl_error.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

namespace switchyard::broker {

std::expected<std::shared_ptr<tls_context>, std::string> tls_context::load(const server_config& cfg) {
  ERR_clear_error();
  std::shared_ptr<tls_context> t(new tls_context());
  SSL_CTX* ctx = t->native();
  const auto failed = [](const std::string& what) {
    const std::string why = tls::last_error();
    return std::unexpected(what + (why.empty() ? "" : ": " + why));
  };
  if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1) return failed("cannot require TLS 1.2");
  // No renegotiation (TLS 1.2): a session's reads never need to write. No
  // session tickets: clients do not resume, and each costs a write per
  // handshake. A peer that closes without close_notify reads as end of
  // stream, as a plain connection's close does.
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_CIPHER_SERVER_PREFERENCE);
  SSL_CTX_set_num_tickets(ctx, 0);
  // Reads: OpenSSL reads ahead, up to read_buffer bytes per recv (several
  // records), and byte_stream decrypts record after record from that
  // buffer. A session's record buffers are freed while empty, so an idle
  // TLS connection holds none (allocating one per read or write call is
  // small beside the recv or the records' encryption).
  SSL_CTX_set_read_ahead(ctx, 1);
  SSL_CTX_set_default_read_buffer_len(ctx, read_buffer);
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  if (SSL_CTX_use_certificate_chain_file(ctx, cfg.tls_cert.c_str()) != 1)
    return failed("tls-cert " + cfg.tls_cert + " cannot be used");
  if (SSL_CTX_use_PrivateKey_file(ctx, cfg.tls_key.c_str(), SSL_FILETYPE_PEM) != 1)
    return failed("tls-key " + cfg.tls_key + " cannot be used");
  if (SSL_CTX_check_private_key(ctx) != 1)
    return failed("tls-key " + cfg.tls_key + " does not match tls-cert " + cfg.tls_cert);
  if (!cfg.tls_ca.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, cfg.tls_ca.c_str(), nullptr) != 1)
      return failed("tls-ca " + cfg.tls_ca + " cannot be used");
    // The CAs' names go into the CertificateRequest, so a client with
    // several certificates picks one these CAs signed.
    if (STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(cfg.tls_ca.c_str()))
      SSL_CTX_set_client_CA_list(ctx, names);
  }
  t->verify_client_ = cfg.tls_verify_client;
  if (cfg.tls_verify_client) SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  t->subject_ = tls::certificate_subject(ctx);
  ERR_clear_error();
  return t;
}

}  // namespace switchyard::broker
