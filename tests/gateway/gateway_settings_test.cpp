// switchyard-gateway's settings table, its command line, and the tables of
// docs/websocket.md generated from the settings and the error codes.

#include "gateway/device_errc.hpp"
#include "gateway/gateway_settings.hpp"
#include "tests/support/field_count.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace switchyard::edge;

namespace {

gateway_config parse(std::initializer_list<const char*> args) {
  std::vector<const char*> argv{"switchyard-gateway", "--jwt-secret-file", "/dev/null"};
  argv.insert(argv.end(), args.begin(), args.end());
  return parse_gateway_args(static_cast<int>(argv.size()), argv.data());
}

std::string read_doc() {
  std::ifstream in(std::string(SWITCHYARD_SOURCE_DIR) + "/docs/websocket.md");
  REQUIRE(in);
  std::stringstream whole;
  whole << in.rdbuf();
  return whole.str();
}

// The text between `begin` and `end` markers of docs/websocket.md, checked
// against `generated` (rewritten with SWITCHYARD_UPDATE_DOCS=1).
void check_generated(const std::string& begin, const std::string& end, const std::string& generated) {
  const std::string doc = read_doc();
  const auto from = doc.find(begin);
  const auto to = doc.find(end);
  REQUIRE(from != std::string::npos);
  REQUIRE(to != std::string::npos);
  const std::string table = doc.substr(from + begin.size(), to - from - begin.size());
  if (table != generated && std::getenv("SWITCHYARD_UPDATE_DOCS")) {
    std::ofstream out(std::string(SWITCHYARD_SOURCE_DIR) + "/docs/websocket.md", std::ios::trunc);
    out << doc.substr(0, from + begin.size()) << generated << doc.substr(to);
    SUCCEED("docs/websocket.md rewritten");
    return;
  }
  INFO("regenerate with: SWITCHYARD_UPDATE_DOCS=1 build/test-plain/tests/gateway_tests '[docs]'");
  CHECK(table == generated);
}

}  // namespace

TEST_CASE("every field of gateway_config is held by exactly one setting", "[gateway][config]") {
  std::multiset<std::size_t> held;
  for (const auto& s : gateway_settings()) held.insert(s.fields.begin(), s.fields.end());
  for (const auto f : held) CHECK(held.count(f) == 1);
  CHECK(std::set<std::size_t>(held.begin(), held.end()).size() == switchyard::test::field_count<gateway_config>());
}

TEST_CASE("the gateway's flags parse into its config, with defaults that follow other settings", "[gateway][config]") {
  const auto c = parse({"--listen", "0.0.0.0:9000", "--broker", "10.0.0.1:7878", "--broker", "10.0.0.2:7878",
                        "--ping-interval-ms", "1000", "--slow-consumer", "disconnect", "--flag", "offers=25"});
  CHECK(c.listen_host == "0.0.0.0");
  CHECK(c.listen_port == 9000);
  CHECK(c.brokers == std::vector<std::string>{"10.0.0.1:7878", "10.0.0.2:7878"});
  CHECK(c.ping_interval == std::chrono::milliseconds(1000));
  CHECK(c.dead_after == std::chrono::milliseconds(12'000));  // 2 x 1 s + 10 s
  CHECK(c.slow_consumer == slow_consumer_policy::disconnect);
  REQUIRE(c.flags.size() == 1);
  CHECK(c.flags[0] == std::pair<std::string, std::uint8_t>{"offers", 25});
  CHECK(parse({}).dead_after == std::chrono::milliseconds(60'000));
}

TEST_CASE("the gateway refuses values out of range and settings that do not go together", "[gateway][config]") {
  CHECK_THROWS_WITH(parse({"--ping-interval-ms", "5"}), Catch::Contains("ping-interval-ms must be between 100"));
  CHECK_THROWS_WITH(parse({"--ping-interval-ms", "30000", "--dead-after-ms", "20000"}),
                    Catch::Contains("dead-after-ms must be between ping-interval-ms (30000)"));
  CHECK_THROWS_WITH(parse({"--flag", "nosuch=5"}), Catch::Contains("known flag (offers)"));
  CHECK_THROWS_AS(parse({"--slow-consumer", "maybe"}), gateway_cli_exit);
  CHECK_THROWS_WITH(parse({"--http", "0.0.0.0:9100"}), Catch::Contains("refusing to serve monitoring on 0.0.0.0"));
  CHECK(parse({"--http", "0.0.0.0:9100", "--http-public"}).http_port == 9100);
  CHECK(parse({"--http", "localhost:9100"}).http_host == "127.0.0.1");
  CHECK_THROWS_WITH(parse({"--http-public"}), Catch::Contains("http-public needs --http"));
  CHECK_THROWS_WITH(parse({"--broker-tls-cert", "c.pem"}),
                    Catch::Contains("broker-tls-cert and broker-tls-key go together"));
  CHECK(parse({"--broker-tls-ca", "ca.pem"}).broker_tls);
  CHECK_THROWS_WITH(parse({"--tls-cert", "c.pem"}), Catch::Contains("tls-cert and tls-key go together"));
  CHECK_THROWS_WITH(parse({"--broker", "nonsense"}), Catch::Contains("--broker must be host:port"));
  CHECK_THROWS_WITH(parse({"--broker", "127.0.0.1:7878", "--broker", "10.0.0.2:x"}),
                    Catch::Contains("--broker port must be a number"));
  CHECK_THROWS_WITH(parse({"--broker", "127.0.0.1:0"}), Catch::Contains("port 0 is not a broker's port"));
  CHECK_THROWS_WITH(parse({"--tls-key", "c.key"}), Catch::Contains("tls-cert and tls-key go together"));
  const char* no_key[] = {"switchyard-gateway"};
  CHECK_THROWS_WITH(parse_gateway_args(1, no_key), Catch::Contains("no token key"));
}

TEST_CASE("the gateway's help names every setting", "[gateway][config]") {
  const char* argv[] = {"switchyard-gateway", "--help"};
  try {
    parse_gateway_args(2, argv);
    FAIL("--help did not exit");
  } catch (const gateway_cli_exit& e) {
    CHECK(e.code == 0);
    for (const auto& s : gateway_settings()) CHECK_THAT(e.text, Catch::Contains("--" + std::string(s.name)));
  }
}

TEST_CASE("the flag table of docs/websocket.md is the one the settings table generates", "[gateway][config][docs]") {
  check_generated("<!-- settings table: generated from gateway/gateway_settings.cpp -->\n",
                  "<!-- end of settings table -->", gateway_settings_markdown());
}

TEST_CASE("the close-code table of docs/websocket.md is the one device_errc generates", "[gateway][docs]") {
  check_generated("<!-- errors table: generated from gateway/device_errc.cpp -->\n", "<!-- end of errors table -->",
                  device_errc_markdown());
}

TEST_CASE("every message kind of the device protocol is in docs/websocket.md", "[gateway][docs]") {
  const std::string doc = read_doc();
  for (const char* t : {"hello", "hb", "sub", "unsub", "ack", "welcome", "msg", "offer", "withdrawn", "pub", "ok",
                        "error", "dropped", "trimmed"})
    CHECK_THAT(doc, Catch::Contains(std::string("| `") + t + "` |"));
}
