#pragma once
// SIGINT and SIGTERM for the commands that run until interrupted
// (`sub`, `streams tail --follow`): while an interrupt_guard lives, either
// signal only sets a flag the command polls between bounded waits, so the
// command ends normally (exit 0, output flushed) instead of being killed.
// One guard at a time (the CLI runs one command); the handlers in place
// before are restored by its destructor.

#include <chrono>
#include <csignal>

namespace switchyard::admin {

class interrupt_guard {
 public:
  interrupt_guard();
  ~interrupt_guard();
  interrupt_guard(const interrupt_guard&) = delete;
  interrupt_guard& operator=(const interrupt_guard&) = delete;

  // A signal arrived since the guard was made.
  bool requested() const noexcept;
  // Sleeps up to `d`, in slices of at most 20 ms, returning early (true)
  // once a signal arrived.
  bool sleep_for(std::chrono::milliseconds d) const;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

}  // namespace switchyard::admin
