#include "broker/monitor/metrics_exposition.hpp"

#include "broker/monitor/metric_catalog.hpp"

#include <fmt/format.h>

namespace switchyard::broker {

namespace {

// HELP text escapes backslashes and newlines; label values also quotes.
std::string escaped(std::string_view s, bool label) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (c == '"' && label)
      out += "\\\"";
    else
      out += c;
  }
  return out;
}

void head(std::string& out, std::string_view name, std::string_view help, std::string_view type) {
  fmt::format_to(std::back_inserter(out), "# HELP switchyard_{} {}\n# TYPE switchyard_{} {}\n", name,
                 escaped(help, false), name, type);
}

}  // namespace

std::string prometheus_text(const metrics_snapshot& m, const exposition_info& info) {
  std::string out;
  out.reserve(16 * 1024);
  auto it = std::back_inserter(out);
  head(out, "build_info", "Always 1; the labels name the build and this process's instance id.", "gauge");
  fmt::format_to(it, "switchyard_build_info{{version=\"{}\",server_instance=\"{}\"}} 1\n", escaped(info.version, true),
                 info.instance_id);
  head(out, "uptime_seconds", "Seconds since the server started.", "gauge");
  fmt::format_to(it, "switchyard_uptime_seconds {:.3f}\n", static_cast<double>(info.uptime_ms) / 1000.0);
  for (const auto& f : metrics_of(m)) {
    head(out, f.name, f.help, f.counter ? "counter" : "gauge");
    fmt::format_to(it, "switchyard_{} {}\n", f.name, f.value);
  }
  for (const auto& h : histograms_of(m)) {
    head(out, h.name, h.help, "histogram");
    std::uint64_t cumulative = 0;
    for (std::size_t i = 0; i < latency_histogram::bounds_us.size(); ++i) {
      cumulative += h.values->bucket(i);
      // Seconds, shortest exact form: 1e-05, 0.0025, 10.
      fmt::format_to(it, "switchyard_{}_bucket{{le=\"{}\"}} {}\n", h.name,
                     static_cast<double>(latency_histogram::bounds_us[i]) / 1e6, cumulative);
    }
    fmt::format_to(it, "switchyard_{}_bucket{{le=\"+Inf\"}} {}\n", h.name, h.values->count());
    fmt::format_to(it, "switchyard_{}_sum {:.9f}\n", h.name, static_cast<double>(h.values->sum_ns()) / 1e9);
    fmt::format_to(it, "switchyard_{}_count {}\n", h.name, h.values->count());
  }
  return out;
}

}  // namespace switchyard::broker
