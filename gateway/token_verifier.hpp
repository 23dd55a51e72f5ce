#pragma once
// Verifies the token a device presents in its hello: a JWT (RFC 7519) in
// compact form, signed with one of the keys the gateway was given.
//
//   HS256, HS384, HS512   the shared secret (--jwt-secret-file); libjwt
//   RS256.., ES256..      a PEM public key of that type (--jwt-public-key); libjwt
//   EdDSA (Ed25519)       a PEM Ed25519 public key (--jwt-public-key); libsodium
//
// The token's header names its algorithm; an algorithm with no key of its
// family configured is refused (so a token cannot pick the public key as an
// HMAC secret), as is "none". Claims, read once the signature holds:
//   sub       required: the user id (1 to 256 bytes); the route key is
//             the gateway's --route-prefix followed by it
//   exp, nbf  optional (seconds since the Unix epoch); checked against the
//             time given to verify() with --jwt-leeway-s either way
//   iss, aud  checked when --jwt-issuer / --jwt-audience are set
//   channels  optional: the channels (names or patterns) the device may
//             subscribe to
//   caps      ignored here (a device declares capabilities in its hello)

#include "gateway/device_errc.hpp"

#include <chrono>
#include <cstdint>
#include <expected>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace switchyard::edge {

struct token_keys {
  std::string hmac_secret;     // raw bytes; empty: HS* refused
  std::string public_key_pem;  // RSA, EC or Ed25519 (SubjectPublicKeyInfo PEM); empty: RS*/ES*/EdDSA refused
  std::string issuer;          // required "iss" when not empty
  std::string audience;        // required in "aud" (a string or an array) when not empty
  std::chrono::seconds leeway{0};
};

struct device_claims {
  std::string user;                   // "sub"
  std::optional<std::int64_t> exp;    // seconds since the Unix epoch
  std::vector<std::string> channels;  // "channels"
};

class token_verifier {
 public:
  // Reads the public key (if any). Throws std::invalid_argument when the
  // PEM is not a public key of a supported type (start-up error).
  explicit token_verifier(token_keys keys);
  ~token_verifier();
  token_verifier(const token_verifier&) = delete;
  token_verifier& operator=(const token_verifier&) = delete;

  // The claims of `token` if its signature holds and it is valid at `now`
  // (wall clock: exp and nbf are wall-clock times). Errors:
  // device_errc::unauthorized (malformed, bad signature, algorithm not
  // configured, no sub, wrong iss/aud), device_errc::token_expired (exp
  // passed or nbf ahead, leeway included). Thread-safe (const, no state).
  std::expected<device_claims, std::error_code> verify(std::string_view token,
                                                       std::chrono::system_clock::time_point now) const;

  // What algorithms the configured keys allow, e.g. {"HS256","HS384","HS512","EdDSA"}.
  const std::vector<std::string>& algorithms() const noexcept { return algorithms_; }

 private:
  enum class key_type { none, rsa, ec, ed25519 };

  token_keys keys_;
  key_type public_type_ = key_type::none;
  std::string ed25519_raw_;  // 32 bytes of an Ed25519 key
  std::vector<std::string> algorithms_;
};

}  // namespace switchyard::edge
