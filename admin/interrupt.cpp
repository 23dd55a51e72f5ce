#include "admin/interrupt.hpp"

#include <algorithm>
#include <thread>

namespace switchyard::admin {

namespace {

volatile std::sig_atomic_t interrupted = 0;

extern "C" void on_interrupt(int) { interrupted = 1; }

}  // namespace

interrupt_guard::interrupt_guard() {
  interrupted = 0;
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &sa, &old_int_);
  ::sigaction(SIGTERM, &sa, &old_term_);
}

interrupt_guard::~interrupt_guard() {
  ::sigaction(SIGINT, &old_int_, nullptr);
  ::sigaction(SIGTERM, &old_term_, nullptr);
}

bool interrupt_guard::requested() const noexcept { return interrupted != 0; }

bool interrupt_guard::sleep_for(std::chrono::milliseconds d) const {
  const auto until = std::chrono::steady_clock::now() + d;
  while (!requested()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= until) return false;
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(until - now, std::chrono::milliseconds(20)));
  }
  return true;
}

}  // namespace switchyard::admin
