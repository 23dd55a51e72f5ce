// Fuzz target: switchyard-server's configuration parsers, as main() runs
// them: parse_server_args (CLI11 with the TOML reader of
// settings/toml_config.hpp) on a command line naming a config file, then
// validate. Their contract: a config is returned, or cli_exit or
// std::invalid_argument is thrown; anything else (another exception, a
// crash, a sanitizer report) is a bug.
//
// Input: the config file's text, then optionally a 0 byte and extra
// command-line arguments, one per line (flags win over the file).

#include "broker/config/server_config.hpp"
#include "fuzz/seeds.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace switchyard::broker;

std::string config_path;

std::vector<switchyard::fuzz::seed> seeds() {
  using switchyard::fuzz::seed_of;
  return {
      seed_of("listen = \"127.0.0.1:0\"\ndata-dir = \"\"\nmax-frame = 65536\nheartbeat-ms = 100\n"),
      seed_of("durable-channel = [\"orders.>\", \"audit.*\"]\ndata-dir = \"d\"\nlog-level = \"debug\"\n"
              "lease-min-ttl-ms = 1000\nlease-max-ttl-ms = 60000\nsweep-ms = 100\nstall-threshold-ms = 200\n"),
      seed_of("slow-consumer = \"disconnect\"\nmax-pending-bytes = 1048576\nretention-max-age-ms = 1.5\n"
              "verify-on-start = true\n[section]\nx = 1\n"),
      seed_of(std::string("max-connections = 10\n", 21) + '\0' + "--listen\n[::1]:7878\n--durability\nbatch\n"),
  };
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  switchyard::fuzz::write_seeds_if_asked(seeds());
  const char* tmp = std::getenv("TMPDIR");
  config_path =
      std::string(tmp && *tmp ? tmp : "/tmp") + "/switchyard-config-fuzz-" + std::to_string(::getpid()) + ".toml";
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const auto split = input.find('\0');
  {
    std::ofstream f(config_path, std::ios::binary | std::ios::trunc);
    f << input.substr(0, split);
  }
  std::vector<std::string> args{"switchyard-server", "--config", config_path};
  if (split != std::string_view::npos) {
    std::string_view rest = input.substr(split + 1);
    for (int i = 0; i < 32 && !rest.empty(); ++i) {
      const auto nl = rest.find('\n');
      args.emplace_back(rest.substr(0, nl));
      if (nl == std::string_view::npos) break;
      rest = rest.substr(nl + 1);
    }
  }
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  try {
    const server_config cfg = parse_server_args(static_cast<int>(argv.size()), argv.data());
    (void)heartbeat_deadline(cfg.heartbeat_interval);
    (void)stall_threshold_for(cfg);
    (void)reparse_server_args(cfg);  // a SIGHUP with the same file
  } catch (const cli_exit&) {
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
