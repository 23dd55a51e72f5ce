#pragma once
// What a ClusterStatus request answers (docs/protocol.md §14.1): a node's
// view of its cluster, gathered by the server's cluster layer when asked and
// handed to server_admin_handler through its `cluster_status` source. Plain
// data: this layer only encodes it, so it knows nothing of etcd or NATS.
//
// Counters count since this node started (a restart starts them at 0, with
// a new incarnation); "out" is from this node to the member, "in" from the
// member to this node.

#include <cstdint>
#include <string>
#include <vector>

namespace switchyard::broker {

struct cluster_status_report {
  std::string cluster_name, node_id;
  std::int64_t incarnation = 0;    // this node's etcd lease id
  std::int64_t view_revision = 0;  // etcd revision of the view
  bool in_standing = false;        // lease renewed in time
  bool synced = false;             // every peer sent its interest
  // One member of the view (this node included, `self`), in the view's
  // order (by node id).
  struct member {
    std::string node_id, address;  // address: where clients connect to it
    std::int64_t incarnation = 0;  // its etcd lease id
    bool self = false;             // the node answering
    bool synced_in = false;        // it sent this node its whole interest
    std::uint64_t patterns = 0;    // patterns of its interest
    std::uint64_t messages_out = 0, messages_in = 0, records_out = 0, records_in = 0;
    std::uint64_t lost_in = 0;     // messages from it that its numbering shows lost
    std::uint64_t failed_out = 0;  // messages to it NATS refused
    std::uint32_t partitions = 0;  // partitions it owns
  };
  std::vector<member> members;
  // One etcd endpoint as the node's health probe last found it.
  struct etcd_endpoint {
    std::string endpoint;
    bool reachable = false, leader = false;
    std::string version, error;  // version when reachable, else why not
  };
  std::vector<etcd_endpoint> etcd;
  // The node's NATS connection.
  struct nats_link {
    std::string state, server_url;  // state: idle, connected, reconnecting, closed
    std::int64_t max_payload = 0;   // the connected server's
    std::uint64_t messages_in = 0, messages_out = 0, dropped_in = 0, dropped_out = 0, reconnects = 0;
  } nats;
  std::uint64_t local_patterns = 0;     // patterns this node's subscribers hold (its interest)
  std::uint64_t unconfirmed = 0;        // interest announcements waiting for the peers' acks
  std::uint64_t interest_timeouts = 0;  // announcements answered at their deadline (a peer silent)
  std::uint64_t lost_in = 0;            // lost_in over every link, links ended since included
};

}  // namespace switchyard::broker
