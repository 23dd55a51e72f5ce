#include "tls/openssl_error.hpp"

#include <openssl/err.h>

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

}  // namespace switchyard::tls
