#include "bench/server_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
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
  if (!::mkdtemp(dir_template))
    return std::unexpected(std::string("cannot create a folder for the server in /tmp: ") + std::strerror(errno));
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

  // The child reports a failed exec through this pipe (its errno); a
  // successful exec closes the pipe (O_CLOEXEC), so the parent reads EOF.
  int exec_pipe[2];
  if (::pipe2(exec_pipe, O_CLOEXEC) != 0)
    return std::unexpected(std::string("cannot start the server: pipe: ") + std::strerror(errno));
  pid_ = ::fork();
  if (pid_ < 0) {
    const int err = errno;
    ::close(exec_pipe[0]);
    ::close(exec_pipe[1]);
    return std::unexpected(std::string("cannot start the server: fork: ") + std::strerror(err));
  }
  if (pid_ == 0) {
    ::close(exec_pipe[0]);
    ::execvp(argv[0], argv.data());
    const int err = errno;
    (void)!::write(exec_pipe[1], &err, sizeof err);
    std::_Exit(127);
  }
  ::close(exec_pipe[1]);
  int exec_errno = 0;
  ssize_t got = 0;
  do got = ::read(exec_pipe[0], &exec_errno, sizeof exec_errno);
  while (got < 0 && errno == EINTR);
  ::close(exec_pipe[0]);
  if (got == static_cast<ssize_t>(sizeof exec_errno)) {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    const std::string why = exec_errno == ENOENT ? "not found" : std::strerror(exec_errno);
    return std::unexpected("cannot start switchyard-server at " + binary_ + ": " + why);
  }
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < give_up) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      const std::string how = WIFEXITED(status)     ? "with code " + std::to_string(WEXITSTATUS(status))
                              : WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                                    : "status " + std::to_string(status);
      return std::unexpected("switchyard-server at " + binary_ + " exited during start-up " + how +
                             " (its own messages, if any, went to stderr)");
    }
    std::ifstream in(port_file);
    unsigned port = 0;
    if (in >> port && port > 0) {
      port_ = static_cast<std::uint16_t>(port);
      return {};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return std::unexpected("switchyard-server at " + binary_ + " did not report its port within " +
                         std::to_string(timeout.count()) + " ms");
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
