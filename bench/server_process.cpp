#include "bench/server_process.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>
#include <utility>

namespace switchyard::bench {

namespace fs = std::filesystem;

std::string default_server_binary() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (const fs::path& candidate : {self.parent_path().parent_path() / "broker" / "switchyard-server",
                                     self.parent_path() / "switchyard-server"}) {
      if (fs::exists(candidate, ec)) return candidate.string();
    }
  }
  return "switchyard-server";
}

std::expected<server_process, std::string> server_process::start(const std::string& binary,
                                                                  const std::vector<std::string>& extra_args,
                                                                  std::chrono::milliseconds timeout,
                                                                  const std::string& data_dir) {
  char dir_template[] = "/tmp/switchyard-bench.XXXXXX";
  if (!::mkdtemp(dir_template)) return std::unexpected(std::string("mkdtemp failed"));
  server_process p;
  p.dir_ = dir_template;
  p.binary_ = binary;
  p.extra_args_ = extra_args;
  p.data_dir_ = data_dir.empty() ? p.dir_ + "/data" : data_dir;
  if (auto r = p.spawn("127.0.0.1:0", timeout); !r) return std::unexpected(r.error());
  return p;
}

std::expected<void, std::string> server_process::restart(std::chrono::milliseconds timeout,
                                                         const std::optional<std::vector<std::string>>& extra_args) {
  if (pid_ > 0) return std::unexpected(std::string("the server process is still running"));
  if (binary_.empty()) return std::unexpected(std::string("nothing to restart"));
  if (extra_args) extra_args_ = *extra_args;
  return spawn("127.0.0.1:" + std::to_string(port_), timeout);
}

std::expected<void, std::string> server_process::spawn(const std::string& listen, std::chrono::milliseconds timeout) {
  const std::string port_file = dir_ + "/port";
  std::error_code ec;
  fs::remove(port_file, ec);
  std::vector<std::string> args{binary_, "--listen", listen, "--port-file", port_file, "--data-dir", data_dir_};
  // --log-level warn unless the caller chose one.
  if (std::find(extra_args_.begin(), extra_args_.end(), "--log-level") == extra_args_.end())
    args.insert(args.end(), {"--log-level", "warn"});
  args.insert(args.end(), extra_args_.begin(), extra_args_.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  pid_ = ::fork();
  if (pid_ < 0) return std::unexpected(std::string("fork failed"));
  if (pid_ == 0) {
    ::execvp(argv[0], argv.data());
    std::_Exit(127);
  }
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < give_up) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return std::unexpected("server " + binary_ + " exited during start-up (status " + std::to_string(status) + ")");
    }
    std::ifstream in(port_file);
    unsigned port = 0;
    if (in >> port && port > 0) {
      port_ = static_cast<std::uint16_t>(port);
      return {};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return std::unexpected("server " + binary_ + " did not report its port within the timeout");
}

server_process::server_process(server_process&& o) noexcept
    : pid_(std::exchange(o.pid_, -1)),
      port_(o.port_),
      dir_(std::move(o.dir_)),
      binary_(std::move(o.binary_)),
      extra_args_(std::move(o.extra_args_)),
      data_dir_(std::move(o.data_dir_)) {
  o.dir_.clear();
}

server_process::~server_process() { stop(); }

std::optional<int> server_process::signal_and_wait(int sig, std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return std::nullopt;
  ::kill(pid_, sig);
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < give_up) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      if (WIFSIGNALED(status)) return -WTERMSIG(status);
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return std::nullopt;
}

void server_process::stop() {
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    int status = 0;
    bool exited = false;
    for (int i = 0; i < 500 && !exited; ++i) {
      exited = ::waitpid(pid_, &status, WNOHANG) == pid_;
      if (!exited) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!exited) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
    }
    pid_ = -1;
  }
  if (!dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
    dir_.clear();
  }
}

}  // namespace switchyard::bench
