#include "broker/tcp_stream.hpp"

namespace switchyard::broker {

tcp_stream::tcp_stream(asio::ip::tcp::socket socket) : socket_(std::move(socket)) {
  asio_error_code ec;
  const auto ep = socket_.remote_endpoint(ec);
  remote_ = ec ? "?" : ep.address().to_string() + ":" + std::to_string(ep.port());
  socket_.set_option(asio::ip::tcp::no_delay(true), ec);
  // Reads are readiness-based (read_some after wait_readable): never block.
  socket_.non_blocking(true, ec);
}

asio::awaitable<asio_error_code> tcp_stream::wait_readable() {
  asio_error_code ec;
  co_await socket_.async_wait(asio::ip::tcp::socket::wait_read, asio::redirect_error(asio::use_awaitable, ec));
  co_return ec;
}

std::size_t tcp_stream::read_some(asio::mutable_buffer into, asio_error_code& ec) {
  return socket_.read_some(into, ec);
}

std::size_t tcp_stream::available() {
  asio_error_code ec;
  const std::size_t n = socket_.available(ec);
  return ec ? 0 : n;
}

asio::awaitable<asio_error_code> tcp_stream::write(std::span<const asio::const_buffer> buffers) {
  asio_error_code ec;
  co_await asio::async_write(socket_, buffers, asio::redirect_error(asio::use_awaitable, ec));
  co_return ec;
}

void tcp_stream::shutdown_send(asio_error_code& ec) { socket_.shutdown(asio::ip::tcp::socket::shutdown_send, ec); }

void tcp_stream::close() noexcept {
  asio_error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
}

}  // namespace switchyard::broker
