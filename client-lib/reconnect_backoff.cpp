#include "reconnect_backoff.hpp"

#include <algorithm>
#include <random>

namespace switchyard::detail {

using std::chrono::milliseconds;

reconnect_backoff::reconnect_backoff(reconnect_options options, random_fn random, now_fn now)
    : opts_(options), random_(std::move(random)), now_(std::move(now)) {
  up_since_ = lost_at_ = now_();
}

reconnect_backoff::reconnect_backoff(reconnect_options options)
    : reconnect_backoff(
          options,
          [rng = std::make_shared<std::mt19937_64>(std::random_device{}())] {
            return std::uniform_real_distribution<double>(0.0, 1.0)(*rng);
          },
          [] { return clock::now(); }) {}

void reconnect_backoff::connected() {
  up_since_ = now_();
  since_loss_ = 0;
  floor_ = window_ = milliseconds(0);
}

void reconnect_backoff::lost(milliseconds retry_after, bool draining) {
  lost_at_ = now_();
  since_loss_ = 0;
  if (lost_at_ - up_since_ >= opts_.stable_after) n_ = 0;
  floor_ = draining ? milliseconds(0) : std::max(retry_after, milliseconds(0));
  window_ = draining ? std::max(retry_after, milliseconds(0)) : milliseconds(0);
}

void reconnect_backoff::attempt_failed(milliseconds retry_after) {
  floor_ = std::max(retry_after, milliseconds(0));
  window_ = milliseconds(0);
}

milliseconds reconnect_backoff::jitter(milliseconds limit) {
  if (limit.count() <= 0) return milliseconds(0);
  const double r = std::clamp(random_(), 0.0, 1.0);
  return std::min(limit, milliseconds(static_cast<std::int64_t>(r * static_cast<double>(limit.count()))));
}

std::optional<milliseconds> reconnect_backoff::next_delay() {
  if (opts_.max_attempts != 0 && since_loss_ >= opts_.max_attempts) return std::nullopt;
  milliseconds delay{0};
  if (window_.count() > 0) {
    delay = jitter(window_);  // a drain: spread even the first attempt over the window
  } else {
    // min(max_delay, base * 2^n) without overflow: doubling stops at the cap.
    milliseconds limit = std::max(opts_.base_delay, milliseconds(0));
    for (std::uint32_t i = 0; i < n_ && limit < opts_.max_delay; ++i) limit *= 2;
    limit = std::min(limit, opts_.max_delay);
    delay = std::max(floor_, jitter(limit));
  }
  if (opts_.max_downtime.count() > 0 && (now_() - lost_at_) + delay > opts_.max_downtime) return std::nullopt;
  floor_ = window_ = milliseconds(0);
  ++since_loss_;
  if (n_ < 63) ++n_;
  return delay;
}

milliseconds reconnect_backoff::downtime() const { return std::chrono::duration_cast<milliseconds>(now_() - lost_at_); }

}  // namespace switchyard::detail
