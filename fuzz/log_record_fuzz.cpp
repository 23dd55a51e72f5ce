// Fuzz target: the sequence log's stored values as a corrupted log holds
// them, read back through the log's real read paths in a real LMDB
// environment. One storage::sequence_log is opened once, in a temporary
// folder; each input rewrites its databases verbatim (storage::rewrite_raw,
// storage/raw_access.hpp: no encoder, no checksum writer) and then runs, on
// stream "a" whose values come from the input and stream "b" (one intact
// record, id 2): info, list, reads from the first sequence on in small
// steps as a client would (going on past each damaged record), the
// whole-log walk verify() (what `switchyard-server --verify-log` runs in a
// child process, storage::verify_log), then enforce and trim (which read
// timestamps and sizes before deleting), and the reads and verify again.
//
// Any crash or sanitizer report is a bug, and so is (std::abort):
//  - an error other than the documented ones (info, list and read:
//    corrupted, a read's naming the stream and 0 or the sequence read from;
//    enforce and trim: corrupted or storage_full);
//  - wrong data: a record read that differs from the value stored under
//    its key, or whose stored value fails the format (checksum, destination
//    length, reserved field); sequences that are not consecutive from the
//    one asked for, lie outside the stream's metadata or outnumber its
//    records; first, last and epoch other than the metadata's;
//  - a read stopping at a damaged record (damaged_seq) that the next read
//    from it does not report as corrupted;
//  - verify() finding the log intact where a read, info or list met
//    damage, or, more strictly, verify() not finding it intact exactly
//    when nothing in it is damaged (well_formed() below);
//  - a trim that turns metadata that reads into metadata that does not,
//    or an intact log into a damaged one.
//
// Input: byte 0 holds flags, then chunks, each a u16 (little-endian)
// length and that many bytes (the last chunk may be short):
//   flag 0x01: the first chunk is the metadata value of "a" (else it is
//              made consistent with a's records: id 1, first and last the
//              lowest and highest sequence, records last - first + 1, bytes
//              the sum over its values; holes are not counted);
//   flag 0x02: the next chunk is a's retention value;
//   flag 0x04: each record value gets the checksum its sequence needs
//              (storage::record_checksum), so the input reaches past it;
//   then record chunks: byte 0 is the sequence step s: sequence =
//   previous + s (the previous starts at 0), except that 254 is followed
//   by a stream id and a sequence (two u64, little-endian) and 255 by a
//   sequence (u64, little-endian) when the chunk is long enough; the rest
//   of the chunk is the record value. At most 64 records; stream id 1
//   unless given.
// Seeds (SWITCHYARD_FUZZ_SEEDS): a real log written by sequence_log
// (records with and without destination, an overflow record, a trimmed
// front, a retention entry), read back with LMDB, values verbatim.
// Triage: a failed check prints its line; SWITCHYARD_FUZZ_DEBUG=1 also
// prints verify()'s problems. The log's folder ($TMPDIR or /tmp,
// switchyard-log-fuzz-*) is removed at exit, not after a crash.

#include "fuzz/seeds.hpp"
#include "storage/errc.hpp"
#include "storage/raw_access.hpp"
#include "storage/sequence_log.hpp"

#include <lmdb.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

namespace sy = switchyard::storage;
using bytes = std::vector<std::byte>;

constexpr std::uint64_t b_id = 2;
constexpr std::size_t max_records = 64;
constexpr std::size_t meta_size = 56;

std::filesystem::path dir;
std::unique_ptr<sy::sequence_log> log_;

// Aborts (the fuzzer's finding) naming the check that failed.
// (__builtin_LINE: clang-14 has no std::source_location.)
void check(bool ok, int line = __builtin_LINE()) {
  if (ok) return;
  std::fprintf(stderr, "log_record_fuzz: check failed at line %d\n", line);
  std::abort();
}

template <class T>
T le(const std::byte* p) {
  T v = 0;
  for (std::size_t i = 0; i < sizeof v; ++i) v |= static_cast<T>(static_cast<T>(p[i]) << (8 * i));
  return v;
}
template <class T>
void put_le(bytes& out, T v) {
  for (std::size_t i = 0; i < sizeof v; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
}
bytes record_key(std::uint64_t id, std::uint64_t seq) {
  bytes k;
  for (int i = 7; i >= 0; --i) k.push_back(static_cast<std::byte>(id >> (8 * i)));
  for (int i = 7; i >= 0; --i) k.push_back(static_cast<std::byte>(seq >> (8 * i)));
  return k;
}
std::span<const std::byte> text(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

struct meta {
  std::uint64_t id = 0, epoch = 0, first = 1, last = 0, records = 0, stored = 0, created = 0;
  bytes encode() const {
    bytes out;
    for (const auto f : {id, epoch, first, last, records, stored, created}) put_le<std::uint64_t>(out, f);
    return out;
  }
  static std::optional<meta> decode(const bytes& v) {
    if (v.size() != meta_size) return std::nullopt;
    meta m;
    std::uint64_t* f[7] = {&m.id, &m.epoch, &m.first, &m.last, &m.records, &m.stored, &m.created};
    for (int i = 0; i < 7; ++i) *f[i] = le<std::uint64_t>(v.data() + 8 * i);
    return m;
  }
};

// A record value of format 2 (storage/sequence_log.hpp) for `seq`.
bytes make_value(std::uint64_t seq, std::uint64_t ts, std::span<const std::byte> dest,
                 std::span<const std::byte> payload) {
  bytes v;
  put_le<std::uint64_t>(v, 0);
  put_le<std::uint64_t>(v, ts);
  put_le<std::uint32_t>(v, static_cast<std::uint32_t>(dest.size()));
  put_le<std::uint32_t>(v, 0);
  v.insert(v.end(), dest.begin(), dest.end());
  v.insert(v.end(), payload.begin(), payload.end());
  const std::uint64_t sum = sy::record_checksum(seq, v);
  for (int i = 0; i < 8; ++i) v[i] = static_cast<std::byte>(sum >> (8 * i));
  return v;
}

// Whether a stored value passes the format's checks for `seq`.
bool valid_value(std::uint64_t seq, const bytes& v) {
  if (v.size() < 24) return false;
  if (le<std::uint64_t>(v.data()) != sy::record_checksum(seq, v)) return false;
  return le<std::uint32_t>(v.data() + 16) <= v.size() - 24 && le<std::uint32_t>(v.data() + 20) == 0;
}

// What one input puts into the log.
struct model {
  bytes meta_a;
  std::optional<bytes> retention_a;
  std::map<std::pair<std::uint64_t, std::uint64_t>, bytes> records;  // (stream id, sequence) -> value
  bytes meta_b, record_b;
  bool b_touched = false;  // the input wrote a record of stream id 2
};

// ---- Seeds: a real log, read back with LMDB ----

void chunk(bytes& out, std::span<const std::byte> c) {
  put_le<std::uint16_t>(out, static_cast<std::uint16_t>(c.size()));
  out.insert(out.end(), c.begin(), c.end());
}

std::vector<switchyard::fuzz::seed> seeds() {
  namespace fs = std::filesystem;
  const auto base = fs::temp_directory_path() / ("switchyard-log-seeds-" + std::to_string(::getpid()));
  fs::remove_all(base);
  std::uint64_t clock = 1'712'345'678'901;
  {
    sy::log_options o;
    o.dir = base;
    o.mode = sy::durability::none;
    o.initial_map_size = 1u << 20;
    o.wall_clock_ms = [&] { return clock += 7; };
    o.random64 = [] { return std::uint64_t{0x5eed5eed5eed5eedull}; };
    auto log = sy::sequence_log::open(o);
    if (!log) std::abort();
    const std::string big(5000, 'x');
    const std::byte channel[] = {std::byte{1}, std::byte{'o'}, std::byte{'r'}, std::byte{'d'}};
    const std::byte keys[] = {std::byte{2}, std::byte{1},   std::byte{0},  std::byte{2},
                              std::byte{0}, std::byte{'u'}, std::byte{'1'}};
    (void)(*log)->append("a", text("first"));
    (void)(*log)->append("a", text("trimmed away"));
    (void)(*log)->append("a", text("hello"), channel);
    (void)(*log)->append("a", text(""), keys);
    (void)(*log)->append("a", text(big));
    (void)(*log)->append("a", text("last"));
    (void)(*log)->trim("a", 2, 1);
    (void)(*log)->set_retention("a", sy::retention{100, std::chrono::milliseconds(60'000), 1u << 20});
  }
  // The values as stored: stream a's metadata, retention and records.
  bytes meta_a, retention_a;
  std::vector<std::pair<std::uint64_t, bytes>> recs;
  {
    MDB_env* env = nullptr;
    MDB_txn* t = nullptr;
    MDB_dbi streams, records, retention;
    if (mdb_env_create(&env) || mdb_env_set_maxdbs(env, 8) || mdb_env_open(env, base.c_str(), MDB_RDONLY, 0644) ||
        mdb_txn_begin(env, nullptr, MDB_RDONLY, &t) || mdb_dbi_open(t, "streams", 0, &streams) ||
        mdb_dbi_open(t, "records", 0, &records) || mdb_dbi_open(t, "retention", 0, &retention))
      std::abort();
    const auto copy = [](const MDB_val& v) {
      const auto* p = static_cast<const std::byte*>(v.mv_data);
      return bytes(p, p + v.mv_size);
    };
    MDB_val k{1, const_cast<char*>("a")}, v{};
    if (mdb_get(t, streams, &k, &v)) std::abort();
    meta_a = copy(v);
    if (mdb_get(t, retention, &k, &v)) std::abort();
    retention_a = copy(v);
    MDB_cursor* c = nullptr;
    if (mdb_cursor_open(t, records, &c)) std::abort();
    for (int rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == MDB_SUCCESS; rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
      const auto key = copy(k);
      std::uint64_t seq = 0;
      for (int i = 8; i < 16; ++i) seq = seq << 8 | static_cast<std::uint64_t>(key[i]);
      recs.emplace_back(seq, copy(v));
    }
    mdb_cursor_close(c);
    mdb_txn_abort(t);
    mdb_env_close(env);
  }
  fs::remove_all(base);

  // Records as chunks: each by its sequence step (the first from 0).
  const auto with_records = [&](bytes out, std::size_t from, std::size_t count) {
    std::uint64_t prev = 0;
    for (std::size_t i = from; i < recs.size() && i < from + count; ++i) {
      bytes c;
      const std::uint64_t step = recs[i].first - prev;
      if (step < 254) {
        c.push_back(static_cast<std::byte>(step));
      } else {
        c.push_back(std::byte{255});
        put_le<std::uint64_t>(c, recs[i].first);
      }
      c.insert(c.end(), recs[i].second.begin(), recs[i].second.end());
      chunk(out, c);
      prev = recs[i].first;
    }
    return out;
  };
  std::vector<switchyard::fuzz::seed> out;
  const auto add = [&](const bytes& b) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(b.data());
    out.emplace_back(p, p + b.size());
  };
  // As stored: metadata, retention, every record.
  bytes all{std::byte{0x03}};
  chunk(all, meta_a);
  chunk(all, retention_a);
  add(with_records(all, 0, recs.size()));
  // Computed metadata, no retention, every record; the same with
  // checksums fixed; the small records only; one record.
  add(with_records(bytes{std::byte{0x00}}, 0, recs.size()));
  add(with_records(bytes{std::byte{0x04}}, 0, recs.size()));
  add(with_records(bytes{std::byte{0x04}}, 0, 3));
  add(with_records(bytes{std::byte{0x00}}, 1, 1));
  return out;
}

// ---- The run ----

model parse(const std::uint8_t* data, std::size_t size) {
  model m;
  const auto* in = reinterpret_cast<const std::byte*>(data);
  std::size_t at = 0;
  const std::uint8_t flags = size > 0 ? data[at++] : 0;
  const auto next_chunk = [&]() -> std::optional<bytes> {
    if (at >= size) return std::nullopt;
    std::size_t n = data[at++];
    if (at < size) n |= std::size_t{data[at++]} << 8;
    n = std::min(n, size - at);
    bytes c(in + at, in + at + n);
    at += n;
    return c;
  };
  std::optional<bytes> meta_chunk;
  if (flags & 0x01) meta_chunk = next_chunk().value_or(bytes{});
  if (flags & 0x02) m.retention_a = next_chunk().value_or(bytes{});
  std::uint64_t seq = 0;
  while (m.records.size() < max_records) {
    auto c = next_chunk();
    if (!c) break;
    if (c->empty()) continue;
    std::uint64_t id = 1;
    std::size_t skip = 1;
    const auto step = static_cast<std::uint8_t>((*c)[0]);
    if (step == 254 && c->size() >= 17) {
      id = le<std::uint64_t>(c->data() + 1);
      seq = le<std::uint64_t>(c->data() + 9);
      skip = 17;
    } else if (step == 255 && c->size() >= 9) {
      seq = le<std::uint64_t>(c->data() + 1);
      skip = 9;
    } else {
      seq += step;
    }
    bytes value(c->begin() + static_cast<std::ptrdiff_t>(skip), c->end());
    if ((flags & 0x04) && value.size() >= 24) {
      const std::uint64_t sum = sy::record_checksum(seq, value);
      for (int i = 0; i < 8; ++i) value[i] = static_cast<std::byte>(sum >> (8 * i));
    }
    if (id == b_id) m.b_touched = true;
    m.records[{id, seq}] = std::move(value);
  }
  if (meta_chunk) {
    m.meta_a = std::move(*meta_chunk);
  } else {
    meta a;
    a.id = 1;
    a.epoch = 7;
    bool any = false;
    for (const auto& [key, v] : m.records) {
      if (key.first != 1) continue;
      a.first = any ? std::min(a.first, key.second) : key.second;
      a.last = any ? std::max(a.last, key.second) : key.second;
      a.stored += v.size() >= 24 ? v.size() - 24 : 0;
      any = true;
    }
    a.records = any ? a.last - a.first + 1 : 0;
    m.meta_a = a.encode();
  }
  meta b;
  b.id = b_id;
  b.epoch = 9;
  b.first = b.last = b.records = 1;
  m.record_b = make_value(1, 1000,
                          text("\x01"
                               "b"),
                          text("intact"));
  b.stored = m.record_b.size() - 24;
  m.meta_b = b.encode();
  return m;
}

// Whether the model is a log without any damage: what verify() must find
// intact. Stream a: metadata of 56 bytes with id 1 (b has 2, the highest id
// handed out), consistent (records = last - first + 1 with first >= 1, or
// none and first = last + 1), every sequence first..last present with a valid
// value and nothing else under id 1, its byte count their destination +
// payload bytes; a retention entry, if any, of at least 24 bytes with an
// age that fits an int64. Stream b: its record valid and of its size. No
// records of other stream ids.
bool well_formed(const model& m) {
  const auto a = meta::decode(m.meta_a);
  if (!a || a->id != 1) return false;
  // Empty: first = last + 1 (0 after sequence 2^64 - 1).
  if (a->records == 0 ? a->first != a->last + 1
                      : a->first < 1 || a->first > a->last || a->records != a->last - a->first + 1)
    return false;
  if (m.retention_a &&
      (m.retention_a->size() < 24 || le<std::uint64_t>(m.retention_a->data() + 8) > std::uint64_t{INT64_MAX}))
    return false;
  std::uint64_t count = 0, stored = 0;
  for (const auto& [key, v] : m.records) {
    const auto [id, seq] = key;
    if (id == 1) {
      if (seq < a->first || seq > a->last || !valid_value(seq, v)) return false;
      ++count;
      stored += v.size() - 24;
    } else if (id != b_id || seq != 1 || !valid_value(1, v) || v.size() != m.record_b.size()) {
      return false;
    }
  }
  return count == a->records && stored == a->stored;
}

bool is(std::error_code ec, sy::errc e) { return ec == make_error_code(e); }

// Reads stream `name` as a client would, from its first sequence on in
// steps of a few records, going on past each damaged record. Checks what
// comes back against the model (`md`: the stream's metadata as stored, if
// it has the right size). True if nothing was damaged.
bool read_all(const model& m, std::string_view name, const std::optional<meta>& md) {
  bool clean = true;
  sy::diagnostics diag;
  auto info = log_->info(name, &diag);
  if (!info) {
    check(is(info.error(), sy::errc::corrupted) && diag.stream == name && !diag.message.empty());
    clean = false;
  } else {
    check(md && info->id == md->id && info->first_seq == md->first && info->last_seq == md->last &&
          info->records == md->records && info->epoch == md->epoch);
  }
  if (!md) {
    auto r = log_->read(name, 1, 4, 64u << 10, &diag);
    check(!r && is(r.error(), sy::errc::corrupted) && diag.seq == 0);
    return false;
  }
  if (md->records == 0) {  // empty (or, if inconsistent, damaged) metadata
    auto r = log_->read(name, md->first, 4, 64u << 10, &diag);
    if (r) return check(r->records.empty() && r->damaged_seq == 0), clean;
    check(is(r.error(), sy::errc::corrupted) && diag.seq == 0);
    return false;
  }
  std::uint64_t from = md->first, returned = 0;
  // Each step reads at least one record or passes one damaged record.
  for (std::size_t step = 0; step < 2 * max_records + 8 && from <= md->last; ++step) {
    diag = {};
    auto r = log_->read(name, from, 4, 64u << 10, &diag);
    if (!r) {
      check(is(r.error(), sy::errc::corrupted) && diag.stream == name && (diag.seq == from || diag.seq == 0));
      clean = false;
      if (diag.seq == 0) break;  // the metadata itself
      if (++from == 0) break;
      continue;
    }
    check(r->epoch == md->epoch && r->first_seq == md->first && r->last_seq == md->last);
    check(!r->records.empty() && r->damaged_seq != from);
    std::uint64_t expect = from;
    for (const auto& rec : r->records) {
      check(rec.seq == expect && rec.seq >= md->first && rec.seq <= md->last && ++returned <= md->records);
      const auto it = m.records.find({md->id, rec.seq});
      const bytes* stored = it != m.records.end()                            ? &it->second
                            : md->id == b_id && rec.seq == 1 && !m.b_touched ? &m.record_b
                                                                             : nullptr;
      check(stored && valid_value(rec.seq, *stored));
      const std::size_t dlen = le<std::uint32_t>(stored->data() + 16);
      check(rec.timestamp_ms == le<std::uint64_t>(stored->data() + 8));
      const auto body = stored->begin() + 24;
      check(std::equal(rec.destination.begin(), rec.destination.end(), body, body + static_cast<std::ptrdiff_t>(dlen)));
      check(
          std::equal(rec.payload.begin(), rec.payload.end(), body + static_cast<std::ptrdiff_t>(dlen), stored->end()));
      ++expect;
    }
    if (r->damaged_seq != 0) {
      check(r->damaged_seq == expect);
      clean = false;
      diag = {};
      auto again = log_->read(name, r->damaged_seq, 4, 64u << 10, &diag);
      check(!again && is(again.error(), sy::errc::corrupted) && diag.stream == name && diag.seq == r->damaged_seq);
      ++expect;
    }
    if (expect == 0) break;  // past the last sequence there is
    from = expect;
  }
  return clean;
}

// Everything the reads of both streams saw (a's metadata as `md_a`),
// checked against verify().
// Returns whether verify() found the log intact.
bool read_and_verify(const model& m, const std::optional<meta>& md_a) {
  bool clean = read_all(m, "a", md_a);
  clean = read_all(m, "b", meta::decode(m.meta_b)) && clean;
  bool more = false;
  sy::diagnostics diag;
  auto listed = log_->list("", 4, &more, &diag);
  if (!listed) {
    check(is(listed.error(), sy::errc::corrupted));
    clean = false;
  } else {
    check(listed->size() == 2 && !more && (*listed)[0].name == "a" && (*listed)[1].name == "b");
  }
  const auto report = log_->verify(16);
  check(report.problem_count >= report.problems.size());
  if (!clean) check(!report.intact());  // verify must see what the reads saw
  if (std::getenv("SWITCHYARD_FUZZ_DEBUG"))
    for (const auto& p : report.problems) std::fprintf(stderr, "verify: %s\n", p.what.c_str());
  return report.intact();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  switchyard::fuzz::write_seeds_if_asked(seeds());
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/switchyard-log-fuzz-XXXXXX";
  if (!::mkdtemp(pattern.data())) std::abort();
  dir = pattern;
  sy::log_options o;
  o.dir = dir;
  o.mode = sy::durability::none;
  o.initial_map_size = 4u << 20;
  o.max_map_size = 64u << 20;
  o.wall_clock_ms = [] { return std::uint64_t{1'712'345'678'901}; };
  o.random64 = [] { return std::uint64_t{42}; };
  auto opened = sy::sequence_log::open(o);
  if (!opened) std::abort();
  log_ = std::move(*opened);
  // Streams a (id 1) and b (id 2) created by the log itself, so that "meta"
  // holds the last stream id as a real log does; each input replaces them.
  if (!log_->append("a", text("a")) || !log_->append("b", text("b"))) std::abort();
  std::atexit([] {
    log_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const model m = parse(data, size);
  std::vector<sy::raw_entry> entries;
  const bytes b_key = record_key(b_id, 1);
  std::vector<bytes> keys;
  keys.reserve(m.records.size());
  entries.push_back({sy::raw_db::streams, text("a"), m.meta_a});
  entries.push_back({sy::raw_db::streams, text("b"), m.meta_b});
  entries.push_back({sy::raw_db::records, b_key, m.record_b});
  if (m.retention_a) entries.push_back({sy::raw_db::retention, text("a"), *m.retention_a});
  for (const auto& [key, value] : m.records) {
    keys.push_back(record_key(key.first, key.second));
    entries.push_back({sy::raw_db::records, keys.back(), value});
  }
  if (auto ec = sy::rewrite_raw(*log_, entries)) std::abort();  // the map has room for 64 records of 64 KiB

  const bool intact = read_and_verify(m, meta::decode(m.meta_a));
  check(intact == well_formed(m));
  // Trims read timestamps and sizes of what they delete. A trim of a
  // stream whose metadata reads leaves metadata that reads.
  for (int i = 0; i < 2; ++i) {
    const bool readable = log_->info("a").has_value();
    auto n = i == 0 ? log_->enforce("a", sy::retention{1, std::chrono::milliseconds(1), 1}, 4)
                    : log_->trim("a", ~std::uint64_t{0}, 4);
    if (!n)
      check(is(n.error(), sy::errc::corrupted) || is(n.error(), sy::errc::storage_full));
    else if (readable)
      check(log_->info("a").has_value());
  }
  // The same checks on what the trims left: the records that remain are
  // still those stored, under the metadata the trims wrote.
  if (auto now = log_->info("a")) {
    const meta md{now->id, now->epoch, now->first_seq, now->last_seq, now->records, now->bytes, now->created_ms};
    check(read_and_verify(m, md) || !intact);  // a trim leaves an intact log intact
  } else {
    check(!intact);
    (void)log_->read("a", 1, 8, 1u << 20);
    (void)log_->verify(4);
  }
  return 0;
}
