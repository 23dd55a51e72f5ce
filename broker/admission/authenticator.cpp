#include "broker/admission/authenticator.hpp"

#include "auth/credentials.hpp"
#include "protocol/limits.hpp"

#include <limits>

namespace switchyard::broker {

namespace {
constexpr std::chrono::milliseconds max_retry_hint{60'000};
}

std::string_view authenticator::address_of(std::string_view remote) noexcept {
  if (remote.starts_with('[')) {
    const auto end = remote.find(']');
    return end == std::string_view::npos ? remote : remote.substr(1, end - 1);
  }
  const auto colon = remote.rfind(':');
  // One colon: IPv4 "a.b.c.d:port"; more: an IPv6 address without brackets.
  if (colon == std::string_view::npos || remote.find(':') != colon) return remote;
  return remote.substr(0, colon);
}

token_bucket* authenticator::bucket(std::string_view address, clock::time_point now) {
  const double per_min = config_.auth_failures_per_min;
  if (per_min <= 0) return nullptr;
  if (auto it = failures_.find(address); it != failures_.end()) {
    it->second.configure(per_min / 60.0, per_min, now);
    return &it->second;
  }
  if (failures_.size() >= max_tracked_addresses) {
    // Forget the addresses whose bucket refilled; if none did, any one.
    for (auto it = failures_.begin(); it != failures_.end();) {
      if (it->second.tokens(now) >= it->second.burst())
        it = failures_.erase(it);
      else
        ++it;
    }
    if (failures_.size() >= max_tracked_addresses) failures_.erase(failures_.begin());
  }
  return &failures_.try_emplace(std::string(address), per_min / 60.0, per_min, now).first->second;
}

authenticator::decision authenticator::refused(std::string_view address, clock::time_point now, std::string_view why) {
  if (auto* b = bucket(address, now)) b->try_take(now);
  return {step::refuse, nullptr, {}, why};
}

authenticator::decision authenticator::on_hello(const credentials& c, std::string_view address, clock::time_point now) {
  if (!rules_) return {step::welcome, nullptr, {}, "no auth file"};
  if (auto it = failures_.find(address);
      it != failures_.end() && config_.auth_failures_per_min > 0 && it->second.tokens(now) < 1.0)
    return {step::rate_limited, nullptr, it->second.reserve(now, max_retry_hint), "too many failures"};
  if (!c.token.empty()) {
    if (auto p = rules_->by_token(c.token)) return {step::welcome, std::move(p), {}, "token"};
    return refused(address, now, "unknown token");
  }
  if (!c.public_key.empty()) {
    if (c.public_key.size() != protocol::auth_public_key_size) return refused(address, now, "malformed public key");
    // Unknown keys get a challenge too: the answer does not say whether
    // the key is known.
    return {step::challenge, nullptr, {}, "public key"};
  }
  if (!c.tls_subject.empty()) {
    if (auto p = rules_->by_tls_subject(c.tls_subject)) return {step::welcome, std::move(p), {}, "client certificate"};
    return refused(address, now, "no principal for the client certificate");
  }
  return refused(address, now, "no credentials");
}

authenticator::decision authenticator::on_proof(std::span<const std::uint8_t> public_key,
                                                std::span<const std::uint8_t> nonce,
                                                std::span<const std::uint8_t> signature, std::string_view address,
                                                clock::time_point now) {
  if (!rules_) return {step::welcome, nullptr, {}, "no auth file"};
  auto p = rules_->by_public_key(public_key);
  if (!p || public_key.size() != protocol::auth_public_key_size || nonce.size() != protocol::auth_nonce_size)
    return refused(address, now, "unknown public key");
  auth::ed25519_public_key key{};
  std::copy(public_key.begin(), public_key.end(), key.begin());
  const auto message = protocol::auth_challenge_message(nonce);
  if (!auth::verify_signature(key, message, signature)) return refused(address, now, "bad signature");
  return {step::welcome, std::move(p), {}, "public key"};
}

owner_id authenticator::owner_of(std::string_view name) {
  if (auto it = owners_.find(name); it != owners_.end()) return it->second;
  const auto next = owners_.size() + 1;
  const owner_id id =
      next > std::numeric_limits<owner_id>::max() ? std::numeric_limits<owner_id>::max() : static_cast<owner_id>(next);
  owners_.emplace(std::string(name), id);
  return id;
}

}  // namespace switchyard::broker
