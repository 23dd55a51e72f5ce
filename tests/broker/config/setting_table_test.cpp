// Unit tests for broker::settings(): one row per setting, every field of
// server_config held by a row, and the docs' flag table generated from it.

#include "broker/config/setting_table.hpp"

#include "storage/durability.hpp"
#include "tests/support/field_count.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace switchyard::broker;

server_config parse(std::initializer_list<const char*> args) {
  std::vector<const char*> argv{"switchyard-server"};
  argv.insert(argv.end(), args.begin(), args.end());
  return parse_server_args(static_cast<int>(argv.size()), argv.data());
}

using switchyard::test::field_count;

struct counted {
  int a = 1;
  std::string b;
  std::vector<std::pair<std::string, int>> c;
};
static_assert(field_count<counted>() == 3);

}  // namespace

TEST_CASE("every field of server_config is held by exactly one setting or is named as no setting", "[broker][config]") {
  std::multiset<std::size_t> held;
  for (const auto& s : settings()) held.insert(s.fields.begin(), s.fields.end());
  for (const auto f : internal_fields()) held.insert(f);
  for (const auto f : held) CHECK(held.count(f) == 1);
  // Distinct offsets of distinct fields: as many as the struct has fields,
  // so a field added without a row fails here.
  CHECK(std::set<std::size_t>(held.begin(), held.end()).size() == field_count<server_config>());
}

TEST_CASE("every setting has a name, help, a way to parse, show and copy it, and a unique name", "[broker][config]") {
  std::set<std::string_view> names;
  for (const auto& s : settings()) {
    INFO(s.name);
    CHECK(names.insert(s.name).second);
    CHECK_FALSE(s.help.empty());
    CHECK(s.add);
    CHECK(s.show);
    CHECK(s.assign);
    CHECK(s.name.find_first_not_of("abcdefghijklmnopqrstuvwxyz-") == std::string_view::npos);
  }
  CHECK(find_setting("max-frame") != nullptr);
  CHECK(find_setting("no-such-setting") == nullptr);
}

TEST_CASE("--help lists every setting", "[broker][config]") {
  std::string help;
  try {
    parse({"--help"});
  } catch (const cli_exit& e) {
    help = e.output;
  }
  for (const auto& s : settings()) CHECK(help.find("--" + std::string(s.name)) != std::string::npos);
}

TEST_CASE("a setting shows what the parser read, and copying it carries exactly that setting", "[broker][config]") {
  const server_config given = parse({"--max-frame", "65536", "--durability", "batch", "--listen", "127.0.0.1:9",
                                     "--slow-consumer", "disconnect", "--flag", "offers=7"});
  const server_config defaults = parse({});
  CHECK(find_setting("max-frame")->show(given) == "65536");
  CHECK(find_setting("durability")->show(given) == "batch");
  CHECK(find_setting("listen")->show(given) == "127.0.0.1:9");
  CHECK(find_setting("slow-consumer")->show(given) == "disconnect");
  CHECK(find_setting("flag")->show(given) == "offers=7");
  for (const auto& s : settings()) {
    INFO(s.name);
    server_config to = defaults;
    s.assign(to, given);
    CHECK(s.show(to) == s.show(given));
    // Only this row changed.
    for (const auto& other : settings())
      if (&other != &s) CHECK(other.show(to) == other.show(defaults));
  }
}

TEST_CASE("the durability names of the settings table are the storage layer's", "[broker][config]") {
  for (const auto d : {switchyard::storage::durability::sync, switchyard::storage::durability::batch,
                       switchyard::storage::durability::none}) {
    const std::string name(switchyard::storage::durability_name(d));
    CHECK(parse({"--durability", name.c_str()}).durability == d);
  }
}

TEST_CASE("a default that follows another setting follows it, and only a value the user gave is refused",
          "[broker][config]") {
  // write-coalesce-bytes defaults to 64 KiB, at most max-pending-bytes.
  const auto small = parse({"--max-frame", "16384", "--max-pending-bytes", "16384"});
  CHECK(small.write_coalesce_bytes == 16384);
  CHECK(parse({}).write_coalesce_bytes == 65536);
  CHECK(parse({"--max-pending-bytes", "16777216"}).write_coalesce_bytes == 65536);
  CHECK_THROWS_WITH(parse({"--max-frame", "16384", "--max-pending-bytes", "16384", "--write-coalesce-bytes", "16385"}),
                    Catch::Contains("write-coalesce-bytes must be between 1 and max-pending-bytes (16384)"));
  CHECK(parse({"--max-frame", "16384", "--max-pending-bytes", "16384", "--write-coalesce-bytes", "100"})
            .write_coalesce_bytes == 100);
}

TEST_CASE("a range error names the setting, its bounds and its unit", "[broker][config]") {
  CHECK_THROWS_WITH(parse({"--max-frame", "100"}),
                    Catch::Contains("max-frame must be between 16384 and 67108864 bytes"));
  CHECK_THROWS_WITH(parse({"--heartbeat-ms", "9"}), Catch::Contains("heartbeat-ms must be between 10 and 3600000 ms"));
  CHECK_THROWS_WITH(parse({"--max-inboxes", "0"}), Catch::Contains("max-inboxes must be at least 1"));
  CHECK_THROWS_WITH(parse({"--max-pending-bytes", "1000"}),
                    Catch::Contains("max-pending-bytes must be at least max-frame (1048576)"));
}

TEST_CASE("the flag table of docs/operations.md is the one the settings table generates", "[broker][config][docs]") {
  const std::string path = std::string(SWITCHYARD_SOURCE_DIR) + "/docs/operations.md";
  std::ifstream in(path);
  REQUIRE(in);
  std::stringstream whole;
  whole << in.rdbuf();
  const std::string doc = whole.str();
  const std::string begin = "<!-- settings table: generated from broker/config/setting_table.cpp -->\n";
  const std::string end = "<!-- end of settings table -->";
  const auto from = doc.find(begin);
  const auto to = doc.find(end);
  REQUIRE(from != std::string::npos);
  REQUIRE(to != std::string::npos);
  const std::string table = doc.substr(from + begin.size(), to - from - begin.size());
  const std::string generated = settings_markdown();
  if (table != generated && std::getenv("SWITCHYARD_UPDATE_DOCS")) {
    std::ofstream out(path, std::ios::trunc);
    out << doc.substr(0, from + begin.size()) << generated << doc.substr(to);
    SUCCEED("docs/operations.md rewritten");
    return;
  }
  INFO("regenerate with: SWITCHYARD_UPDATE_DOCS=1 build/test-plain/tests/broker_tests '[docs]'");
  CHECK(table == generated);
}
