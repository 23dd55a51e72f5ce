#pragma once
// Who a hello comes from (docs/security.md, "Credentials"): checks the
// credentials of a hello against the auth file's principals, runs the
// Ed25519 challenge, rate limits failures per source address, and numbers
// principals for lease ownership.
//
// A broker without an auth file has no rules: every hello is welcomed as
// nobody in particular (principal null), and may do everything.
//
// Failures: each refused hello takes a token from its source address's
// bucket (auth_failures_per_min per minute, as a burst too); an address
// whose bucket is empty is answered rate_limited before its credentials
// are looked at, with a retry hint, so guessing is slow however many
// connections it opens. At most max_tracked_addresses addresses are
// remembered: when full, those back to a full bucket are forgotten first,
// then arbitrary ones (a flood from many addresses cannot grow memory).
//
// The rules are replaced whole by set_rules (a reload); principals already
// handed out stay valid (shared). Time is passed in. Loop thread only.

#include "auth/auth_config.hpp"
#include "broker/tables/lease_table.hpp"
#include "broker/config/server_config.hpp"
#include "broker/tables/string_hash.hpp"
#include "broker/tables/token_bucket.hpp"

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

namespace switchyard::broker {

class authenticator {
 public:
  using clock = std::chrono::steady_clock;

  // Borrows `config` (auth_failures_per_min is read at each failure).
  explicit authenticator(const server_config& config) : config_(config) {}

  // The rules in force; null: no auth file.
  void set_rules(std::shared_ptr<const auth::auth_config> rules) noexcept { rules_ = std::move(rules); }
  const auth::auth_config* rules() const noexcept { return rules_.get(); }
  bool enabled() const noexcept { return rules_ != nullptr; }

  // What a hello carried. The views are borrowed for the call.
  struct credentials {
    std::string_view token;                    // Hello.credentials
    std::span<const std::uint8_t> public_key;  // Hello.public_key
    std::string_view tls_subject;              // the client certificate's subject (RFC 2253), if any
  };
  enum class step : std::uint8_t {
    welcome,       // `who` is the principal (null without an auth file)
    challenge,     // send AuthChallenge with a nonce, then on_proof
    refuse,        // unauthorized, after the failure delay
    rate_limited,  // too many failures from this address: retry_after
  };
  struct decision {
    step next = step::refuse;
    std::shared_ptr<const auth::principal> who;
    std::chrono::milliseconds retry_after{0};
    std::string_view why;  // for the broker's log: never a credential
  };

  // At the hello. A token wins over a public key, which wins over the TLS
  // subject; a hello with none of them is refused ("no credentials").
  // `address` is the client's IP address (no port).
  decision on_hello(const credentials& c, std::string_view address, clock::time_point now);
  // The AuthProof after a challenge: `public_key` from the hello, `nonce`
  // as sent, `signature` as received.
  decision on_proof(std::span<const std::uint8_t> public_key, std::span<const std::uint8_t> nonce,
                    std::span<const std::uint8_t> signature, std::string_view address, clock::time_point now);

  // The owner id of a principal name: the same for the process's lifetime
  // (across reloads), never 0. At most 65,535 names; past that every new
  // name shares the last id (documented; an auth file holds far fewer).
  owner_id owner_of(std::string_view principal_name);

  std::size_t tracked_addresses() const noexcept { return failures_.size(); }
  static constexpr std::size_t max_tracked_addresses = 4096;

  // The IP address of an "ip:port" or "[ip]:port" remote address.
  static std::string_view address_of(std::string_view remote) noexcept;

 private:
  decision refused(std::string_view address, clock::time_point now, std::string_view why);
  token_bucket* bucket(std::string_view address, clock::time_point now);

  const server_config& config_;
  std::shared_ptr<const auth::auth_config> rules_;
  std::unordered_map<std::string, token_bucket, string_hash, std::equal_to<>> failures_;
  std::unordered_map<std::string, owner_id, string_hash, std::equal_to<>> owners_;
};

}  // namespace switchyard::broker
