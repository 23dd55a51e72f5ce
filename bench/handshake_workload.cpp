// The handshakes workload: how many new connections per second the broker
// accepts, each a full connect as a client makes it (TCP connect, the TLS
// handshake with --tls, the hello and its welcome) followed by a close.
// C clients connect in a loop for D seconds, each on its own thread (with
// its own client event loop). Reports connects per second, and the
// broker's and this process's CPU time per connect (from /proc, so with a
// started broker only for the broker's).
//
// The client library makes a full handshake every time: it keeps no TLS
// session to resume, and the broker issues no session tickets
// (docs/security.md, "TLS").

#include "bench/bench_common.hpp"
#include "switchyard/client.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace switchyard::bench {

namespace {

// utime + stime of `pid` in seconds (nan if unknown).
double cpu_seconds_of(int pid) {
  if (pid <= 0) return NAN;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = all.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return NAN;
  std::istringstream rest(all.substr(close + 2));
  std::string field;
  // Fields 3.. after the name; utime and stime are fields 14 and 15.
  for (int i = 3; i < 14 && rest >> field; ++i) {
  }
  unsigned long long utime = 0, stime = 0;
  if (!(rest >> utime >> stime)) return NAN;
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

double own_cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  const auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

}  // namespace

int run_handshakes(const settings& s, const target& t, int server_pid) {
  const int n = s.hs_clients;
  std::atomic<std::uint64_t> done{0}, failed{0};
  std::atomic<bool> stop{false};
  std::string first_error;
  std::mutex error_mu;
  // Each client thread has its own event loop, made before the clock starts.
  std::vector<std::shared_ptr<event_loop>> loops;
  for (int i = 0; i < n; ++i) loops.push_back(std::make_shared<event_loop>());
  const double server0 = cpu_seconds_of(server_pid), own0 = own_cpu_seconds();
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
  const double server_cpu = cpu_seconds_of(server_pid) - server0, own_cpu = own_cpu_seconds() - own0;
  progress_done();
  const auto count = done.load();
  const double rate = static_cast<double>(count) / elapsed;
  const double per = count > 0 ? 1.0 / static_cast<double>(count) : NAN;
  json_line j;
  j.str("broker", "switchyard").str("workload", "handshakes").str("transport", t.tls_ca.empty() ? "plain" : "tls");
  j.integer("clients", n).num("seconds", elapsed).integer("connects", static_cast<long long>(count));
  j.integer("failed", static_cast<long long>(failed.load())).num("connects_per_s", rate);
  j.num("server_cpu_us_per_connect", server_cpu * per * 1e6).num("client_cpu_us_per_connect", own_cpu * per * 1e6);
  if (!first_error.empty()) j.str("errors", first_error);
  // The broker's CPU: only a broker the bench started is a process it can read.
  const std::string broker_cpu = std::isfinite(server_cpu * per)
                                     ? fmt::format("broker {:.0f} us", server_cpu * per * 1e6)
                                     : std::string(server_pid > 0 ? "broker not measured"
                                                                  : "broker not measured for a broker of --address");
  const std::string summary = fmt::format(
      "handshakes: {} clients for {:.1f} s over {}: {} connects ({} failed), {:.0f}/s\n"
      "  CPU per connect: {}, clients {:.0f} us\n",
      n, elapsed, t.tls_ca.empty() ? "plain TCP" : "TLS", count, failed.load(), rate, broker_cpu, own_cpu * per * 1e6);
  emit(s, summary, j);
  return failed.load() > 0 && count == 0 ? 1 : 0;
}

}  // namespace switchyard::bench
