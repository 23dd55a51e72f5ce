// switchyard-chaos as CI runs it: a short run (45 s of workload,
// every fault kind at least once) on a real cluster of 3 etcd members, 3
// nats-servers and 3 nodes, checked by the checker. The run must find no
// violation, and must have done enough for that to mean something.

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <cstdio>
#include <string>

TEST_CASE("a short chaos run with every fault kind finds no violation") {
  const std::string cmd = std::string(SWITCHYARD_CHAOS_BINARY) + " --server " + SWITCHYARD_SERVER_BINARY +
                          " --duration 45 --fault-every 2 --json";
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = ::pclose(p);
  INFO(out);
  const auto j = nlohmann::json::parse(out, nullptr, false);
  REQUIRE(j.is_object());
  CHECK(j["violations"].empty());
  CHECK(j["exited"].empty());
  CHECK(j["ok"] == true);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  // Enough happened: every kind of fault (5), appends acknowledged and read
  // back, sends delivered, a gateway abandoned, every live user probed,
  // publishes received by the subscribers.
  CHECK(j["faults"].get<int>() >= 5);
  CHECK(j["appends_acked"].get<int>() > 100);
  CHECK(j["records_read"].get<int>() >= j["appends_acked"].get<int>());
  CHECK(j["deliveries"].get<int>() > 100);
  CHECK(j["abandoned_gateways"] == 1);
  CHECK(j["users_probed"].get<int>() == 100);
  CHECK(j["users_routable"] == j["users_probed"]);
  CHECK(j["subscribers"] == 3);
  CHECK(j["receipts"].get<int>() > 100);
}
