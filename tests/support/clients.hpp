#pragma once
// Client-library helpers for end-to-end tests: connecting a named client,
// and thread-safe captures of what the client's loop thread reports (the
// loop thread writes, the test thread reads).

#include "switchyard/client.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace switchyard::test {

// A connected client named `name` on 127.0.0.1:port; REQUIREs success.
inline std::unique_ptr<client> connect_to(std::uint16_t port, std::string name = "test") {
  client_options o;
  o.port = port;
  o.client_name = std::move(name);
  auto c = client::connect(o);
  REQUIRE(c);
  return std::move(*c);
}

// The same for anything with a port(): a test_server or a server process.
template <class Server>
std::unique_ptr<client> connect_to(const Server& s, std::string name = "test") {
  return connect_to(s.port(), std::move(name));
}

// Holds the client's loop thread inside a handler until released (at most
// 30 s), so that the broker's queue for that connection overflows.
struct stall {
  std::mutex mu;
  std::condition_variable cv;
  bool released = false;
  void wait() {
    std::unique_lock lock(mu);
    cv.wait_for(lock, std::chrono::seconds(30), [&] { return released; });
  }
  void release() {
    {
      std::lock_guard lock(mu);
      released = true;
    }
    cv.notify_all();
  }
};

// Records on_disconnect from the loop thread.
struct disconnect_probe {
  std::mutex mu;
  std::error_code reason;
  std::atomic<bool> fired{false};
  std::function<void(std::error_code)> callback() {
    return [this](std::error_code ec) {
      std::lock_guard lock(mu);
      reason = ec;
      fired = true;
    };
  }
  std::error_code get() {
    std::lock_guard lock(mu);
    return reason;
  }
};

// Collects values handed over by the loop thread; `count` can be polled
// without the lock.
template <class T>
struct collector {
  std::mutex mu;
  std::vector<T> got;
  std::atomic<std::size_t> count{0};
  void add(T value) {
    std::lock_guard lock(mu);
    got.push_back(std::move(value));
    ++count;
  }
  std::vector<T> snapshot() {
    std::lock_guard lock(mu);
    return got;
  }
};

}  // namespace switchyard::test
