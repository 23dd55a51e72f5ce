#pragma once
// OpenSSL reports why a call failed in a per-thread error queue; this
// turns it into text for a log line or an error message.

#include <string>

struct ssl_ctx_st;

namespace switchyard::tls {

// The calling thread's OpenSSL errors, oldest first, joined by "; " ("" if
// none); the queue is left empty.
std::string last_error();

// The subject of the certificate `ctx` serves, for logs
// ("/CN=broker.example"); "" when it has none.
std::string certificate_subject(ssl_ctx_st* ctx);

}  // namespace switchyard::tls
