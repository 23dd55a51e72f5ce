#pragma once
// Internal: how the library's own code reaches the private state behind the
// public classes (event_loop::impl, client::impl). The public headers name
// only `detail::access`, as a friend; this definition is not installed, so
// code outside the library has no way in.

#include "switchyard/client.hpp"

#include <memory>

namespace switchyard::detail {

struct access {
  // The implementation types, under names the library's code can use.
  using loop_state = event_loop::impl;
  using client_state = client::impl;

  // The loop's state; lives as long as `loop`.
  static loop_state& state(event_loop& loop) noexcept { return *loop.impl_; }
  // The connection's state (shared with the coroutines and callbacks that
  // keep it alive past the client object).
  static const std::shared_ptr<client_state>& state(client& c) noexcept { return c.impl_; }
};

using loop_state = access::loop_state;
using client_state = access::client_state;

}  // namespace switchyard::detail
