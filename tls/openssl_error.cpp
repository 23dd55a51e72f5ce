#include "tls/openssl_error.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

namespace switchyard::tls {

std::string last_error() {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(e, text, sizeof text);
    if (!out.empty()) out += "; ";
    out += text;
  }
  return out;
}

std::string certificate_subject(ssl_ctx_st* ctx) {
  X509* cert = SSL_CTX_get0_certificate(ctx);
  if (!cert) return {};
  char name[512];
  X509_NAME_oneline(X509_get_subject_name(cert), name, sizeof name);
  return name;
}

}  // namespace switchyard::tls
