#pragma once
// OpenSSL reports why a call failed in a per-thread error queue; this
// turns it into text for a log line or an error message.

#include <string>

namespace switchyard::tls {

// The calling thread's OpenSSL errors, oldest first, joined by "; " ("" if
// none); the queue is left empty.
std::string last_error();

}  // namespace switchyard::tls
