#pragma once
// The hash for the broker's string-keyed maps: transparent (look up with a
// string_view, no temporary std::string).

#include <cstddef>
#include <functional>
#include <string_view>

namespace switchyard::broker {

struct string_hash {
  using is_transparent = void;
  // noexcept, so libstdc++'s unordered maps store no hash code per node.
  // The registry, where per-entry bytes are budgeted, uses flat_index.
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

}  // namespace switchyard::broker
