#pragma once
// The hash for the broker's string-keyed maps: transparent (look up with a
// string_view, no temporary std::string).

#include <cstddef>
#include <string_view>

namespace switchyard::broker {

struct string_hash {
  using is_transparent = void;
  // XXH3 (64 bits) with a random seed per process: keys here are short
  // (route keys, inbox ids, channels), where it is about twice as fast as
  // libstdc++'s std::hash, and a send hashes its key several times; the
  // seed keeps clients from crafting colliding keys. noexcept, so
  // libstdc++'s unordered maps store no hash code per node.
  std::size_t operator()(std::string_view s) const noexcept;
};

}  // namespace switchyard::broker
