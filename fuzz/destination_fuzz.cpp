// Fuzz target: the destination stored with each record of the sequence log
// (broker/tables/record_destination.hpp), decoded from corrupted bytes as a reader
// of the log decodes what it finds on disk. A decode either fails with
// bad_message, leaving the route keys as they were, or yields views inside
// the input; re-encoding what it decoded gives the input back (a lone kind
// byte 0 decodes as none, like empty). Any crash, sanitizer report or
// disagreement is a bug.

#include "broker/tables/record_destination.hpp"
#include "fuzz/seeds.hpp"
#include "storage/sequence_log.hpp"

#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

namespace {

using namespace switchyard::broker;

std::vector<switchyard::fuzz::seed> seeds() {
  std::vector<switchyard::fuzz::seed> out;
  std::vector<std::byte> d;
  auto add = [&] {
    const auto* p = reinterpret_cast<const std::uint8_t*>(d.data());
    out.emplace_back(p, p + d.size());
  };
  encode_channel_destination("orders.eu", d);
  add();
  const std::vector<std::string_view> keys{"user:1", "", "user:3"};
  encode_route_keys_destination(keys, d);
  add();
  encode_channel_destination("rides.offers", d, 15000);
  add();
  encode_route_keys_destination(keys, d, 1);
  add();
  d.assign(1, std::byte{0});
  add();
  return out;
}

bool inside(std::string_view v, std::span<const std::byte> in) {
  if (v.empty()) return true;
  const auto* b = reinterpret_cast<const char*>(in.data());
  return v.data() >= b && v.data() + v.size() <= b + in.size();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  switchyard::fuzz::write_seeds_if_asked(seeds());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > switchyard::storage::max_destination_bytes) return -1;  // the log stores no larger one
  // An exact-size heap copy, so that ASan sees any read past the end.
  std::vector<std::byte> in(reinterpret_cast<const std::byte*>(data), reinterpret_cast<const std::byte*>(data) + size);
  std::vector<std::string_view> keys{"earlier"};
  auto r = decode_destination(in, keys);
  if (!r) {
    if (r.error() != std::make_error_code(std::errc::bad_message) || keys.size() != 1) std::abort();
    return 0;
  }
  std::vector<std::byte> again;
  switch (r->kind) {
    case destination_kind::none:
      if (r->key_count != 0 || r->expires_in_ms != 0 || !(size == 0 || (size == 1 && data[0] == 0))) std::abort();
      return 0;
    case destination_kind::channel:
      if (!inside(r->channel, in)) std::abort();
      encode_channel_destination(r->channel, again, r->expires_in_ms);
      break;
    case destination_kind::route_keys: {
      if (r->first_key != 1 || keys.size() != 1 + r->key_count) std::abort();
      const std::span<const std::string_view> decoded(keys.data() + r->first_key, r->key_count);
      for (auto k : decoded)
        if (!inside(k, in)) std::abort();
      const std::size_t expiry = r->expires_in_ms != 0 ? destination_expiry_bytes : 0;
      if (route_keys_destination_size(decoded) + expiry != size) std::abort();
      encode_route_keys_destination(decoded, again, r->expires_in_ms);
      break;
    }
    default:
      std::abort();
  }
  if (again.size() != size || std::memcmp(again.data(), data, size) != 0) std::abort();
  return 0;
}
