// Unit tests for auth/credentials.hpp: SHA-256, constant-time comparison,
// nonces, Ed25519 verification of the hello's challenge, hex.

#include "auth/credentials.hpp"
#include "protocol/limits.hpp"

#include <catch2/catch.hpp>

#include <sodium.h>

#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace {

using namespace switchyard;
using namespace switchyard::auth;

struct keypair {
  std::array<std::uint8_t, crypto_sign_PUBLICKEYBYTES> public_key{};
  std::array<std::uint8_t, crypto_sign_SECRETKEYBYTES> secret_key{};
};

keypair make_keypair() {
  init_crypto();
  keypair k;
  REQUIRE(crypto_sign_keypair(k.public_key.data(), k.secret_key.data()) == 0);
  return k;
}

std::array<std::uint8_t, crypto_sign_BYTES> sign(const keypair& k, std::span<const std::uint8_t> message) {
  std::array<std::uint8_t, crypto_sign_BYTES> signature{};
  REQUIRE(crypto_sign_detached(signature.data(), nullptr, message.data(), message.size(), k.secret_key.data()) == 0);
  return signature;
}

}  // namespace

TEST_CASE("sha256 of abc is the FIPS 180-2 test vector") {
  CHECK(to_hex(sha256("abc")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(to_hex(sha256("")) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST_CASE("constant_time_equal is true for equal bytes only") {
  const std::vector<std::uint8_t> a{1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<std::uint8_t> first = a, last = a;
  first.front() ^= 1;
  last.back() ^= 0x80;
  const std::vector<std::uint8_t> shorter(a.begin(), a.end() - 1);
  CHECK(constant_time_equal(a, a));
  CHECK(constant_time_equal(a, std::vector<std::uint8_t>(a)));
  CHECK_FALSE(constant_time_equal(a, first));
  CHECK_FALSE(constant_time_equal(a, last));
  CHECK_FALSE(constant_time_equal(a, shorter));
  CHECK_FALSE(constant_time_equal(shorter, a));
  CHECK(constant_time_equal(std::span<const std::uint8_t>{}, std::span<const std::uint8_t>{}));
}

TEST_CASE("a signature of the challenge message by the key verifies") {
  const keypair k = make_keypair();
  const auto nonce = random_nonce();
  const auto message = protocol::auth_challenge_message(nonce);
  const auto signature = sign(k, message);
  CHECK(verify_signature(k.public_key, message, signature));
}

TEST_CASE("a signature with one bit flipped does not verify") {
  const keypair k = make_keypair();
  const auto message = protocol::auth_challenge_message(random_nonce());
  for (const std::size_t byte : {std::size_t{0}, std::size_t{31}, std::size_t{63}}) {
    auto signature = sign(k, message);
    signature[byte] ^= 0x01;
    INFO("byte " << byte);
    CHECK_FALSE(verify_signature(k.public_key, message, signature));
  }
  auto changed = message;
  changed.back() ^= 0x01;
  CHECK_FALSE(verify_signature(k.public_key, changed, sign(k, message)));
}

TEST_CASE("a signature by another key does not verify") {
  const keypair signer = make_keypair();
  const keypair other = make_keypair();
  const auto message = protocol::auth_challenge_message(random_nonce());
  CHECK_FALSE(verify_signature(other.public_key, message, sign(signer, message)));
}

TEST_CASE("a signature of the wrong size does not verify") {
  const keypair k = make_keypair();
  const auto message = protocol::auth_challenge_message(random_nonce());
  const auto signature = sign(k, message);
  CHECK_FALSE(verify_signature(k.public_key, message, std::span(signature).first(63)));
  CHECK_FALSE(verify_signature(k.public_key, message, std::span<const std::uint8_t>{}));
  std::vector<std::uint8_t> longer(signature.begin(), signature.end());
  longer.push_back(0);
  CHECK_FALSE(verify_signature(k.public_key, message, longer));
}

TEST_CASE("two nonces differ") {
  const auto a = random_nonce();
  const auto b = random_nonce();
  static_assert(a.size() == protocol::auth_nonce_size);
  CHECK(a != b);
}

TEST_CASE("hex converts both ways and refuses a wrong length or digit") {
  std::array<std::uint8_t, 3> out{};
  REQUIRE(from_hex("00aBfF", out));
  CHECK(out == std::array<std::uint8_t, 3>{0x00, 0xab, 0xff});
  CHECK(to_hex(out) == "00abff");
  CHECK_FALSE(from_hex("00abf", out));
  CHECK_FALSE(from_hex("00abff00", out));
  CHECK_FALSE(from_hex("00abfg", out));
  CHECK_FALSE(from_hex("0x0abf", out));
  CHECK_FALSE(from_hex(" 0abff", out));
}
