#pragma once
// An Ed25519 secret key for the hello's challenge (docs/security.md,
// "Authentication"): loaded from client_options::key or key_file, it signs
// the broker's nonce; it never leaves the process. The secret bytes are
// wiped when the key is destroyed. Internal to the client library.
//
// Thread-safe once loaded (const members only).

#include <array>
#include <cstdint>
#include <expected>
#include <span>
#include <string>
#include <string_view>

namespace switchyard::client_lib {

class signing_key {
 public:
  // From `hex` (64 hex digits: the 32-byte seed) when it is not empty, else
  // from the first line of `file` that is neither empty nor a comment ('#'),
  // as `switchyard-cli keygen` writes it. Error: why it did not load
  // (never the key's bytes).
  static std::expected<signing_key, std::string> load(std::string_view hex, const std::string& file);

  signing_key(const signing_key&) = delete;
  signing_key& operator=(const signing_key&) = delete;
  signing_key(signing_key&& other) noexcept;
  signing_key& operator=(signing_key&& other) noexcept;
  ~signing_key();

  const std::array<std::uint8_t, 32>& public_key() const noexcept { return public_; }
  // The Ed25519 signature of `message`.
  std::array<std::uint8_t, 64> sign(std::span<const std::uint8_t> message) const noexcept;

 private:
  signing_key() = default;
  std::array<std::uint8_t, 32> public_{};
  std::array<std::uint8_t, 64> secret_{};  // libsodium's form: seed then public key
};

}  // namespace switchyard::client_lib
