#include "tests/support/test_server.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <future>
#include <memory>
#include <thread>

namespace switchyard::test {

void test_server::reload() {
  server_->reload();
  live_metrics();  // posted after the reload: once it answers, the reload ran
}

broker::server_config test_server::default_config(std::uint16_t port) {
  broker::server_config c;
  c.listen_host = "127.0.0.1";
  c.listen_port = port;
  c.data_dir.clear();
  c.log_level = std::getenv("SWITCHYARD_TEST_LOG") ? std::getenv("SWITCHYARD_TEST_LOG") : "warn";
  c.hello_timeout = std::chrono::milliseconds(2000);
  c.shutdown_grace = std::chrono::milliseconds(500);
  return c;
}

test_server::test_server(broker::server_config config) : server_(std::make_unique<broker::server>(std::move(config))) {
  server_->start();
  thread_ = std::thread([this] {
    server_->run();
    finished_ = true;
  });
}

test_server::~test_server() { stop(); }

void test_server::stop() {
  if (!thread_.joinable()) return;
  server_->stop();
  thread_.join();
}

bool test_server::wait_finished(std::chrono::milliseconds timeout) {
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  while (!finished_ && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return finished_;
}

broker::metrics_snapshot test_server::live_metrics() {
  auto answer = std::make_shared<std::promise<broker::metrics_snapshot>>();
  auto got = answer->get_future();
  server_->post_metrics([answer](const broker::metrics_snapshot& m) { answer->set_value(m); });
  REQUIRE(got.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  return got.get();
}

void test_server::loop_hold::release() {
  if (!release_) return;
  release_->set_value();
  release_.reset();
}

test_server::loop_hold test_server::hold_loop() {
  auto held = std::make_shared<std::promise<void>>();
  auto release = std::make_shared<std::promise<void>>();
  auto is_held = held->get_future();
  server_->post_metrics([held, done = release->get_future().share()](const broker::metrics_snapshot&) {
    held->set_value();
    done.wait_for(std::chrono::seconds(30));
  });
  REQUIRE(is_held.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  return loop_hold(std::move(release));
}

}  // namespace switchyard::test
