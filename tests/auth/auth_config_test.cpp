// Unit tests for auth/auth_config.hpp: parsing and checking an auth file,
// its errors (with the line at fault) and the lookups the hello uses.

#include "auth/auth_config.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <array>
#include <cstdint>
#include <fstream>
#include <span>
#include <string>
#include <string_view>

namespace {

using namespace switchyard::auth;
using verdict = permission_rule::subscribe_verdict;

std::string hash_hex(std::string_view token) { return to_hex(sha256(token)); }

ed25519_public_key key_of(std::uint8_t fill) {
  ed25519_public_key k{};
  k.fill(fill);
  return k;
}

// Three principals, one per kind of credential (line numbers matter to the
// error tests below, which edit copies of it).
std::string valid_file() {
  return "# the auth file of the tests\n"  // 1
         "[principals.gateway-eu-1]\n"     // 2
         "token_sha256 = [\"" +
         hash_hex("gw-token-1") + "\", \"" + hash_hex("gw-token-2") +
         "\"]\n"                                 // 3
         "inbox = { allow = [\"gw-eu-1\"] }\n"   // 4
         "registry_put = { allow = [\">\"] }\n"  // 5
         "\n"                                    // 6
         "[principals.orders]\n"                 // 7
         "ed25519_public_keys = [\"" +
         to_hex(key_of(0xab)) +
         "\"]\n"  // 8
         "token_sha256 = [\"" +
         hash_hex("orders-token") +
         "\"]\n"                                                                 // 9
         "publish = { allow = [\"orders.>\"] }\n"                                // 10
         "subscribe = { allow = [\">\"], deny = [\"admin.>\", \"audit.*\"] }\n"  // 11
         "send = { allow = [\">\"] }\n"                                          // 12
         "\n"                                                                    // 13
         "[principals.operator]\n"                                               // 14
         "tls_subjects = [\"CN=operator,O=Example\"]\n"                          // 15
         "admin = true\n";                                                       // 16
}

auth_config parse_ok(const std::string& text) {
  auto config = auth_config::parse(text);
  if (!config) FAIL(config.error().to_string("test"));
  return std::move(*config);
}

auth_file_error parse_error(const std::string& text) {
  auto config = auth_config::parse(text);
  if (config) FAIL("parsed, expected an error:\n" << text);
  INFO(config.error().to_string("test"));
  return config.error();
}

// The valid file with line `line` (1-based) replaced by `replacement`.
std::string with_line(int line, std::string_view replacement) {
  const std::string text = valid_file();
  std::size_t begin = 0;
  for (int i = 1; i < line; ++i) begin = text.find('\n', begin) + 1;
  const std::size_t end = text.find('\n', begin);
  return text.substr(0, begin) + std::string(replacement) + text.substr(end);
}

std::size_t comparisons = 0;
bool counting_equal(std::span<const std::uint8_t> a, std::span<const std::uint8_t> b) noexcept {
  ++comparisons;
  return constant_time_equal(a, b);
}

}  // namespace

TEST_CASE("a complete auth file parses with every field") {
  const auth_config config = parse_ok(valid_file());
  REQUIRE(config.principals().size() == 3);

  const auto gw = config.by_name("gateway-eu-1");
  REQUIRE(gw);
  CHECK_FALSE(gw->admin);
  REQUIRE(gw->token_hashes.size() == 2);
  CHECK(gw->token_hashes[0] == sha256("gw-token-1"));
  CHECK(gw->token_hashes[1] == sha256("gw-token-2"));
  CHECK(gw->public_keys.empty());
  CHECK(gw->tls_subjects.empty());
  CHECK(gw->rule(operation::inbox).allow() == std::vector<std::string>{"gw-eu-1"});
  CHECK(gw->rule(operation::inbox).deny().empty());
  CHECK(gw->may(operation::inbox, "gw-eu-1"));
  CHECK_FALSE(gw->may(operation::inbox, "gw-us-1"));
  CHECK(gw->rule(operation::registry_put).allows_everything());
  for (const auto op : {operation::publish, operation::subscribe, operation::send, operation::registry_get,
                        operation::registry_delete, operation::stream_append, operation::stream_read})
    CHECK(gw->rule(op).allows_nothing());

  const auto orders = config.by_name("orders");
  REQUIRE(orders);
  CHECK_FALSE(orders->admin);
  CHECK(orders->public_keys == std::vector<ed25519_public_key>{key_of(0xab)});
  CHECK(orders->token_hashes == std::vector<sha256_digest>{sha256("orders-token")});
  CHECK(orders->may(operation::publish, "orders.eu.created"));
  CHECK_FALSE(orders->may(operation::publish, "admin.stop"));
  CHECK(orders->rule(operation::subscribe).deny() == std::vector<std::string>{"admin.>", "audit.*"});
  CHECK(orders->rule(operation::subscribe).check_subscribe("orders.>") == verdict::allowed);
  CHECK(orders->rule(operation::subscribe).check_subscribe("admin.>") == verdict::denied);
  CHECK(orders->rule(operation::subscribe).check_subscribe(">") == verdict::allowed_filtered);
  CHECK(orders->rule(operation::send).allows_everything());
  CHECK(orders->rule(operation::inbox).allows_nothing());

  const auto op = config.by_name("operator");
  REQUIRE(op);
  CHECK(op->admin);
  CHECK(op->tls_subjects == std::vector<std::string>{"CN=operator,O=Example"});
  CHECK(op->token_hashes.empty());
  CHECK(op->may(operation::publish, "admin.stop"));  // admin: rules not consulted
  CHECK(op->rule(operation::publish).allows_nothing());
}

TEST_CASE("every operation has its key in a principal") {
  std::string text = "[principals.p]\ntoken_sha256 = [\"" + hash_hex("t") + "\"]\n";
  for (std::size_t i = 0; i < operation_count; ++i)
    text += std::string(to_string(static_cast<operation>(i))) + " = { allow = [\"op" + std::to_string(i) + "\"] }\n";
  const auth_config config = parse_ok(text);
  const auto p = config.by_name("p");
  REQUIRE(p);
  for (std::size_t i = 0; i < operation_count; ++i) {
    const auto op = static_cast<operation>(i);
    INFO(to_string(op));
    CHECK(p->may(op, "op" + std::to_string(i)));
    CHECK_FALSE(p->may(op, "op" + std::to_string((i + 1) % operation_count)));
  }
}

TEST_CASE("a TOML syntax error gives its line and column") {
  const auto e = parse_error(with_line(10, "publish = { allow = [\"orders.>\" }"));
  CHECK(e.line == 10);
  CHECK(e.column > 0);
  CHECK(e.message.rfind("TOML: ", 0) == 0);
}

TEST_CASE("an unknown key in a principal is an error naming the principal and key") {
  const auto e = parse_error(with_line(10, "publsh = { allow = [\"orders.>\"] }"));
  CHECK(e.line == 10);
  CHECK(e.column == 1);
  CHECK_THAT(e.message, Catch::Contains("principal \"orders\"") && Catch::Contains("unknown key \"publsh\""));
}

TEST_CASE("an unknown key in an operation table is an error naming it") {
  const auto e = parse_error(with_line(11, "subscribe = { allow = [\">\"], denied = [\"admin.>\"] }"));
  CHECK(e.line == 11);
  CHECK_THAT(e.message, Catch::Contains("principal \"orders\"") && Catch::Contains("subscribe") &&
                            Catch::Contains("unknown key \"denied\""));
}

TEST_CASE("an unknown top-level key is an error") {
  const auto e = parse_error("version = 1\n" + valid_file());
  CHECK(e.line == 1);
  CHECK_THAT(e.message, Catch::Contains("unknown top-level key \"version\""));
}

TEST_CASE("a value of the wrong type is an error naming the principal and key") {
  struct wrong {
    int line;
    std::string_view text;
    std::string_view key;
  };
  for (const wrong& w :
       {wrong{16, "admin = \"yes\"", "admin"}, wrong{15, "tls_subjects = \"CN=x\"", "tls_subjects"},
        wrong{15, "tls_subjects = [\"\"]", "tls_subjects[0]"}, wrong{15, "tls_subjects = [1]", "tls_subjects[0]"},
        wrong{9, "token_sha256 = \"abc\"", "token_sha256"},
        wrong{8, "ed25519_public_keys = [1]", "ed25519_public_keys[0]"},
        wrong{10, "publish = [\"orders.>\"]", "publish"},
        wrong{10, "publish = { allow = \"orders.>\" }", "publish.allow"},
        wrong{10, "publish = { allow = [\"a\", 2] }", "publish.allow[1]"}}) {
    INFO(w.text);
    const auto e = parse_error(with_line(w.line, w.text));
    CHECK(e.line == static_cast<std::size_t>(w.line));
    CHECK_THAT(e.message, Catch::Contains(std::string(w.key)));
  }
}

TEST_CASE("a malformed token hash or public key is an error naming the key") {
  const auto short_hash = parse_error(with_line(9, "token_sha256 = [\"" + hash_hex("x").substr(1) + "\"]"));
  CHECK(short_hash.line == 9);
  CHECK_THAT(short_hash.message, Catch::Contains("principal \"orders\"") && Catch::Contains("token_sha256[0]") &&
                                     Catch::Contains("64 hex digits"));
  std::string bad_digit = to_hex(key_of(1));
  bad_digit[10] = 'g';
  const auto key = parse_error(with_line(8, "ed25519_public_keys = [\"" + bad_digit + "\"]"));
  CHECK(key.line == 8);
  CHECK_THAT(key.message, Catch::Contains("ed25519_public_keys[0]"));
}

TEST_CASE("a malformed hash is reported without echoing it") {
  const std::string secret = "my-plain-secret-token";
  const auto e = parse_error(with_line(9, "token_sha256 = [\"" + secret + "\"]"));
  CHECK_THAT(e.message, !Catch::Contains(secret));
}

TEST_CASE("an invalid pattern is an error naming the operation and index") {
  const auto e = parse_error(with_line(11, "subscribe = { allow = [\">\"], deny = [\"admin.>\", \"a..b\"] }"));
  CHECK(e.line == 11);
  CHECK_THAT(e.message, Catch::Contains("subscribe.deny[1]") && Catch::Contains("not a valid pattern"));
}

TEST_CASE("a principal without credentials is an error") {
  const auto e = parse_error(with_line(15, "# no subject"));
  CHECK(e.line == 14);
  CHECK_THAT(e.message, Catch::Contains("principal \"operator\"") && Catch::Contains("no credentials"));
}

TEST_CASE("an invalid principal name is an error") {
  const auto spaced = parse_error("[principals.\"an operator\"]\ntls_subjects = [\"CN=x\"]\n");
  CHECK(spaced.line == 1);
  CHECK_THAT(spaced.message, Catch::Contains("principal name"));
  const auto long_name = parse_error("[principals." + std::string(129, 'n') + "]\ntls_subjects = [\"CN=x\"]\n");
  CHECK(long_name.line == 1);
  const auto control = parse_error("[principals.\"a\\u0007b\"]\ntls_subjects = [\"CN=x\"]\n");
  CHECK(control.line == 1);
  CHECK_THAT(control.message, Catch::Contains("\"a\\x07b\""));
  CHECK(parse_ok("[principals." + std::string(128, 'n') + "]\ntls_subjects = [\"CN=x\"]\n").principals().size() == 1);
}

TEST_CASE("a credential under two principals is an error") {
  const auto token = parse_error(with_line(9, "token_sha256 = [\"" + hash_hex("gw-token-2") + "\"]"));
  CHECK(token.line == 9);
  CHECK_THAT(token.message, Catch::Contains("principal \"orders\"") && Catch::Contains("token_sha256[0]") &&
                                Catch::Contains("\"gateway-eu-1\""));
  const auto subject =
      parse_error(valid_file() + "[principals.zz]\ntls_subjects = [\"x\", \"CN=operator,O=Example\"]\n");
  CHECK(subject.line == 18);
  CHECK_THAT(subject.message, Catch::Contains("tls_subjects[1]") && Catch::Contains("\"operator\""));
  const auto key =
      parse_error(valid_file() + "[principals.aa]\ned25519_public_keys = [\"" + to_hex(key_of(0xab)) + "\"]\n");
  // Principals are read in name order: "aa" holds the key first, and
  // orders (line 8) is the one at fault.
  CHECK(key.line == 8);
  CHECK_THAT(key.message, Catch::Contains("principal \"orders\"") && Catch::Contains("ed25519_public_keys[0]") &&
                              Catch::Contains("\"aa\""));
}

TEST_CASE("a principal defined twice is a TOML error") {
  const auto e = parse_error(valid_file() + "[principals.orders]\ntls_subjects = [\"CN=y\"]\n");
  CHECK(e.line == 17);
}

TEST_CASE("a file without principals is an error") {
  CHECK(parse_error("").message == "no principals: an auth file must define at least one");
  CHECK(parse_error("").line == 0);
  const auto empty = parse_error("# nothing\n[principals]\n");
  CHECK(empty.line == 2);
  CHECK_THAT(empty.message, Catch::Contains("no principals"));
  CHECK_THAT(parse_error("principals = 3\n").message, Catch::Contains("principals must be a table"));
  CHECK_THAT(parse_error("[[principals]]\nadmin = true\n").message, Catch::Contains("principals must be a table"));
}

TEST_CASE("an error formats as source, line, column and message") {
  CHECK(auth_file_error{"bad", 3, 7}.to_string("auth.toml") == "auth.toml:3:7: bad");
  CHECK(auth_file_error{"bad", 3, 0}.to_string("auth.toml") == "auth.toml:3: bad");
  CHECK(auth_file_error{"cannot read: x", 0, 0}.to_string("auth.toml") == "auth.toml: cannot read: x");
}

TEST_CASE("load reads and parses a file") {
  switchyard::test::temp_dir dir("auth-config-test");
  const auto file = dir.path() / "auth.toml";
  std::ofstream(file) << valid_file();
  const auto config = auth_config::load(file);
  REQUIRE(config);
  CHECK(config->principals().size() == 3);
}

TEST_CASE("load of a missing file or a directory is an error without a line") {
  switchyard::test::temp_dir dir("auth-config-test");
  const auto missing = auth_config::load(dir.path() / "none.toml");
  REQUIRE_FALSE(missing);
  CHECK(missing.error().line == 0);
  CHECK_THAT(missing.error().message, Catch::StartsWith("cannot read"));
  const auto directory = auth_config::load(dir.path());
  REQUIRE_FALSE(directory);
  CHECK(directory.error().line == 0);
  CHECK_THAT(directory.error().message, Catch::StartsWith("cannot read"));
}

TEST_CASE("load refuses a file larger than 1 MiB") {
  switchyard::test::temp_dir dir("auth-config-test");
  const auto file = dir.path() / "auth.toml";
  {
    std::ofstream out(file);
    out << valid_file();
    out << std::string((1u << 20) - valid_file().size() + 1, '\n');
  }
  const auto config = auth_config::load(file);
  REQUIRE_FALSE(config);
  CHECK_THAT(config.error().message, Catch::Contains("larger than 1 MiB"));
  std::filesystem::resize_file(file, 1u << 20);
  CHECK(auth_config::load(file));
}

TEST_CASE("by_token finds the principal holding the token") {
  const auth_config config = parse_ok(valid_file());
  CHECK(config.by_token("gw-token-1") == config.by_name("gateway-eu-1"));
  CHECK(config.by_token("gw-token-2") == config.by_name("gateway-eu-1"));
  CHECK(config.by_token("orders-token") == config.by_name("orders"));
}

TEST_CASE("by_token compares every stored hash even after a match") {
  const auth_config config = parse_ok(valid_file());
  const std::size_t stored = 3;  // two for gateway-eu-1, one for orders
  // gateway-eu-1 comes first (principals are in name order): its first
  // hash matches, and the other two are still compared.
  comparisons = 0;
  CHECK(config.by_token("gw-token-1", &counting_equal) == config.by_name("gateway-eu-1"));
  CHECK(comparisons == stored);
  comparisons = 0;
  CHECK(config.by_token("orders-token", &counting_equal) == config.by_name("orders"));
  CHECK(comparisons == stored);
  comparisons = 0;
  CHECK(config.by_token("wrong", &counting_equal) == nullptr);
  CHECK(comparisons == stored);
}

TEST_CASE("by_token of an unknown token is null") {
  const auth_config config = parse_ok(valid_file());
  CHECK(config.by_token("wrong") == nullptr);
  CHECK(config.by_token("") == nullptr);
  CHECK(config.by_token(hash_hex("gw-token-1")) == nullptr);  // the hash is not the token
}

TEST_CASE("by_public_key finds the principal holding the key") {
  const auth_config config = parse_ok(valid_file());
  const auto key = key_of(0xab);
  CHECK(config.by_public_key(key) == config.by_name("orders"));
  CHECK(config.by_public_key(key_of(0xac)) == nullptr);
  CHECK(config.by_public_key(std::span(key).first(31)) == nullptr);
}

TEST_CASE("by_tls_subject finds the principal bound to the subject") {
  const auth_config config = parse_ok(valid_file());
  CHECK(config.by_tls_subject("CN=operator,O=Example") == config.by_name("operator"));
  CHECK(config.by_tls_subject("CN=operator") == nullptr);
  CHECK(config.by_tls_subject("") == nullptr);
}

TEST_CASE("by_name finds a principal by its exact name") {
  const auth_config config = parse_ok(valid_file());
  REQUIRE(config.by_name("orders"));
  CHECK(config.by_name("orders")->name == "orders");
  CHECK(config.by_name("Orders") == nullptr);
  CHECK(config.by_name("") == nullptr);
}
