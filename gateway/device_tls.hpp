#pragma once
// The certificate devices' wss:// sockets are terminated with: an OpenSSL 3
// server context built from --tls-cert and --tls-key, TLS 1.2 at least.
// Immutable once built; a SIGHUP builds a new one, which new sockets use
// while open ones keep theirs (each tls_socket holds a shared_ptr to its
// context).

#include <expected>
#include <memory>
#include <string>

struct ssl_ctx_st;

namespace switchyard::edge {

class device_tls {
 public:
  // Reads the certificate chain and its key (PEM, the key unencrypted).
  // Errors: a message naming the file and OpenSSL's reason (unreadable,
  // not PEM, the key does not match the certificate).
  static std::expected<std::shared_ptr<device_tls>, std::string> load(const std::string& cert_file,
                                                                      const std::string& key_file);
  ~device_tls();
  device_tls(const device_tls&) = delete;
  device_tls& operator=(const device_tls&) = delete;

  // The OpenSSL context, for tls_socket's SSL objects.
  ssl_ctx_st* native() const noexcept { return ctx_; }
  // The certificate's subject, for logs ("/CN=gateway.example").
  const std::string& subject() const noexcept { return subject_; }

 private:
  device_tls() = default;
  ssl_ctx_st* ctx_ = nullptr;
  std::string subject_;
};

}  // namespace switchyard::edge
