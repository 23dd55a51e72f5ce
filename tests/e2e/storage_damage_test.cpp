// End to end: a damaged or shared data folder, through the real broker
// (in-process and the switchyard-server binary) and switchyard-cli:
// refusing to start, answering `corrupted` on the wire, --verify-log and
// --verify-on-start, and one broker per data folder.

#include "bench/server_process.hpp"
#include "protocol/errc.hpp"
#include "protocol/frame_builder.hpp"
#include "storage/sequence_log.hpp"
#include "switchyard/client.hpp"
#include "tests/support/clients.hpp"
#include "tests/support/log_helpers.hpp"
#include "tests/support/process.hpp"
#include "tests/support/raw_connection.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/test_server.hpp"

#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace switchyard;
using test::connect_to;
using test::run_command;
using test::temp_dir;
using test::test_server;
using test::text;
using test::with_data;

namespace {

constexpr std::uint64_t kEpoch = 0x5EED'0000'0000'0042ull;

// The log of `dir` (<dir>/log), opened directly with a fixed epoch.
std::unique_ptr<storage::sequence_log> open_log(const temp_dir& dir) {
  storage::log_options o;
  o.dir = dir.path() / "log";
  o.preallocate = false;  // the file as LMDB writes it: it ends at the last page used
  o.random64 = [] { return kEpoch; };
  auto log = storage::sequence_log::open(o);
  REQUIRE(log);
  return std::move(*log);
}

// Stream "s" with records "record 1".."record n" padded to 40 bytes.
std::string payload_of(int i) {
  std::string p = "record " + std::to_string(i);
  p.resize(40, '.');
  return p;
}
void write_records(const temp_dir& dir, int n) {
  auto log = open_log(dir);
  for (int i = 1; i <= n; ++i) REQUIRE(log->append("s", text(payload_of(i))));
}

std::filesystem::path data_file(const temp_dir& dir) { return dir.path() / "log" / "data.mdb"; }

// The switchyard-server binary on `data_dir` (kept), with `args`.
bench::server_process start_in(const std::string& data_dir, const std::vector<std::string>& args = {}) {
  auto s = bench::server_process::start(SWITCHYARD_SERVER_BINARY, args, std::chrono::seconds(10), data_dir);
  if (!s) FAIL(s.error());
  return std::move(*s);
}

std::vector<char> read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_all(const std::filesystem::path& p, const std::vector<char>& data) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

// Flips a byte in every stored copy of `needle` in data.mdb; returns how
// many copies there were.
int damage(const temp_dir& dir, const std::string& needle) {
  auto data = read_all(data_file(dir));
  int hits = 0;
  for (auto at = std::search(data.begin(), data.end(), needle.begin(), needle.end()); at != data.end();
       at = std::search(at + 1, data.end(), needle.begin(), needle.end())) {
    at[3] ^= 0x20;
    ++hits;
  }
  write_all(data_file(dir), data);
  return hits;
}

// The server binary as a shell command that must exit by itself: a broker
// that starts when it should not is stopped after 20 s (exit code 124).
std::string server(const std::string& args) {
  return "timeout 20 " + std::string(SWITCHYARD_SERVER_BINARY) + " --listen 127.0.0.1:0 " + args;
}
std::string server_command(const temp_dir& dir, const std::string& flags) {
  return server("--data-dir " + dir.path().string() + " " + flags + " 2>&1");
}

int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }

// The Error answer to `request` on a fresh raw connection with the "log"
// capability.
std::pair<protocol::errc, std::string> wire_error(std::uint16_t port, protocol::bytes_view request) {
  test::raw_connection raw(port);
  const std::array<std::string_view, 1> caps{"log"};
  protocol::hello_fields h;
  h.protocol_major = 1;
  h.capabilities = caps;
  protocol::frame_builder b;
  raw.send(b.hello(1, h));
  test::raw_frame f;
  REQUIRE(raw.next_of(protocol::wire::Message::Welcome, f) != nullptr);
  raw.send(request);
  const auto* e = raw.next_of(protocol::wire::Message::Error, f);
  REQUIRE(e != nullptr);
  const auto* m = e->message_as_Error()->message();
  return {static_cast<protocol::errc>(e->message_as_Error()->code()), m ? m->str() : std::string{}};
}

}  // namespace

TEST_CASE("the broker refuses to start on a log cut to half its size, exiting 1 with both sizes", "[e2e][storage]") {
  temp_dir dir;
  write_records(dir, 200);
  const auto full = std::filesystem::file_size(data_file(dir));
  std::filesystem::resize_file(data_file(dir), full / 2);
  const auto r = run_command(server_command(dir, ""));
  INFO(r.out);
  CHECK(exit_code(r.status) == 1);
  CHECK(r.out.find("log corrupted: file shorter than " + std::to_string(full) + " bytes (data.mdb is " +
                   std::to_string(full / 2) + " bytes)") != std::string::npos);
  CHECK(r.out.find("--verify-log") != std::string::npos);
}

TEST_CASE("a second broker on the same data folder exits 1 naming the folder and the first one's pid",
          "[e2e][storage]") {
  temp_dir dir;
  const auto data = (dir.path() / "data").string();
  auto first = start_in(data);
  const auto r = run_command(server("--data-dir " + data + " 2>&1"));
  INFO(r.out);
  CHECK(exit_code(r.status) == 1);
  CHECK(r.out.find("the data folder " + data + " is in use by another switchyard-server (pid " +
                   std::to_string(first.pid()) + ")") != std::string::npos);
  // The first broker is unharmed.
  auto c = connect_to(first.port());
  REQUIRE(c->append("s", text("still here")));
}

TEST_CASE("a Read of a damaged record answers corrupted naming the stream and the sequence", "[e2e][storage]") {
  temp_dir dir;
  write_records(dir, 10);
  REQUIRE(damage(dir, payload_of(6)) >= 1);
  test_server server(with_data(dir));
  auto c = connect_to(server.port());
  // A read that runs into it answers the records before it ...
  auto before = c->read("s", 1);
  REQUIRE(before);
  REQUIRE(before->records.size() == 5);
  CHECK(test::str(before->records.back().payload) == payload_of(5));
  // ... a read from it is corrupted ...
  auto at = c->read("s", 6);
  REQUIRE_FALSE(at);
  CHECK(at.error() == errc::corrupted);
  CHECK(c->connected());
  // ... and a read past it goes on.
  auto after = c->read("s", 7);
  REQUIRE(after);
  CHECK(after->records.size() == 4);
  protocol::frame_builder b;
  const auto [code, message] = wire_error(server.port(), b.read(9, "s", 6, 0, 0));
  CHECK(code == protocol::errc::corrupted);
  CHECK(message == "log corrupted: stream 's', record 6: checksum mismatch; read from 7 to go on past it");
}

TEST_CASE("StreamInfo and StreamList of a stream with damaged metadata answer corrupted", "[e2e][storage]") {
  temp_dir dir;
  write_records(dir, 10);
  // The stream's metadata: id, epoch, first, last, record count, ... (u64
  // LE each). A record count that disagrees with first..last.
  auto data = read_all(data_file(dir));
  std::string epoch(8, '\0');
  for (int i = 0; i < 8; ++i) epoch[i] = static_cast<char>(kEpoch >> (8 * i));
  int hits = 0;
  for (auto at = std::search(data.begin(), data.end(), epoch.begin(), epoch.end()); at != data.end();
       at = std::search(at + 1, data.end(), epoch.begin(), epoch.end())) {
    at[8 * 3] ^= 0x40;  // `records`, three fields after the epoch
    ++hits;
  }
  REQUIRE(hits >= 1);
  write_all(data_file(dir), data);
  test_server server(with_data(dir));
  protocol::frame_builder b;
  const auto info = wire_error(server.port(), b.stream_info(3, "s"));
  CHECK(info.first == protocol::errc::corrupted);
  CHECK(info.second.find("log corrupted: stream 's': its metadata is inconsistent") == 0);
  const auto list = wire_error(server.port(), b.stream_list(4, "", 0));
  CHECK(list.first == protocol::errc::corrupted);
  CHECK(list.second.find("log corrupted: stream 's': its metadata is inconsistent") == 0);
}

TEST_CASE("switchyard-cli names the damaged record and how to read past it", "[e2e][storage]") {
  temp_dir dir;
  write_records(dir, 10);
  REQUIRE(damage(dir, payload_of(1)) >= 1);
  test_server server(with_data(dir));
  const auto cli = std::string(SWITCHYARD_CLI_BINARY) + " --address 127.0.0.1:" + std::to_string(server.port());
  const auto r = run_command(cli + " streams read s 2>&1");
  INFO(r.out);
  CHECK(exit_code(r.status) == 3);
  CHECK(r.out.find("streams read s: record 1 is damaged in the broker's sequence log (corrupted); --from 2 reads "
                   "past it; check the whole log with switchyard-server --verify-log") != std::string::npos);
  const auto json = run_command(cli + " --json streams read s --from 1 2>/dev/null");
  CHECK(json.out.find("\"code\":\"corrupted\"") != std::string::npos);
  const auto past = run_command(cli + " streams read s --from 2 2>&1");
  CHECK(exit_code(past.status) == 0);
  CHECK(past.out.find(payload_of(2)) != std::string::npos);
}

TEST_CASE("switchyard-server --verify-log exits 0 on an intact log and 1 on a damaged one, as text or JSON",
          "[e2e][storage]") {
  temp_dir dir;
  write_records(dir, 20);
  auto ok = run_command(server_command(dir, "--verify-log"));
  INFO(ok.out);
  CHECK(exit_code(ok.status) == 0);
  CHECK(ok.out.find(": intact: 1 streams, 20 records") != std::string::npos);
  const auto ok_json = run_command(server_command(dir, "--verify-log --json"));
  CHECK(exit_code(ok_json.status) == 0);
  CHECK(ok_json.out.find("\"status\":\"intact\",\"streams\":1,\"records\":20,") != std::string::npos);

  REQUIRE(damage(dir, payload_of(7)) >= 1);
  const auto bad = run_command(server_command(dir, "--verify-log"));
  INFO(bad.out);
  CHECK(exit_code(bad.status) == 1);
  CHECK(bad.out.find("DAMAGED") != std::string::npos);
  CHECK(bad.out.find("  stream 's', record 7: checksum mismatch") != std::string::npos);
  const auto bad_json = run_command(server_command(dir, "--verify-log --json"));
  INFO(bad_json.out);
  CHECK(exit_code(bad_json.status) == 1);
  CHECK(bad_json.out.find("\"status\":\"damaged\"") != std::string::npos);
  CHECK(bad_json.out.find("{\"stream\":\"s\",\"seq\":7,\"what\":\"stream 's', record 7: checksum mismatch\"}") !=
        std::string::npos);

  temp_dir empty;
  const auto none = run_command(server_command(empty, "--verify-log --json"));
  CHECK(exit_code(none.status) == 3);
  CHECK(none.out.find("\"status\":\"unchecked\"") != std::string::npos);
  CHECK(exit_code(run_command(server("--json 2>&1")).status) == 2);
}

TEST_CASE("switchyard-server --verify-log checks the log of a broker that is running on it", "[e2e][storage]") {
  temp_dir dir;
  const auto data = (dir.path() / "data").string();
  auto broker = start_in(data);
  auto c = connect_to(broker.port());
  for (int i = 0; i < 50; ++i) REQUIRE(c->append("live", text("r" + std::to_string(i))));
  const auto r = run_command(server("--data-dir " + data + " --verify-log --json"));
  INFO(r.out);
  CHECK(exit_code(r.status) == 0);
  CHECK(r.out.find("\"records\":50,") != std::string::npos);
  REQUIRE(c->append("live", text("after the check")));
}

TEST_CASE("a broker started with --verify-on-start refuses a damaged log with exit code 1, and starts on an intact one",
          "[e2e][storage]") {
  temp_dir dir;
  write_records(dir, 20);
  {
    auto started = start_in(dir.path().string(), {"--verify-on-start"});
    auto c = connect_to(started.port());
    auto r = c->read("s", 1);
    REQUIRE(r);
    CHECK(r->records.size() == 20);
  }
  REQUIRE(damage(dir, payload_of(12)) >= 1);
  const auto r = run_command(server_command(dir, "--verify-on-start"));
  INFO(r.out);
  CHECK(exit_code(r.status) == 1);
  CHECK(r.out.find("log corrupted: the sequence log in " + (dir.path() / "log").string() +
                   " failed its check (1 problems; stream 's', record 12: checksum mismatch)") != std::string::npos);
  // Without the check the broker starts, and reports the record when it is read.
  auto unchecked = start_in(dir.path().string());
  auto c = connect_to(unchecked.port());
  auto at = c->read("s", 12);
  REQUIRE_FALSE(at);
  CHECK(at.error() == errc::corrupted);
}
