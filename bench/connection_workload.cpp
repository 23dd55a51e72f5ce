// The connections workload: what the broker's memory (RSS) grows by per
// connection, for idle connections after their hello and for connections
// that hold an incomplete frame declaring a large length (trickling its
// bytes, as an attacker would). Raw sockets, so nothing but the hello and
// the frame's first bytes is sent.

#include "bench/bench_common.hpp"
#include "bench/cpu_usage.hpp"
#include "protocol/frame_builder.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

namespace switchyard::bench {

namespace {

using namespace std::chrono_literals;

int connect_to(const target& t) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(t.port);
  if (::inet_pton(AF_INET, t.host.c_str(), &a.sin_addr) != 1 ||
      ::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool send_all(int fd, const void* data, std::size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

// Reads (and discards) what the server sent within `wait`; false once the
// server closed the connection.
bool still_open(int fd, std::chrono::milliseconds wait) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(wait.count())) <= 0) return true;
  char buf[4096];
  const ssize_t r = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
  return r > 0 || (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
}

}  // namespace

int run_connections(const settings& s, const target& t, int server_pid) {
  const long n = s.connections;
  std::this_thread::sleep_for(200ms);
  const std::uint64_t rss0 = rss_bytes(server_pid);
  protocol::frame_builder b;
  protocol::hello_fields h;
  h.protocol_major = 1;
  h.client_name = "bench-connections";
  h.credentials = t.token;  // --token or --auth (raw hellos cannot answer a key's challenge)
  const auto hello = b.hello(1, h);
  std::vector<int> fds;
  fds.reserve(static_cast<std::size_t>(n));
  const cpu_meter cpu(t.server);
  for (long i = 0; i < n; ++i) {
    const int fd = connect_to(t);
    if (fd < 0 || !send_all(fd, hello.data(), hello.size())) {
      for (const int f : fds) ::close(f);
      if (fd >= 0) ::close(fd);
      return fail_line(s, fmt::format("connection {} failed: {}", i, std::strerror(errno)));
    }
    fds.push_back(fd);
    if (i % 500 == 0) progress("connections: {}/{}", i, n);
  }
  // Every hello answered (the welcome read) before measuring.
  for (const int fd : fds) still_open(fd, 2000ms);
  // Connects and hellos (the frames of --declare are not counted).
  const cpu_cost cost = cpu.stop(static_cast<std::uint64_t>(n), "connection with its hello");
  std::this_thread::sleep_for(300ms);
  const std::uint64_t rss1 = rss_bytes(server_pid);
  std::uint64_t rss2 = rss1;
  long open = n;
  if (s.declare > 0) {
    // A frame declaring `declare` bytes, of which the first 16 arrive, then
    // one more byte per connection a little later (a trickle).
    std::uint8_t start[16] = {};
    const auto len = static_cast<std::uint32_t>(s.declare);
    std::memcpy(start, &len, 4);
    for (const int fd : fds) send_all(fd, start, sizeof start);
    std::this_thread::sleep_for(300ms);
    for (const int fd : fds) send_all(fd, start + 4, 1);
    std::this_thread::sleep_for(500ms);
    rss2 = rss_bytes(server_pid);
    open = 0;
    for (const int fd : fds) open += still_open(fd, 0ms) ? 1 : 0;
  }
  progress_done();
  for (const int fd : fds) ::close(fd);
  // The server's memory: only a broker the bench started is a process it
  // can read (JSON null and "not measured" otherwise).
  const bool measured = server_pid > 0;
  const auto per = [n, measured](std::uint64_t a, std::uint64_t b) {
    if (!measured) return static_cast<double>(NAN);
    return b > a ? static_cast<double>(b - a) / static_cast<double>(n) : 0.0;
  };
  json_line j;
  j.str("broker", "switchyard").str("workload", "connections").integer("connections", n).integer("declare", s.declare);
  j.num("server_rss_bytes_per_idle_connection", per(rss0, rss1));
  if (s.declare > 0) {
    j.num("server_rss_bytes_per_incomplete_frame", per(rss1, rss2));
    if (measured)
      j.integer("incomplete_total_bytes", rss2 > rss1 ? static_cast<long long>(rss2 - rss1) : 0);
    else
      j.raw("incomplete_total_bytes", "null");
    j.integer("still_open", open);
  }
  j.raw("cpu", cost.json());
  constexpr std::string_view not_measured = "server RSS not measured for a broker of --address";
  std::string summary = measured
                            ? fmt::format("connections: {} connections\n  idle after hello: {:.0f} B server RSS each\n",
                                          n, per(rss0, rss1))
                            : fmt::format("connections: {} connections\n  idle after hello: {}\n", n, not_measured);
  if (s.declare > 0)
    summary +=
        measured ? fmt::format(
                       "  incomplete frame declaring {} B: {:.0f} B more each ({:.1f} MiB in all), {} "
                       "still open\n",
                       s.declare, per(rss1, rss2), static_cast<double>(rss2 > rss1 ? rss2 - rss1 : 0) / (1 << 20), open)
                 : fmt::format("  incomplete frame declaring {} B: {}; {} still open\n", s.declare, not_measured, open);
  emit(s, summary + cost.summary(), j);
  return 0;
}

}  // namespace switchyard::bench
