#pragma once
// Running the real switchyard-cli binary from the admin tests: a command
// that ends by itself (its exit code and stdout), and one left running in
// the background (sub, streams tail --follow) that a test signals, whose
// output it reads while it runs.

#include "switchyard/client.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

extern char** environ;

namespace switchyard::test {

// switchyard-cli against `port` with `args` (through the shell); stdout
// only (stderr dropped).
inline std::pair<int, std::string> cli(std::uint16_t port, const std::string& args) {
  return run_for_exit_code(std::string(SWITCHYARD_CLI_BINARY) + " --address 127.0.0.1:" + std::to_string(port) + " " +
                           args + " 2>/dev/null");
}

// Its stderr only.
inline std::pair<int, std::string> cli_stderr(std::uint16_t port, const std::string& args) {
  return run_for_exit_code(std::string(SWITCHYARD_CLI_BINARY) + " --address 127.0.0.1:" + std::to_string(port) + " " +
                           args + " 2>&1 >/dev/null");
}

inline bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

// One JSON object on one line.
inline bool one_json_object(const std::string& out) {
  return out.size() > 2 && out.front() == '{' && out.ends_with("}\n") && out.find('\n') == out.size() - 1;
}

// The lines of `out`, without their line breaks.
inline std::vector<std::string> lines_of(const std::string& out) {
  std::vector<std::string> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// switchyard-cli started in the background (posix_spawn, no shell) with
// its stdout and stderr going to files, so the test can read them while
// it runs. The destructor kills it if it is still running.
class background_cli {
 public:
  background_cli(std::uint16_t port, const std::vector<std::string>& args) {
    std::vector<std::string> argv{SWITCHYARD_CLI_BINARY, "--address", "127.0.0.1:" + std::to_string(port)};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> raw;
    for (auto& a : argv) raw.push_back(a.data());
    raw.push_back(nullptr);
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&files, 1, out_file().c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&files, 2, err_file().c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int rc = ::posix_spawn(&pid_, raw[0], &files, nullptr, raw.data(), environ);
    posix_spawn_file_actions_destroy(&files);
    REQUIRE(rc == 0);
  }
  ~background_cli() {
    if (pid_ > 0 && !exit_code_) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
  }
  background_cli(const background_cli&) = delete;
  background_cli& operator=(const background_cli&) = delete;

  std::string out() const { return slurp(out_file()); }
  std::string err() const { return slurp(err_file()); }

  void signal(int sig) { REQUIRE(::kill(pid_, sig) == 0); }

  // Waits up to `timeout` for it to exit: its exit code (-signal if a
  // signal ended it), or nullopt if it is still running.
  std::optional<int> wait(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    if (exit_code_) return exit_code_;
    const auto until = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      int status = 0;
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
        return exit_code_;
      }
      if (std::chrono::steady_clock::now() >= until) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  // Waits up to `timeout` until its stdout holds at least `n` lines.
  bool wait_for_lines(std::size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(20)) const {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (lines_of(out()).size() < n) {
      if (std::chrono::steady_clock::now() >= until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }

 private:
  std::string out_file() const { return (dir_.path() / "stdout").string(); }
  std::string err_file() const { return (dir_.path() / "stderr").string(); }
  static std::string slurp(const std::string& file) {
    std::ifstream in(file);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  temp_dir dir_{"switchyard-cli-run"};
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
};

// Waits (up to 20 s, polling the broker's connection list as `admin`, a
// client with client_options::admin) until a connection named
// switchyard-cli holds `subscriptions` subscriptions: the background
// `sub` is listening.
inline bool wait_for_cli_subscription(client& admin, std::uint32_t subscriptions = 1) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < until) {
    auto page = admin.connections();
    REQUIRE(page);
    for (const auto& c : page->connections)
      if (c.name == "switchyard-cli" && c.subscriptions >= subscriptions) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// A client on 127.0.0.1:port with the admin capability (for the
// connection list).
inline std::unique_ptr<client> connect_admin(std::uint16_t port, std::string name = "test-admin") {
  client_options o;
  o.port = port;
  o.client_name = std::move(name);
  o.admin = true;
  auto c = client::connect(o);
  REQUIRE(c);
  return std::move(*c);
}

}  // namespace switchyard::test
