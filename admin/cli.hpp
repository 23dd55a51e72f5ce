#pragma once
// switchyard-cli: the operators' command-line tool (streams list / info /
// retention / read, routes, leases, ping, drain), over the client library.

#include <iosfwd>

namespace switchyard::admin {

// Exit codes: distinct per kind of failure, so scripts can tell them apart.
enum exit_code : int {
  exit_ok = 0,
  exit_usage = 1,         // bad flags or arguments (nothing was sent)
  exit_connection = 2,    // could not connect, or the connection was lost or timed out
  exit_server_error = 3,  // the broker answered an error (not_found, bad_request, ...)
};

// Parses argv, runs the command against the broker and writes its result
// to `out` (human-readable, or one JSON object with --json) and errors to
// `err` (with --json, also a JSON error object to `out`). Returns the exit
// code. Blocking; one connection per call.
int run(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace switchyard::admin
