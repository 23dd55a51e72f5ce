#pragma once
// A broker::peer without a socket: it keeps the frames it is sent and
// delivered (decoded on demand) and how it was closed, so that dispatch and
// the handlers can be tested without a connection.

#include "broker/requests/peer.hpp"
#include "protocol/frame_parser.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace switchyard::test {

class recording_peer final : public broker::peer, public std::enable_shared_from_this<recording_peer> {
 public:
  recording_peer(std::uint64_t id, protocol::frame_builder& builder, broker::capability_set granted = {})
      : peer(id, builder) {
    granted_ = granted;
  }

  void send(protocol::bytes_view f) override { sent.emplace_back(f.begin(), f.end()); }
  void deliver(const broker::frame_ref& f) override { delivered.emplace_back(f.data(), f.data() + f.size()); }
  void deliver(protocol::bytes_view f) override { delivered.emplace_back(f.begin(), f.end()); }
  void deliver(const broker::frame_ref& f, const broker::delivery_meta&) override { deliver(f); }
  void deliver(protocol::bytes_view f, const broker::delivery_meta&) override { deliver(f); }
  bool wants_offer_fields() const noexcept override { return false; }
  std::size_t withdraw(std::uint64_t) override { return 0; }
  void notify(protocol::bytes_view f) override { send(f); }
  void close_with_error(protocol::errc code, std::string_view message) override {
    if (!closed_with) closed_with = code, close_reason = std::string(message);
  }
  bool closed() const noexcept override { return closed_with.has_value(); }
  std::weak_ptr<peer> weak_peer() noexcept override { return weak_from_this(); }
  void restart_drop_reports() noexcept override { ++drop_report_restarts; }
  void report_lost(std::uint64_t count) override { lost_reported += count; }

  // The i-th frame sent (an answer), decoded.
  const protocol::wire::Frame& answer(std::size_t i) const {
    return *protocol::wire::GetSizePrefixedFrame(sent.at(i).data());
  }

  std::vector<std::vector<std::uint8_t>> sent;
  std::vector<std::vector<std::uint8_t>> delivered;
  std::optional<protocol::errc> closed_with;
  std::string close_reason;
  std::uint64_t lost_reported = 0;
  int drop_report_restarts = 0;
};

}  // namespace switchyard::test
