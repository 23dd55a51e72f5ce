#include "broker/cluster/remote_peer.hpp"

#include "protocol/frame_parser.hpp"

namespace switchyard::broker {

namespace wire = protocol::wire;

remote_peer::remote_peer(std::uint64_t id, protocol::frame_builder& builder, capability_set caps, bool offer_fields,
                         std::function<void(remote_peer&)> on_done)
    : peer(id, builder), offer_fields_(offer_fields), on_done_(std::move(on_done)) {
  granted_ = caps;
}

void remote_peer::send(protocol::bytes_view frame) {
  if (done_) return;
  // The marker's Pong: everything before it is answered.
  if (frame.size() > protocol::frame_header_size) {
    const auto* f = wire::GetSizePrefixedFrame(frame.data());
    if (f->message_type() == wire::Message::Pong && f->request_id() == done_marker) {
      done_ = true;
      on_done_(*this);
      return;
    }
  }
  answers_.insert(answers_.end(), frame.begin(), frame.end());
}

void remote_peer::close_with_error(protocol::errc code, std::string_view message) {
  // A handler found the request fatal for its connection: the origin's
  // client gets the Error (its own connection stays; the origin decides).
  send_error(0, code, message);
}

namespace {
constexpr std::uint32_t bit_dropped_notice = 1u << 0;
constexpr std::uint32_t bit_publish_ack = 1u << 1;
constexpr std::uint32_t bit_routing = 1u << 2;
constexpr std::uint32_t bit_sequence_log = 1u << 3;
constexpr std::uint32_t bit_stream_drops = 1u << 4;
constexpr std::uint32_t bit_admin = 1u << 5;
constexpr std::uint32_t bit_offers = 1u << 6;
constexpr std::uint32_t bit_offer_fields = 1u << 7;
}  // namespace

std::uint32_t capability_bits(const capability_set& c, bool offer_fields) noexcept {
  return (c.dropped_notice ? bit_dropped_notice : 0) | (c.publish_ack ? bit_publish_ack : 0) |
         (c.routing ? bit_routing : 0) | (c.sequence_log ? bit_sequence_log : 0) |
         (c.stream_drops ? bit_stream_drops : 0) | (c.admin ? bit_admin : 0) | (c.offers ? bit_offers : 0) |
         (offer_fields ? bit_offer_fields : 0);
}

capability_set capabilities_of(std::uint32_t bits, bool& offer_fields) noexcept {
  capability_set c;
  c.dropped_notice = (bits & bit_dropped_notice) != 0;
  c.publish_ack = (bits & bit_publish_ack) != 0;
  c.routing = (bits & bit_routing) != 0;
  c.sequence_log = (bits & bit_sequence_log) != 0;
  c.stream_drops = (bits & bit_stream_drops) != 0;
  c.admin = (bits & bit_admin) != 0;
  c.offers = (bits & bit_offers) != 0;
  offer_fields = (bits & bit_offer_fields) != 0;
  return c;
}

}  // namespace switchyard::broker
