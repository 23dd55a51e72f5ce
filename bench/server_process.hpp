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
  // strings. The server logs at warn unless `extra_args` has --log-level.
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
  // Starts the same binary again, once the previous process is gone (after
  // signal_and_wait), on the same port and data folder, with the arguments
  // of start() (`extra_args` replace the earlier extra arguments when
  // given). Waits up to `timeout` for the port; errors as start(), and
  // "still running" if the previous process was not reaped.
  std::expected<void, std::string> restart(std::chrono::milliseconds timeout,
                                           const std::optional<std::vector<std::string>>& extra_args = std::nullopt);

 private:
  server_process() = default;
  std::expected<void, std::string> spawn(const std::string& listen, std::chrono::milliseconds timeout);

  int pid_ = -1;
  std::uint16_t port_ = 0;
  std::string dir_;
  std::string binary_;
  std::vector<std::string> extra_args_;
  std::string data_dir_;
};

// The server binary next to this executable's build tree
// (<build>/broker/switchyard-server), else "switchyard-server" on PATH.
std::string default_server_binary();

}  // namespace switchyard::bench
