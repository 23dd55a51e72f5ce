#pragma once
// The cryptography of credentials, over libsodium: token hashing, constant
// time comparison, challenge nonces and Ed25519 verification. Thread-safe.

#include "auth/principal.hpp"

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace switchyard::auth {

// Initializes libsodium (idempotent, thread-safe). Throws std::runtime_error
// when it cannot (start-up only); every function below calls it.
void init_crypto();

sha256_digest sha256(std::string_view data) noexcept;

// Equal sizes and bytes. The time taken depends only on the sizes, never on
// where the bytes differ (sodium_memcmp). Sizes are not secret.
bool constant_time_equal(std::span<const std::uint8_t> a, std::span<const std::uint8_t> b) noexcept;

// 32 bytes from the system's CSPRNG (randombytes_buf).
std::array<std::uint8_t, 32> random_nonce() noexcept;

// True when `signature` (64 bytes) is `key`'s Ed25519 signature of
// `message`. False for any size that is wrong.
bool verify_signature(const ed25519_public_key& key, std::span<const std::uint8_t> message,
                      std::span<const std::uint8_t> signature) noexcept;

// Hex (lower or upper case) to bytes: false unless `hex` is exactly
// 2 * out.size() hex digits.
bool from_hex(std::string_view hex, std::span<std::uint8_t> out) noexcept;
std::string to_hex(std::span<const std::uint8_t> bytes);

}  // namespace switchyard::auth
