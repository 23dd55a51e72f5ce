#pragma once
// A TCP listener on 127.0.0.1 (port 0) that is not a Switchyard broker:
// each connection it accepts (at most `max_connections`) is answered with
// `reply` and closed after the peer closes or 5 s. For tests of what a
// client says when pointed at the wrong port.

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>

namespace switchyard::test {

class fake_service {
 public:
  explicit fake_service(std::string reply, int max_connections = 4) : reply_(std::move(reply)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 8) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("fake_service: cannot listen on 127.0.0.1");
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this, max_connections] {
      for (int i = 0; i < max_connections; ++i) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;  // the listener was shut down
        timeval t{5, 0};
        ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &t, sizeof t);
        char buf[512];
        (void)::recv(c, buf, sizeof buf, 0);  // the client's first bytes (its hello)
        (void)::send(c, reply_.data(), reply_.size(), MSG_NOSIGNAL);
        while (::recv(c, buf, sizeof buf, 0) > 0) {
        }
        ::close(c);
      }
    });
  }
  ~fake_service() {
    ::shutdown(fd_, SHUT_RDWR);  // wakes accept
    thread_.join();
    ::close(fd_);
  }
  fake_service(const fake_service&) = delete;
  fake_service& operator=(const fake_service&) = delete;

  std::uint16_t port() const noexcept { return port_; }

 private:
  std::string reply_;
  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::thread thread_;
};

}  // namespace switchyard::test
