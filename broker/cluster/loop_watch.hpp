#pragma once
// loop_watch: whether the broker's loop answers, as membership's keeper
// thread sees it (docs/cluster.md, "Membership").
//
// The keeper posts a probe to the loop whenever none is outstanding (at
// each of its ticks: every TTL/10, at least 100 ms) and asks how long the
// outstanding one has waited. The loop is silent for as long as a probe
// it was given waits; a probe it ran says it was alive after the probe was
// posted. Counting from when the last probe *ran* instead (what membership
// did before) called a loop that answered at once silent for the time
// between two probes, which a loaded machine stretched past TTL/2: the
// lease went unrenewed although the loop was alive.
//
// Bound: a loop stuck just after answering is seen silent from the next
// probe on, so the keeper stops renewing at most one tick plus TTL/2 after
// the loop stopped.
//
// Threads: silence() and post() on the keeper thread; answer() on the loop
// (through the handler post() returns). Time is passed in: tested without
// sleeping.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

namespace switchyard::broker {

class loop_watch {
 public:
  using clock = std::chrono::steady_clock;

  // Keeper thread: how long the outstanding probe has waited at `now`; zero
  // when none is outstanding (the loop ran every probe posted).
  clock::duration silence(clock::time_point now) const {
    if (!outstanding()) return clock::duration::zero();
    return now > posted_at_ ? now - posted_at_ : clock::duration::zero();
  }

  // Keeper thread: whether a posted probe has not run yet.
  bool outstanding() const { return answered_->load(std::memory_order_acquire) < posted_; }

  // Keeper thread: records a probe posted at `now` (call only when none is
  // outstanding) and returns what the loop runs for it. The handler holds
  // the shared count, not the watch: it may run after the watch is gone.
  auto post(clock::time_point now) {
    posted_at_ = now;
    return [answered = answered_, n = ++posted_] { answered->store(n, std::memory_order_release); };
  }

 private:
  clock::time_point posted_at_{};
  std::uint64_t posted_ = 0;  // probes posted; the last one's number
  std::shared_ptr<std::atomic<std::uint64_t>> answered_ = std::make_shared<std::atomic<std::uint64_t>>(0);
};

}  // namespace switchyard::broker
