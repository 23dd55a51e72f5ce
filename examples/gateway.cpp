// A gateway in ~60 lines: it holds a lease, opens its inbox, registers the
// users "connected" to it, and prints whatever services send them.
//
//   switchyard-example-gateway --inbox gw-7 --user user:alice [--user ...]
//                              [--host 127.0.0.1] [--port 7878] [--ttl-ms 10000]
//
// Prints "ready inbox=gw-7 lease=N" once everything is registered, then one
// line per delivery: "deliver user:alice <payload>". Stops on SIGINT/SIGTERM
// (revoking its lease, so its routes vanish at once); killed with SIGKILL,
// its routes vanish when the lease expires. When the broker restarts, the
// client library reconnects and restores the lease, inbox and routes by
// itself; the example only stops if the library gives up.

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

int main(int argc, char** argv) {
  switchyard::client_options options;
  options.client_name = "example-gateway";
  std::string inbox = "gw-1";
  std::vector<std::string> users;
  std::chrono::milliseconds ttl{10'000};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--host") options.host = value;
    else if (flag == "--port") options.port = static_cast<std::uint16_t>(std::stoi(value));
    else if (flag == "--inbox") inbox = value;
    else if (flag == "--user") users.push_back(value);
    else if (flag == "--ttl-ms") ttl = std::chrono::milliseconds(std::stoi(value));
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  options.on_closed = [](std::error_code ec) {
    std::fprintf(stderr, "connection closed: %s\n", ec.message().c_str());
    closed = true;
  };

  auto conn = switchyard::client::connect(options);
  if (!conn) {
    std::fprintf(stderr, "connect: %s\n", conn.error().message().c_str());
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
