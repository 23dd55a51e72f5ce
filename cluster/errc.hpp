#pragma once
// Errors of the cluster engines' clients (etcd, NATS). What etcd or NATS
// reports is translated into these where it is read: etcd_client for etcd's
// gateway answers, nats_link for the NATS client's status codes.

#include <system_error>

namespace switchyard::cluster {

enum class errc {
  unreachable = 1,    // no endpoint answered (connection refused, reset, name not resolved)
  timeout,            // an endpoint did not answer within the call's deadline
  bad_response,       // an answer that is not what the API documents (status, JSON shape)
  lease_not_found,    // the etcd lease expired or was revoked
  compacted,          // a watch asked for a revision etcd has compacted away
  compare_failed,     // an etcd transaction's compare did not hold (the key moved on)
  queue_full,         // the bounded queue to or from the engine is full; the message was dropped
  payload_too_large,  // a NATS message over the server's max_payload
  closed,             // the client was stopped, or the engine closed the connection for good
  invalid_argument,   // an empty key, subject or endpoint list, ...
};

const std::error_category& cluster_category() noexcept;

inline std::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), cluster_category()}; }

}  // namespace switchyard::cluster

template <>
struct std::is_error_code_enum<switchyard::cluster::errc> : std::true_type {};
