// Unit tests for broker::parse_server_args and broker::validate (command-line
// flags and the --config TOML file, parsed by CLI11).

#include "broker/config/server_config.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

using namespace switchyard::broker;
using namespace std::chrono_literals;

server_config parse(std::initializer_list<const char*> args) {
  std::vector<const char*> argv{"switchyard-server"};
  argv.insert(argv.end(), args.begin(), args.end());
  return parse_server_args(static_cast<int>(argv.size()), argv.data());
}

// Runs the parser and returns the cli_exit it throws; fails if it throws
// nothing or something else.
cli_exit parse_exit(std::initializer_list<const char*> args) {
  try {
    parse(args);
  } catch (const cli_exit& e) {
    return e;
  } catch (const std::exception& e) {
    FAIL("expected cli_exit, got std::exception: " << e.what());
  }
  FAIL("expected cli_exit, parsing succeeded");
  return {};
}

// A config file in the temp directory, removed again at scope exit.
class temp_config {
 public:
  explicit temp_config(const std::string& text) {
    static std::atomic<int> counter{0};
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / ("switchyard-config-test-" + std::to_string(::getpid()) + "-" +
                                                      std::to_string(counter++) + "-" + std::to_string(rd()) + ".toml");
    std::ofstream out(path_);
    out << text;
    REQUIRE(out.good());
  }
  ~temp_config() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  temp_config(const temp_config&) = delete;
  temp_config& operator=(const temp_config&) = delete;
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace

TEST_CASE("server config without arguments has the documented defaults", "[broker]") {
  const server_config cfg = parse({});
  CHECK(cfg.listen_host == "127.0.0.1");
  CHECK(cfg.listen_port == 7878);
  CHECK(cfg.data_dir == "switchyard-data");
  CHECK(cfg.port_file.empty());
  CHECK(cfg.max_frame == (1u << 20));
  CHECK(cfg.max_connections == 10000);
  CHECK(cfg.hello_timeout == 2000ms);
  CHECK(cfg.heartbeat_interval == 5000ms);
  CHECK(cfg.max_pending_bytes == (64u << 20));
  CHECK(cfg.slow_consumer == slow_consumer_policy::drop);
  CHECK(cfg.shutdown_grace == 2000ms);
  CHECK(cfg.log_level == "info");
}

TEST_CASE("server config accepts every option on the command line", "[broker]") {
  const server_config cfg =
      parse({"--listen", "0.0.0.0:9000", "--allow-anonymous", "--data-dir", "/var/lib/sy", "--port-file", "/tmp/port",
             "--max-frame", "65536", "--max-connections", "12", "--hello-timeout-ms", "750", "--heartbeat-ms", "250",
             "--max-pending-bytes", "131072", "--log-level", "debug"});
  CHECK(cfg.listen_host == "0.0.0.0");
  CHECK(cfg.listen_port == 9000);
  CHECK(cfg.data_dir == "/var/lib/sy");
  CHECK(cfg.port_file == "/tmp/port");
  CHECK(cfg.max_frame == 65536);
  CHECK(cfg.max_connections == 12);
  CHECK(cfg.hello_timeout == 750ms);
  CHECK(cfg.heartbeat_interval == 250ms);
  CHECK(cfg.max_pending_bytes == 131072);
  CHECK(cfg.log_level == "debug");
}

TEST_CASE("server config --listen with port 0 parses port 0", "[broker]") {
  const server_config cfg = parse({"--listen", "127.0.0.1:0"});
  CHECK(cfg.listen_host == "127.0.0.1");
  CHECK(cfg.listen_port == 0);
}

TEST_CASE("server config --listen splits host and port at the last colon", "[broker]") {
  const server_config cfg = parse({"--listen", "localhost:65535"});
  CHECK(cfg.listen_host == "localhost");
  CHECK(cfg.listen_port == 65535);
}

TEST_CASE("server config --listen with a bad port throws invalid_argument", "[broker]") {
  CHECK_THROWS_AS(parse({"--listen", "127.0.0.1:http"}), std::invalid_argument);
  CHECK_THROWS_AS(parse({"--listen", "127.0.0.1:"}), std::invalid_argument);
  CHECK_THROWS_AS(parse({"--listen", "127.0.0.1:65536"}), std::invalid_argument);
  CHECK_THROWS_AS(parse({"--listen", "127.0.0.1:-1"}), std::invalid_argument);
  CHECK_THROWS_AS(parse({"--listen", "127.0.0.1:99999999999999999999999"}), std::invalid_argument);
}

TEST_CASE("server config --listen without a colon or without a host throws invalid_argument", "[broker]") {
  CHECK_THROWS_AS(parse({"--listen", "127.0.0.1"}), std::invalid_argument);
  CHECK_THROWS_AS(parse({"--listen", ":7878"}), std::invalid_argument);
}

// Regression: the port was once parsed with stoul, which ignores trailing text.
TEST_CASE("server config --listen rejects a port with trailing garbage", "[broker]") {
  CHECK_THROWS_AS(parse({"--listen", "127.0.0.1:80x"}), std::invalid_argument);
  CHECK_THROWS_AS(parse({"--listen", "127.0.0.1:8080abc"}), std::invalid_argument);
  CHECK_THROWS_AS(parse({"--listen", "127.0.0.1:1.5"}), std::invalid_argument);
}

TEST_CASE("server config --slow-consumer selects the policy", "[broker]") {
  CHECK(parse({"--slow-consumer", "disconnect"}).slow_consumer == slow_consumer_policy::disconnect);
  CHECK(parse({"--slow-consumer", "drop"}).slow_consumer == slow_consumer_policy::drop);
}

TEST_CASE("server config rejects an unknown --slow-consumer policy with a non-zero exit", "[broker]") {
  const cli_exit e = parse_exit({"--slow-consumer", "foo"});
  CHECK(e.code != 0);
  CHECK_THAT(e.output, Catch::Contains("slow-consumer"));
  CHECK_THAT(e.output, Catch::Contains("foo"));
}

TEST_CASE("server config rejects an unknown --log-level with a non-zero exit", "[broker]") {
  const cli_exit e = parse_exit({"--log-level", "verbose"});
  CHECK(e.code != 0);
  CHECK_THAT(e.output, Catch::Contains("log-level"));
}

TEST_CASE("server config --help exits with code 0 and lists the options", "[broker]") {
  const cli_exit e = parse_exit({"--help"});
  CHECK(e.code == 0);
  CHECK_THAT(e.output, Catch::Contains("--max-frame"));
  CHECK_THAT(e.output, Catch::Contains("--slow-consumer"));
  CHECK_THAT(e.output, Catch::Contains("--config"));
}

TEST_CASE("server config --version exits with code 0 and prints the version", "[broker]") {
  const cli_exit e = parse_exit({"--version"});
  CHECK(e.code == 0);
  CHECK_THAT(e.output, Catch::Contains(SWITCHYARD_VERSION));
}

TEST_CASE("server config rejects an unknown flag with a non-zero exit", "[broker]") {
  const cli_exit e = parse_exit({"--no-such-flag"});
  CHECK(e.code != 0);
  CHECK_THAT(e.output, Catch::Contains("no-such-flag"));
}

TEST_CASE("server config rejects a non-numeric number option with a non-zero exit", "[broker]") {
  CHECK(parse_exit({"--max-frame", "lots"}).code != 0);
  CHECK(parse_exit({"--max-connections", "-5"}).code != 0);
  CHECK(parse_exit({"--heartbeat-ms", "1s"}).code != 0);
}

TEST_CASE("server config --max-frame 100 is below the minimum and throws invalid_argument", "[broker]") {
  CHECK_THROWS_AS(parse({"--max-frame", "100"}), std::invalid_argument);
}

TEST_CASE("server config accepts --max-frame at both ends of its range and nothing beyond", "[broker]") {
  CHECK(parse({"--max-frame", "16384"}).max_frame == 16384);
  CHECK_THROWS_AS(parse({"--max-frame", "16383"}), std::invalid_argument);
  CHECK(parse({"--max-frame", "67108864", "--max-pending-bytes", "67108864"}).max_frame == 67108864);
  CHECK_THROWS_AS(parse({"--max-frame", "67108865", "--max-pending-bytes", "134217728"}), std::invalid_argument);
}

TEST_CASE("server config rejects a pending-bytes limit below max-frame", "[broker]") {
  CHECK_THROWS_AS(parse({"--max-frame", "65536", "--max-pending-bytes", "65535"}), std::invalid_argument);
  CHECK(parse({"--max-frame", "65536", "--max-pending-bytes", "65536"}).max_pending_bytes == 65536);
}

TEST_CASE("server config rejects out-of-range connection, hello and heartbeat settings", "[broker]") {
  CHECK_THROWS_AS(parse({"--max-connections", "0"}), std::invalid_argument);
  CHECK_THROWS_AS(parse({"--hello-timeout-ms", "0"}), std::invalid_argument);
  CHECK_THROWS_AS(parse({"--hello-timeout-ms", "-1"}), std::invalid_argument);
  CHECK_THROWS_AS(parse({"--heartbeat-ms", "9"}), std::invalid_argument);
  CHECK(parse({"--heartbeat-ms", "10"}).heartbeat_interval == 10ms);
  CHECK(parse({"--hello-timeout-ms", "1"}).hello_timeout == 1ms);
}

TEST_CASE("validate names the bad setting in its exception", "[broker]") {
  server_config cfg;
  CHECK_NOTHROW(validate(cfg));
  cfg.max_connections = 0;
  CHECK_THROWS_WITH(validate(cfg), Catch::Contains("max-connections"));
  cfg = server_config{};
  cfg.listen_host.clear();
  CHECK_THROWS_AS(validate(cfg), std::invalid_argument);
  cfg = server_config{};
  cfg.max_frame = 100;
  CHECK_THROWS_WITH(validate(cfg), Catch::Contains("max-frame"));
}

TEST_CASE("heartbeat deadline is two and a half intervals", "[broker]") {
  CHECK(heartbeat_deadline(1000ms) == 2500ms);
  CHECK(heartbeat_deadline(5000ms) == 12500ms);
  CHECK(heartbeat_deadline(10ms) == 25ms);
}

TEST_CASE("server config applies settings from a TOML file given with --config", "[broker]") {
  temp_config file("max-connections = 7\nslow-consumer = \"disconnect\"\n");
  const server_config cfg = parse({"--config", file.path().c_str()});
  CHECK(cfg.max_connections == 7);
  CHECK(cfg.slow_consumer == slow_consumer_policy::disconnect);
  // Untouched settings keep their defaults.
  CHECK(cfg.max_frame == (1u << 20));
  CHECK(cfg.listen_port == 7878);
}

TEST_CASE("server config file keys are the long option names without dashes", "[broker]") {
  temp_config file(
      "listen = \"0.0.0.0:9100\"\n"
      "allow-anonymous = true\n"
      "data-dir = \"/srv/switchyard\"\n"
      "max-frame = 32768\n"
      "hello-timeout-ms = 900\n"
      "heartbeat-ms = 300\n"
      "max-pending-bytes = 1048576\n"
      "log-level = \"warn\"\n");
  const server_config cfg = parse({"--config", file.path().c_str()});
  CHECK(cfg.listen_host == "0.0.0.0");
  CHECK(cfg.listen_port == 9100);
  CHECK(cfg.data_dir == "/srv/switchyard");
  CHECK(cfg.max_frame == 32768);
  CHECK(cfg.hello_timeout == 900ms);
  CHECK(cfg.heartbeat_interval == 300ms);
  CHECK(cfg.max_pending_bytes == 1048576);
  CHECK(cfg.log_level == "warn");
}

TEST_CASE("server config command-line flags override the config file", "[broker]") {
  temp_config file("max-connections = 7\nslow-consumer = \"disconnect\"\n");
  const server_config cfg =
      parse({"--config", file.path().c_str(), "--max-connections", "9", "--slow-consumer", "drop"});
  CHECK(cfg.max_connections == 9);
  CHECK(cfg.slow_consumer == slow_consumer_policy::drop);
}

TEST_CASE("server config rejects an unknown key in the config file with a non-zero exit", "[broker]") {
  temp_config file("max-connections = 7\nno-such-setting = 1\n");
  const cli_exit e = parse_exit({"--config", file.path().c_str()});
  CHECK(e.code != 0);
  CHECK_THAT(e.output, Catch::Contains("no-such-setting"));
}

TEST_CASE("server config names an unknown key's line and the known key it is closest to", "[broker]") {
  temp_config file("listen = \"127.0.0.1:0\"\nmax-conections = 7\n");
  const cli_exit e = parse_exit({"--config", file.path().c_str()});
  CHECK(e.code != 0);
  CHECK_THAT(e.output, Catch::Contains("unknown setting 'max-conections' at line 2, column 1 (did you mean "
                                       "'max-connections'?)"));
  temp_config far("qqqqqqqqqq = 1\n");  // nothing near: no suggestion
  const cli_exit f = parse_exit({"--config", far.path().c_str()});
  CHECK_THAT(f.output, Catch::Contains("unknown setting 'qqqqqqqqqq' at line 1"));
  CHECK_THAT(f.output, !Catch::Contains("did you mean"));
}

TEST_CASE("server config file keys with underscores instead of dashes are unknown keys", "[broker]") {
  temp_config file("max_connections = 7\n");
  const cli_exit e = parse_exit({"--config", file.path().c_str()});
  CHECK(e.code != 0);
}

TEST_CASE("server config file values go through the same checks as flags", "[broker]") {
  {
    temp_config file("slow-consumer = \"foo\"\n");
    CHECK(parse_exit({"--config", file.path().c_str()}).code != 0);
  }
  {
    temp_config file("max-frame = 100\n");
    CHECK_THROWS_AS(parse({"--config", file.path().c_str()}), std::invalid_argument);
  }
}

TEST_CASE("server config with a missing config file exits non-zero", "[broker]") {
  const std::string missing =
      (std::filesystem::temp_directory_path() / "switchyard-config-test-does-not-exist.toml").string();
  REQUIRE_FALSE(std::filesystem::exists(missing));
  const cli_exit e = parse_exit({"--config", missing.c_str()});
  CHECK(e.code != 0);
}

TEST_CASE("server config --durable-channel is repeatable and also a TOML list", "[broker]") {
  auto cfg = parse({"--durable-channel", "orders.>", "--durable-channel", "audit.*"});
  CHECK(cfg.durable_channels == std::vector<std::string>{"orders.>", "audit.*"});
  temp_config file("durable-channel = [\"orders.>\", \"chat.*.archive\"]\n");
  const std::string path = file.path();
  auto from_file = parse({"--config", path.c_str()});
  CHECK(from_file.durable_channels == std::vector<std::string>{"orders.>", "chat.*.archive"});
}

TEST_CASE("server config rejects an invalid --durable-channel pattern and one without a data dir", "[broker]") {
  CHECK_THROWS_AS(parse({"--durable-channel", "orders..x"}), std::invalid_argument);
  CHECK_THROWS_AS(parse({"--durable-channel", "orders.>", "--data-dir", ""}), std::invalid_argument);
}

TEST_CASE("server config names a listen host that is not an IP address or localhost", "[broker]") {
  for (const char* listen : {"256.1.1.1:0", "example.com:0", "127.0.0:0", "[::1:0"}) {
    INFO(listen);
    try {
      parse({"--listen", listen});
      FAIL("accepted");
    } catch (const std::invalid_argument& e) {
      const std::string host = std::string(listen).substr(0, std::string(listen).rfind(':'));
      CHECK_THAT(e.what(), Catch::Contains("\"" + host + "\"") && Catch::Contains("not an IPv4 or IPv6 address"));
    }
  }
}

TEST_CASE("server config listen_address maps localhost to 127.0.0.1 and accepts IPv6 in brackets", "[broker]") {
  CHECK(listen_address("localhost") == "127.0.0.1");
  CHECK(listen_address("127.0.0.1") == "127.0.0.1");
  CHECK(listen_address("[::1]") == "::1");
  CHECK(listen_address("::1") == "::1");
  CHECK(listen_address("fe80::1%lo") == "fe80::1%lo");
  CHECK(listen_address("0.0.0.0") == "0.0.0.0");
  CHECK(listen_address("256.1.1.1").empty());
  CHECK(listen_address("").empty());
  CHECK(parse({"--listen", "[::1]:0"}).listen_host == "[::1]");
}

TEST_CASE("server config reports a TOML syntax error with its line instead of a later setting's error", "[broker]") {
  temp_config file("max-connections = 5\nlisten = \"127.0.0.1:7878\nslow-consumer = \"drop\"\n");
  const cli_exit e = parse_exit({"--config", file.path().c_str()});
  CHECK(e.code != 0);
  CHECK_THAT(e.output, Catch::Contains("config file") && Catch::Contains("line 2"));
  CHECK_THAT(e.output, !Catch::Contains("max-connections"));
}

TEST_CASE("server config file sections are refused with a clear error", "[broker]") {
  temp_config file("[server]\nmax-connections = 5\n");
  const cli_exit e = parse_exit({"--config", file.path().c_str()});
  CHECK(e.code != 0);
  CHECK_THAT(e.output, Catch::Contains("sections are not supported"));
}

TEST_CASE("server config file booleans, integers and lists reach their options", "[broker]") {
  temp_config file("max-connections = 12\ndurable-channel = [\"a.>\"]\ndata-dir = \"d\"\n");
  const auto cfg = parse({"--config", file.path().c_str()});
  CHECK(cfg.max_connections == 12);
  CHECK(cfg.durable_channels == std::vector<std::string>{"a.>"});
}

TEST_CASE("server config refuses a port-file that names a directory", "[broker]") {
  const auto dir = std::filesystem::temp_directory_path();
  try {
    parse({"--port-file", dir.c_str()});
    FAIL("accepted");
  } catch (const std::invalid_argument& e) {
    CHECK_THAT(e.what(), Catch::Contains("port-file") && Catch::Contains("is a directory"));
  }
}

TEST_CASE("server config derives the stall threshold from the shortest TTL and the sweep period", "[broker]") {
  CHECK(stall_threshold_for(parse({})) == 400ms);
  CHECK(stall_threshold_for(parse({"--lease-min-ttl-ms", "3000", "--sweep-ms", "50"})) == 1450ms);
  CHECK(stall_threshold_for(parse({"--lease-min-ttl-ms", "100", "--sweep-ms", "100"})) == 100ms);
  CHECK(stall_threshold_for(parse({"--lease-min-ttl-ms", "200", "--sweep-ms", "100"})) == 100ms);
  CHECK(stall_threshold_for(parse({"--stall-threshold-ms", "300"})) == 300ms);
}

TEST_CASE("server config refuses a stall threshold that would let a pause expire leases kept alive in time",
          "[broker]") {
  CHECK_THROWS_AS(parse({"--stall-threshold-ms", "2000"}), std::invalid_argument);
  CHECK_THROWS_AS(parse({"--stall-threshold-ms", "401"}), std::invalid_argument);
  CHECK_NOTHROW(parse({"--stall-threshold-ms", "400"}));
  CHECK_THROWS_AS(parse({"--stall-threshold-ms", "-5"}), std::invalid_argument);
  // Below one sweep period every sweep would count as a stall, and no lease would expire.
  CHECK_THROWS_AS(parse({"--stall-threshold-ms", "0"}), std::invalid_argument);
  CHECK_THROWS_AS(parse({"--stall-threshold-ms", "99"}), std::invalid_argument);
  CHECK_NOTHROW(parse({"--stall-threshold-ms", "100"}));
}

TEST_CASE("server config lifecycle flags have documented defaults and parse from flags", "[broker]") {
  const server_config d = parse({});
  CHECK(d.admin_slots == 4);
  CHECK(d.max_hellos_per_s == 0);
  CHECK(d.hello_burst == 0);
  CHECK(d.drain_window == 30'000ms);
  CHECK(d.shutdown_grace == 2000ms);
  CHECK(d.config_file.empty());
  const server_config c = parse({"--admin-slots", "2", "--max-hellos-per-s", "250", "--hello-burst", "500",
                                 "--drain-window-ms", "300000", "--shutdown-grace-ms", "750"});
  CHECK(c.admin_slots == 2);
  CHECK(c.max_hellos_per_s == 250);
  CHECK(c.hello_burst == 500);
  CHECK(c.drain_window == 300'000ms);
  CHECK(c.shutdown_grace == 750ms);
}

TEST_CASE("server config write coalescing has documented defaults, parses from flags and refuses values out of range",
          "[broker]") {
  const server_config d = parse({});
  CHECK(d.write_coalesce_turns == 2);
  CHECK(d.write_coalesce_time == 10'000us);
  CHECK(d.write_coalesce_bytes == 64 * 1024);
  const server_config c =
      parse({"--write-coalesce-turns", "0", "--write-coalesce-us", "250", "--write-coalesce-bytes", "16384"});
  CHECK(c.write_coalesce_turns == 0);
  CHECK(c.write_coalesce_time == 250us);
  CHECK(c.write_coalesce_bytes == 16384);
  CHECK_THROWS_AS(parse({"--write-coalesce-turns", "65"}), std::invalid_argument);
  CHECK_THROWS_AS(parse({"--write-coalesce-turns", "-1"}), std::invalid_argument);
  CHECK_THROWS_AS(parse({"--write-coalesce-us", "1000001"}), std::invalid_argument);
  CHECK_THROWS_AS(parse({"--write-coalesce-us", "-1"}), std::invalid_argument);
  CHECK_THROWS_AS(parse({"--write-coalesce-bytes", "0"}), std::invalid_argument);
  CHECK_THROWS_AS(parse({"--max-pending-bytes", "2097152", "--write-coalesce-bytes", "2097153"}),
                  std::invalid_argument);
}

TEST_CASE("server config refuses lifecycle settings out of range", "[broker]") {
  CHECK_THROWS_AS(parse({"--shutdown-grace-ms", "0"}), std::invalid_argument);
  CHECK_THROWS_AS(parse({"--drain-window-ms", "0"}), std::invalid_argument);
  CHECK_THROWS_AS(parse({"--drain-window-ms", "86400001"}), std::invalid_argument);
  CHECK_THROWS_AS(parse({"--admin-slots", "1001"}), std::invalid_argument);
  CHECK_THROWS_AS(parse({"--hello-burst", "10"}), std::invalid_argument);  // needs a rate
}

TEST_CASE("server config re-parsing re-reads the config file while flags still win", "[broker]") {
  temp_config file("max-subscriptions = 100\nmax-inboxes = 7\n");
  const server_config first = parse({"--config", file.path().c_str(), "--max-inboxes", "3"});
  CHECK(first.config_file == file.path());
  CHECK(first.max_subscriptions == 100);
  CHECK(first.max_inboxes == 3);
  {
    std::ofstream out(file.path(), std::ios::trunc);
    out << "max-subscriptions = 2\nmax-inboxes = 9\n";
  }
  const server_config again = reparse_server_args(first);
  CHECK(again.max_subscriptions == 2);
  CHECK(again.max_inboxes == 3);
  {
    std::ofstream out(file.path(), std::ios::trunc);
    out << "max-subscriptions = \"many\"\n";
  }
  CHECK_THROWS(reparse_server_args(first));
}

TEST_CASE("server config refuses a heartbeat interval longer than an hour instead of overflowing its deadline",
          "[broker]") {
  // Found by fuzz/config_fuzz.cpp: 2.5 intervals overflowed (signed, UB).
  CHECK_THROWS_AS(parse({"--heartbeat-ms", "9223372036854775807"}), std::invalid_argument);
  CHECK_THROWS_AS(parse({"--heartbeat-ms", "3600001"}), std::invalid_argument);
  const server_config cfg = parse({"--heartbeat-ms", "3600000"});
  CHECK(heartbeat_deadline(cfg.heartbeat_interval) == std::chrono::milliseconds(9'000'000));
}

TEST_CASE("server config refuses a huge stall threshold instead of overflowing its sum with the sweep period",
          "[broker]") {
  // Found by fuzz/config_fuzz.cpp: threshold + sweep period wrapped to a
  // negative sum (signed, UB) that passed the check.
  CHECK_THROWS_AS(
      parse({"--lease-min-ttl-ms", "1000", "--sweep-ms", "100", "--stall-threshold-ms", "9223372036854775807"}),
      std::invalid_argument);
  // The largest threshold allowed: plus the sweep period, half the shortest TTL.
  CHECK(parse({"--lease-min-ttl-ms", "1000", "--sweep-ms", "100", "--stall-threshold-ms", "400"}).stall_threshold ==
        400ms);
  CHECK_THROWS_AS(parse({"--lease-min-ttl-ms", "1000", "--sweep-ms", "100", "--stall-threshold-ms", "401"}),
                  std::invalid_argument);
}

TEST_CASE("protected mode: no auth file on a non-loopback address is refused, naming the flag that allows it",
          "[broker]") {
  for (const char* listen : {"0.0.0.0:7878", "10.1.2.3:7878", "[::]:7878"}) {
    try {
      parse({"--listen", listen});
      FAIL("accepted " << listen);
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      CHECK(what.find("protected mode") != std::string::npos);
      CHECK(what.find("--allow-anonymous") != std::string::npos);
      CHECK(what.find("--auth-file") != std::string::npos);
    }
  }
}

TEST_CASE("protected mode: loopback, --allow-anonymous or an auth file may listen anywhere", "[broker]") {
  CHECK(parse({"--listen", "127.0.0.1:0"}).listen_host == "127.0.0.1");
  CHECK(parse({"--listen", "127.8.9.10:0"}).listen_host == "127.8.9.10");
  CHECK(parse({"--listen", "[::1]:0"}).listen_host == "[::1]");
  CHECK(parse({"--listen", "localhost:0"}).listen_host == "localhost");
  CHECK(parse({"--listen", "0.0.0.0:0", "--allow-anonymous"}).allow_anonymous);
  CHECK(parse({"--listen", "0.0.0.0:0", "--auth-file", "/etc/switchyard/auth.toml"}).auth_file ==
        "/etc/switchyard/auth.toml");
  CHECK_THROWS_AS(parse({"--auth-file", "a.toml", "--allow-anonymous"}), std::invalid_argument);
}

TEST_CASE("is_loopback_host knows 127.0.0.0/8, ::1, mapped IPv4 loopback and localhost only", "[broker]") {
  CHECK(is_loopback_host("127.0.0.1"));
  CHECK(is_loopback_host("127.255.0.1"));
  CHECK(is_loopback_host("::1"));
  CHECK(is_loopback_host("[::1]"));
  CHECK(is_loopback_host("::ffff:127.0.0.1"));
  CHECK(is_loopback_host("localhost"));
  CHECK_FALSE(is_loopback_host("0.0.0.0"));
  CHECK_FALSE(is_loopback_host("128.0.0.1"));
  CHECK_FALSE(is_loopback_host("::"));
  CHECK_FALSE(is_loopback_host("::ffff:10.0.0.1"));
  CHECK_FALSE(is_loopback_host("example.com"));
}

TEST_CASE("server config --http takes host:port, is off by default and names itself in errors", "[broker]") {
  CHECK(parse({}).http_host.empty());
  const server_config cfg = parse({"--http", "127.0.0.1:8222"});
  CHECK(cfg.http_host == "127.0.0.1");
  CHECK(cfg.http_port == 8222);
  CHECK_THROWS_WITH(parse({"--http", "8222"}), Catch::Contains("--http must be host:port"));
  CHECK_THROWS_WITH(parse({"--http", "127.0.0.1:web"}), Catch::Contains("--http port"));
  CHECK_THROWS_WITH(parse({"--http", "10.1.2.3:8222"}), Catch::Contains("--http-public"));
  CHECK(parse({"--http", "10.1.2.3:8222", "--http-public"}).http_public);
  CHECK_THROWS_WITH(parse({"--http-public"}), Catch::Contains("http-public needs --http"));
}

TEST_CASE("server config takes the offer limits and flags at start", "[broker][offers]") {
  const auto cfg = parse({"--max-offers", "5", "--max-pending-per-key", "3", "--max-offer-expiry-ms", "60000",
                          "--exposure-window-ms", "120000", "--max-exposure-keys", "9", "--flag", "offers=10"});
  CHECK(cfg.max_offers == 5);
  CHECK(cfg.max_pending_per_key == 3);
  CHECK(cfg.max_offer_expiry == 60000ms);
  CHECK(cfg.exposure_window == 120000ms);
  CHECK(cfg.max_exposure_keys == 9);
  REQUIRE(cfg.flags.size() == 1);
  CHECK(cfg.flags[0].first == "offers");
  CHECK(cfg.flags[0].second == 10);
  CHECK(parse({}).flags.empty());
}

TEST_CASE("server config refuses an unknown flag or a percentage outside 0..100", "[broker][offers]") {
  CHECK_THROWS_WITH(parse({"--flag", "bogus=1"}), Catch::Contains("known flag"));
  CHECK_THROWS_WITH(parse({"--flag", "offers"}), Catch::Contains("NAME=PERCENT"));
  CHECK_THROWS_WITH(parse({"--flag", "offers=101"}), Catch::Contains("0..100"));
  CHECK_THROWS_WITH(parse({"--flag", "offers=-1"}), Catch::Contains("0..100"));
  CHECK_THROWS_WITH(parse({"--max-offers", "0"}), Catch::Contains("max-offers"));
  CHECK_THROWS_WITH(parse({"--exposure-window-ms", "0"}), Catch::Contains("exposure-window-ms"));
}

TEST_CASE("server config reads cluster mode's settings, repeatable endpoints included", "[broker]") {
  const server_config cfg =
      parse({"--cluster-node-id", "node-1", "--cluster-etcd", "127.0.0.1:2379", "--cluster-etcd", "127.0.0.1:2380",
             "--cluster-nats", "nats://127.0.0.1:4222", "--cluster-lease-ttl-s", "7"});
  CHECK(cfg.cluster_node_id == "node-1");
  CHECK(cfg.cluster_name == "switchyard");
  CHECK(cfg.cluster_etcd == std::vector<std::string>{"127.0.0.1:2379", "127.0.0.1:2380"});
  CHECK(cfg.cluster_nats == std::vector<std::string>{"nats://127.0.0.1:4222"});
  CHECK(cfg.cluster_lease_ttl_s == 7);
  CHECK(cfg.cluster_interest_timeout == 1000ms);
  CHECK(cfg.cluster_forward_timeout == 2000ms);
}

TEST_CASE("server config refuses a cluster node id without etcd and NATS, or with characters outside a subject",
          "[broker]") {
  CHECK_THROWS_WITH(parse({"--cluster-node-id", "a"}), Catch::Contains("needs --cluster-etcd and --cluster-nats"));
  CHECK_THROWS_WITH(parse({"--cluster-node-id", "a.b", "--cluster-etcd", "e:1", "--cluster-nats", "nats://n:1"}),
                    Catch::Contains("cluster-node-id must be 1..64 letters"));
  CHECK_THROWS_WITH(parse({"--cluster-name", "x y"}), Catch::Contains("cluster-name must be"));
  CHECK_THROWS_WITH(parse({"--cluster-lease-ttl-s", "1"}), Catch::Contains("between 2 and 60 s"));
}
