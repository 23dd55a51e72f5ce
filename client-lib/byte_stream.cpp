#include "byte_stream.hpp"

namespace switchyard::client_lib {

asio::awaitable<asio_error_code> byte_stream::connect(const asio::ip::tcp::resolver::results_type& endpoints) {
  asio_error_code ec;
  co_await asio::async_connect(socket_, endpoints, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return ec;
  asio_error_code ignored;  // without TCP_NODELAY the stream still works, only slower
  socket_.set_option(asio::ip::tcp::no_delay(true), ignored);
  co_return ec;
}

void byte_stream::close() noexcept {
  asio_error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
}

}  // namespace switchyard::client_lib
