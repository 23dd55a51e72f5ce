#pragma once
// A hand-driven clock for lease_table tests: time never passes by itself,
// the test moves `now`. The table reads it through source(), which refers
// to this object, so the clock must outlive the table and stay in place.

#include "broker/tables/lease_table.hpp"

#include <chrono>

namespace switchyard::test {

struct fake_clock {
  using time_point = broker::mono_clock::time_point;

  time_point now;

  broker::clock_source source() {
    return [this] { return now; };
  }
  void advance(std::chrono::nanoseconds d) { now += d; }
};

// A lease_config for a table on a fake_clock. `stall_threshold` decides
// whether moving the clock by hand past it counts as a paused sweeper.
inline broker::lease_config fake_clock_config(std::chrono::milliseconds sweep_period,
                                              std::chrono::milliseconds stall_threshold,
                                              std::chrono::milliseconds min_ttl = std::chrono::milliseconds(1),
                                              std::chrono::milliseconds max_ttl = std::chrono::seconds(60)) {
  broker::lease_config c;
  c.min_ttl = min_ttl;
  c.max_ttl = max_ttl;
  c.sweep_period = sweep_period;
  c.stall_threshold = stall_threshold;
  return c;
}

}  // namespace switchyard::test
