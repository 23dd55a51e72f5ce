#pragma once
// What the connections of one event loop tell each other about the current
// loop turn, so that reads and writes adapt to load (docs/protocol.md §9):
//
//   backlog   A delivery found its connection's queue past backlog_bytes,
//             or full. A reader clears it before handling a read
//             (begin_read); if it is still clear after, the reader may read
//             more per turn: a publisher must not outrun its subscribers.
//   input     The last read filled its buffer: more input is already
//             waiting, so a writer with little queued may wait a few turns
//             for more frames (fewer, larger writes under load; the budget
//             is server_config::write_coalesce_*). Never set while idle, so
//             latency at moderate rates is unchanged.
//
// One per loop, owned by the server; loop thread only. Hints only: no
// correctness depends on them.

#include <cstddef>

namespace switchyard::broker {

class loop_pressure {
 public:
  // A connection with more than this queued counts as backlogged.
  static constexpr std::size_t backlog_bytes = 256 * 1024;

  // A reader is about to handle a read; `filled` says it filled its buffer.
  void begin_read(bool filled) noexcept {
    backlog_ = false;
    input_waiting_ = filled;
  }
  // A reader stopped (its connection closes): what it left unread must not
  // hold writers back.
  void reader_stopped() noexcept { input_waiting_ = false; }
  // A delivery found its connection's queue at `queued` bytes after
  // queueing (or dropped it: note_backlog()).
  void note_queued(std::size_t queued) noexcept {
    if (queued > backlog_bytes) backlog_ = true;
  }
  void note_backlog() noexcept { backlog_ = true; }

  // Whether a delivery caused by the current read found a backlog.
  bool backlog_seen() const noexcept { return backlog_; }
  // Whether more input is waiting (the last read filled its buffer).
  bool input_waiting() const noexcept { return input_waiting_; }

 private:
  bool backlog_ = false;
  bool input_waiting_ = false;
};

}  // namespace switchyard::broker
