// switchyard-cli: streams list / info / retention / read / tail / delete
// (the broker's sequence log, capability "log"; docs/protocol.md §13).

#include "admin/cli_context.hpp"
#include "admin/command.hpp"
#include "admin/interrupt.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace switchyard::admin {

namespace {

// How often `streams tail --follow` asks for new records once it has read
// everything (each time one Read; while records are there it reads on at
// once, a page at a time).
constexpr std::chrono::milliseconds tail_poll_interval{200};
// Records per Read while tailing (the broker's default page).
constexpr std::uint64_t tail_page = 1000;

// The fields of a record inside a JSON object (streams read, streams tail).
void write_record_fields(json_writer& j, const stream_record& rec) {
  const auto payload = render_payload(text_of(rec.payload));
  j.number("seq", rec.seq).number("timestamp_ms", rec.timestamp_ms);
  j.string("encoding", payload.encoding()).string("payload", payload.value);
  // How it was delivered live: a channel, route keys, or neither (a plain append).
  if (!rec.channel.empty()) j.string("channel", rec.channel);
  if (!rec.route_keys.empty()) {
    j.key("route_keys").begin_array();
    for (const auto& k : rec.route_keys) j.string(std::string_view(k));
    j.end_array();
  }
}

// The stream names a retention change with limits may use (it may create
// the stream): 1..255 bytes of printable ASCII, no spaces. The broker's
// rule (protocol::is_printable_stream_name), checked here before sending.
bool printable_stream_name(std::string_view name) {
  return !name.empty() && name.size() <= 255 &&
         std::all_of(name.begin(), name.end(), [](char c) { return c > ' ' && c < 0x7f; });
}

}  // namespace

int command::streams_list() {
  bool more = false;
  auto list = client_->stream_list(s_.prefix, s_.limit, &more);
  if (!list) return fail(list.error(), "streams list");
  return print_list(
      "streams", *list, more, [](json_writer& j, const stream_summary& st) { write_stream(j, st); },
      {"STREAM", "FIRST", "LAST", "RECORDS", "BYTES", "CREATED", "RETENTION"},
      {false, true, true, true, true, false, false},
      [](const stream_summary& st) {
        return std::vector<std::string>{st.name,
                                        std::to_string(st.first_seq),
                                        std::to_string(st.last_seq),
                                        std::to_string(st.records),
                                        std::to_string(st.bytes),
                                        format_utc(st.created_ms),
                                        describe(st)};
      });
}

int command::streams_info() {
  auto st = client_->stream_info(s_.stream);
  if (!st) return fail(st.error(), "streams info " + s_.stream);
  print_stream(*st);
  return exit_ok;
}

int command::streams_retention() {
  const auto age = std::chrono::milliseconds(static_cast<std::int64_t>(s_.max_age_ms));
  const auto st = s_.clear        ? client_->clear_stream_retention(s_.stream)
                  : s_.set_limits ? client_->set_stream_retention(s_.stream, {s_.max_records, age, s_.max_bytes})
                                  : client_->stream_info(s_.stream);  // no change asked: show it
  if (!st) return fail(st.error(), "streams retention " + s_.stream);
  print_stream(*st);
  return exit_ok;
}

int command::fail_corrupted(std::error_code ec, const std::string& what, std::uint64_t from) {
  // The broker answers the records before a damaged one, so a read fails
  // only when its first record is damaged: that one (with --from 0, the
  // stream's first retained record).
  std::uint64_t bad = from;
  if (bad == 0)
    if (auto st = client_->stream_info(s_.stream)) bad = st->first_seq;
  const std::string at = bad != 0 ? "record " + std::to_string(bad) : "a record";
  const std::string past = bad != 0 ? "; --from " + std::to_string(bad + 1) + " reads past it" : "";
  return fail(exit_server_error, error_code_name(ec),
              what + ": " + at + " is damaged in the broker's sequence log (corrupted)" + past +
                  "; check the whole log with switchyard-server --verify-log --data-dir <its data dir> on the "
                  "broker's host");
}

int command::streams_read() {
  const std::string what = "streams read " + s_.stream;
  auto r = client_->read(s_.stream, s_.from, s_.count);
  if (!r && r.error() == errc::corrupted) return fail_corrupted(r.error(), what, s_.from);
  if (!r) {
    if (r.error() != errc::trimmed) return fail(r.error(), what);
    // Say where the stream starts now (the broker's error carries it, the
    // client library does not pass it on).
    auto st = client_->stream_info(s_.stream);
    const std::string starts = st ? "; the stream starts at " + std::to_string(st->first_seq) + " now" : "";
    return fail(exit_server_error, "trimmed",
                what + ": sequence " + std::to_string(s_.from) + " was trimmed" + starts +
                    " (--from 0 reads from the first retained record)");
  }
  // next_seq also steps over records left out because they had expired.
  const std::uint64_t next = r->next_seq != 0     ? r->next_seq
                             : r->records.empty() ? std::max(s_.from, r->first_seq)
                                                  : r->records.back().seq + 1;
  const bool more = next <= r->last_seq;
  if (s_.json) {
    json_writer j;
    j.begin_object().string("stream", s_.stream).string("epoch", std::to_string(r->epoch));
    j.number("first_seq", r->first_seq).number("last_seq", r->last_seq);
    j.key("records").begin_array();
    for (const auto& rec : r->records) {
      j.begin_object();
      write_record_fields(j, rec);
      j.end_object();
    }
    j.end_array().number("expired", r->expired).boolean("more", more).number("next_seq", next).end_object();
    out_ << j.str() << "\n";
    return exit_ok;
  }
  out_ << "stream " << s_.stream << "  epoch " << r->epoch << "  first_seq " << r->first_seq << "  last_seq "
       << r->last_seq << "\n";
  std::vector<std::vector<std::string>> rows{{"SEQ", "TIME", "TO", "ENCODING", "PAYLOAD"}};
  for (const auto& rec : r->records) {
    auto payload = render_payload(text_of(rec.payload));
    rows.push_back({std::to_string(rec.seq), format_utc(rec.timestamp_ms), delivered_to(rec),
                    std::string(payload.encoding()), std::move(payload.value)});
  }
  if (rows.size() > 1)
    out_ << format_table(rows, {true, false, false, false, false});
  else if (r->expired == 0)
    out_ << "no records from seq " << next << "\n";
  if (r->expired != 0) out_ << "(" << r->expired << " expired records left out)\n";
  if (more) out_ << "(more from seq " << next << ": --from " << next << ")\n";
  return exit_ok;
}

// Polls with Read rather than a durable subscription: a subscription
// delivers only the records published to channels its pattern matches
// (nothing of plain appends or sends), while a read returns every record
// of the stream, in order, whatever appended it. Each wait is bounded
// (tail_poll_interval, in slices that notice SIGINT/SIGTERM), so the
// command ends within a slice of a signal, and the request timeout
// (--timeout-ms) bounds each read, not how long it follows.
int command::streams_tail() {
  const std::string what = "streams tail " + s_.stream;
  auto st = client_->stream_info(s_.stream);
  if (!st) return fail(st.error(), what);
  std::uint64_t epoch = st->epoch;
  // Where to start: --from (0 = the first retained record), else the last
  // --last records.
  std::uint64_t next = s_.from_given ? std::max(s_.from, st->first_seq)
                                     : std::max(st->first_seq, st->last_seq + 1 - std::min(s_.last, st->last_seq));
  if (s_.from_given && s_.from != 0 && s_.from < st->first_seq)
    return fail(exit_server_error, "trimmed",
                what + ": sequence " + std::to_string(s_.from) + " was trimmed; the stream starts at " +
                    std::to_string(st->first_seq) + " now (--from 0 reads from the first retained record)");
  interrupt_guard interrupt;
  std::uint64_t printed = 0;
  bool gone = false;  // told that the stream was deleted, waiting for it to come back
  const auto note = [&](const std::string& line) { err_ << cli_name << ": " << what << ": " << line << std::endl; };
  while (!interrupt.requested() && (s_.stop_after == 0 || printed < s_.stop_after)) {
    const std::uint64_t want = s_.stop_after == 0 ? tail_page : std::min(tail_page, s_.stop_after - printed);
    auto r = client_->read(s_.stream, next, static_cast<std::size_t>(want));
    if (!r) {
      const auto ec = r.error();
      if (ec == errc::corrupted) return fail_corrupted(ec, what, next);
      if (!s_.follow) return fail(ec, what);
      if (ec == errc::not_found) {
        // Deleted while followed: wait for a stream of that name.
        if (!gone) note("the stream was deleted; waiting for it to be created again");
        gone = true;
      } else if (ec == errc::trimmed) {
        // Retention removed records before they were read: say so, and go
        // on from the first one left.
        auto now = client_->stream_info(s_.stream);
        if (!now) return fail(now.error(), what);
        note("records " + std::to_string(next) + ".." + std::to_string(now->first_seq - 1) +
             " were trimmed before they were read; going on from " + std::to_string(now->first_seq));
        next = now->first_seq;
        continue;
      } else {
        return fail(ec, what);
      }
      if (interrupt.sleep_for(tail_poll_interval)) break;
      continue;
    }
    if (r->epoch != epoch) {
      // Deleted and created again (or recreated) meanwhile: its sequences
      // start again, so follow the new stream from its first record.
      if (!gone)
        note("the stream was recreated (epoch " + std::to_string(epoch) + " -> " + std::to_string(r->epoch) + ")");
      note("following the new stream from its first record");
      epoch = r->epoch;
      next = r->first_seq;
      gone = false;
      continue;
    }
    gone = false;
    for (const auto& rec : r->records) {
      if (s_.json) {
        json_writer j;
        j.begin_object().string("stream", s_.stream).string("epoch", std::to_string(epoch));
        write_record_fields(j, rec);
        j.end_object();
        out_ << j.str() << "\n";
      } else {
        const auto payload = render_payload(text_of(rec.payload));
        out_ << rec.seq << "  " << format_utc(rec.timestamp_ms) << "  " << delivered_to(rec) << "  "
             << payload.encoding() << "  " << payload.value << "\n";
      }
      ++printed;
    }
    out_.flush();
    // next_seq steps over expired records too (an answer of only those
    // still moves on).
    const std::uint64_t after = r->next_seq != 0 ? r->next_seq : r->records.empty() ? next : r->records.back().seq + 1;
    if (after > next) {
      next = after;
      continue;  // more may be there already
    }
    if (!s_.follow) break;  // read to the end
    next = std::max(next, r->first_seq);
    if (interrupt.sleep_for(tail_poll_interval)) break;
  }
  return exit_ok;
}

int command::streams_delete() {
  auto st = client_->delete_stream(s_.stream);
  if (!st) return fail(st.error(), "streams delete " + s_.stream);
  if (s_.json) {
    json_writer j;
    j.begin_object().boolean("deleted", true).key("stream");
    write_stream(j, *st);
    j.end_object();
    out_ << j.str() << "\n";
    return exit_ok;
  }
  out_ << "deleted stream " << st->name << ": " << st->records << " records, " << st->bytes << " bytes";
  if (st->records > 0) out_ << " (seq " << st->first_seq << ".." << st->last_seq << ")";
  out_ << "; a new append to " << st->name << " starts a new stream (a new epoch, from seq 1)\n";
  return exit_ok;
}

// "channel orders.eu", "users alice,bob", "-" (a plain append).
std::string command::delivered_to(const stream_record& rec) {
  if (!rec.channel.empty()) return "channel " + rec.channel;
  if (rec.route_keys.empty()) return "-";
  std::string keys;
  for (const auto& k : rec.route_keys) keys += (keys.empty() ? "" : ",") + k;
  return "users " + keys;
}

// "records<=100 age<=1h (own)", "none (default)".
std::string command::describe(const stream_summary& st) {
  const auto& r = st.retention;
  std::string out;
  const auto add = [&](std::string part) { out += (out.empty() ? "" : " ") + part; };
  if (r.max_records) add("records<=" + std::to_string(r.max_records));
  if (r.max_age.count() > 0) add("age<=" + format_duration_ms(static_cast<std::uint64_t>(r.max_age.count())));
  if (r.max_bytes) add("bytes<=" + std::to_string(r.max_bytes));
  if (out.empty()) out = "none";
  return out + (st.own_retention ? " (own)" : " (default)");
}

// The stream as a JSON object. The epoch is a string: 64-bit values do
// not survive JSON parsers that read numbers as doubles.
void command::write_stream(json_writer& j, const stream_summary& st) {
  j.begin_object().string("name", st.name).string("epoch", std::to_string(st.epoch));
  j.number("first_seq", st.first_seq).number("last_seq", st.last_seq);
  j.number("records", st.records).number("bytes", st.bytes).number("created_ms", st.created_ms);
  j.key("retention").begin_object();
  j.number("max_records", st.retention.max_records);
  j.number("max_age_ms", static_cast<std::uint64_t>(st.retention.max_age.count()));
  j.number("max_bytes", st.retention.max_bytes);
  j.string("source", st.own_retention ? "own" : "default");
  j.end_object().end_object();
}

void command::print_stream(const stream_summary& st) {
  if (s_.json) {
    json_writer j;
    write_stream(j, st);
    out_ << j.str() << "\n";
    return;
  }
  const auto& r = st.retention;
  out_ << format_table({{"stream", st.name},
                        {"epoch", std::to_string(st.epoch)},
                        {"first_seq", std::to_string(st.first_seq)},
                        {"last_seq", std::to_string(st.last_seq)},
                        {"records", std::to_string(st.records)},
                        {"bytes", std::to_string(st.bytes)},
                        {"created", format_utc(st.created_ms)},
                        {"retention", describe(st)},
                        {"  max_records", std::to_string(r.max_records)},
                        {"  max_age_ms", std::to_string(r.max_age.count())},
                        {"  max_bytes", std::to_string(r.max_bytes)}},
                       {});
}

void register_stream_commands(CLI::App& app, cli_context& cli) {
  settings& s = cli.s();
  auto* streams = app.add_subcommand("streams", "streams of the broker's sequence log");
  streams->require_subcommand(1, 1);

  auto* list = streams->add_subcommand("list", "list streams in name order: positions, size, retention");
  list->add_option("--prefix", s.prefix, "only streams whose name starts with this");
  list->add_option("--limit", s.limit, "at most this many (0 = the broker's default, 1000; at most 10000)")
      ->check(whole_number)
      ->capture_default_str();

  auto* info = streams->add_subcommand("info", "one stream: epoch, positions, size, retention in force");
  info->add_option("name", s.stream, "stream name")->required();

  auto* retention = streams->add_subcommand(
      "retention",
      "show or set a stream's own retention. The limits given replace the stream's own (an omitted limit is 0 = "
      "no limit; an unknown stream is created, empty); --clear reverts to the broker's default; with neither, "
      "shows the retention in force");
  retention->add_option("name", s.stream, "stream name")->required();
  auto* records = retention->add_option("--max-records", s.max_records, "keep at most this many records (0 = none)")
                      ->check(whole_number);
  auto* age = retention->add_option("--max-age-ms", s.max_age_ms, "drop records older than this, ms (0 = none)")
                  ->check(whole_number);
  auto* bytes = retention
                    ->add_option("--max-bytes", s.max_bytes,
                                 "keep at most this many record bytes, payload plus delivery destination (0 = none)")
                    ->check(whole_number);
  retention->add_flag("--clear", s.clear, "drop the stream's own limits: the broker's default applies again")
      ->excludes(records)
      ->excludes(age)
      ->excludes(bytes);

  auto* read = streams->add_subcommand(
      "read", "print records: payloads as text when printable UTF-8 (no control characters), else base64");
  read->add_option("name", s.stream, "stream name")->required();
  read->add_option("--from", s.from, "first sequence (0 = the first retained)")
      ->check(whole_number)
      ->capture_default_str();
  read->add_option("--count", s.count, "at most this many records (the broker answers at most 10000)")
      ->check(whole_number)
      ->check(CLI::Range(std::size_t{1}, std::size_t{10'000}))
      ->capture_default_str();

  auto* tail = streams->add_subcommand(
      "tail",
      "print a stream's records one line each (with --json one object each): the last --last records, or from "
      "--from, to the end; with --follow also those appended later, until SIGINT/SIGTERM (exit 0) or --count");
  tail->add_option("name", s.stream, "stream name")->required();
  auto* tail_from =
      tail->add_option("--from", s.from, "first sequence (0 = the first retained record)")->check(whole_number);
  tail->add_option("--last", s.last, "without --from: start this many records before the end (0 = only new ones)")
      ->check(whole_number)
      ->capture_default_str()
      ->excludes(tail_from);
  tail->add_flag("--follow,-f", s.follow,
                 "keep reading records appended later (polling every 200 ms); a deleted stream is waited for, "
                 "and one created again is followed from its first record");
  tail->add_option("--count", s.stop_after, "exit 0 after this many records (0 = no limit)")
      ->check(whole_number)
      ->capture_default_str();

  auto* del = streams->add_subcommand(
      "delete",
      "delete a stream: its records, its metadata and its own retention, at once; a later append starts a new "
      "stream of that name (a new epoch, from sequence 1). Prints what it held");
  del->add_option("name", s.stream, "stream name")->required();
  cli.add_check([&s, records, age, bytes, tail_from]() -> std::string {
    s.set_limits = records->count() + age->count() + bytes->count() > 0;
    s.from_given = tail_from->count() > 0;
    // The broker refuses it too; checked here so that nothing is sent.
    if (s.command == "streams retention" && s.set_limits && !printable_stream_name(s.stream))
      return "streams retention: the stream name must be 1..255 bytes of printable ASCII without spaces to be "
             "given limits (a stream of another name can still be shown, cleared or deleted); got '" +
             s.stream + "'";
    return {};
  });
}

}  // namespace switchyard::admin
