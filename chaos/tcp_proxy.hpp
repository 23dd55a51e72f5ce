#pragma once
// A TCP proxy of the chaos harness: listens on 127.0.0.1 (a free port) and
// forwards every connection to 127.0.0.1:target. Placed between a node and
// each etcd member and NATS server it uses, so the harness can cut that
// node off without touching the others: cut() stops every byte in both
// directions (connections stay open, as in a network partition; a new
// connection is accepted and held; a close by one side reaches the other
// only after the cut; a read in progress at the cut completes and its
// bytes wait), heal() lets them flow again. cut_from_node() stops only
// what the node sends (what the target sends still reaches the node), as a
// target that stopped reading would: the node's socket buffers fill and
// its writes block.
//
// Threads: everything runs on the io_context given (one thread); cut() and
// heal() must be called there (post them).

#include "common/asio.hpp"

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <vector>

namespace switchyard::chaos {

class tcp_proxy {
 public:
  // Listens at once. Throws boost::system::system_error when it cannot.
  tcp_proxy(asio::io_context& io, std::uint16_t target_port);
  ~tcp_proxy();
  tcp_proxy(const tcp_proxy&) = delete;
  tcp_proxy& operator=(const tcp_proxy&) = delete;

  std::uint16_t port() const noexcept { return port_; }
  void cut();
  void cut_from_node();
  void heal();
  // Closes every connection (heal() does not: a cut is not a reset).
  void close();

 private:
  struct session;
  void accept();
  void connect(const std::shared_ptr<session>& s);
  void pump(const std::shared_ptr<session>& s, int direction);
  void end(const std::shared_ptr<session>& s);

  asio::io_context& io_;
  asio::ip::tcp::acceptor acceptor_;
  asio::ip::tcp::endpoint target_;
  std::uint16_t port_ = 0;
  // Per direction (0: node -> target, 1: target -> node): its bytes are held.
  std::array<bool, 2> cut_{};
  bool any_cut() const noexcept { return cut_[0] || cut_[1]; }
  bool closing_ = false;
  std::set<std::shared_ptr<session>> sessions_;
  std::vector<std::function<void()>> parked_;  // what waits for heal()
};

}  // namespace switchyard::chaos
