#pragma once
// A fixed-bucket latency histogram (Prometheus style): counts per upper
// bound, a count and a sum. Observing is a short scan over the bounds and
// three additions; nothing allocates. A value copy is a snapshot.
//
// Used on one thread (the loop); copy it to read it elsewhere.

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace switchyard::broker {

class latency_histogram {
 public:
  // Upper bounds of the buckets, in microseconds: 10 us to 10 s in 1-2.5-5
  // steps; a last bucket (+Inf) takes the rest.
  static constexpr std::array<std::uint64_t, 19> bounds_us{
      10,     25,     50,      100,     250,     500,       1'000,     2'500,     5'000,     10'000,
      25'000, 50'000, 100'000, 250'000, 500'000, 1'000'000, 2'500'000, 5'000'000, 10'000'000};
  static constexpr std::size_t buckets = bounds_us.size() + 1;

  // Records one value; a negative one counts as 0.
  void observe(std::chrono::nanoseconds d) noexcept {
    const auto ns = d.count() > 0 ? static_cast<std::uint64_t>(d.count()) : 0u;
    std::size_t i = 0;
    while (i < bounds_us.size() && ns > bounds_us[i] * 1000) ++i;
    ++counts_[i];
    ++count_;
    sum_ns_ += ns;
  }

  // Values in bucket i alone (not cumulative): bounds_us[i-1] < v <= bounds_us[i];
  // i == bounds_us.size() is +Inf.
  std::uint64_t bucket(std::size_t i) const noexcept { return counts_[i]; }
  std::uint64_t count() const noexcept { return count_; }
  std::uint64_t sum_ns() const noexcept { return sum_ns_; }

  // The smallest bucket bound (us) at or below which at least `q` (0..1) of
  // the values lie: an upper estimate of that quantile. 0 when empty;
  // UINT64_MAX when it falls in the +Inf bucket.
  std::uint64_t quantile_bound_us(double q) const noexcept {
    if (count_ == 0) return 0;
    const auto want = static_cast<std::uint64_t>(q * static_cast<double>(count_) + 0.999999);
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < bounds_us.size(); ++i) {
      seen += counts_[i];
      if (seen >= want) return bounds_us[i];
    }
    return UINT64_MAX;
  }

 private:
  std::array<std::uint64_t, buckets> counts_{};
  std::uint64_t count_ = 0;
  std::uint64_t sum_ns_ = 0;
};

}  // namespace switchyard::broker
