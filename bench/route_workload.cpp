// switchyard-bench route: send-to-user throughput. U users registered across
// G gateways (each a connection with a lease and an inbox; user u on
// gateway u % G); one service sends to random users with at most W sends
// in flight, then one sentinel per inbox. Reports sends/s (answered; with
// W = 0 fire and forget, so sent, without answers) and routed deliveries/s
// (received by the gateways), and checks on every gateway that each
// message was for one of its users and arrived in order (route_check.hpp,
// the peers' checks). On a broker of --address the users and inboxes are
// named under the run's prefix and the gateways' leases are revoked at the
// end, taking the routes and inboxes with them.
//
// With --rate R the sends are paced at R per second (fire and forget), each
// stamped with its send time (payload bytes 16..23), and every gateway
// records send-to-inbox latency: what write coalescing costs in latency at
// a given load (docs/benchmarks.md).

#include "bench/bench_common.hpp"
#include "bench/cpu_usage.hpp"
#include "bench/gateway_fleet.hpp"
#include "bench/route_check.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <optional>
#include <semaphore>
#include <thread>
#include <vector>

namespace switchyard::bench {

using namespace std::chrono_literals;

int run_route(const settings& s, const target& t) {
  const int ngw = s.gateways;
  const long nusers = s.users;
  // The users' route keys, made once, so the service spends its time
  // sending (as the fan-out publisher does), not formatting.
  std::vector<std::string> keys;
  keys.reserve(static_cast<std::size_t>(nusers));
  for (long u = 0; u < nusers; ++u) keys.push_back(fmt::format("{}user:{}", t.prefix, u));
  // One checker per gateway; they outlive the gateways' connections
  // (declared before them).
  std::vector<std::unique_ptr<route_checker>> checkers;
  std::vector<const route_checker*> checked;
  // Across nodes (--sub-address) order holds per user, not per gateway.
  const bool per_user_order = !s.sub_address.empty();
  for (int g = 0; g < ngw; ++g) {
    checkers.push_back(std::make_unique<route_checker>(g, ngw, nusers, t.prefix, per_user_order));
    checked.push_back(checkers.back().get());
  }
  const auto delivered = [&] {
    std::uint64_t n = 0;
    for (const auto& c : checkers) n += c->received();
    return n;
  };
  const bool paced = s.route_rate > 0;  // main() refused --rate with a window or a payload under 24 B
  // Latency samples per gateway (ns), each written by its gateway's I/O
  // thread only and read once deliveries stopped; the checkers' end.
  std::vector<std::vector<std::int64_t>> latencies(static_cast<std::size_t>(ngw));
  if (paced)
    for (auto& l : latencies) l.reserve(static_cast<std::size_t>(s.count / ngw + s.count / ngw / 4 + 64));
  gateway_fleet fleet(s, t);
  if (auto e = fleet.start(ngw,
                           [&](int g, client&) -> inbox_handler {
                             return [check = checkers[static_cast<std::size_t>(g)].get(),
                                     lat = &latencies[static_cast<std::size_t>(g)], paced](const inbox_message& m) {
                               const std::uint64_t now = now_ns();
                               const bool counted = !check->ended();
                               check->on_delivery(m.payload, m.route_keys, now);
                               if (paced && counted && m.payload.size() >= timed_payload_min &&
                                   get_u64(m.payload.data()) != route_sentinel)
                                 lat->push_back(
                                     static_cast<std::int64_t>(now - get_u64(m.payload.data() + route_payload_min)));
                             };
                           });
      !e.empty())
    return fail_line(s, e);
  if (auto e = fleet.register_users(keys, "route"); !e.empty()) return fail_line(s, e);

  auto service = client::connect(options_for(t, "bench-service"));
  if (!service) return fail_line(s, "service connect: " + service.error().message());
  std::vector<std::byte> payload(static_cast<std::size_t>(s.size), std::byte{'x'});
  user_picker pick(static_cast<std::uint64_t>(nusers));
  std::atomic<std::uint64_t> routed{0}, unrouted{0}, errors{0}, answered{0};
  const auto count = static_cast<std::uint64_t>(s.count);
  const std::uint64_t deadline = now_ns() + static_cast<std::uint64_t>(s.timeout * 1e9);
  const cpu_meter cpu(t.server);
  std::uint64_t t0 = now_ns();
  std::uint64_t sent = 0;
  const bool nowait = s.window == 0;
  const auto show = [&](std::uint64_t n) { progress("route: sent {}/{}, delivered {}", n, count, delivered()); };
  std::optional<pacer> pace;
  if (paced) pace.emplace(t0, s.route_rate);
  if (nowait) {
    // Fire and forget: sends/s = as fast as the client queues, or paced.
    std::uint64_t next_progress = t0 + 1'000'000'000ull;
    // The users are drawn `ahead` sends early and their keys prefetched:
    // the key table (100,000 strings, megabytes) misses the cache on every
    // random user, and that miss was a third of the bench's CPU per send,
    // taken from the broker on a machine whose cores both run. The users
    // and their order stay the picker's.
    constexpr std::uint64_t ahead = 4;
    std::array<std::uint64_t, ahead> upcoming{};
    for (auto& u : upcoming) {
      u = pick.next();
      __builtin_prefetch(&keys[u]);
    }
    for (; sent < count && now_ns() < deadline; ++sent) {
      const std::uint64_t u = upcoming[sent % ahead];
      const std::uint64_t later = pick.next();
      upcoming[sent % ahead] = later;
      __builtin_prefetch(&keys[later]);
      __builtin_prefetch(keys[upcoming[(sent + 1) % ahead]].data());  // a long key's characters
      put_route_header(payload, sent, u);
      if (pace) put_u64(payload.data() + route_payload_min, pace->take(sent));
      if (auto ec = (*service)->send_nowait(keys[u], payload)) {
        ++errors;
        break;
      }
      if ((sent & 0x3fff) == 0 && now_ns() >= next_progress) {
        show(sent);
        next_progress = now_ns() + 1'000'000'000ull;
      }
    }
  } else {
    // Answered sends, at most W unanswered, each answer sending the next
    // from the service's loop thread (see run_pipeline).
    const auto r = run_pipeline(
        **service, count, s.window, deadline,
        [&](std::uint64_t i, answer_fn done) {
          const std::uint64_t u = pick.next();
          put_route_header(payload, i, u);
          (*service)->async_send(keys[u], payload, [&, done](std::expected<std::string_view, std::error_code> res) {
            if (res)
              ++routed;
            else if (res.error() == errc::no_route)
              ++unrouted;
            else
              ++errors;
            ++answered;
            done(res || res.error() == errc::no_route);
          });
        },
        show);
    t0 = r.t0_ns;
    sent = r.issued;
    errors += r.issued - std::min(r.issued, r.answered);  // unanswered (the connection went away)
  }
  // One sentinel per inbox, after every send on the same connection: to
  // user g, who lives on gateway g (a gateway with no user gets none).
  for (int g = 0; g < ngw && g < nusers && errors.load() == 0; ++g) {
    put_route_header(payload, route_sentinel, static_cast<std::uint64_t>(g));
    if ((*service)->send_nowait(keys[static_cast<std::size_t>(g)], payload)) ++errors;
  }
  if ((*service)->flush()) ++errors;  // the broker has every send
  const std::uint64_t t_answered = now_ns();
  // Fire and forget has no answers: every send counts as done once queued,
  // and routed or not is not known (the broker drops a send without a route).
  const std::uint64_t done_sends = nowait ? sent : answered.load();
  const std::uint64_t expected = nowait ? sent : routed.load();
  // Wait for every inbox's sentinel, or until no gateway has received
  // anything for --idle seconds (the clock starts with the first send), or
  // the deadline: the peers' end.
  const auto waiting = [&] {
    for (int g = 0; g < ngw && g < nusers; ++g)
      if (!checkers[static_cast<std::size_t>(g)]->ended()) return true;
    return false;
  };
  std::string unfinished = "sentinel";
  for (std::uint64_t next_progress = now_ns(); waiting();) {
    const std::uint64_t now = now_ns();
    std::uint64_t last = t0;
    for (const auto& c : checkers) last = std::max(last, c->last_ns());
    if (now > deadline)
      unfinished = "deadline";
    else if (now > last + static_cast<std::uint64_t>(s.idle * 1e9))
      unfinished = "idle";
    if (unfinished != "sentinel") break;
    if (now >= next_progress) {
      show(sent);
      next_progress = now + 1'000'000'000ull;
    }
    std::this_thread::sleep_for(1ms);
  }
  const cpu_cost cost = cpu.stop(delivered(), "delivered message");
  progress_done();
  const std::string& cleaned = fleet.finish();
  // The checkers are read once no delivery runs any more.
  fleet.close();
  const auto tally = route_tally::of(checked, static_cast<std::uint64_t>(nusers), unfinished);

  const double send_secs = static_cast<double>(t_answered - t0) / 1e9;
  std::uint64_t last = t0 + 1;
  for (const auto& c : checkers) last = std::max(last, c->last_ns());
  const double deliver_secs = static_cast<double>(last - t0) / 1e9;
  json_line j;
  j.str("broker", "switchyard").str("workload", "route");
  j.integer("users", nusers)
      .integer("gateways", ngw)
      .integer("n", static_cast<long long>(sent))
      .integer("size", s.size);
  j.integer("window", s.window).str("mode", nowait ? "send_nowait (fire and forget)" : "send with answer");
  j.num("send_rate", static_cast<double>(done_sends) / send_secs);
  j.num("delivered_rate", static_cast<double>(tally.received) / deliver_secs);
  // Without answers, routed and no_route are not known: null.
  if (nowait)
    j.raw("routed", "null").raw("no_route", "null");
  else
    j.integer("routed", static_cast<long long>(routed.load()))
        .integer("no_route", static_cast<long long>(unrouted.load()));
  j.integer("delivered", static_cast<long long>(tally.received));
  j.integer("errors", static_cast<long long>(errors.load()));
  // The peers' route fields: per-gateway counts and the checks.
  j.integer("recv_total", static_cast<long long>(tally.received));
  j.integer("recv_min", static_cast<long long>(tally.min)).integer("recv_max", static_cast<long long>(tally.max));
  j.num("loss", sent > 0 ? 1.0 - static_cast<double>(tally.received) / static_cast<double>(sent) : NAN);
  j.integer("misrouted", static_cast<long long>(tally.misrouted));
  j.integer("reorder", static_cast<long long>(tally.reorder)).str("order", per_user_order ? "user" : "gateway");
  j.raw("gw_end", tally.ends_json()).raw("cpu", cost.json());
  std::string latency_line;
  if (paced) {
    std::vector<std::int64_t> lat;
    for (const auto& l : latencies) lat.insert(lat.end(), l.begin(), l.end());
    std::sort(lat.begin(), lat.end());
    const double late_us = static_cast<double>(pace->late_max()) / 1000.0;
    j.num("rate", s.route_rate).integer("samples", static_cast<long long>(lat.size()));
    j.num("p50_us", pct_us(lat, 50)).num("p99_us", pct_us(lat, 99)).num("p999_us", pct_us(lat, 99.9));
    j.num("max_us", lat.empty() ? NAN : static_cast<double>(lat.back()) / 1000.0).num("send_late_max_us", late_us);
    latency_line = fmt::format(
        "  latency:   send to inbox p50 {:.1f} us, p99 {:.1f} us, p99.9 {:.1f} us at {:.0f} sends/s offered ({} "
        "samples; the pacer ran at most {:.0f} us late)\n",
        pct_us(lat, 50), pct_us(lat, 99), pct_us(lat, 99.9), s.route_rate, lat.size(), late_us);
  }
  const std::string sends_line =
      nowait ? fmt::format(
                   "  sends:     {:.0f}/s sent (fire and forget: no answers, so routed or not is unknown; "
                   "{} errors)\n",
                   static_cast<double>(done_sends) / send_secs, errors.load())
             : fmt::format("  sends:     {:.0f}/s answered ({} routed, {} no route, {} errors)\n",
                           static_cast<double>(done_sends) / send_secs, routed.load(), unrouted.load(), errors.load());
  const std::string summary =
      fmt::format("route: {} users on {} gateways, {} sends of {} B, window {} (0 = fire and forget)\n", nusers, ngw,
                  sent, s.size, s.window) +
      sends_line +
      fmt::format("  delivered: {:.0f}/s into inboxes ({} of {} {})\n",
                  static_cast<double>(tally.received) / deliver_secs, tally.received, expected,
                  nowait ? "sent" : "routed") +
      fmt::format("  checked:   {} misrouted, {} reordered (order per {}); {} to {} per gateway; gateway ends {}{}\n",
                  tally.misrouted, tally.reorder, per_user_order ? "user" : "gateway", tally.min, tally.max,
                  tally.ends_json(),
                  tally.passed() ? "" : " (FAILED: a message went to the wrong gateway or out of order)") +
      latency_line + cost.summary() + cleaned;
  emit(s, summary, j);
  return errors.load() == 0 && unrouted.load() == 0 && tally.passed() && unfinished != "deadline" ? 0 : 1;
}

}  // namespace switchyard::bench
