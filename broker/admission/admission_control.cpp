#include "broker/admission/admission_control.hpp"

#include <algorithm>

namespace switchyard::broker {

using protocol::errc;

admission_control::admission_control(const server_config& config, server_counters& counters, clock::time_point now)
    : config_(config), counters_(counters), bucket_(config.max_hellos_per_s, config.hello_burst, now) {}

void admission_control::reconfigure(clock::time_point now) {
  bucket_.configure(config_.max_hellos_per_s, config_.hello_burst, now);
}

std::chrono::milliseconds admission_control::reconnect_window_for(std::chrono::milliseconds window) noexcept {
  return std::clamp(window, std::chrono::milliseconds(1), max_reconnect_window);
}

void admission_control::begin_drain(std::chrono::milliseconds reconnect_window) noexcept {
  draining_ = true;
  reconnect_window_ = std::max(reconnect_window, std::chrono::milliseconds(1));
}

refusal admission_control::drain_refusal() {
  ++counters_.hellos_draining;
  return {errc::draining, reconnect_window_,
          "the server is draining; reconnect (to another broker if there is one) after " +
              std::to_string(reconnect_window_.count()) + " ms"};
}

refusal admission_control::cap_refusal(clock::time_point now) {
  ++counters_.connections_rejected;
  // With a hello rate, a cap refusal also takes a place in its queue, so
  // those refused are spread like the rate's.
  const auto hint = std::max(cap_retry_after, bucket_.reserve(now, max_retry_after));
  return {errc::too_many_connections, hint,
          std::to_string(config_.max_connections) + " connections is the cap (" + std::to_string(config_.admin_slots) +
              " more for admin); retry after " + std::to_string(hint.count()) + " ms"};
}

std::optional<refusal> admission_control::on_accept(std::size_t open, clock::time_point now) {
  if (draining_) return drain_refusal();
  if (open >= std::size_t{config_.max_connections} + config_.admin_slots) return cap_refusal(now);
  return std::nullopt;
}

bool admission_control::on_tls_accept(std::size_t open) noexcept {
  if (open + tls_handshakes_ >= std::size_t{config_.max_connections} + config_.admin_slots) {
    ++counters_.connections_rejected;
    return false;
  }
  ++tls_handshakes_;
  return true;
}

void admission_control::tls_handshake_done() noexcept {
  if (tls_handshakes_ > 0) --tls_handshakes_;
}

std::optional<refusal> admission_control::on_hello(bool admin, std::size_t open, clock::time_point now) {
  if (draining_) return drain_refusal();
  if (admin) return std::nullopt;  // within max_connections + admin_slots (on_accept), and not rate limited
  if (open > config_.max_connections) return cap_refusal(now);
  if (bucket_.try_take(now)) return std::nullopt;
  ++counters_.hellos_rate_limited;
  const auto hint = bucket_.reserve(now, max_retry_after);
  return refusal{errc::rate_limited, hint,
                 "more than " + std::to_string(config_.max_hellos_per_s) + " hellos per second; retry after " +
                     std::to_string(hint.count()) + " ms"};
}

}  // namespace switchyard::broker
