// switchyard-nats-hop: what a cross-node hop through cluster::nats_link
// costs. Two links in this process (each with its own loop thread) talk
// through one nats-server:
//   latency  `--count` messages of `--size` bytes paced at `--rate`/s; the
//            payload carries the send time (steady_clock, same process),
//            the receiver's handler (on its loop thread) takes the
//            difference: one-way latency publish() -> handler.
//   burst    `--burst` messages published as fast as the queue takes them
//            (a refused publish is retried after a yield); messages/s from
//            the first publish to the last delivery.
// Prints one JSON object per phase.
//
//   switchyard-nats-hop --url nats://127.0.0.1:4222 [--coalesce]

#include "cluster/nats_link.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using switchyard::cluster::nats_link;
namespace asio = switchyard::asio;
using clock_type = std::chrono::steady_clock;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now().time_since_epoch()).count();
}

// A link with its own loop thread.
struct node {
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> guard = asio::make_work_guard(io);
  nats_link link;
  std::thread thread;
  node(const std::string& url, bool coalesce, std::size_t mailbox)
      : link(io.get_executor(), switchyard::cluster::nats_link_options{.servers = {url},
                                                                       .mailbox_max_messages = mailbox,
                                                                       .queue_max_messages = 1 << 16,
                                                                       .coalesce_writes = coalesce}) {}
  void run() {
    thread = std::thread([this] { io.run(); });
  }
  ~node() {
    asio::post(io, [this] { link.stop(); });
    guard.reset();
    if (thread.joinable()) thread.join();
  }
};

double percentile(std::vector<std::int64_t>& v, double p) {
  if (v.empty()) return 0;
  const auto k = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return static_cast<double>(v[k]) / 1000.0;  // µs
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"One-way latency and burst rate of a hop through nats_link and one nats-server"};
  std::string url = "nats://127.0.0.1:4222";
  std::uint32_t count = 20000, rate = 20000, burst = 200000;
  std::size_t size = 64;
  bool coalesce = false;
  std::size_t mailbox = switchyard::cluster::nats_link_options{}.mailbox_max_messages;
  app.add_option("--url", url, "the nats-server");
  app.add_option("--count", count, "latency phase: messages");
  app.add_option("--rate", rate, "latency phase: messages per second");
  app.add_option("--size", size, "payload bytes (at least 16)");
  app.add_option("--burst", burst, "burst phase: messages (0: skip)");
  app.add_flag("--coalesce", coalesce, "nats_link_options::coalesce_writes");
  app.add_option("--mailbox", mailbox, "the receiver's mailbox_max_messages");
  CLI11_PARSE(app, argc, argv);
  size = std::max<std::size_t>(size, 16);

  node sender(url, coalesce, mailbox);
  node receiver(url, coalesce, mailbox);
  if (auto r = sender.link.start(); !r) return fmt::print(stderr, "start: {}\n", r.error().message()), 1;
  if (auto r = receiver.link.start(); !r) return fmt::print(stderr, "start: {}\n", r.error().message()), 1;

  // Written by the receiver's loop thread only; read after `received` says so.
  std::vector<std::int64_t> latencies;
  latencies.reserve(count);
  std::atomic<std::uint64_t> received{0};
  std::atomic<std::int64_t> last_at{0};
  std::atomic<bool> measuring{true};
  std::atomic<bool> ready{false};
  if (!receiver.link.subscribe(
          "hop",
          [&](const switchyard::cluster::inbound_message& m) {
            std::int64_t sent = 0;
            std::memcpy(&sent, m.payload.data(), sizeof sent);
            const std::int64_t at = now_ns();
            if (measuring.load(std::memory_order_relaxed)) latencies.push_back(at - sent);
            last_at.store(at, std::memory_order_relaxed);
            received.fetch_add(1, std::memory_order_release);
          },
          [&](std::error_code ec) { ready = !ec; }))
    return 1;
  sender.run();
  receiver.run();
  for (int i = 0; i < 500 && !ready; ++i) std::this_thread::sleep_for(10ms);
  if (!ready) return fmt::print(stderr, "subscription not confirmed\n"), 1;

  std::vector<std::byte> payload(size);
  const auto send = [&] {
    const std::int64_t t = now_ns();
    std::memcpy(payload.data(), &t, sizeof t);
    return sender.link.publish("hop", payload);
  };
  const auto wait_for = [&](std::uint64_t n) {
    for (int i = 0; i < 1000 && received.load(std::memory_order_acquire) < n; ++i) std::this_thread::sleep_for(5ms);
    return received.load(std::memory_order_acquire);
  };

  // Latency: paced sends from this thread (publish() is safe on any thread).
  const auto period = std::chrono::nanoseconds(1'000'000'000 / std::max<std::uint32_t>(rate, 1));
  const auto start = clock_type::now();
  std::uint64_t refused = 0;
  for (std::uint32_t i = 0; i < count; ++i) {
    std::this_thread::sleep_until(start + period * i);  // behind schedule: sends at once (catches up)
    if (!send()) ++refused;
  }
  const auto got = wait_for(count - refused);
  measuring = false;
  fmt::print(
      "{{\"phase\":\"latency\",\"messages\":{},\"received\":{},\"refused\":{},\"rate\":{},\"size\":{},"
      "\"coalesce\":{},\"p50_us\":{:.1f},\"p90_us\":{:.1f},\"p99_us\":{:.1f},\"p999_us\":{:.1f},\"max_us\":{:.1f}}}\n",
      count, got, refused, rate, size, coalesce, percentile(latencies, 0.5), percentile(latencies, 0.9),
      percentile(latencies, 0.99), percentile(latencies, 0.999), percentile(latencies, 1.0));

  if (burst > 0) {
    const std::uint64_t before = received.load();
    std::uint64_t retries = 0;
    const std::int64_t t0 = now_ns();
    for (std::uint32_t i = 0; i < burst; ++i) {
      while (!send()) {
        ++retries;
        std::this_thread::yield();
      }
    }
    const std::int64_t t_sent = now_ns();
    const auto total = wait_for(before + burst) - before;
    const double secs = static_cast<double>(last_at.load() - t0) / 1e9;
    fmt::print(
        "{{\"phase\":\"burst\",\"messages\":{},\"received\":{},\"size\":{},\"coalesce\":{},\"queue_full_retries\":{},"
        "\"publish_seconds\":{:.3f},\"seconds\":{:.3f},\"messages_per_second\":{:.0f},\"dropped_in\":{}}}\n",
        burst, total, size, coalesce, retries, static_cast<double>(t_sent - t0) / 1e9, secs,
        static_cast<double>(total) / secs, receiver.link.stats().dropped_in);
  }
  return 0;
}
