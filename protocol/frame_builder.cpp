#include "protocol/frame_builder.hpp"

#include "protocol/limits.hpp"
#include "protocol/switchyard_generated.h"


namespace switchyard::protocol {
namespace {

using flatbuffers::Offset;
using flatbuffers::String;
using flatbuffers::Vector;

Offset<String> string_or_null(flatbuffers::FlatBufferBuilder& fbb, std::string_view s) {
  return s.empty() ? Offset<String>{} : fbb.CreateString(s.data(), s.size());
}

// `scratch` keeps its capacity between calls: no allocation once warm.
Offset<Vector<Offset<String>>> string_list(flatbuffers::FlatBufferBuilder& fbb,
                                           std::span<const std::string_view> items,
                                           std::vector<Offset<String>>& scratch) {
  if (items.empty()) return {};
  scratch.clear();
  for (const auto& item : items) scratch.push_back(fbb.CreateString(item.data(), item.size()));
  return fbb.CreateVector(scratch.data(), scratch.size());
}

}  // namespace

frame_builder::frame_builder(std::size_t initial_capacity) : fbb_(initial_capacity) {}

flatbuffers::FlatBufferBuilder& frame_builder::start() {
  fbb_.Clear();
  return fbb_;
}

bytes_view frame_builder::finish(std::uint64_t request_id, std::uint8_t message_type,
                                 Offset<void> message) {
  wire::FrameBuilder frame(fbb_);
  frame.add_request_id(request_id);
  frame.add_message(message);
  frame.add_message_type(static_cast<wire::Message>(message_type));
  // Padding every frame to frame_alignment keeps back-to-back frames aligned
  // in a reader's buffer, so it can verify them in place.
  fbb_.TrackMinAlign(frame_alignment);
  fbb_.FinishSizePrefixed(frame.Finish(), wire::FrameIdentifier());
  return {fbb_.GetBufferPointer(), fbb_.GetSize()};
}

bytes_view frame_builder::hello(std::uint64_t request_id, const hello_fields& f) {
  auto& fbb = start();
  const auto name = string_or_null(fbb, f.client_name);
  const auto version = string_or_null(fbb, f.client_version);
  const auto id = string_or_null(fbb, f.client_id);
  const auto credentials = string_or_null(fbb, f.credentials);
  const auto caps = string_list(fbb, f.capabilities, strings_);
  wire::HelloBuilder b(fbb);
  b.add_protocol_major(f.protocol_major);
  b.add_protocol_minor(f.protocol_minor);
  b.add_client_name(name);
  b.add_client_version(version);
  b.add_client_id(id);
  b.add_credentials(credentials);
  b.add_capabilities(caps);
  return finish(request_id, static_cast<std::uint8_t>(wire::Message::Hello), b.Finish().Union());
}

bytes_view frame_builder::welcome(std::uint64_t request_id, const welcome_fields& f) {
  auto& fbb = start();
  const auto version = string_or_null(fbb, f.server_version);
  const auto caps = string_list(fbb, f.capabilities, strings_);
  wire::WelcomeBuilder b(fbb);
  b.add_protocol_major(f.protocol_major);
  b.add_protocol_minor(f.protocol_minor);
  b.add_server_version(version);
  b.add_session_id(f.session_id);
  b.add_heartbeat_ms(f.heartbeat_ms);
  b.add_max_frame(f.max_frame);
  b.add_capabilities(caps);
  return finish(request_id, static_cast<std::uint8_t>(wire::Message::Welcome), b.Finish().Union());
}

bytes_view frame_builder::error(std::uint64_t request_id, errc code, std::string_view message,
                                std::uint32_t retry_after_ms, bool fatal) {
  auto& fbb = start();
  const auto text = string_or_null(fbb, message);
  wire::ErrorBuilder b(fbb);
  b.add_code(static_cast<wire::ErrorCode>(code));
  b.add_message(text);
  b.add_retry_after_ms(retry_after_ms);
  b.add_fatal(fatal);
  return finish(request_id, static_cast<std::uint8_t>(wire::Message::Error), b.Finish().Union());
}

bytes_view frame_builder::ping(std::uint64_t request_id) {
  auto& fbb = start();
  return finish(request_id, static_cast<std::uint8_t>(wire::Message::Ping),
                wire::CreatePing(fbb).Union());
}

bytes_view frame_builder::pong(std::uint64_t request_id) {
  auto& fbb = start();
  return finish(request_id, static_cast<std::uint8_t>(wire::Message::Pong),
                wire::CreatePong(fbb).Union());
}

bytes_view frame_builder::ok(std::uint64_t request_id) {
  auto& fbb = start();
  return finish(request_id, static_cast<std::uint8_t>(wire::Message::Ok),
                wire::CreateOk(fbb).Union());
}

bytes_view frame_builder::subscribe(std::uint64_t request_id, std::string_view pattern) {
  auto& fbb = start();
  const auto p = fbb.CreateString(pattern.data(), pattern.size());
  return finish(request_id, static_cast<std::uint8_t>(wire::Message::Subscribe),
                wire::CreateSubscribe(fbb, p).Union());
}

bytes_view frame_builder::unsubscribe(std::uint64_t request_id, std::string_view pattern) {
  auto& fbb = start();
  const auto p = fbb.CreateString(pattern.data(), pattern.size());
  return finish(request_id, static_cast<std::uint8_t>(wire::Message::Unsubscribe),
                wire::CreateUnsubscribe(fbb, p).Union());
}

bytes_view frame_builder::publish(std::uint64_t request_id, std::string_view channel,
                                  bytes_view payload) {
  auto& fbb = start();
  const auto data = fbb.CreateVector(payload.data(), payload.size());
  const auto ch = fbb.CreateString(channel.data(), channel.size());
  return finish(request_id, static_cast<std::uint8_t>(wire::Message::Publish),
                wire::CreatePublish(fbb, ch, data).Union());
}

bytes_view frame_builder::deliver(std::string_view channel, bytes_view payload) {
  auto& fbb = start();
  const auto data = fbb.CreateVector(payload.data(), payload.size());
  const auto ch = fbb.CreateString(channel.data(), channel.size());
  return finish(0, static_cast<std::uint8_t>(wire::Message::Deliver),
                wire::CreateDeliver(fbb, ch, data).Union());
}

bytes_view frame_builder::dropped(std::uint64_t count) {
  auto& fbb = start();
  return finish(0, static_cast<std::uint8_t>(wire::Message::Dropped),
                wire::CreateDropped(fbb, count).Union());
}

}  // namespace switchyard::protocol
