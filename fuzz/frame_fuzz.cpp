// Fuzz target: bytes from a client -> protocol::frame_parser (length prefix,
// identifier, FlatBuffers verifier, message type) -> frames, as a
// connection's reader splits its input. The input is parsed twice: from an
// 8-byte aligned copy (frames verified in place) and from an odd offset
// (every frame goes through the parser's alignment scratch copy). Each
// verified frame is also checked with decode_frame on an aligned copy of
// its bytes, which must agree. Any crash, sanitizer report or disagreement
// is a bug.

#include "fuzz/seeds.hpp"
#include "protocol/frame_builder.hpp"
#include "protocol/frame_parser.hpp"
#include "protocol/limits.hpp"

#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

namespace {

namespace protocol = switchyard::protocol;

// A small max_frame keeps the "too large" path reachable.
constexpr std::uint32_t max_frame = 64 * 1024;

std::span<const std::uint8_t> bytes(std::string_view s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

// Frames of most client and server message types, back to back.
std::vector<switchyard::fuzz::seed> seeds() {
  protocol::frame_builder b;
  std::vector<switchyard::fuzz::seed> out;
  auto add = [&](protocol::bytes_view f) { out.emplace_back(f.begin(), f.end()); };
  protocol::hello_fields hello;
  hello.client_name = "fuzz";
  add(b.hello(1, hello));
  add(b.ping(2));
  add(b.subscribe(3, "orders.*"));
  add(b.publish(4, "orders.eu", bytes("payload"), "orders"));
  add(b.deliver("orders.eu", bytes("payload"), "orders", 7, 9));
  add(b.lease_grant(5, 5000));
  add(b.registry_put(6, "user:1", "gw-1", 42, 0));
  const std::vector<std::string_view> keys{"user:1", "user:2"};
  add(b.send(7, keys, bytes("hi")));
  add(b.inbox_delivery("gw-1", keys, bytes("hi"), "s", 1, 2));
  add(b.append(8, "orders", bytes("record")));
  add(b.read(9, "orders", 1, 10, 4096));
  add(b.error(10, protocol::errc::bad_request, "no", 100, true, 3));
  add(b.drain(11, 1000));
  // Three frames in one input.
  switchyard::fuzz::seed three;
  for (auto f : {b.ping(1), b.subscribe(2, "a.>"), b.publish(0, "a.b", bytes("x"))})
    three.insert(three.end(), f.begin(), f.end());
  out.push_back(three);
  return out;
}

// Parses `in` as a connection would: frame after frame until an error or an
// incomplete frame.
void parse_stream(protocol::bytes_view in) {
  protocol::frame_parser parser(max_frame);
  std::vector<std::uint64_t> aligned;
  for (int i = 0; i < 1000 && !in.empty(); ++i) {
    auto r = parser.next(in);
    if (!r) return;
    if (!*r) {
      if (parser.needed() <= in.size()) std::abort();  // nullopt only when more is needed
      return;
    }
    const auto& v = **r;
    if (v.size > in.size() || v.frame == nullptr) std::abort();
    // The same bytes, aligned, decode the same way.
    aligned.assign((v.size + 7) / 8, 0);
    std::memcpy(aligned.data(), in.data(), v.size);
    auto d = protocol::decode_frame({reinterpret_cast<const std::uint8_t*>(aligned.data()), v.size}, max_frame);
    if (!d || (*d)->message_type() != v.frame->message_type() || (*d)->request_id() != v.frame->request_id())
      std::abort();
    in = in.subspan(v.size);
    parser.trim_scratch();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  switchyard::fuzz::write_seeds_if_asked(seeds());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::uint64_t> buf(size / 8 + 2);
  auto* base = reinterpret_cast<std::uint8_t*>(buf.data());
  std::memcpy(base, data, size);
  parse_stream({base, size});
  std::memmove(base + 1, base, size);
  parse_stream({base + 1, size});
  return 0;
}
