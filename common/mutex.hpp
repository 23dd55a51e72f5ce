#pragma once
// switchyard::mutex: std::mutex with Clang's thread-safety attributes
// (common/thread_annotations.hpp), and its scoped locks. libstdc++'s
// std::mutex carries none, so a field guarded by one cannot be checked.
// Everything is inline over a std::mutex: no cost over using it directly.
//
//   switchyard::mutex mu_;
//   int count_ SWITCHYARD_GUARDED_BY(mu_) = 0;
//   void bump_locked() SWITCHYARD_REQUIRES(mu_);
//
//   { switchyard::lock_guard lock(mu_); ++count_; }
//
// Condition variables stay std::condition_variable (cheaper than
// std::condition_variable_any): wait on the std::unique_lock inside a
// switchyard::unique_lock (native()). The analysis sees the lock held for
// the whole wait (the wait gives it back before it returns), and a
// predicate reading guarded fields says it runs under the lock:
//
//   switchyard::unique_lock lock(mu_);
//   cv_.wait(lock.native(), [&]() SWITCHYARD_REQUIRES(mu_) { return count_ > 0; });
//
// A lock taken without waiting (std::try_to_lock): try_lock() first, then
// adopt it (clang 14 cannot follow a scoped lock that may not hold):
//
//   if (!mu_.try_lock()) return;
//   switchyard::lock_guard lock(mu_, std::adopt_lock);

#include "common/thread_annotations.hpp"

#include <mutex>

namespace switchyard {

class SWITCHYARD_CAPABILITY("mutex") mutex {
 public:
  mutex() = default;
  mutex(const mutex&) = delete;
  mutex& operator=(const mutex&) = delete;

  void lock() SWITCHYARD_ACQUIRE() { mu_.lock(); }
  void unlock() SWITCHYARD_RELEASE() { mu_.unlock(); }
  [[nodiscard]] bool try_lock() SWITCHYARD_TRY_ACQUIRE(true) { return mu_.try_lock(); }

  // The std::mutex itself, for switchyard::unique_lock only: a lock taken
  // through it is invisible to the analysis.
  std::mutex& native() noexcept { return mu_; }

 private:
  std::mutex mu_;
};

// Holds `mu` from construction to destruction.
class SWITCHYARD_SCOPED_CAPABILITY lock_guard {
 public:
  explicit lock_guard(mutex& mu) SWITCHYARD_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  // Takes over `mu`, which the caller locked (try_lock()).
  lock_guard(mutex& mu, std::adopt_lock_t) SWITCHYARD_REQUIRES(mu) : mu_(mu) {}
  ~lock_guard() SWITCHYARD_RELEASE() { mu_.unlock(); }
  lock_guard(const lock_guard&) = delete;
  lock_guard& operator=(const lock_guard&) = delete;

 private:
  mutex& mu_;
};

// Holds `mu` from construction, but for unlock() ... lock() stretches, to
// destruction; native() is for condition variables (see above).
class SWITCHYARD_SCOPED_CAPABILITY unique_lock {
 public:
  explicit unique_lock(mutex& mu) SWITCHYARD_ACQUIRE(mu) : lock_(mu.native()) {}
  ~unique_lock() SWITCHYARD_RELEASE() {}  // std::unique_lock unlocks if it holds
  unique_lock(const unique_lock&) = delete;
  unique_lock& operator=(const unique_lock&) = delete;

  void lock() SWITCHYARD_ACQUIRE() { lock_.lock(); }
  void unlock() SWITCHYARD_RELEASE() { lock_.unlock(); }
  std::unique_lock<std::mutex>& native() noexcept { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace switchyard
