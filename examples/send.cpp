// A service sending to a user without knowing which gateway holds them.
//
//   switchyard-example-send <route-key> <payload> [--host H] [--port P]
//
// Prints "routed <gateway>" (exit 0) or "no route" (exit 3).

#include <switchyard/client.hpp>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s <route-key> <payload> [--host H] [--port P]\n", argv[0]);
    return 2;
  }
  switchyard::client_options options;
  options.client_name = "example-service";
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--host") options.host = argv[i + 1];
    else if (flag == "--port") options.port = static_cast<std::uint16_t>(std::stoi(argv[i + 1]));
  }
  auto conn = switchyard::client::connect(options);
  if (!conn) {
    std::fprintf(stderr, "connect: %s\n", conn.error().message().c_str());
    return 1;
  }
  auto routed = (*conn)->send(argv[1], argv[2]);
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
