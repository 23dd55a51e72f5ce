#pragma once
// Server administration requests (capability "admin"; docs/protocol.md
// §14): Drain, Stats, ConnList, FlagSet, FlagList, ClusterStatus,
// ClusterTakeover. The
// server's own state is reached through the functions it injects, so this
// layer depends on neither the server, the connections nor the cluster.
//
// Loop thread only.

#include "broker/handlers/cluster_status.hpp"
#include "broker/tables/feature_flags.hpp"
#include "broker/requests/peer.hpp"
#include "protocol/frame_builder.hpp"

#include <chrono>
#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace spdlog {
class logger;
}

namespace switchyard::broker {

// What a Stats request answers, gathered by the server when asked.
struct stats_report {
  std::string version;
  std::uint64_t instance_id = 0;
  std::uint64_t uptime_ms = 0;
  std::vector<std::pair<std::string, std::string>> settings;
  std::vector<protocol::stats_value_fields> values;  // names are static strings
};

// One open connection as ConnList sorts it: the sort keys only (building
// every connection's whole entry would be wasted on a page of 100).
struct conn_key {
  std::uint64_t id = 0;
  std::uint64_t idle_ms = 0;
  std::uint64_t pending_bytes = 0;
  std::uint64_t dropped = 0;
  std::uint64_t subscriptions = 0;
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;
};

// A page of ConnList: the ids to report, in order, and the cursor of the
// next page (0: none).
struct conn_page {
  std::vector<std::uint64_t> ids;
  std::uint64_t next_cursor = 0;
};

// The paging rule of ConnList (docs/protocol.md §14), on its own for
// tests. `sort` is a wire::ConnSort value (unknown values sort by id);
// `limit` is already clamped. By id: oldest first, entries after the
// cursor id. Otherwise largest first (ties by id), and the cursor is how
// many entries earlier pages returned.
conn_page page_connections(std::vector<conn_key> keys, std::uint8_t sort, std::size_t limit, std::uint64_t cursor);

class server_admin_handler {
 public:
  // Begins a drain over `window` (never 0: the handler puts the configured
  // default in its place); a drain already under way is left as it is.
  using drain_fn = std::function<void(std::chrono::milliseconds window)>;
  using stats_fn = std::function<stats_report()>;
  // The sort keys of every open connection past its hello.
  using conn_keys_fn = std::function<std::vector<conn_key>()>;
  // The whole entries of the connections `ids`, in that order (any gone
  // by now left out).
  using conn_info_fn = std::function<std::vector<protocol::conn_info_fields>(std::span<const std::uint64_t> ids)>;
  // This node's view of its cluster, gathered when asked; nullopt on a
  // server that is not in cluster mode.
  using cluster_status_fn = std::function<std::optional<cluster_status_report>()>;
  // ClusterTakeover of `node`'s streams: calls `done` on the loop thread
  // once etcd has the new holders (or with the error and why). Not called
  // on a server that is not in cluster mode.
  struct takeover_result {
    std::vector<std::uint32_t> partitions;
    std::vector<std::string> holders;
  };
  using takeover_done = std::function<void(std::expected<takeover_result, std::pair<protocol::errc, std::string>>)>;
  using cluster_takeover_fn = std::function<void(std::string_view node, takeover_done done)>;

  struct sources {
    drain_fn drain;
    stats_fn stats;
    conn_keys_fn conn_keys;
    conn_info_fn conn_info;
    // The server's flags (FlagSet, FlagList); null: they answer not_found.
    feature_flags* flags = nullptr;
    // ClusterStatus; empty (a single-node server): it answers not_found.
    cluster_status_fn cluster_status;
    // ClusterTakeover; empty (a single-node server): it answers not_found.
    cluster_takeover_fn cluster_takeover;
  };

  // `default_window` is read at each request (a reload may change it).
  server_admin_handler(sources from, const std::chrono::milliseconds& default_window, protocol::frame_builder& builder,
                       std::shared_ptr<spdlog::logger> logger);

  // Answers Ok (when request_id != 0), then begins the drain: the
  // requester is one of the connections it closes.
  void drain(peer& from, std::uint64_t request_id, const protocol::wire::Drain& m);
  // Answers StatsResult.
  void stats(peer& from, std::uint64_t request_id, const protocol::wire::Stats& m);
  // Answers ConnListResult: one page, as page_connections orders it.
  void conn_list(peer& from, std::uint64_t request_id, const protocol::wire::ConnList& m);
  // Sets a flag's percentage (applies at once); answers FlagInfo. Errors:
  // not_found (no such flag), bad_request (above 100).
  void flag_set(peer& from, std::uint64_t request_id, const protocol::wire::FlagSet& m);
  // Answers FlagListResult: every flag, with its connections on and off.
  void flag_list(peer& from, std::uint64_t request_id, const protocol::wire::FlagList& m);
  // Answers ClusterStatusResult (also to request id 0, as Stats), or
  // not_found with not_in_cluster_message when the cluster_status source
  // is empty or returns nullopt.
  void cluster_status(peer& from, std::uint64_t request_id, const protocol::wire::ClusterStatus& m);

  // Answers ClusterTakeoverResult once the cluster_takeover source is
  // done (a peer ticket held meanwhile: a Ping after it waits), or its
  // error; not_found when the source is empty.
  void cluster_takeover(peer& from, std::uint64_t request_id, const protocol::wire::ClusterTakeover& m);

  // The message of ClusterStatus's not_found.
  static constexpr std::string_view not_in_cluster_message =
      "this server is not in cluster mode (no --cluster-node-id)";

  static constexpr std::size_t default_conn_limit = 100;
  static constexpr std::size_t max_conn_limit = 1000;

 private:
  sources from_;
  const std::chrono::milliseconds& default_window_;
  protocol::frame_builder& builder_;
  std::shared_ptr<spdlog::logger> logger_;
};

}  // namespace switchyard::broker
