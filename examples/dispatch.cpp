// A ride dispatcher on the broker's offers (docs/offers.md): expiries,
// delivery receipts, fallback on a receipt timeout, withdrawal at half the
// window, and exposure caps, all done by a running broker, not simulated
// here. It compares two dispatch policies for fairness, as the seed
// simulation in docs/offers.md's design notes does.
//
//   switchyard-example-dispatch [--requests N] [--rate R] [--never-ack PERCENT]
//                               [--cap K] [--json] [--verbose] [--address HOST:PORT]
//
// The city: 200 drivers fixed at random points of a 10 km x 10 km city,
// riders around a hotspot at (2, 2) km (gauss, sigma 1 km), drawn with
// Python's random.Random(7) (the same generator, reimplemented below), so
// the drivers and riders are exactly the seed simulation's.
//
// The drivers: 20 gateway connections (switchyard::gateway: a lease, an
// inbox, routes) each hold 10 driver users, "driver:<n>" (n % 20 = the
// gateway). A driver's device acks each offer it gets (client::ack on
// its gateway's connection) after a random 1-20 ms; --never-ack percent
// of the devices (5%, chosen with seed 7) never ack.
//
// The dispatcher: one client. Each ride request gets sequential offers
// (expires_in 15 s, receipt_timeout 2 s). A receipt `acked` means the
// device has it; a receipt `timeout` means it did not ack within 2 s: the
// dispatcher falls back to a platform push for that driver (counted here,
// not sent anywhere) and offers the ride to the next driver. No
// acceptance is modelled (as in the seed), so no driver ever accepts:
// every offer is withdrawn at half its window, 7.5 s after it was sent
// (client::withdraw; gateways that got it are told). The two policies
// run one after the other, each on a fresh random.Random(7):
//   - "push to 3 nearest": one offer to the 3 nearest drivers at once;
//   - "1 offer, fairness band + cap": one driver chosen from those within
//     1 km of the best pickup distance (among the 15 nearest), fewest
//     offers so far first, ties at random, with the broker's exposure cap
//     K = 5 (--cap) offers per driver per rolling window
//     (offer_options::cap_max, cap_window). A driver the broker answers
//     `capped` is skipped for the next candidate. As in the seed, the
//     fewest-offers choice keeps drivers under 5 per 100 requests, so
//     with K = 5 the cap is a backstop that rarely answers `capped`;
//     --cap 2 makes it bind.
//
// The time scale: the offers' times are real (15 s, 2 s, 7.5 s); the
// requests are compressed: --rate requests per second (250), so the
// seed's cap window "the last 100 requests" is 100 / rate seconds (0.4 s).
// A run takes about 2 x (requests / rate + 7.5 s + the longest chain of
// 2 s timeouts): 30-45 s by default.
//
// Prints per policy the seed's fairness figures (offers, top-10% share,
// max per driver, drivers offered) and what the broker did: receipts
// acked and timed out (each a fallback), withdrawals, capped answers.
// --json: the human lines go to stderr and stdout's last line is one JSON
// object. Exit 0; 1 when the broker cannot be reached, a request failed
// or a check did not hold (every offer acked or timed out, every offer
// delivered, no driver over the cap); 2 for bad arguments.

#include "example_args.hpp"

#include <switchyard/client.hpp>
#include <switchyard/gateway.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <numbers>
#include <numeric>
#include <optional>
#include <queue>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

constexpr std::string_view usage =
    "usage: switchyard-example-dispatch [--requests N] [--rate R] [--never-ack PERCENT] [--cap K] [--json]\n"
    "                                   [--verbose] [--address HOST:PORT]\n"
    "A ride dispatcher on the broker's offers: 200 drivers on 20 gateway connections, ride requests around a\n"
    "hotspot, sequential offers (15 s expiry, 2 s receipts, fallback to platform push on a timeout, withdrawn\n"
    "at 7.5 s); \"push to 3 nearest\" against \"1 offer, fairness band + exposure cap 5 per 100 requests\".\n"
    "  --requests N         ride requests per policy (default 2000)\n"
    "  --rate R             ride requests per second (default 250; the cap window is 100 requests)\n"
    "  --never-ack PERCENT  devices that never ack (default 5)\n"
    "  --cap K              the banded policy's exposure cap: K offers per driver per 100 requests (default 5)\n"
    "  --json               one JSON line on stdout (the rest on stderr)\n"
    "  --verbose            a line per fallback and per capped driver\n"
    "  --address HOST:PORT  the broker (default: $SWITCHYARD_ADDRESS, else 127.0.0.1:7878)\n"
    "  --help               this text\n";

constexpr int n_drivers = 200;
constexpr int n_gateways = 20;
constexpr auto offer_expiry = 15s;
constexpr auto receipt_timeout = 2s;
constexpr auto withdraw_after = 7500ms;  // half the offer's window
constexpr int cap_requests = 100;        // the seed's window: the last 100 requests
constexpr int band_candidates = 15;
constexpr double band_km = 1.0;

// ---- Python's random.Random(seed), for a seed below 2^32: MT19937 seeded
// by init_by_array({seed}), random() from 53 bits, uniform and gauss as
// CPython 3 computes them. std::mt19937 is the same generator; only its
// seeding differs, so the state comes from this seed sequence.
struct python_seed {
  using result_type = std::uint32_t;
  std::uint32_t key;
  template <class It>
  void generate(It begin, It end) const {
    constexpr int n = 624;
    std::array<std::uint32_t, n> mt{};
    mt[0] = 19650218u;
    for (int i = 1; i < n; ++i) mt[i] = 1812433253u * (mt[i - 1] ^ (mt[i - 1] >> 30)) + static_cast<std::uint32_t>(i);
    int i = 1;
    for (int k = n; k > 0; --k) {
      mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525u)) + key;
      if (++i >= n) mt[0] = mt[n - 1], i = 1;
    }
    for (int k = n - 1; k > 0; --k) {
      mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941u)) - static_cast<std::uint32_t>(i);
      if (++i >= n) mt[0] = mt[n - 1], i = 1;
    }
    mt[0] = 0x80000000u;
    for (int j = 0; begin != end && j < n; ++begin, ++j) *begin = mt[static_cast<std::size_t>(j)];
  }
};

class python_random {
 public:
  explicit python_random(std::uint32_t seed) {
    python_seed s{seed};
    mt_.seed(s);
  }
  double random() {
    const std::uint32_t a = static_cast<std::uint32_t>(mt_()) >> 5, b = static_cast<std::uint32_t>(mt_()) >> 6;
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
  }
  double uniform(double lo, double hi) { return lo + (hi - lo) * random(); }
  double gauss(double mu, double sigma) {
    double z;
    if (next_) {
      z = *next_;
      next_.reset();
    } else {
      const double x2pi = random() * 2 * std::numbers::pi;
      const double g2rad = std::sqrt(-2.0 * std::log(1.0 - random()));
      z = std::cos(x2pi) * g2rad;
      next_ = std::sin(x2pi) * g2rad;
    }
    return mu + z * sigma;
  }

 private:
  std::mt19937 mt_;
  std::optional<double> next_;
};

struct point {
  double x = 0, y = 0;
};
double distance(point a, point b) { return std::hypot(a.x - b.x, a.y - b.y); }

// ---- The drivers' side: gateways and devices.

// What the gateways saw, for one policy (reset between policies).
struct gateway_tally {
  std::atomic<std::uint64_t> keys_delivered{0};    // route keys of offers delivered
  std::atomic<std::uint64_t> without_offer_id{0};  // the broker's flag "offers" off for that gateway
  std::atomic<std::uint64_t> ignored{0};           // delivered to a device that never acks
  std::atomic<std::uint64_t> withdrawn_notices{0};
  void reset() { keys_delivered = without_offer_id = ignored = withdrawn_notices = 0; }
};

// The devices: acks due later, sent by one thread through the gateway
// connection that delivered the offer.
class devices {
 public:
  explicit devices(std::vector<bool> never_ack) : never_ack_(std::move(never_ack)), thread_([this] { run(); }) {}
  ~devices() { stop(); }
  // Stops the acks (those not sent yet are dropped). Idempotent.
  void stop() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  std::atomic<std::uint64_t> acks_sent{0};
  void set_connections(std::vector<switchyard::client*> conns) {
    std::lock_guard lock(mu_);
    conns_ = std::move(conns);
  }
  bool never_acks(int driver) const { return never_ack_[static_cast<std::size_t>(driver)]; }
  // A gateway's on_message (its loop thread): the device of `driver` got offer `id`.
  void delivered(int gateway, int driver, std::uint64_t id, std::string_view key, gateway_tally& tally) {
    if (never_acks(driver)) {
      ++tally.ignored;
      return;
    }
    std::lock_guard lock(mu_);
    const auto delay = std::chrono::microseconds(std::uniform_int_distribution<int>(1'000, 20'000)(rng_));
    due_.push({clock_type::now() + delay, gateway, id, std::string(key)});
    cv_.notify_one();
  }

 private:
  struct pending_ack {
    clock_type::time_point due;
    int gateway;
    std::uint64_t offer_id;
    std::string key;
    bool operator>(const pending_ack& o) const { return due > o.due; }
  };
  void run() {
    std::unique_lock lock(mu_);
    while (!stop_) {
      if (due_.empty()) {
        cv_.wait(lock);
        continue;
      }
      // A copy: the wait lets go of the lock, and a push meanwhile may move
      // the queue's elements.
      if (const auto due = due_.top().due; clock_type::now() < due) {
        cv_.wait_until(lock, due);
        continue;
      }
      const pending_ack a = due_.top();
      due_.pop();
      auto* conn = conns_[static_cast<std::size_t>(a.gateway)];
      lock.unlock();
      if (!conn->ack(a.offer_id, a.key)) ++acks_sent;  // the gateway's ack: fire and forget
      lock.lock();
    }
  }
  std::vector<bool> never_ack_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::priority_queue<pending_ack, std::vector<pending_ack>, std::greater<>> due_;
  std::vector<switchyard::client*> conns_;
  std::mt19937 rng_{7};
  bool stop_ = false;
  std::thread thread_;  // last: started once the rest is ready
};

// ---- The dispatcher.

struct policy {
  std::string name;  // as the seed prints it
  std::string id;    // in the JSON
  int keys_per_request;
  bool banded;
};

struct policy_result {
  std::uint64_t requests = 0, sends = 0, offers = 0, acked = 0, timeouts = 0, late_acks = 0, capped = 0, no_route = 0,
                unserved = 0, withdrawals = 0, withdraw_not_found = 0, errors = 0;
  std::uint64_t withdraw_dropped = 0, withdraw_notified = 0, withdraw_pending = 0;
  std::vector<std::uint64_t> per_driver = std::vector<std::uint64_t>(n_drivers, 0);
  double top10_share = 0;
  std::uint64_t max_per_driver = 0, drivers_offered = 0;
  double offer_span_s = 0;      // first offer sent to last offer answered
  std::uint64_t cap_bound = 0;  // banded: cap_max x windows the offers spanned
  std::uint64_t gw_keys_delivered = 0, gw_acks_sent = 0, gw_ignored = 0, gw_withdrawn_notices = 0, gw_no_offer_id = 0;
  std::vector<std::string> failed_checks;
};

class dispatcher {
 public:
  dispatcher(switchyard::client& conn, std::string prefix, std::uint64_t first_offer_id, double rate,
             std::uint32_t cap_max, std::chrono::milliseconds cap_window, bool verbose, FILE* out)
      : conn_(conn),
        prefix_(std::move(prefix)),
        next_offer_id_(first_offer_id),
        rate_(rate),
        cap_max_(cap_max),
        cap_window_(cap_window),
        verbose_(verbose),
        out_(out) {}

  // client_options::on_receipt (the dispatcher's loop thread).
  void on_receipt(const switchyard::receipt& r) {
    {
      std::lock_guard lock(mu_);
      receipts_.push_back({r.offer_id, r.route_key, r.outcome});
    }
    cv_.notify_one();
  }

  policy_result run(const policy& p, long requests) {
    policy_ = &p;
    result_ = policy_result{};
    result_.requests = static_cast<std::uint64_t>(requests);
    rng_.emplace(7);
    for (auto& d : drivers_) d = {rng_->uniform(0, 10), rng_->uniform(0, 10)};
    requests_.assign(static_cast<std::size_t>(requests), {});
    first_fallback_printed_ = false;
    const auto t0 = clock_type::now();
    first_send_.reset();
    const auto deadline = t0 +
                          std::chrono::duration_cast<clock_type::duration>(
                              std::chrono::duration<double>(static_cast<double>(requests) / rate_)) +
                          offer_expiry + 45s;
    long next = 0;
    for (;;) {
      const auto now = clock_type::now();
      if (now > deadline) {
        ++result_.errors;
        std::fprintf(stderr, "%s: gave up waiting (receipts or withdrawals missing)\n", p.name.c_str());
        break;
      }
      const auto arrival = [&](long i) {
        return t0 + std::chrono::duration_cast<clock_type::duration>(
                        std::chrono::duration<double>(static_cast<double>(i) / rate_));
      };
      while (next < requests && arrival(next) <= now) arrive(static_cast<std::size_t>(next++));
      while (!withdraw_queue_.empty() && withdraw_queue_.front().due <= now) {
        withdraw(withdraw_queue_.front().offer_id);
        withdraw_queue_.pop_front();
      }
      std::vector<receipt_event> got;
      {
        std::lock_guard lock(mu_);
        got.swap(receipts_);
      }
      for (const auto& r : got) on_receipt_event(r);
      if (next == requests && withdraw_queue_.empty() && live_.empty() && got.empty()) break;
      // Sleep until the next arrival or withdrawal, or a receipt.
      auto wake = now + 100ms;
      if (next < requests) wake = std::min(wake, arrival(next));
      if (!withdraw_queue_.empty()) wake = std::min(wake, withdraw_queue_.front().due);
      std::unique_lock lock(mu_);
      cv_.wait_until(lock, wake, [&] { return !receipts_.empty(); });
    }
    finish();
    return result_;
  }

 private:
  struct receipt_event {
    std::uint64_t offer_id;
    std::string key;
    switchyard::receipt_outcome outcome;
  };
  struct request {
    point rider;
    std::vector<int> candidates;  // in the order they are offered the ride
    std::size_t next = 0;         // the next candidate
    int wanted = 0;               // devices that should have it (3 or 1)
    int have = 0;                 // acked
    int waiting = 0;              // routed, no receipt yet
  };
  struct live_offer {
    std::size_t request = 0;
    std::vector<int> drivers;     // routed
    std::vector<bool> receipted;  // per routed driver
  };
  struct due_withdrawal {
    clock_type::time_point due;
    std::uint64_t offer_id;
  };

  std::string key_of(int driver) const { return prefix_ + "driver:" + std::to_string(driver); }
  int driver_of(std::string_view key) const {
    const auto colon = key.rfind(':');
    return colon == std::string_view::npos ? -1 : std::atoi(std::string(key.substr(colon + 1)).c_str());
  }

  // A ride request arrives: rank the drivers, choose the candidates as the
  // seed does (same draws from the same generator), make the first offer.
  void arrive(std::size_t i) {
    auto& r = requests_[i];
    r.rider.x = rng_->gauss(2, 1);
    r.rider.y = rng_->gauss(2, 1);
    std::vector<int> ranked(n_drivers);
    std::iota(ranked.begin(), ranked.end(), 0);
    std::stable_sort(ranked.begin(), ranked.end(),
                     [&](int a, int b) { return distance(drivers_[a], r.rider) < distance(drivers_[b], r.rider); });
    if (!policy_->banded) {
      r.candidates = ranked;
    } else {
      const double best = distance(drivers_[ranked[0]], r.rider);
      std::vector<std::pair<std::pair<std::uint64_t, double>, int>> band, rest;
      for (int k = 0; k < band_candidates; ++k) {
        const int d = ranked[static_cast<std::size_t>(k)];
        if (distance(drivers_[d], r.rider) <= best + band_km)
          band.push_back({{result_.per_driver[static_cast<std::size_t>(d)], rng_->random()}, d});
        else
          rest.push_back({{0, 0}, d});
      }
      // Fewest offers so far first, ties at random (the seed's min()),
      // then the rest of the 15 nearest, nearest first.
      std::stable_sort(band.begin(), band.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      for (const auto& [k, d] : band) r.candidates.push_back(d);
      for (const auto& [k, d] : rest) r.candidates.push_back(d);
    }
    r.wanted = policy_->keys_per_request;
    offer(i, r.wanted);
  }

  // Offers request i to its next `need` candidates, one send, and again
  // past capped drivers, until `need` drivers were routed or no candidate
  // is left.
  void offer(std::size_t i, int need) {
    auto& r = requests_[i];
    while (need > 0 && r.next < r.candidates.size()) {
      std::vector<std::string> keys;
      std::vector<int> chosen;
      while (static_cast<int>(chosen.size()) < need && r.next < r.candidates.size()) {
        chosen.push_back(r.candidates[r.next++]);
        keys.push_back(key_of(chosen.back()));
      }
      std::vector<std::string_view> views(keys.begin(), keys.end());
      switchyard::offer_options o;
      o.offer_id = next_offer_id_++;
      o.expires_in = offer_expiry;
      o.receipt_timeout = receipt_timeout;
      if (policy_->banded) {
        o.cap_max = cap_max_;
        o.cap_window = cap_window_;
      }
      const std::string payload = "{\"ride\":" + std::to_string(i) + ",\"policy\":\"" + policy_->id + "\"}";
      const auto sent_at = clock_type::now();
      if (!first_send_) first_send_ = sent_at;
      const auto res = conn_.send_offer(views, payload, o);
      last_answer_ = clock_type::now();
      ++result_.sends;
      if (!res) {
        if (result_.errors++ == 0) std::fprintf(stderr, "send_offer: %s\n", res.error().message().c_str());
        return;
      }
      live_offer lo;
      lo.request = i;
      for (std::size_t k = 0; k < chosen.size(); ++k) {
        const int d = chosen[k];
        switch (res->outcomes[k]) {
          case switchyard::key_outcome::routed:
            lo.drivers.push_back(d);
            ++result_.per_driver[static_cast<std::size_t>(d)];
            ++result_.offers;
            --need;
            ++r.waiting;
            break;
          case switchyard::key_outcome::capped:
            ++result_.capped;
            if (verbose_)
              std::fprintf(out_, "  ride %zu: driver %d is capped (%u offers in the window): next one\n", i, d,
                           cap_max_);
            break;
          case switchyard::key_outcome::no_route:
            // Offline: a real dispatcher sends a platform push; here every
            // driver is connected, so this is counted, not expected.
            ++result_.no_route;
            break;
        }
      }
      if (!lo.drivers.empty()) {
        lo.receipted.assign(lo.drivers.size(), false);
        live_.emplace(o.offer_id, std::move(lo));
        withdraw_queue_.push_back({sent_at + withdraw_after, o.offer_id});
      }
      // An offer nobody was routed to is not withdrawn: it was pending for
      // nobody (capped keys are not pending) and expires by itself.
    }
    if (need > 0 && r.waiting == 0 && r.have < r.wanted) ++result_.unserved;
  }

  void on_receipt_event(const receipt_event& e) {
    const auto it = live_.find(e.offer_id);
    if (it == live_.end()) return;  // not this run's (a late ack after the withdrawal cannot come)
    auto& lo = it->second;
    const int d = driver_of(e.key);
    const auto at = std::find(lo.drivers.begin(), lo.drivers.end(), d);
    if (at == lo.drivers.end()) return;
    const auto k = static_cast<std::size_t>(at - lo.drivers.begin());
    if (lo.receipted[k]) {
      // An ack after the timeout receipt: the device was only slow.
      ++result_.late_acks;
      return;
    }
    lo.receipted[k] = true;
    auto& r = requests_[lo.request];
    --r.waiting;
    if (e.outcome == switchyard::receipt_outcome::acked) {
      ++result_.acked;
      ++r.have;
      return;
    }
    ++result_.timeouts;
    if (verbose_ || !first_fallback_printed_) {
      std::fprintf(out_,
                   "  %sride %zu: driver %d did not ack offer %llu within 2 s: fallback to platform push, "
                   "offering the next driver\n",
                   verbose_ ? "" : "e.g. ", lo.request, d, static_cast<unsigned long long>(e.offer_id));
      first_fallback_printed_ = true;
    }
    offer(lo.request, 1);
  }

  void withdraw(std::uint64_t id) {
    const auto w = conn_.withdraw(id);
    live_.erase(id);
    if (w) {
      ++result_.withdrawals;
      result_.withdraw_dropped += w->dropped;
      result_.withdraw_notified += w->notified;
      result_.withdraw_pending += w->pending;
    } else if (w.error() == switchyard::errc::not_found) {
      ++result_.withdraw_not_found;  // expired or forgotten already
    } else if (result_.errors++ == 0) {
      std::fprintf(stderr, "withdraw: %s\n", w.error().message().c_str());
    }
  }

  void finish() {
    auto& res = result_;
    auto sorted = res.per_driver;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    const auto top = std::accumulate(sorted.begin(), sorted.begin() + n_drivers / 10, std::uint64_t{0});
    res.top10_share = res.offers ? static_cast<double>(top) / static_cast<double>(res.offers) : 0;
    res.max_per_driver = sorted.front();
    res.drivers_offered =
        static_cast<std::uint64_t>(std::count_if(sorted.begin(), sorted.end(), [](auto n) { return n > 0; }));
    if (first_send_) res.offer_span_s = std::chrono::duration<double>(last_answer_ - *first_send_).count();
    if (policy_->banded) {
      // In any window of cap_window at most cap_max offers reached a
      // driver: over the span of the run, at most cap_max per window it
      // covers.
      const double windows = std::floor(res.offer_span_s / std::chrono::duration<double>(cap_window_).count()) + 1;
      res.cap_bound = cap_max_ * static_cast<std::uint64_t>(windows);
    }
  }

  switchyard::client& conn_;
  std::string prefix_;
  std::uint64_t next_offer_id_;
  double rate_;
  std::uint32_t cap_max_;
  std::chrono::milliseconds cap_window_;
  bool verbose_;
  FILE* out_;
  const policy* policy_ = nullptr;
  std::optional<python_random> rng_;
  std::array<point, n_drivers> drivers_{};
  std::vector<request> requests_;
  std::unordered_map<std::uint64_t, live_offer> live_;
  std::deque<due_withdrawal> withdraw_queue_;  // in send order, so in due order
  policy_result result_;
  std::optional<clock_type::time_point> first_send_;
  clock_type::time_point last_answer_{};
  bool first_fallback_printed_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<receipt_event> receipts_;
};

std::string percent(double share) { return std::to_string(static_cast<int>(std::lround(share * 100))) + "%"; }

}  // namespace

int main(int argc, char** argv) {
  long long requests = 2000, rate = 250, never_ack_percent = 5, cap = 5;
  bool json = false, verbose = false;
  example::command_line args(argc, argv, usage);
  while (args.next()) {
    if (args.take_number("--requests", 1, 100'000, requests)) continue;
    if (args.take_number("--rate", 1, 10'000, rate)) continue;
    if (args.take_number("--never-ack", 0, 100, never_ack_percent)) continue;
    if (args.take_number("--cap", 1, 16, cap)) continue;
    if (args.arg() == "--json")
      json = true;
    else if (args.arg() == "--verbose")
      verbose = true;
    else
      args.unexpected();
  }
  switchyard::client_options base;
  args.address(base.host, base.port);
  FILE* out = json ? stderr : stdout;

  // Names of this run only: the broker may be shared, and offer ids are
  // unique among the broker's live offers.
  std::random_device entropy;
  char tag[16];
  std::snprintf(tag, sizeof tag, "%08x", entropy());
  const std::string prefix = std::string("dispatch.") + tag + ".";
  const std::uint64_t first_offer_id = (static_cast<std::uint64_t>(entropy()) << 32) | 1;

  // The devices that never ack: never_ack_percent of the drivers, seed 7.
  std::vector<int> order(n_drivers);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(7));
  const auto silent = static_cast<std::size_t>(std::lround(n_drivers * static_cast<double>(never_ack_percent) / 100));
  std::vector<bool> never_ack(n_drivers, false);
  for (std::size_t k = 0; k < silent; ++k) never_ack[static_cast<std::size_t>(order[k])] = true;

  // The gateways: 20 connections on two I/O threads, 10 drivers each.
  // Declared in the order they may go: the gateways first (no delivery
  // after), then the devices (no ack after), then the connections.
  gateway_tally tally;
  std::vector<std::shared_ptr<switchyard::event_loop>> loops{std::make_shared<switchyard::event_loop>(),
                                                             std::make_shared<switchyard::event_loop>()};
  std::vector<std::unique_ptr<switchyard::client>> gw_conns;
  devices phones(never_ack);
  std::vector<std::unique_ptr<switchyard::gateway>> gateways;
  for (int g = 0; g < n_gateways; ++g) {
    auto o = base;
    o.client_name = "example-dispatch-gateway";
    o.client_id = prefix + "gw-" + std::to_string(g);
    o.on_withdrawn = [&tally](const switchyard::withdrawn_notice& n) {
      tally.withdrawn_notices += n.route_keys.size();
    };
    auto c = switchyard::client::connect(o, loops[static_cast<std::size_t>(g) % loops.size()]);
    if (!c) {
      std::fprintf(stderr, "cannot connect to %s: %s\n", args.address_text().c_str(), c.error().message().c_str());
      return 1;
    }
    gw_conns.push_back(std::move(*c));
  }
  std::vector<switchyard::client*> raw;
  for (auto& c : gw_conns) raw.push_back(c.get());
  phones.set_connections(raw);
  for (int g = 0; g < n_gateways; ++g) {
    switchyard::gateway_options o;
    o.inbox_id = prefix + "gw-" + std::to_string(g);
    for (int d = g; d < n_drivers; d += n_gateways) o.routes.push_back(prefix + "driver:" + std::to_string(d));
    o.on_message = [&tally, &phones, g](const switchyard::inbox_message& m) {
      tally.keys_delivered += m.route_keys.size();
      if (m.offer_id == 0) {
        ++tally.without_offer_id;
        return;
      }
      for (const auto key : m.route_keys) {
        const auto colon = key.rfind(':');
        const int d = std::atoi(std::string(key.substr(colon + 1)).c_str());
        phones.delivered(g, d, m.offer_id, key, tally);
      }
    };
    auto gw = switchyard::gateway::start(*gw_conns[static_cast<std::size_t>(g)], std::move(o));
    if (!gw) {
      std::fprintf(stderr, "gateway %d: %s\n", g, gw.error().message().c_str());
      return 1;
    }
    gateways.push_back(std::move(*gw));
  }

  // The dispatcher.
  const auto cap_window = std::chrono::milliseconds(std::max<long long>(1, cap_requests * 1000 / rate));
  std::unique_ptr<dispatcher> d;
  std::atomic<dispatcher*> receiver{nullptr};
  auto o = base;
  o.client_name = "example-dispatcher";
  o.on_receipt = [&receiver](const switchyard::receipt& r) {
    if (auto* to = receiver.load()) to->on_receipt(r);
  };
  auto conn = switchyard::client::connect(o);
  if (!conn) {
    std::fprintf(stderr, "cannot connect to %s: %s\n", args.address_text().c_str(), conn.error().message().c_str());
    return 1;
  }
  d = std::make_unique<dispatcher>(**conn, prefix, first_offer_id, static_cast<double>(rate),
                                   static_cast<std::uint32_t>(cap), cap_window, verbose, out);
  receiver = d.get();

  std::fprintf(out,
               "dispatch: %d drivers on %d gateway connections, %lld ride requests per policy at %lld/s; offers "
               "expire in 15 s, receipts within 2 s, withdrawn at 7.5 s; %zu devices (%lld%%) never ack\n",
               n_drivers, n_gateways, requests, rate, silent, never_ack_percent);
  std::fflush(out);
  const policy policies[] = {
      {"push to 3 nearest", "push_top3", 3, false},
      {"1 offer, fairness band + cap " + std::to_string(cap) + " per 100 requests (" +
           std::to_string(cap_window.count()) + " ms)",
       "band_cap", 1, true},
  };
  std::vector<policy_result> results;
  bool ok = true;
  for (const auto& p : policies) {
    tally.reset();
    phones.acks_sent = 0;
    auto r = d->run(p, static_cast<long>(requests));
    // Every notice and delivery for this policy's offers reached its
    // gateway once a round trip on that connection is done.
    for (auto& c : gw_conns) (void)c->flush();
    r.gw_keys_delivered = tally.keys_delivered;
    r.gw_acks_sent = phones.acks_sent;
    r.gw_ignored = tally.ignored;
    r.gw_withdrawn_notices = tally.withdrawn_notices;
    r.gw_no_offer_id = tally.without_offer_id;
    if (r.acked + r.timeouts != r.offers) r.failed_checks.push_back("offers = acked + timeouts");
    if (r.gw_keys_delivered != r.offers) r.failed_checks.push_back("every offer delivered to its gateway");
    if (p.banded && r.max_per_driver > r.cap_bound) r.failed_checks.push_back("max per driver within the cap bound");
    if (r.errors) r.failed_checks.push_back("no failed requests");
    ok = ok && r.failed_checks.empty();

    std::fprintf(out, "%s: offers=%llu top-10%%-share=%s max-per-driver=%llu drivers-offered=%llu/%d\n", p.name.c_str(),
                 static_cast<unsigned long long>(r.offers), percent(r.top10_share).c_str(),
                 static_cast<unsigned long long>(r.max_per_driver), static_cast<unsigned long long>(r.drivers_offered),
                 n_drivers);
    std::fprintf(
        out,
        "  receipts: %llu acked, %llu timeouts (each a fallback to platform push, the next driver offered), "
        "%llu late acks\n"
        "  sends %llu, capped %llu, no route %llu, unserved requests %llu\n"
        "  withdrawn at 7.5 s: %llu offers (%llu gateways told, %llu pending entries removed, %llu copies "
        "dropped unwritten), %llu already gone\n"
        "  gateways: %llu offer deliveries, %llu acked by devices, %llu ignored by silent devices, %llu "
        "withdrawn notices\n",
        static_cast<unsigned long long>(r.acked), static_cast<unsigned long long>(r.timeouts),
        static_cast<unsigned long long>(r.late_acks), static_cast<unsigned long long>(r.sends),
        static_cast<unsigned long long>(r.capped), static_cast<unsigned long long>(r.no_route),
        static_cast<unsigned long long>(r.unserved), static_cast<unsigned long long>(r.withdrawals),
        static_cast<unsigned long long>(r.withdraw_notified), static_cast<unsigned long long>(r.withdraw_pending),
        static_cast<unsigned long long>(r.withdraw_dropped), static_cast<unsigned long long>(r.withdraw_not_found),
        static_cast<unsigned long long>(r.gw_keys_delivered), static_cast<unsigned long long>(r.gw_acks_sent),
        static_cast<unsigned long long>(r.gw_ignored), static_cast<unsigned long long>(r.gw_withdrawn_notices));
    if (p.banded)
      std::fprintf(out, "  cap: at most %lld per %lld ms window; offers spanned %.1f s, so at most %llu per driver\n",
                   cap, static_cast<long long>(cap_window.count()), r.offer_span_s,
                   static_cast<unsigned long long>(r.cap_bound));
    if (r.gw_no_offer_id)
      std::fprintf(out,
                   "  %llu deliveries came without an offer id: the broker's flag \"offers\" is off for some "
                   "gateways (switchyard-cli flags set offers 100)\n",
                   static_cast<unsigned long long>(r.gw_no_offer_id));
    for (const auto& c : r.failed_checks) std::fprintf(out, "  CHECK FAILED: %s\n", c.c_str());
    std::fflush(out);
    results.push_back(std::move(r));
  }
  gateways.clear();  // no more deliveries to the devices
  phones.stop();
  (*conn)->close();

  if (json) {
    std::string j = "{\"drivers\":" + std::to_string(n_drivers) + ",\"gateways\":" + std::to_string(n_gateways) +
                    ",\"requests\":" + std::to_string(requests) + ",\"rate\":" + std::to_string(rate) +
                    ",\"cap_k\":" + std::to_string(cap) + ",\"cap_window_ms\":" + std::to_string(cap_window.count()) +
                    ",\"never_ack\":" + std::to_string(silent) + ",\"policies\":[";
    for (std::size_t i = 0; i < results.size(); ++i) {
      const auto& r = results[i];
      char share[32];
      std::snprintf(share, sizeof share, "%.4f", r.top10_share);
      const auto n = [](std::uint64_t v) { return std::to_string(v); };
      j += std::string(i ? "," : "") + "{\"policy\":\"" + policies[i].id + "\",\"offers\":" + n(r.offers) +
           ",\"top10_share\":" + share + ",\"max_per_driver\":" + n(r.max_per_driver) +
           ",\"drivers_offered\":" + n(r.drivers_offered) + ",\"sends\":" + n(r.sends) + ",\"acked\":" + n(r.acked) +
           ",\"timeouts\":" + n(r.timeouts) + ",\"fallbacks\":" + n(r.timeouts) + ",\"late_acks\":" + n(r.late_acks) +
           ",\"capped\":" + n(r.capped) + ",\"no_route\":" + n(r.no_route) + ",\"unserved\":" + n(r.unserved) +
           ",\"withdrawals\":" + n(r.withdrawals) + ",\"withdraw_not_found\":" + n(r.withdraw_not_found) +
           ",\"withdraw_notified\":" + n(r.withdraw_notified) + ",\"withdraw_pending\":" + n(r.withdraw_pending) +
           ",\"withdraw_dropped\":" + n(r.withdraw_dropped) + ",\"gw_delivered\":" + n(r.gw_keys_delivered) +
           ",\"gw_acks\":" + n(r.gw_acks_sent) + ",\"gw_ignored\":" + n(r.gw_ignored) +
           ",\"gw_withdrawn_notices\":" + n(r.gw_withdrawn_notices) +
           ",\"cap_bound\":" + (policies[i].banded ? n(r.cap_bound) : std::string("null")) +
           ",\"errors\":" + n(r.errors) + ",\"checks_passed\":" + (r.failed_checks.empty() ? "true" : "false") + "}";
    }
    j += "],\"ok\":" + std::string(ok ? "true" : "false") + "}";
    std::printf("%s\n", j.c_str());
  }
  return ok ? 0 : 1;
}
