#include "gateway/token_verifier.hpp"

#include <jwt.h>
#include <nlohmann/json.hpp>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <sodium.h>

#include <array>
#include <memory>
#include <stdexcept>

namespace switchyard::edge {

namespace {

using nlohmann::json;

constexpr std::size_t max_user_bytes = 256;

std::unexpected<std::error_code> refuse(device_errc e) { return std::unexpected(make_error_code(e)); }

// base64url without padding (RFC 7515 §2), as JWTs use it; nullopt when
// `in` is not that.
std::optional<std::string> base64url_decode(std::string_view in) {
  std::string out(in.size() * 3 / 4 + 3, '\0');
  std::size_t len = 0;
  const char* end = nullptr;
  if (sodium_base642bin(reinterpret_cast<unsigned char*>(out.data()), out.size(), in.data(), in.size(), nullptr, &len,
                        &end, sodium_base64_VARIANT_URLSAFE_NO_PADDING) != 0 ||
      end != in.data() + in.size())
    return std::nullopt;
  out.resize(len);
  return out;
}

// A JSON object from a base64url segment; a discarded value otherwise.
json object_of(std::string_view segment) {
  const auto text = base64url_decode(segment);
  if (!text) return json(json::value_t::discarded);
  json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : json(json::value_t::discarded);
}

bool is_hmac(std::string_view alg) { return alg == "HS256" || alg == "HS384" || alg == "HS512"; }
bool is_rsa(std::string_view alg) { return alg == "RS256" || alg == "RS384" || alg == "RS512"; }
bool is_ec(std::string_view alg) { return alg == "ES256" || alg == "ES384" || alg == "ES512"; }

// A NumericDate claim (RFC 7519 §2): a number of seconds, possibly
// fractional (truncated).
std::optional<std::int64_t> seconds_claim(const json& payload, const char* name, bool& malformed) {
  const auto it = payload.find(name);
  if (it == payload.end()) return std::nullopt;
  if (it->is_number_integer()) return it->get<std::int64_t>();
  if (it->is_number_float()) {
    const double d = it->get<double>();
    if (d > -9.0e18 && d < 9.0e18) return static_cast<std::int64_t>(d);  // else NaN, or beyond any date
  }
  malformed = true;
  return std::nullopt;
}

}  // namespace

token_verifier::token_verifier(token_keys keys) : keys_(std::move(keys)) {
  if (sodium_init() < 0) throw std::runtime_error("libsodium cannot be initialized (sodium_init failed)");
  if (!keys_.hmac_secret.empty()) algorithms_ = {"HS256", "HS384", "HS512"};
  if (keys_.public_key_pem.empty()) return;
  const std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(keys_.public_key_pem.data(), static_cast<int>(keys_.public_key_pem.size())), BIO_free);
  const std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      bio ? PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr) : nullptr, EVP_PKEY_free);
  if (!key) throw std::invalid_argument("jwt-public-key: not a PEM public key (-----BEGIN PUBLIC KEY-----)");
  switch (EVP_PKEY_get_base_id(key.get())) {
    case EVP_PKEY_RSA:
      public_type_ = key_type::rsa;
      algorithms_.insert(algorithms_.end(), {"RS256", "RS384", "RS512"});
      break;
    case EVP_PKEY_EC:
      public_type_ = key_type::ec;
      algorithms_.insert(algorithms_.end(), {"ES256", "ES384", "ES512"});
      break;
    case EVP_PKEY_ED25519: {
      std::size_t len = crypto_sign_PUBLICKEYBYTES;
      ed25519_raw_.resize(len);
      if (EVP_PKEY_get_raw_public_key(key.get(), reinterpret_cast<unsigned char*>(ed25519_raw_.data()), &len) != 1 ||
          len != crypto_sign_PUBLICKEYBYTES)
        throw std::invalid_argument("jwt-public-key: the Ed25519 key cannot be read");
      public_type_ = key_type::ed25519;
      algorithms_.push_back("EdDSA");
      break;
    }
    default:
      throw std::invalid_argument("jwt-public-key: the key must be RSA, EC or Ed25519");
  }
}

token_verifier::~token_verifier() = default;

std::expected<device_claims, std::error_code> token_verifier::verify(std::string_view token,
                                                                     std::chrono::system_clock::time_point now) const {
  const auto dot1 = token.find('.');
  const auto dot2 = dot1 == std::string_view::npos ? dot1 : token.find('.', dot1 + 1);
  if (dot2 == std::string_view::npos || token.find('.', dot2 + 1) != std::string_view::npos || dot2 + 1 == token.size())
    return refuse(device_errc::unauthorized);
  const std::string_view signing_input = token.substr(0, dot2);
  const json header = object_of(token.substr(0, dot1));
  if (header.is_discarded()) return refuse(device_errc::unauthorized);
  const auto alg_it = header.find("alg");
  if (alg_it == header.end() || !alg_it->is_string()) return refuse(device_errc::unauthorized);
  const std::string& alg = alg_it->get_ref<const std::string&>();

  // The signature, by the key of the algorithm's family only.
  if (alg == "EdDSA") {
    if (public_type_ != key_type::ed25519) return refuse(device_errc::unauthorized);
    const auto sig = base64url_decode(token.substr(dot2 + 1));
    if (!sig || sig->size() != crypto_sign_BYTES ||
        crypto_sign_verify_detached(reinterpret_cast<const unsigned char*>(sig->data()),
                                    reinterpret_cast<const unsigned char*>(signing_input.data()), signing_input.size(),
                                    reinterpret_cast<const unsigned char*>(ed25519_raw_.data())) != 0)
      return refuse(device_errc::unauthorized);
  } else {
    const std::string* key = nullptr;
    if (is_hmac(alg) && !keys_.hmac_secret.empty())
      key = &keys_.hmac_secret;
    else if ((is_rsa(alg) && public_type_ == key_type::rsa) || (is_ec(alg) && public_type_ == key_type::ec))
      key = &keys_.public_key_pem;
    if (!key) return refuse(device_errc::unauthorized);  // "none" and anything not configured
    const std::string text(token);                       // libjwt wants a C string
    jwt_t* decoded = nullptr;
    const int rc = jwt_decode(&decoded, text.c_str(), reinterpret_cast<const unsigned char*>(key->data()),
                              static_cast<int>(key->size()));
    const std::unique_ptr<jwt_t, decltype(&jwt_free)> owned(decoded, jwt_free);
    // libjwt checks the header's alg against the key it was given only by
    // its family: make sure it verified the algorithm named above.
    if (rc != 0 || !decoded || jwt_get_alg(decoded) != jwt_str_alg(alg.c_str()))
      return refuse(device_errc::unauthorized);
  }

  // The claims.
  const json payload = object_of(token.substr(dot1 + 1, dot2 - dot1 - 1));
  if (payload.is_discarded()) return refuse(device_errc::unauthorized);
  device_claims claims;
  const auto sub = payload.find("sub");
  if (sub == payload.end() || !sub->is_string() || sub->get_ref<const std::string&>().empty() ||
      sub->get_ref<const std::string&>().size() > max_user_bytes)
    return refuse(device_errc::unauthorized);
  claims.user = sub->get<std::string>();
  bool malformed = false;
  claims.exp = seconds_claim(payload, "exp", malformed);
  const auto nbf = seconds_claim(payload, "nbf", malformed);
  if (malformed) return refuse(device_errc::unauthorized);
  const std::int64_t t = std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
  const std::int64_t leeway = keys_.leeway.count();
  // (Written so that no claim value can overflow: t and leeway are small.)
  if ((claims.exp && t - leeway >= *claims.exp) || (nbf && t + leeway < *nbf))
    return refuse(device_errc::token_expired);
  if (!keys_.issuer.empty()) {
    const auto iss = payload.find("iss");
    if (iss == payload.end() || !iss->is_string() || iss->get_ref<const std::string&>() != keys_.issuer)
      return refuse(device_errc::unauthorized);
  }
  if (!keys_.audience.empty()) {
    const auto aud = payload.find("aud");
    bool found = false;
    if (aud != payload.end() && aud->is_string()) found = aud->get_ref<const std::string&>() == keys_.audience;
    if (aud != payload.end() && aud->is_array())
      for (const auto& a : *aud) found = found || (a.is_string() && a.get_ref<const std::string&>() == keys_.audience);
    if (!found) return refuse(device_errc::unauthorized);
  }
  if (const auto ch = payload.find("channels"); ch != payload.end()) {
    if (!ch->is_array()) return refuse(device_errc::unauthorized);
    for (const auto& c : *ch) {
      if (!c.is_string()) return refuse(device_errc::unauthorized);
      claims.channels.push_back(c.get<std::string>());
    }
  }
  return claims;
}

}  // namespace switchyard::edge
