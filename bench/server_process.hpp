#pragma once
// Starts switchyard-server as a child process on 127.0.0.1 with a free port
// and a private data folder, and stops it (SIGTERM, then SIGKILL).

#include <chrono>
#include <cstdint>
#include <expected>
#include <optional>
#include <string>
#include <vector>

namespace switchyard::bench {

class server_process {
 public:
  // Spawns `binary` with `extra_args` and waits (up to `timeout`) until it
  // reports its port. Its data folder is `data_dir` (kept afterwards) or,
  // when empty, a private one removed by stop(). Errors are user-facing
  // strings.
  static std::expected<server_process, std::string> start(const std::string& binary,
                                                          const std::vector<std::string>& extra_args,
                                                          std::chrono::milliseconds timeout,
                                                          const std::string& data_dir = {});
  server_process(server_process&& o) noexcept;
  server_process& operator=(server_process&&) = delete;
  ~server_process();  // stop()

  std::uint16_t port() const noexcept { return port_; }
  int pid() const noexcept { return pid_; }
  // SIGTERM, wait up to 5 s, then SIGKILL; removes the temp folder.
  void stop();
  // Sends `sig` and waits up to `timeout` for the exit. Returns the exit
  // code, -signal if it died of a signal, or nullopt if it is still running.
  std::optional<int> signal_and_wait(int sig, std::chrono::milliseconds timeout);

 private:
  server_process() = default;
  int pid_ = -1;
  std::uint16_t port_ = 0;
  std::string dir_;
};

// The server binary next to this executable's build tree
// (<build>/broker/switchyard-server), else "switchyard-server" on PATH.
std::string default_server_binary();

}  // namespace switchyard::bench
