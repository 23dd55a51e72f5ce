// Unit tests of the delivery destination the broker stores with log records
// (broker/tables/record_destination.hpp): the exact encoding, round trips and the
// decoder's refusal of malformed bytes.

#include "broker/tables/record_destination.hpp"
#include "storage/sequence_log.hpp"

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace {

using namespace switchyard::broker;
using bytes = std::vector<std::byte>;

// The encoder takes views, as the broker has them from the frame.
std::vector<std::string_view> views(const std::vector<std::string>& keys) { return {keys.begin(), keys.end()}; }

bytes raw(std::initializer_list<int> values) {
  bytes out;
  for (const int v : values) out.push_back(static_cast<std::byte>(v));
  return out;
}

bytes operator+(bytes a, std::string_view s) {
  for (const char c : s) a.push_back(static_cast<std::byte>(c));
  return a;
}

}  // namespace

TEST_CASE("a channel destination is kind 1 then the channel, and decodes back", "[broker]") {
  bytes out = raw({0xEE, 0xEE});  // replaced, not appended to
  encode_channel_destination("chat.room1", out);
  CHECK(out == raw({1}) + "chat.room1");
  CHECK(channel_destination_size("chat.room1") == out.size());

  std::vector<std::string_view> keys;
  const auto d = decode_destination(out, keys);
  REQUIRE(d);
  CHECK(d->kind == destination_kind::channel);
  CHECK(d->channel == "chat.room1");
  CHECK(d->key_count == 0);
  CHECK(keys.empty());
}

TEST_CASE("a route keys destination is kind 2, a u16 count and u16-length-prefixed keys, and decodes back in order",
          "[broker]") {
  const std::vector<std::string> keys = {"user:alice", "", "user:bob"};
  bytes out;
  encode_route_keys_destination(views(keys), out);
  CHECK(out == raw({2, 3, 0, 10, 0}) + "user:alice" + std::string_view("\0\0\x08\0", 4) + "user:bob");
  CHECK(route_keys_destination_size(views(keys)) == out.size());

  // Keys are appended after what the vector already holds.
  std::vector<std::string_view> decoded = {"earlier"};
  const auto d = decode_destination(out, decoded);
  REQUIRE(d);
  CHECK(d->kind == destination_kind::route_keys);
  CHECK(d->channel.empty());
  CHECK(d->first_key == 1);
  REQUIRE(d->key_count == 3);
  REQUIRE(decoded.size() == 4);
  CHECK(decoded[1] == "user:alice");
  CHECK(decoded[2].empty());
  CHECK(decoded[3] == "user:bob");
}

TEST_CASE("an empty destination and a lone kind byte 0 decode as none", "[broker]") {
  std::vector<std::string_view> keys;
  for (const auto& destination : {bytes{}, raw({0})}) {
    const auto d = decode_destination(destination, keys);
    REQUIRE(d);
    CHECK(d->kind == destination_kind::none);
    CHECK(d->channel.empty());
    CHECK(d->key_count == 0);
  }
  CHECK(keys.empty());
}

TEST_CASE("route keys that do not fit in a log destination have a size over the storage limit", "[broker]") {
  // 1 kind + 2 count + per key 2 + length.
  std::vector<std::string> keys(254, std::string(255, 'k'));
  CHECK(route_keys_destination_size(views(keys)) == 3 + 254 * 257);
  CHECK(route_keys_destination_size(views(keys)) <= switchyard::storage::max_destination_bytes);
  keys.resize(255, std::string(255, 'k'));  // 3 + 255 * 257 = 65,538
  CHECK(route_keys_destination_size(views(keys)) > switchyard::storage::max_destination_bytes);
  const std::vector<std::string> one_huge = {std::string(70'000, 'h')};
  CHECK(route_keys_destination_size(views(one_huge)) > switchyard::storage::max_destination_bytes);
  const std::vector<std::string> too_many(70'000);  // empty keys, but more than a u16 count
  CHECK(route_keys_destination_size(views(too_many)) > switchyard::storage::max_destination_bytes);
  // At the limit exactly: one key of max - 5 bytes.
  const std::vector<std::string> exact = {std::string(switchyard::storage::max_destination_bytes - 5, 'e')};
  CHECK(route_keys_destination_size(views(exact)) == switchyard::storage::max_destination_bytes);
  bytes out;
  encode_route_keys_destination(views(exact), out);
  CHECK(out.size() == switchyard::storage::max_destination_bytes);
  std::vector<std::string_view> decoded;
  const auto d = decode_destination(out, decoded);
  REQUIRE(d);
  REQUIRE(decoded.size() == 1);
  CHECK(decoded[0] == exact[0]);
}

TEST_CASE("malformed destinations fail to decode with bad_message and add no keys", "[broker]") {
  const bytes cases[] = {
      raw({3}) + "unknown kind",
      raw({0, 0}),                   // none with trailing bytes
      raw({2}),                      // no count
      raw({2, 1}),                   // half a count
      raw({2, 1, 0}),                // a key missing
      raw({2, 1, 0, 5, 0}) + "abc",  // a key cut short
      raw({2, 2, 0, 1, 0}) + "a",    // the second key missing
      raw({2, 1, 0, 1, 0}) + "ab",   // trailing bytes
  };
  for (const auto& destination : cases) {
    std::vector<std::string_view> keys = {"kept"};
    const auto d = decode_destination(destination, keys);
    REQUIRE_FALSE(d);
    CHECK(d.error() == std::errc::bad_message);
    REQUIRE(keys.size() == 1);
    CHECK(keys[0] == "kept");
  }
}

TEST_CASE("a destination with an expiry keeps it and decodes the rest as without", "[broker][log]") {
  std::vector<std::byte> out;
  encode_channel_destination("rides.eu", out, 15'000);
  CHECK(out.size() == channel_destination_size("rides.eu") + destination_expiry_bytes);
  std::vector<std::string_view> keys;
  auto d = decode_destination(out, keys);
  REQUIRE(d);
  CHECK(d->kind == destination_kind::channel);
  CHECK(d->channel == "rides.eu");
  CHECK(d->expires_in_ms == 15'000);

  const std::vector<std::string> to{"user:1", "", "user:3"};
  encode_route_keys_destination(views(to), out, 0xFFFF'FFFF);
  CHECK(out.size() == route_keys_destination_size(views(to)) + destination_expiry_bytes);
  d = decode_destination(out, keys);
  REQUIRE(d);
  CHECK(d->kind == destination_kind::route_keys);
  CHECK(d->expires_in_ms == 0xFFFF'FFFF);
  REQUIRE(d->key_count == 3);
  CHECK(keys[d->first_key + 2] == "user:3");

  encode_channel_destination("rides.eu", out);  // 0: no expiry, no flag
  d = decode_destination(out, keys);
  REQUIRE(d);
  CHECK(d->expires_in_ms == 0);
  CHECK(out.size() == channel_destination_size("rides.eu"));
}

TEST_CASE("an expiry flag on no destination, a zero or a cut expiry is malformed", "[broker][log]") {
  const auto bad = [](std::vector<std::uint8_t> raw) {
    std::vector<std::byte> b(raw.size());
    std::memcpy(b.data(), raw.data(), raw.size());
    std::vector<std::string_view> keys{"kept"};
    const auto d = decode_destination(b, keys);
    return !d && d.error() == std::make_error_code(std::errc::bad_message) && keys.size() == 1;
  };
  CHECK(bad({0x80, 1, 0, 0, 0}));              // "none" cannot expire
  CHECK(bad({0x81, 0, 0, 0, 0, 'c'}));         // an expiry of 0 is written as no flag
  CHECK(bad({0x81, 1, 0}));                    // cut inside the expiry
  CHECK(bad({0x82, 1, 0, 0, 0, 1, 0}));        // the keys after it cut
  CHECK_FALSE(bad({0x82, 1, 0, 0, 0, 0, 0}));  // an expiring send to no key at all decodes
}
