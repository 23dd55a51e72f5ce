// The client library's gap tracking, driven against an in-memory log: no
// broker, no sockets; the read answers are fed back the way the client's
// loop does (asynchronously, in order).

#include "client-lib/stream_tracker.hpp"

#include <catch2/catch.hpp>

#include <deque>
#include <optional>
#include <set>
#include <string>
#include <vector>

using switchyard::errc;
using switchyard::position_lost;
using switchyard::resume_at;
using switchyard::stream_positions;
using switchyard::stream_read;
using switchyard::stream_record;
using switchyard::unrecoverable_position;
using switchyard::detail::stream_tracker;

namespace {

// One stream's log: sequences first..last retained, with an epoch.
struct fake_stream {
  std::uint64_t epoch = 7;
  std::uint64_t first = 1;
  std::uint64_t last = 0;
  std::set<std::uint64_t> expired;  // left out of reads, as the broker does once their expiry passed
};

struct harness {
  std::map<std::string, fake_stream, std::less<>> log;
  std::size_t batch = 1000;                                   // records per read answer
  std::optional<std::error_code> fail_next;                   // the next read fails with this
  std::deque<std::pair<std::string, std::uint64_t>> pending;  // reads issued, not yet answered
  std::vector<std::pair<std::string, std::uint64_t>> reads;   // every read issued
  std::vector<std::uint64_t> delivered;                       // sequences handed to the application, in order
  std::vector<unrecoverable_position> lost;
  resume_at policy = resume_at::first_available;
  stream_tracker tracker{[this](const std::string& s, std::uint64_t from) {
                           pending.emplace_back(s, from);
                           reads.emplace_back(s, from);
                         },
                         [this](const unrecoverable_position& u) {
                           lost.push_back(u);
                           return policy;
                         }};

  void append(const std::string& stream, std::uint64_t n) { log[stream].last += n; }

  // A live message: delivered or not, as the tracker decides.
  void live(const std::string& stream, std::uint64_t seq) {
    if (tracker.live(stream, seq, log[stream].epoch)) delivered.push_back(seq);
  }

  // Answers every pending read (and the reads they cause), bounded.
  void pump() {
    for (int i = 0; i < 1000 && !pending.empty(); ++i) {
      const auto [stream, from] = pending.front();
      pending.pop_front();
      if (fail_next) {
        const auto ec = *fail_next;
        fail_next.reset();
        tracker.read_failed(stream, ec);
        continue;
      }
      auto it = log.find(stream);
      if (it == log.end()) {
        tracker.read_failed(stream, errc::not_found);
        continue;
      }
      const auto& s = it->second;
      if (from != 0 && from < s.first) {
        tracker.read_failed(stream, errc::trimmed);
        continue;
      }
      stream_read r{s.epoch, s.first, s.last, {}};
      // As the broker: expired records count towards the batch, are left
      // out and counted; next_seq follows the last one examined.
      std::uint64_t q = std::max(from, s.first);
      for (std::size_t examined = 0; q <= s.last && examined < batch; ++q, ++examined) {
        if (s.expired.contains(q))
          ++r.expired;
        else
          r.records.push_back(stream_record{q, 0, {}, "ch", {}});
      }
      r.next_seq = q;
      tracker.read_done(stream, r, [&](const std::string&, std::uint64_t, const stream_record& rec) {
        delivered.push_back(rec.seq);
      });
    }
    REQUIRE(pending.empty());
  }
};

std::vector<std::uint64_t> range(std::uint64_t from, std::uint64_t to) {
  std::vector<std::uint64_t> v;
  for (auto q = from; q <= to; ++q) v.push_back(q);
  return v;
}

}  // namespace

TEST_CASE("in-order live messages are delivered once, duplicates skipped", "[client-lib]") {
  harness h;
  h.append("s", 3);
  h.live("s", 1);
  h.live("s", 2);
  h.live("s", 2);
  h.live("s", 1);
  h.live("s", 3);
  CHECK(h.delivered == range(1, 3));
  CHECK(h.reads.empty());
  CHECK(h.tracker.positions().at("s").seq == 3);
}

TEST_CASE("a sequence jump reads the missing range and resumes live without duplicates", "[client-lib]") {
  harness h;
  h.append("s", 10);
  h.live("s", 1);
  h.live("s", 5);  // 2..4 were dropped on the way
  REQUIRE(h.reads.size() == 1);
  CHECK(h.reads[0].second == 2);
  h.live("s", 6);  // arrives while the read is under way: left to the log
  h.live("s", 7);
  h.pump();
  CHECK(h.delivered == range(1, 10));  // the log had up to 10 when it answered
  h.live("s", 8);                      // late live copies are duplicates now
  h.append("s", 1);
  h.live("s", 11);
  CHECK(h.delivered == range(1, 11));
}

TEST_CASE("recovery reads repeat in batches until caught up", "[client-lib]") {
  harness h;
  h.batch = 3;
  h.append("s", 20);
  h.live("s", 1);
  h.live("s", 20);
  h.pump();
  CHECK(h.delivered == range(1, 20));
  CHECK(h.reads.size() == 7);  // 2-4, 5-7, ..., 17-19, 20
}

TEST_CASE("a dropped notice reads every stream's tail", "[client-lib]") {
  harness h;
  h.append("a", 2);
  h.append("b", 1);
  h.live("a", 1);
  h.live("b", 1);
  h.append("a", 3);  // a: 2..5 exist, none arrived live
  h.tracker.check_all();
  h.pump();
  CHECK(h.delivered == std::vector<std::uint64_t>{1, 1, 2, 3, 4, 5});
  CHECK(h.tracker.positions().at("a").seq == 5);
  CHECK(h.tracker.positions().at("b").seq == 1);
  CHECK(h.lost.empty());
}

TEST_CASE("a trimmed range is reported, then delivery goes on from the first retained", "[client-lib]") {
  harness h;
  h.append("s", 10);
  h.live("s", 1);
  h.log["s"].first = 6;  // retention removed 1..5
  h.live("s", 10);
  h.pump();
  REQUIRE(h.lost.size() == 1);
  CHECK(h.lost[0].reason == position_lost::trimmed);
  CHECK(h.lost[0].last_delivered.seq == 1);
  CHECK(h.lost[0].first_available == 6);
  CHECK(h.delivered == std::vector<std::uint64_t>{1, 6, 7, 8, 9, 10});
}

TEST_CASE("a trimmed range with resume_at::next_live skips to the end of the log", "[client-lib]") {
  harness h;
  h.policy = resume_at::next_live;
  h.append("s", 10);
  h.live("s", 1);
  h.log["s"].first = 6;
  h.live("s", 8);
  h.pump();
  REQUIRE(h.lost.size() == 1);
  CHECK(h.delivered == std::vector<std::uint64_t>{1});
  h.append("s", 1);
  h.live("s", 11);
  CHECK(h.delivered == std::vector<std::uint64_t>{1, 11});
}

TEST_CASE("a recreated stream (new epoch) is reported and read from its start", "[client-lib]") {
  harness h;
  h.append("s", 5);
  h.live("s", 1);
  h.live("s", 2);
  h.log["s"] = fake_stream{.epoch = 99, .first = 1, .last = 3};
  h.live("s", 3);  // same number, new epoch: not the 3 that follows 2
  h.pump();
  REQUIRE(h.lost.size() == 1);
  CHECK(h.lost[0].reason == position_lost::epoch_changed);
  CHECK(h.lost[0].last_delivered.epoch == 7);
  CHECK(h.lost[0].epoch == 99);
  CHECK(h.delivered == std::vector<std::uint64_t>{1, 2, 1, 2, 3});
  CHECK(h.tracker.positions().at("s").epoch == 99);
}

TEST_CASE("a stream that is gone is reported and starts again at its next live message", "[client-lib]") {
  harness h;
  h.tracker.resume_from({{"s", {4, 7}}});
  h.tracker.check_all();
  h.pump();
  REQUIRE(h.lost.size() == 1);
  CHECK(h.lost[0].reason == position_lost::stream_gone);
  CHECK(h.tracker.positions().empty());
  h.append("s", 1);
  h.live("s", 1);
  CHECK(h.delivered == std::vector<std::uint64_t>{1});
}

TEST_CASE("resuming from saved positions reads what was missed", "[client-lib]") {
  harness h;
  h.append("a", 8);
  h.tracker.resume_from({{"a", {5, 7}}});
  h.tracker.check_all();
  h.live("a", 9);  // live already flowing: the reads sort it out
  h.append("a", 1);
  h.pump();
  CHECK(h.delivered == std::vector<std::uint64_t>{6, 7, 8, 9});
  CHECK(h.lost.empty());
}

TEST_CASE("a position of sequence 0 without an epoch reads the stream from its start and takes its epoch",
          "[client-lib]") {
  harness h;
  h.append("b", 3);
  const stream_positions never_seen{{"b", {0, 0}}};
  REQUIRE_FALSE(stream_tracker::check(never_seen));
  h.tracker.resume_from(never_seen);
  h.tracker.check_all();
  h.pump();
  CHECK(h.delivered == range(1, 3));
  CHECK(h.tracker.positions().at("b").seq == 3);
  CHECK(h.tracker.positions().at("b").epoch == 7);
}

TEST_CASE("a position with a sequence but no epoch is refused", "[client-lib]") {
  // Epoch 0 would accept whatever epoch the stream has now, so a stream
  // recreated since could never be reported.
  CHECK(stream_tracker::check({{"a", {5, 7}}, {"b", {3, 0}}}) == errc::invalid_position);
  CHECK(stream_tracker::check({{"b", {1, 0}}}) == errc::invalid_position);
  CHECK_FALSE(stream_tracker::check({{"a", {5, 7}}, {"b", {0, 0}}, {"c", {0, 9}}}));
  CHECK_FALSE(stream_tracker::check({}));
}

TEST_CASE("a stream whose first messages were dropped starts at the first dropped one, not the first that arrives",
          "[client-lib]") {
  harness h;
  h.append("s", 6);
  // The broker reports the first dropped delivery (3: 1 and 2 were
  // published before the subscription) in its place, before 6 arrives.
  h.tracker.dropped("s", 3, 7);
  REQUIRE(h.reads.size() == 1);
  CHECK(h.reads[0] == std::pair<std::string, std::uint64_t>{"s", 3});
  h.live("s", 6);  // while reading: left to the log
  h.pump();
  CHECK(h.delivered == range(3, 6));
  h.append("s", 1);
  h.live("s", 7);
  CHECK(h.delivered == range(3, 7));
  CHECK(h.lost.empty());
}

TEST_CASE("a dropped report of a known stream reads from its next sequence, or nothing if already delivered",
          "[client-lib]") {
  harness h;
  h.append("s", 4);
  h.live("s", 1);
  h.live("s", 2);
  h.tracker.dropped("s", 2, 7);  // delivered already
  CHECK(h.reads.empty());
  h.tracker.dropped("s", 3, 7);  // the next one: it is not here, so read it
  REQUIRE(h.reads.size() == 1);
  CHECK(h.reads[0].second == 3);
  h.live("s", 4);
  h.pump();
  CHECK(h.delivered == range(1, 4));
  h.live("s", 3);  // a late copy
  CHECK(h.delivered == range(1, 4));
}

TEST_CASE("a dropped report with another epoch is settled by the read like a recreated stream", "[client-lib]") {
  harness h;
  h.append("s", 2);
  h.live("s", 1);
  h.live("s", 2);
  h.log["s"] = fake_stream{.epoch = 99, .first = 1, .last = 2};
  h.tracker.dropped("s", 1, 99);
  h.pump();
  REQUIRE(h.lost.size() == 1);
  CHECK(h.lost[0].reason == position_lost::epoch_changed);
  CHECK(h.delivered == std::vector<std::uint64_t>{1, 2, 1, 2});
}

TEST_CASE("a failed recovery read is retried at the next gap", "[client-lib]") {
  harness h;
  h.append("s", 6);
  h.live("s", 1);
  h.fail_next = make_error_code(errc::timeout);
  h.live("s", 4);
  h.pump();
  CHECK(h.delivered == std::vector<std::uint64_t>{1});
  h.live("s", 6);
  h.pump();
  CHECK(h.delivered == range(1, 6));
}

TEST_CASE("a read that makes no progress ends the recovery instead of looping", "[client-lib]") {
  harness h;
  h.append("s", 2);
  h.live("s", 1);
  h.live("s", 5);  // never in the log (a broker bug or a lost log): must not spin
  h.pump();
  CHECK(h.delivered == range(1, 2));
  CHECK(h.reads.size() == 2);
}

TEST_CASE("records the broker left out as expired are stepped over, not reported lost", "[client-lib]") {
  harness h;
  h.append("s", 10);
  h.log["s"].expired = {3, 4, 9, 10};
  h.live("s", 1);
  h.live("s", 6);  // 2..5 missing: 2 and 5 dropped on the way, 3 and 4 expired
  h.pump();
  CHECK(h.delivered == std::vector<std::uint64_t>{1, 2, 5, 6, 7, 8});
  CHECK(h.lost.empty());
  CHECK(h.tracker.positions().at("s").seq == 10);  // past the expired tail too
  h.append("s", 1);
  h.live("s", 11);  // live again, no read
  CHECK(h.delivered.back() == 11);
  CHECK(h.reads.size() == 1);
}

TEST_CASE("a read answer that holds only expired records still moves the position on", "[client-lib]") {
  harness h;
  h.batch = 3;
  h.append("s", 9);
  h.log["s"].expired = {2, 3, 4, 5, 6, 7};
  h.live("s", 1);
  h.live("s", 9);
  h.pump();
  CHECK(h.delivered == std::vector<std::uint64_t>{1, 8, 9});
  CHECK(h.lost.empty());
  // 2..4, 5..7, then 8..9: each answer made progress, none was taken as a hole.
  REQUIRE(h.reads.size() == 3);
  CHECK(h.reads[1].second == 5);
  CHECK(h.reads[2].second == 8);
}

TEST_CASE("a hole without an expired count is never stepped over", "[client-lib]") {
  harness h;
  h.append("s", 5);
  h.live("s", 1);
  h.live("s", 5);
  // A broker that left 3 out without saying so (never happens: the log is
  // contiguous): the tracker stops before it instead of skipping.
  stream_read r{7, 1, 5, {}};
  r.records.push_back(stream_record{2, 0, {}, "ch", {}});
  r.records.push_back(stream_record{4, 0, {}, "ch", {}});
  r.next_seq = 5;
  h.pending.clear();
  h.tracker.read_done(
      "s", r, [&](const std::string&, std::uint64_t, const stream_record& rec) { h.delivered.push_back(rec.seq); });
  CHECK(h.delivered == std::vector<std::uint64_t>{1, 2});
  CHECK(h.tracker.positions().at("s").seq == 2);
}
