// End to end: a server process's identity (the welcome's server_instance)
// and what a lease id from a previous process finds after a restart: a
// broker restarted on the same port is a second test_server on that port.

#include "switchyard/client.hpp"
#include "switchyard/error.hpp"
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
#include <cstdint>
#include <expected>
#include <memory>
#include <optional>
#include <string>

using namespace switchyard;
using namespace std::chrono_literals;
using namespace switchyard::test;

namespace {

// The error of `r`, or none when it succeeded.
template <class T>
std::error_code error_of(const std::expected<T, std::error_code>& r) {
  return r ? std::error_code{} : r.error();
}

}  // namespace

TEST_CASE("the welcome carries a random server instance id that differs between processes", "[e2e][client]") {
  std::uint64_t first = 0;
  std::uint16_t port = 0;
  {
    test_server server;
    port = server.port();
    auto a = connect_to(server, "a");
    auto b = connect_to(server, "b");
    first = a->server_instance();
    CHECK(first != 0);
    CHECK(b->server_instance() == first);  // one process, one id
    CHECK_FALSE(a->server_version().empty());
  }
  test_server restarted(test_server::default_config(port));
  auto c = connect_to(restarted, "c");
  CHECK(c->server_instance() != 0);
  CHECK(c->server_instance() != first);
}

TEST_CASE("an injected server instance id is the one the welcome carries", "[e2e][client]") {
  auto cfg = test_server::default_config();
  cfg.instance_id = 0xfeed'0000'0000'beef;
  test_server server(cfg);
  auto c = connect_to(server);
  CHECK(c->server_instance() == 0xfeed'0000'0000'beef);
}

TEST_CASE("a lease id from the previous broker process answers not_found after a restart", "[e2e][client][routing]") {
  lease_id old_lease = 0;
  std::uint16_t port = 0;
  {
    test_server first;
    port = first.port();
    auto a = connect_to(first, "gateway-a");
    auto l = a->lease_grant(30s);
    REQUIRE(l);
    old_lease = l->id;
  }
  test_server second(test_server::default_config(port));
  // Another gateway gets a lease from the new process first.
  auto b = connect_to(second, "gateway-b");
  auto b_lease = b->lease_grant(30s);
  REQUIRE(b_lease);
  REQUIRE(b->registry_put("user:bob", "gw-b", b_lease->id));
  CHECK(b_lease->id != old_lease);

  auto a = connect_to(second, "gateway-a");
  CHECK(error_of(a->lease_keepalive(old_lease)) == errc::not_found);
  CHECK(error_of(a->lease_time_to_live(old_lease)) == errc::not_found);
  CHECK(error_of(a->registry_put("user:alice", "gw-a", old_lease)) == errc::not_found);
  CHECK(a->open_inbox("gw-a", old_lease, [](const inbox_message&) {}) == errc::not_found);
  CHECK(a->lease_revoke(old_lease) == errc::not_found);
  // B's lease and its entry are untouched.
  CHECK(b->lease_time_to_live(b_lease->id));
  auto bob = b->registry_get("user:bob");
  REQUIRE(bob);
  CHECK(bob->lease == b_lease->id);
}

// The takeover of issue 11: gateway A held a lease on the first process;
// after the restart gateway B gets a lease, and A resumes "its" lease id.
// With ids restarting at 1 in every process, A's resume found B's lease:
// A's inbox and routes went under it, and when B stopped (revoking it)
// A's users went offline. Now A's resume answers not_found and the gateway
// helper grants a new lease and restores its inbox and routes under it.
TEST_CASE("a gateway resuming its lease after a broker restart does not take over another gateway's lease",
          "[e2e][client][routing]") {
  lease_id a_old = 0;
  std::uint16_t port = 0;
  {
    test_server first;
    port = first.port();
    auto conn_a = connect_to(first, "gateway-a");
    auto gw_a = gateway::start(
        *conn_a, {.inbox_id = "gw-a", .on_message = [](const inbox_message&) {}, .routes = {"user:alice"}});
    REQUIRE(gw_a);
    a_old = (*gw_a)->lease();
    (*gw_a)->abandon();  // the process dies: nothing revoked
  }

  test_server second(test_server::default_config(port));
  auto conn_b = connect_to(second, "gateway-b");
  auto gw_b =
      gateway::start(*conn_b, {.inbox_id = "gw-b", .on_message = [](const inbox_message&) {}, .routes = {"user:bob"}});
  REQUIRE(gw_b);
  const lease_id b_lease = (*gw_b)->lease();

  std::atomic<int> to_alice{0};
  auto conn_a = connect_to(second, "gateway-a");
  auto gw_a = gateway::start(*conn_a, {.inbox_id = "gw-a",
                                       .on_message = [&](const inbox_message&) { ++to_alice; },
                                       .resume_lease = a_old,
                                       .routes = {"user:alice"}});
  REQUIRE(gw_a);
  CHECK((*gw_a)->lease() != b_lease);
  CHECK((*gw_a)->lease() != a_old);  // not_found on resume: a new lease was granted

  // Gateway B stops: it revokes its lease, and only its own state goes.
  gw_b->reset();
  auto service = connect_to(second, "service");
  auto sent = service->send("user:alice", "hi");
  CHECK(error_of(sent) == std::error_code{});
  if (sent) CHECK(*sent == "gw-a");
  CHECK(wait_until([&] { return to_alice.load() == 1; }, 5s));
  CHECK(error_of(service->send("user:bob", "hi")) == errc::no_route);
  CHECK(conn_a->lease_time_to_live((*gw_a)->lease()));
}

// Durable positions name a stream's epoch, random at the stream's creation:
// a broker with another log (another data folder) never passes its own
// sequences off as the ones a position was saved against.
TEST_CASE("durable positions resumed against a broker with another log are reported as unrecoverable, not resumed",
          "[e2e][client][log]") {
  stream_positions saved;
  std::uint16_t port = 0;
  {
    temp_dir first_dir;
    test_server first(with_data(first_dir));
    port = first.port();
    auto sub = connect_to(first, "sub");
    collector<std::uint64_t> got;
    auto id = sub->subscribe_durable("feed.>", [&](const message& m) { got.add(m.seq); });
    REQUIRE(id);
    auto pub = connect_to(first, "pub");
    for (int i = 0; i < 3; ++i) REQUIRE(pub->publish_durable("feed.x", "feed", bytes_of("first")));
    REQUIRE(wait_until([&] { return got.count == 3; }));
    saved = sub->stream_positions_of(*id);
    REQUIRE(saved.at("feed").seq == 3);
  }
  temp_dir second_dir;
  auto cfg = with_data(second_dir);
  cfg.listen_port = port;
  test_server second(cfg);

  collector<unrecoverable_position> lost;
  collector<std::uint64_t> got;
  durable_options o;
  o.resume_from = saved;
  o.on_unrecoverable = [&](const unrecoverable_position& u) {
    lost.add(u);
    return resume_at::first_available;
  };
  auto sub = connect_to(second, "sub");
  REQUIRE(sub->subscribe_durable(
      "feed.>", [&](const message& m) { got.add(m.seq); }, o));
  REQUIRE(wait_until([&] { return lost.count == 1; }));
  CHECK(lost.snapshot().front().reason == position_lost::stream_gone);
  CHECK(lost.snapshot().front().last_delivered.seq == 3);

  // The second log's own stream of that name starts at 1 and is delivered
  // from there, not taken for the first log's 4, 5, ...
  auto pub = connect_to(second, "pub");
  for (int i = 0; i < 5; ++i) REQUIRE(pub->publish_durable("feed.x", "feed", bytes_of("second")));
  REQUIRE(wait_until([&] { return got.count == 5; }));
  CHECK(got.snapshot() == std::vector<std::uint64_t>{1, 2, 3, 4, 5});
  CHECK(lost.count == 1);
}
