#include "broker/tables/exposure_table.hpp"

#include <algorithm>

namespace switchyard::broker {

namespace {
std::int64_t ns(exposure_table::clock::time_point t) noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
}  // namespace

std::uint32_t exposure_table::count(std::string_view key, clock::duration window, clock::time_point now) const {
  const auto it = keys_.find(key);
  if (it == keys_.end()) return 0;
  const std::int64_t since =
      ns(now) - std::chrono::duration_cast<std::chrono::nanoseconds>(std::min(window, window_)).count();
  std::uint32_t n = 0;
  const ring& r = it->second.times;
  for (std::uint32_t i = 0; i < r.size; ++i)
    if (r.at[(r.next + history - 1 - i) % history] > since)
      ++n;
    else
      break;  // newest first: the rest are older still
  return n;
}

bool exposure_table::record(std::string_view key, clock::time_point now) {
  auto it = keys_.find(key);
  if (it == keys_.end()) {
    if (keys_.size() >= max_keys_) return false;
    it = keys_.emplace(std::string(key), entry{}).first;
    it->second.place = by_last_.insert(by_last_.end(), &it->first);
    key_bytes_ += key.size();
  } else {
    by_last_.splice(by_last_.end(), by_last_, it->second.place);  // iterators stay valid
  }
  ring& r = it->second.times;
  r.at[r.next] = ns(now);
  r.next = (r.next + 1) % history;
  r.size = std::min(r.size + 1, history);
  return true;
}

std::size_t exposure_table::sweep(clock::time_point now) {
  const std::int64_t since = ns(now) - std::chrono::duration_cast<std::chrono::nanoseconds>(window_).count();
  std::size_t gone = 0;
  while (!by_last_.empty()) {
    const auto it = keys_.find(std::string_view(*by_last_.front()));
    if (it->second.times.last() > since) break;  // and every key after it: offered later
    key_bytes_ -= it->first.size();
    by_last_.pop_front();
    keys_.erase(it);
    ++gone;
  }
  return gone;
}

}  // namespace switchyard::broker
