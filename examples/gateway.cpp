// A gateway in ~60 lines: it holds a lease, opens its inbox, registers the
// users "connected" to it, and prints whatever services send them.
//
//   switchyard-example-gateway --inbox gw-7 --user user:alice [--user ...]
//                              [--address HOST:PORT] [--ttl-ms 10000]
//
// Prints "ready inbox=gw-7 lease=N" once everything is registered, then one
// line per delivery: "deliver user:alice <payload>". Stops on SIGINT/SIGTERM
// (revoking its lease, so its routes vanish at once); killed with SIGKILL,
// its routes vanish when the lease expires. When the broker restarts, the
// client library reconnects and restores the lease, inbox and routes by
// itself; the example only stops if the library gives up. Bad arguments
// exit 2; the command line is the one of every example: example_args.hpp.

#include "example_args.hpp"

#include <switchyard/gateway.hpp>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {
volatile std::sig_atomic_t stop_requested = 0;
std::atomic<bool> closed{false};  // the client gave up reconnecting
void on_signal(int) { stop_requested = 1; }
}  // namespace

constexpr std::string_view usage =
    "usage: switchyard-example-gateway [--inbox ID] [--user KEY ...] [--ttl-ms MS] [--address HOST:PORT]\n"
    "A gateway: holds a lease, opens inbox ID, registers each KEY (a user) to it and prints\n"
    "\"deliver KEY PAYLOAD\" for whatever is sent to them, until Ctrl-C (which revokes its lease).\n"
    "  --inbox ID           its inbox (default gw-1)\n"
    "  --user KEY           a user routed to it (e.g. user:alice); repeat for more\n"
    "  --ttl-ms MS          its lease's TTL, ms (default 10000)\n"
    "  --address HOST:PORT  the broker (default: $SWITCHYARD_ADDRESS, else 127.0.0.1:7878)\n"
    "  --help               this text\n";

int main(int argc, char** argv) {
  switchyard::client_options options;
  options.client_name = "example-gateway";
  std::string inbox = "gw-1";
  std::vector<std::string> users;
  std::chrono::milliseconds ttl{10'000};
  example::command_line args(argc, argv, usage);
  while (args.next()) {
    std::string value;
    long long ms = 0;
    if (args.take("--inbox", value))
      inbox = value;
    else if (args.take("--user", value))
      users.push_back(value);
    else if (args.take_number("--ttl-ms", 1, 3'600'000, ms))
      ttl = std::chrono::milliseconds(ms);
    else
      args.unexpected();
  }
  args.address(options.host, options.port);
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  options.on_closed = [](std::error_code ec) {
    std::fprintf(stderr, "connection closed: %s\n", ec.message().c_str());
    closed = true;
  };

  auto conn = switchyard::client::connect(options);
  if (!conn) {
    std::fprintf(stderr, "cannot connect to %s: %s\n", args.address_text().c_str(), conn.error().message().c_str());
    return 1;
  }
  // Deliveries arrive on the client's I/O thread; a real gateway would write
  // them to the users' WebSockets here.
  auto on_message = [](const switchyard::inbox_message& m) {
    for (const auto key : m.route_keys)
      std::printf("deliver %.*s %.*s\n", static_cast<int>(key.size()), key.data(),
                  static_cast<int>(m.payload_text().size()), m.payload_text().data());
    std::fflush(stdout);
  };
  auto gw = switchyard::gateway::start(**conn, {.inbox_id = inbox, .lease_ttl = ttl, .on_message = on_message});
  if (!gw) {
    std::fprintf(stderr, "gateway: %s\n", gw.error().message().c_str());
    return 1;
  }
  for (const auto& user : users) {
    if (auto ec = (*gw)->add_route(user)) {
      std::fprintf(stderr, "route %s: %s\n", user.c_str(), ec.message().c_str());
      return 1;
    }
  }
  std::printf("ready inbox=%s lease=%llu\n", inbox.c_str(), static_cast<unsigned long long>((*gw)->lease()));
  std::fflush(stdout);
  while (!stop_requested && !closed) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return 0;  // ~gateway revokes the lease
}
