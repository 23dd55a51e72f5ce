// End to end with real processes: the switchyard-server binary, the example
// gateway (switchyard-example-gateway) as a child process that the test can
// SIGKILL, and the example service (switchyard-example-send). This is the
// user story of the routing issue: a killed gateway's routes vanish within
// TTL plus one sweep, sends then answer "no route", and a restarted gateway
// with the same id works again.

#include "bench/server_process.hpp"
#include "switchyard/client.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/process.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace switchyard;
using namespace std::chrono_literals;
using bench::server_process;
using test::connect_to;
using test::run_for_exit_code;
using test::start_server_process;
using test::wait_until;

namespace {

server_process start_server() { return start_server_process({"--lease-min-ttl-ms", "100", "--sweep-ms", "20"}); }

// A child process whose stdout the test reads line by line (a reader thread
// collects it). The destructor SIGKILLs and reaps it if it still runs, so no
// path leaves a process behind.
class child_process {
 public:
  static std::unique_ptr<child_process> spawn(std::vector<std::string> args) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return nullptr;
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) {
      ::close(fds[0]);
      ::close(fds[1]);
      return nullptr;
    }
    if (pid == 0) {
      ::dup2(fds[1], STDOUT_FILENO);  // dup2 clears close-on-exec on the copy
      ::execv(argv[0], argv.data());
      std::_Exit(127);
    }
    ::close(fds[1]);
    return std::unique_ptr<child_process>(new child_process(pid, fds[0]));
  }

  ~child_process() {
    kill_and_reap(SIGKILL, 5s);
    stop_reading_ = true;
    if (reader_.joinable()) reader_.join();
    ::close(fd_);
  }

  pid_t pid() const noexcept { return pid_; }

  std::string output() const {
    std::lock_guard lock(mu_);
    return out_;
  }
  // The first complete line starting with `prefix`, waiting up to `timeout`.
  std::optional<std::string> wait_for_line(const std::string& prefix, std::chrono::milliseconds timeout) const {
    std::optional<std::string> found;
    wait_until(
        [&] {
          std::istringstream in(output());
          std::string line;
          while (std::getline(in, line) && !in.eof())
            if (line.rfind(prefix, 0) == 0) {
              found = line;
              return true;
            }
          return false;
        },
        timeout);
    return found;
  }

  // Sends `sig` and waits up to `timeout` for the exit (SIGKILL after it).
  // Returns the exit code, -signal if it died of a signal, nullopt if it had
  // already been reaped.
  std::optional<int> kill_and_reap(int sig, std::chrono::milliseconds timeout) {
    if (pid_ <= 0) return std::nullopt;
    ::kill(pid_, sig);
    int status = 0;
    bool exited = false;
    const auto give_up = std::chrono::steady_clock::now() + timeout;
    while (!exited && std::chrono::steady_clock::now() < give_up) {
      exited = ::waitpid(pid_, &status, WNOHANG) == pid_;
      if (!exited) std::this_thread::sleep_for(5ms);
    }
    if (!exited) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);  // SIGKILL cannot be ignored: this returns
    }
    pid_ = -1;
    if (!exited) return -SIGKILL;
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return -WTERMSIG(status);
    return std::nullopt;
  }

 private:
  child_process(pid_t pid, int fd) : pid_(pid), fd_(fd) {
    reader_ = std::thread([this] {
      char buf[4096];
      // Bounded by the child's exit (EOF) or the destructor's stop flag.
      while (!stop_reading_) {
        pollfd p{fd_, POLLIN, 0};
        const int ready = ::poll(&p, 1, 50);
        if (ready < 0) return;
        if (ready == 0) continue;
        const ssize_t n = ::read(fd_, buf, sizeof buf);
        if (n <= 0) return;
        std::lock_guard lock(mu_);
        out_.append(buf, static_cast<std::size_t>(n));
      }
    });
  }

  pid_t pid_;
  int fd_;
  std::atomic<bool> stop_reading_{false};
  mutable std::mutex mu_;
  std::string out_;
  std::thread reader_;
};

std::unique_ptr<child_process> start_gateway(std::uint16_t port) {
  auto gw = child_process::spawn({SWITCHYARD_EXAMPLE_GATEWAY, "--address", "127.0.0.1:" + std::to_string(port),
                                  "--inbox", "gw-7", "--user", "user:alice", "--ttl-ms", "500"});
  REQUIRE(gw);
  const auto ready = gw->wait_for_line("ready", 20s);
  INFO("gateway output: " << gw->output());
  REQUIRE(ready);
  CHECK(ready->find("inbox=gw-7") != std::string::npos);
  return gw;
}

// Runs the example service once: its exit status and output.
std::pair<int, std::string> send_to(std::uint16_t port, const std::string& route_key, const std::string& payload) {
  return run_for_exit_code(std::string(SWITCHYARD_EXAMPLE_SEND) + " " + route_key + " " + payload +
                           " --address 127.0.0.1:" + std::to_string(port) + " 2>&1");
}

std::error_code registry_error(client& c, std::string_view key) {
  auto r = c.registry_get(key);
  return r ? std::error_code{} : r.error();
}

}  // namespace

TEST_CASE("a SIGKILLed gateway process loses its routes within TTL plus a sweep and comes back on restart",
          "[e2e][broker][client][examples][routing]") {
  auto server = start_server();
  auto observer = connect_to(server, "gateway-process-test");

  // The gateway holds user:alice; the service's send is routed to it.
  auto gw = start_gateway(server.port());
  {
    const auto [status, out] = send_to(server.port(), "user:alice", "hello-alice");
    INFO(out);
    CHECK(status == 0);
    CHECK(out.find("routed gw-7") != std::string::npos);
  }
  {
    const auto line = gw->wait_for_line("deliver user:alice", 10s);
    INFO("gateway output: " << gw->output());
    REQUIRE(line);
    CHECK(*line == "deliver user:alice hello-alice");
  }
  auto entry = observer->registry_get("user:alice");
  REQUIRE(entry);
  CHECK(entry->value == "gw-7");
  const lease_id dead_lease = entry->lease;

  // Killed without a chance to revoke anything.
  CHECK(gw->kill_and_reap(SIGKILL, 5s) == -SIGKILL);

  // Within TTL + one sweep (bounded generously) the send answers "no route"...
  int last_status = -1;
  std::string last_out;
  const bool no_route = wait_until(
      [&] {
        std::tie(last_status, last_out) = send_to(server.port(), "user:alice", "anyone-there");
        return last_status == 3;
      },
      5s);
  INFO("last send: status " << last_status << ": " << last_out);
  REQUIRE(no_route);
  CHECK(last_out.find("no route") != std::string::npos);
  // ... and the lease expiry removed the route itself, not only the inbox.
  REQUIRE(wait_until([&] { return registry_error(*observer, "user:alice") == errc::not_found; }, 5s));
  auto ttl = observer->lease_time_to_live(dead_lease);
  REQUIRE_FALSE(ttl);
  CHECK(ttl.error() == errc::not_found);
  {
    const auto [status, out] = send_to(server.port(), "user:alice", "still-nobody");
    INFO(out);
    CHECK(status == 3);
    CHECK(out.find("no route") != std::string::npos);
  }

  // The gateway restarts with the same inbox id: everything works again.
  auto again = start_gateway(server.port());
  {
    const auto [status, out] = send_to(server.port(), "user:alice", "welcome-back");
    INFO(out);
    CHECK(status == 0);
    CHECK(out.find("routed gw-7") != std::string::npos);
  }
  const auto line = again->wait_for_line("deliver user:alice", 10s);
  INFO("gateway output: " << again->output());
  REQUIRE(line);
  CHECK(*line == "deliver user:alice welcome-back");
  auto renewed = observer->registry_get("user:alice");
  REQUIRE(renewed);
  CHECK(renewed->lease != dead_lease);
}

TEST_CASE("a gateway process stopped with SIGTERM revokes its lease so its routes vanish at once",
          "[e2e][broker][client][examples][routing]") {
  auto server = start_server();
  auto observer = connect_to(server, "gateway-process-test");
  auto gw = start_gateway(server.port());
  auto entry = observer->registry_get("user:alice");
  REQUIRE(entry);
  const lease_id lease = entry->lease;

  CHECK(gw->kill_and_reap(SIGTERM, 10s) == 0);
  // The revoke happened before the process exited: no waiting for the TTL.
  CHECK(registry_error(*observer, "user:alice") == errc::not_found);
  auto ttl = observer->lease_time_to_live(lease);
  REQUIRE_FALSE(ttl);
  CHECK(ttl.error() == errc::not_found);
  const auto [status, out] = send_to(server.port(), "user:alice", "gone");
  INFO(out);
  CHECK(status == 3);
}
