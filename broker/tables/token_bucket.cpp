#include "broker/tables/token_bucket.hpp"

#include <algorithm>
#include <cmath>

namespace switchyard::broker {

namespace {
double effective_burst(double rate, double burst) noexcept { return std::max(1.0, burst > 0 ? burst : rate); }
}  // namespace

token_bucket::token_bucket(double rate_per_s, double burst, clock::time_point now) noexcept
    : rate_(std::max(0.0, rate_per_s)),
      burst_(effective_burst(rate_, burst)),
      tokens_(burst_),
      last_(now),
      queue_end_(now) {}

void token_bucket::configure(double rate_per_s, double burst, clock::time_point now) noexcept {
  refill(now);
  const bool was_limited = limited();
  rate_ = std::max(0.0, rate_per_s);
  burst_ = effective_burst(rate_, burst);
  // A bucket that was off starts full, like a new one.
  tokens_ = was_limited ? std::min(tokens_, burst_) : burst_;
}

void token_bucket::refill(clock::time_point now) noexcept {
  if (now <= last_) return;
  const double elapsed = std::chrono::duration<double>(now - last_).count();
  tokens_ = std::min(burst_, tokens_ + elapsed * rate_);
  last_ = now;
}

bool token_bucket::try_take(clock::time_point now) noexcept {
  if (!limited()) return true;
  refill(now);
  // A token that refilled in several steps may be short of 1 by rounding.
  constexpr double rounding = 1e-9;
  if (tokens_ + rounding < 1.0) return false;
  tokens_ = std::max(0.0, tokens_ - 1.0);
  return true;
}

std::chrono::milliseconds token_bucket::reserve(clock::time_point now, std::chrono::milliseconds max_hint) noexcept {
  using namespace std::chrono;
  if (!limited()) return milliseconds(0);
  const auto step = duration_cast<clock::duration>(duration<double>(1.0 / rate_));
  const auto cap = now + duration_cast<clock::duration>(max_hint);
  queue_end_ = std::min(std::max(queue_end_, now) + step, cap);
  const auto hint = duration_cast<milliseconds>(queue_end_ - now + milliseconds(1) - nanoseconds(1));  // rounded up
  return std::clamp(hint, milliseconds(1), std::max(max_hint, milliseconds(1)));
}

double token_bucket::tokens(clock::time_point now) noexcept {
  refill(now);
  return tokens_;
}

}  // namespace switchyard::broker
