#pragma once
// switchyard-cli: the operators' command-line tool (ping, pub, sub, send,
// streams, routes, leases, inboxes, pending, flags, stats, conns, drain,
// cluster status), over the client library, and the credentials an auth
// file needs (keygen, hash-token), made locally. admin/command.hpp says
// which file holds which command.

#include <iosfwd>

namespace switchyard::admin {

// Exit codes: distinct per kind of failure, so scripts can tell them apart.
enum exit_code : int {
  exit_ok = 0,
  exit_usage = 1,         // bad flags or arguments (nothing was sent)
  exit_connection = 2,    // could not connect, or the connection was lost or timed out
  exit_server_error = 3,  // the broker answered an error (not_found, bad_request, ...)
  exit_refused = 4,       // the broker refused the credentials (unauthorized) or the operation (forbidden)
  exit_local = 5,         // keygen / hash-token could not do it here (the file exists, cannot write, no randomness)
  exit_no_route = 6,      // send: the route key has no route (no live entry, or its gateway is not connected)
};

// Parses argv, runs the command against the broker (keygen and hash-token:
// locally, without one) and writes its result to `out` (human-readable, or
// one JSON object with --json) and errors to `err` (with --json, also a
// JSON error object to `out`). `in`: hash-token reads the token from it,
// pub and send the message when it is "-". sub and streams tail --follow
// run until SIGINT or SIGTERM (handled while they run: exit 0).
// Reads the environment (SWITCHYARD_TOKEN, SWITCHYARD_KEY_FILE) and, for
// keygen's terminal warning and hash-token's hidden input, whether file
// descriptors 0 and 1 are terminals. Returns the exit code. Blocking; one
// connection per call. Not thread-safe (installs the client library's log
// sink while it connects).
int run(int argc, const char* const* argv, std::istream& in, std::ostream& out, std::ostream& err);

}  // namespace switchyard::admin
