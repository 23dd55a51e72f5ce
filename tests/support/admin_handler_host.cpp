#include "tests/support/admin_handler_host.hpp"

#include "protocol/frame_parser.hpp"
#include "protocol/limits.hpp"
#include "tests/support/recording_peer.hpp"

#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace switchyard::test {

namespace {

namespace wire = protocol::wire;

// Writes all of `bytes`; false once the peer is gone.
bool send_all(int fd, protocol::bytes_view bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

bool asked_for(const wire::Hello& h, std::string_view capability) {
  if (!h.capabilities()) return false;
  return std::any_of(h.capabilities()->begin(), h.capabilities()->end(),
                     [&](const flatbuffers::String* c) { return c->string_view() == capability; });
}

}  // namespace

broker::cluster_status_report sample_cluster_status() {
  broker::cluster_status_report r;
  r.cluster_name = "prod-eu";
  r.node_id = "node-a";
  r.incarnation = 7'587'862'384'523'648'004;
  r.view_revision = 42;
  r.in_standing = true;
  r.synced = false;
  r.members = {
      {"node-a", "10.0.0.1:7878", 7'587'862'384'523'648'004, true, false, 3, 0, 0, 0, 0, 0, 0, 341},
      {"node-b", "10.0.0.2:7878", 7'587'862'384'523'648'010, false, true, 12, 1042, 998, 5000, 4000, 2, 1, 342},
      {"node-c", "10.0.0.3:7878", 7'587'862'384'523'648'020, false, false, 7, 11, 13, 17, 19, 23, 29, 341},
  };
  r.etcd = {
      {"http://10.0.0.1:2379", true, true, "3.4.23", ""},
      {"http://10.0.0.2:2379", true, false, "3.4.23", ""},
      {"http://10.0.0.3:2379", false, false, "", "connection refused"},
  };
  r.nats = {"connected", "nats://10.0.0.1:4222", 1'048'576, 998, 1042, 37, 41, 43};
  r.local_patterns = 3;
  r.unconfirmed = 1;
  r.interest_timeouts = 47;
  r.lost_in = 31;
  return r;
}

admin_handler_host::admin_handler_host(broker::server_admin_handler::cluster_status_fn source)
    : handler_(
          [&] {
            broker::server_admin_handler::sources s;
            s.cluster_status = std::move(source);
            return s;
          }(),
          default_window_, builder_,
          std::make_shared<spdlog::logger>("admin-handler-host", std::make_shared<spdlog::sinks::null_sink_mt>())) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 8) != 0 ||
      ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd_ >= 0) ::close(fd_);
    throw std::runtime_error("admin_handler_host: cannot listen on 127.0.0.1");
  }
  port_ = ntohs(a.sin_port);
  thread_ = std::thread([this] { run(); });
}

admin_handler_host::~admin_handler_host() {
  ::shutdown(fd_, SHUT_RDWR);                                           // wakes accept
  if (const int c = conn_fd_.load(); c >= 0) ::shutdown(c, SHUT_RDWR);  // wakes recv
  thread_.join();
  ::close(fd_);
}

void admin_handler_host::run() {
  for (;;) {
    const int c = ::accept(fd_, nullptr, nullptr);
    if (c < 0) return;  // the listener was shut down
    conn_fd_ = c;
    serve(c);
    conn_fd_ = -1;
    ::close(c);
  }
}

void admin_handler_host::serve(int fd) {
  broker::capability_set admin;
  admin.admin = true;
  const auto peer = std::make_shared<recording_peer>(1, builder_, admin);
  protocol::frame_parser parser(protocol::default_max_frame);
  std::vector<std::uint8_t> in;
  bool welcomed = false;
  // Answers one frame; false when the connection should end.
  const auto answer = [&](const wire::Frame& f) {
    const auto rid = f.request_id();
    if (!welcomed) {
      const auto* hello = f.message_as_Hello();
      if (!hello) return false;
      const std::string_view admin_cap = protocol::capability::admin;
      const bool grant = asked_for(*hello, admin_cap);
      protocol::welcome_fields w;
      w.protocol_major = protocol::protocol_major;
      w.protocol_minor = protocol::protocol_minor;
      w.server_version = "0.0.0-admin-handler-host";
      w.session_id = 1;
      w.heartbeat_ms = 30'000;
      w.max_frame = protocol::default_max_frame;
      w.capabilities = grant ? std::span(&admin_cap, 1) : std::span<const std::string_view>{};
      w.server_instance = 1;
      welcomed = true;
      return send_all(fd, builder_.welcome(rid, w));
    }
    switch (f.message_type()) {
      case wire::Message::Ping:
        return send_all(fd, builder_.pong(rid));
      case wire::Message::Pong:
        return true;
      case wire::Message::ClusterStatus: {
        peer->sent.clear();
        handler_.cluster_status(*peer, rid, *f.message_as_ClusterStatus());
        ++requests_;
        for (const auto& frame : peer->sent)
          if (!send_all(fd, frame)) return false;
        return true;
      }
      default:
        return send_all(fd, builder_.error(rid, protocol::errc::unsupported_message,
                                           "this stand-in broker answers ClusterStatus only"));
    }
  };
  std::uint8_t buf[4096];
  for (;;) {
    std::size_t used = 0;
    for (;;) {
      auto r = parser.next({in.data() + used, in.size() - used});
      if (!r) return;  // not a frame: drop the connection
      if (!*r) break;
      if (!answer(*(*r)->frame)) return;
      used += (*r)->size;
    }
    in.erase(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(used));
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return;
    in.insert(in.end(), buf, buf + n);
  }
}

}  // namespace switchyard::test
