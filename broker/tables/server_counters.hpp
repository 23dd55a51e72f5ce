#pragma once
// Event counters of one server, maintained on its loop thread. Gauges and
// the rest are in metrics_snapshot (server::metrics()).

#include "broker/tables/latency_histogram.hpp"

#include <cstdint>

namespace switchyard::broker {

struct server_counters {
  std::uint64_t connections_accepted = 0;
  std::uint64_t connections_rejected = 0;  // refused: too_many_connections (at accept or at the hello)
  std::uint64_t hellos_rate_limited = 0;   // refused: rate_limited (--max-hellos-per-s)
  std::uint64_t hellos_draining = 0;       // refused: draining (new connections during a drain)
  std::uint64_t connections_drained = 0;   // open connections a drain closed (told draining)
  std::uint64_t published = 0;             // publishes routed (valid channel)
  std::uint64_t delivered = 0;             // deliveries queued, one per connection per publish
  std::uint64_t dropped = 0;               // deliveries dropped for slow consumers
  std::uint64_t protocol_errors = 0;       // connections closed for bad input
  std::uint64_t leases_expired = 0;        // by the sweeper (revokes not counted)
  std::uint64_t sends_routed = 0;          // route keys delivered into an inbox
  std::uint64_t sends_unrouted = 0;        // route keys with no route
  std::uint64_t write_waits = 0;           // turns a small write waited for more input (connection::writer)
  std::uint64_t writes = 0;                // socket writes of queued frames (one gather write each)
  std::uint64_t frames_written = 0;        // frames those writes carried: frames per write = this / writes
  std::uint64_t slow_consumers = 0;        // times a connection began dropping deliveries (until its queue drained)
  std::uint64_t bytes_in = 0;              // read from clients (plaintext, after TLS)
  std::uint64_t bytes_out = 0;             // written to clients (plaintext, before TLS)
  // Authentication and permissions (docs/security.md).
  std::uint64_t auth_failures = 0;      // hellos refused: unauthorized (bad or missing credentials)
  std::uint64_t auth_rate_limited = 0;  // hellos refused: rate_limited, too many failures from the address
  std::uint64_t forbidden = 0;          // requests refused by a permission list (not by ownership)
  // Offers and expiries (docs/protocol.md §15, docs/offers.md).
  std::uint64_t expired = 0;                 // deliveries dropped unwritten: their expiry passed while queued
  std::uint64_t expired_read = 0;            // log records left out of reads: their expiry had passed
  std::uint64_t withdrawn_queued = 0;        // deliveries dropped unwritten: their offer was withdrawn
  std::uint64_t offers = 0;                  // sends with an offer id taken
  std::uint64_t offers_capped = 0;           // route keys an offer skipped: over its exposure cap
  std::uint64_t offers_withdrawn = 0;        // Withdraw requests that found their offer
  std::uint64_t offers_expired = 0;          // offers that reached their expiry while live
  std::uint64_t receipts_acked = 0;          // keys acknowledged by their gateway (OfferAck)
  std::uint64_t receipt_timeouts = 0;        // keys whose receipt timeout passed unacknowledged
  std::uint64_t receipts_undeliverable = 0;  // receipts with no sender connection or receipt inbox to take them
  std::uint64_t exposure_untracked = 0;      // offers not counted for a cap: the exposure table was full
  // How long a connection's oldest queued frame waited for the write that
  // carries it to start: one observation per write (connection::writer).
  latency_histogram delivery_latency;
};

}  // namespace switchyard::broker
