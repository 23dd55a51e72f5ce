#include "auth/credentials.hpp"

#include <sodium.h>

#include <mutex>
#include <stdexcept>
#include <string>

namespace switchyard::auth {
namespace {

static_assert(crypto_hash_sha256_BYTES == std::tuple_size_v<sha256_digest>);
static_assert(crypto_sign_PUBLICKEYBYTES == std::tuple_size_v<ed25519_public_key>);

int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

void init_crypto() {
  static std::once_flag once;
  // A throw leaves the flag unset: the next call tries again.
  std::call_once(once, [] {
    if (sodium_init() < 0) throw std::runtime_error("libsodium cannot be initialized (sodium_init failed)");
  });
}

sha256_digest sha256(std::string_view data) noexcept {
  init_crypto();
  sha256_digest out{};
  crypto_hash_sha256(out.data(), reinterpret_cast<const unsigned char*>(data.data()), data.size());
  return out;
}

bool constant_time_equal(std::span<const std::uint8_t> a, std::span<const std::uint8_t> b) noexcept {
  if (a.size() != b.size()) return false;
  if (a.empty()) return true;
  init_crypto();
  return sodium_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::array<std::uint8_t, 32> random_nonce() noexcept {
  init_crypto();
  std::array<std::uint8_t, 32> nonce{};
  randombytes_buf(nonce.data(), nonce.size());
  return nonce;
}

bool verify_signature(const ed25519_public_key& key, std::span<const std::uint8_t> message,
                      std::span<const std::uint8_t> signature) noexcept {
  if (signature.size() != crypto_sign_BYTES) return false;
  init_crypto();
  static constexpr unsigned char empty = 0;
  const unsigned char* m = message.empty() ? &empty : message.data();
  return crypto_sign_verify_detached(signature.data(), m, message.size(), key.data()) == 0;
}

bool from_hex(std::string_view hex, std::span<std::uint8_t> out) noexcept {
  if (hex.size() != 2 * out.size()) return false;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const int hi = hex_value(hex[2 * i]);
    const int lo = hex_value(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  return true;
}

std::string to_hex(std::span<const std::uint8_t> bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes.size());
  for (const std::uint8_t b : bytes) {
    out.push_back(digits[b >> 4]);
    out.push_back(digits[b & 0xf]);
  }
  return out;
}

}  // namespace switchyard::auth
