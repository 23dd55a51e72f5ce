#pragma once
// Encodes protocol frames (length prefix + FlatBuffers buffer).

#include "protocol/errc.hpp"

#include <flatbuffers/flatbuffers.h>

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace switchyard::protocol {

using bytes_view = std::span<const std::uint8_t>;

struct hello_fields {
  std::uint16_t protocol_major = 0;
  std::uint16_t protocol_minor = 0;
  std::string_view client_name;
  std::string_view client_version;
  std::string_view client_id;
  std::string_view credentials;
  std::span<const std::string_view> capabilities;
};

struct welcome_fields {
  std::uint16_t protocol_major = 0;
  std::uint16_t protocol_minor = 0;
  std::string_view server_version;
  std::uint64_t session_id = 0;
  std::uint32_t heartbeat_ms = 0;
  std::uint32_t max_frame = 0;
  std::span<const std::string_view> capabilities;
};

// Builds one frame at a time into a reusable buffer, so steady-state encoding
// allocates nothing. Every method returns the whole frame (4-byte
// little-endian length prefix included, size a multiple of
// frame_alignment); the view stays valid until the next call on this
// builder. Not thread-safe: use one builder per thread.
class frame_builder {
 public:
  explicit frame_builder(std::size_t initial_capacity = 1024);

  bytes_view hello(std::uint64_t request_id, const hello_fields& f);
  bytes_view welcome(std::uint64_t request_id, const welcome_fields& f);
  bytes_view error(std::uint64_t request_id, errc code, std::string_view message,
                   std::uint32_t retry_after_ms = 0, bool fatal = false);
  bytes_view ping(std::uint64_t request_id = 0);
  bytes_view pong(std::uint64_t request_id = 0);
  bytes_view ok(std::uint64_t request_id);
  bytes_view subscribe(std::uint64_t request_id, std::string_view pattern);
  bytes_view unsubscribe(std::uint64_t request_id, std::string_view pattern);
  bytes_view publish(std::uint64_t request_id, std::string_view channel, bytes_view payload);
  bytes_view deliver(std::string_view channel, bytes_view payload);
  bytes_view dropped(std::uint64_t count);

  // Escape hatch for tests and future messages: the builder to fill, then
  // finish(request_id, type, offset).
  flatbuffers::FlatBufferBuilder& start();
  bytes_view finish(std::uint64_t request_id, std::uint8_t message_type,
                    flatbuffers::Offset<void> message);

 private:
  flatbuffers::FlatBufferBuilder fbb_;
  std::vector<flatbuffers::Offset<flatbuffers::String>> strings_;
};

}  // namespace switchyard::protocol
