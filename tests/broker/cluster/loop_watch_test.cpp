// loop_watch: the keeper's view of whether the loop answers. Time is
// passed in; the loop's side is the handler post() returns, run or not.

#include "broker/cluster/loop_watch.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <memory>

using namespace std::chrono_literals;
using switchyard::broker::loop_watch;

TEST_CASE("a loop that runs every probe at once is never silent, however far apart the probes are",
          "[cluster][loop_watch]") {
  loop_watch w;
  auto t = loop_watch::clock::time_point{} + 1h;
  for (int i = 0; i < 10; ++i) {
    // The keeper's ticks come late on a loaded machine: 1.5 s apart.
    CHECK(w.silence(t) == 0s);
    REQUIRE_FALSE(w.outstanding());
    auto probe = w.post(t);
    probe();  // the loop runs it 1 ms later
    t += 1500ms;
  }
}

TEST_CASE("a loop that does not run its probe is silent from when the probe was posted", "[cluster][loop_watch]") {
  loop_watch w;
  const auto t0 = loop_watch::clock::time_point{} + 1h;
  auto probe = w.post(t0);
  CHECK(w.outstanding());
  CHECK(w.silence(t0 + 400ms) == 400ms);
  CHECK(w.silence(t0 + 1200ms) == 1200ms);
  probe();
  CHECK_FALSE(w.outstanding());
  CHECK(w.silence(t0 + 1300ms) == 0s);
}

TEST_CASE("a probe run after the watch is gone touches nothing freed", "[cluster][loop_watch]") {
  auto w = std::make_unique<loop_watch>();
  auto probe = w->post(loop_watch::clock::now());
  w.reset();
  probe();  // holds the count it sets, not the watch (the sanitized build CI runs would catch a use after free)
  SUCCEED();
}
