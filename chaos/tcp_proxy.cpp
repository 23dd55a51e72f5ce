#include "chaos/tcp_proxy.hpp"

namespace switchyard::chaos {

struct tcp_proxy::session {
  explicit session(asio::io_context& io) : sides{asio::ip::tcp::socket(io), asio::ip::tcp::socket(io)} {}
  // sides[0]: the accepted connection (the node); sides[1]: to the target.
  std::array<asio::ip::tcp::socket, 2> sides;
  std::array<std::array<char, 16 * 1024>, 2> buffers;  // [d]: read from sides[d], written to the other
  bool ended = false;
};

tcp_proxy::tcp_proxy(asio::io_context& io, std::uint16_t target_port)
    : io_(io),
      acceptor_(io, asio::ip::tcp::endpoint(asio::ip::address_v4::loopback(), 0)),
      target_(asio::ip::address_v4::loopback(), target_port),
      port_(acceptor_.local_endpoint().port()) {
  accept();
}

tcp_proxy::~tcp_proxy() = default;

void tcp_proxy::accept() {
  auto s = std::make_shared<session>(io_);
  acceptor_.async_accept(s->sides[0], [this, s](asio_error_code ec) {
    if (closing_ || ec == asio::error::operation_aborted) return;  // closed
    if (ec) return accept();  // this connection failed (e.g. no descriptor left): the next may not
    sessions_.insert(s);
    if (any_cut()) {
      parked_.push_back([this, s] { connect(s); });
    } else {
      connect(s);
    }
    accept();
  });
}

void tcp_proxy::connect(const std::shared_ptr<session>& s) {
  if (s->ended) return;
  s->sides[1].async_connect(target_, [this, s](asio_error_code ec) {
    if (ec) return end(s);  // the target is down: the node sees the connection close, as it would
    asio_error_code ignored;
    s->sides[1].set_option(asio::ip::tcp::no_delay(true), ignored);
    s->sides[0].set_option(asio::ip::tcp::no_delay(true), ignored);
    pump(s, 0);
    pump(s, 1);
  });
}

void tcp_proxy::pump(const std::shared_ptr<session>& s, int d) {
  if (s->ended) return;
  if (cut_[d]) {
    parked_.push_back([this, s, d] { pump(s, d); });
    return;
  }
  s->sides[d].async_read_some(asio::buffer(s->buffers[d]), [this, s, d](asio_error_code ec, std::size_t n) {
    if (ec && any_cut()) {
      // The other side learns of the close only after the cut, as in a partition.
      parked_.push_back([this, s] { end(s); });
      return;
    }
    if (ec) return end(s);
    if (cut_[d]) {
      // Read before the cut, not yet passed on: held with the session.
      parked_.push_back([this, s, d, n] {
        asio::async_write(s->sides[1 - d], asio::buffer(s->buffers[d], n),
                          [this, s, d](asio_error_code ec, std::size_t) {
                            if (ec) return end(s);
                            pump(s, d);
                          });
      });
      return;
    }
    asio::async_write(s->sides[1 - d], asio::buffer(s->buffers[d], n), [this, s, d](asio_error_code ec, std::size_t) {
      if (ec) return end(s);
      pump(s, d);
    });
  });
}

void tcp_proxy::end(const std::shared_ptr<session>& s) {
  if (s->ended) return;
  s->ended = true;
  asio_error_code ignored;
  for (auto& side : s->sides) side.close(ignored);
  sessions_.erase(s);
}

void tcp_proxy::cut() { cut_ = {true, true}; }

void tcp_proxy::cut_from_node() { cut_[0] = true; }

void tcp_proxy::heal() {
  cut_ = {false, false};
  auto parked = std::move(parked_);
  parked_.clear();
  for (auto& resume : parked) resume();
}

void tcp_proxy::close() {
  closing_ = true;
  asio_error_code ignored;
  acceptor_.close(ignored);
  parked_.clear();
  auto sessions = sessions_;
  for (const auto& s : sessions) end(s);
}

}  // namespace switchyard::chaos
