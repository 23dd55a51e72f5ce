#include "broker/tables/drain_schedule.hpp"

#include <algorithm>

namespace switchyard::broker {

drain_schedule::drain_schedule(clock::time_point start, std::chrono::milliseconds window,
                               std::size_t connections) noexcept
    : start_(start),
      window_(std::max(window, std::chrono::milliseconds(1))),
      connections_(connections),
      period_(std::clamp(window_ / 10, std::chrono::milliseconds(1), max_period)) {}

std::size_t drain_schedule::target(clock::time_point now) const noexcept {
  if (now <= start_) return 0;
  if (now >= end()) return connections_;
  // Integer nanoseconds, exact; 128 bits so N * elapsed cannot overflow.
  const auto elapsed = static_cast<unsigned __int128>((now - start_).count());
  const auto total = static_cast<unsigned __int128>(std::chrono::duration_cast<clock::duration>(window_).count());
  const unsigned __int128 n = connections_;
  return static_cast<std::size_t>((n * elapsed + total - 1) / total);
}

}  // namespace switchyard::broker
