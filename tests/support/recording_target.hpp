#pragma once
// A delivery_target that keeps what fan-out hands it, decoded, so that
// fan-out and routing can be tested without sockets.

#include "broker/delivery_target.hpp"
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

  std::vector<delivery> deliveries;

 private:
  bool log_positions_;
};

}  // namespace switchyard::test
