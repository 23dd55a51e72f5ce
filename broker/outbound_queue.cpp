#include "broker/outbound_queue.hpp"

#include "protocol/frame_parser.hpp"

#include <algorithm>

namespace switchyard::broker {

bool outbound_queue::admit(std::size_t bytes) noexcept {
  if (queued_bytes_ + bytes <= max_bytes_) return true;
  ++dropped_;
  ++dropped_total_;
  return false;
}

void outbound_queue::push(frame_ref f, const delivery_meta& meta) {
  queued_bytes_ += f.size();
  if (!meta.plain()) ++marked_;
  pending_.push_back({std::move(f), meta});
}

void outbound_queue::take_marked(std::size_t end, std::chrono::steady_clock::time_point now) {
  in_flight_.clear();
  for (std::size_t i = head_; i < end; ++i) {
    entry& e = pending_[i];
    if (!e.meta.plain()) {
      --marked_;
      const bool expired = e.meta.deadline != std::chrono::steady_clock::time_point{} && now >= e.meta.deadline;
      if (e.cancelled || expired) {
        ++(e.cancelled ? cancelled_ : expired_);
        queued_bytes_ -= e.frame.size();
        e.frame.reset();
        continue;
      }
      if (e.meta.refresh_time_left) {
        // Rounded up: a frame written with 0.3 ms left says 1, not 0 ("no expiry").
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(e.meta.deadline - now).count();
        const auto ms = static_cast<std::uint32_t>(std::clamp<std::int64_t>(left, 1, UINT32_MAX));
        protocol::patch_time_left({const_cast<std::uint8_t*>(e.frame.data()), e.frame.size()}, ms);
      }
    }
    in_flight_.push_back(std::move(e));
  }
}

void outbound_queue::begin_write(std::vector<std::span<const std::uint8_t>>& out,
                                 std::chrono::steady_clock::time_point now) {
  if (head_ == 0 && queued_bytes_ <= max_write_bytes && marked_ == 0) {
    // Everything (the usual case): swapping keeps both vectors' capacity,
    // no allocation once warmed up. queued_bytes_ is all pending here.
    in_flight_.swap(pending_);
  } else {
    std::size_t bytes = 0, end = head_;
    while (end < pending_.size() && (end == head_ || bytes + pending_[end].frame.size() <= max_write_bytes))
      bytes += pending_[end++].frame.size();
    if (marked_ == 0) {
      in_flight_.assign(std::make_move_iterator(pending_.begin() + static_cast<std::ptrdiff_t>(head_)),
                        std::make_move_iterator(pending_.begin() + static_cast<std::ptrdiff_t>(end)));
    } else {
      take_marked(end, now);
    }
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
    const frame_ref& f = in_flight_[i].frame;
    if (i > 0 && in_flight_[i - 1].frame.adjacent(f) && !out.empty()) {
      auto& last = out.back();
      last = {last.data(), last.size() + f.size()};
    } else {
      out.emplace_back(f.data(), f.size());
    }
  }
}

void outbound_queue::end_write() noexcept {
  for (const entry& e : in_flight_) queued_bytes_ -= e.frame.size();
  in_flight_.clear();
}

std::size_t outbound_queue::cancel(std::uint64_t offer_id) noexcept {
  if (offer_id == 0 || marked_ == 0) return 0;
  std::size_t n = 0;
  for (std::size_t i = head_; i < pending_.size(); ++i) {
    entry& e = pending_[i];
    if (e.meta.offer_id == offer_id && !e.cancelled) {
      e.cancelled = true;
      ++n;
    }
  }
  return n;
}

std::size_t outbound_queue::drop_pending() noexcept {
  const std::size_t n = pending_.size() - head_;
  for (std::size_t i = head_; i < pending_.size(); ++i) queued_bytes_ -= pending_[i].frame.size();
  pending_.clear();
  head_ = 0;
  marked_ = 0;
  return n;
}

void outbound_queue::clear() noexcept {
  pending_.clear();
  head_ = 0;
  in_flight_.clear();
  queued_bytes_ = 0;
  marked_ = 0;
}

}  // namespace switchyard::broker
