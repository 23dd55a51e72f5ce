// The real switchyard-cli binary and credentials: keygen and hash-token
// (local, no broker; their keys and hashes checked with libsodium here),
// TLS against an in-process TLS broker (certificates from the openssl tool),
// and tokens and keys against a switchyard-server started with an auth file.

#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/test_server.hpp"
#include "tests/support/tls_certs.hpp"

#include <catch2/catch.hpp>
#include <sodium.h>

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

using namespace switchyard;
using test::run_for_exit_code;
using test::temp_dir;
using test::test_server;
using test::tls_certs;

namespace {

const std::string bin = SWITCHYARD_CLI_BINARY;

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

bool is_hex(std::string_view s, std::size_t digits) {
  return s.size() == digits && s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

std::string slurp(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The value of "key":"<value>" in a one-line JSON object; empty if absent.
std::string json_string(const std::string& json, const std::string& key) {
  const std::string start = "\"" + key + "\":\"";
  const auto at = json.find(start);
  if (at == std::string::npos) return {};
  const auto from = at + start.size();
  return json.substr(from, json.find('"', from) - from);
}

// The Ed25519 public key of a 32-byte seed given as hex, as hex.
std::string public_key_of_seed(const std::string& seed_hex) {
  REQUIRE(sodium_init() >= 0);
  std::array<unsigned char, crypto_sign_SEEDBYTES> seed{};
  REQUIRE(sodium_hex2bin(seed.data(), seed.size(), seed_hex.data(), seed_hex.size(), nullptr, nullptr, nullptr) == 0);
  std::array<unsigned char, crypto_sign_PUBLICKEYBYTES> pk{};
  std::array<unsigned char, crypto_sign_SECRETKEYBYTES> sk{};
  crypto_sign_seed_keypair(pk.data(), sk.data(), seed.data());
  std::string hex(pk.size() * 2 + 1, '\0');
  sodium_bin2hex(hex.data(), hex.size(), pk.data(), pk.size());
  hex.pop_back();
  return hex;
}

std::string sha256_hex(std::string_view data) {
  std::array<unsigned char, crypto_hash_sha256_BYTES> digest{};
  crypto_hash_sha256(digest.data(), reinterpret_cast<const unsigned char*>(data.data()), data.size());
  std::string hex(digest.size() * 2 + 1, '\0');
  sodium_bin2hex(hex.data(), hex.size(), digest.data(), digest.size());
  hex.pop_back();
  return hex;
}

// A key file's two lines: the comment naming the public key, then the seed.
struct key_file_lines {
  std::string public_key;  // from the comment
  std::string seed;
};
key_file_lines parse_key_file(const std::string& text) {
  constexpr std::string_view comment = "# switchyard Ed25519 secret key; public key: ";
  REQUIRE(text.starts_with(comment));
  const auto end = text.find('\n');
  REQUIRE(end != std::string::npos);
  key_file_lines k{text.substr(comment.size(), end - comment.size()), text.substr(end + 1)};
  REQUIRE(k.seed.ends_with('\n'));
  k.seed.pop_back();
  return k;
}

const tls_certs& certs() {
  static const tls_certs made;
  return made;
}

broker::server_config tls_config() {
  auto cfg = test_server::default_config();
  cfg.tls_cert = certs().pem("ca-broker");
  cfg.tls_key = certs().key("ca-broker");
  return cfg;
}

// switchyard-cli against `port` with `args`: exit code and stdout (stderr
// with `with_stderr`, merged after stdout is redirected away).
std::pair<int, std::string> cli_at(std::uint16_t port, const std::string& args, bool with_stderr = false) {
  return run_for_exit_code(bin + " --address 127.0.0.1:" + std::to_string(port) + " " + args +
                           (with_stderr ? " 2>&1 >/dev/null" : " 2>/dev/null"));
}

}  // namespace

// ---- keygen ----

TEST_CASE("keygen --out writes a new key file of mode 0600 whose seed gives the public key printed", "[admin][auth]") {
  temp_dir dir;
  const auto file = dir.path() / "operator.key";
  const auto [code, out] = run_for_exit_code(bin + " keygen --out " + file.string() + " 2>/dev/null");
  INFO(out);
  REQUIRE(code == 0);
  REQUIRE(out.ends_with('\n'));
  const std::string printed = out.substr(0, out.size() - 1);
  CHECK(is_hex(printed, 64));

  struct stat st {};
  REQUIRE(::stat(file.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
  const auto k = parse_key_file(slurp(file));
  CHECK(is_hex(k.seed, 64));
  CHECK(k.public_key == printed);
  CHECK(public_key_of_seed(k.seed) == printed);

  // --json: the public key and the file, nothing secret.
  const auto file2 = dir.path() / "second.key";
  const auto [code2, json] = run_for_exit_code(bin + " keygen --json --out " + file2.string());
  INFO(json);
  CHECK(code2 == 0);
  const auto k2 = parse_key_file(slurp(file2));
  CHECK(json == R"({"public_key":")" + public_key_of_seed(k2.seed) + R"(","file":")" + file2.string() + "\"}\n");
  CHECK(k2.seed != k.seed);
}

TEST_CASE("keygen refuses to replace an existing file or follow a symlink, and changes neither", "[admin][auth]") {
  temp_dir dir;
  const auto file = dir.path() / "taken.key";
  std::ofstream(file) << "precious\n";
  const auto [code, out] = run_for_exit_code(bin + " --json keygen --out " + file.string() + " 2>/dev/null");
  CHECK(code == 5);
  CHECK(out.starts_with(R"({"error":{"code":"file_exists","message":"keygen: )" + file.string() + " exists;"));
  CHECK(slurp(file) == "precious\n");

  // A dangling symlink: following it would create a file elsewhere.
  const auto link = dir.path() / "link.key";
  const auto target = dir.path() / "elsewhere.key";
  std::filesystem::create_symlink(target, link);
  const auto [code2, err] = run_for_exit_code(bin + " keygen --out " + link.string() + " 2>&1 >/dev/null");
  CHECK(code2 == 5);
  CHECK(contains(err, "never replaces a file"));
  CHECK_FALSE(std::filesystem::exists(target));
}

TEST_CASE("keygen without --out prints a whole key file on stdout", "[admin][auth]") {
  const auto [code, out] = run_for_exit_code(bin + " keygen 2>/dev/null");
  INFO(out);
  REQUIRE(code == 0);
  const auto k = parse_key_file(out);
  CHECK(is_hex(k.seed, 64));
  CHECK(public_key_of_seed(k.seed) == k.public_key);

  const auto [code2, json] = run_for_exit_code(bin + " keygen --json 2>/dev/null");
  CHECK(code2 == 0);
  CHECK(public_key_of_seed(json_string(json, "secret_key")) == json_string(json, "public_key"));
}

// ---- hash-token ----

TEST_CASE("hash-token prints the SHA-256 of the token on stdin's line or of --token", "[admin][auth]") {
  // SHA-256("abc"), FIPS 180-2's example.
  const std::string abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
  CHECK(run_for_exit_code("printf 'abc\\n' | " + bin + " hash-token").second == abc + "\n");
  CHECK(run_for_exit_code("printf 'abc' | " + bin + " hash-token").second == abc + "\n");
  CHECK(run_for_exit_code("printf 'abc\\r\\n' | " + bin + " hash-token").second == abc + "\n");
  CHECK(run_for_exit_code(bin + " hash-token --token abc </dev/null").second == abc + "\n");
  CHECK(run_for_exit_code("printf 'abc\\n' | " + bin + " --json hash-token").second ==
        R"({"token_sha256":")" + abc + "\"}\n");
  // Only the first line is the token.
  CHECK(run_for_exit_code("printf 'abc\\nmore\\n' | " + bin + " hash-token").second == abc + "\n");
}

TEST_CASE("hash-token without a token is a usage error", "[admin][auth]") {
  for (const char* input : {"</dev/null", "<<< ''"}) {
    INFO(input);
    const auto [code, out] = run_for_exit_code("bash -c \"" + bin + " --json hash-token " + input + " 2>/dev/null\"");
    CHECK(code == 1);
    CHECK(out.starts_with(R"({"error":{"code":"usage","message":"hash-token: )"));
  }
}

TEST_CASE("hash-token --generate prints a new random token and its SHA-256", "[admin][auth]") {
  const auto [code, json] = run_for_exit_code(bin + " --json hash-token --generate </dev/null");
  INFO(json);
  REQUIRE(code == 0);
  const std::string token = json_string(json, "token");
  CHECK(token.size() == 43);  // 32 bytes, base64url without padding
  CHECK(token.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") ==
        std::string::npos);
  REQUIRE(sodium_init() >= 0);
  CHECK(json_string(json, "token_sha256") == sha256_hex(token));
  const auto [code2, again] = run_for_exit_code(bin + " --json hash-token --generate </dev/null");
  CHECK(code2 == 0);
  CHECK(json_string(again, "token") != token);

  const auto [code3, human] = run_for_exit_code(bin + " hash-token --generate </dev/null");
  CHECK(code3 == 0);
  CHECK(human.starts_with("token         "));
  CHECK(contains(human, "\ntoken_sha256  "));
}

// ---- TLS ----

TEST_CASE("switchyard-cli --tls with --tls-ca talks to a TLS broker", "[admin][tls]") {
  test_server server(tls_config());
  const auto [code, out] = cli_at(server.port(), "ping --json --tls --tls-ca " + certs().pem("ca"));
  INFO(out);
  CHECK(code == 0);
  CHECK(contains(out, R"("rtt_ms":)"));
  // --tls-ca alone implies --tls; --tls-server-name is checked against the certificate.
  CHECK(cli_at(server.port(), "ping --tls-ca " + certs().pem("ca") + " --tls-server-name localhost").first == 0);
  // For tests: no verification at all.
  CHECK(cli_at(server.port(), "ping --tls-insecure").first == 0);
}

TEST_CASE("a plain switchyard-cli at a TLS broker exits 2 saying to add --tls", "[admin][tls]") {
  test_server server(tls_config());
  const auto [code, err] = cli_at(server.port(), "ping", true);
  CHECK(code == 2);
  CHECK(err.starts_with("switchyard-cli: cannot connect to 127.0.0.1:"));
  CHECK(contains(err, "add --tls"));
  CHECK(std::count(err.begin(), err.end(), '\n') == 1);  // one line
  const auto [json_code, json] = cli_at(server.port(), "ping --json");
  CHECK(json_code == 2);
  CHECK(json.starts_with(R"({"error":{"code":"bad_request","message":"cannot connect to 127.0.0.1:)"));
}

TEST_CASE("a broker certificate that does not verify exits 2 with tls_failed and the reason on one line",
          "[admin][tls]") {
  test_server server(tls_config());
  const auto [code, err] = cli_at(server.port(), "ping --tls --tls-ca " + certs().pem("other-ca"), true);
  INFO(err);
  CHECK(code == 2);
  CHECK(err.starts_with("switchyard-cli: cannot connect to 127.0.0.1:"));
  CHECK(contains(err, ": TLS failed: "));
  CHECK(contains(err, "certificate"));
  CHECK(std::count(err.begin(), err.end(), '\n') == 1);
  const auto [json_code, json] = cli_at(server.port(), "--json ping --tls-ca " + certs().pem("other-ca"));
  CHECK(json_code == 2);
  CHECK(json.starts_with(R"({"error":{"code":"tls_failed",)"));
  // A name the certificate does not carry.
  CHECK(cli_at(server.port(), "ping --tls-ca " + certs().pem("ca") + " --tls-server-name broker.example").first == 2);
}

TEST_CASE("switchyard-cli --tls-cert and --tls-key present a client certificate to a broker that verifies clients",
          "[admin][tls]") {
  auto cfg = tls_config();
  cfg.tls_ca = certs().pem("ca");
  cfg.tls_verify_client = true;
  test_server server(cfg);
  const std::string trust = " --tls-ca " + certs().pem("ca");
  CHECK(cli_at(server.port(),
               "ping" + trust + " --tls-cert " + certs().pem("ca-client") + " --tls-key " + certs().key("ca-client"))
            .first == 0);
  CHECK(cli_at(server.port(), "ping" + trust).first == 2);
  // One without the other is a usage error: nothing is sent.
  const auto [code, out] = cli_at(server.port(), "--json ping" + trust + " --tls-cert " + certs().pem("ca-client"));
  CHECK(code == 1);
  CHECK(contains(out, "--tls-cert and --tls-key go together"));
}

// ---- tokens and keys against a broker with an auth file ----

namespace {

// A switchyard-server (the binary) with `auth_toml` as its auth file, in `dir`.
bench::server_process auth_broker(const temp_dir& dir, const std::string& auth_toml) {
  const auto file = dir.path() / "auth.toml";
  std::ofstream(file) << auth_toml;
  return test::start_server_process({"--auth-file", file.string()});
}

}  // namespace

TEST_CASE(
    "switchyard-cli --token and SWITCHYARD_TOKEN authenticate, and a wrong or missing token exits 4 with unauthorized",
    "[admin][auth]") {
  temp_dir dir;
  auto server = auth_broker(
      dir, "[principals.operator]\ntoken_sha256 = [\"" + sha256_hex("s3cret-token") + "\"]\nadmin = true\n");
  CHECK(cli_at(server.port(), "ping --token s3cret-token").first == 0);
  CHECK(run_for_exit_code("SWITCHYARD_TOKEN=s3cret-token " + bin +
                          " --address 127.0.0.1:" + std::to_string(server.port()) + " ping 2>/dev/null")
            .first == 0);
  const auto [code, json] = cli_at(server.port(), "ping --json --token wrong");
  CHECK(code == 4);
  CHECK(json.starts_with(R"({"error":{"code":"unauthorized","message":"cannot connect to 127.0.0.1:)"));
  CHECK(contains(json, R"("exit_code":4}})"));
  const auto [code2, err] = cli_at(server.port(), "ping", true);
  CHECK(code2 == 4);
  CHECK(contains(err, "SWITCHYARD_TOKEN"));
  CHECK(std::count(err.begin(), err.end(), '\n') == 1);
}

TEST_CASE("a key from keygen authenticates with --key-file and SWITCHYARD_KEY_FILE", "[admin][auth]") {
  temp_dir dir;
  const auto key = dir.path() / "op.key";
  const auto [kcode, public_key] = run_for_exit_code(bin + " keygen --out " + key.string() + " 2>/dev/null");
  REQUIRE(kcode == 0);
  auto server = auth_broker(dir, "[principals.operator]\ned25519_public_keys = [\"" +
                                     public_key.substr(0, public_key.size() - 1) + "\"]\nadmin = true\n");
  CHECK(cli_at(server.port(), "ping --key-file " + key.string()).first == 0);
  CHECK(run_for_exit_code("SWITCHYARD_KEY_FILE=" + key.string() + " " + bin +
                          " --address 127.0.0.1:" + std::to_string(server.port()) + " ping 2>/dev/null")
            .first == 0);
  // Another key: refused.
  const auto other = dir.path() / "other.key";
  REQUIRE(run_for_exit_code(bin + " keygen --out " + other.string() + " 2>/dev/null").first == 0);
  CHECK(cli_at(server.port(), "ping --key-file " + other.string()).first == 4);
}

TEST_CASE("an operation the auth file does not permit exits 4 with forbidden", "[admin][auth]") {
  temp_dir dir;
  auto server = auth_broker(dir, "[principals.reader]\ntoken_sha256 = [\"" + sha256_hex("reader-token") +
                                     "\"]\nstream_read = { allow = [\"orders.>\"] }\n");
  const auto [code, json] = cli_at(server.port(), "streams read payroll.march --json --token reader-token");
  INFO(json);
  CHECK(code == 4);
  CHECK(json.starts_with(R"({"error":{"code":"forbidden","message":"streams read payroll.march: forbidden)"));
  // Listing streams is for admin principals.
  const auto [code2, list] = cli_at(server.port(), "streams list --json --token reader-token");
  CHECK(code2 == 4);
  CHECK(list.starts_with(R"({"error":{"code":"forbidden",)"));
}

TEST_CASE("drain as a principal that is not an admin says the auth file must make it one", "[admin][auth]") {
  temp_dir dir;
  auto server = auth_broker(dir, "[principals.reader]\ntoken_sha256 = [\"" + sha256_hex("reader-token") +
                                     "\"]\nstream_read = { allow = [\"orders.>\"] }\n");
  const auto [code, err] = cli_at(server.port(), "drain --token reader-token", true);
  CHECK(code == 3);
  CHECK(contains(err, "not an admin: admin = true in the broker's auth file"));
  // Not drained.
  CHECK(cli_at(server.port(), "ping --token reader-token").first == 0);
}

TEST_CASE("pub --confirm reports a publish the auth file does not permit as forbidden, exit 4", "[admin][auth]") {
  temp_dir dir;
  auto server = auth_broker(dir, "[principals.orders]\ntoken_sha256 = [\"" + sha256_hex("orders-token") +
                                     "\"]\npublish = { allow = [\"orders.>\"] }\n");
  CHECK(cli_at(server.port(), "pub orders.eu ok --confirm --token orders-token").first == 0);
  const auto [code, json] = cli_at(server.port(), "pub payroll.march x --confirm --json --token orders-token");
  INFO(json);
  CHECK(code == 4);
  CHECK(json.starts_with(R"({"error":{"code":"forbidden","message":"pub payroll.march: forbidden)"));
}

TEST_CASE("streams delete as a principal that is not an admin exits 4 with forbidden", "[admin][auth]") {
  temp_dir dir;
  auto server = auth_broker(dir, "[principals.writer]\ntoken_sha256 = [\"" + sha256_hex("writer-token") +
                                     "\"]\nstream_append = { allow = [\">\"] }\nstream_read = { allow = [\">\"] }\n");
  // Refused before the stream is looked at: it may or may not exist.
  const auto [code, json] = cli_at(server.port(), "streams delete orders --json --token writer-token");
  INFO(json);
  CHECK(code == 4);
  CHECK(json.starts_with(R"({"error":{"code":"forbidden",)"));
}
