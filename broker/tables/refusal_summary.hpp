#pragma once
// Refused appends in the broker's log, summarised: at most one line per
// second per kind of error, with the number refused since the last line of
// that kind and the latest connection and stream. The first refusal of a
// burst is logged at once; the rest of a burst by report_due(), which the
// next append and the lease sweeper (every sweep period) call, so no count
// waits longer than a second and a sweep period. Loop thread only.

#include <chrono>
#include <cstdint>
#include <string>
#include <system_error>
#include <vector>

namespace spdlog {
class logger;
}

namespace switchyard::broker {

class refusal_summary {
 public:
  using clock = std::chrono::steady_clock;
  static constexpr auto interval = std::chrono::seconds(1);

  // An append to `stream` from connection `conn` was refused with `ec`.
  void refused(spdlog::logger& logger, std::uint64_t conn, const std::string& stream, const std::error_code& ec);
  // Logs the counts whose second has passed. Cheap when none waits.
  void report_due(spdlog::logger& logger);

 private:
  struct kind {
    std::error_code code;
    clock::time_point last_line{};
    std::uint64_t count = 0;  // refused since the last line
    std::uint64_t conn = 0;   // the latest refusal's
    std::string stream;
  };
  kind& find(const std::error_code& ec);
  static void report(spdlog::logger& logger, kind& k, clock::time_point now);

  std::vector<kind> kinds_;  // one per error kind seen: a handful
  bool pending_ = false;     // some kind has a count waiting for its line
};

}  // namespace switchyard::broker
