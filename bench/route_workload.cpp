// switchyard-bench route: send-to-user throughput. U users registered across
// G gateways (each a connection with a lease and an inbox); one service
// sends to random users with at most W sends in flight. Reports sends/s
// (answered; with W = 0 fire and forget, so sent, without answers) and
// routed deliveries/s (received by the gateways). On a broker of --address
// the users and inboxes are named under the run's prefix and the gateways'
// leases are revoked at the end, taking the routes and inboxes with them.

#include "bench/bench_common.hpp"

#include <atomic>
#include <memory>
#include <random>
#include <semaphore>
#include <thread>
#include <vector>

namespace switchyard::bench {

using namespace std::chrono_literals;

int run_route(const settings& s, const target& t) {
  const int ngw = s.gateways;
  const long nusers = s.users;
  // Gateways share two I/O threads: the broker and the service need the rest.
  std::vector<std::shared_ptr<event_loop>> loops{std::make_shared<event_loop>(), std::make_shared<event_loop>()};
  std::vector<std::unique_ptr<client>> gateways;
  std::vector<lease_id> leases;
  std::atomic<std::uint64_t> delivered{0};
  std::atomic<std::uint64_t> last_delivery_ns{0};
  // On a broker of --address the gateways' leases go at the end, however
  // the run ends; `cleaned` holds the summary lines.
  std::string cleaned;
  bool cleanup_reported = false;
  const auto clean_up = [&] {
    if (!t.remote || !cleaned.empty()) return;
    std::vector<std::pair<client*, lease_id>> granted;
    for (std::size_t g = 0; g < leases.size(); ++g) granted.emplace_back(gateways[g].get(), leases[g]);
    cleaned = revoke_leases(granted, "within 10 minutes");
  };
  const scope_exit cleanup_on_failure([&] {
    clean_up();
    if (!cleanup_reported) std::fputs(cleaned.c_str(), s.json ? stderr : stdout);
  });
  for (int g = 0; g < ngw; ++g) {
    auto c = client::connect(options_for(t, fmt::format("bench-gw-{}", g)), loops[static_cast<std::size_t>(g) % 2]);
    if (!c) return fail_line(s, "gateway connect: " + c.error().message());
    auto lease = (*c)->lease_grant(std::chrono::minutes(10));
    if (!lease) return fail_line(s, "lease grant: " + lease.error().message());
    leases.push_back(lease->id);
    gateways.push_back(std::move(*c));
    const auto inbox = name_for(t, fmt::format("gw-{}", g));
    auto ec = gateways.back()->open_inbox(inbox, lease->id, [&](const inbox_message& m) {
      delivered.fetch_add(m.route_keys.size(), std::memory_order_relaxed);
      last_delivery_ns.store(now_ns(), std::memory_order_relaxed);
    });
    if (ec) return fail_line(s, "open inbox " + inbox + ": " + ec.message());
  }

  // Register the users, pipelined over the gateways' connections.
  {
    std::counting_semaphore<> window(4096);
    std::atomic<long> failed{0};
    for (long u = 0; u < nusers; ++u) {
      const auto g = static_cast<std::size_t>(u % ngw);
      window.acquire();
      gateways[g]->async_registry_put(fmt::format("{}user:{}", t.prefix, u), fmt::format("{}gw-{}", t.prefix, g), leases[g],
                                      [&](std::expected<std::uint64_t, std::error_code> r) {
                                        if (!r) ++failed;
                                        window.release();
                                      });
      if (u % 20000 == 0) progress("route: registering users {}/{}", u, nusers);
    }
    for (int i = 0; i < 4096; ++i) window.acquire();
    if (failed) return fail_line(s, fmt::format("{} registrations failed", failed.load()));
  }

  auto service = client::connect(options_for(t, "bench-service"));
  if (!service) return fail_line(s, "service connect: " + service.error().message());
  std::vector<std::byte> payload(static_cast<std::size_t>(s.size), std::byte{'x'});
  // The keys are made once, so the service spends its time sending (as the
  // fan-out publisher does), not formatting.
  std::vector<std::string> keys;
  keys.reserve(static_cast<std::size_t>(nusers));
  for (long u = 0; u < nusers; ++u) keys.push_back(fmt::format("{}user:{}", t.prefix, u));
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<std::size_t> pick(0, keys.size() - 1);
  std::atomic<std::uint64_t> routed{0}, unrouted{0}, errors{0}, answered{0};
  const auto count = static_cast<std::uint64_t>(s.count);
  const std::uint64_t deadline = now_ns() + static_cast<std::uint64_t>(s.timeout * 1e9);
  std::uint64_t t0 = now_ns();
  std::uint64_t sent = 0;
  const bool nowait = s.window == 0;
  const auto show = [&](std::uint64_t n) {
    progress("route: sent {}/{}, delivered {}", n, count, delivered.load());
  };
  if (nowait) {
    // Fire and forget: sends/s = as fast as the client queues.
    std::uint64_t next_progress = t0 + 1'000'000'000ull;
    for (; sent < count && now_ns() < deadline; ++sent) {
      put_u64(payload.data(), sent);
      if (auto ec = (*service)->send_nowait(keys[pick(rng)], payload)) {
        ++errors;
        break;
      }
      if ((sent & 0x3fff) == 0 && now_ns() >= next_progress) {
        show(sent);
        next_progress = now_ns() + 1'000'000'000ull;
      }
    }
    if ((*service)->flush()) ++errors;  // the broker has every send
  } else {
    // Answered sends, at most W unanswered, each answer sending the next
    // from the service's loop thread (see run_pipeline).
    const auto r = run_pipeline(
        **service, count, s.window, deadline,
        [&](std::uint64_t i, answer_fn done) {
          put_u64(payload.data(), i);
          (*service)->async_send(keys[pick(rng)], payload, [&, done](std::expected<std::string_view, std::error_code> res) {
            if (res) ++routed;
            else if (res.error() == errc::no_route) ++unrouted;
            else ++errors;
            ++answered;
            done(res || res.error() == errc::no_route);
          });
        },
        show);
    t0 = r.t0_ns;
    sent = r.issued;
    errors += r.issued - std::min(r.issued, r.answered);  // unanswered (the connection went away)
  }
  const std::uint64_t t_answered = now_ns();
  // Fire and forget has no answers: every send counts as done once queued,
  // and routed or not is not known (the broker drops a send without a route).
  const std::uint64_t done_sends = nowait ? sent : answered.load();
  const std::uint64_t expected = nowait ? sent : routed.load();
  // Deliveries trail the answers slightly: wait (bounded) for the last ones.
  for (int i = 0; i < 2000 && delivered.load() < expected; ++i) std::this_thread::sleep_for(1ms);
  progress_done();
  clean_up();
  cleanup_reported = true;

  const double send_secs = static_cast<double>(t_answered - t0) / 1e9;
  const std::uint64_t last = std::max(last_delivery_ns.load(), t0 + 1);
  const double deliver_secs = static_cast<double>(last - t0) / 1e9;
  json_line j;
  j.str("broker", "switchyard").str("workload", "route");
  j.integer("users", nusers).integer("gateways", ngw).integer("n", static_cast<long long>(sent)).integer("size", s.size);
  j.integer("window", s.window).str("mode", nowait ? "send_nowait (fire and forget)" : "send with answer");
  j.num("send_rate", static_cast<double>(done_sends) / send_secs);
  j.num("delivered_rate", static_cast<double>(delivered.load()) / deliver_secs);
  // Without answers, routed and no_route are not known: null.
  if (nowait) j.raw("routed", "null").raw("no_route", "null");
  else j.integer("routed", static_cast<long long>(routed.load())).integer("no_route", static_cast<long long>(unrouted.load()));
  j.integer("delivered", static_cast<long long>(delivered.load())).integer("errors", static_cast<long long>(errors.load()));
  const std::string sends_line =
      nowait ? fmt::format("  sends:     {:.0f}/s sent (fire and forget: no answers, so routed or not is unknown; "
                           "{} errors)\n",
                           static_cast<double>(done_sends) / send_secs, errors.load())
             : fmt::format("  sends:     {:.0f}/s answered ({} routed, {} no route, {} errors)\n",
                           static_cast<double>(done_sends) / send_secs, routed.load(), unrouted.load(), errors.load());
  const std::string summary =
      fmt::format("route: {} users on {} gateways, {} sends of {} B, window {} (0 = fire and forget)\n", nusers, ngw,
                  sent, s.size, s.window) +
      sends_line +
      fmt::format("  delivered: {:.0f}/s into inboxes ({} of {} {})\n",
                  static_cast<double>(delivered.load()) / deliver_secs, delivered.load(), expected,
                  nowait ? "sent" : "routed") +
      cleaned;
  emit(s, summary, j);
  for (auto& g : gateways) g->close();
  return errors.load() == 0 && unrouted.load() == 0 ? 0 : 1;
}

}  // namespace switchyard::bench
