#pragma once
// A real nats-server (Debian's /usr/sbin/nats-server, 2.9.10) as a child
// process on 127.0.0.1: a random port the first time (-p -1; the server
// writes it to <dir>/nats-server_<pid>.ports, --ports_file_dir), the same
// port on restart(); optionally one server of a cluster (nats_cluster:
// three routed servers, --cluster/--routes). Every wait is bounded; failures throw
// std::runtime_error (the test fails with the message). The destructor
// kills (SIGKILL) and reaps it.

#include "tests/support/temp_dir.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace switchyard::test {

class nats_process {
 public:
  static constexpr const char* default_binary = "/usr/sbin/nats-server";

  struct options {
    std::string config;               // nats-server's config syntax, e.g. "max_payload: 1024"; none when empty
    bool cluster = false;             // listen for routes (cluster "switchyard", a random route port)
    std::vector<std::string> routes;  // route URLs of other servers (nats://127.0.0.1:PORT)
  };

  // Starts nats-server and waits up to `timeout` until it accepts
  // connections.
  explicit nats_process(options o, std::chrono::milliseconds timeout = std::chrono::seconds(10))
      : dir_("switchyard-nats"), options_(std::move(o)) {
    spawn(-1, timeout);
  }
  explicit nats_process(std::string config = {}) : nats_process(options{.config = std::move(config)}) {}
  ~nats_process() { kill(SIGKILL); }
  nats_process(const nats_process&) = delete;
  nats_process& operator=(const nats_process&) = delete;

  std::uint16_t port() const noexcept { return port_; }
  std::string url() const { return "nats://127.0.0.1:" + std::to_string(port_); }
  // The route URL other servers of the cluster are given (options::cluster).
  std::string route_url() const { return "nats://127.0.0.1:" + std::to_string(cluster_port_); }
  bool running() const noexcept { return pid_ > 0; }

  // Sends `sig` and reaps the process (bounded: SIGKILL after `timeout`).
  void kill(int sig = SIGTERM, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    const auto give_up = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      int status = 0;
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_ || (r < 0 && errno == ECHILD)) break;
      if (std::chrono::steady_clock::now() >= give_up) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    pid_ = -1;
  }
  // SIGSTOP / SIGCONT: a server that stops reading (its socket buffers fill).
  void freeze() { ::kill(pid_, SIGSTOP); }
  void thaw() { ::kill(pid_, SIGCONT); }

  // Starts it again on the same port (after kill()).
  void restart(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    if (pid_ > 0) throw std::runtime_error("nats_process::restart: still running");
    spawn(port_, timeout);
  }

 private:
  void spawn(int port, std::chrono::milliseconds timeout) {
    std::vector<std::string> args{
        default_binary, "-a", "127.0.0.1", "-p", std::to_string(port), "--ports_file_dir", dir_.path().string()};
    if (!options_.config.empty()) {
      const auto conf = dir_.path() / "nats.conf";
      std::ofstream(conf) << options_.config << '\n';
      args.insert(args.end(), {"-c", conf.string()});
    }
    if (options_.cluster) {
      // The route port: random the first time, the same one on restart.
      const std::string route_port = cluster_port_ > 0 ? std::to_string(cluster_port_) : "-1";
      args.insert(args.end(), {"--cluster", "nats://127.0.0.1:" + route_port, "--cluster_name", "switchyard"});
      std::string routes;
      for (const auto& r : options_.routes) routes += (routes.empty() ? "" : ",") + r;
      if (!routes.empty()) args.insert(args.end(), {"--routes", routes});
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const std::string log = (dir_.path() / "nats.log").string();
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid_ == 0) {
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      ::execv(argv[0], argv.data());
      std::_Exit(127);
    }
    const auto give_up = std::chrono::steady_clock::now() + timeout;
    const auto ports_file = dir_.path() / ("nats-server_" + std::to_string(pid_) + ".ports");
    while (std::chrono::steady_clock::now() < give_up) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("nats-server exited during start-up (status " + std::to_string(status) +
                                 "); its log: " + read_log());
      }
      if (port < 0) port_ = port_from(ports_file, "nats");
      if (port >= 0) port_ = static_cast<std::uint16_t>(port);
      if (options_.cluster && cluster_port_ == 0) cluster_port_ = port_from(ports_file, "cluster");
      if (port_ > 0 && (!options_.cluster || cluster_port_ > 0) && accepts()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    kill(SIGKILL);
    throw std::runtime_error("nats-server did not accept connections within " + std::to_string(timeout.count()) +
                             " ms; its log: " + read_log());
  }
  // A port in the ports file ({"nats":["nats://127.0.0.1:PORT"],"cluster":[...]}):
  // the first URL of `key`, 0 if not there yet.
  static std::uint16_t port_from(const std::filesystem::path& file, const std::string& key) {
    std::ifstream in(file);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto list = text.find("\"" + key + "\"");
    if (list == std::string::npos) return 0;
    const auto at = text.find("nats://", list);
    if (at == std::string::npos) return 0;
    const auto colon = text.find(':', at + 7);
    if (colon == std::string::npos) return 0;
    return static_cast<std::uint16_t>(std::strtoul(text.c_str() + colon + 1, nullptr, 10));
  }
  bool accepts() const {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port_);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool ok = ::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    return ok;
  }
  std::string read_log() const {
    std::ifstream in(dir_.path() / "nats.log");
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

  temp_dir dir_;
  options options_;
  pid_t pid_ = -1;
  std::uint16_t port_ = 0;
  std::uint16_t cluster_port_ = 0;
};

// Three nats-servers routed into one cluster (the second and third route
// to the first; the routes gossip into a full mesh).
struct nats_cluster {
  nats_process first{nats_process::options{.cluster = true}};
  nats_process second{nats_process::options{.cluster = true, .routes = {first.route_url()}}};
  nats_process third{nats_process::options{.cluster = true, .routes = {first.route_url()}}};
};

// A loopback port nobody listens on (bound, then released).
inline std::uint16_t unused_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    throw std::runtime_error("unused_port: cannot bind a loopback socket");
  ::close(fd);
  return ntohs(a.sin_port);
}

}  // namespace switchyard::test
