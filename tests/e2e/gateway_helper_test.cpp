// End to end: the gateway helper's thread model and lifetime, against a
// real broker on 127.0.0.1 (with a data folder, for durable inboxes).

#include "switchyard/client.hpp"
#include "switchyard/gateway.hpp"
#include "tests/support/byte_pattern.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/log_helpers.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/test_server.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <utility>

using namespace switchyard;
using namespace std::chrono_literals;
using namespace switchyard::test;

namespace {

// Short leases and a fast sweeper, the log without fsync (delivery is under
// test, not durability).
broker::server_config gateway_config(const temp_dir& dir) {
  auto cfg = with_data(dir);
  cfg.durability = storage::durability::none;
  cfg.lease_min_ttl = 100ms;
  cfg.sweep_period = 20ms;
  return cfg;
}

using switchyard::test::bytes_of;

// The id of the thread that runs `c`'s callbacks: its event loop's.
std::thread::id loop_thread_of(client& c) {
  std::promise<std::thread::id> id;
  auto got = id.get_future();
  c.async_flush([&](std::error_code) { id.set_value(std::this_thread::get_id()); });
  REQUIRE(got.wait_for(5s) == std::future_status::ready);
  return got.get();
}

}  // namespace

TEST_CASE("every callback of a gateway runs on its client's loop thread", "[e2e][client][routing]") {
  temp_dir dir;
  test_server server(gateway_config(dir));
  auto conn = connect_to(server, "gateway");
  const std::thread::id loop_thread = loop_thread_of(*conn);
  REQUIRE(loop_thread != std::this_thread::get_id());

  collector<std::pair<std::string, std::thread::id>> calls;  // callback, thread it ran on
  std::atomic<int> messages{0}, renewals{0}, errors{0};
  auto gw = gateway::start(*conn, {.inbox_id = "gw-7",
                                   .lease_ttl = 300ms,
                                   .on_message =
                                       [&](const inbox_message&) {
                                         calls.add({"on_message", std::this_thread::get_id()});
                                         ++messages;
                                       },
                                   .on_lease_renewed =
                                       [&](lease_id, lease_id) {
                                         calls.add({"on_lease_renewed", std::this_thread::get_id()});
                                         ++renewals;
                                       },
                                   .on_error =
                                       [&](std::error_code) {
                                         calls.add({"on_error", std::this_thread::get_id()});
                                         ++errors;
                                       },
                                   .routes = {"user:alice"}});
  REQUIRE(gw);

  // A delivery.
  auto service = connect_to(server, "service");
  REQUIRE(service->send("user:alice", "hello"));
  REQUIRE(wait_until([&] { return messages == 1; }, 5s));
  // A lease revoked by someone else: the next keepalive finds it gone and
  // the gateway renews it.
  REQUIRE_FALSE(service->lease_revoke((*gw)->lease()));
  REQUIRE(wait_until([&] { return renewals == 1; }, 5s));
  // A keepalive that fails: the connection is gone.
  conn->close();
  REQUIRE(wait_until([&] { return errors >= 1; }, 5s));
  gw->reset();

  for (const auto& [callback, thread] : calls.snapshot()) {
    INFO(callback);
    CHECK(thread == loop_thread);
  }
}

TEST_CASE("a destroyed gateway's inbox handler is never called again, though the broker still routes to it",
          "[e2e][client][routing]") {
  const bool durable = GENERATE(false, true);
  INFO((durable ? "durable inbox" : "plain inbox"));
  temp_dir dir;
  test_server server(gateway_config(dir));
  auto conn = connect_to(server, "gateway");
  std::atomic<int> delivered{0};
  gateway_options options{
      .inbox_id = "gw-1", .on_message = [&](const inbox_message&) { ++delivered; }, .routes = {"user:alice"}};
  if (durable) options.durable = durable_options{};
  auto gw = gateway::start(*conn, std::move(options));
  REQUIRE(gw);
  auto service = connect_to(server, "service");
  const std::string_view alice[] = {"user:alice"};
  REQUIRE(service->send_durable(alice, "conv:1", bytes_of("before")));
  REQUIRE(wait_until([&] { return delivered == 1; }, 5s));

  // Abandoned, the lease, inbox and route outlive the object on the broker
  // (until the TTL), and the connection stays open.
  (*gw)->abandon();
  gw->reset();
  auto sent = service->send_durable(alice, "conv:1", bytes_of("after"));
  REQUIRE(sent);
  REQUIRE(sent->routed == 1);
  // The delivery was queued to the gateway's connection before the answer
  // to this round trip: once it returns, the delivery has been dispatched.
  REQUIRE_FALSE(conn->flush());
  CHECK(delivered == 1);
}
