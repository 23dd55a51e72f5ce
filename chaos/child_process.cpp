#include "chaos/child_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

extern char** environ;

namespace switchyard::chaos {

child_process::child_process(std::string name, std::vector<std::string> argv, std::filesystem::path log_file)
    : name_(std::move(name)), argv_(std::move(argv)), log_file_(std::move(log_file)) {}

child_process::~child_process() { kill(); }

std::expected<void, std::string> child_process::start() {
  if (running()) return {};
  std::vector<char*> argv;
  for (auto& a : argv_) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  ::posix_spawn_file_actions_addopen(&actions, 1, log_file_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  ::posix_spawn_file_actions_adddup2(&actions, 1, 2);
  // Nothing else of this process goes with it: the proxies' sockets (Asio
  // does not make them close-on-exec) would otherwise live on in the child,
  // and a connection the proxy closes would stay open for its other end.
  ::posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  const int rc = ::posix_spawnp(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
  ::posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    pid_ = -1;
    return std::unexpected("cannot start " + name_ + " (" + argv_.front() + "): " + std::strerror(rc));
  }
  return {};
}

bool child_process::running() {
  if (pid_ <= 0) return false;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

void child_process::signal(int sig) {
  if (running()) ::kill(pid_, sig);
}

void child_process::kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

void child_process::stop(std::chrono::milliseconds grace) {
  if (!running()) return;
  ::kill(pid_, SIGCONT);  // a stopped process cannot act on SIGTERM
  ::kill(pid_, SIGTERM);
  const auto give_up = std::chrono::steady_clock::now() + grace;
  while (std::chrono::steady_clock::now() < give_up) {
    if (!running()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill();
}

}  // namespace switchyard::chaos
