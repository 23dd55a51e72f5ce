#pragma once
// Real etcd servers for tests: one member or a cluster of several, each a
// child process on 127.0.0.1 with free ports and a data folder in a private
// temporary folder, killed (SIGKILL) and reaped on destruction. Each
// member's log is <temp>/m<i>.log (etcd's own) and <temp>/m<i>.out (what
// it printed before its logger started). Also small HTTP helpers to talk to
// etcd directly, past the client under test.

#include "chaos/child_process.hpp"
#include "common/asio.hpp"
#include "tests/support/temp_dir.hpp"

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace switchyard::test {

#ifndef SWITCHYARD_ETCD_BINARY
#define SWITCHYARD_ETCD_BINARY "etcd"
#endif

// A port on 127.0.0.1 that was free a moment ago: bound to port 0 and
// closed again. The socket is returned open in `hold` when given, so that
// several calls get distinct ports; the caller closes it.
inline std::uint16_t free_port(int* hold = nullptr) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("free_port: socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("free_port: bind failed");
  }
  const auto port = ntohs(addr.sin_port);
  if (hold != nullptr) {
    *hold = fd;
  } else {
    ::close(fd);
  }
  return port;
}

// An HTTP answer: status 0 when the request failed (refused, timed out).
struct etcd_http_answer {
  unsigned status = 0;
  std::string body;
};

// `method` `target` (with `body` as JSON) to 127.0.0.1:`port`, one
// connection, everything within `timeout`.
inline etcd_http_answer etcd_http(std::uint16_t port, boost::beast::http::verb method, const std::string& target,
                                  const std::string& body = {},
                                  std::chrono::milliseconds timeout = std::chrono::seconds(2)) {
  namespace beast = boost::beast;
  namespace http = beast::http;
  asio::io_context io;
  beast::tcp_stream stream(io);
  stream.expires_after(timeout);
  http::request<http::string_body> req{method, target, 11};
  req.set(http::field::host, "127.0.0.1");
  req.set(http::field::content_type, "application/json");
  req.body() = body;
  req.prepare_payload();
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  beast::error_code failed;
  stream.async_connect(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), port), [&](beast::error_code ec) {
    if (ec) {
      failed = ec;
      return;
    }
    http::async_write(stream, req, [&](beast::error_code ec, std::size_t) {
      if (ec) {
        failed = ec;
        return;
      }
      http::async_read(stream, buffer, res, [&](beast::error_code ec, std::size_t) { failed = ec; });
    });
  });
  io.run();  // bounded by the stream's expiry
  if (failed) return {};
  return {res.result_int(), res.body()};
}

// POST `body` to etcd's gateway `path` (e.g. "/v3/kv/compaction").
inline etcd_http_answer etcd_post(std::uint16_t port, const std::string& path, const std::string& body) {
  return etcd_http(port, boost::beast::http::verb::post, path, body);
}

// One etcd child process. Not copyable; kill() or the destructor ends it.
class etcd_member {
 public:
  // Starts it; throws std::runtime_error when etcd cannot be run.
  etcd_member(std::vector<std::string> args, std::string out_file)
      : process_("etcd", with_binary(std::move(args)), std::move(out_file)) {
    start();
  }
  etcd_member(const etcd_member&) = delete;
  etcd_member& operator=(const etcd_member&) = delete;

  // Still running (not exited, not killed)?
  bool running() { return process_.running(); }
  // SIGKILL and reap (the destructor does too).
  void kill() { process_.kill(); }
  // Kills it if running, and starts it again with the same arguments (and
  // so the same ports and data folder).
  void restart() {
    kill();
    start();
  }

 private:
  static std::vector<std::string> with_binary(std::vector<std::string> args) {
    args.insert(args.begin(), SWITCHYARD_ETCD_BINARY);
    return args;
  }
  void start() {
    if (auto started = process_.start(); !started) throw std::runtime_error(started.error() + " (etcd-server)");
  }

  chaos::child_process process_;
};

// `members` etcd processes forming one cluster (1: a single member).
class etcd_cluster {
 public:
  explicit etcd_cluster(int members = 1) {
    // The ports were free a moment ago; another process may take one before
    // etcd binds it: then a member exits and the cluster starts again.
    std::string last_error;
    for (int attempt = 0; attempt < 3; ++attempt) {
      if (start(members, attempt, last_error)) return;
      members_.clear();
    }
    throw std::runtime_error("etcd_cluster: " + last_error + " (logs in " + dir_.path().string() + ")");
  }

  int size() const noexcept { return static_cast<int>(client_ports_.size()); }
  std::uint16_t client_port(int i) const { return client_ports_.at(i); }
  // "127.0.0.1:port" of member i.
  std::string endpoint(int i) const { return "127.0.0.1:" + std::to_string(client_port(i)); }
  std::vector<std::string> endpoints() const {
    std::vector<std::string> out;
    for (int i = 0; i < size(); ++i) out.push_back(endpoint(i));
    return out;
  }
  void kill(int i) { members_.at(i)->kill(); }
  // Starts member i again (killed first if running) on its ports and data;
  // waits (up to 10 s) until it is healthy, else throws.
  void restart(int i) {
    members_.at(i)->restart();
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!healthy(i)) {
      if (std::chrono::steady_clock::now() >= give_up || !members_[i]->running()) {
        throw std::runtime_error("etcd_cluster: " + name(i) + " not healthy after its restart (logs in " +
                                 dir_.path().string() + ")");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  bool running(int i) { return members_.at(i)->running(); }
  // GET /health of member i answers {"health":"true"} (it has a leader).
  bool healthy(int i) const {
    const auto a = etcd_http(client_port(i), boost::beast::http::verb::get, "/health", {}, std::chrono::seconds(1));
    return a.status == 200 && a.body.find("\"true\"") != std::string::npos;
  }
  const std::filesystem::path& dir() const noexcept { return dir_.path(); }

 private:
  bool start(int members, int attempt, std::string& error) {
    std::vector<int> held;
    client_ports_.clear();
    std::vector<std::uint16_t> peer_ports;
    for (int i = 0; i < members; ++i) {
      int fd = -1;
      client_ports_.push_back(free_port(&fd));
      held.push_back(fd);
      peer_ports.push_back(free_port(&fd));
      held.push_back(fd);
    }
    for (const int fd : held) ::close(fd);
    std::string initial;
    for (int i = 0; i < members; ++i) {
      if (i > 0) initial += ",";
      initial += name(i) + "=http://127.0.0.1:" + std::to_string(peer_ports[i]);
    }
    const std::string token = "switchyard-test-" + std::to_string(::getpid()) + "-" + std::to_string(attempt) + "-" +
                              std::to_string(client_ports_[0]);
    for (int i = 0; i < members; ++i) {
      const std::string client = "http://127.0.0.1:" + std::to_string(client_ports_[i]);
      const std::string peer = "http://127.0.0.1:" + std::to_string(peer_ports[i]);
      const auto base = dir_.path() / (name(i) + "-" + std::to_string(attempt));
      members_.push_back(std::make_unique<etcd_member>(
          std::vector<std::string>{"--name", name(i), "--data-dir", base.string() + ".data", "--listen-client-urls",
                                   client, "--advertise-client-urls", client, "--listen-peer-urls", peer,
                                   "--initial-advertise-peer-urls", peer, "--initial-cluster", initial,
                                   "--initial-cluster-state", "new", "--initial-cluster-token", token,
                                   // Test-only: no fsync of the WAL and database. Fast, and a
                                   // crash loses data, which a throw-away test cluster does not mind.
                                   "--unsafe-no-fsync",
                                   // Short raft timing: elections (after a kill) take about 0.5 s.
                                   "--heartbeat-interval", "50", "--election-timeout", "500", "--logger", "zap",
                                   "--log-outputs", base.string() + ".log"},
          base.string() + ".out"));
    }
    // Bounded: every member healthy within 15 s, or this attempt failed.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    for (int i = 0; i < members; ++i) {
      while (!healthy(i)) {
        if (!members_[i]->running()) {
          error = name(i) + " exited while starting";
          return false;
        }
        if (std::chrono::steady_clock::now() >= give_up) {
          error = name(i) + " not healthy within 15 s";
          return false;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    return true;
  }
  static std::string name(int i) { return "m" + std::to_string(i); }

  temp_dir dir_{"switchyard-etcd"};
  std::vector<std::uint16_t> client_ports_;
  std::vector<std::unique_ptr<etcd_member>> members_;
};

}  // namespace switchyard::test
