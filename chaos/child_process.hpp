#pragma once
// One program of the chaos harness (an etcd member, a nats-server, a
// switchyard node) as a child process: started with fixed arguments, its
// stdout and stderr appended to a log file, signalled, reaped, started
// again with the same arguments (and so the same ports and data).
// Not thread-safe: the harness's thread owns it.

#include <chrono>
#include <expected>
#include <filesystem>
#include <string>
#include <vector>

#include <sys/types.h>

namespace switchyard::chaos {

class child_process {
 public:
  // Does not start it: start() does.
  child_process(std::string name, std::vector<std::string> argv, std::filesystem::path log_file);
  ~child_process();  // SIGKILL and reap
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  const std::string& name() const noexcept { return name_; }
  const std::filesystem::path& log_file() const noexcept { return log_file_; }
  // Spawns it (not when running). Errors: the program cannot be run.
  std::expected<void, std::string> start();
  // Not exited (reaps it when it has).
  bool running();
  // Sends `sig` (SIGKILL, SIGSTOP, SIGCONT, ...) when running.
  void signal(int sig);
  // SIGKILL and reap: bounded (SIGKILL cannot be ignored; a stopped process dies too).
  void kill();
  // SIGTERM, then SIGKILL after `grace`; reaped.
  void stop(std::chrono::milliseconds grace = std::chrono::seconds(5));

 private:
  std::string name_;
  std::vector<std::string> argv_;
  std::filesystem::path log_file_;
  pid_t pid_ = -1;
};

}  // namespace switchyard::chaos
