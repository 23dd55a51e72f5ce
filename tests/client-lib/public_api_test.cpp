// The installed headers (include/switchyard/) hold the public API only: no
// accessor to the library's internals, no nameable implementation type.

#include "switchyard/client.hpp"
#include "switchyard/gateway.hpp"

#include <catch2/catch.hpp>

namespace {

// Whether code outside the library can reach T's implementation: name
// T::impl, or call an accessor such as event_loop::get() that returns it.
template <class T>
constexpr bool names_impl = requires {
  typename T::impl;
};
template <class T>
constexpr bool has_get = requires(T& t) {
  t.get();
};

}  // namespace

TEST_CASE("the public classes expose no implementation type and no accessor to one", "[client-lib]") {
  CHECK_FALSE(names_impl<switchyard::event_loop>);
  CHECK_FALSE(names_impl<switchyard::client>);
  CHECK_FALSE(names_impl<switchyard::gateway>);
  CHECK_FALSE(has_get<switchyard::event_loop>);
}
