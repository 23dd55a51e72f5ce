// switchyard-bench leases: L leases, each with one route.
//  - over the network: grants/s and keepalives/s (at most W requests in
//    flight), and the server's resident memory per lease (from /proc; only
//    for a broker the bench started: not measured with --address, where
//    the leases are revoked at the end);
//  - in process, on the broker's own lease_table and routing_table with a
//    hand-driven clock: heap bytes per lease with one route, and the cost
//    of one sweeper tick while nothing expires and while 10% expire.

#include "bench/bench_common.hpp"
#include "bench/cpu_usage.hpp"
#include "broker/tables/lease_table.hpp"
#include "broker/tables/routing_table.hpp"

#include <malloc.h>

#include <atomic>
#include <fstream>
#include <semaphore>
#include <vector>

namespace switchyard::bench {

namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;

struct in_process_figures {
  double bytes_per_lease = 0;
  double idle_tick_us = 0;
  double expiring_tick_us = 0;
  std::size_t expired = 0;
};

in_process_figures measure_in_process(long n) {
  auto now = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);
  broker::lease_config cfg;
  cfg.min_ttl = 100ms;
  cfg.max_ttl = std::chrono::hours(1);
  cfg.sweep_period = 100ms;
  cfg.max_expiries_per_sweep = static_cast<std::size_t>(n);
  cfg.stall_threshold = std::chrono::hours(1);  // the hand-driven clock jumps
  in_process_figures out;
  const std::size_t heap_before = mallinfo2().uordblks;
  {
    broker::lease_table leases(cfg, [&] { return now; });
    broker::routing_table routing(leases);
    // 10% of the leases get a 1 s TTL, the rest 10 minutes.
    for (long i = 0; i < n; ++i) {
      const auto lease = leases.grant(i % 10 == 0 ? milliseconds(1000) : milliseconds(600'000));
      (void)routing.put(fmt::format("user:{}", i), fmt::format("gw-{}", i % 200), lease.id, {});
    }
    out.bytes_per_lease = static_cast<double>(mallinfo2().uordblks - heap_before) / static_cast<double>(n);
    const auto on_expire = [&](broker::lease_id id, broker::lease_attachment* first) {
      routing.remove_lease(id, first);
    };
    // Idle ticks: nothing is due.
    constexpr int ticks = 5;
    std::uint64_t spent = 0;
    for (int i = 0; i < ticks; ++i) {
      now += 100ms;
      const auto t0 = now_ns();
      leases.sweep(on_expire);
      spent += now_ns() - t0;
    }
    out.idle_tick_us = static_cast<double>(spent) / ticks / 1000.0;
    // The tick at which the 1 s leases are due.
    now += 600ms;
    const auto t0 = now_ns();
    out.expired = leases.sweep(on_expire).expired;
    out.expiring_tick_us = static_cast<double>(now_ns() - t0) / 1000.0;
  }
  return out;
}

}  // namespace

int run_leases(const settings& s, const target& t, int server_pid) {
  const long n = s.leases;
  auto conn = client::connect(options_for(t, "bench-leases"));
  if (!conn) return fail_line(s, "connect: " + conn.error().message());
  const std::uint64_t rss0 = rss_bytes(server_pid);

  // Grant L leases, each with one route, W requests in flight.
  std::vector<lease_id> ids(static_cast<std::size_t>(n));  // 0: not granted
  std::counting_semaphore<> window(s.window);
  std::atomic<long> failed{0};
  // On a broker of --address the leases go at the end, however the run
  // ends (their routes with them); `cleaned` holds the summary lines.
  std::string cleaned;
  const auto clean_up = [&] {
    if (!t.remote || !cleaned.empty()) return;
    std::vector<std::pair<client*, lease_id>> granted;
    granted.reserve(ids.size());
    for (const auto id : ids) granted.emplace_back(conn->get(), id);
    cleaned = revoke_leases(granted, "within 60 s");
  };
  const auto fail = [&](const std::string& what) {
    clean_up();
    std::fputs(cleaned.c_str(), s.json ? stderr : stdout);
    return fail_line(s, what);
  };
  const cpu_meter cpu(t.server);
  const auto t_grant = now_ns();
  for (long i = 0; i < n; ++i) {
    window.acquire();
    (*conn)->async_lease_grant(60s, [&, i](std::expected<lease_info, std::error_code> r) {
      if (!r) {
        ++failed;
        window.release();
        return;
      }
      ids[static_cast<std::size_t>(i)] = r->id;
      // The route is put from the loop thread, inside the same window slot.
      (*conn)->async_registry_put(fmt::format("{}user:{}", t.prefix, i), t.prefix + "gw-bench", r->id,
                                  [&](std::expected<std::uint64_t, std::error_code> p) {
                                    if (!p) ++failed;
                                    window.release();
                                  });
    });
    if (i % 50000 == 0) progress("leases: granting {}/{}", i, n);
  }
  for (int i = 0; i < s.window; ++i) window.acquire();
  const double grant_secs = static_cast<double>(now_ns() - t_grant) / 1e9;
  window.release(s.window);
  if (failed) return fail(fmt::format("{} grants or puts failed", failed.load()));
  const std::uint64_t rss1 = rss_bytes(server_pid);

  // Keep every lease alive once, twice over.
  const auto t_keep = now_ns();
  for (int pass = 0; pass < 2; ++pass) {
    for (long i = 0; i < n; ++i) {
      window.acquire();
      (*conn)->async_lease_keepalive(ids[static_cast<std::size_t>(i)],
                                     [&](std::expected<lease_info, std::error_code> r) {
                                       if (!r) ++failed;
                                       window.release();
                                     });
      if (i % 50000 == 0) progress("leases: keepalive pass {}, {}/{}", pass + 1, i, n);
    }
  }
  for (int i = 0; i < s.window; ++i) window.acquire();
  const double keep_secs = static_cast<double>(now_ns() - t_keep) / 1e9;
  if (failed) return fail(fmt::format("{} keepalives failed", failed.load()));
  // Every lease's grant, route put and two keepalives.
  const cpu_cost cost = cpu.stop(4 * static_cast<std::uint64_t>(n), "request");
  progress_done();

  const auto local = measure_in_process(n);
  const double grants_per_sec = static_cast<double>(n) / grant_secs;
  const double keepalives_per_sec = 2.0 * static_cast<double>(n) / keep_secs;
  // The server's memory: only a broker the bench started is a process it can read.
  double rss_per_lease = NAN;
  std::string rss_text;
  if (server_pid <= 0) {
    rss_text = "server RSS not measured for a broker of --address";
  } else if (rss1 > rss0) {
    rss_per_lease = static_cast<double>(rss1 - rss0) / static_cast<double>(n);
    rss_text = fmt::format("{:.0f} B/lease server RSS", rss_per_lease);
  } else {
    rss_text = "server RSS did not grow (too few leases to measure)";
  }
  clean_up();

  json_line j;
  j.str("broker", "switchyard").str("workload", "leases").integer("leases", n).integer("window", s.window);
  j.num("grant_put_rate", grants_per_sec).num("keepalive_rate", keepalives_per_sec);
  j.num("server_rss_bytes_per_lease", rss_per_lease).num("heap_bytes_per_lease", local.bytes_per_lease);
  j.num("sweep_idle_tick_us", local.idle_tick_us).num("sweep_10pct_tick_us", local.expiring_tick_us);
  j.integer("sweep_10pct_expired", static_cast<long long>(local.expired)).raw("cpu", cost.json());
  const std::string summary = fmt::format(
      "leases: {} leases, one route each, window {}\n"
      "  grant+put:  {:.0f}/s\n"
      "  keepalive:  {:.0f}/s\n"
      "  memory:     {}, {:.0f} B/lease heap (lease + route, in process)\n"
      "  sweep tick: {:.1f} us with nothing due, {:.1f} us expiring {} (10%)\n{}{}",
      n, s.window, grants_per_sec, keepalives_per_sec, rss_text, local.bytes_per_lease, local.idle_tick_us,
      local.expiring_tick_us, local.expired, cost.summary(), cleaned);
  emit(s, summary, j);
  return 0;
}

}  // namespace switchyard::bench
