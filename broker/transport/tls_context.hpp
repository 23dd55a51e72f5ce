#pragma once
// The broker's TLS settings made usable: an OpenSSL 3 context (through
// Asio SSL) built from --tls-cert, --tls-key, --tls-ca and
// --tls-verify-client, with TLS 1.2 as the minimum version. A context is
// immutable once built; a SIGHUP builds a new one (server::reload), which
// new connections use while open ones keep theirs (each session holds a
// reference to its context).

#include "common/asio.hpp"

#include <boost/asio/ssl/context.hpp>

#include <cstddef>
#include <expected>
#include <memory>
#include <string>

namespace switchyard::broker {

struct server_config;

class tls_context {
 public:
  // Ciphertext a session's recv may take at once (4 full records).
  static constexpr std::size_t read_buffer = 4 * (16384 + 256);

  // Builds the context from the config's TLS settings (which must be on:
  // cfg.tls_cert set). Errors: a message naming the file and OpenSSL's
  // reason (unreadable, not PEM, key does not match the certificate).
  static std::expected<std::shared_ptr<tls_context>, std::string> load(const server_config& cfg);

  // The OpenSSL context; sessions made from it keep `this` alive.
  SSL_CTX* native() noexcept { return ctx_.native_handle(); }
  // The certificate's subject, for logs ("CN=broker.example").
  const std::string& subject() const noexcept { return subject_; }
  bool verifies_clients() const noexcept { return verify_client_; }

 private:
  tls_context() : ctx_(asio::ssl::context::tls_server) {}
  asio::ssl::context ctx_;
  std::string subject_;
  bool verify_client_ = false;
};

}  // namespace switchyard::broker
