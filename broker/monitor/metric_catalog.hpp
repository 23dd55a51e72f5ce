#pragma once
// Every counter and gauge of a metrics_snapshot as a named figure: the one
// list that the Stats answer, and anything else that reports metrics,
// read. Names are stable (docs/operations.md explains each): snake_case,
// the unit last (`_bytes`), counters end in `_total`.

#include "broker/monitor/metrics_snapshot.hpp"

#include <cstdint>
#include <string_view>
#include <vector>

namespace switchyard::broker {

struct metric {
  std::string_view name;  // static
  std::string_view help;  // static, one sentence
  std::uint64_t value = 0;
  bool counter = false;  // only grows while the server runs; else a gauge
};

// The figures of `m`, in a fixed order (counters, then gauges). The log's
// figures are present (zero) on a server without a sequence log.
std::vector<metric> metrics_of(const metrics_snapshot& m);

// A latency histogram of the snapshot, named like the figures (the unit,
// seconds, last).
struct histogram_metric {
  std::string_view name;                      // static
  std::string_view help;                      // static
  const latency_histogram* values = nullptr;  // borrowed from the snapshot given
};

// The histograms of `m`: delivery and append latency. Borrows `m`.
std::vector<histogram_metric> histograms_of(const metrics_snapshot& m);

}  // namespace switchyard::broker
