// End to end: a broker whose data folder is on a filesystem that really
// fills up (a 16 MiB tmpfs; the log's own limit stays the default 8 GiB).
// The wire answer is storage_full from the first refusal, what was
// acknowledged stays readable, appends work again without a restart once
// space is freed (by retention, or on the filesystem), and the broker logs
// refusals as a rate-limited summary. Needs root to mount (CI runs tests as
// root); elsewhere each test skips itself with a warning.

#include "bench/server_process.hpp"
#include "switchyard/client.hpp"
#include "tests/support/broker_log_capture.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/log_helpers.hpp"
#include "tests/support/test_server.hpp"
#include "tests/support/tmpfs.hpp"
#include "tests/support/wait.hpp"

#include <catch2/catch.hpp>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <sstream>
#include <thread>
#include <string>
#include <vector>

using namespace switchyard;
using test::broker_log_capture;
using test::connect_to;
using test::tmpfs_mount;
using test::wait_until;

namespace {

constexpr std::size_t kDisk = std::size_t{16} << 20;
constexpr std::size_t kRecord = std::size_t{16} << 10;

// Record k's payload: kRecord bytes that tell k apart.
std::vector<std::byte> record(std::uint64_t k) {
  std::vector<std::byte> out(kRecord);
  std::uint64_t x = k * 0x9E3779B97F4A7C15ull + 1;
  for (auto& b : out) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<std::byte>(x >> 24);
  }
  return out;
}

std::string describe(const std::error_code& ec) { return ec ? ec.category().name() + (": " + ec.message()) : "ok"; }

// Appends record 1, 2, ... to `stream` until one is refused; REQUIREs the
// refusal is storage_full (the first one: the disk fills long before the
// bound) and returns the last acknowledged k.
std::uint64_t fill(client& c, std::string_view stream, std::uint64_t from = 1) {
  for (std::uint64_t k = from; k < from + 5000; ++k) {
    auto ack = c.append(stream, record(k));
    if (!ack) {
      INFO("append " << k << ": " << describe(ack.error()));
      REQUIRE(ack.error() == errc::storage_full);
      return k - 1;
    }
    REQUIRE(ack->seq == k);
  }
  FAIL("a 16 MiB filesystem took 5000 records of 16 KiB");
  return 0;
}

// Every record of `stream` from `first` to `last` reads back as appended.
void check_records(client& c, std::string_view stream, std::uint64_t first, std::uint64_t last) {
  std::uint64_t next = first;
  for (int guard = 0; guard < 2000 && next <= last; ++guard) {
    auto r = c.read(stream, next, 100);
    INFO(describe(r ? std::error_code{} : r.error()));
    REQUIRE(r);
    REQUIRE_FALSE(r->records.empty());
    for (const auto& rec : r->records) {
      REQUIRE(rec.seq == next);
      REQUIRE(rec.payload == record(next));
      ++next;
    }
  }
  CHECK(next == last + 1);
}

bench::server_process start_on(const tmpfs_mount& disk) {
  auto s = bench::server_process::start(SWITCHYARD_SERVER_BINARY, {}, std::chrono::seconds(10),
                                        (disk.path() / "data").string());
  if (!s) FAIL(s.error());
  return std::move(*s);
}

}  // namespace

TEST_CASE("a broker on a full filesystem answers storage_full and takes appends again once space is freed there",
          "[e2e][disk-full]") {
  tmpfs_mount disk(kDisk);
  SKIP_UNLESS_MOUNTED(disk);
  // Another user of the filesystem holds 4 MiB of it.
  REQUIRE(disk.write_file("other-data", std::size_t{4} << 20));
  auto server = start_on(disk);
  auto c = connect_to(server.port());
  const std::uint64_t last = fill(*c, "events");
  CHECK(last > 300);  // most of the other 12 MiB
  for (int i = 0; i < 5; ++i) {
    auto again = c->append("events", record(last + 1));
    REQUIRE_FALSE(again);
    CHECK(again.error() == errc::storage_full);
  }
  check_records(*c, "events", 1, last);

  // The other user frees its 4 MiB: the same broker takes 2 MiB more.
  std::filesystem::remove(disk.path() / "other-data");
  for (std::uint64_t k = last + 1; k <= last + 128; ++k) {
    auto ack = c->append("events", record(k));
    INFO("append " << k << ": " << describe(ack ? std::error_code{} : ack.error()));
    REQUIRE(ack);
    CHECK(ack->seq == k);
  }
  check_records(*c, "events", 1, last + 128);
  c.reset();
  server.stop();
}

TEST_CASE("a broker on a full filesystem applies a new retention and takes appends again without a restart",
          "[e2e][disk-full]") {
  tmpfs_mount disk(kDisk);
  SKIP_UNLESS_MOUNTED(disk);
  auto server = start_on(disk);
  auto c = connect_to(server.port());
  const std::uint64_t last = fill(*c, "events");
  REQUIRE(last > 300);

  // Keep the newest 100: written on the full disk, applied at once.
  auto set = c->set_stream_retention("events", {.max_records = 100});
  INFO(describe(set ? std::error_code{} : set.error()));
  REQUIRE(set);
  REQUIRE(wait_until([&] {
    auto info = c->stream_info("events");
    return info && info->records <= 100;
  }));
  // The broker was not restarted: appends go into the pages retention freed
  // (and retention in each commit keeps the stream at 100).
  for (std::uint64_t k = last + 1; k <= last + 200; ++k) {
    auto ack = c->append("events", record(k));
    INFO("append " << k << ": " << describe(ack ? std::error_code{} : ack.error()));
    REQUIRE(ack);
    CHECK(ack->seq == k);
  }
  auto info = c->stream_info("events");
  REQUIRE(info);
  CHECK(info->records == 100);
  CHECK(info->first_seq == last + 101);
  check_records(*c, "events", info->first_seq, last + 200);
  c.reset();
  server.stop();
}

TEST_CASE("a broker restarted on a full filesystem starts and its retention makes room", "[e2e][disk-full]") {
  tmpfs_mount disk(kDisk);
  SKIP_UNLESS_MOUNTED(disk);
  std::uint64_t last = 0;
  {
    auto server = start_on(disk);
    auto c = connect_to(server.port());
    last = fill(*c, "events");
    c.reset();
    server.stop();
  }
  REQUIRE(disk.free_bytes() < (std::size_t{1} << 20));
  auto server = start_on(disk);
  auto c = connect_to(server.port());
  check_records(*c, "events", 1, last);
  REQUIRE(c->set_stream_retention("events", {.max_records = 10}));
  REQUIRE(wait_until([&] {
    auto info = c->stream_info("events");
    return info && info->records <= 10;
  }));
  auto ack = c->append("events", record(last + 1));
  INFO(describe(ack ? std::error_code{} : ack.error()));
  REQUIRE(ack);
  CHECK(ack->seq == last + 1);
  c.reset();
  server.stop();
}

TEST_CASE("refused appends are logged as a summary of at most one line a second, not one line each",
          "[e2e][disk-full]") {
  tmpfs_mount disk(kDisk);
  SKIP_UNLESS_MOUNTED(disk);
  broker_log_capture captured;
  auto cfg = test::test_server::default_config();
  cfg.data_dir = (disk.path() / "data").string();
  cfg.log_level = "info";
  test::test_server server(cfg);
  auto c = connect_to(server.port());
  const std::uint64_t last = fill(*c, "events");
  const auto start = std::chrono::steady_clock::now();
  constexpr int refusals = 500;
  for (int i = 0; i < refusals; ++i) {
    auto again = c->append("events", record(last + 1));
    REQUIRE_FALSE(again);
    REQUIRE(again.error() == errc::storage_full);
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  c.reset();
  server.stop();

  std::vector<std::string> lines;
  std::istringstream in(captured.text());
  for (std::string line; std::getline(in, line);)
    if (line.find("refused") != std::string::npos) lines.push_back(line);
  INFO(captured.text());
  // The first refusal is logged at once; then at most one line a second
  // for this one kind (storage full), whatever the number refused.
  REQUIRE_FALSE(lines.empty());
  CHECK(lines.front().find("storage full") != std::string::npos);
  CHECK(lines.front().find("stream=events") != std::string::npos);
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(elapsed).count();
  CHECK(static_cast<long>(lines.size()) <= 2 + seconds);
}

TEST_CASE("the refused appends of a burst are all counted in the log once the broker is idle a second",
          "[e2e][disk-full]") {
  tmpfs_mount disk(kDisk);
  SKIP_UNLESS_MOUNTED(disk);
  broker_log_capture captured;
  auto cfg = test::test_server::default_config();
  cfg.data_dir = (disk.path() / "data").string();
  cfg.log_level = "info";
  test::test_server server(cfg);
  auto c = connect_to(server.port());
  const std::uint64_t last = fill(*c, "events");
  constexpr int refusals = 50;
  for (int i = 0; i < refusals; ++i) REQUIRE_FALSE(c->append("events", record(last + 1)));
  // Nothing else happens: the lease sweeper reports what waits (a line at
  // most a second).
  const auto counted = [&] {
    long n = 0;
    std::istringstream in(captured.text());
    for (std::string line; std::getline(in, line);) {
      const auto at = line.find(" append");
      if (line.find("refused") == std::string::npos || at == std::string::npos) continue;
      const auto start = line.rfind(' ', at - 1);
      n += std::stol(line.substr(start + 1, at - start - 1));
    }
    return n;
  };
  // fill() itself met one refusal.
  const bool all = test::wait_until([&] { return counted() >= refusals + 1; }, std::chrono::seconds(10));
  c.reset();
  server.stop();
  INFO(captured.text());
  CHECK(all);
  CHECK(counted() == refusals + 1);
}
