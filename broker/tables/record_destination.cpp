#include "broker/tables/record_destination.hpp"

#include "storage/sequence_log.hpp"

#include <limits>

namespace switchyard::broker {

namespace {

constexpr std::size_t u16_max = std::numeric_limits<std::uint16_t>::max();

void put_u16(std::vector<std::byte>& out, std::size_t v) {
  out.push_back(static_cast<std::byte>(v & 0xFF));
  out.push_back(static_cast<std::byte>(v >> 8));
}

void put_bytes(std::vector<std::byte>& out, std::string_view s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  out.insert(out.end(), p, p + s.size());
}

std::string_view as_chars(std::span<const std::byte> b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

std::unexpected<std::error_code> malformed() { return std::unexpected(std::make_error_code(std::errc::bad_message)); }

void put_kind(std::vector<std::byte>& out, destination_kind kind, std::uint32_t expires_in_ms) {
  out.clear();
  if (expires_in_ms == 0) {
    out.push_back(static_cast<std::byte>(kind));
    return;
  }
  out.push_back(static_cast<std::byte>(static_cast<std::uint8_t>(kind) | destination_expiry_flag));
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::byte>((expires_in_ms >> (8 * i)) & 0xFF));
}

}  // namespace

std::size_t channel_destination_size(std::string_view channel) noexcept { return 1 + channel.size(); }

std::size_t route_keys_destination_size(std::span<const std::string_view> keys) noexcept {
  constexpr std::size_t too_large = storage::max_destination_bytes + 1;
  if (keys.size() > u16_max) return too_large;
  std::size_t size = 1 + 2;
  for (const auto& k : keys) {
    if (k.size() > u16_max) return too_large;
    size += 2 + k.size();
    if (size > storage::max_destination_bytes) return too_large;
  }
  return size;
}

void encode_channel_destination(std::string_view channel, std::vector<std::byte>& out, std::uint32_t expires_in_ms) {
  put_kind(out, destination_kind::channel, expires_in_ms);
  put_bytes(out, channel);
}

void encode_route_keys_destination(std::span<const std::string_view> keys, std::vector<std::byte>& out,
                                   std::uint32_t expires_in_ms) {
  put_kind(out, destination_kind::route_keys, expires_in_ms);
  put_u16(out, keys.size());
  for (const auto& k : keys) {
    put_u16(out, k.size());
    put_bytes(out, k);
  }
}

std::expected<destination_view, std::error_code> decode_destination(std::span<const std::byte> destination,
                                                                    std::vector<std::string_view>& route_keys) {
  destination_view out;
  if (destination.empty()) return out;
  const auto first = static_cast<std::uint8_t>(destination[0]);
  const auto kind = static_cast<destination_kind>(first & ~destination_expiry_flag);
  auto rest = destination.subspan(1);
  if ((first & destination_expiry_flag) != 0) {
    if (kind == destination_kind::none || rest.size() < destination_expiry_bytes) return malformed();
    for (std::size_t i = 0; i < destination_expiry_bytes; ++i)
      out.expires_in_ms |= static_cast<std::uint32_t>(rest[i]) << (8 * i);
    if (out.expires_in_ms == 0) return malformed();
    rest = rest.subspan(destination_expiry_bytes);
  }
  switch (kind) {
    case destination_kind::none:
      if (!rest.empty()) return malformed();
      return out;
    case destination_kind::channel:
      out.kind = kind;
      out.channel = as_chars(rest);
      return out;
    case destination_kind::route_keys: {
      const auto u16 = [&](std::size_t& v) {
        if (rest.size() < 2) return false;
        v = static_cast<std::size_t>(rest[0]) | static_cast<std::size_t>(rest[1]) << 8;
        rest = rest.subspan(2);
        return true;
      };
      std::size_t count = 0;
      if (!u16(count)) return malformed();
      const std::size_t first = route_keys.size();
      for (std::size_t i = 0; i < count; ++i) {
        std::size_t len = 0;
        if (!u16(len) || rest.size() < len) {
          route_keys.resize(first);
          return malformed();
        }
        route_keys.push_back(as_chars(rest.first(len)));
        rest = rest.subspan(len);
      }
      if (!rest.empty()) {
        route_keys.resize(first);
        return malformed();
      }
      out.kind = kind;
      out.first_key = first;
      out.key_count = count;
      return out;
    }
  }
  return malformed();
}

}  // namespace switchyard::broker
