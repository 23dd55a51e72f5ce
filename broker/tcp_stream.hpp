#pragma once
// byte_stream over a plain TCP socket (TCP_NODELAY on). See byte_stream.hpp.

#include "broker/byte_stream.hpp"

namespace switchyard::broker {

class tcp_stream final : public byte_stream {
 public:
  // Takes the accepted socket; sets it non-blocking and TCP_NODELAY.
  explicit tcp_stream(asio::ip::tcp::socket socket);

  asio::any_io_executor executor() override { return socket_.get_executor(); }
  std::string remote_address() const override { return remote_; }
  asio::awaitable<asio_error_code> wait_readable() override;
  std::size_t read_some(asio::mutable_buffer into, asio_error_code& ec) override;
  std::size_t available() override;
  asio::awaitable<asio_error_code> write(std::span<const asio::const_buffer> buffers) override;
  void shutdown_send(asio_error_code& ec) override;
  void close() noexcept override;

 private:
  asio::ip::tcp::socket socket_;
  std::string remote_;
};

}  // namespace switchyard::broker
