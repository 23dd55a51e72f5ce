#pragma once
// A device for the gateway's tests: a real WebSocket client (Boost.Beast,
// writes blocking, reads asynchronous on its own io_context run for at most
// the timeout (a read that timed out is cancelled, and the stream is not
// used again but to be dropped). ws_device speaks ws://, wss_device
// wss:// (TLS, verifying the gateway's certificate against a given CA).

#include "common/asio.hpp"

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

namespace switchyard::test {

// Connect without the upgrade (see below).
struct ws_raw_tag {};

template <class NextLayer>
class basic_ws_device {
  static constexpr bool tls = !std::is_same_v<NextLayer, asio::ip::tcp::socket>;

 public:
  // Connects and upgrades at `target`; REQUIREs success.
  explicit basic_ws_device(std::uint16_t port, std::string_view target = "/ws") requires(!tls) : ws_(io_) {
    ws_.next_layer().connect({asio::ip::make_address("127.0.0.1"), port});
    upgrade(port, target);
  }
  // Connects, completes the TLS handshake (the certificate must chain to
  // `ca_file` and name 127.0.0.1) and upgrades; REQUIREs success.
  basic_ws_device(std::uint16_t port, const std::string& ca_file, std::string_view target = "/ws") requires tls
      : ctx_(make_context(ca_file)),
        ws_(io_, *ctx_) {
    boost::beast::get_lowest_layer(ws_).connect({asio::ip::make_address("127.0.0.1"), port});
    REQUIRE(handshake_tls());
    upgrade(port, target);
  }

  // Connects without upgrading (the raw socket: write an HTTP request, or
  // nothing at all).
  using raw_tag = ws_raw_tag;
  basic_ws_device(std::uint16_t port, raw_tag) requires(!tls) : ws_(io_) {
    ws_.next_layer().connect({asio::ip::make_address("127.0.0.1"), port});
  }
  // Connects without the TLS handshake; handshake_tls() does it.
  basic_ws_device(std::uint16_t port, const std::string& ca_file, raw_tag) requires tls : ctx_(make_context(ca_file)),
                                                                                          ws_(io_, *ctx_) {
    boost::beast::get_lowest_layer(ws_).connect({asio::ip::make_address("127.0.0.1"), port});
  }

  // The TLS handshake: its error (the certificate not trusted, ...) is
  // kept in error().
  bool handshake_tls() requires tls {
    auto& ssl = ws_.next_layer();
    SSL_set1_host(ssl.native_handle(), "127.0.0.1");
    boost::beast::error_code ec;
    ssl.handshake(asio::ssl::stream_base::client, ec);
    error_ = ec;
    return !ec;
  }

  void send(std::string_view text) {
    boost::beast::error_code ec;
    ws_.text(true);
    ws_.write(asio::buffer(text.data(), text.size()), ec);
    REQUIRE_FALSE(ec);
  }
  void send_binary(std::string_view bytes) {
    boost::beast::error_code ec;
    ws_.binary(true);
    ws_.write(asio::buffer(bytes.data(), bytes.size()), ec);
  }
  // A hello with `token` (and optional extra fields, e.g. R"("caps":["offers"])").
  void hello(std::string_view token, std::string_view extra = {}) {
    send(R"({"t":"hello","token":")" + std::string(token) + "\"" + (extra.empty() ? "" : "," + std::string(extra)) +
         "}");
  }

  // The next text message within `timeout`; nullopt when the socket closed
  // (close_code() says how) or nothing came.
  std::optional<nlohmann::json> next(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    boost::beast::flat_buffer buffer;
    boost::beast::error_code ec;
    bool done = false;
    ws_.async_read(buffer, [&](boost::beast::error_code e, std::size_t) {
      ec = e;
      done = true;
    });
    io_.restart();
    io_.run_for(timeout);
    if (!done) {  // timed out: cancel the read and let it finish
      boost::system::error_code ignored;
      boost::beast::get_lowest_layer(ws_).cancel(ignored);
      io_.restart();
      io_.run();
      timed_out_ = true;
    }
    if (ec) {
      error_ = ec;
      return std::nullopt;
    }
    return nlohmann::json::parse(boost::beast::buffers_to_string(buffer.data()));
  }
  // The next message, REQUIREd to be of kind `t`.
  nlohmann::json expect(std::string_view t, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    auto m = next(timeout);
    INFO("waiting for " << t << ", error: " << error_.message() << ", close " << close_code());
    REQUIRE(m);
    INFO(m->dump());
    REQUIRE((*m)["t"] == t);
    return *m;
  }
  // Reads (and drops messages) until the gateway closes the socket; its
  // close code, or 0 when none came within `timeout`.
  std::uint16_t wait_closed(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    const auto give_up = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < give_up) {
      if (!next(std::chrono::duration_cast<std::chrono::milliseconds>(give_up - std::chrono::steady_clock::now()) +
                std::chrono::milliseconds(1))) {
        return close_code();
      }
    }
    return 0;
  }
  bool timed_out() const { return timed_out_; }
  std::uint16_t close_code() const { return static_cast<std::uint16_t>(ws_.reason().code); }
  std::string close_reason() const { return std::string(ws_.reason().reason.c_str()); }
  boost::beast::error_code error() const { return error_; }

  auto& socket() { return ws_.next_layer(); }
  auto& stream() { return ws_; }

 private:
  void upgrade(std::uint16_t port, std::string_view target) {
    boost::beast::error_code ec;
    ws_.handshake("127.0.0.1:" + std::to_string(port), std::string(target), ec);
    REQUIRE_FALSE(ec);
  }
  static std::unique_ptr<asio::ssl::context> make_context(const std::string& ca_file) {
    auto ctx = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_client);
    ctx->load_verify_file(ca_file);
    ctx->set_verify_mode(asio::ssl::verify_peer);
    return ctx;
  }

  asio::io_context io_;
  std::unique_ptr<asio::ssl::context> ctx_;  // wss: before the stream that uses it
  boost::beast::websocket::stream<NextLayer> ws_;
  boost::beast::error_code error_;
  bool timed_out_ = false;
};

using ws_device = basic_ws_device<asio::ip::tcp::socket>;
using wss_device = basic_ws_device<boost::beast::ssl_stream<asio::ip::tcp::socket>>;

}  // namespace switchyard::test
