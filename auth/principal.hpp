#pragma once
// A principal: a gateway, a service or an operator, as an auth file names
// it: its credentials and its permissions (docs/security.md).
//
// Immutable once loaded, except for permission_rule's answer caches: loop
// thread only.

#include "auth/permission.hpp"

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace switchyard::auth {

using sha256_digest = std::array<std::uint8_t, 32>;
using ed25519_public_key = std::array<std::uint8_t, 32>;

struct principal {
  std::string name;
  // admin = true: every operation on every resource, others' leases,
  // inboxes and routes included, and the admin-only requests (lists, stats,
  // retention, drain). Its permission lists are not consulted.
  bool admin = false;
  std::array<permission_rule, operation_count> rules;

  // Credentials; a principal has at least one.
  std::vector<sha256_digest> token_hashes;      // SHA-256 of each bearer token
  std::vector<ed25519_public_key> public_keys;  // Ed25519 keys it may sign challenges with
  std::vector<std::string> tls_subjects;        // client certificate subjects (RFC 2253 form)

  const permission_rule& rule(operation op) const noexcept { return rules[static_cast<std::size_t>(op)]; }
  // admin, or rule(op).allows(name).
  bool may(operation op, std::string_view name) const { return admin || rule(op).allows(name); }
};

}  // namespace switchyard::auth
