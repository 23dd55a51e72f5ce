#include "signing_key.hpp"

#include <sodium.h>

#include <fstream>
#include <sstream>

namespace switchyard::client_lib {

namespace {

bool hex_to_seed(std::string_view hex, std::array<std::uint8_t, 32>& out) {
  if (hex.size() != 64) return false;
  std::size_t bin_len = 0;
  return sodium_hex2bin(out.data(), out.size(), hex.data(), hex.size(), nullptr, &bin_len, nullptr) == 0 &&
         bin_len == out.size();
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

}  // namespace

std::expected<signing_key, std::string> signing_key::load(std::string_view hex, const std::string& file) {
  if (sodium_init() < 0) return std::unexpected("libsodium did not initialize");
  std::array<std::uint8_t, 32> seed{};
  if (!hex.empty()) {
    if (!hex_to_seed(trim(hex), seed)) return std::unexpected("key: not 64 hex digits");
  } else {
    std::ifstream in(file);
    if (!in) return std::unexpected("key file " + file + ": cannot be read");
    std::string line;
    bool found = false;
    for (int n = 0; n < 64 && std::getline(in, line); ++n) {
      const auto t = trim(line);
      if (t.empty() || t.front() == '#') continue;
      if (!hex_to_seed(t, seed)) return std::unexpected("key file " + file + ": its key line is not 64 hex digits");
      found = true;
      break;
    }
    if (!found) return std::unexpected("key file " + file + ": no key line (64 hex digits) in it");
  }
  signing_key k;
  crypto_sign_seed_keypair(k.public_.data(), k.secret_.data(), seed.data());
  sodium_memzero(seed.data(), seed.size());
  return k;
}

signing_key::signing_key(signing_key&& other) noexcept : public_(other.public_), secret_(other.secret_) {
  sodium_memzero(other.secret_.data(), other.secret_.size());
}

signing_key& signing_key::operator=(signing_key&& other) noexcept {
  public_ = other.public_;
  secret_ = other.secret_;
  sodium_memzero(other.secret_.data(), other.secret_.size());
  return *this;
}

signing_key::~signing_key() { sodium_memzero(secret_.data(), secret_.size()); }

std::array<std::uint8_t, 64> signing_key::sign(std::span<const std::uint8_t> message) const noexcept {
  std::array<std::uint8_t, 64> sig{};
  crypto_sign_detached(sig.data(), nullptr, message.data(), message.size(), secret_.data());
  return sig;
}

}  // namespace switchyard::client_lib
