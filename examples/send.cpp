// A service sending to a user without knowing which gateway holds them.
//
//   switchyard-example-send ROUTE-KEY PAYLOAD [--address HOST:PORT]
//
// Prints "routed <gateway>" (exit 0) or "no route" (exit 3); 1 when the
// broker cannot be reached, 2 for bad arguments. The command line is the
// one of every example: example_args.hpp.

#include "example_args.hpp"

#include <switchyard/client.hpp>

#include <cstdio>
#include <string>
#include <vector>

constexpr std::string_view usage =
    "usage: switchyard-example-send ROUTE-KEY PAYLOAD [--address HOST:PORT]\n"
    "Sends PAYLOAD to the user behind ROUTE-KEY (e.g. user:alice) through whichever gateway holds them;\n"
    "prints \"routed <gateway>\" (exit 0) or \"no route\" (exit 3).\n"
    "  --address HOST:PORT  the broker (default: $SWITCHYARD_ADDRESS, else 127.0.0.1:7878)\n"
    "  --help               this text\n";

int main(int argc, char** argv) {
  example::command_line args(argc, argv, usage);
  std::vector<std::string> positional;  // the route key and the payload
  while (args.next()) {
    if (args.is_flag() || positional.size() == 2) args.unexpected();
    positional.emplace_back(args.arg());
  }
  if (positional.size() < 2) args.fail(positional.empty() ? "give a route key and a payload" : "give a payload");
  switchyard::client_options options;
  options.client_name = "example-service";
  args.address(options.host, options.port);
  auto conn = switchyard::client::connect(options);
  if (!conn) {
    std::fprintf(stderr, "cannot connect to %s: %s\n", args.address_text().c_str(), conn.error().message().c_str());
    return 1;
  }
  auto routed = (*conn)->send(positional[0], positional[1]);
  if (routed) {
    std::printf("routed %s\n", routed->c_str());
    return 0;
  }
  if (routed.error() == switchyard::errc::no_route) {
    std::printf("no route\n");
    return 3;
  }
  std::fprintf(stderr, "send: %s\n", routed.error().message().c_str());
  return 1;
}
