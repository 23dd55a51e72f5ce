// Unit tests for settings/: rows built over a small config of the test's
// own, parsed from a command line and a TOML file, checked, and shown in
// the docs' table.

#include "settings/parse_args.hpp"
#include "settings/setting_rows.hpp"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

namespace {

using namespace switchyard::settings;

enum class mode { fast, safe };

struct test_config {
  std::uint32_t workers = 4;
  std::chrono::milliseconds timeout{500};
  std::string host = "127.0.0.1";
  std::uint16_t port = 9000;
  bool verbose = false;
  mode how = mode::fast;
  std::size_t queue_bytes = 4096;
  std::size_t batch_bytes = 1024;  // by default 1024, at most queue-bytes
};

std::span<const setting<test_config>> rows() {
  using c = test_config;
  static const std::vector<setting<c>> table{
      integer("workers", &c::workers, "worker threads").range({1}, {64}, value_of(&c::workers)).stats().s,
      duration("timeout-ms", &c::timeout, "how long a peer may be silent")
          .range({1}, {unbounded}, count_of(&c::timeout))
          .reloadable()
          .s,
      address("listen", &c::host, &c::port, "host:port to listen on").s,
      toggle("verbose", &c::verbose, "log more").doc("log *more*").s,
      choice("mode", &c::how, std::array<std::string_view, 2>{"fast", "safe"}, "fast or safe").s,
      integer("queue-bytes", &c::queue_bytes, "queued bytes at most", "bytes").s,
      integer("batch-bytes", &c::batch_bytes, "bytes sent at once", "bytes")
          .default_rule("1024, at most `--queue-bytes`",
                        [](c& x) { x.batch_bytes = std::min<std::size_t>(1024, x.queue_bytes); })
          .range({1}, follows<c>("queue-bytes", [](const c& x) { return as_int64(x.queue_bytes); }),
                 value_of(&c::batch_bytes))
          .s,
  };
  return table;
}

// Parses `args` as a command line and checks the ranges, as a program does.
test_config parse(std::initializer_list<const char*> args) {
  CLI::App app{"settings test", "settings-test"};
  std::vector<const char*> argv{"settings-test"};
  argv.insert(argv.end(), args.begin(), args.end());
  const test_config cfg = parse_args(app, rows(), static_cast<int>(argv.size()), argv.data());
  check(rows(), cfg);
  return cfg;
}

}  // namespace

TEST_CASE("an integer setting outside its range is refused, naming the setting and its bounds", "[settings]") {
  CHECK(parse({"--workers", "64"}).workers == 64);
  CHECK_THROWS_WITH(parse({"--workers", "0"}), "workers must be between 1 and 64");
  CHECK_THROWS_WITH(parse({"--workers", "65"}), "workers must be between 1 and 64");
  CHECK_THROWS_AS(parse({"--workers", "many"}), CLI::ParseError);
  CHECK(find(rows(), "workers")->range_doc == "1 .. 64");
}

TEST_CASE("a duration setting is given as a count of its unit and shown as one", "[settings]") {
  const auto cfg = parse({"--timeout-ms", "1500"});
  CHECK(cfg.timeout == std::chrono::milliseconds(1500));
  CHECK(find(rows(), "timeout-ms")->show(cfg) == "1500");
  CHECK(find(rows(), "timeout-ms")->unit == "ms");
  CHECK_THROWS_WITH(parse({"--timeout-ms", "0"}), "timeout-ms must be at least 1 ms");
}

TEST_CASE("an address setting is split into its host and port, and a bad port is refused", "[settings]") {
  const auto cfg = parse({"--listen", "[::1]:7000"});
  CHECK(cfg.host == "[::1]");
  CHECK(cfg.port == 7000);
  CHECK(find(rows(), "listen")->show(cfg) == "[::1]:7000");
  CHECK(find(rows(), "listen")->fields.size() == 2);
  CHECK_THROWS_WITH(parse({"--listen", "localhost"}), "--listen must be host:port");
  CHECK_THROWS_WITH(parse({"--listen", "localhost:70000"}), "--listen port must be a number 0..65535");
}

TEST_CASE("a toggle setting is off unless given", "[settings]") {
  CHECK_FALSE(parse({}).verbose);
  const auto cfg = parse({"--verbose"});
  CHECK(cfg.verbose);
  CHECK(find(rows(), "verbose")->show(cfg) == "true");
}

TEST_CASE("a choice setting takes the names it lists and refuses any other", "[settings]") {
  CHECK(parse({}).how == mode::fast);
  CHECK(parse({"--mode", "safe"}).how == mode::safe);
  CHECK_THROWS_AS(parse({"--mode", "careful"}), CLI::ValidationError);
  CHECK(find(rows(), "mode")->range_doc == "`fast`, `safe`");
}

TEST_CASE("a default that follows another setting is derived when not given, and only checked when given",
          "[settings]") {
  CHECK(parse({}).batch_bytes == 1024);
  CHECK(parse({"--queue-bytes", "100"}).batch_bytes == 100);
  CHECK(parse({"--queue-bytes", "100", "--batch-bytes", "50"}).batch_bytes == 50);
  CHECK_THROWS_WITH(parse({"--queue-bytes", "100", "--batch-bytes", "101"}),
                    "batch-bytes must be between 1 and queue-bytes (100) bytes");
}

TEST_CASE("the markdown table has a row per setting: flag, default, range, on SIGHUP, meaning", "[settings]") {
  const std::string table = markdown(rows(), test_config{}, "| `--config` | – | – | – | a file |\n");
  CHECK(table.starts_with("| flag | default | range | on SIGHUP | meaning |\n| --- | --- | --- | --- | --- |\n"));
  CHECK(table.find("| `--workers` | `4` | 1 .. 64 | restart | worker threads |\n") != std::string::npos);
  CHECK(table.find("| `--timeout-ms` | `500` | at least 1 ms | applied | how long a peer may be silent |\n") !=
        std::string::npos);
  CHECK(table.find("| `--verbose` | off | – | restart | log *more* |\n") != std::string::npos);
  CHECK(table.find("| `--batch-bytes` | 1024, at most `--queue-bytes` | 1 .. `--queue-bytes` bytes | restart | "
                   "bytes sent at once |\n") != std::string::npos);
  CHECK(
      table.ends_with("| `--queue-bytes` | `4096` | – | restart | queued bytes at most |\n"
                      "| `--batch-bytes` | 1024, at most `--queue-bytes` | 1 .. `--queue-bytes` bytes | restart | "
                      "bytes sent at once |\n"
                      "| `--config` | – | – | – | a file |\n"));
}

TEST_CASE("a config file gives settings, flags win over it, and an unknown key is refused with a near one suggested",
          "[settings]") {
  const auto path = std::filesystem::temp_directory_path() / ("settings_test_" + std::to_string(::getpid()) + ".toml");
  {
    std::ofstream out(path);
    out << "workers = 8\ntimeout-ms = 700\nlisten = \"0.0.0.0:1\"\nverbose = true\n";
  }
  CLI::App app{"settings test", "settings-test"};
  const std::string file = path.string();
  const std::array<const char*, 5> argv{"settings-test", "--config", file.c_str(), "--workers", "9"};
  const auto cfg = parse_args(app, rows(), static_cast<int>(argv.size()), argv.data());
  CHECK(cfg.workers == 9);
  CHECK(cfg.timeout == std::chrono::milliseconds(700));
  CHECK(cfg.port == 1);
  CHECK(cfg.verbose);
  CHECK(config_file(app) == file);
  {
    std::ofstream out(path, std::ios::trunc);
    out << "workers = 8\nworkres = 9\n";
  }
  CHECK_THROWS_WITH(parse({"--config", file.c_str()}),
                    Catch::Contains("unknown setting 'workres' at line 2, column 1 (did you mean 'workers'?)"));
  std::filesystem::remove(path);
}
