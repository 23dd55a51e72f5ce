// The handshakes workload: how many new connections per second the broker
// accepts, each a full connect as a client makes it (TCP connect, the TLS
// handshake with --tls, the hello and its welcome) followed by a close.
// C clients connect in a loop for D seconds, each on its own thread (with
// its own client event loop). Reports connects per second, and the
// broker's and this process's CPU time per connect (cpu_usage.hpp; the
// broker's only for a broker the bench started).
//
// The client library makes a full handshake every time: it keeps no TLS
// session to resume, and the broker issues no session tickets
// (docs/security.md, "TLS").

#include "bench/bench_common.hpp"
#include "bench/cpu_usage.hpp"
#include "switchyard/client.hpp"

#include <atomic>
#include <cmath>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace switchyard::bench {

int run_handshakes(const settings& s, const target& t) {
  const int n = s.hs_clients;
  std::atomic<std::uint64_t> done{0}, failed{0};
  std::atomic<bool> stop{false};
  std::string first_error;
  std::mutex error_mu;
  // Each client thread has its own event loop, made before the clock starts.
  std::vector<std::shared_ptr<event_loop>> loops;
  for (int i = 0; i < n; ++i) loops.push_back(std::make_shared<event_loop>());
  const cpu_meter cpu(t.server);
  const std::uint64_t t0 = now_ns();
  const std::uint64_t end = t0 + static_cast<std::uint64_t>(s.seconds * 1e9);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      auto o = options_for(t, fmt::format("bench-handshake-{}", i));
      o.reconnect.enabled = false;
      // Bounded: at most one connect per thread per loop turn, until the end.
      for (std::uint64_t k = 0; k < 100'000'000 && !stop.load(std::memory_order_relaxed) && now_ns() < end; ++k) {
        auto c = client::connect(o, loops[static_cast<std::size_t>(i)]);
        if (!c) {
          ++failed;
          std::lock_guard lock(error_mu);
          if (first_error.empty()) first_error = c.error().message();
          if (failed.load() > 100) stop = true;
          continue;
        }
        (*c)->close();
        ++done;
      }
    });
  }
  while (now_ns() < end && !stop.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    progress("handshakes: {}", done.load());
  }
  for (auto& th : threads) th.join();
  const double elapsed = static_cast<double>(now_ns() - t0) / 1e9;
  const auto count = done.load();
  const cpu_cost cost = cpu.stop(count, "connect");
  progress_done();
  const double rate = static_cast<double>(count) / elapsed;
  json_line j;
  j.str("broker", "switchyard").str("workload", "handshakes").str("transport", t.tls_ca.empty() ? "plain" : "tls");
  j.integer("clients", n).num("seconds", elapsed).integer("connects", static_cast<long long>(count));
  j.integer("failed", static_cast<long long>(failed.load())).num("connects_per_s", rate);
  j.num("server_cpu_us_per_connect", cost.per_unit_us(cost.broker_s));
  j.num("client_cpu_us_per_connect", cost.per_unit_us(cost.bench_s)).raw("cpu", cost.json());
  if (!first_error.empty()) j.str("errors", first_error);
  const std::string summary =
      fmt::format("handshakes: {} clients for {:.1f} s over {}: {} connects ({} failed), {:.0f}/s\n", n, elapsed,
                  t.tls_ca.empty() ? "plain TCP" : "TLS", count, failed.load(), rate) +
      cost.summary();
  emit(s, summary, j);
  return failed.load() > 0 && count == 0 ? 1 : 0;
}

}  // namespace switchyard::bench
