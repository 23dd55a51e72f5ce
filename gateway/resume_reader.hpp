#pragma once
// Reads back what a reconnecting device missed: for one durable stream,
// the records after the device's last sequence that were sent to its user,
// from the broker's sequence log (client::read, a blocking call). The reads
// run on a thread of their own so the gateway's io thread never waits for
// the broker; each result (the frames, encoded there) is handed to the
// callback the job carries, on that thread: the caller posts it on.

#include "gateway/device_protocol.hpp"

#include "common/mutex.hpp"

#include "switchyard/client.hpp"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace switchyard::edge {

// Why a position could not be resumed as asked (sent to the device as a
// "trimmed" message): records trimmed by retention, the stream recreated
// (a new epoch) or gone, more than --resume-max-scan records to look at, a
// record the log cannot read (skipped: the read goes on after it).
enum class resume_gap { none, trimmed, epoch_changed, stream_gone, limit, damaged };

struct resume_result {
  std::string stream;
  std::vector<std::pair<std::uint64_t, std::shared_ptr<const std::string>>> frames;  // seq, "msg" frame
  std::uint64_t read_to = 0;  // every record below this was looked at
  bool more = false;          // stopped at max_bytes of frames: read on from read_to
  std::uint64_t epoch = 0;    // the stream's epoch now
  resume_gap gap = resume_gap::none;
  std::uint64_t first_seq = 0;  // with a gap: the first sequence the log still has
  std::error_code error;        // the read failed (unavailable, timeout): the device may reconnect
};

struct resume_job {
  std::string stream;
  resume_point from;                        // the device's last (seq, epoch); {0, 0}: from the first record
  std::string route_key;                    // records sent to this key are the device's
  std::function<void(resume_result)> done;  // called on the reader's thread
  // Whether the job is still wanted (its socket lives): asked before the
  // job starts and between pages; false drops it without calling done.
  std::function<bool()> wanted;
  std::size_t max_bytes = 1 << 20;  // frames gathered per job; then `more`
};

class resume_reader {
 public:
  // `broker` is borrowed and must outlive the reader. At most `max_jobs`
  // wait; a job scans at most `max_scan` records (then: resume_gap::limit).
  resume_reader(client& broker, std::size_t max_jobs, std::uint64_t max_scan);
  ~resume_reader();  // stops the thread; jobs not started are dropped
  resume_reader(const resume_reader&) = delete;
  resume_reader& operator=(const resume_reader&) = delete;

  // Any thread. False when max_jobs wait already (the job is not taken).
  bool submit(resume_job job);

 private:
  void run();
  resume_result read(const resume_job& job);

  client& broker_;
  const std::size_t max_jobs_;
  const std::uint64_t max_scan_;
  switchyard::mutex mu_;
  std::condition_variable wake_;
  std::deque<resume_job> jobs_ SWITCHYARD_GUARDED_BY(mu_);
  bool stop_ SWITCHYARD_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace switchyard::edge
