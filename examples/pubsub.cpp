// The foundation's user story: a service publishes to orders.eu.created; one
// subscriber on orders.*.created and one on orders.> both receive it.
//
//   switchyard-example-pubsub [--address HOST:PORT]
//
// Exits 0 when both subscribers got the message, 1 otherwise (2: bad
// arguments). The command line is the one of every example:
// example_args.hpp.

#include "example_args.hpp"

#include <switchyard/client.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

constexpr std::string_view usage =
    "usage: switchyard-example-pubsub [--address HOST:PORT]\n"
    "Subscribes to orders.*.created and to orders.>, publishes one message to orders.eu.created and checks\n"
    "that both subscribers got it (exit 0, else 1).\n"
    "  --address HOST:PORT  the broker (default: $SWITCHYARD_ADDRESS, else 127.0.0.1:7878)\n"
    "  --help               this text\n";

int main(int argc, char** argv) {
  example::command_line args(argc, argv, usage);
  while (args.next()) args.unexpected();
  switchyard::client_options options;
  args.address(options.host, options.port);

  auto connect = [&](const char* name) {
    auto o = options;
    o.client_name = name;
    auto c = switchyard::client::connect(o);
    if (!c) {
      std::fprintf(stderr, "%s: cannot connect to %s: %s\n", name, args.address_text().c_str(),
                   c.error().message().c_str());
      std::exit(1);
    }
    return std::move(*c);
  };

  std::atomic<int> received{0};
  auto print = [&](const char* who) {
    return [&received, who](const switchyard::message& m) {
      std::printf("%s got %.*s: %.*s\n", who, static_cast<int>(m.channel.size()), m.channel.data(),
                  static_cast<int>(m.payload_text().size()), m.payload_text().data());
      ++received;
    };
  };

  auto created = connect("created-watcher");
  auto everything = connect("audit-log");
  // subscribe() returns once the broker has confirmed the subscription.
  if (!created->subscribe("orders.*.created", print("orders.*.created")) ||
      !everything->subscribe("orders.>", print("orders.>"))) {
    std::fprintf(stderr, "subscribe failed\n");
    return 1;
  }

  auto service = connect("order-service");
  if (auto ec = service->publish("orders.eu.created", "{\"order\":42}")) {
    std::fprintf(stderr, "publish failed: %s\n", ec.message().c_str());
    return 1;
  }
  service->flush();

  for (int i = 0; i < 500 && received < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::printf("%d of 2 subscribers received the message\n", received.load());
  return received == 2 ? 0 : 1;
}
