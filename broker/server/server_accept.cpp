// server::impl: the accept loop, TLS handshakes and admitting connections (server_impl.hpp).
#include "broker/server/server_impl.hpp"

#include <array>

namespace switchyard::broker {

asio::awaitable<void> server::impl::accept_loop() {
  for (;;) {
    asio_error_code ec;
    asio::ip::tcp::socket socket = co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (ec == asio::error::operation_aborted || registry.stopping()) co_return;
      logger->warn("accept failed: {}", ec.message());
      // Out of descriptors and similar: back off briefly instead of spinning.
      asio::steady_timer pause(io, std::chrono::milliseconds(50));
      co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    if (tls)
      asio::co_spawn(io, tls_accept(std::move(socket)), asio::detached);
    else
      admit(byte_stream(std::move(socket)));
  }
}

void server::impl::admit(byte_stream stream) {
  auto c = std::make_shared<connection>(*context, std::move(stream), registry.next_id());
  auto refused = admission.on_accept(registry.counted(), std::chrono::steady_clock::now());
  if (!refused) ++counters.connections_accepted;
  registry.add(c);
  c->start(std::move(refused));
}

asio::awaitable<void> server::impl::tls_accept(asio::ip::tcp::socket socket) {
  // The handshake holds a place under the connection cap until it ends
  // (admission_control: beyond the cap, closed without a handshake).
  if (!admission.on_tls_accept(registry.counted())) {
    asio_error_code ignored;
    socket.close(ignored);
    co_return;
  }
  struct handshake_slot {
    admission_control* admission;
    void release() noexcept {
      if (admission) std::exchange(admission, nullptr)->tls_handshake_done();
    }
    ~handshake_slot() { release(); }
  } slot{&admission};
  auto stream = std::make_unique<byte_stream>(std::move(socket), tls);
  // A client that connects and says nothing must not hold the socket: the
  // handshake has the hello timeout.
  asio::steady_timer deadline(io);
  deadline.expires_after(config.hello_timeout);
  bool timed_out = false;
  deadline.async_wait([&stream, &timed_out](const asio_error_code& ec) {
    if (ec) return;
    timed_out = true;
    stream->close();
  });
  const asio_error_code ec = co_await stream->handshake();
  deadline.cancel();
  if (registry.stopping()) co_return;
  if (!ec) {
    logger->debug("TLS from {}: {}", stream->remote_address(), stream->tls_description());
    slot.release();  // counted by the registry from now on
    admit(std::move(*stream));
    co_return;
  }
  ++counters.protocol_errors;
  if (ec == byte_stream::not_tls()) {
    // A plain client: its hello waits unread. Tell it in its own protocol,
    // best effort (the socket is non-blocking; the frame is small).
    logger->info("TLS from {}: refused, {}", stream->remote_address(), stream->tls_description());
    const auto goodbye = builder.error(0, protocol::errc::bad_request,
                                       "this port speaks TLS: connect with TLS (client_options::tls)", 0, true);
    stream->send_plain(asio::buffer(goodbye.data(), goodbye.size()));
  } else {
    logger->info("TLS from {}: handshake failed: {}{}{}", stream->remote_address(),
                 timed_out ? "no handshake within the hello timeout" : ec.message(), timed_out ? "" : " ",
                 timed_out ? "" : "(" + stream->tls_description() + ")");
  }
  // Closing with the client's bytes unread would reset the connection,
  // and a reset can discard the answer (the alert, or the plain-text
  // goodbye) before the client reads it: half-close, read and discard
  // until the client closes, for at most a second.
  asio_error_code ignored;
  stream->shutdown_send(ignored);
  deadline.expires_after(std::min<std::chrono::milliseconds>(config.hello_timeout, std::chrono::seconds(1)));
  deadline.async_wait([&stream](const asio_error_code& ec) {
    if (!ec) stream->close();
  });
  std::array<std::uint8_t, 4096> scratch;
  for (std::size_t discarded = 0; discarded < 64 * scratch.size();) {
    asio_error_code rec;
    co_await stream->socket_wait_readable(rec);
    if (rec) break;
    const std::size_t n = stream->read_plain(asio::buffer(scratch), rec);
    if (rec && rec != asio::error::would_block && rec != asio::error::try_again) break;
    discarded += n;
  }
  deadline.cancel();
  stream->close();
}

}  // namespace switchyard::broker
