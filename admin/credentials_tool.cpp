#include "admin/credentials_tool.hpp"

#include <sodium.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace switchyard::admin {

namespace {

std::error_code init_sodium() {
  // sodium_init: 0 done now, 1 already done, -1 failed.
  if (sodium_init() < 0) return std::make_error_code(std::errc::io_error);
  return {};
}

std::string to_hex(const unsigned char* bytes, std::size_t size) {
  std::string hex(size * 2 + 1, '\0');
  sodium_bin2hex(hex.data(), hex.size(), bytes, size);
  hex.pop_back();  // the terminating NUL
  return hex;
}

std::error_code last_error() { return {errno, std::system_category()}; }

}  // namespace

std::expected<key_pair_hex, std::error_code> generate_key_pair() {
  if (auto ec = init_sodium()) return std::unexpected(ec);
  unsigned char seed[crypto_sign_SEEDBYTES];
  unsigned char pk[crypto_sign_PUBLICKEYBYTES];
  unsigned char sk[crypto_sign_SECRETKEYBYTES];
  randombytes_buf(seed, sizeof seed);
  crypto_sign_seed_keypair(pk, sk, seed);
  key_pair_hex out{to_hex(seed, sizeof seed), to_hex(pk, sizeof pk)};
  sodium_memzero(seed, sizeof seed);
  sodium_memzero(sk, sizeof sk);
  return out;
}

std::string key_file_text(const key_pair_hex& keys) {
  return "# switchyard Ed25519 secret key; public key: " + keys.public_key + "\n" + keys.seed + "\n";
}

std::error_code write_secret_file(const std::filesystem::path& file, std::string_view text) {
  // O_EXCL: never replace a file; with O_CREAT it also refuses a symlink,
  // dangling or not. The umask can only take bits away from 0600; fchmod
  // makes it exactly 0600 (the owner must be able to read it back).
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return last_error();
  std::error_code ec;
  if (::fchmod(fd, 0600) != 0) ec = last_error();
  std::size_t done = 0;
  while (!ec && done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      ec = n < 0 ? last_error() : std::make_error_code(std::errc::io_error);
    else
      done += static_cast<std::size_t>(n);
  }
  if (!ec && ::fsync(fd) != 0) ec = last_error();
  if (::close(fd) != 0 && !ec) ec = last_error();
  if (ec) ::unlink(file.c_str());  // ours: O_EXCL created it
  return ec;
}

std::string token_sha256_hex(std::string_view token) {
  unsigned char digest[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(digest, reinterpret_cast<const unsigned char*>(token.data()), token.size());
  return to_hex(digest, sizeof digest);
}

std::expected<std::string, std::error_code> generate_token() {
  if (auto ec = init_sodium()) return std::unexpected(ec);
  unsigned char bytes[32];
  randombytes_buf(bytes, sizeof bytes);
  constexpr int variant = sodium_base64_VARIANT_URLSAFE_NO_PADDING;
  std::string token(sodium_base64_ENCODED_LEN(sizeof bytes, variant), '\0');
  sodium_bin2base64(token.data(), token.size(), bytes, sizeof bytes, variant);
  token.resize(token.find('\0'));
  sodium_memzero(bytes, sizeof bytes);
  return token;
}

}  // namespace switchyard::admin
