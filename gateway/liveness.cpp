#include "gateway/liveness.hpp"

namespace switchyard::edge {

liveness_action due(const liveness& s, const liveness_timing& t, steady_time now) noexcept {
  if (s.closing_since) return now - *s.closing_since >= t.close_grace ? liveness_action::abort : liveness_action::none;
  if (!s.hello_received)
    return now - s.accepted >= t.hello_timeout ? liveness_action::hello_timeout : liveness_action::none;
  if (s.token_expiry && now >= *s.token_expiry) return liveness_action::token_expired;
  if (now - s.last_received >= t.dead_after) return liveness_action::dead;
  if (s.upgraded && now - s.last_ping >= t.ping_interval) return liveness_action::ping;
  return liveness_action::none;
}

}  // namespace switchyard::edge
