// loop_watch: the keeper's view of whether the loop answers. Time is
// passed in; beat() stands for the loop's timer.

#include "broker/cluster/loop_watch.hpp"

#include <catch2/catch.hpp>

#include <chrono>

using namespace std::chrono_literals;
using switchyard::broker::loop_watch;

TEST_CASE("a loop that beats every period is never silent longer than a period, however late the keeper looks",
          "[cluster][loop_watch]") {
  loop_watch w;
  const auto period = loop_watch::beat_period(2000ms);
  auto t = loop_watch::clock::time_point{} + 1h;
  w.beat(t);
  // The keeper looks 1.5 s apart (etcd calls, a give-back waiting): the
  // loop beat meanwhile, on its own.
  for (int i = 0; i < 10; ++i) {
    for (auto beat = t + period; beat <= t + 1500ms; beat += period) w.beat(beat);
    t += 1500ms;
    CHECK(w.silence(t) <= period);
  }
}

TEST_CASE("a loop that stops beating is silent from its last beat, however the keeper's looks are spaced",
          "[cluster][loop_watch]") {
  loop_watch w;
  const auto t0 = loop_watch::clock::time_point{} + 1h;
  w.beat(t0);
  CHECK(w.silence(t0 + 400ms) == 400ms);
  CHECK(w.silence(t0 + 3700ms) == 3700ms);  // a keeper 3.3 s late still sees the whole silence
  w.beat(t0 + 3800ms);
  CHECK(w.silence(t0 + 3850ms) == 50ms);
  CHECK(w.silence(t0 + 3700ms) == 0s);  // a look from before the beat
}

TEST_CASE("the loop beats every tenth of the lease, at least every 100 ms", "[cluster][loop_watch]") {
  CHECK(loop_watch::beat_period(5000ms) == 500ms);
  CHECK(loop_watch::beat_period(2000ms) == 200ms);
  CHECK(loop_watch::beat_period(500ms) == 100ms);
}
