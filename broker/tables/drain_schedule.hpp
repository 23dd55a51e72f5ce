#pragma once
// When a drain (docs/protocol.md §9.1) closes its connections: the N
// connections open when it began are closed in batches spread evenly over
// the window, so that by `start + t` about N * t / window of them are gone
// (50,000 connections over 300 s: about 167 a second, 17 every 100 ms), and
// all of them by the window's end.
//
// The caller wakes every period() and closes connections, in the order it
// took them at the start, until it has handled target(now) of them (a
// connection that left by itself counts as handled where its turn comes).
//
// Pure arithmetic on the times passed in: no clock, no timer. Loop thread
// only (like everything that holds one).

#include <chrono>
#include <cstddef>

namespace switchyard::broker {

class drain_schedule {
 public:
  using clock = std::chrono::steady_clock;

  // The period between batches: a tenth of the window, between 1 ms and
  // 100 ms.
  static constexpr std::chrono::milliseconds max_period{100};

  // `connections` open at `start`; window at least 1 ms (shorter is raised).
  drain_schedule(clock::time_point start, std::chrono::milliseconds window, std::size_t connections) noexcept;

  // How many of the connections should have been closed by `now`:
  // ceil(N * elapsed / window), 0 before the start, N from the end on.
  std::size_t target(clock::time_point now) const noexcept;

  std::chrono::milliseconds period() const noexcept { return period_; }
  clock::time_point start() const noexcept { return start_; }
  clock::time_point end() const noexcept { return start_ + window_; }
  std::chrono::milliseconds window() const noexcept { return window_; }
  std::size_t connections() const noexcept { return connections_; }

 private:
  clock::time_point start_;
  std::chrono::milliseconds window_;
  std::size_t connections_;
  std::chrono::milliseconds period_;
};

}  // namespace switchyard::broker
