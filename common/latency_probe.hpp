#pragma once
// Timestamps of a message's way from a publisher's call to a subscriber's
// handler, for the latency breakdown of docs/benchmarks.md (issue 30).
// Built in only by the CMake option SWITCHYARD_LATENCY_PROBE (which
// defines SWITCHYARD_LATENCY_PROBE=1); in every other build `enabled` is
// false and each call below compiles to nothing.
//
// A mark is (point, key, CLOCK_MONOTONIC ns), the key being the first 8
// bytes of the message's payload (switchyard-bench's sequence number, so
// the marks of the bench and of its broker join). Marks go into one
// process-wide array (lock-free; past its capacity they are not kept) and
// are written when the process exits, as text lines "point key ns", to
// $SWITCHYARD_PROBE_DIR/probe-<pid>.txt (nothing without the variable).
// bench/probe-breakdown.py turns the files of a run into the table.
//
// Points that know the time of an earlier event but not yet the message's
// key (a read returned; which messages it held comes out when they are
// parsed) keep the time in a thread-local `held` slot and mark it with
// the key later.

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <unistd.h>

#ifndef SWITCHYARD_LATENCY_PROBE
#define SWITCHYARD_LATENCY_PROBE 0
#endif

namespace switchyard::probe {

inline constexpr bool enabled = SWITCHYARD_LATENCY_PROBE != 0;

enum class point : std::uint8_t {
  pub_call,        // the publisher calls publish (switchyard-bench)
  pub_written,     // the client library's publish returned (written, or queued to its loop)
  broker_read,     // the broker's read that brought it returned
  broker_parsed,   // its handler starts (frame parsed and verified)
  broker_queued,   // fanned out: queued to the subscribers' connections
  broker_writing,  // the broker's writer took it, its write(2) comes next
  broker_written,  // the broker's write of it returned (its completion ran)
  sub_read,        // the subscriber's read that brought it returned
  sub_handler,     // the subscriber's handler is called
};

inline std::uint64_t now_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

// The key of a payload: its first 8 bytes (0 if shorter).
inline std::uint64_t key_of(const void* payload, std::size_t size) noexcept {
  std::uint64_t k = 0;
  if (size >= sizeof k) std::memcpy(&k, payload, sizeof k);
  return k;
}

namespace detail {

struct entry {
  std::uint64_t key;
  std::uint64_t ns;
  point p;
};

// The marks of this process, written out at exit.
class recorder {
 public:
  static constexpr std::size_t capacity = std::size_t{1} << 22;
  // Not zeroed (new, not make_unique): the pages are touched as marks
  // come, not all at the first mark (100 MB zeroed would stall that
  // thread for a quarter of a second).
  recorder() : entries_(new entry[capacity]) {}
  ~recorder() {
    const char* dir = std::getenv("SWITCHYARD_PROBE_DIR");
    if (!dir) return;
    const std::string path = std::string(dir) + "/probe-" + std::to_string(::getpid()) + ".txt";
    if (std::FILE* f = std::fopen(path.c_str(), "w")) {
      const std::size_t n = std::min(next_.load(), capacity);
      for (std::size_t i = 0; i < n; ++i)
        std::fprintf(f, "%u %llu %llu\n", static_cast<unsigned>(entries_[i].p),
                     static_cast<unsigned long long>(entries_[i].key), static_cast<unsigned long long>(entries_[i].ns));
      std::fclose(f);
    }
  }
  void add(point p, std::uint64_t key, std::uint64_t ns) noexcept {
    const std::size_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i < capacity) entries_[i] = {key, ns, p};
  }

 private:
  std::unique_ptr<entry[]> entries_;
  std::atomic<std::size_t> next_{0};
};

inline recorder& the_recorder() {
  static recorder r;
  return r;
}

inline thread_local std::uint64_t held_ns = 0;
inline thread_local std::uint64_t remembered_key = 0;

}  // namespace detail

// Marks `p` for `key` at `ns` (now by default). Any thread.
inline void mark(point p, std::uint64_t key, std::uint64_t ns = 0) noexcept {
  if constexpr (enabled) detail::the_recorder().add(p, key, ns ? ns : now_ns());
}
// Keeps "now" in this thread's slot (a read returned) ...
inline void hold() noexcept {
  if constexpr (enabled) detail::held_ns = now_ns();
}
// ... and marks it for `key` once the message is known.
inline void mark_held(point p, std::uint64_t key) noexcept {
  if constexpr (enabled) detail::the_recorder().add(p, key, detail::held_ns);
}

// Keeps the key of the message this thread queued last (the broker's
// fan-out) ...
inline void remember(std::uint64_t key) noexcept {
  if constexpr (enabled) detail::remembered_key = key;
}
// ... for the write that sends it: marks `p` for that key (once, with
// `last`: the key is then forgotten).
inline void mark_remembered(point p, bool last) noexcept {
  if constexpr (enabled) {
    if (detail::remembered_key != 0) detail::the_recorder().add(p, detail::remembered_key, now_ns());
    if (last) detail::remembered_key = 0;
  }
}

}  // namespace switchyard::probe
