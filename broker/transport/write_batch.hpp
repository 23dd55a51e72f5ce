#pragma once
// The connections whose idle writer the current read woke, written at the
// end of that read by the reader itself (connection::write_now) instead
// of each in a loop turn of its writer coroutine: the turn (a timer
// cancelled, a posted completion, the coroutine resumed, and the reader's
// own re-arm before it) cost about 4 us of a 45 us one-way latency
// (docs/benchmarks.md, "The latency breakdown"). All that one read queued
// for a connection still goes in one write.
//
// One per loop, owned by the server; loop thread only.

#include <cstddef>
#include <memory>
#include <vector>

namespace switchyard::broker {

class connection;

class write_batch {
 public:
  // A read is about to be handled: kicks list their connection from now.
  void begin() noexcept { open_ = true; }
  bool open() const noexcept { return open_; }
  // Lists `c` (once per batch: the caller keeps a flag).
  void add(std::shared_ptr<connection> c) { listed_.push_back(std::move(c)); }
  // Ends the batch: `write(connection&)` for each listed, in the order
  // listed. A kick during it wakes the writer the usual way.
  template <class F>
  void end(F&& write) {
    open_ = false;
    for (std::size_t i = 0; i < listed_.size(); ++i) write(*listed_[i]);
    listed_.clear();
  }

 private:
  bool open_ = false;
  std::vector<std::shared_ptr<connection>> listed_;  // capacity kept across reads
};

}  // namespace switchyard::broker
