#include "broker/tables/feature_flags.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace switchyard::broker {

namespace {
constexpr std::array<std::string_view, feature_flags::count> names{"offers"};
}

std::string_view feature_flags::name_of(flag f) noexcept { return names[index(f)]; }

std::optional<feature_flags::flag> feature_flags::find(std::string_view name) noexcept {
  for (std::size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return static_cast<flag>(i);
  return std::nullopt;
}

std::uint8_t feature_flags::bucket_of(std::string_view client_id) noexcept {
  return static_cast<std::uint8_t>(XXH64(client_id.data(), client_id.size(), 0) % buckets);
}

feature_flags::split feature_flags::connections(flag f) const noexcept {
  split s;
  const auto& m = members_[index(f)];
  for (std::uint8_t b = 0; b < buckets; ++b) (on(f, b) ? s.on : s.off) += m[b];
  return s;
}

}  // namespace switchyard::broker
