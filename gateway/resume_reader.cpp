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
    if (job.wanted && !job.wanted()) continue;  // its socket is gone
    auto result = read(job);
    if (job.wanted && !job.wanted()) continue;
    job.done(std::move(result));
  }
}

resume_result resume_reader::read(const resume_job& job) {
  resume_result out;
  out.stream = job.stream;
  const auto gap = [&out](resume_gap g, std::uint64_t first) {
    if (out.gap == resume_gap::none) {
      out.gap = g;
      out.first_seq = first;
    }
  };
  // A read at `from` (0: the first record kept); a damaged record is
  // skipped (told once as a gap), a position trimmed away read from the
  // start.
  const auto read_at = [&](std::uint64_t from) -> std::expected<stream_read, std::error_code> {
    for (int skipped = 0; skipped < 64; ++skipped) {
      auto page = broker_.read(job.stream, from, page_records);
      if (page || page.error() != errc::corrupted) return page;
      gap(resume_gap::damaged, from + 1);
      ++from;
    }
    return std::unexpected(make_error_code(errc::corrupted));
  };
  auto page = read_at(job.from.seq == 0 ? 0 : job.from.seq + 1);
  if (!page && page.error() == errc::trimmed) {
    page = read_at(0);
    if (page) gap(resume_gap::trimmed, page->first_seq);
  }
  if (!page) {
    if (page.error() == errc::not_found || page.error() == errc::not_supported) {
      gap(resume_gap::stream_gone, 0);
      return out;
    }
    out.error = page.error();
    return out;
  }
  out.epoch = page->epoch;
  if (job.from.seq != 0 && job.from.epoch != page->epoch) {
    // Recreated since: its sequences started over, from its first record.
    out.gap = resume_gap::none;
    gap(resume_gap::epoch_changed, page->first_seq);
    if (page->records.empty() || page->records.front().seq != page->first_seq) page = read_at(0);
    if (!page) {
      out.error = page.error();
      return out;
    }
  }
  std::uint64_t scanned = 0;
  std::size_t bytes = 0;
  for (;;) {
    for (const auto& r : page->records) {
      out.read_to = r.seq + 1;
      if (std::find(r.route_keys.begin(), r.route_keys.end(), job.route_key) == r.route_keys.end()) continue;
      auto frame = std::make_shared<const std::string>(
          delivery_text({.payload = r.payload,
                         .stream = job.stream,
                         .seq = r.seq,
                         .epoch = page->epoch,
                         .replayed = true,
                         .ttl_ms = static_cast<std::uint64_t>(r.time_left.count())}));
      bytes += frame->size();
      out.frames.emplace_back(r.seq, std::move(frame));
      if (bytes >= job.max_bytes) {
        out.more = true;  // the rest once these are written
        return out;
      }
    }
    scanned += page->records.size() + page->expired;
    out.read_to = page->next_seq;
    if (page->next_seq > page->last_seq || (page->records.empty() && page->expired == 0)) return out;
    if (scanned >= max_scan_) {
      out.frames.clear();
      out.gap = resume_gap::none;
      gap(resume_gap::limit, page->next_seq);
      return out;
    }
    if (job.wanted && !job.wanted()) return out;
    page = read_at(page->next_seq);
    if (!page) {
      out.error = page.error();
      return out;
    }
  }
}

}  // namespace switchyard::edge
