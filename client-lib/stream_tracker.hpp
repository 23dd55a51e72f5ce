#pragma once
// Internal: gap-free delivery of durable streams on top of the at-most-once
// live path. Not installed.
//
// A stream_tracker belongs to one durable subscription (or inbox). For each
// stream it has seen it keeps the last sequence handed to the application
// and the stream's epoch, and decides for every live message whether to
// deliver it (the next sequence), skip it (already delivered, or a read
// from the log will deliver it) or start a read of the missing range. Read
// results come back through read_done()/read_failed() and are delivered in
// order; reads repeat until the tracker has caught up with everything seen
// live and everything the log had when it answered. Then live delivery
// resumes: no gap, no duplicate.
//
// A stream starts at the first message of it the subscription sees live,
// or at the broker's report of its first dropped delivery (dropped()),
// whichever comes first: the broker sends that report in place of the
// dropped delivery, so no later delivery of the stream arrives before it.
//
// Live messages that arrive while a stream is being read are not kept: they
// are in the log, and the tracker reads up to the highest one seen. That
// costs re-reading them but needs no copy and no bound on held messages.
//
// When the position cannot be recovered (the range was trimmed, the stream
// was recreated with a new epoch, or it is gone), the tracker says so
// through on_unrecoverable and continues where the application tells it.
// Records the broker leaves out of a read because their expiry passed
// (stream_read::expired) are stepped over silently: they are gone by the
// sender's wish, not lost.
//
// No I/O and no threads here: reads are issued through the injected
// read_fn, so the logic is unit-tested without a broker. Single-threaded:
// every member runs on the client's loop thread. read_fn must not call back
// into the tracker synchronously except through read_failed().

#include "switchyard/client.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <system_error>

namespace switchyard::detail {

class stream_tracker {
 public:
  // Issues a read of `stream` from `from_seq` (0 = the first retained).
  using read_fn = std::function<void(const std::string& stream, std::uint64_t from_seq)>;
  // Hands one recovered record to the application (which may skip it: a
  // record for another channel).
  using deliver_fn = std::function<void(const std::string& stream, std::uint64_t epoch, const stream_record&)>;

  stream_tracker(read_fn read, std::function<resume_at(const unrecoverable_position&)> on_unrecoverable);

  // Whether positions can be resumed from: errc::invalid_position when one
  // has a sequence but epoch 0 (its stream may have been recreated since,
  // which could then never be told); epoch 0 is for seq 0 only ("never saw
  // this stream": read it from its first record).
  static std::error_code check(const stream_positions& positions);
  // Starts from these positions (check() them first): each stream is read
  // from seq + 1 by check_all() (the subscription calls it once live
  // delivery is on).
  void resume_from(const stream_positions& positions);

  // A live message of `stream`. True: deliver it now. False: skip it
  // (duplicate, or a read under way will deliver it).
  bool live(std::string_view stream, std::uint64_t seq, std::uint64_t epoch);

  // The broker dropped the live message `seq` of `stream` (a StreamDropped
  // report). An unknown stream starts just before it; any stream reads
  // from its next sequence up to at least `seq` unless it already has it.
  void dropped(std::string_view stream, std::uint64_t seq, std::uint64_t epoch);

  // Reads every stream from its next sequence (after a "dropped" notice:
  // the lost messages may be the last ones of a stream, which no later
  // live message would reveal; and after resume_from()). Streams already
  // being read are left alone.
  void check_all();

  // The answer to a read issued through read_fn for `stream`.
  void read_done(const std::string& stream, const stream_read& result, const deliver_fn& deliver);
  // The read failed: trimmed and not_found are handled here; any other
  // error (timeout, not_connected) leaves the stream to be read again at
  // the next live message or check_all().
  void read_failed(const std::string& stream, std::error_code ec);

  // Last delivered position per stream.
  stream_positions positions() const;

 private:
  struct state {
    std::uint64_t seq = 0;  // last delivered
    std::uint64_t epoch = 0;
    std::uint64_t target = 0;  // highest live sequence seen while reading (or the gap's)
    std::uint64_t target_epoch = 0;
    bool reading = false;
    bool probing = false;  // the read is the "from the first retained" probe after trimmed
  };

  void start_read(const std::string& stream, state& s, std::uint64_t from);
  // Message `seq` of a known stream arrived live (`present`) or was dropped;
  // true: deliver it now.
  bool arrived(const std::string& stream, state& s, std::uint64_t seq, std::uint64_t epoch, bool present);
  // Asks the application; returns where to go on.
  resume_at lost(std::string_view stream, position_lost reason, const state& s, std::uint64_t first_available,
                 std::uint64_t epoch);

  read_fn read_;
  std::function<resume_at(const unrecoverable_position&)> on_unrecoverable_;
  std::map<std::string, state, std::less<>> streams_;
};

}  // namespace switchyard::detail
