// Fuzz target: the auth file parser (auth/auth_config.hpp) and, on what it
// accepts, the lookups and the pattern arithmetic of auth/permission.hpp.
// Contract: parse returns a config or an auth_file_error and never throws
// or crashes; on the patterns of a parsed file, pattern_covers,
// patterns_overlap and pattern_matches agree with each other (checked
// below: a disagreement aborts, which libFuzzer reports).
//
// Input: the auth file's text.

#include "auth/auth_config.hpp"
#include "auth/credentials.hpp"
#include "fuzz/seeds.hpp"

#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace switchyard::auth;

std::vector<switchyard::fuzz::seed> seeds() {
  using switchyard::fuzz::seed_of;
  const std::string h1 = to_hex(sha256("gw-token-1"));
  const std::string h2 = to_hex(sha256("orders-token"));
  const std::string key(64, 'a');
  return {
      seed_of("[principals.gateway-eu-1]\n"
              "token_sha256 = [\"" +
              h1 +
              "\"]\n"
              "inbox = { allow = [\"gw-eu-1\"] }\n"
              "registry_put = { allow = [\">\"] }\n"
              "\n"
              "[principals.orders]\n"
              "ed25519_public_keys = [\"" +
              key +
              "\"]\n"
              "token_sha256 = [\"" +
              h2 +
              "\"]\n"
              "publish = { allow = [\"orders.>\"] }\n"
              "subscribe = { allow = [\">\"], deny = [\"admin.>\", \"audit.*\"] }\n"
              "send = { allow = [\">\"] }\n"
              "stream_append = { allow = [\"orders.*.created\", \"audit.>\"], deny = [\"*.secret.>\"] }\n"
              "\n"
              "[principals.operator]\n"
              "tls_subjects = [\"CN=operator,O=Example\"]\n"
              "admin = true\n"),
      seed_of("[principals.p]\ntls_subjects = [\"x\"]\n"
              "registry_get.allow = [\"a.*.c\", \"*.b.>\"]\nregistry_get.deny = [\"a.b.*\"]\n"),
      seed_of("[principals]\n"),
      seed_of("[principals.a]\nadmin = 3\n"),
  };
}

// A name `pattern` matches: each `*` and `>` as one token "x".
std::string witness(std::string_view pattern) {
  std::string out;
  std::size_t start = 0;
  while (true) {
    const auto dot = pattern.find('.', start);
    const auto token = pattern.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    out += (token == "*" || token == ">") ? std::string_view("x") : token;
    if (dot == std::string_view::npos) return out;
    out += '.';
    start = dot + 1;
  }
}

void check(bool ok) {
  if (!ok) std::abort();
}

void check_patterns(const std::vector<const std::string*>& patterns) {
  std::vector<std::string> witnesses;
  for (const auto* a : patterns) witnesses.push_back(witness(*a));
  for (std::size_t i = 0; i < patterns.size(); ++i) {
    const std::string& a = *patterns[i];
    check(is_valid_rule_pattern(a));
    check(pattern_covers(a, a));
    check(patterns_overlap(a, a));
    check(pattern_matches(a, witnesses[i]));
    for (std::size_t j = 0; j < patterns.size(); ++j) {
      const std::string& b = *patterns[j];
      const bool covers = pattern_covers(a, b);
      const bool overlap = patterns_overlap(a, b);
      check(overlap == patterns_overlap(b, a));
      // b matches its witness: a covering b matches it too, and a pattern
      // that does not overlap b does not.
      if (covers) check(overlap && pattern_matches(a, witnesses[j]));
      if (!overlap) check(!pattern_matches(a, witnesses[j]));
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  switchyard::fuzz::write_seeds_if_asked(seeds());
  init_crypto();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = auth_config::parse(text);
  if (!config) {
    (void)config.error().to_string("fuzz");
    return 0;
  }
  check(!config->principals().empty());
  (void)config->by_token("gw-token-1");
  std::vector<const std::string*> patterns;
  for (const auto& p : config->principals()) {
    check(config->by_name(p->name) == p);
    check(!p->token_hashes.empty() || !p->public_keys.empty() || !p->tls_subjects.empty());
    for (const auto& k : p->public_keys) check(config->by_public_key(k) == p);
    for (const auto& s : p->tls_subjects) check(config->by_tls_subject(s) == p);
    for (const auto& rule : p->rules) {
      for (const auto& a : rule.allow()) {
        patterns.push_back(&a);
        (void)rule.check_subscribe(a);
        (void)rule.allows(witness(a));
      }
      for (const auto& d : rule.deny()) {
        patterns.push_back(&d);
        check(!rule.allows(witness(d)));
        check(rule.check_subscribe(d) == permission_rule::subscribe_verdict::denied);
      }
    }
  }
  if (patterns.size() > 64) patterns.resize(64);  // bounded pairwise checks
  check_patterns(patterns);
  return 0;
}
