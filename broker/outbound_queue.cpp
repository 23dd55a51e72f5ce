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
  if (head_ == 0 && queued_bytes_ <= max_write_bytes) {
    // Everything (the usual case): swapping keeps both vectors' capacity,
    // no allocation once warmed up. queued_bytes_ is all pending here.
    in_flight_.swap(pending_);
  } else {
    std::size_t bytes = 0, end = head_;
    while (end < pending_.size() && (end == head_ || bytes + pending_[end].size() <= max_write_bytes))
      bytes += pending_[end++].size();
    in_flight_.assign(std::make_move_iterator(pending_.begin() + static_cast<std::ptrdiff_t>(head_)),
                      std::make_move_iterator(pending_.begin() + static_cast<std::ptrdiff_t>(end)));
    head_ = end;
    if (head_ == pending_.size()) {
      pending_.clear();
      head_ = 0;
    } else if (head_ > pending_.size() / 2) {
      pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(head_));
      head_ = 0;
    }
  }
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

std::size_t outbound_queue::drop_pending() noexcept {
  const std::size_t n = pending_.size() - head_;
  for (std::size_t i = head_; i < pending_.size(); ++i) queued_bytes_ -= pending_[i].size();
  pending_.clear();
  head_ = 0;
  return n;
}

void outbound_queue::clear() noexcept {
  pending_.clear();
  head_ = 0;
  in_flight_.clear();
  queued_bytes_ = 0;
}

}  // namespace switchyard::broker
