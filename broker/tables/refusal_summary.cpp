#include "broker/tables/refusal_summary.hpp"

#include <spdlog/spdlog.h>

namespace switchyard::broker {

void refusal_summary::refused(spdlog::logger& logger, std::uint64_t conn, const std::string& stream,
                              const std::error_code& ec) {
  kind& k = find(ec);
  ++k.count;
  k.conn = conn;
  k.stream.assign(stream);
  pending_ = true;
  report(logger, k, clock::now());
}

void refusal_summary::report_due(spdlog::logger& logger) {
  if (!pending_) return;
  const auto now = clock::now();
  pending_ = false;
  for (auto& k : kinds_) {
    report(logger, k, now);
    pending_ |= k.count > 0;
  }
}

refusal_summary::kind& refusal_summary::find(const std::error_code& ec) {
  for (auto& k : kinds_)
    if (k.code == ec) return k;
  kinds_.push_back({ec, clock::time_point{}, 0, 0, {}});
  return kinds_.back();
}

void refusal_summary::report(spdlog::logger& logger, kind& k, clock::time_point now) {
  if (k.count == 0 || (k.last_line != clock::time_point{} && now - k.last_line < interval)) return;
  logger.error("{} append{} refused: {} (latest conn={} stream={}; at most one such line a second)", k.count,
               k.count == 1 ? "" : "s", k.code.message(), k.conn, k.stream);
  k.last_line = now;
  k.count = 0;
}

}  // namespace switchyard::broker
