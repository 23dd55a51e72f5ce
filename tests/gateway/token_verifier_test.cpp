// token_verifier: real tokens signed by libjwt, libsodium and OpenSSL keys,
// verified at times given to it.

#include "gateway/token_verifier.hpp"
#include "tests/support/jwt_tokens.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <string>

using namespace switchyard::edge;
using namespace switchyard::test;
using namespace std::chrono_literals;

namespace {

const std::string secret = "a-secret-of-thirty-two-bytes-or-so";

std::chrono::system_clock::time_point at(long long unix_seconds) {
  return std::chrono::system_clock::time_point(std::chrono::seconds(unix_seconds));
}

token_verifier hmac_verifier(token_keys extra = {}) {
  extra.hmac_secret = secret;
  return token_verifier(extra);
}

std::error_code error_of(const std::expected<device_claims, std::error_code>& r) {
  REQUIRE_FALSE(r);
  return r.error();
}

}  // namespace

TEST_CASE("an HS256 token gives its user and channels", "[gateway][token]") {
  const auto v = hmac_verifier();
  const auto token = hs256_token(secret, R"({"sub":"alice","exp":2000,"channels":["news","chat.*"]})");
  const auto claims = v.verify(token, at(1000));
  REQUIRE(claims);
  CHECK(claims->user == "alice");
  CHECK(claims->exp == 2000);
  CHECK(claims->channels == std::vector<std::string>{"news", "chat.*"});
}

TEST_CASE("a token signed with another secret is unauthorized", "[gateway][token]") {
  const auto v = hmac_verifier();
  CHECK(error_of(v.verify(hs256_token("another-secret", R"({"sub":"alice"})"), at(1000))) == device_errc::unauthorized);
}

TEST_CASE("a token whose payload was changed after signing is unauthorized", "[gateway][token]") {
  const auto v = hmac_verifier();
  const auto token = hs256_token(secret, R"({"sub":"alice"})");
  const auto dot1 = token.find('.'), dot2 = token.rfind('.');
  const auto forged = token.substr(0, dot1 + 1) + base64url(R"({"sub":"mallory"})") + token.substr(dot2);
  CHECK(error_of(v.verify(forged, at(1000))) == device_errc::unauthorized);
}

TEST_CASE("an expired token and one not valid yet are token_expired, leeway included", "[gateway][token]") {
  const auto v = hmac_verifier({.leeway = 5s});
  const auto expiring = hs256_token(secret, R"({"sub":"alice","exp":1000})");
  CHECK(v.verify(expiring, at(1004)));
  CHECK(error_of(v.verify(expiring, at(1005))) == device_errc::token_expired);
  const auto later = hs256_token(secret, R"({"sub":"alice","nbf":1000})");
  CHECK(error_of(v.verify(later, at(994))) == device_errc::token_expired);
  CHECK(v.verify(later, at(995)));
}

TEST_CASE("a token without a string sub, or with claims of the wrong type, is unauthorized", "[gateway][token]") {
  const auto v = hmac_verifier();
  for (const char* claims : {R"({"exp":2000})", R"({"sub":""})", R"({"sub":42})", R"({"sub":"a","exp":"soon"})",
                             R"({"sub":"a","channels":"news"})", R"({"sub":"a","channels":[1]})"}) {
    INFO(claims);
    CHECK(error_of(v.verify(hs256_token(secret, claims), at(1000))) == device_errc::unauthorized);
  }
  CHECK(error_of(v.verify(hs256_token(secret, R"({"sub":")" + std::string(257, 'u') + R"("})"), at(1000))) ==
        device_errc::unauthorized);
}

TEST_CASE("malformed tokens are unauthorized", "[gateway][token]") {
  const auto v = hmac_verifier();
  const auto good = hs256_token(secret, R"({"sub":"alice"})");
  for (const std::string& bad :
       {std::string(), std::string("abc"), std::string("a.b"), good + ".extra", good.substr(0, good.rfind('.') + 1),
        std::string("!!!.???.###"), base64url("[1,2]") + "." + base64url(R"({"sub":"a"})") + ".c2ln"}) {
    INFO(bad);
    CHECK(error_of(v.verify(bad, at(1000))) == device_errc::unauthorized);
  }
}

TEST_CASE("alg none is refused even with a key configured", "[gateway][token]") {
  const auto v = hmac_verifier();
  CHECK(error_of(v.verify(unsigned_token(R"({"sub":"alice"})"), at(1000))) == device_errc::unauthorized);
  CHECK(error_of(v.verify(unsigned_token(R"({"sub":"alice"})") + "c2ln", at(1000))) == device_errc::unauthorized);
}

TEST_CASE("iss and aud are checked when configured", "[gateway][token]") {
  const auto v = hmac_verifier({.issuer = "auth.example", .audience = "devices"});
  CHECK(v.verify(hs256_token(secret, R"({"sub":"a","iss":"auth.example","aud":"devices"})"), at(1000)));
  CHECK(v.verify(hs256_token(secret, R"({"sub":"a","iss":"auth.example","aud":["web","devices"]})"), at(1000)));
  CHECK(error_of(v.verify(hs256_token(secret, R"({"sub":"a","iss":"other","aud":"devices"})"), at(1000))) ==
        device_errc::unauthorized);
  CHECK(error_of(v.verify(hs256_token(secret, R"({"sub":"a","iss":"auth.example"})"), at(1000))) ==
        device_errc::unauthorized);
}

TEST_CASE("an EdDSA token verifies with its Ed25519 public key", "[gateway][token]") {
  REQUIRE(sodium_init() >= 0);
  // The pair comes from OpenSSL (PEM, as an operator has it); libsodium
  // signs with the same key's seed.
  const auto pair = make_key_pair("ED25519");
  const std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(pair.private_pem.data(), static_cast<int>(pair.private_pem.size())), BIO_free);
  const std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr), EVP_PKEY_free);
  REQUIRE(key);
  unsigned char seed[crypto_sign_SEEDBYTES];
  std::size_t seed_len = sizeof seed;
  REQUIRE(EVP_PKEY_get_raw_private_key(key.get(), seed, &seed_len) == 1);
  unsigned char pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
  crypto_sign_seed_keypair(pk, sk, seed);

  const token_verifier v({.public_key_pem = pair.public_pem});
  CHECK(v.algorithms() == std::vector<std::string>{"EdDSA"});
  const auto claims = v.verify(eddsa_token(sk, R"({"sub":"bob","exp":2000})"), at(1000));
  REQUIRE(claims);
  CHECK(claims->user == "bob");

  unsigned char other_pk[crypto_sign_PUBLICKEYBYTES], other_sk[crypto_sign_SECRETKEYBYTES];
  crypto_sign_keypair(other_pk, other_sk);
  CHECK(error_of(v.verify(eddsa_token(other_sk, R"({"sub":"bob"})"), at(1000))) == device_errc::unauthorized);
  CHECK(error_of(v.verify(eddsa_token(sk, R"({"sub":"bob","exp":900})"), at(1000))) == device_errc::token_expired);
}

TEST_CASE("RS256 and ES256 tokens verify with their PEM public keys", "[gateway][token]") {
  const auto rsa = make_key_pair("RSA");
  const auto ec = make_key_pair("EC");
  const token_verifier by_rsa({.public_key_pem = rsa.public_pem});
  const token_verifier by_ec({.public_key_pem = ec.public_pem});
  const auto rs = libjwt_token(JWT_ALG_RS256, rsa.private_pem, R"({"sub":"carol"})");
  const auto es = libjwt_token(JWT_ALG_ES256, ec.private_pem, R"({"sub":"dave"})");
  CHECK(by_rsa.verify(rs, at(1000)).value().user == "carol");
  CHECK(by_ec.verify(es, at(1000)).value().user == "dave");
  CHECK(error_of(by_rsa.verify(es, at(1000))) == device_errc::unauthorized);
  CHECK(error_of(by_ec.verify(rs, at(1000))) == device_errc::unauthorized);
}

TEST_CASE("an HS256 token signed with the public key as its secret is refused", "[gateway][token]") {
  // The classic confusion: the verifier must not take the RSA public key
  // as an HMAC secret because the token's header says HS256.
  const auto rsa = make_key_pair("RSA");
  const token_verifier v({.public_key_pem = rsa.public_pem});
  CHECK(error_of(v.verify(hs256_token(rsa.public_pem, R"({"sub":"mallory"})"), at(1000))) == device_errc::unauthorized);
}

TEST_CASE("a public key that is not PEM is a start-up error", "[gateway][token]") {
  CHECK_THROWS_AS(token_verifier({.public_key_pem = "not a key"}), std::invalid_argument);
}
