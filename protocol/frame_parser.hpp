#pragma once
// Splits a byte stream into verified frames.

#include "protocol/frame_builder.hpp"
#include "protocol/switchyard_generated.h"

#include <cstdint>
#include <expected>
#include <optional>
#include <span>
#include <system_error>
#include <vector>

namespace switchyard::protocol {

struct frame_view {
  const wire::Frame* frame = nullptr;  // verified root; valid while the input bytes are
  std::size_t size = 0;                // bytes the frame occupies in the input (prefix included)
  // The frame was misaligned and `frame` points into the parser's scratch
  // copy: valid only until the parser's next call, whatever the input does.
  bool in_scratch = false;
};

// Finds, bounds-checks and verifies the frame at the front of a byte stream.
// Stateless apart from the size limit and an alignment scratch buffer; one
// parser per connection, used from one thread.
class frame_parser {
 public:
  explicit frame_parser(std::uint32_t max_frame);

  void set_max_frame(std::uint32_t max_frame) noexcept { max_frame_ = max_frame; }
  std::uint32_t max_frame() const noexcept { return max_frame_; }

  // Looks at the front of `in`:
  //  - a complete, verified frame: its view (borrowing `in`, or the parser's
  //    scratch copy when `in` is not 8-byte aligned; valid until the next
  //    call) and its size;
  //  - std::nullopt: not enough bytes yet; `needed()` says how many in all;
  //  - errc::frame_too_large: the length prefix exceeds max_frame;
  //  - errc::malformed_frame: too short, wrong identifier or failed verification;
  //  - errc::unsupported_message: no message, or a union tag this build does not know.
  std::expected<std::optional<frame_view>, std::error_code> next(bytes_view in);

  // Total bytes the frame at the front needs (header + body), after next()
  // returned nullopt; frame_header_size while the header is incomplete.
  std::size_t needed() const noexcept { return needed_; }

  // Frees the scratch copy when it is larger than 64 KiB (a large
  // misaligned frame), so it does not stay allocated. Call between reads.
  void trim_scratch() noexcept {
    if (scratch_.capacity() * sizeof(std::uint64_t) > 64 * 1024) scratch_ = {};
  }

 private:
  std::uint32_t max_frame_;
  std::size_t needed_ = 0;
  std::vector<std::uint64_t> scratch_;
};

// Verifies one complete frame held in `bytes` (exactly one frame, starting
// at an 8-byte boundary; the result borrows `bytes`). For tests and tools;
// same errors as frame_parser::next, plus malformed_frame when the frame is
// incomplete, followed by extra bytes, or misaligned.
std::expected<const wire::Frame*, std::error_code> decode_frame(bytes_view bytes, std::uint32_t max_frame);

// Reads the little-endian length prefix at `p` (4 bytes).
std::uint32_t read_frame_length(const std::uint8_t* p) noexcept;

// Rewrites, in place, the time_left_ms of a Deliver or InboxDelivery frame
// this process encoded with a non-zero time_left_ms (the field is then in
// the buffer). `frame` starts at the length prefix. Returns false (and
// changes nothing) for any other frame. Does not verify: only for frames
// built by frame_builder.
bool patch_time_left(std::span<std::uint8_t> frame, std::uint32_t time_left_ms) noexcept;

}  // namespace switchyard::protocol
