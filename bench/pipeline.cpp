#include "bench/bench_common.hpp"

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

namespace switchyard::bench {

// Shared by run_pipeline and every answer_fn: completions may outlive the
// call when the connection dies, so they hold it by shared_ptr. `issue` is
// borrowed from the caller and used only while `stopped` is false.
struct pipeline_state {
  const issue_fn* issue = nullptr;
  std::uint64_t count = 0;
  std::uint64_t deadline_ns = 0;
  std::atomic<std::uint64_t> issued{0}, answered{0}, failed{0}, last_ns{0};
  std::atomic<bool> stopped{false};
};

namespace {
void issue_next(const std::shared_ptr<pipeline_state>& s) {
  (*s->issue)(s->issued.fetch_add(1, std::memory_order_relaxed), answer_fn(s));
}
}  // namespace

void answer_fn::operator()(bool ok) const {
  auto& s = *s_;
  s.last_ns.store(now_ns(), std::memory_order_relaxed);
  // After a failure (the connection is likely gone) stop issuing: a request
  // on a dead connection fails at once, which would recurse.
  if (!ok) {
    s.failed.fetch_add(1, std::memory_order_relaxed);
    s.stopped = true;
  }
  s.answered.fetch_add(1, std::memory_order_release);
  if (!s.stopped && s.issued.load(std::memory_order_relaxed) < s.count && now_ns() < s.deadline_ns) issue_next(s_);
}

pipeline_result run_pipeline(client& c, std::uint64_t count, int window, std::uint64_t deadline_ns,
                             const issue_fn& issue, const std::function<void(std::uint64_t answered)>& progress) {
  auto st = std::make_shared<pipeline_state>();
  st->issue = &issue;
  st->count = count;
  st->deadline_ns = deadline_ns;
  pipeline_result out;
  {
    // The first window goes out from one loop callback, so every issue()
    // runs on the loop thread.
    std::promise<void> started;
    c.async_flush([&](std::error_code) {
      out.t0_ns = now_ns();
      for (int k = 0; k < window && st->issued.load() < count && !st->stopped; ++k) issue_next(st);
      started.set_value();
    });
    started.get_future().wait();
  }
  bool connected = true;
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const std::uint64_t answered = st->answered.load(std::memory_order_acquire);
    if (progress) progress(answered);
    const std::uint64_t issued = st->issued.load();
    const bool no_more = issued >= count || st->stopped || now_ns() >= deadline_ns;
    connected = c.connected();
    if (!connected || (no_more && answered >= issued)) break;
  }
  st->stopped = true;
  // A fence: once the loop thread has run this, no completion is inside
  // `issue` any more (and none will call it: stopped).
  if (connected)
    (void)c.flush();
  else
    c.close();
  out.issued = st->issued.load();
  out.answered = st->answered.load();
  out.failed = st->failed.load() + (out.issued - std::min(out.issued, out.answered));
  out.last_answer_ns = st->last_ns.load();
  return out;
}

}  // namespace switchyard::bench
