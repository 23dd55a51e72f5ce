#include "broker/cluster/remote_node.hpp"

#include <algorithm>
#include <cstring>

namespace switchyard::broker {

namespace {
std::uint32_t time_left(const delivery_meta& meta) {
  if (meta.deadline == std::chrono::steady_clock::time_point{}) return 0;
  const auto left =
      std::chrono::ceil<std::chrono::milliseconds>(meta.deadline - std::chrono::steady_clock::now()).count();
  return static_cast<std::uint32_t>(std::clamp<std::int64_t>(left, 1, UINT32_MAX));
}

void put_u32(std::byte* at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) at[i] = static_cast<std::byte>(v >> (8 * i));
}
}  // namespace

remote_node::remote_node(cluster_member member, const bool& relaying, std::size_t full_bytes,
                         std::function<void(remote_node&, bool full)> batch_grew)
    : member_(std::move(member)), relaying_(relaying), full_bytes_(full_bytes), batch_grew_(std::move(batch_grew)) {}

void remote_node::deliver(const frame_ref& frame, const delivery_meta& meta) { add(frame.bytes(), time_left(meta)); }

void remote_node::deliver(protocol::bytes_view frame, const delivery_meta& meta) { add(frame, time_left(meta)); }

void remote_node::add(protocol::bytes_view frame, std::uint32_t time_left_ms) {
  if (relaying_) return;
  const std::size_t padded = (frame.size() + 7) & ~std::size_t{7};
  if (!batch_.empty() && batch_.size() + 8 + padded > full_bytes_) batch_grew_(*this, true);  // sends it: empty after
  const bool first = batch_.empty();
  const std::size_t at = batch_.size();
  batch_.resize(at + 8 + padded);  // zero padding: resize value-initializes
  put_u32(batch_.data() + at, static_cast<std::uint32_t>(frame.size()));
  put_u32(batch_.data() + at + 4, time_left_ms);
  std::memcpy(batch_.data() + at + 8, frame.data(), frame.size());
  ++batched_records_;
  if (first) batch_grew_(*this, false);
}

}  // namespace switchyard::broker
