// switchyard-bench durable: N appends of P bytes with acknowledgements, at
// most W unacknowledged (the peers' definition), in one durability mode:
// --durability for the broker the bench starts; a broker of --address is
// in its own, which is reported when the broker lets the bench read it.
// switchyard-bench replay: append N records, then read the stream from
// sequence 1 to the end: records/s.
// On a broker of --address each run appends to a stream of its own (under
// the run's prefix) and empties it at the end (cleanup.cpp).

#include "bench/bench_common.hpp"

#include <vector>

namespace switchyard::bench {

namespace {
const char* policy(std::string_view mode) {
  if (mode == "batch") return "batch: fsync at most every 10 ms, acknowledged after commit";
  if (mode == "none") return "none: never fsynced by the server, acknowledged after commit";
  if (mode == "sync") return "sync: group commit, acknowledged after fsync";
  return "unknown: the broker's mode could not be read";
}

// The durability mode ("sync", "batch", "none") of the broker at t (from
// its settings: a Stats request, which needs the admin capability), or
// unexpected(why not).
std::expected<std::string, std::string> target_durability(const target& t) {
  auto o = options_for(t, "bench-settings");
  o.admin = true;  // Stats is an admin request
  auto c = client::connect(o);
  if (!c) return std::unexpected("connect: " + c.error().message());
  auto st = (*c)->stats();
  (*c)->close();
  if (!st) {
    if (st.error() == errc::not_supported || st.error() == errc::forbidden)
      return std::unexpected(std::string("reading the broker's settings needs the admin capability, not granted to "
                                         "these credentials"));
    return std::unexpected("stats: " + st.error().message());
  }
  for (const auto& [name, value] : st->settings)
    if (name == "durability") return value;
  return std::unexpected(std::string("the broker's settings do not say"));
}

}  // namespace

int run_durable(const settings& s, const target& t) {
  // The mode measured: the one the bench started its broker in, or the
  // mode of the broker of --address as it reports it.
  std::string mode = s.durability, mode_note;
  if (t.remote) {
    auto reported = target_durability(t);
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
  // At most W unacknowledged, each acknowledgement sending the next append
  // from the client's loop thread (see run_pipeline).
  const auto r = run_pipeline(
      c, count, s.window, UINT64_MAX,
      [&](std::uint64_t i, answer_fn answered) {
        put_u64(payload.data(), i);
        c.async_append(stream, payload,
                       [answered](std::expected<append_ack, std::error_code> a) { answered(a.has_value()); });
      },
      [&](std::uint64_t acked) {
        progress("durable: acknowledged {}/{}", acked, count);
      });
  progress_done();
  const std::uint64_t failed = r.failed + (count - std::min(count, r.issued));
  const std::uint64_t acked = r.answered - std::min(r.answered, r.failed);
  const double secs = static_cast<double>(std::max(r.last_answer_ns, r.t0_ns + 1) - r.t0_ns) / 1e9;
  auto stored = (*conn)->read(stream, 0, 1);
  const std::uint64_t stored_count = stored ? stored->last_seq : 0;
  if (t.remote) {
    cleaned = empty_stream(c, t, stream);
    cleanup_reported = true;
  }

  json_line j;
  j.str("broker", "switchyard").str("workload", "durable").integer("n", static_cast<long long>(count));
  j.integer("size", s.size).integer("window", s.window);
  j.integer("acked", static_cast<long long>(acked)).num("acked_rate", static_cast<double>(acked) / secs);
  j.integer("stored", static_cast<long long>(stored_count)).str("fsync", policy(mode));
  if (mode.empty()) j.raw("durability", "null");
  else j.str("durability", mode);
  j.str("stream", stream);
  if (failed) j.str("errors", fmt::format("{} appends failed", failed));
  emit(s,
       fmt::format("durable ({}): {} appends of {} B, window {}\n  acknowledged: {} ({:.0f}/s), stored {}\n",
                   t.remote ? mode_note : mode, count, s.size, s.window, acked, static_cast<double>(acked) / secs,
                   stored_count) +
           cleaned,
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
      [&](std::uint64_t n) {
        progress("replay: loading {}/{}", n, count);
      });
  if (loaded.failed || loaded.answered < count)
    return fail_line(s, fmt::format("{} appends failed while loading", count - (loaded.answered - loaded.failed)));

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
  if (t.remote) {
    cleaned = empty_stream(**conn, t, stream);
    cleanup_reported = true;
  }
  json_line j;
  j.str("broker", "switchyard").str("workload", "replay").integer("n", static_cast<long long>(count));
  j.integer("size", s.size).integer("read", static_cast<long long>(read)).num("read_rate", static_cast<double>(read) / secs);
  j.str("stream", stream);
  emit(s,
       fmt::format("replay: read {} records of {} B from sequence 1 in {:.3f} s: {:.0f} records/s\n", read, s.size,
                   secs, static_cast<double>(read) / secs) +
           cleaned,
       j);
  return read == count ? 0 : 1;
}

}  // namespace switchyard::bench
