// End to end: the example programs run against a real server.

#include "tests/support/test_server.hpp"

#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

TEST_CASE("the pub/sub example delivers to orders.*.created and orders.>", "[e2e][examples]") {
  switchyard::test::test_server server;
  const std::string cmd =
      std::string(SWITCHYARD_EXAMPLE_PUBSUB) + " 127.0.0.1 " + std::to_string(server.port()) + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = ::pclose(p);
  INFO(out);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(out.find("orders.*.created got orders.eu.created: {\"order\":42}") != std::string::npos);
  CHECK(out.find("orders.> got orders.eu.created: {\"order\":42}") != std::string::npos);
}
