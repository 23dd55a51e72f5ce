#pragma once
// The credentials switchyard-cli makes without a broker (`keygen`,
// `hash-token`; docs/security.md, "Keys and tokens with switchyard-cli"): Ed25519 key pairs in the key file format
// the client library reads (client_options::key_file), bearer tokens and
// the SHA-256 hashes an auth file stores (token_sha256). Over libsodium.
// Thread-safe; secrets are wiped from this module's own buffers once used.

#include <array>
#include <cstdint>
#include <expected>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

namespace switchyard::admin {

// An Ed25519 key pair as hex: the 32-byte seed (the secret; the client
// library derives the signing key from it) and the 32-byte public key.
struct key_pair_hex {
  std::string seed;        // 64 lower-case hex digits
  std::string public_key;  // 64 lower-case hex digits
};

// A fresh key pair from the system's CSPRNG. Error: libsodium could not be
// initialised (no random source).
std::expected<key_pair_hex, std::error_code> generate_key_pair();

// The key file's text: "# switchyard Ed25519 secret key; public key: <hex>\n"
// then the seed's 64 hex digits and "\n".
std::string key_file_text(const key_pair_hex& keys);

// Creates `file` with `text`, mode 0600, never replacing anything: an
// existing file (or a symlink) fails with std::errc::file_exists and is left
// as it was. A failed write removes the part written. Errors: the system's
// (errno) for open / write / fsync / close.
std::error_code write_secret_file(const std::filesystem::path& file, std::string_view text);

// SHA-256 of `token` as 64 lower-case hex digits (an auth file's
// token_sha256 value).
std::string token_sha256_hex(std::string_view token);

// A random bearer token: 32 bytes from the CSPRNG as unpadded base64url
// (43 characters of A-Z a-z 0-9 - _). Error: as generate_key_pair.
std::expected<std::string, std::error_code> generate_token();

}  // namespace switchyard::admin
