#pragma once
// A delivery_target that keeps what fan-out hands it, decoded, so that
// fan-out and routing can be tested without sockets.

#include "broker/tables/delivery_target.hpp"
#include "protocol/frame_parser.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace switchyard::test {

class recording_target final : public broker::delivery_target {
 public:
  explicit recording_target(bool log_positions = false) : log_positions_(log_positions) {}

  // One delivered frame: its bytes (copied), and whether it was the shared
  // reference (deliver(const frame_ref&)) or an own copy.
  struct delivery {
    std::vector<std::uint8_t> bytes;
    bool shared = false;
    const std::uint8_t* shared_data = nullptr;  // the arena bytes of a shared frame
    const protocol::wire::Frame& frame() const { return *protocol::wire::GetSizePrefixedFrame(bytes.data()); }
  };

  void deliver(const broker::frame_ref& f) override {
    deliveries.push_back({std::vector<std::uint8_t>(f.data(), f.data() + f.size()), true, f.data()});
  }
  void deliver(protocol::bytes_view f) override {
    deliveries.push_back({std::vector<std::uint8_t>(f.begin(), f.end()), false, nullptr});
  }
  bool wants_log_positions() const noexcept override { return log_positions_; }
  void deliver(const broker::frame_ref& f, const broker::delivery_meta& meta) override {
    deliver(f);
    metas.push_back(meta);
  }
  void deliver(protocol::bytes_view f, const broker::delivery_meta& meta) override {
    deliver(f);
    metas.push_back(meta);
  }
  bool wants_offer_fields() const noexcept override { return offer_fields; }
  std::size_t withdraw(std::uint64_t offer_id) override {
    withdrawn.push_back(offer_id);
    return 0;
  }
  void notify(protocol::bytes_view f) override { notices.emplace_back(f.begin(), f.end()); }

  std::vector<delivery> deliveries;
  std::vector<broker::delivery_meta> metas;  // of the deliveries made with one (not index-aligned)
  std::vector<std::uint64_t> withdrawn;
  std::vector<std::vector<std::uint8_t>> notices;
  bool offer_fields = false;

 private:
  bool log_positions_;
};

}  // namespace switchyard::test
