#pragma once
// Tokens for the gateway's tests: HS256/RS256/ES256 signed by libjwt (the
// library the gateway verifies them with), EdDSA signed by libsodium, and
// key pairs made by OpenSSL. Claims are given as a JSON object's text.

#include <catch2/catch.hpp>

#include <jwt.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <sodium.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

namespace switchyard::test {

inline std::string base64url(std::string_view bytes) {
  std::string out(sodium_base64_ENCODED_LEN(bytes.size(), sodium_base64_VARIANT_URLSAFE_NO_PADDING), '\0');
  sodium_bin2base64(out.data(), out.size(), reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
                    sodium_base64_VARIANT_URLSAFE_NO_PADDING);
  out.resize(out.size() - 1);
  return out;
}

// A token of `alg` (HS*, RS*, ES*) over `claims_json`, signed with `key`
// (the secret, or a private key's PEM) by libjwt.
inline std::string libjwt_token(jwt_alg_t alg, std::string_view key, const std::string& claims_json) {
  jwt_t* raw = nullptr;
  REQUIRE(jwt_new(&raw) == 0);
  const std::unique_ptr<jwt_t, decltype(&jwt_free)> j(raw, jwt_free);
  REQUIRE(jwt_add_grants_json(j.get(), claims_json.c_str()) == 0);
  REQUIRE(jwt_set_alg(j.get(), alg, reinterpret_cast<const unsigned char*>(key.data()), static_cast<int>(key.size())) ==
          0);
  char* text = jwt_encode_str(j.get());
  REQUIRE(text != nullptr);
  std::string out(text);
  std::free(text);  // libjwt 1.10 allocates with malloc (jwt_free_str came in 1.12)
  return out;
}

inline std::string hs256_token(std::string_view secret, const std::string& claims_json) {
  return libjwt_token(JWT_ALG_HS256, secret, claims_json);
}

// Header and payload as given, signed with an Ed25519 secret key
// (crypto_sign_SECRETKEYBYTES) by libsodium.
inline std::string eddsa_token(const unsigned char* secret_key, const std::string& claims_json,
                               std::string_view header_json = R"({"alg":"EdDSA","typ":"JWT"})") {
  const std::string input = base64url(header_json) + "." + base64url(claims_json);
  unsigned char sig[crypto_sign_BYTES];
  crypto_sign_detached(sig, nullptr, reinterpret_cast<const unsigned char*>(input.data()), input.size(), secret_key);
  return input + "." + base64url({reinterpret_cast<const char*>(sig), sizeof sig});
}

// An unsigned token ({"alg":"none"}), or one with any header.
inline std::string unsigned_token(const std::string& claims_json, std::string_view header_json = R"({"alg":"none"})") {
  return base64url(header_json) + "." + base64url(claims_json) + ".";
}

struct pem_pair {
  std::string private_pem;
  std::string public_pem;
};

// A fresh key pair of OpenSSL's type `name` ("RSA", "EC" on P-256, "ED25519").
inline pem_pair make_key_pair(const char* name) {
  EVP_PKEY* raw = std::string_view(name) == "EC" ? EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256")
                  : std::string_view(name) == "RSA"
                      ? EVP_PKEY_Q_keygen(nullptr, nullptr, "RSA", static_cast<size_t>(2048))
                      : EVP_PKEY_Q_keygen(nullptr, nullptr, name);
  REQUIRE(raw != nullptr);
  const std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(raw, EVP_PKEY_free);
  const auto to_text = [](BIO* bio) {
    char* data = nullptr;
    const long len = BIO_get_mem_data(bio, &data);
    return std::string(data, static_cast<std::size_t>(len));
  };
  const std::unique_ptr<BIO, decltype(&BIO_free)> priv(BIO_new(BIO_s_mem()), BIO_free),
      pub(BIO_new(BIO_s_mem()), BIO_free);
  REQUIRE(PEM_write_bio_PrivateKey(priv.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) == 1);
  REQUIRE(PEM_write_bio_PUBKEY(pub.get(), key.get()) == 1);
  return {to_text(priv.get()), to_text(pub.get())};
}

// Seconds since the Unix epoch, `from_now` ahead of the wall clock.
inline long long unix_time(std::chrono::seconds from_now = std::chrono::seconds(0)) {
  return std::chrono::duration_cast<std::chrono::seconds>(
             (std::chrono::system_clock::now() + from_now).time_since_epoch())
      .count();
}

}  // namespace switchyard::test
