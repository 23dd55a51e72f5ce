#include "broker/byte_stream.hpp"

namespace switchyard::broker {

byte_stream::byte_stream(asio::ip::tcp::socket socket) : socket_(std::move(socket)) {
  asio_error_code ec;
  const auto ep = socket_.remote_endpoint(ec);
  remote_ = ec ? "?" : ep.address().to_string() + ":" + std::to_string(ep.port());
  socket_.set_option(asio::ip::tcp::no_delay(true), ec);
  // Reads are readiness-based (read_some after wait_readable): never block.
  socket_.non_blocking(true, ec);
}

std::size_t byte_stream::available() noexcept {
  asio_error_code ec;
  const std::size_t n = socket_.available(ec);
  return ec ? 0 : n;
}

void byte_stream::close() noexcept {
  asio_error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
}

}  // namespace switchyard::broker
