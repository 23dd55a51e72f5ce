#include "broker/outbound_queue.hpp"

namespace switchyard::broker {

bool outbound_queue::admit(std::size_t bytes) noexcept {
  if (queued_bytes_ + bytes <= max_bytes_) return true;
  ++dropped_;
  ++dropped_total_;
  return false;
}

void outbound_queue::push(frame_ref f) {
  queued_bytes_ += f.size();
  pending_.push_back(std::move(f));
}

void outbound_queue::begin_write(std::vector<std::span<const std::uint8_t>>& out) {
  // Swapping keeps both vectors' capacity: no allocation once warmed up.
  in_flight_.swap(pending_);
  for (std::size_t i = 0; i < in_flight_.size(); ++i) {
    const frame_ref& f = in_flight_[i];
    if (i > 0 && in_flight_[i - 1].adjacent(f) && !out.empty()) {
      auto& last = out.back();
      last = {last.data(), last.size() + f.size()};
    } else {
      out.emplace_back(f.data(), f.size());
    }
  }
}

void outbound_queue::end_write() noexcept {
  for (const frame_ref& f : in_flight_) queued_bytes_ -= f.size();
  in_flight_.clear();
}

void outbound_queue::clear() noexcept {
  pending_.clear();
  in_flight_.clear();
  queued_bytes_ = 0;
}

}  // namespace switchyard::broker
