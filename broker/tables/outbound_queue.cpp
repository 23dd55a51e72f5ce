#include "broker/tables/outbound_queue.hpp"

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
  if (!meta.plain()) marked_.push_back({head_seq_ + (pending_.size() - head_), meta, false});
  pending_.push_back(std::move(f));
}

void outbound_queue::take_marked(std::size_t end, std::chrono::steady_clock::time_point now) {
  in_flight_.clear();
  for (std::size_t i = head_; i < end; ++i) {
    frame_ref& f = pending_[i];
    if (!marked_.empty() && marked_.front().seq == head_seq_ + (i - head_)) {
      const marked m = marked_.front();
      marked_.pop_front();
      const bool expired = m.meta.deadline != std::chrono::steady_clock::time_point{} && now >= m.meta.deadline;
      if (m.cancelled || expired) {
        ++(m.cancelled ? cancelled_ : expired_);
        queued_bytes_ -= f.size();
        f.reset();
        continue;
      }
      if (m.meta.refresh_time_left) {
        // Rounded up: a frame written with 0.3 ms left says 1, not 0 ("no expiry").
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(m.meta.deadline - now).count();
        const auto ms = static_cast<std::uint32_t>(std::clamp<std::int64_t>(left, 1, UINT32_MAX));
        protocol::patch_time_left({const_cast<std::uint8_t*>(f.data()), f.size()}, ms);
      }
    }
    in_flight_.push_back(std::move(f));
  }
}

void outbound_queue::begin_write(std::vector<std::span<const std::uint8_t>>& out,
                                 std::chrono::steady_clock::time_point now) {
  if (head_ == 0 && queued_bytes_ <= max_write_bytes && marked_.empty()) {
    // Everything (the usual case): swapping keeps both vectors' capacity,
    // no allocation once warmed up. queued_bytes_ is all pending here.
    head_seq_ += pending_.size();
    in_flight_.swap(pending_);
  } else {
    std::size_t bytes = 0, end = head_;
    while (end < pending_.size() && (end == head_ || bytes + pending_[end].size() <= max_write_bytes))
      bytes += pending_[end++].size();
    if (marked_.empty() || marked_.front().seq >= head_seq_ + (end - head_)) {
      in_flight_.assign(std::make_move_iterator(pending_.begin() + static_cast<std::ptrdiff_t>(head_)),
                        std::make_move_iterator(pending_.begin() + static_cast<std::ptrdiff_t>(end)));
    } else {
      take_marked(end, now);
    }
    head_seq_ += end - head_;
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

std::size_t outbound_queue::cancel(std::uint64_t offer_id) noexcept {
  if (offer_id == 0) return 0;
  std::size_t n = 0;
  for (marked& m : marked_)
    if (m.meta.offer_id == offer_id && !m.cancelled) {
      m.cancelled = true;
      ++n;
    }
  return n;
}

std::size_t outbound_queue::drop_pending() noexcept {
  const std::size_t n = pending_.size() - head_;
  for (std::size_t i = head_; i < pending_.size(); ++i) queued_bytes_ -= pending_[i].size();
  head_seq_ += n;
  pending_.clear();
  head_ = 0;
  marked_.clear();
  return n;
}

void outbound_queue::clear() noexcept {
  head_seq_ += pending_.size() - head_;
  pending_.clear();
  head_ = 0;
  in_flight_.clear();
  queued_bytes_ = 0;
  marked_.clear();
}

}  // namespace switchyard::broker
