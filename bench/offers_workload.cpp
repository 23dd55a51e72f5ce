// switchyard-bench offers: what an offer with a delivery receipt costs next
// to a plain send-to-user, in one run against one broker. The set-up is
// the route workload's: U users registered across G gateways (each a
// connection with a lease and an inbox; user u on gateway u % G). Three
// measurements, in this order:
//
//  (c) memory per pending offer: the broker's RSS (/proc/PID/status
//      VmRSS, for a broker the bench started) and its `offer_bytes` gauge
//      (the Stats request) before and after --pending offers that nobody
//      acks (expiry and receipt timeout 10 minutes, user i % U for offer
//      i), divided by their number; then they are withdrawn (each must
//      still be pending: nothing evicted or pushed out). First, so the
//      broker's heap has not grown and shrunk before it.
//  (a) throughput: --rounds rounds, each --count plain sends (async_send,
//      at most --window unanswered) then --count offers (async_send_offer:
//      an offer id, expiry 2 s, receipt timeout 1 s, same window); every
//      gateway acks each offer as it arrives (client::ack on its loop
//      thread) and the sender counts the receipts. Plain rate = deliveries
//      / (first send to last delivery); offer rate = offers with their
//      receipt / (first send to last receipt); ratio = offer rate / plain
//      rate, per round; the summary gives medians.
//  (b) receipt latency: offers at --rate for --seconds from one sender
//      writing each at once (write_immediately), the gateways acking at
//      once: time from the send call to the receipt's arrival at the
//      sender (the receipt's first outcome; a timeout counts as its 1 s),
//      percentiles; also the broker's own send-to-ack time (receipt
//      elapsed).
//
// The broker the bench starts gets --max-offers 1000000 and
// --max-offer-bytes 1 GiB so that no offer is evicted during (a); the
// JSON's `evicted` says whether any was (null without Stats).

#include "bench/bench_common.hpp"
#include "bench/cpu_usage.hpp"
#include "bench/gateway_fleet.hpp"
#include "bench/route_check.hpp"
#include "bench/server_process.hpp"
#include "common/mutex.hpp"

#include <atomic>
#include <memory>
#include <mutex>
#include <random>
#include <semaphore>
#include <thread>
#include <vector>

namespace switchyard::bench {

using namespace std::chrono_literals;

namespace {

constexpr auto throughput_expiry = 2s;
constexpr auto throughput_receipt_timeout = 1s;
constexpr auto latency_expiry = 2s;
constexpr auto latency_receipt_timeout = 1s;
constexpr auto pending_expiry = 10min;

// What the gateways do with an offer: count it only, or ack it at once.
enum class gw_mode : int { count, ack };

// One gateway's tallies, written by its loop thread.
struct gw_tally {
  std::atomic<std::uint64_t> received{0}, offers{0}, misrouted{0}, last_ns{0};
};

// The sender's receipts for one phase: offers [base, base + n). Written by
// the sender's loop thread, set up and read by the main thread between
// phases (under `mu`).
class receipt_sink {
 public:
  void reset(std::uint64_t base, std::uint64_t n, bool latency) {
    switchyard::lock_guard lock(mu_);
    base_ = base;
    seen_.assign(n, 0);
    latency_ = latency;
    sent_ns_.assign(latency ? n : 0, 0);
    lat_.clear();
    broker_lat_.clear();
    if (latency) {
      lat_.reserve(n);
      broker_lat_.reserve(n);
    }
    first = acked = timeouts = again = stray = last_ns = 0;
  }
  // The latency phase: offer i was sent at `t` (before its send call).
  void sent(std::uint64_t i, std::uint64_t t) {
    switchyard::lock_guard lock(mu_);
    sent_ns_[i] = t;
  }
  void on_receipt(const receipt& r) {
    const std::uint64_t t = now_ns();
    switchyard::lock_guard lock(mu_);
    if (r.offer_id < base_ || r.offer_id - base_ >= seen_.size()) {
      ++stray;
      return;
    }
    const std::uint64_t i = r.offer_id - base_;
    if (seen_[i]) {
      ++again;  // an ack after its timeout receipt
      return;
    }
    seen_[i] = 1;
    if (r.outcome == receipt_outcome::acked)
      ++acked;
    else
      ++timeouts;
    if (latency_) {
      lat_.push_back(static_cast<std::int64_t>(t - sent_ns_[i]));
      broker_lat_.push_back(static_cast<std::int64_t>(r.elapsed.count()) * 1000);
    }
    last_ns.store(t, std::memory_order_relaxed);
    first.fetch_add(1, std::memory_order_release);
  }
  // Sorted copies of the latencies (ns).
  std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> latencies() {
    switchyard::lock_guard lock(mu_);
    auto a = lat_, b = broker_lat_;
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    return {std::move(a), std::move(b)};
  }
  // Offers with a first receipt, acked, timed out, later acks, receipts for
  // other offers, time of the last first receipt.
  std::atomic<std::uint64_t> first{0}, acked{0}, timeouts{0}, again{0}, stray{0}, last_ns{0};

 private:
  switchyard::mutex mu_;
  std::uint64_t base_ SWITCHYARD_GUARDED_BY(mu_) = 0;
  std::vector<std::uint8_t> seen_ SWITCHYARD_GUARDED_BY(mu_);
  bool latency_ SWITCHYARD_GUARDED_BY(mu_) = false;
  std::vector<std::uint64_t> sent_ns_ SWITCHYARD_GUARDED_BY(mu_);
  std::vector<std::int64_t> lat_ SWITCHYARD_GUARDED_BY(mu_), broker_lat_ SWITCHYARD_GUARDED_BY(mu_);
};

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string json_array(const std::vector<double>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += fmt::format("{}{:.0f}", i ? "," : "", v[i]);
  return out + "]";
}
std::string json_ratios(const std::vector<double>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += fmt::format("{}{:.3f}", i ? "," : "", v[i]);
  return out + "]";
}

// Waits until done() or nothing moved (progress() unchanged) for `idle`,
// or `deadline`; bounded. Returns whether done() held.
bool wait_for(const std::function<bool()>& done, const std::function<std::uint64_t()>& moved,
              std::chrono::nanoseconds idle, std::uint64_t deadline_ns, const std::function<void()>& show = nullptr) {
  std::uint64_t last = moved(), since = now_ns(), next_show = now_ns();
  while (!done()) {
    const std::uint64_t t = now_ns();
    if (t > deadline_ns) return false;
    const std::uint64_t m = moved();
    if (m != last)
      last = m, since = t;
    else if (t - since > static_cast<std::uint64_t>(idle.count()))
      return false;
    if (show && t >= next_show) {
      show();
      next_show = t + 200'000'000ull;
    }
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

}  // namespace

int run_offers(const settings& s, const target& t) {
  const int ngw = s.gateways;
  const long nusers = s.users;
  std::vector<std::string> keys;
  keys.reserve(static_cast<std::size_t>(nusers));
  for (long u = 0; u < nusers; ++u) keys.push_back(fmt::format("{}user:{}", t.prefix, u));
  const std::uint64_t deadline = now_ns() + static_cast<std::uint64_t>(s.timeout * 1e9);
  const int server_pid = t.server ? t.server->pid() : -1;

  // Gateways on two I/O threads, as in the route workload.
  std::atomic<int> mode{static_cast<int>(gw_mode::count)};
  std::vector<std::unique_ptr<gw_tally>> tallies;
  for (int g = 0; g < ngw; ++g) tallies.push_back(std::make_unique<gw_tally>());
  const auto delivered = [&] {
    std::uint64_t n = 0;
    for (const auto& x : tallies) n += x->received.load(std::memory_order_relaxed);
    return n;
  };
  const auto last_delivery = [&] {
    std::uint64_t n = 0;
    for (const auto& x : tallies) n = std::max(n, x->last_ns.load(std::memory_order_relaxed));
    return n;
  };
  std::atomic<std::uint64_t> gw_withdrawn{0};
  gateway_fleet fleet(s, t);
  if (auto e = fleet.start(
          ngw,
          [&](int g, client& conn) -> inbox_handler {
            return [conn = &conn, tally = tallies[static_cast<std::size_t>(g)].get(), g, ngw,
                    &mode](const inbox_message& m) {
              // Bytes 8..15: the user the message was sent to (route_check.hpp's layout).
              if (m.payload.size() < route_payload_min ||
                  get_u64(m.payload.data() + 8) % static_cast<std::uint64_t>(ngw) != static_cast<std::uint64_t>(g))
                tally->misrouted.fetch_add(1, std::memory_order_relaxed);
              if (m.offer_id != 0) {
                tally->offers.fetch_add(1, std::memory_order_relaxed);
                if (mode.load(std::memory_order_relaxed) == static_cast<int>(gw_mode::ack)) (void)conn->ack(m);
              }
              tally->last_ns.store(now_ns(), std::memory_order_relaxed);
              tally->received.fetch_add(1, std::memory_order_release);
            };
          },
          [&gw_withdrawn](client_options& o) {
            o.on_withdrawn = [&gw_withdrawn](const withdrawn_notice&) {
              gw_withdrawn.fetch_add(1, std::memory_order_relaxed);
            };
          });
      !e.empty())
    return fail_line(s, e);
  if (auto e = fleet.register_users(keys, "offers"); !e.empty()) return fail_line(s, e);

  receipt_sink sink;
  auto so = options_for(t, "bench-dispatcher");
  so.on_receipt = [&sink](const receipt& r) { sink.on_receipt(r); };
  auto sender = client::connect(so);
  if (!sender) return fail_line(s, "sender connect: " + sender.error().message());
  // Offer ids are unique among the broker's live offers: a random base.
  std::random_device entropy;
  std::uint64_t next_id = (static_cast<std::uint64_t>(entropy()) << 32) | 1;
  std::vector<std::byte> payload(static_cast<std::size_t>(s.size), std::byte{'x'});
  std::atomic<std::uint64_t> errors{0};
  std::string first_error;
  std::mutex error_mu;
  const auto note_error = [&](std::string what) {
    ++errors;
    std::lock_guard lock(error_mu);
    if (first_error.empty()) first_error = std::move(what);
  };
  // One offer from the dispatcher (its loop thread answers): counted in
  // `routed` when its one key was routed, else an error `unrouted`; then
  // the pipeline's slot goes back.
  const auto send_one = [&](std::span<const std::string_view> k, const offer_options& o,
                            std::atomic<std::uint64_t>& routed, const char* unrouted, answer_fn done) {
    (*sender)->async_send_offer(
        k, payload, o, [&routed, &note_error, unrouted, done](std::expected<offer_result, std::error_code> res) {
          if (res && res->routed == 1)
            ++routed;
          else
            note_error(res ? std::string(unrouted) : "send_offer: " + res.error().message());
          done(res.has_value());
        });
  };

  const bool have_stats = broker_stats(t).has_value();

  // ---- (c) memory per pending offer.
  const auto pending_n = static_cast<std::uint64_t>(s.pending);
  struct memory_result {
    std::optional<std::uint64_t> bytes0, bytes1, offers1, pending1, exposure0, exposure1, pushed_out0, pushed_out1;
    std::uint64_t rss0 = 0, rss1 = 0, rss2 = 0;
    std::uint64_t routed = 0, withdrawn_pending = 0, withdraw_failed = 0;
    bool delivered_all = false;
  } mem;
  if (pending_n > 0) {
    const auto st0 = broker_stats(t);
    if (st0) {
      mem.bytes0 = value_of(*st0, "offer_bytes");
      mem.exposure0 = value_of(*st0, "exposure_keys");
      mem.pushed_out0 = value_of(*st0, "offers_pending_pushed_out_total");
    }
    mem.rss0 = rss_bytes(server_pid);
    mode = static_cast<int>(gw_mode::count);  // nobody acks
    const std::uint64_t base = next_id;
    next_id += pending_n;
    sink.reset(base, 0, false);
    const std::uint64_t recv0 = delivered();
    std::atomic<std::uint64_t> routed{0};
    const auto r = run_pipeline(
        **sender, pending_n, std::max(1, s.window), deadline,
        [&](std::uint64_t i, answer_fn done) {
          const std::uint64_t u = i % static_cast<std::uint64_t>(nusers);  // each user the same number
          put_route_header(payload, i, u);
          const std::string_view k[] = {keys[u]};
          send_one(k, {.offer_id = base + i, .expires_in = pending_expiry, .receipt_timeout = pending_expiry}, routed,
                   "pending offer not routed", std::move(done));
        },
        [&](std::uint64_t n) { progress("offers: memory: {}/{} pending offers sent", n, pending_n); });
    mem.routed = routed.load();
    mem.delivered_all = wait_for([&] { return delivered() - recv0 >= mem.routed; }, delivered, 5s, deadline);
    if (r.issued != pending_n) note_error("pending offers: not all sent");
    const auto st1 = broker_stats(t);
    if (st1) {
      mem.bytes1 = value_of(*st1, "offer_bytes");
      mem.offers1 = value_of(*st1, "offers");
      mem.pending1 = value_of(*st1, "offers_pending");
      mem.exposure1 = value_of(*st1, "exposure_keys");
      mem.pushed_out1 = value_of(*st1, "offers_pending_pushed_out_total");
    }
    mem.rss1 = rss_bytes(server_pid);
    // Take them back: each must still be pending for its user.
    for (std::uint64_t i = 0; i < pending_n; ++i) {
      const auto w = (*sender)->withdraw(base + i);
      if (w)
        mem.withdrawn_pending += w->pending;
      else
        ++mem.withdraw_failed;
      if ((i & 0x3ff) == 0) progress("offers: memory: withdrawing {}/{}", i, pending_n);
    }
    if (mem.withdraw_failed) note_error(fmt::format("{} withdrawals failed", mem.withdraw_failed));
    mem.rss2 = rss_bytes(server_pid);
  }

  // ---- (a) throughput: plain sends against offers with receipts.
  const auto count = static_cast<std::uint64_t>(s.offer_count);
  std::vector<double> plain_rates, offer_rates, ratios;
  std::uint64_t plain_delivered = 0, plain_sent = 0, offers_sent = 0, offers_routed = 0, receipts = 0,
                receipts_acked = 0, receipt_timeouts = 0, acks_late = 0, plain_missing = 0, receipts_missing = 0;
  cpu_cost cpu_plain, cpu_offers;
  cpu_plain.bench_s = cpu_plain.broker_s = cpu_offers.bench_s = cpu_offers.broker_s = 0;
  const auto add_cost = [](cpu_cost& sum, const cpu_cost& c) {
    sum.bench_s += c.bench_s;
    sum.broker_s += c.broker_s;
    sum.count += c.count;
    sum.unit = c.unit;
    sum.broker_note = c.broker_note;
  };
  const auto evicted_before = [&]() -> std::optional<std::uint64_t> {
    const auto st = broker_stats(t);
    return st ? value_of(*st, "offers_evicted_total") : std::nullopt;
  }();
  user_picker pick(static_cast<std::uint64_t>(nusers));
  for (int round = 0; round < s.rounds && errors.load() == 0; ++round) {
    // Plain sends.
    {
      mode = static_cast<int>(gw_mode::count);
      const std::uint64_t recv0 = delivered();
      std::atomic<std::uint64_t> routed{0};
      const cpu_meter cpu(t.server);
      const auto r = run_pipeline(
          **sender, count, s.window, deadline,
          [&](std::uint64_t i, answer_fn done) {
            const std::uint64_t u = pick.next();
            put_route_header(payload, i, u);
            (*sender)->async_send(keys[u], payload, [&, done](std::expected<std::string_view, std::error_code> res) {
              if (res)
                ++routed;
              else
                note_error("send: " + res.error().message());
              done(res.has_value());
            });
          },
          [&](std::uint64_t n) { progress("offers: round {}/{}: plain sends {}/{}", round + 1, s.rounds, n, count); });
      const bool all = wait_for([&] { return delivered() - recv0 >= routed.load(); }, delivered, 2s, deadline);
      const std::uint64_t got = delivered() - recv0;
      add_cost(cpu_plain, cpu.stop(got, "delivered message"));
      plain_sent += r.issued;
      plain_delivered += got;
      if (!all) plain_missing += routed.load() - std::min(routed.load(), got);
      const double secs = static_cast<double>(last_delivery() - r.t0_ns) / 1e9;
      plain_rates.push_back(static_cast<double>(got) / secs);
    }
    // Offers with receipts.
    {
      mode = static_cast<int>(gw_mode::ack);
      const std::uint64_t base = next_id;
      next_id += count;
      sink.reset(base, count, false);
      std::atomic<std::uint64_t> routed{0};
      const cpu_meter cpu(t.server);
      const auto r = run_pipeline(
          **sender, count, s.window, deadline,
          [&](std::uint64_t i, answer_fn done) {
            const std::uint64_t u = pick.next();
            put_route_header(payload, i, u);
            const std::string_view k[] = {keys[u]};
            send_one(
                k,
                {.offer_id = base + i, .expires_in = throughput_expiry, .receipt_timeout = throughput_receipt_timeout},
                routed, "offer not routed", std::move(done));
          },
          [&](std::uint64_t n) {
            progress("offers: round {}/{}: offers {}/{}, receipts {}", round + 1, s.rounds, n, count,
                     sink.first.load());
          });
      const bool all = wait_for([&] { return sink.first.load() >= routed.load(); }, [&] { return sink.first.load(); },
                                throughput_receipt_timeout + 2s, deadline);
      const std::uint64_t got = sink.first.load(std::memory_order_acquire);
      add_cost(cpu_offers, cpu.stop(got, "offer with its receipt"));
      offers_sent += r.issued;
      offers_routed += routed.load();
      receipts += got;
      receipts_acked += sink.acked.load();
      receipt_timeouts += sink.timeouts.load();
      acks_late += sink.again.load();
      if (!all) receipts_missing += routed.load() - std::min(routed.load(), got);
      const double secs = static_cast<double>(sink.last_ns.load() - r.t0_ns) / 1e9;
      offer_rates.push_back(static_cast<double>(got) / secs);
      ratios.push_back(offer_rates.back() / plain_rates.back());
    }
  }
  const auto evicted = [&]() -> std::optional<std::uint64_t> {
    const auto st = broker_stats(t);
    const auto after = st ? value_of(*st, "offers_evicted_total") : std::nullopt;
    if (!after || !evicted_before) return std::nullopt;
    return *after - *evicted_before;
  }();
  // Let the throughput offers expire (2 s) before measuring latency, so
  // their sweep does not run during it.
  if (have_stats) {
    wait_for(
        [&] {
          const auto st = broker_stats(t);
          return !st || value_of(*st, "offers").value_or(0) == 0;
        },
        [] { return std::uint64_t{0}; }, throughput_expiry + 3s, deadline,
        [] { progress("offers: waiting for the throughput offers to expire"); });
  }

  // ---- (b) receipt latency at a fixed rate.
  const auto lat_n = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::llround(s.rate * s.seconds)));
  std::uint64_t lat_sent = 0, late_max = 0;  // late_max: the pacer's, once the phase ends
  double lat_achieved = NAN;
  std::atomic<std::uint64_t> lat_answered{0};
  cpu_cost cpu_latency;
  {
    mode = static_cast<int>(gw_mode::ack);
    auto lo = options_for(t, "bench-dispatcher-latency");
    lo.write_immediately = true;
    lo.on_receipt = [&sink](const receipt& r) { sink.on_receipt(r); };
    auto lsender = client::connect(lo);
    if (!lsender) return fail_line(s, "latency sender connect: " + lsender.error().message());
    const std::uint64_t base = next_id;
    next_id += lat_n;
    sink.reset(base, lat_n, true);
    const cpu_meter cpu(t.server);
    const std::uint64_t start = now_ns();
    pacer pace(start, s.rate);
    std::uint64_t next_progress = start + 1'000'000'000ull;
    for (std::uint64_t i = 0; i < lat_n && errors.load() == 0; ++i) {
      const std::uint64_t now = pace.take(i);
      const std::uint64_t u = pick.next();
      put_route_header(payload, i, u);
      const std::string_view k[] = {keys[u]};
      sink.sent(i, now);
      (*lsender)->async_send_offer(
          k, payload, {.offer_id = base + i, .expires_in = latency_expiry, .receipt_timeout = latency_receipt_timeout},
          [&](std::expected<offer_result, std::error_code> res) {
            if (!res || res->routed != 1) note_error(res ? "offer not routed" : "send_offer: " + res.error().message());
            lat_answered.fetch_add(1, std::memory_order_relaxed);
          });
      lat_sent = i + 1;
      if (now > deadline) {
        note_error("latency: hit the deadline");
        break;
      }
      if (now >= next_progress) {
        progress("offers: latency: sent {}/{}, receipts {}", lat_sent, lat_n, sink.first.load());
        next_progress = now + 1'000'000'000ull;
      }
    }
    lat_achieved = static_cast<double>(lat_sent) / (static_cast<double>(now_ns() - start) / 1e9);
    late_max = pace.late_max();
    wait_for([&] { return sink.first.load() >= lat_sent && lat_answered.load() >= lat_sent; },
             [&] { return sink.first.load() + lat_answered.load(); }, latency_receipt_timeout + 2s, deadline);
    cpu_latency = cpu.stop(sink.first.load(), "offer with its receipt");
    (*lsender)->close();
  }
  const auto [lat, broker_lat] = sink.latencies();
  const std::uint64_t lat_receipts = sink.first.load(), lat_acked = sink.acked.load(),
                      lat_timeouts = sink.timeouts.load();
  if (lat_receipts < lat_sent) receipts_missing += lat_sent - lat_receipts;

  progress_done();
  const std::string& cleaned = fleet.finish();
  (*sender)->close();
  fleet.close();
  std::uint64_t misrouted = 0;
  for (const auto& x : tallies) misrouted += x->misrouted.load();

  // ---- The report.
  const double plain_rate = median(plain_rates), offer_rate = median(offer_rates), ratio = median(ratios);
  const auto per_offer = [&](std::optional<std::uint64_t> a, std::optional<std::uint64_t> b) {
    return a && b && pending_n ? (static_cast<double>(*b) - static_cast<double>(*a)) / static_cast<double>(pending_n)
                               : NAN;
  };
  const double bytes_per_offer = per_offer(mem.bytes0, mem.bytes1);
  const bool rss_known = server_pid > 0 && mem.rss0 > 0;
  const double rss_per_offer =
      rss_known && pending_n
          ? (static_cast<double>(mem.rss1) - static_cast<double>(mem.rss0)) / static_cast<double>(pending_n)
          : NAN;
  const auto opt = [](std::optional<std::uint64_t> v) { return v ? std::to_string(*v) : std::string("null"); };
  const auto diff = [](std::optional<std::uint64_t> a, std::optional<std::uint64_t> b) -> std::optional<std::uint64_t> {
    if (!a || !b) return std::nullopt;
    return *b - std::min(*a, *b);
  };

  json_line j;
  j.str("broker", "switchyard").str("workload", "offers");
  j.integer("users", nusers)
      .integer("gateways", ngw)
      .integer("n", static_cast<long long>(count))
      .integer("size", s.size);
  j.integer("window", s.window).integer("rounds", s.rounds);
  j.num("plain_rate", plain_rate).num("offer_rate", offer_rate).num("ratio", ratio);
  j.raw("plain_rates", json_array(plain_rates))
      .raw("offer_rates", json_array(offer_rates))
      .raw("ratios", json_ratios(ratios));
  j.integer("plain_sent", static_cast<long long>(plain_sent))
      .integer("plain_delivered", static_cast<long long>(plain_delivered));
  j.integer("plain_missing", static_cast<long long>(plain_missing));
  j.integer("offers_sent", static_cast<long long>(offers_sent))
      .integer("offers_routed", static_cast<long long>(offers_routed));
  j.integer("receipts", static_cast<long long>(receipts))
      .integer("receipts_acked", static_cast<long long>(receipts_acked));
  j.integer("receipt_timeouts", static_cast<long long>(receipt_timeouts))
      .integer("acks_after_timeout", static_cast<long long>(acks_late));
  j.integer("receipts_missing", static_cast<long long>(receipts_missing));
  j.raw("evicted", opt(evicted));
  {
    json_line l;
    l.num("rate", s.rate).num("secs", s.seconds).integer("sent", static_cast<long long>(lat_sent));
    l.num("achieved_rate", lat_achieved).integer("receipts", static_cast<long long>(lat_receipts));
    l.integer("acked", static_cast<long long>(lat_acked)).integer("timeouts", static_cast<long long>(lat_timeouts));
    l.num("pub_late_max_us", static_cast<double>(late_max) / 1000.0);
    l.num("p50_us", pct_us(lat, 50)).num("p90_us", pct_us(lat, 90)).num("p99_us", pct_us(lat, 99));
    l.num("p999_us", pct_us(lat, 99.9)).num("max_us", lat.empty() ? NAN : static_cast<double>(lat.back()) / 1000.0);
    l.num("broker_p50_us", pct_us(broker_lat, 50)).num("broker_p99_us", pct_us(broker_lat, 99));
    l.num("broker_p999_us", pct_us(broker_lat, 99.9));
    j.raw("latency", l.done());
  }
  {
    json_line m;
    m.integer("pending", static_cast<long long>(pending_n)).integer("routed", static_cast<long long>(mem.routed));
    m.num("offer_bytes_per_offer", bytes_per_offer).num("rss_per_offer", rss_per_offer);
    m.raw("offer_bytes_before", opt(mem.bytes0)).raw("offer_bytes_after", opt(mem.bytes1));
    if (rss_known) {
      m.integer("rss_before", static_cast<long long>(mem.rss0)).integer("rss_after", static_cast<long long>(mem.rss1));
      m.integer("rss_after_withdraw", static_cast<long long>(mem.rss2));
    } else {
      m.raw("rss_before", "null").raw("rss_after", "null").raw("rss_after_withdraw", "null");
      m.str("rss_note", "not measured for a broker of --address");
    }
    m.raw("offers_live", opt(mem.offers1)).raw("offers_pending", opt(mem.pending1));
    m.raw("exposure_keys_added", opt(diff(mem.exposure0, mem.exposure1)));
    m.raw("pending_pushed_out", opt(diff(mem.pushed_out0, mem.pushed_out1)));
    m.integer("withdrawn_pending", static_cast<long long>(mem.withdrawn_pending));
    if (!have_stats)
      m.str("stats_note", "the broker's figures need the admin capability, not granted to these credentials");
    j.raw("memory", m.done());
  }
  j.integer("misrouted", static_cast<long long>(misrouted)).integer("errors", static_cast<long long>(errors.load()));
  j.raw("cpu", cpu_offers.json()).raw("cpu_plain", cpu_plain.json()).raw("cpu_latency", cpu_latency.json());
  if (!first_error.empty()) j.str("error_first", first_error);

  std::string rates_text;
  for (std::size_t i = 0; i < ratios.size(); ++i)
    rates_text += fmt::format("{}{:.0f}/{:.0f} = {:.2f}x", i ? ", " : "", offer_rates[i], plain_rates[i], ratios[i]);
  std::string summary =
      fmt::format("offers: {} users on {} gateways, {} B payloads, window {}\n", nusers, ngw, s.size, s.window) +
      fmt::format("  throughput ({} round{} of {} plain sends then {} offers):\n", s.rounds, s.rounds == 1 ? "" : "s",
                  count, count) +
      fmt::format("    plain send:  {:.0f} delivered/s (median)\n", plain_rate) +
      fmt::format(
          "    offers:      {:.0f} offers with their receipt/s (median; each acked by its gateway at once; "
          "expiry 2 s, receipt timeout 1 s)\n",
          offer_rate) +
      fmt::format("    ratio:       {:.2f}x offers / plain (median; per round offers/plain: {}){}\n", ratio, rates_text,
                  ratio >= 0.4 ? "" : " -- below the 0.4x target") +
      fmt::format(
          "    receipts:    {} of {} offers ({} acked, {} timeouts, {} acks after their timeout, {} missing); "
          "evicted {}\n",
          receipts, offers_routed, receipts_acked, receipt_timeouts, acks_late, receipts_missing, opt(evicted)) +
      fmt::format(
          "  receipt latency at {} offers/s for {} s (send call -> receipt at the sender; {} sent, {} acked, "
          "{} timeouts):\n",
          s.rate, s.seconds, lat_sent, lat_acked, lat_timeouts) +
      fmt::format("    p50 {:.1f} us  p90 {:.1f} us  p99 {:.1f} us  p99.9 {:.1f} us  max {:.1f} us{}\n",
                  pct_us(lat, 50), pct_us(lat, 90), pct_us(lat, 99), pct_us(lat, 99.9),
                  lat.empty() ? NAN : static_cast<double>(lat.back()) / 1000.0,
                  pct_us(lat, 99) < 1000 ? "" : " -- p99 above the 1 ms target") +
      fmt::format("    the broker's send -> ack: p50 {:.1f} us  p99 {:.1f} us; sender late by at most {:.1f} us\n",
                  pct_us(broker_lat, 50), pct_us(broker_lat, 99), static_cast<double>(late_max) / 1000.0) +
      (pending_n == 0
           ? std::string("  memory per pending offer: not measured (--pending 0)\n")
           : fmt::format(
                 "  memory per pending offer ({} offers nobody acked, {} B payload): {} accounted (offer_bytes), "
                 "RSS {}\n",
                 pending_n, s.size,
                 std::isfinite(bytes_per_offer) ? fmt::format("{:.0f} B", bytes_per_offer)
                                                : std::string("not known (no Stats)"),
                 rss_known ? fmt::format("{:.0f} B", rss_per_offer)
                           : std::string("not measured for a broker of --address"))) +
      (rss_known && pending_n
           ? fmt::format("    RSS {:.1f} -> {:.1f} MiB, {:.1f} MiB after withdrawing them; {} exposure keys added; "
                         "{} pending entries withdrawn\n",
                         static_cast<double>(mem.rss0) / 1048576.0, static_cast<double>(mem.rss1) / 1048576.0,
                         static_cast<double>(mem.rss2) / 1048576.0, opt(diff(mem.exposure0, mem.exposure1)),
                         mem.withdrawn_pending)
           : std::string()) +
      (misrouted || errors ? fmt::format("  FAILED: {} misrouted, {} errors{}\n", misrouted, errors.load(),
                                         first_error.empty() ? "" : " (first: " + first_error + ")")
                           : std::string()) +
      cpu_offers.summary() + cpu_plain.summary() + "  latency " + cpu_latency.summary().substr(2) + cleaned;
  emit(s, summary, j);
  const bool pending_ok = pending_n == 0 || (mem.delivered_all && mem.withdrawn_pending == mem.routed);
  return errors.load() == 0 && misrouted == 0 && receipts_missing == 0 && plain_missing == 0 && pending_ok ? 0 : 1;
}

}  // namespace switchyard::bench
