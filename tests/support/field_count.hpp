#pragma once
// The number of fields of an aggregate, at compile time: tests use it to
// check that a config struct's every field is held by a settings row (a
// field added without a row fails them).

#include <cstddef>

namespace switchyard::test {

// Converts to any type in an unevaluated aggregate initialisation: the
// number of these that T{...} accepts is its number of fields.
struct any_field {
  template <class T>
  operator T() const;  // never defined: only used where nothing is evaluated
};

template <class T, class... Fields>
consteval std::size_t field_count() {
  if constexpr (requires { T{Fields{}..., any_field{}}; })
    return field_count<T, Fields..., any_field>();
  else
    return sizeof...(Fields);
}

}  // namespace switchyard::test
