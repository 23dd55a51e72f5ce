// switchyard-bench durable: N appends of P bytes with acknowledgements, at
// most W unacknowledged (the peers' definition), in one durability mode:
// --durability for the broker the bench starts; a broker of --address is
// in its own, which is reported when the broker lets the bench read it.
// Beside the rate it reports what the broker's group committer did for the
// run (batches and fsyncs, from its Stats before and after) and, after the
// run, a short probe of the data folder's disk (fsync_probe.hpp), so a
// reader can tell a fast disk from a fast path.
// switchyard-bench replay: append N records, then read the stream from
// sequence 1 to the end: records/s.
// On a broker of --address each run appends to a stream of its own (under
// the run's prefix) and empties it at the end (cleanup.cpp).

#include "bench/bench_common.hpp"
#include "bench/cpu_usage.hpp"
#include "bench/fsync_probe.hpp"

#include <filesystem>
#include <optional>
#include <vector>

namespace switchyard::bench {

namespace {
const char* policy(std::string_view mode) {
  if (mode == "batch") return "batch: fsync at most every 10 ms, acknowledged after commit";
  if (mode == "none") return "none: never fsynced by the server, acknowledged after commit";
  if (mode == "sync") return "sync: group commit, acknowledged after fsync";
  return "unknown: the broker's mode could not be read";
}

// The durability mode ("sync", "batch", "none") in the broker's settings,
// or unexpected(why not).
std::expected<std::string, std::string> durability_of(const std::expected<server_stats, std::string>& st) {
  if (!st) return std::unexpected(st.error());
  if (auto mode = setting_of(*st, "durability")) return *mode;
  return std::unexpected(std::string("the broker's settings do not say"));
}

// What the group committer did between two Stats: appends, batches
// (commits) and fsyncs (log_*_total), or why it is not known.
struct commit_work {
  std::uint64_t appends = 0, batches = 0, fsyncs = 0;
  // Appends per batch, per fsync (NaN for none).
  static double per(std::uint64_t appends, std::uint64_t n) {
    return n ? static_cast<double>(appends) / static_cast<double>(n) : NAN;
  }
};
std::expected<commit_work, std::string> commit_work_between(const std::expected<server_stats, std::string>& before,
                                                            const std::expected<server_stats, std::string>& after) {
  if (!before) return std::unexpected(before.error());
  if (!after) return std::unexpected(after.error());
  commit_work w;
  for (const auto& [name, field] : {std::pair{"log_appends_total", &w.appends},
                                    {"log_commit_batches_total", &w.batches},
                                    {"log_fsyncs_total", &w.fsyncs}}) {
    const auto a = value_of(*before, name), b = value_of(*after, name);
    if (!a || !b) return std::unexpected(fmt::format("the broker does not report {} (an older version)", name));
    *field = *b - *a;
  }
  return w;
}

// The data folder to probe: the broker's (from its settings), where this
// process can reach it: a broker the bench started, or one of --address on
// this machine (a loopback address) whose folder exists here.
std::expected<std::filesystem::path, std::string> probe_folder(const target& t,
                                                               const std::expected<server_stats, std::string>& st) {
  if (!st) return std::unexpected(st.error());
  const auto dir = setting_of(*st, "data_dir");
  if (!dir) return std::unexpected(std::string("the broker's settings do not name its data folder"));
  const bool loopback = t.host == "127.0.0.1" || t.host == "localhost" || t.host == "::1";
  if (t.remote && !loopback)
    return std::unexpected("not measured: the data folder of a broker at " + t.address + " is not on this machine");
  std::error_code ec;
  if (!std::filesystem::is_directory(*dir, ec)) return std::unexpected("not measured: no folder " + *dir + " here");
  return std::filesystem::path(*dir);
}

}  // namespace

int run_durable(const settings& s, const target& t) {
  // The broker's figures before the run; its settings name the mode of a
  // broker of --address (the bench's own is in s.durability).
  const auto stats_before = broker_stats(t);
  std::string mode = s.durability, mode_note;
  if (t.remote) {
    auto reported = durability_of(stats_before);
    mode = reported ? *reported : std::string();
    mode_note = reported ? fmt::format("{}, the mode of the broker at {}", mode, t.address)
                         : fmt::format("mode unknown: {}", reported.error());
  }
  auto conn = client::connect(options_for(t, "bench-durable"));
  if (!conn) return fail_line(s, "connect: " + conn.error().message());
  client& c = **conn;
  const std::string stream = stream_for(t, "durable");
  std::string cleaned;
  bool cleanup_reported = false;
  const scope_exit clean_up([&] {
    if (t.remote && !cleanup_reported) std::fputs(empty_stream(c, t, stream).c_str(), s.json ? stderr : stdout);
  });
  std::vector<std::byte> payload(static_cast<std::size_t>(s.size), std::byte{'x'});
  const auto count = static_cast<std::uint64_t>(s.count);
  const cpu_meter cpu(t.server);
  // At most W unacknowledged, each acknowledgement sending the next append
  // from the client's loop thread (see run_pipeline).
  const auto r = run_pipeline(
      c, count, s.window, UINT64_MAX,
      [&](std::uint64_t i, answer_fn answered) {
        put_u64(payload.data(), i);
        c.async_append(stream, payload,
                       [answered](std::expected<append_ack, std::error_code> a) { answered(a.has_value()); });
      },
      [&](std::uint64_t acked) { progress("durable: acknowledged {}/{}", acked, count); });
  progress_done();
  const std::uint64_t failed = r.failed + (count - std::min(count, r.issued));
  const std::uint64_t acked = r.answered - std::min(r.answered, r.failed);
  const cpu_cost cost = cpu.stop(acked, "acknowledged append");
  const double secs = static_cast<double>(std::max(r.last_answer_ns, r.t0_ns + 1) - r.t0_ns) / 1e9;
  // Every acknowledged append's batch was committed (and in the sync mode
  // fsynced) before its acknowledgement: the counters hold the run.
  const auto work = commit_work_between(stats_before, broker_stats(t));
  auto stored = (*conn)->read(stream, 0, 1);
  const std::uint64_t stored_count = stored ? stored->last_seq : 0;
  if (t.remote) {
    cleaned = empty_stream(c, t, stream);
    cleanup_reported = true;
  }
  // The disk, once the broker is idle.
  std::expected<fsync_probe_result, std::string> disk = std::unexpected(std::string("not measured: --fsync-probe 0"));
  if (s.fsync_probe > 0) {
    progress("durable: probing the data folder's disk for {} s", s.fsync_probe);
    const auto folder = probe_folder(t, stats_before);
    disk = folder ? probe_fsync(*folder, s.fsync_probe) : std::unexpected(folder.error());
    progress_done();
  }

  json_line j;
  j.str("broker", "switchyard").str("workload", "durable").integer("n", static_cast<long long>(count));
  j.integer("size", s.size).integer("window", s.window);
  j.integer("acked", static_cast<long long>(acked)).num("acked_rate", static_cast<double>(acked) / secs);
  j.integer("stored", static_cast<long long>(stored_count)).str("fsync", policy(mode));
  if (mode.empty())
    j.raw("durability", "null");
  else
    j.str("durability", mode);
  j.str("stream", stream);
  std::string work_line;
  if (work) {
    const auto& w = *work;
    json_line o;
    o.integer("appends", static_cast<long long>(w.appends)).integer("batches", static_cast<long long>(w.batches));
    o.integer("fsyncs", static_cast<long long>(w.fsyncs));
    o.num("appends_per_batch", w.per(w.appends, w.batches)).num("appends_per_fsync", w.per(w.appends, w.fsyncs));
    j.raw("group_commit", o.done());
    work_line = fmt::format("  group commit: {} appends in {} batches, {} fsyncs{}{}\n", w.appends, w.batches, w.fsyncs,
                            w.fsyncs ? fmt::format(" ({:.1f} appends per fsync)", w.per(w.appends, w.fsyncs))
                                     : std::string(" (none: nothing waited for the disk)"),
                            w.appends != acked ? " (the broker's counters: other clients' appends count too)" : "");
  } else {
    j.raw("group_commit", "null").str("group_commit_note", work.error());
    work_line = "  group commit: not known: " + work.error() + "\n";
  }
  std::string disk_line;
  if (disk) {
    j.raw("fsync_probe", disk->json());
    disk_line = fmt::format("  disk: {} in {} ({}): p50 {:.0f} us, p99 {:.0f} us, max {:.0f} us ({} in {:.1f} s){}\n",
                            fmt::format("{} KiB append + fdatasync", disk->bytes / 1024), disk->dir, disk->fs,
                            disk->p50_us, disk->p99_us, disk->max_us, disk->ops, disk->secs,
                            disk->error.empty() ? "" : "; stopped: " + disk->error);
  } else {
    j.raw("fsync_probe", "null").str("fsync_probe_note", disk.error());
    disk_line = "  disk: " + disk.error() + "\n";
  }
  j.raw("cpu", cost.json());
  if (failed) j.str("errors", fmt::format("{} appends failed", failed));
  emit(s,
       fmt::format("durable ({}): {} appends of {} B, window {}\n  acknowledged: {} ({:.0f}/s), stored {}\n",
                   t.remote ? mode_note : mode, count, s.size, s.window, acked, static_cast<double>(acked) / secs,
                   stored_count) +
           work_line + disk_line + cost.summary() + cleaned,
       j);
  return failed ? 1 : 0;
}

int run_replay(const settings& s, const target& t) {
  auto conn = client::connect(options_for(t, "bench-replay"));
  if (!conn) return fail_line(s, "connect: " + conn.error().message());
  const std::string stream = stream_for(t, "replay");
  std::string cleaned;
  bool cleanup_reported = false;
  const scope_exit clean_up([&] {
    if (t.remote && !cleanup_reported) std::fputs(empty_stream(**conn, t, stream).c_str(), s.json ? stderr : stdout);
  });
  std::vector<std::byte> payload(static_cast<std::size_t>(s.size), std::byte{'x'});
  const auto count = static_cast<std::uint64_t>(s.count);
  const auto loaded = run_pipeline(
      **conn, count, 4096, UINT64_MAX,
      [&](std::uint64_t, answer_fn answered) {
        (*conn)->async_append(stream, payload,
                              [answered](std::expected<append_ack, std::error_code> r) { answered(r.has_value()); });
      },
      [&](std::uint64_t n) { progress("replay: loading {}/{}", n, count); });
  if (loaded.failed || loaded.answered < count)
    return fail_line(s, fmt::format("{} appends failed while loading", count - (loaded.answered - loaded.failed)));

  const cpu_meter cpu(t.server);
  const std::uint64_t t0 = now_ns();
  std::uint64_t read = 0, from = 1;
  for (int guard = 0; guard < 10'000'000 && read < count; ++guard) {
    auto r = (*conn)->read(stream, from);
    if (!r) return fail_line(s, "read: " + r.error().message());
    if (r->records.empty()) break;
    read += r->records.size();
    from = r->records.back().seq + 1;
    if (guard % 50 == 0) progress("replay: read {}/{}", read, count);
  }
  progress_done();
  const double secs = static_cast<double>(now_ns() - t0) / 1e9;
  const cpu_cost cost = cpu.stop(read, "record read");
  if (t.remote) {
    cleaned = empty_stream(**conn, t, stream);
    cleanup_reported = true;
  }
  json_line j;
  j.str("broker", "switchyard").str("workload", "replay").integer("n", static_cast<long long>(count));
  j.integer("size", s.size)
      .integer("read", static_cast<long long>(read))
      .num("read_rate", static_cast<double>(read) / secs);
  j.str("stream", stream).raw("cpu", cost.json());
  emit(s,
       fmt::format("replay: read {} records of {} B from sequence 1 in {:.3f} s: {:.0f} records/s\n", read, s.size,
                   secs, static_cast<double>(read) / secs) +
           cost.summary() + cleaned,
       j);
  return read == count ? 0 : 1;
}

}  // namespace switchyard::bench
