#pragma once
// The auth file (TOML, docs/security.md): its principals, parsed and
// checked, and the lookups the hello uses.
//
// Example:
//   [principals.gateway-eu-1]
//   token_sha256 = ["<64 hex digits: SHA-256 of the token>"]
//   inbox = { allow = ["gw-eu-1"] }
//   registry_put = { allow = [">"] }
//
//   [principals.orders]
//   ed25519_public_keys = ["<64 hex digits>"]
//   publish = { allow = ["orders.>"] }
//   subscribe = { allow = [">"], deny = ["admin.>"] }
//   send = { allow = [">"] }
//
//   [principals.operator]
//   tls_subjects = ["CN=operator,O=Example"]
//   admin = true
//
// A parsed config is immutable; the broker swaps a whole new one in on
// reload. Lookups are loop thread only (the principals' rule caches).

#include "auth/credentials.hpp"
#include "auth/principal.hpp"

#include <cstddef>
#include <cstdint>
#include <expected>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace switchyard::auth {

struct auth_file_error {
  std::string message;   // what is wrong, naming the principal and key
  std::size_t line = 0;  // 1-based; 0 when no line applies (an unreadable file)
  std::size_t column = 0;
  // "<source>:<line>:<column>: <message>" (without line/column when 0).
  std::string to_string(std::string_view source) const;
};

class auth_config {
 public:
  // Parses and checks an auth file's text. Errors: TOML syntax; an unknown
  // key (a typo in a security file must not pass silently); a principal
  // without credentials; a malformed hash, key or pattern; an unknown
  // operation; a credential given to two principals; a duplicate name.
  static std::expected<auth_config, auth_file_error> parse(std::string_view text);
  // Reads and parses a file (errors as above, or "cannot read").
  static std::expected<auth_config, auth_file_error> load(const std::filesystem::path& file);

  // Comparison used for token hashes (injectable so a test can see it is
  // called for every stored hash).
  using equal_fn = bool (*)(std::span<const std::uint8_t>, std::span<const std::uint8_t>) noexcept;

  // The principal holding the token: SHA-256 of it compared with every
  // stored hash, each with `equal` (constant time by default), with no early
  // exit, so the time does not say which principal or how many bytes
  // matched. Null when none does.
  std::shared_ptr<const principal> by_token(std::string_view token, equal_fn equal = &constant_time_equal) const;
  // The principal with this Ed25519 public key (public: no constant time
  // needed). Null when none.
  std::shared_ptr<const principal> by_public_key(std::span<const std::uint8_t> key) const;
  // The principal bound to this client certificate subject (RFC 2253, as
  // the broker formats it). Null when none.
  std::shared_ptr<const principal> by_tls_subject(std::string_view subject) const;
  std::shared_ptr<const principal> by_name(std::string_view name) const;

  const std::vector<std::shared_ptr<const principal>>& principals() const noexcept { return principals_; }

 private:
  std::vector<std::shared_ptr<const principal>> principals_;
};

}  // namespace switchyard::auth
