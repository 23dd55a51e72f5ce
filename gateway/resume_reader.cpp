#include "gateway/resume_reader.hpp"

#include <algorithm>

namespace switchyard::edge {

namespace {

constexpr std::size_t page_records = 1000;

}  // namespace

resume_reader::resume_reader(client& broker, std::size_t max_jobs, std::uint64_t max_scan)
    : broker_(broker), max_jobs_(max_jobs), max_scan_(max_scan), thread_([this] { run(); }) {}

resume_reader::~resume_reader() {
  {
    switchyard::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

bool resume_reader::submit(resume_job job) {
  {
    switchyard::lock_guard lock(mu_);
    if (stop_ || jobs_.size() >= max_jobs_) return false;
    jobs_.push_back(std::move(job));
  }
  wake_.notify_one();
  return true;
}

void resume_reader::run() {
  for (;;) {
    resume_job job;
    {
      switchyard::unique_lock lock(mu_);
      wake_.wait(lock.native(), [&]() SWITCHYARD_REQUIRES(mu_) { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job.done(read(job));
  }
}

resume_result resume_reader::read(const resume_job& job) {
  resume_result out;
  out.stream = job.stream;
  std::uint64_t from = job.from.seq + 1;
  // The first page says where the stream is; a position in another epoch,
  // or before the first record kept, is a gap: told, then read from the
  // first record there is.
  auto page = broker_.read(job.stream, job.from.seq == 0 ? 0 : from, page_records);
  if (!page && page.error() == errc::trimmed) {
    out.gap = resume_gap::trimmed;
    page = broker_.read(job.stream, 0, page_records);
  }
  if (!page) {
    if (page.error() == errc::not_found) {
      out.gap = resume_gap::stream_gone;
      return out;
    }
    out.error = page.error();
    return out;
  }
  out.epoch = page->epoch;
  if (job.from.seq != 0 && job.from.epoch != page->epoch) {
    out.gap = resume_gap::epoch_changed;
    if (page->records.empty() || page->records.front().seq != page->first_seq)
      page = broker_.read(job.stream, 0, page_records);
    if (!page) {
      out.error = page.error();
      return out;
    }
  }
  if (out.gap != resume_gap::none) out.first_seq = page->first_seq;
  std::uint64_t scanned = 0;
  for (;;) {
    for (const auto& r : page->records) {
      if (std::find(r.route_keys.begin(), r.route_keys.end(), job.route_key) == r.route_keys.end()) continue;
      out.frames.emplace_back(r.seq, std::make_shared<const std::string>(
                                         delivery_text({.payload = r.payload,
                                                        .stream = job.stream,
                                                        .seq = r.seq,
                                                        .epoch = page->epoch,
                                                        .replayed = true,
                                                        .ttl_ms = static_cast<std::uint64_t>(r.time_left.count())})));
    }
    scanned += page->records.size() + page->expired;
    out.read_to = page->next_seq;
    if (page->next_seq > page->last_seq || (page->records.empty() && page->expired == 0)) return out;
    if (scanned >= max_scan_) {
      out.gap = resume_gap::limit;
      out.first_seq = page->next_seq;
      out.frames.clear();
      return out;
    }
    page = broker_.read(job.stream, page->next_seq, page_records);
    if (!page) {
      out.error = page.error();
      return out;
    }
  }
}

}  // namespace switchyard::edge
