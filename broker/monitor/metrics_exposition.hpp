#pragma once
// The Prometheus text exposition format (version 0.0.4) of one metrics
// snapshot: what GET /metrics answers (http_monitor). Every figure of
// metrics_of() and histograms_of() with a `switchyard_` prefix, HELP and
// TYPE lines, plus build info and uptime. Pure function; loop thread or
// any other (it reads only its arguments).

#include "broker/monitor/metrics_snapshot.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace switchyard::broker {

struct exposition_info {
  std::string_view version;       // the build's version (switchyard_build_info)
  std::uint64_t instance_id = 0;  // this process's server_instance
  std::uint64_t uptime_ms = 0;
};

std::string prometheus_text(const metrics_snapshot& m, const exposition_info& info);

}  // namespace switchyard::broker
