// The real switchyard-cli binary's cluster commands
// (admin/cluster_commands.cpp): cluster status against a single-node broker
// on 127.0.0.1, and against a node's answer made by the real
// server_admin_handler (tests/support/admin_handler_host.hpp). The --json
// output is read back with jq.

#include "tests/admin/cli_runner.hpp"
#include "tests/support/admin_handler_host.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/test_server.hpp"

#include <catch2/catch.hpp>

#include <fstream>
#include <optional>
#include <string>

using namespace switchyard;
using test::admin_handler_host;
using test::cli;
using test::cli_stderr;
using test::contains;
using test::lines_of;
using test::one_json_object;
using test::run_for_exit_code;
using test::sample_cluster_status;
using test::temp_dir;
using test::test_server;

namespace {

// `filter` applied by jq -r to the JSON document in `file`: its output.
std::string jq(const std::string& file, const std::string& filter) {
  const auto [code, out] = run_for_exit_code("jq -r '" + filter + "' " + file);
  INFO("jq " << filter);
  REQUIRE(code == 0);
  return out;
}

}  // namespace

TEST_CASE("cluster status on a broker not in cluster mode says so and exits 3", "[admin]") {
  test_server server;
  const auto [code, err] = cli_stderr(server.port(), "cluster status");
  CHECK(code == 3);
  CHECK(err == "switchyard-cli: cluster status: this server is not in cluster mode (no --cluster-node-id)\n");
  const auto [json_code, out] = cli(server.port(), "cluster status --json");
  INFO(out);
  CHECK(json_code == 3);
  CHECK(out ==
        "{\"error\":{\"code\":\"not_found\",\"message\":\"cluster status: this server is not in cluster mode "
        "(no --cluster-node-id)\",\"exit_code\":3}}\n");
}

TEST_CASE("cluster status --json prints one object that jq reads, with every field of the node's answer", "[admin]") {
  const auto report = sample_cluster_status();
  admin_handler_host host([&] { return std::optional(report); });
  const auto [code, out] = cli(host.port(), "cluster status --json");
  INFO(out);
  REQUIRE(code == 0);
  CHECK(one_json_object(out));
  CHECK(host.cluster_status_requests() == 1);
  temp_dir dir{"switchyard-cluster-json"};
  const std::string file = (dir.path() / "status.json").string();
  std::ofstream(file) << out;

  // Incarnations are strings: a 64-bit lease id survives any JSON reader.
  CHECK(jq(file, "[.address, .cluster_name, .node_id, .incarnation, .view_revision, .in_standing, .synced] | @tsv") ==
        "127.0.0.1:" + std::to_string(host.port()) + "\tprod-eu\tnode-a\t7587862384523648004\t42\ttrue\tfalse\n");
  CHECK(jq(file, "[.local_patterns, .unconfirmed, .interest_timeouts, .lost_in] | @tsv") == "3\t1\t47\t31\n");
  CHECK(jq(file,
           ".members[] | [.node_id, .address, .incarnation, .self, .synced_in, .patterns, .messages_out, "
           ".messages_in, .records_out, .records_in, .lost_in, .failed_out, .partitions] | @tsv") ==
        "node-a\t10.0.0.1:7878\t7587862384523648004\ttrue\tfalse\t3\t0\t0\t0\t0\t0\t0\t341\n"
        "node-b\t10.0.0.2:7878\t7587862384523648010\tfalse\ttrue\t12\t1042\t998\t5000\t4000\t2\t1\t342\n"
        "node-c\t10.0.0.3:7878\t7587862384523648020\tfalse\tfalse\t7\t11\t13\t17\t19\t23\t29\t341\n");
  CHECK(jq(file, ".etcd[] | [.endpoint, .reachable, .leader, .version, .error] | @tsv") ==
        "http://10.0.0.1:2379\ttrue\ttrue\t3.4.23\t\n"
        "http://10.0.0.2:2379\ttrue\tfalse\t3.4.23\t\n"
        "http://10.0.0.3:2379\tfalse\tfalse\t\tconnection refused\n");
  CHECK(jq(file,
           ".nats | [.state, .server_url, .max_payload, .messages_in, .messages_out, .dropped_in, .dropped_out, "
           ".reconnects] | @tsv") == "connected\tnats://10.0.0.1:4222\t1048576\t998\t1042\t37\t41\t43\n");
  CHECK(jq(file, "keys | length") == "14\n");  // nothing else
}

TEST_CASE("cluster status prints a header line, the members, etcd's endpoints and the NATS link", "[admin]") {
  admin_handler_host host([] { return std::optional(sample_cluster_status()); });
  const auto [code, out] = cli(host.port(), "cluster status");
  INFO(out);
  REQUIRE(code == 0);
  const auto lines = lines_of(out);
  REQUIRE(lines.size() >= 14);
  CHECK(lines[0] ==
        "cluster prod-eu  node node-a  incarnation 7587862384523648004  in standing  not synced (a member has not "
        "sent its interest yet)");
  CHECK(lines[1] == "view revision 42  local patterns 3  unconfirmed 1  interest timeouts 47  lost in 31");
  CHECK(lines[3] ==
        "NODE    ADDRESS                INCARNATION  SELF  PARTITIONS  SYNCED  PATTERNS  MSGS OUT  MSGS IN  LOST");
  CHECK(lines[4] ==
        "node-a  10.0.0.1:7878  7587862384523648004  *            341  -              3         0        0     0");
  CHECK(lines[5] ==
        "node-b  10.0.0.2:7878  7587862384523648010               342  yes           12      1042      998     2");
  CHECK(lines[6] ==
        "node-c  10.0.0.3:7878  7587862384523648020               341  no             7        11       13    23");
  CHECK(lines[8] == "ETCD ENDPOINT         REACHABLE  LEADER  VERSION OR ERROR");
  CHECK(lines[9] == "http://10.0.0.1:2379  yes        yes     3.4.23");
  CHECK(lines[11] == "http://10.0.0.3:2379  no         no      connection refused");
  CHECK(lines[13] ==
        "nats connected nats://10.0.0.1:4222  max payload 1048576  messages in 998 out 1042  dropped in 37 out 41  "
        "reconnects 43");
}

TEST_CASE("cluster without a subcommand is a usage error naming status and takeover", "[admin]") {
  const auto [code, err] =
      run_for_exit_code(std::string(SWITCHYARD_CLI_BINARY) + " --address 127.0.0.1:1 cluster 2>&1 >/dev/null");
  CHECK(code == 1);
  CHECK(contains(err, "cluster {status, takeover}"));
}

TEST_CASE("cluster takeover without --yes sends nothing and exits 1 saying what it would declare lost", "[admin]") {
  // No broker listens there: a usage error, not a connection failure,
  // shows nothing was even tried.
  const auto [code, err] = cli_stderr(1, "cluster takeover c");
  CHECK(code == 1);
  CHECK_THAT(err,
             Catch::Contains("declares every record of the streams node 'c' holds lost") && Catch::Contains("--yes"));
}

TEST_CASE("cluster takeover on a broker not in cluster mode says so and exits 3", "[admin]") {
  test_server server;
  const auto [code, err] = cli_stderr(server.port(), "cluster takeover c --yes");
  CHECK(code == 3);
  CHECK(err == "switchyard-cli: cluster takeover c: this server is not in cluster mode (no --cluster-node-id)\n");
}
