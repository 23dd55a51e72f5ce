#include "tests/support/raw_connection.hpp"

#include "protocol/limits.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string_view>

namespace switchyard::test {
namespace {

// Waits until `fd` is readable, then reads what is there into `buf`: recv's
// result (errno set as recv left it). nullopt when `deadline` passed (or
// poll failed) first.
std::optional<ssize_t> recv_before(int fd, std::chrono::steady_clock::time_point deadline, std::uint8_t* buf,
                                   std::size_t size) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return std::nullopt;
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return std::nullopt;
  return ::recv(fd, buf, size, 0);
}

}  // namespace

raw_connection::raw_connection(std::uint16_t port, int receive_buffer) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd_ < 0) throw std::runtime_error("socket failed");
  if (receive_buffer > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd_);
    throw std::runtime_error("connect failed");
  }
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

raw_connection::~raw_connection() {
  if (fd_ >= 0) ::close(fd_);
}

void raw_connection::send(protocol::bytes_view bytes) {
  std::size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;  // the peer closed: tests check that separately
    off += static_cast<std::size_t>(n);
  }
}

std::size_t raw_connection::send_some(protocol::bytes_view bytes) {
  std::size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n <= 0) break;  // full (EAGAIN) or closed
    off += static_cast<std::size_t>(n);
  }
  return off;
}

void raw_connection::send_hello(std::uint16_t major, bool capabilities) {
  static constexpr std::array<std::string_view, 2> caps{protocol::capability::dropped_notice,
                                                        protocol::capability::publish_ack};
  protocol::frame_builder b;
  protocol::hello_fields h;
  h.protocol_major = major;
  h.client_name = "raw-test";
  h.client_id = "raw-test-id";
  if (capabilities) h.capabilities = caps;
  send(b.hello(1, h));
}

void raw_connection::send_hello(std::span<const std::string_view> capabilities) {
  protocol::frame_builder b;
  protocol::hello_fields h;
  h.protocol_major = 1;
  h.client_name = "raw-test";
  h.client_id = "raw-test-id";
  h.capabilities = capabilities;
  send(b.hello(1, h));
}

bool raw_connection::fill(std::size_t n, std::chrono::steady_clock::time_point deadline) {
  while (in_.size() < n) {
    std::uint8_t buf[65536];
    const auto r = recv_before(fd_, deadline, buf, sizeof buf);
    if (!r || *r <= 0) return false;
    in_.insert(in_.end(), buf, buf + *r);
  }
  return true;
}

std::optional<raw_frame> raw_connection::read_frame(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  if (!fill(protocol::frame_header_size, deadline)) return std::nullopt;
  const std::size_t total = protocol::frame_header_size + protocol::read_frame_length(in_.data());
  if (!fill(total, deadline)) return std::nullopt;
  raw_frame out;
  out.words.resize((total + 7) / 8);
  out.size = total;
  std::memcpy(out.words.data(), in_.data(), total);
  in_.erase(in_.begin(), in_.begin() + static_cast<std::ptrdiff_t>(total));
  return out;
}

const protocol::wire::Frame* raw_connection::next(raw_frame& storage, std::chrono::milliseconds timeout) {
  auto f = read_frame(timeout);
  if (!f) return nullptr;
  storage = std::move(*f);
  auto decoded = protocol::decode_frame(storage.bytes(), protocol::default_max_frame * 64);
  return decoded ? *decoded : nullptr;
}

const protocol::wire::Frame* raw_connection::next_of(protocol::wire::Message type, raw_frame& storage,
                                                     std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    const auto* f = next(storage, left);
    if (!f) return nullptr;
    if (f->message_type() == type) return f;
  }
  return nullptr;
}

void raw_connection::shutdown_write() { ::shutdown(fd_, SHUT_WR); }

bool raw_connection::closed_by_peer(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    std::uint8_t buf[65536];
    const auto r = recv_before(fd_, deadline, buf, sizeof buf);
    if (!r) return false;
    if (*r == 0) return true;
    if (*r < 0) return errno == ECONNRESET;
    in_.clear();
  }
}

}  // namespace switchyard::test
