// Unit tests for protocol::frame_builder, protocol::frame_parser and
// protocol::decode_frame: round trips of every message, framing (length
// prefix, alignment, back-to-back frames, partial input) and verifier
// rejections.

#include "protocol/errc.hpp"
#include "protocol/frame_builder.hpp"
#include "protocol/frame_parser.hpp"
#include "protocol/limits.hpp"
#include "protocol/switchyard_generated.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace switchyard::protocol;
namespace wire = switchyard::protocol::wire;

// A byte buffer whose first byte sits at an 8-byte boundary (backed by
// 64-bit words), like a connection's read buffer.
class aligned_buffer {
 public:
  explicit aligned_buffer(std::size_t size = 0) : words_((size + 7) / 8 + 1), size_(size) {}
  explicit aligned_buffer(bytes_view bytes) : aligned_buffer(bytes.size()) {
    if (!bytes.empty()) std::memcpy(data(), bytes.data(), bytes.size());
  }

  std::uint8_t* data() noexcept { return reinterpret_cast<std::uint8_t*>(words_.data()); }
  const std::uint8_t* data() const noexcept { return reinterpret_cast<const std::uint8_t*>(words_.data()); }
  std::size_t size() const noexcept { return size_; }
  bytes_view view() const noexcept { return {data(), size_}; }
  bytes_view view(std::size_t offset, std::size_t length) const noexcept { return {data() + offset, length}; }

  void append(bytes_view bytes) {
    const std::size_t old = size_;
    resize(size_ + bytes.size());
    std::memcpy(data() + old, bytes.data(), bytes.size());
  }
  void resize(std::size_t size) {
    words_.resize((size + 7) / 8 + 1);
    size_ = size;
  }

 private:
  std::vector<std::uint64_t> words_;
  std::size_t size_;
};

void write_frame_length(std::uint8_t* p, std::uint32_t length) {
  p[0] = static_cast<std::uint8_t>(length);
  p[1] = static_cast<std::uint8_t>(length >> 8);
  p[2] = static_cast<std::uint8_t>(length >> 16);
  p[3] = static_cast<std::uint8_t>(length >> 24);
}

std::string str(const flatbuffers::String* s) {
  REQUIRE(s != nullptr);
  return s->str();
}

std::vector<std::string> strings(const flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>* v) {
  REQUIRE(v != nullptr);
  std::vector<std::string> out;
  for (const auto* s : *v) out.push_back(s->str());
  return out;
}

std::vector<std::uint8_t> bytes_of(const flatbuffers::Vector<std::uint8_t>* v) {
  REQUIRE(v != nullptr);
  return {v->begin(), v->end()};
}

// Decodes an encoded frame copied to an aligned buffer; the buffer must
// outlive the returned pointer, so the caller owns it.
const wire::Frame* decode_ok(const aligned_buffer& buf, std::uint32_t max_frame = default_max_frame) {
  auto r = decode_frame(buf.view(), max_frame);
  if (!r) FAIL("decode_frame failed: " << r.error().message());
  REQUIRE(*r != nullptr);
  return *r;
}

std::error_code decode_error(const aligned_buffer& buf, std::uint32_t max_frame = default_max_frame) {
  auto r = decode_frame(buf.view(), max_frame);
  REQUIRE_FALSE(r.has_value());
  return r.error();
}

// Reads every field of a verified frame, so ASan sees any out-of-bounds
// access a verifier hole would allow.
std::size_t touch_all_fields(const wire::Frame* f) {
  std::size_t sum = f->request_id() & 0xff;
  auto s = [&](const flatbuffers::String* p) {
    if (p) sum += p->str().size();
  };
  auto sv = [&](const flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>* v) {
    if (v)
      for (const auto* x : *v) s(x);
  };
  auto bv = [&](const flatbuffers::Vector<std::uint8_t>* v) {
    if (v)
      for (const auto b : *v) sum += b;
  };
  switch (f->message_type()) {
    case wire::Message::Hello: {
      const auto* m = f->message_as_Hello();
      sum += m->protocol_major() + m->protocol_minor();
      s(m->client_name()), s(m->client_version()), s(m->client_id()), s(m->credentials());
      sv(m->capabilities());
      break;
    }
    case wire::Message::Welcome: {
      const auto* m = f->message_as_Welcome();
      sum += m->protocol_major() + m->session_id() + m->heartbeat_ms() + m->max_frame();
      s(m->server_version());
      sv(m->capabilities());
      break;
    }
    case wire::Message::Error: {
      const auto* m = f->message_as_Error();
      sum += static_cast<std::size_t>(m->code()) + m->retry_after_ms() + m->fatal();
      s(m->message());
      break;
    }
    case wire::Message::Subscribe:
      s(f->message_as_Subscribe()->pattern());
      break;
    case wire::Message::Unsubscribe:
      s(f->message_as_Unsubscribe()->pattern());
      break;
    case wire::Message::Publish:
      s(f->message_as_Publish()->channel());
      bv(f->message_as_Publish()->payload());
      break;
    case wire::Message::Deliver:
      s(f->message_as_Deliver()->channel());
      bv(f->message_as_Deliver()->payload());
      break;
    case wire::Message::Dropped:
      sum += f->message_as_Dropped()->count();
      break;
    default:
      break;
  }
  return sum;
}

const std::vector<std::uint8_t> binary_payload{0x00, 0x01, 0x00, 0xff, 0x7f, 0x80, 0x00, 0x00, 0x2a, 0x00};

}  // namespace

// ---------------------------------------------------------------------------
// Round trips

TEST_CASE("hello round-trips with every field and its capability list", "[protocol]") {
  frame_builder b;
  const std::array<std::string_view, 3> caps{capability::dropped_notice, capability::publish_ack, "x-experimental"};
  hello_fields h;
  h.protocol_major = 1;
  h.protocol_minor = 7;
  h.client_name = "gateway";
  h.client_version = "2.3.4";
  h.client_id = "gw-eu-1";
  h.credentials = "token:abc";
  h.capabilities = caps;
  const aligned_buffer buf(b.hello(42, h));

  const auto* f = decode_ok(buf);
  CHECK(f->request_id() == 42);
  REQUIRE(f->message_type() == wire::Message::Hello);
  const auto* m = f->message_as_Hello();
  REQUIRE(m != nullptr);
  CHECK(m->protocol_major() == 1);
  CHECK(m->protocol_minor() == 7);
  CHECK(str(m->client_name()) == "gateway");
  CHECK(str(m->client_version()) == "2.3.4");
  CHECK(str(m->client_id()) == "gw-eu-1");
  CHECK(str(m->credentials()) == "token:abc");
  CHECK(strings(m->capabilities()) == std::vector<std::string>{"dropped-notice", "publish-ack", "x-experimental"});
}

TEST_CASE("hello with empty optional strings and no capabilities omits those fields", "[protocol]") {
  frame_builder b;
  hello_fields h;
  h.protocol_major = 1;
  const aligned_buffer buf(b.hello(1, h));

  const auto* m = decode_ok(buf)->message_as_Hello();
  REQUIRE(m != nullptr);
  CHECK(m->protocol_major() == 1);
  CHECK(m->client_name() == nullptr);
  CHECK(m->client_version() == nullptr);
  CHECK(m->client_id() == nullptr);
  CHECK(m->credentials() == nullptr);
  CHECK(m->capabilities() == nullptr);
}

// Regression: the builder once kept at most 64 list entries.
TEST_CASE("hello with more than 64 capabilities keeps every capability", "[protocol]") {
  frame_builder b;
  std::vector<std::string> names;
  for (int i = 0; i < 65; ++i) names.push_back("cap-" + std::to_string(i));
  const std::vector<std::string_view> caps(names.begin(), names.end());
  hello_fields h;
  h.protocol_major = 1;
  h.capabilities = caps;
  const aligned_buffer buf(b.hello(1, h));

  const auto* m = decode_ok(buf)->message_as_Hello();
  REQUIRE(m != nullptr);
  REQUIRE(m->capabilities() != nullptr);
  CHECK(m->capabilities()->size() == 65);
}

TEST_CASE("welcome round-trips with session id, heartbeat, max frame and capabilities", "[protocol]") {
  frame_builder b;
  const std::array<std::string_view, 1> caps{capability::publish_ack};
  welcome_fields w;
  w.protocol_major = 1;
  w.protocol_minor = 2;
  w.server_version = "0.1.0";
  w.session_id = 0x0123456789abcdefULL;
  w.heartbeat_ms = 5000;
  w.max_frame = 1u << 20;
  w.capabilities = caps;
  const aligned_buffer buf(b.welcome(42, w));

  const auto* f = decode_ok(buf);
  CHECK(f->request_id() == 42);
  const auto* m = f->message_as_Welcome();
  REQUIRE(m != nullptr);
  CHECK(m->protocol_major() == 1);
  CHECK(m->protocol_minor() == 2);
  CHECK(str(m->server_version()) == "0.1.0");
  CHECK(m->session_id() == 0x0123456789abcdefULL);
  CHECK(m->heartbeat_ms() == 5000);
  CHECK(m->max_frame() == (1u << 20));
  CHECK(strings(m->capabilities()) == std::vector<std::string>{"publish-ack"});
}

TEST_CASE("error round-trips with code, message, retry hint and fatal flag", "[protocol]") {
  frame_builder b;
  const aligned_buffer buf(b.error(9, errc::rate_limited, "slow down", 1500, true));

  const auto* f = decode_ok(buf);
  CHECK(f->request_id() == 9);
  const auto* m = f->message_as_Error();
  REQUIRE(m != nullptr);
  CHECK(m->code() == wire::ErrorCode::rate_limited);
  CHECK(static_cast<int>(m->code()) == static_cast<int>(errc::rate_limited));
  CHECK(str(m->message()) == "slow down");
  CHECK(m->retry_after_ms() == 1500);
  CHECK(m->fatal());
}

TEST_CASE("error without retry hint or fatal flag decodes them as 0 and false", "[protocol]") {
  frame_builder b;
  const aligned_buffer buf(b.error(0, errc::bad_request, "bad channel name"));

  const auto* f = decode_ok(buf);
  CHECK(f->request_id() == 0);
  const auto* m = f->message_as_Error();
  REQUIRE(m != nullptr);
  CHECK(m->code() == wire::ErrorCode::bad_request);
  CHECK(str(m->message()) == "bad channel name");
  CHECK(m->retry_after_ms() == 0);
  CHECK_FALSE(m->fatal());
}

TEST_CASE("ping round-trips with its request id", "[protocol]") {
  frame_builder b;
  const aligned_buffer buf(b.ping(77));
  const auto* f = decode_ok(buf);
  CHECK(f->request_id() == 77);
  CHECK(f->message_type() == wire::Message::Ping);
  CHECK(f->message_as_Ping() != nullptr);

  const aligned_buffer no_id(b.ping());
  CHECK(decode_ok(no_id)->request_id() == 0);
}

TEST_CASE("pong round-trips with its request id", "[protocol]") {
  frame_builder b;
  const aligned_buffer buf(b.pong(0xffffffffffffffffULL));
  const auto* f = decode_ok(buf);
  CHECK(f->request_id() == 0xffffffffffffffffULL);
  CHECK(f->message_type() == wire::Message::Pong);
  CHECK(f->message_as_Pong() != nullptr);
}

TEST_CASE("ok round-trips with its request id", "[protocol]") {
  frame_builder b;
  const aligned_buffer buf(b.ok(123456789));
  const auto* f = decode_ok(buf);
  CHECK(f->request_id() == 123456789);
  CHECK(f->message_type() == wire::Message::Ok);
  CHECK(f->message_as_Ok() != nullptr);
}

TEST_CASE("subscribe round-trips with its pattern", "[protocol]") {
  frame_builder b;
  const aligned_buffer buf(b.subscribe(5, "orders.*.created"));
  const auto* f = decode_ok(buf);
  CHECK(f->request_id() == 5);
  const auto* m = f->message_as_Subscribe();
  REQUIRE(m != nullptr);
  CHECK(str(m->pattern()) == "orders.*.created");
}

TEST_CASE("unsubscribe round-trips with its pattern", "[protocol]") {
  frame_builder b;
  const aligned_buffer buf(b.unsubscribe(6, "orders.>"));
  const auto* f = decode_ok(buf);
  CHECK(f->request_id() == 6);
  const auto* m = f->message_as_Unsubscribe();
  REQUIRE(m != nullptr);
  CHECK(str(m->pattern()) == "orders.>");
}

TEST_CASE("publish round-trips with channel and a binary payload containing zero bytes", "[protocol]") {
  frame_builder b;
  const aligned_buffer buf(b.publish(11, "orders.eu.created", binary_payload));
  const auto* f = decode_ok(buf);
  CHECK(f->request_id() == 11);
  const auto* m = f->message_as_Publish();
  REQUIRE(m != nullptr);
  CHECK(str(m->channel()) == "orders.eu.created");
  CHECK(bytes_of(m->payload()) == binary_payload);
}

TEST_CASE("publish with an empty payload round-trips as an empty payload", "[protocol]") {
  frame_builder b;
  const aligned_buffer buf(b.publish(0, "a", {}));
  const auto* m = decode_ok(buf)->message_as_Publish();
  REQUIRE(m != nullptr);
  CHECK(str(m->channel()) == "a");
  CHECK(bytes_of(m->payload()).empty());
}

TEST_CASE("publish with a large payload round-trips byte for byte", "[protocol]") {
  frame_builder b(64);  // the builder grows past its initial capacity
  std::vector<std::uint8_t> payload(100000);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<std::uint8_t>(i * 31 + 7);
  const aligned_buffer buf(b.publish(3, "bulk.data", payload));
  const auto* m = decode_ok(buf)->message_as_Publish();
  REQUIRE(m != nullptr);
  CHECK(bytes_of(m->payload()) == payload);
}

TEST_CASE("deliver round-trips with channel and binary payload and no request id", "[protocol]") {
  frame_builder b;
  const aligned_buffer buf(b.deliver("orders.eu.created", binary_payload));
  const auto* f = decode_ok(buf);
  CHECK(f->request_id() == 0);
  const auto* m = f->message_as_Deliver();
  REQUIRE(m != nullptr);
  CHECK(str(m->channel()) == "orders.eu.created");
  CHECK(bytes_of(m->payload()) == binary_payload);
}

TEST_CASE("records round-trip with each record's channel and route keys, omitted when empty", "[protocol]") {
  frame_builder b;
  const std::array<std::string_view, 3> keys{"user:a", "", "user:c"};
  const std::array<record_fields, 3> records{{
      {1, 1000, binary_payload, "chat.room1", {}},
      {2, 2000, {}, {}, keys},
      {3, 3000, binary_payload, {}, {}},
  }};
  const aligned_buffer buf(b.records(12, "conv:1", 77, 1, 3, records));
  const auto* f = decode_ok(buf);
  CHECK(f->request_id() == 12);
  const auto* m = f->message_as_Records();
  REQUIRE(m != nullptr);
  CHECK(str(m->stream()) == "conv:1");
  CHECK(m->epoch() == 77);
  REQUIRE(m->records() != nullptr);
  REQUIRE(m->records()->size() == 3);
  const auto* r1 = m->records()->Get(0);
  CHECK(r1->seq() == 1);
  CHECK(r1->timestamp_ms() == 1000);
  CHECK(bytes_of(r1->payload()) == binary_payload);
  CHECK(str(r1->channel()) == "chat.room1");
  CHECK(r1->route_keys() == nullptr);
  const auto* r2 = m->records()->Get(1);
  CHECK(r2->channel() == nullptr);
  CHECK(strings(r2->route_keys()) == std::vector<std::string>{"user:a", "", "user:c"});
  const auto* r3 = m->records()->Get(2);
  CHECK(r3->channel() == nullptr);
  CHECK(r3->route_keys() == nullptr);
  CHECK(bytes_of(r3->payload()) == binary_payload);
}

TEST_CASE("dropped round-trips with its 64-bit count", "[protocol]") {
  frame_builder b;
  const aligned_buffer buf(b.dropped((1ULL << 40) + 3));
  const auto* f = decode_ok(buf);
  CHECK(f->request_id() == 0);
  const auto* m = f->message_as_Dropped();
  REQUIRE(m != nullptr);
  CHECK(m->count() == (1ULL << 40) + 3);
}

TEST_CASE("a builder reused for many frames returns a fresh frame each time", "[protocol]") {
  frame_builder b;
  const aligned_buffer first(b.subscribe(1, "first.pattern.that.is.long"));
  const aligned_buffer second(b.ping(2));
  const aligned_buffer third(b.subscribe(3, "x"));
  CHECK(str(decode_ok(first)->message_as_Subscribe()->pattern()) == "first.pattern.that.is.long");
  CHECK(decode_ok(second)->message_type() == wire::Message::Ping);
  CHECK(str(decode_ok(third)->message_as_Subscribe()->pattern()) == "x");
  CHECK(decode_ok(third)->request_id() == 3);
}

// ---------------------------------------------------------------------------
// Framing

TEST_CASE("every encoded frame is a multiple of 8 bytes and its prefix is the body length", "[protocol]") {
  frame_builder b;
  std::string text;
  for (int n = 0; n < 40; ++n) {
    INFO("string length " << n);
    std::vector<std::uint8_t> payload(static_cast<std::size_t>(n), 0xab);
    const std::array<std::string_view, 1> caps{text};
    hello_fields h;
    h.client_name = text;
    h.capabilities = caps;
    welcome_fields w;
    w.server_version = text;
    for (int which = 0; which < 11; ++which) {
      bytes_view v;
      const std::string name = "c" + text;  // channels and patterns must not be empty
      switch (which) {
        case 0:
          v = b.hello(1, h);
          break;
        case 1:
          v = b.welcome(1, w);
          break;
        case 2:
          v = b.error(1, errc::internal, text, 1, true);
          break;
        case 3:
          v = b.ping(1);
          break;
        case 4:
          v = b.pong(1);
          break;
        case 5:
          v = b.ok(1);
          break;
        case 6:
          v = b.subscribe(1, name);
          break;
        case 7:
          v = b.unsubscribe(1, name);
          break;
        case 8:
          v = b.publish(1, name, payload);
          break;
        case 9:
          v = b.deliver(name, payload);
          break;
        case 10:
          v = b.dropped(static_cast<std::uint64_t>(n));
          break;
      }
      INFO("message kind " << which);
      CHECK(v.size() % frame_alignment == 0);
      REQUIRE(v.size() >= frame_header_size + 12);
      CHECK(read_frame_length(v.data()) == v.size() - frame_header_size);
    }
    text.push_back(static_cast<char>('a' + n % 26));
  }
}

TEST_CASE("read_frame_length reads the prefix as little-endian", "[protocol]") {
  const std::array<std::uint8_t, 4> p{0x78, 0x56, 0x34, 0x12};
  CHECK(read_frame_length(p.data()) == 0x12345678u);
  const std::array<std::uint8_t, 4> q{0xff, 0xff, 0xff, 0xff};
  CHECK(read_frame_length(q.data()) == 0xffffffffu);
}

TEST_CASE("parser reads several frames back to back from one aligned buffer", "[protocol]") {
  frame_builder b;
  aligned_buffer stream;
  std::vector<std::size_t> sizes;
  auto add = [&](bytes_view v) {
    sizes.push_back(v.size());
    stream.append(v);
  };
  add(b.ping(1));
  add(b.subscribe(2, "orders.>"));
  add(b.publish(3, "orders.eu", binary_payload));
  add(b.error(4, errc::not_found, "nothing here"));
  add(b.dropped(5));
  const std::vector<wire::Message> types{wire::Message::Ping, wire::Message::Subscribe, wire::Message::Publish,
                                         wire::Message::Error, wire::Message::Dropped};
  const std::vector<std::uint64_t> request_ids{1, 2, 3, 4, 0};  // dropped carries no request id

  frame_parser parser(default_max_frame);
  std::size_t offset = 0;
  for (std::size_t i = 0; i < types.size(); ++i) {
    INFO("frame " << i);
    auto r = parser.next(stream.view(offset, stream.size() - offset));
    REQUIRE(r.has_value());
    REQUIRE(r->has_value());
    const frame_view fv = **r;
    CHECK(fv.size == sizes[i]);
    CHECK(fv.frame->message_type() == types[i]);
    CHECK(fv.frame->request_id() == request_ids[i]);
    // Aligned input is verified in place: the view borrows the input.
    CHECK_FALSE(fv.in_scratch);
    const auto* p = reinterpret_cast<const std::uint8_t*>(fv.frame);
    CHECK(p >= stream.data() + offset);
    CHECK(p < stream.data() + offset + fv.size);
    offset += fv.size;
  }
  CHECK(offset == stream.size());
  auto end = parser.next(stream.view(offset, 0));
  REQUIRE(end.has_value());
  CHECK_FALSE(end->has_value());
  CHECK(parser.needed() == frame_header_size);
}

TEST_CASE("parser returns nullopt for an incomplete header and needs 4 bytes", "[protocol]") {
  frame_builder b;
  const aligned_buffer buf(b.ping(1));
  frame_parser parser(default_max_frame);
  for (std::size_t n = 0; n < frame_header_size; ++n) {
    INFO("bytes available " << n);
    auto r = parser.next(buf.view(0, n));
    REQUIRE(r.has_value());
    CHECK_FALSE(r->has_value());
    CHECK(parser.needed() == frame_header_size);
  }
}

TEST_CASE("parser returns nullopt for an incomplete body and needs the whole frame", "[protocol]") {
  frame_builder b;
  const aligned_buffer buf(b.publish(1, "orders.eu", binary_payload));
  frame_parser parser(default_max_frame);
  for (std::size_t n = frame_header_size; n < buf.size(); ++n) {
    INFO("bytes available " << n);
    auto r = parser.next(buf.view(0, n));
    REQUIRE(r.has_value());
    CHECK_FALSE(r->has_value());
    CHECK(parser.needed() == buf.size());
  }
  auto full = parser.next(buf.view());
  REQUIRE(full.has_value());
  REQUIRE(full->has_value());
  CHECK((*full)->size == buf.size());
}

TEST_CASE("decode_frame rejects an incomplete frame as malformed", "[protocol]") {
  frame_builder b;
  const aligned_buffer buf(b.publish(1, "orders.eu", binary_payload));
  for (std::size_t n : {std::size_t{0}, std::size_t{3}, std::size_t{4}, buf.size() - 8, buf.size() - 1}) {
    INFO("bytes available " << n);
    auto r = decode_frame(buf.view(0, n), default_max_frame);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error() == errc::malformed_frame);
  }
}

TEST_CASE("decode_frame rejects a frame followed by extra bytes", "[protocol]") {
  frame_builder b;
  aligned_buffer buf(b.ping(1));
  buf.append(b.ping(2));
  CHECK(decode_error(buf) == errc::malformed_frame);
}

TEST_CASE("parser reads a frame at a misaligned address through its scratch copy", "[protocol]") {
  frame_builder b;
  const auto encoded = b.publish(21, "orders.eu", binary_payload);
  aligned_buffer buf(encoded.size() + 4);
  std::memset(buf.data(), 0xee, 4);
  std::memcpy(buf.data() + 4, encoded.data(), encoded.size());
  const bytes_view misaligned = buf.view(4, encoded.size());
  REQUIRE(reinterpret_cast<std::uintptr_t>(misaligned.data()) % frame_alignment != 0);

  frame_parser parser(default_max_frame);
  auto r = parser.next(misaligned);
  REQUIRE(r.has_value());
  REQUIRE(r->has_value());
  const frame_view fv = **r;
  CHECK(fv.size == encoded.size());
  CHECK(fv.frame->request_id() == 21);
  const auto* m = fv.frame->message_as_Publish();
  REQUIRE(m != nullptr);
  CHECK(str(m->channel()) == "orders.eu");
  CHECK(bytes_of(m->payload()) == binary_payload);
  // The view points into the scratch copy, not into the misaligned input.
  const auto* p = reinterpret_cast<const std::uint8_t*>(fv.frame);
  CHECK((p < misaligned.data() || p >= misaligned.data() + misaligned.size()));
  CHECK(fv.in_scratch);
  CHECK(reinterpret_cast<std::uintptr_t>(p) % 4 == 0);
}

TEST_CASE("decode_frame rejects a frame at a misaligned address", "[protocol]") {
  frame_builder b;
  const auto encoded = b.ping(1);
  aligned_buffer buf(encoded.size() + 4);
  std::memcpy(buf.data() + 4, encoded.data(), encoded.size());
  auto r = decode_frame(buf.view(4, encoded.size()), default_max_frame);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error() == errc::malformed_frame);
  // The same bytes at an aligned address decode fine.
  const aligned_buffer aligned(encoded);
  CHECK(decode_ok(aligned)->request_id() == 1);
}

// ---------------------------------------------------------------------------
// Rejections

TEST_CASE("parser rejects a frame whose body is cut and whose prefix was shrunk to match", "[protocol]") {
  frame_builder b;
  const std::vector<std::uint8_t> payload(32, 0x5a);
  aligned_buffer buf(b.publish(1, "orders.eu", payload));
  REQUIRE(decode_frame(buf.view(), default_max_frame).has_value());

  buf.resize(buf.size() - 8);
  write_frame_length(buf.data(), static_cast<std::uint32_t>(buf.size() - frame_header_size));
  CHECK(decode_error(buf) == errc::malformed_frame);
  frame_parser parser(default_max_frame);
  auto r = parser.next(buf.view());
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error() == errc::malformed_frame);
}

TEST_CASE("parser rejects a frame whose length prefix exceeds the limit before the body arrives", "[protocol]") {
  frame_parser parser(1024);
  std::array<std::uint8_t, 4> header{};
  write_frame_length(header.data(), 1025);
  auto r = parser.next(header);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error() == errc::frame_too_large);

  write_frame_length(header.data(), 0xffffffffu);
  auto huge = parser.next(header);
  REQUIRE_FALSE(huge.has_value());
  CHECK(huge.error() == errc::frame_too_large);

  // A prefix within the limit just waits for the body.
  write_frame_length(header.data(), 1024);
  auto ok = parser.next(header);
  REQUIRE(ok.has_value());
  CHECK_FALSE(ok->has_value());
  CHECK(parser.needed() == 1028);
}

TEST_CASE("parser accepts a frame of exactly max_frame and rejects it at max_frame minus one", "[protocol]") {
  frame_builder b;
  const aligned_buffer buf(b.publish(1, "orders.eu", std::vector<std::uint8_t>(100, 1)));
  const auto length = static_cast<std::uint32_t>(buf.size() - frame_header_size);
  REQUIRE(read_frame_length(buf.data()) == length);

  frame_parser at_limit(length);
  auto ok = at_limit.next(buf.view());
  REQUIRE(ok.has_value());
  REQUIRE(ok->has_value());
  CHECK((*ok)->size == buf.size());
  CHECK(decode_frame(buf.view(), length).has_value());

  frame_parser below(length - 1);
  auto too_large = below.next(buf.view());
  REQUIRE_FALSE(too_large.has_value());
  CHECK(too_large.error() == errc::frame_too_large);
  CHECK(decode_error(buf, length - 1) == errc::frame_too_large);
}

TEST_CASE("set_max_frame changes the limit the parser enforces", "[protocol]") {
  frame_builder b;
  const aligned_buffer buf(b.ping(1));
  const auto length = static_cast<std::uint32_t>(buf.size() - frame_header_size);
  frame_parser parser(length - 1);
  CHECK(parser.max_frame() == length - 1);
  auto rejected = parser.next(buf.view());
  REQUIRE_FALSE(rejected.has_value());
  CHECK(rejected.error() == errc::frame_too_large);
  parser.set_max_frame(length);
  CHECK(parser.max_frame() == length);
  auto accepted = parser.next(buf.view());
  REQUIRE(accepted.has_value());
  CHECK(accepted->has_value());
}

TEST_CASE("parser rejects a length prefix below 12 as malformed", "[protocol]") {
  for (std::uint32_t length : {0u, 1u, 4u, 8u, 11u}) {
    INFO("length prefix " << length);
    aligned_buffer buf(frame_header_size + 16);
    std::memset(buf.data(), 0, buf.size());
    write_frame_length(buf.data(), length);
    frame_parser parser(default_max_frame);
    // Rejected as soon as the header is there, body or not.
    auto header_only = parser.next(buf.view(0, frame_header_size));
    REQUIRE_FALSE(header_only.has_value());
    CHECK(header_only.error() == errc::malformed_frame);
    auto whole = parser.next(buf.view(0, frame_header_size + length));
    REQUIRE_FALSE(whole.has_value());
    CHECK(whole.error() == errc::malformed_frame);
  }
}

TEST_CASE("parser rejects a frame with a wrong file identifier", "[protocol]") {
  frame_builder b;
  const aligned_buffer original(b.subscribe(1, "orders.>"));
  // Layout: [length:4][root offset:4]["SWY1":4]...
  REQUIRE(std::memcmp(original.data() + 8, "SWY1", 4) == 0);
  for (std::size_t i = 8; i < 12; ++i) {
    INFO("identifier byte " << i - 8);
    aligned_buffer buf(original.view());
    buf.data()[i] ^= 0x20;
    CHECK(decode_error(buf) == errc::malformed_frame);
    frame_parser parser(default_max_frame);
    auto r = parser.next(buf.view());
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error() == errc::malformed_frame);
  }
}

TEST_CASE("parser rejects an unknown union tag as an unsupported message", "[protocol]") {
  frame_builder b;
  auto& fbb = b.start();
  const auto ping = wire::CreatePing(fbb);
  const aligned_buffer buf(b.finish(3, 200, ping.Union()));
  CHECK(decode_error(buf) == errc::unsupported_message);

  auto& fbb2 = b.start();
  const auto ping2 = wire::CreatePing(fbb2);
  const aligned_buffer next_tag(b.finish(3, static_cast<std::uint8_t>(wire::Message::MAX) + 1, ping2.Union()));
  CHECK(decode_error(next_tag) == errc::unsupported_message);
}

TEST_CASE("parser rejects a frame whose message type is NONE", "[protocol]") {
  frame_builder b;
  auto& fbb = b.start();
  const auto ping = wire::CreatePing(fbb);
  const aligned_buffer buf(b.finish(3, static_cast<std::uint8_t>(wire::Message::NONE), ping.Union()));
  CHECK(decode_error(buf) == errc::unsupported_message);
}

TEST_CASE("parser rejects a known message type that carries no message table", "[protocol]") {
  frame_builder b;
  b.start();
  const aligned_buffer buf(b.finish(3, static_cast<std::uint8_t>(wire::Message::Ping), flatbuffers::Offset<void>{}));
  CHECK(decode_error(buf) == errc::unsupported_message);
}

TEST_CASE("parser rejects a subscribe without its required pattern as malformed", "[protocol]") {
  frame_builder b;
  {
    // Control: the same hand-built table with the pattern verifies.
    auto& fbb = b.start();
    const auto pattern = fbb.CreateString("orders.>");
    const auto start = fbb.StartTable();
    fbb.AddOffset(wire::Subscribe::VT_PATTERN, pattern);
    const flatbuffers::Offset<wire::Subscribe> sub(fbb.EndTable(start));
    const aligned_buffer buf(b.finish(1, static_cast<std::uint8_t>(wire::Message::Subscribe), sub.Union()));
    const auto* m = decode_ok(buf)->message_as_Subscribe();
    REQUIRE(m != nullptr);
    CHECK(str(m->pattern()) == "orders.>");
  }
  auto& fbb = b.start();
  const auto start = fbb.StartTable();
  const flatbuffers::Offset<wire::Subscribe> sub(fbb.EndTable(start));
  const aligned_buffer buf(b.finish(1, static_cast<std::uint8_t>(wire::Message::Subscribe), sub.Union()));
  CHECK(decode_error(buf) == errc::malformed_frame);
}

TEST_CASE("parser rejects unsubscribe, publish and deliver without their required field", "[protocol]") {
  for (const auto type : {wire::Message::Unsubscribe, wire::Message::Publish, wire::Message::Deliver}) {
    INFO("message type " << wire::EnumNameMessage(type));
    frame_builder b;
    auto& fbb = b.start();
    const auto start = fbb.StartTable();
    const flatbuffers::Offset<void> empty(fbb.EndTable(start));
    const aligned_buffer buf(b.finish(1, static_cast<std::uint8_t>(type), empty));
    CHECK(decode_error(buf) == errc::malformed_frame);
  }
}

TEST_CASE("parser rejects a string field that points past the end of the frame", "[protocol]") {
  frame_builder b;
  aligned_buffer buf(b.subscribe(1, "orders.eu.created"));
  // The string is the first object built, so it sits at the end of the
  // buffer: [len:4]["orders.eu.created":17][NUL][padding]. Inflate its length.
  const std::string_view text = "orders.eu.created";
  const auto* found = std::search(buf.data(), buf.data() + buf.size(), text.begin(), text.end());
  REQUIRE(found != buf.data() + buf.size());
  std::uint8_t* len = const_cast<std::uint8_t*>(found) - 4;
  REQUIRE(read_frame_length(len) == text.size());
  write_frame_length(len, 4096);
  CHECK(decode_error(buf) == errc::malformed_frame);
}

TEST_CASE("parser survives random garbage and only returns frames that verify again", "[protocol]") {
  std::mt19937 rng(20240611);
  frame_builder b;
  // Valid frames to mutate, so the verifier is exercised beyond the header.
  std::vector<aligned_buffer> seeds;
  {
    const std::array<std::string_view, 2> caps{capability::dropped_notice, capability::publish_ack};
    hello_fields h;
    h.protocol_major = 1;
    h.client_name = "fuzz";
    h.capabilities = caps;
    welcome_fields w;
    w.server_version = "0.1.0";
    w.capabilities = caps;
    seeds.emplace_back(b.hello(1, h));
    seeds.emplace_back(b.welcome(2, w));
    seeds.emplace_back(b.error(3, errc::internal, "boom", 10, true));
    seeds.emplace_back(b.subscribe(4, "orders.*.created"));
    seeds.emplace_back(b.publish(5, "orders.eu", binary_payload));
    seeds.emplace_back(b.deliver("orders.eu", binary_payload));
    seeds.emplace_back(b.dropped(6));
    seeds.emplace_back(b.ping(7));
  }

  std::size_t accepted = 0, rejected = 0;
  frame_parser parser(default_max_frame);
  for (int i = 0; i < 4000; ++i) {
    aligned_buffer buf;
    if (i % 2 == 0) {
      // Pure garbage behind a plausible small length prefix; half of them
      // carry the right file identifier.
      const std::uint32_t length = 12 + rng() % 200;
      buf.resize(frame_header_size + length);
      for (std::size_t k = 0; k < buf.size(); ++k) buf.data()[k] = static_cast<std::uint8_t>(rng());
      write_frame_length(buf.data(), length);
      if (i % 4 == 0) {
        write_frame_length(buf.data() + 4, (rng() % (length / 4)) * 4);
        std::memcpy(buf.data() + 8, "SWY1", 4);
      }
    } else {
      // A valid frame with a few bytes (never the length prefix) changed.
      const auto& seed = seeds[rng() % seeds.size()];
      buf = aligned_buffer(seed.view());
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < flips; ++k) {
        const std::size_t at = frame_header_size + rng() % (buf.size() - frame_header_size);
        buf.data()[at] = static_cast<std::uint8_t>(rng());
      }
    }

    INFO("iteration " << i);
    auto r = parser.next(buf.view());
    if (!r) {
      ++rejected;
      const bool known = r.error() == errc::malformed_frame || r.error() == errc::unsupported_message;
      CHECK(known);
      continue;
    }
    // The whole frame is present, so "need more bytes" is impossible.
    REQUIRE(r->has_value());
    ++accepted;
    const frame_view fv = **r;
    CHECK(fv.size == buf.size());
    CHECK(fv.frame->message_type() > wire::Message::NONE);
    CHECK(fv.frame->message_type() <= wire::Message::MAX);
    CHECK(fv.frame->message() != nullptr);
    auto again = decode_frame(buf.view(), default_max_frame);
    REQUIRE(again.has_value());
    CHECK((*again)->message_type() == fv.frame->message_type());
    touch_all_fields(*again);
  }
  // Both outcomes occur, so the loop really exercises both paths.
  CHECK(accepted > 0);
  CHECK(rejected > 0);
}
