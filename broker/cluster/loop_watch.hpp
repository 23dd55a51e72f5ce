#pragma once
// loop_watch: whether the broker's loop answers, as membership's keeper
// thread sees it (docs/cluster.md, "Membership").
//
// The loop beats: a timer of its own calls beat() every beat_period
// (TTL/10, at least 100 ms), and the keeper renews the etcd lease only
// while silence() is at most TTL/2. The beats come from the loop's own
// timer, not from probes the keeper posts, so neither a late keeper (etcd
// calls, a give-back waiting for the loop) nor the spacing of its checks
// moves the bound: the keeper never renews more than TTL/2 after the
// loop's last beat, and a loop that runs its timers is never seen silent
// for longer than one period and its own delay in running the timer.
// (Counting from when the keeper's last probe ran, posted only at each
// renewal, called a loaded but live loop silent for the TTL/3 between
// probes plus the keeper's own delays: on a loaded machine past TTL/2, and
// the lease went unrenewed.)
//
// Threads: beat() on the loop, silence() on the keeper. Time is passed
// in: tested without sleeping.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace switchyard::broker {

class loop_watch {
 public:
  using clock = std::chrono::steady_clock;

  // How often the loop beats for a lease of `ttl`.
  static std::chrono::milliseconds beat_period(std::chrono::milliseconds ttl) noexcept {
    return std::max(std::chrono::milliseconds(100), ttl / 10);
  }

  // Loop thread (and once at the start, before the loop runs): the loop
  // was alive at `now`.
  void beat(clock::time_point now) noexcept {
    last_ns_.store(now.time_since_epoch().count(), std::memory_order_release);
  }

  // Keeper thread: how long the loop has not beaten at `now` (zero if it
  // beat later than `now`).
  clock::duration silence(clock::time_point now) const noexcept {
    const clock::time_point last{clock::duration(last_ns_.load(std::memory_order_acquire))};
    return now > last ? now - last : clock::duration::zero();
  }

 private:
  std::atomic<clock::rep> last_ns_{0};
};

}  // namespace switchyard::broker
