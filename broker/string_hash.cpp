#include "broker/string_hash.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace switchyard::broker {

std::size_t string_hash::operator()(std::string_view s) const noexcept {
  return static_cast<std::size_t>(XXH3_64bits(s.data(), s.size()));
}

}  // namespace switchyard::broker
