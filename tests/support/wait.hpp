#pragma once
// Bounded waiting for conditions that another thread makes true. Tests use
// it to wait for an outcome, never to assert on elapsed time.

#include <chrono>
#include <thread>

namespace switchyard::test {

// Polls `pred` every millisecond until it is true or `timeout` passed;
// returns its last value.
template <class Pred>
bool wait_until(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= give_up) return pred();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace switchyard::test
