// The real switchyard-bench binary, starting its own switchyard-server:
// what it says about TLS and authentication, what it leaves behind, and
// what it writes where (progress, errors, summaries).
// Small workloads only (a thousand messages): these check behaviour, not
// speed.

#include "auth/auth_config.hpp"
#include "bench/auth_file.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

using switchyard::test::run_for_exit_code;
using switchyard::test::temp_dir;

namespace {

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

// switchyard-bench `args` --json with TMPDIR=`tmp`: exit code and stdout's
// JSON line (progress and the summary go to stderr, dropped).
std::pair<int, std::string> run_bench(const temp_dir& tmp, const std::string& args) {
  return run_for_exit_code("TMPDIR=" + tmp.path().string() + " " + SWITCHYARD_BENCH_BINARY + " --server " +
                           SWITCHYARD_SERVER_BINARY + " --json " + args + " 2>/dev/null");
}

// The number after "key": in a JSON line (-1 if absent or not a number).
double json_number(const std::string& json, const std::string& key) {
  const std::string start = "\"" + key + "\":";
  const auto at = json.find(start);
  if (at == std::string::npos) return -1;
  try {
    return std::stod(json.substr(at + start.size()));
  } catch (const std::exception&) {
    return -1;
  }
}

bool is_empty_dir(const std::filesystem::path& dir) {
  return std::filesystem::directory_iterator(dir) == std::filesystem::directory_iterator();
}

std::string read_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// As run_bench, with stderr (the summary, with --json) in a file: exit
// code, stdout and stderr.
struct bench_output {
  int code = -1;
  std::string out, err;
};
bench_output run_bench_with_stderr(const temp_dir& tmp, const std::string& args) {
  const auto err_file = tmp.path() / "stderr.txt";
  const auto [code, out] =
      run_for_exit_code("TMPDIR=" + tmp.path().string() + " " + SWITCHYARD_BENCH_BINARY + " --server " +
                        SWITCHYARD_SERVER_BINARY + " " + args + " 2>" + err_file.string());
  bench_output r{code, out, read_file(err_file)};
  std::filesystem::remove(err_file);
  return r;
}

}  // namespace

TEST_CASE("switchyard-bench --json says TLS and auth were off on a plain run", "[bench]") {
  temp_dir tmp;
  const auto [code, json] = run_bench(tmp, "fanout --count 1000 --size 64");
  INFO(json);
  CHECK(code == 0);
  CHECK(contains(json, R"("workload":"fanout")"));
  CHECK(contains(json, R"("tls":false,"auth":"none","auth_file":false})"));
}

TEST_CASE("switchyard-bench --tls runs over TLS and removes its certificate folder at exit", "[bench][tls]") {
  temp_dir tmp;
  const auto [code, json] = run_bench(tmp, "--tls fanout --count 1000 --size 64");
  INFO(json);
  CHECK(code == 0);
  CHECK(contains(json, R"("recv_total":1000,)"));
  CHECK(contains(json, R"("tls":true,"auth":"none","auth_file":false})"));
  CHECK(is_empty_dir(tmp.path()));
}

TEST_CASE("switchyard-bench removes its certificate folder when the run fails", "[bench][tls]") {
  temp_dir tmp;
  // No broker binary there: start-up fails after the certificate was made.
  const auto [code, json] =
      run_for_exit_code("TMPDIR=" + tmp.path().string() + " " + SWITCHYARD_BENCH_BINARY + " --server " +
                        (tmp.path() / "no-such-server").string() + " --json --tls fanout --count 10 2>/dev/null");
  INFO(json);
  CHECK(code != 0);
  CHECK(contains(json, R"("error":)"));
  CHECK(is_empty_dir(tmp.path()));
}

TEST_CASE("switchyard-bench --auth without its own broker is refused", "[bench][auth]") {
  temp_dir tmp;
  const auto [code, json] = run_bench(tmp, "--auth --address 127.0.0.1:1 fanout --count 10");
  CHECK(code == 2);
  CHECK(contains(json, "--auth writes the auth file of the broker the bench starts"));
}

TEST_CASE("switchyard-bench --auth runs every client workload against a broker checking each permission",
          "[bench][auth]") {
  temp_dir tmp;
  for (const char* args : {"fanout --count 1000 --size 64", "latency --rate 1000 --seconds 0.2 --size 64",
                           "durable --count 200 --size 64 --durability none", "replay --count 200 --size 64",
                           "route --users 100 --gateways 4 --count 500 --size 64 --window 16",
                           "leases --leases 100 --window 16", "connections --count 20",
                           "offers --users 100 --gateways 4 --count 500 --rounds 1 --rate 1000 --seconds 0.2 "
                           "--pending 100 --size 64"}) {
    INFO(args);
    const auto [code, json] = run_bench(tmp, std::string("--auth ") + args);
    INFO(json);
    CHECK(code == 0);
    CHECK_FALSE(contains(json, R"("error")"));
    CHECK(contains(json, R"("tls":false,"auth":"token","auth_file":true})"));
  }
  CHECK(is_empty_dir(tmp.path()));
}

TEST_CASE("the bench's auth file gives its principal every name the workloads use through real allow and deny rules",
          "[bench][auth]") {
  const std::string token = "bench-token", admin_token = "bench-admin-token";
  const auto config = switchyard::auth::auth_config::parse(switchyard::bench::bench_auth_file_text(token, admin_token));
  if (!config) FAIL(config.error().to_string("the bench's auth file"));
  const auto principal = config->by_token(token);
  REQUIRE(principal);
  CHECK_FALSE(principal->admin);
  for (std::size_t op = 0; op < switchyard::auth::operation_count; ++op) {
    const auto& rule = principal->rules[op];
    INFO(switchyard::auth::to_string(static_cast<switchyard::auth::operation>(op)));
    // Not the allow-everything short cut: the broker matches every name.
    CHECK_FALSE(rule.allows_everything());
    CHECK(rule.allow().size() >= 2);
    CHECK_FALSE(rule.deny().empty());
  }
  using op = switchyard::auth::operation;
  // The names of bench/*.cpp (fanout, latency, reconnect, route, leases, durable, replay).
  const std::pair<op, const char*> used[] = {{op::publish, "bench.fanout"},
                                             {op::publish, "bench.rc.17"},
                                             {op::send, "user:4711"},
                                             {op::send, "rc.u.3.7"},
                                             {op::registry_put, "user:4711"},
                                             {op::registry_put, "rc.u.3.7"},
                                             {op::registry_get, "user:4711"},
                                             {op::registry_delete, "rc.u.3.7"},
                                             {op::inbox, "gw-199"},
                                             {op::inbox, "rc-gw-12"},
                                             {op::stream_append, "bench:durable"},
                                             {op::stream_append, "bench:replay"},
                                             {op::stream_read, "bench:durable"},
                                             {op::stream_read, "bench:replay"}};
  for (const auto& [operation, name] : used) {
    INFO(switchyard::auth::to_string(operation) << " " << name);
    CHECK(principal->may(operation, name));
  }
  for (const char* pattern : {"bench.fanout", "bench.rc.17"})
    CHECK(principal->rule(op::subscribe).check_subscribe(pattern) ==
          switchyard::auth::permission_rule::subscribe_verdict::allowed);
  // The deny rules are real: they refuse names beside the bench's.
  CHECK_FALSE(principal->may(op::publish, "bench.admin.reset"));
  CHECK_FALSE(principal->may(op::send, "admin"));
  CHECK_FALSE(principal->may(op::publish, "orders.eu"));
  // The reconnect workload's drain: the second principal.
  const auto admin = config->by_token(admin_token);
  REQUIRE(admin);
  CHECK(admin->admin);
}

TEST_CASE("switchyard-bench draws no progress when stderr is not a terminal", "[bench]") {
  temp_dir tmp;
  // Each of these draws progress at least once on a terminal.
  for (const char* args : {"durable --count 200 --size 64 --durability none", "replay --count 200 --size 64",
                           "route --users 100 --gateways 4 --count 500 --size 64 --window 16",
                           "leases --leases 100 --window 16", "fanout --count 1000 --size 64"}) {
    INFO(args);
    const auto r = run_bench_with_stderr(tmp, std::string("--json ") + args);
    INFO(r.err);
    CHECK(r.code == 0);
    // Only the summary: no carriage returns, no escape sequences.
    CHECK_FALSE(contains(r.err, "\r"));
    CHECK_FALSE(contains(r.err, "\033"));
    CHECK(contains(r.err, "  security: TLS off, auth none"));
  }
}

TEST_CASE("switchyard-bench names a server binary it cannot find and the flag that gives another", "[bench]") {
  temp_dir tmp;
  const auto missing = (tmp.path() / "no-such-server").string();
  const auto [code, out] = run_for_exit_code(std::string(SWITCHYARD_BENCH_BINARY) + " --server " + missing +
                                             " fanout --count 10 2>/dev/null");
  INFO(out);
  CHECK(code == 1);
  CHECK(contains(out, "cannot start switchyard-server at " + missing + ": not found"));
  CHECK(contains(out, "give --server PATH"));
  CHECK_FALSE(contains(out, "status"));
}

TEST_CASE("switchyard-bench without a workload, or with a word that is not one, names the workloads", "[bench]") {
  temp_dir tmp;
  const auto none = run_bench_with_stderr(tmp, "");
  INFO(none.err);
  CHECK(none.code == 106);  // CLI11's code for a missing subcommand, as before
  CHECK(contains(none.err, "switchyard-bench: a workload is required: {"));
  CHECK(contains(none.err, "fanout"));
  CHECK(contains(none.err, "route"));
  CHECK(contains(none.err, "offers"));

  const auto wrong = run_bench_with_stderr(tmp, "--json nosuch");
  INFO(wrong.err);
  CHECK(wrong.code == 106);
  CHECK(contains(wrong.err, "switchyard-bench: 'nosuch' is not a workload: {"));
  CHECK(contains(wrong.err, "route"));
  CHECK(wrong.out.empty());  // nothing was run

  // A workload's flag without the workload: the flag is not called a workload.
  const auto flag_only = run_bench_with_stderr(tmp, "--count 5");
  INFO(flag_only.err);
  CHECK(flag_only.code == 106);
  CHECK(contains(flag_only.err,
                 "switchyard-bench: a workload is required ('--count' is not a flag of switchyard-bench itself): {"));
}

TEST_CASE("switchyard-bench route --window 0 reports its sends as sent without answers", "[bench]") {
  temp_dir tmp;
  const auto r = run_bench_with_stderr(tmp, "--json route --users 100 --gateways 4 --count 500 --size 64 --window 0");
  INFO(r.err);
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK(contains(r.err, "/s sent (fire and forget: no answers"));
  CHECK_FALSE(contains(r.err, "answered"));
  // Routed or not is not known without answers.
  CHECK(contains(r.out, R"("routed":null,"no_route":null,)"));
}

TEST_CASE("switchyard-bench route with a window reports its sends as answered", "[bench]") {
  temp_dir tmp;
  const auto r = run_bench_with_stderr(tmp, "--json route --users 100 --gateways 4 --count 500 --size 64 --window 16");
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(contains(r.err, "/s answered (500 routed, 0 no route, 0 errors)"));
  CHECK(contains(r.out, R"("routed":500,"no_route":0,)"));
}

TEST_CASE("switchyard-bench route --rate paces its sends and reports send-to-inbox latency percentiles", "[bench]") {
  temp_dir tmp;
  const auto r =
      run_bench_with_stderr(tmp, "--json route --users 100 --gateways 4 --count 2000 --size 64 --window 0 --rate 4000");
  INFO(r.err);
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK(contains(r.out, R"("recv_total":2000,)"));
  CHECK(json_number(r.out, "rate") == 4000);
  CHECK(json_number(r.out, "samples") == 2000);  // every delivery but the sentinels
  const double p50 = json_number(r.out, "p50_us"), p99 = json_number(r.out, "p99_us"),
               p999 = json_number(r.out, "p999_us");
  CHECK(p50 > 0);
  CHECK(p50 <= p99);
  CHECK(p99 <= p999);
  // Send i goes no earlier than i / rate after the first: 2,000 sends take
  // at least 0.49975 s, so the send rate cannot pass 4,000/s by more than
  // rounding.
  CHECK(json_number(r.out, "send_rate") <= 4010);
  CHECK(contains(r.err, "  latency:   send to inbox p50 "));
}

TEST_CASE("switchyard-bench route --rate refuses a window or a payload too small for the send time, exit 2",
          "[bench]") {
  temp_dir tmp;
  const auto windowed =
      run_bench_with_stderr(tmp, "--json route --users 10 --gateways 2 --count 10 --window 8 --rate 100");
  CHECK(windowed.code == 2);
  CHECK(contains(windowed.out + windowed.err, "route --rate needs --window 0 and --size of at least 24"));
  const auto small =
      run_bench_with_stderr(tmp, "--json route --users 10 --gateways 2 --count 10 --window 0 --size 16 --rate 100");
  CHECK(small.code == 2);
  CHECK(contains(small.out + small.err, "route --rate needs --window 0 and --size of at least 24"));
}

TEST_CASE("switchyard-bench route checks every delivery: none misrouted or reordered, a sentinel per gateway",
          "[bench]") {
  temp_dir tmp;
  for (const char* window : {"0", "16"}) {
    INFO("window " << window);
    const auto r = run_bench_with_stderr(
        tmp, std::string("--json route --users 100 --gateways 4 --count 500 --size 64 --window ") + window);
    INFO(r.err);
    INFO(r.out);
    CHECK(r.code == 0);
    CHECK(contains(r.out, R"("recv_total":500,)"));
    CHECK(contains(r.out, R"("loss":0,"misrouted":0,"reorder":0,"order":"gateway","gw_end":{"sentinel":4})"));
    const double min = json_number(r.out, "recv_min"), max = json_number(r.out, "recv_max");
    CHECK(min >= 1);
    CHECK(min <= max);
    CHECK(max <= 500);
    CHECK(contains(r.err, "  checked:   0 misrouted, 0 reordered (order per gateway); "));
  }
}

TEST_CASE("switchyard-bench route with more gateways than users ends the gateways without users at once", "[bench]") {
  temp_dir tmp;
  const auto r = run_bench_with_stderr(tmp, "--json route --users 3 --gateways 5 --count 100 --size 64 --window 0");
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(contains(r.out, R"("recv_min":0,)"));
  CHECK(contains(r.out, R"("gw_end":{"no_users":2,"sentinel":3})"));
}

TEST_CASE("every switchyard-bench workload reports the CPU of the bench and its broker per message", "[bench]") {
  temp_dir tmp;
  const std::pair<const char*, const char*> runs[] = {
      {"fanout --count 2000 --size 64", "delivered message"},
      {"latency --rate 2000 --seconds 0.2 --size 64", "received message"},
      {"durable --count 200 --size 64 --durability none --fsync-probe 0", "acknowledged append"},
      {"replay --count 200 --size 64", "record read"},
      {"route --users 100 --gateways 4 --count 500 --size 64 --window 0", "delivered message"},
      {"leases --leases 100 --window 16", "request"},
      {"connections --count 20", "connection with its hello"},
      {"handshakes --clients 1 --seconds 0.2", "connect"},
      {"reconnect --clients 6 --gateways 2 --mode kill --phase-timeout 30", "reconnected client"},
      {"offers --users 100 --gateways 4 --count 500 --rounds 1 --rate 1000 --seconds 0.2 --pending 100 --size 64",
       "offer with its receipt"}};
  for (const auto& [args, unit] : runs) {
    INFO(args);
    const auto r = run_bench_with_stderr(tmp, std::string("--json ") + args);
    INFO(r.err);
    INFO(r.out);
    CHECK(r.code == 0);
    CHECK(contains(r.out, std::string(R"("cpu":{"unit":")") + unit + R"(","count":)"));
    // Measured for the broker the bench started: numbers, never null.
    CHECK(json_number(r.out, "bench_s") >= 0);
    CHECK(json_number(r.out, "broker_s") >= 0);
    CHECK_FALSE(contains(r.out, "broker_note"));
    CHECK(contains(r.err, "  CPU:       "));
    CHECK(contains(r.err, std::string(" us per ") + unit + " (bench "));
    CHECK_FALSE(contains(r.err, "nan"));
  }
}

TEST_CASE("switchyard-bench durable reports the group committer's batches and fsyncs and probes the data folder's disk",
          "[bench]") {
  temp_dir tmp;
  // switchyard-bench --json durable `args`, which must succeed: its output.
  const auto durable = [&](const std::string& args) {
    auto r = run_bench_with_stderr(tmp, "--json durable --size 64 " + args);
    if (r.code != 0) FAIL("exit " << r.code << ": " << r.err << r.out);
    return r;
  };
  SECTION("sync: an fsync per batch") {
    const auto r = durable("--count 300 --window 16 --fsync-probe 0.05");
    INFO(r.err << r.out);
    CHECK(json_number(r.out, "appends") == 300);
    const double batches = json_number(r.out, "batches");
    CHECK(batches >= 300.0 / 16);
    CHECK(json_number(r.out, "fsyncs") == batches);
    CHECK(contains(r.err, "  group commit: 300 appends in "));
    CHECK(contains(r.out, R"("fsync_probe":{"dir":")"));
    CHECK(json_number(r.out, "ops") >= 1);
    CHECK(contains(r.err, "  disk: 4 KiB append + fdatasync in "));
  }
  SECTION("none: no fsync, and no probe when asked for none") {
    const auto r = durable("--count 300 --durability none --fsync-probe 0");
    INFO(r.err << r.out);
    CHECK(json_number(r.out, "appends") == 300);
    CHECK(json_number(r.out, "fsyncs") == 0);
    CHECK(contains(r.err, "fsyncs (none: nothing waited for the disk)"));
    CHECK(contains(r.out, R"("fsync_probe":null,"fsync_probe_note":"not measured: --fsync-probe 0")"));
  }
  SECTION("with --auth the bench's admin principal reads the counters") {
    CHECK(json_number(durable("--auth --count 100 --fsync-probe 0").out, "appends") == 100);
  }
  CHECK(is_empty_dir(tmp.path()));
}

TEST_CASE("switchyard-bench offers measures plain sends and offers with receipts in one run, every receipt arriving",
          "[bench][offers]") {
  temp_dir tmp;
  const auto r = run_bench_with_stderr(tmp,
                                       "--json offers --users 200 --gateways 4 --count 2000 --rounds 2 --window 16 "
                                       "--rate 2000 --seconds 0.5 --pending 1000 --size 64");
  INFO(r.err);
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK(contains(r.out, R"("workload":"offers","users":200,"gateways":4,"n":2000,"size":64,"window":16,"rounds":2,)"));
  // (a) both rates and their ratio, per round and the medians.
  CHECK(json_number(r.out, "plain_rate") > 0);
  CHECK(json_number(r.out, "offer_rate") > 0);
  CHECK(json_number(r.out, "ratio") > 0);
  CHECK(contains(r.out, R"("plain_rates":[)"));
  CHECK(contains(r.out, R"("ratios":[)"));
  CHECK(json_number(r.out, "plain_delivered") == 4000);
  CHECK(json_number(r.out, "plain_missing") == 0);
  // Every offer routed, every one with its receipt, none evicted.
  CHECK(json_number(r.out, "offers_sent") == 4000);
  CHECK(json_number(r.out, "offers_routed") == 4000);
  CHECK(json_number(r.out, "receipts") == 4000);
  CHECK(json_number(r.out, "receipts_acked") + json_number(r.out, "receipt_timeouts") == 4000);
  CHECK(json_number(r.out, "receipts_missing") == 0);
  CHECK(json_number(r.out, "evicted") == 0);
  // (b) the latency phase: 1000 offers, each with its receipt.
  CHECK(contains(r.out, R"("latency":{"rate":2000,"secs":0.5,"sent":1000,)"));
  CHECK(contains(r.out, R"(,"receipts":1000,)"));
  CHECK(json_number(r.out, "p50_us") > 0);
  CHECK(json_number(r.out, "p99_us") >= json_number(r.out, "p50_us"));
  CHECK(json_number(r.out, "p999_us") >= json_number(r.out, "p99_us"));
  CHECK(json_number(r.out, "broker_p99_us") >= 0);
  // (c) the memory per pending offer: the gauge counts at least the
  // payload per offer, and every offer was still pending when withdrawn.
  CHECK(contains(r.out, R"("memory":{"pending":1000,"routed":1000,)"));
  CHECK(json_number(r.out, "offer_bytes_per_offer") > 64);
  CHECK_FALSE(contains(r.out, R"("rss_per_offer":null)"));  // measured: the bench started the broker
  CHECK(json_number(r.out, "offers_live") == 1000);
  CHECK(json_number(r.out, "offers_pending") == 1000);
  CHECK(json_number(r.out, "withdrawn_pending") == 1000);
  CHECK(json_number(r.out, "misrouted") == 0);
  CHECK(json_number(r.out, "errors") == 0);
  CHECK(contains(r.out, R"("cpu":{"unit":"offer with its receipt","count":4000,)"));
  CHECK(contains(r.out, R"("cpu_plain":{"unit":"delivered message","count":4000,)"));
  CHECK(contains(r.err, "    ratio:       "));
  CHECK(contains(r.err, "  memory per pending offer (1000 offers nobody acked, 64 B payload): "));
  CHECK_FALSE(contains(r.err, "nan"));
}
