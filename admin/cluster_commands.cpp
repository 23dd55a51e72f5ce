// switchyard-cli: cluster status (a broker node's view of its cluster) and
// cluster takeover (capability "admin").

#include "admin/cli_context.hpp"
#include "admin/command.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <map>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace switchyard::admin {

namespace {

// What `cluster status` says of a broker that is not in cluster mode (the
// broker's own words for its not_found).
constexpr std::string_view not_in_cluster = "this server is not in cluster mode (no --cluster-node-id)";

// A revision or a size is never negative; 0 stands for a nonsensical one
// (the JSON writer takes unsigned numbers).
std::uint64_t non_negative(std::int64_t v) { return static_cast<std::uint64_t>(std::max<std::int64_t>(v, 0)); }

std::string yes_no(bool v) { return v ? "yes" : "no"; }

}  // namespace

// The answer as one JSON object: the fields of cluster_status_info, the
// incarnations as strings (etcd lease ids use all 64 bits, more than a
// JSON reader that keeps doubles holds).
void command::write_cluster_status(json_writer& j, const cluster_status_info& st) const {
  j.begin_object().string("address", s_.address).string("cluster_name", st.cluster_name);
  j.string("node_id", st.node_id).string("incarnation", std::to_string(st.incarnation));
  j.number("view_revision", non_negative(st.view_revision));
  j.boolean("in_standing", st.in_standing).boolean("synced", st.synced);
  j.key("members").begin_array();
  for (const auto& m : st.members) {
    j.begin_object().string("node_id", m.node_id).string("address", m.address);
    j.string("incarnation", std::to_string(m.incarnation)).boolean("self", m.self).boolean("synced_in", m.synced_in);
    j.number("patterns", m.patterns).number("messages_out", m.messages_out).number("messages_in", m.messages_in);
    j.number("records_out", m.records_out).number("records_in", m.records_in);
    j.number("lost_in", m.lost_in).number("failed_out", m.failed_out).number("partitions", m.partitions);
    j.end_object();
  }
  j.end_array().key("etcd").begin_array();
  for (const auto& e : st.etcd) {
    j.begin_object().string("endpoint", e.endpoint).boolean("reachable", e.reachable).boolean("leader", e.leader);
    j.string("version", e.version).string("error", e.error).end_object();
  }
  const auto& n = st.nats;
  j.end_array().key("nats").begin_object().string("state", n.state).string("server_url", n.server_url);
  j.number("max_payload", non_negative(n.max_payload)).number("messages_in", n.messages_in);
  j.number("messages_out", n.messages_out).number("dropped_in", n.dropped_in).number("dropped_out", n.dropped_out);
  j.number("reconnects", n.reconnects).end_object();
  j.number("local_patterns", st.local_patterns).number("unconfirmed", st.unconfirmed);
  j.number("interest_timeouts", st.interest_timeouts).number("lost_in", st.lost_in).end_object();
}

int command::cluster_status() {
  auto st = client_->cluster_status();
  if (!st) return fail(st.error(), "cluster status", not_in_cluster);
  if (s_.json) {
    json_writer j;
    write_cluster_status(j, *st);
    out_ << j.str() << "\n";
    return exit_ok;
  }
  out_ << "cluster " << st->cluster_name << "  node " << st->node_id << "  incarnation " << st->incarnation << "  "
       << (st->in_standing ? "in standing" : "NOT IN STANDING (its etcd lease was not renewed in time)") << "  "
       << (st->synced ? "synced" : "not synced (a member has not sent its interest yet)") << "\n";
  out_ << "view revision " << st->view_revision << "  local patterns " << st->local_patterns << "  unconfirmed "
       << st->unconfirmed << "  interest timeouts " << st->interest_timeouts << "  lost in " << st->lost_in << "\n\n";

  if (st->members.empty()) {
    out_ << "no members\n";
  } else {
    std::vector<std::vector<std::string>> rows{
        {"NODE", "ADDRESS", "INCARNATION", "SELF", "PARTITIONS", "SYNCED", "PATTERNS", "MSGS OUT", "MSGS IN", "LOST"}};
    for (const auto& m : st->members)
      rows.push_back({m.node_id, m.address.empty() ? "-" : m.address, std::to_string(m.incarnation), m.self ? "*" : "",
                      std::to_string(m.partitions), m.self ? "-" : yes_no(m.synced_in), std::to_string(m.patterns),
                      std::to_string(m.messages_out), std::to_string(m.messages_in), std::to_string(m.lost_in)});
    out_ << format_table(rows, {false, false, true, false, true, false, true, true, true, true});
  }
  out_ << "\n";

  if (st->etcd.empty()) {
    out_ << "no etcd endpoints probed yet\n";
  } else {
    std::vector<std::vector<std::string>> rows{{"ETCD ENDPOINT", "REACHABLE", "LEADER", "VERSION OR ERROR"}};
    for (const auto& e : st->etcd)
      rows.push_back({e.endpoint, yes_no(e.reachable), yes_no(e.leader), e.reachable ? e.version : e.error});
    out_ << format_table(rows, {false, false, false, false});
  }
  out_ << "\n";

  const auto& n = st->nats;
  out_ << "nats " << (n.state.empty() ? "unknown" : n.state);
  if (!n.server_url.empty()) out_ << " " << n.server_url;
  out_ << "  max payload " << n.max_payload << "  messages in " << n.messages_in << " out " << n.messages_out
       << "  dropped in " << n.dropped_in << " out " << n.dropped_out << "  reconnects " << n.reconnects << "\n";
  return exit_ok;
}

int command::cluster_takeover() {
  auto r = client_->cluster_takeover(s_.node);
  if (!r) {
    if (r.error() == errc::bad_request)
      return fail(exit_server_error, "bad_request",
                  "cluster takeover " + s_.node +
                      ": refused: the node named must not be a member now (stop it first, or wait for its etcd lease "
                      "to lapse if it died) and must not be the node asked");
    return fail(r.error(), "cluster takeover " + s_.node, not_in_cluster);
  }
  if (s_.json) {
    json_writer j;
    j.begin_object().string("address", s_.address).string("node_id", r->node_id);
    j.key("moved").begin_array();
    for (std::size_t i = 0; i < r->partitions.size() && i < r->holders.size(); ++i)
      j.begin_object().number("partition", r->partitions[i]).string("holder", r->holders[i]).end_object();
    j.end_array().end_object();
    out_ << j.str() << "\n";
    return exit_ok;
  }
  if (r->partitions.empty()) {
    out_ << "node " << s_.node << " held no streams: nothing moved\n";
    return exit_ok;
  }
  std::map<std::string, std::size_t> per_holder;
  for (const auto& h : r->holders) ++per_holder[h];
  out_ << "the streams of " << r->partitions.size() << " partition(s) held by node " << s_.node
       << " were declared lost; they start again, empty, with new epochs, on:\n";
  std::vector<std::vector<std::string>> rows{{"NEW HOLDER", "PARTITIONS"}};
  for (const auto& [h, n] : per_holder) rows.push_back({h, std::to_string(n)});
  out_ << format_table(rows, {false, true});
  return exit_ok;
}

void register_cluster_commands(CLI::App& app, cli_context& cli) {
  settings& s = cli.s();
  auto* cluster = app.add_subcommand("cluster", "a broker node's cluster (cluster mode: etcd and NATS)");
  cluster->require_subcommand(1, 1);
  cluster->add_subcommand("status",
                          "the node's view of its cluster: its standing in etcd, the members and the traffic with "
                          "each, etcd's endpoints, the NATS link; a broker not in cluster mode exits 3");
  auto* takeover = cluster->add_subcommand(
      "takeover",
      "declare the durable streams a node held lost, for a node gone for good (its data folder lost): their "
      "partitions get new holders, where the streams start again, empty, with new epochs; refused for a member "
      "(exit 3)");
  takeover->add_option("node", s.node, "the node id whose streams are declared lost")->required();
  takeover->add_flag("--yes", s.yes, "confirm the loss (without it nothing is sent, exit 1)");
  // Checked before connecting: without the confirmation nothing is sent.
  cli.add_check([&s]() -> std::string {
    if (s.command != "cluster takeover" || s.yes) return {};
    return "cluster takeover " + s.node + ": this declares every record of the streams node '" + s.node +
           "' holds lost (they start again, empty, with new epochs, on other nodes); add --yes to go on";
  });
}

}  // namespace switchyard::admin
