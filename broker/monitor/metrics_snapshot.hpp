#pragma once
// Every counter and gauge of one server, gathered in one struct by
// server::metrics(): what a stats request or a metrics endpoint reads.
// A copy; nothing in it points into the server.

#include "broker/tables/latency_histogram.hpp"
#include "broker/tables/server_counters.hpp"
#include "storage/group_committer.hpp"

#include <cstddef>
#include <cstdint>

namespace switchyard::broker {

struct metrics_snapshot {
  // Events since the server started (connections, publishes, deliveries,
  // drops, sends, expiries, protocol errors, write waits).
  server_counters counters;

  // Lifecycle: a draining (or stopping) server is not ready: a health
  // check should send no new clients to it.
  bool draining = false;
  bool ready = true;

  // Connections.
  std::size_t connections = 0;            // open, including those closing
  std::size_t connections_rejecting = 0;  // over the cap, saying goodbye
  std::size_t queued_bytes = 0;           // in all outbound queues
  std::size_t queued_bytes_max = 0;       // in the fullest one

  // Tables.
  std::size_t subscriptions = 0;  // (pattern, connection) pairs
  std::size_t leases = 0;         // live leases, private TTL leases included
  std::size_t registry_entries = 0;
  std::size_t inboxes = 0;

  // Memory.
  std::size_t incomplete_bytes = 0;         // held by incomplete frames now
  std::uint64_t incomplete_bytes_peak = 0;  // the most they held at once
  std::size_t arena_chunks = 0;             // frame arena chunks allocated (in use or pooled)

  // Offers (offer_handler) and the flag "offers".
  std::size_t offers = 0;                // live offers
  std::size_t offer_bytes = 0;           // what they hold (offer_table::bytes)
  std::size_t offers_pending = 0;        // (key, offer) pending entries
  std::uint64_t offers_evicted = 0;      // offers forgotten by max-offers / max-offer-bytes
  std::uint64_t pending_pushed_out = 0;  // pending entries pushed out by max-pending-per-key
  std::size_t exposure_keys = 0;         // route keys with offers counted in the window
  std::size_t exposure_bytes = 0;        // what their counts hold (exposure_table::bytes)
  std::uint8_t flag_offers_percent = 0;
  std::uint64_t flag_offers_on = 0;   // connections that declared "offers", inside the ramp
  std::uint64_t flag_offers_off = 0;  // ... and outside it

  // Cluster mode (all zero on a single node; docs/cluster.md).
  bool cluster = false;
  std::size_t cluster_members = 0;  // in the view, this node included
  bool cluster_in_standing = false;
  bool cluster_nats_connected = false;
  std::uint64_t cluster_messages_out = 0;  // link messages sent to other nodes
  std::uint64_t cluster_messages_in = 0;
  std::uint64_t cluster_records_out = 0;  // deliveries shipped to other nodes
  std::uint64_t cluster_records_in = 0;
  std::uint64_t cluster_lost = 0;         // link messages lost in transit (gaps)
  std::uint64_t cluster_send_failed = 0;  // link messages NATS refused
  std::uint64_t cluster_interest_timeouts = 0;
  std::uint64_t cluster_dropped = 0;  // messages dropped: unknown sender or malformed
  std::size_t cluster_remote_patterns = 0;
  std::uint64_t cluster_sends_forwarded = 0;  // SendForwards to other nodes
  std::uint64_t cluster_outcome_unknown = 0;  // forwarded sends answered outcome_unknown
  std::uint64_t cluster_unavailable = 0;      // requests answered unavailable
  std::uint64_t cluster_puts_confirmed = 0;   // route puts confirmed by another node (their owner)
  std::uint64_t cluster_rebuilt = 0;          // partitions whose route directory this node rebuilt
  std::size_t cluster_directory_entries = 0;  // routes in this node's directory (its partitions)
  std::size_t cluster_partitions_owned = 0;
  std::size_t cluster_partitions_unowned = 0;  // in this node's view
  std::size_t cluster_partitions_rebuilding = 0;
  std::uint64_t cluster_stream_forwarded = 0;  // stream requests forwarded to their holder
  std::uint64_t cluster_stream_served = 0;     // stream requests of other nodes run here
  std::size_t cluster_stream_partitions = 0;   // partitions whose streams this node holds

  // The sequence log (all zero without one).
  bool log_enabled = false;
  std::size_t streams = 0;          // streams in the log (sequence_log::stream_count)
  std::size_t appends_waiting = 0;  // queued for the group committer, not yet answered
  storage::group_commit_stats group_commit;
  latency_histogram append_latency;  // durable_pipeline::append_latency()
};

}  // namespace switchyard::broker
