// End to end: the example programs run against a real server.

#include "tests/support/process.hpp"
#include "tests/support/test_server.hpp"

#include <catch2/catch.hpp>

#include <string>

TEST_CASE("the pub/sub example delivers to orders.*.created and orders.>", "[e2e][examples]") {
  switchyard::test::test_server server;
  const auto [status, out] = switchyard::test::run_command(std::string(SWITCHYARD_EXAMPLE_PUBSUB) + " 127.0.0.1 " +
                                                           std::to_string(server.port()) + " 2>&1");
  INFO(out);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(out.find("orders.*.created got orders.eu.created: {\"order\":42}") != std::string::npos);
  CHECK(out.find("orders.> got orders.eu.created: {\"order\":42}") != std::string::npos);
}
