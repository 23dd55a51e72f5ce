#include "protocol/frame_parser.hpp"

#include "protocol/limits.hpp"

#include <cstring>

namespace switchyard::protocol {

std::uint32_t read_frame_length(const std::uint8_t* p) noexcept {
  return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
         static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
}

frame_parser::frame_parser(std::uint32_t max_frame) : max_frame_(max_frame) {}

std::expected<std::optional<frame_view>, std::error_code> frame_parser::next(bytes_view in) {
  if (in.size() < frame_header_size) {
    needed_ = frame_header_size;
    return std::nullopt;
  }
  const std::uint32_t length = read_frame_length(in.data());
  if (length > max_frame_) return std::unexpected(make_error_code(errc::frame_too_large));
  // Smallest valid buffer: root offset + identifier + a table; anything
  // shorter cannot verify, and rejecting it early keeps the message clear.
  if (length < 12) return std::unexpected(make_error_code(errc::malformed_frame));
  const std::size_t total = frame_header_size + length;
  if (in.size() < total) {
    needed_ = total;
    return std::nullopt;
  }
  needed_ = 0;

  const std::uint8_t* base = in.data();
  // FlatBuffers reads scalars in place, so the frame must sit at an 8-byte
  // boundary. Our own encoders keep frames aligned; a frame from another
  // encoder may not be, and is copied once.
  if (reinterpret_cast<std::uintptr_t>(base) % frame_alignment != 0) {
    scratch_.resize((total + 7) / 8);
    std::memcpy(scratch_.data(), base, total);
    base = reinterpret_cast<const std::uint8_t*>(scratch_.data());
  }

  if (!flatbuffers::BufferHasIdentifier(base, wire::FrameIdentifier(), /*size_prefixed=*/true))
    return std::unexpected(make_error_code(errc::malformed_frame));
  flatbuffers::Verifier verifier(base, total, verifier_max_depth, verifier_max_tables);
  if (!wire::VerifySizePrefixedFrameBuffer(verifier)) return std::unexpected(make_error_code(errc::malformed_frame));

  const wire::Frame* frame = wire::GetSizePrefixedFrame(base);
  const auto type = frame->message_type();
  if (type == wire::Message::NONE || type > wire::Message::MAX || frame->message() == nullptr)
    return std::unexpected(make_error_code(errc::unsupported_message));
  return frame_view{frame, total, base != in.data()};
}

std::expected<const wire::Frame*, std::error_code> decode_frame(bytes_view bytes, std::uint32_t max_frame) {
  frame_parser parser(max_frame);
  auto r = parser.next(bytes);
  if (!r) return std::unexpected(r.error());
  if (!*r || (*r)->size != bytes.size()) return std::unexpected(make_error_code(errc::malformed_frame));
  // The view may point into the parser's scratch buffer, which dies here;
  // decode_frame is only for aligned input, where the view borrows `bytes`.
  if (reinterpret_cast<std::uintptr_t>(bytes.data()) % frame_alignment != 0)
    return std::unexpected(make_error_code(errc::malformed_frame));
  return (*r)->frame;
}

bool patch_time_left(std::span<std::uint8_t> frame, std::uint32_t time_left_ms) noexcept {
  auto* f = wire::GetMutableSizePrefixedFrame(frame.data());
  switch (f->message_type()) {
    case wire::Message::Deliver:
      return static_cast<wire::Deliver*>(f->mutable_message())->mutate_time_left_ms(time_left_ms);
    case wire::Message::InboxDelivery:
      return static_cast<wire::InboxDelivery*>(f->mutable_message())->mutate_time_left_ms(time_left_ms);
    default:
      return false;
  }
}

}  // namespace switchyard::protocol
