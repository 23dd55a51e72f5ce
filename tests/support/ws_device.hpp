#pragma once
// A device for the gateway's tests: a real WebSocket client (Boost.Beast,
// writes blocking, reads asynchronous on its own io_context run for at most
// the timeout (a read that timed out is cancelled, and the stream is not
// used again but to be dropped).

#include "common/asio.hpp"

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace switchyard::test {

class ws_device {
 public:
  // Connects and upgrades at `target`; REQUIREs success.
  explicit ws_device(std::uint16_t port, std::string_view target = "/ws") : ws_(io_) {
    ws_.next_layer().connect({asio::ip::make_address("127.0.0.1"), port});
    boost::beast::error_code ec;
    ws_.handshake("127.0.0.1:" + std::to_string(port), std::string(target), ec);
    REQUIRE_FALSE(ec);
  }

  // Connects without upgrading (the raw socket: write an HTTP request, or
  // nothing at all).
  struct raw_tag {};
  ws_device(std::uint16_t port, raw_tag) : ws_(io_) {
    ws_.next_layer().connect({asio::ip::make_address("127.0.0.1"), port});
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
      ws_.next_layer().cancel(ignored);
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
  asio::io_context io_;
  boost::beast::websocket::stream<asio::ip::tcp::socket> ws_;
  boost::beast::error_code error_;
  bool timed_out_ = false;
};

}  // namespace switchyard::test
