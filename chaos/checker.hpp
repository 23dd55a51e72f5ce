#pragma once
// The checker: proves from a history (history.hpp) that the cluster kept
// its promises through the faults, and names every event that shows it did
// not. Properties (docs/chaos.md says why each matters):
//
//   acked-append-present   every acknowledged append is in its stream's
//                          final read at its (epoch, seq) with its payload
//   sequence-gap-free      every read holds seqs 1..N, each once, in order
//   one-payload-per-slot   no (stream, epoch, seq) carries two payloads, no
//                          payload sits in two slots, and every payload read
//                          was appended by the workload
//   refused-append-absent  no payload whose append was refused (an error
//                          other than an unknown outcome) is in the log
//   delivered-at-most-once no message id is delivered twice (a send to a
//                          gateway; a publish to one subscriber)
//   delivered-to-addressee a delivery is for the user the message was sent
//                          to, at a gateway that registered that user; a
//                          message received on a channel was published there
//   no-delivery-after-expiry  nothing sent after an abandoned gateway's
//                          lease lapsed (its TTL plus one sweep plus
//                          `slack` after it stopped its keepalives) reaches it
//   routable-after-faults  after the faults healed, every user of a gateway
//                          still alive was reached by a probe: routed to its
//                          gateway and delivered there
//   subscribed-after-faults  after the faults healed, every subscriber
//                          received a probe published on every node
//   receipt-once           an offer's key gets at most one acked and one
//                          timeout receipt, never the timeout after the
//                          acked (a late ack after a timeout still sends
//                          acked: docs/protocol.md §15.3)
//   acked-receipt-was-acked  an "acked" receipt names a key a gateway
//                          acked (and the gateway the offer reached)
//
// Pure: no clock, no I/O.

#include "chaos/history.hpp"

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace switchyard::chaos {

struct violation {
  std::string property;  // one of the names above
  std::string detail;    // what was seen, naming the events
};

struct check_report {
  std::vector<violation> violations;
  std::size_t appends = 0;          // answered
  std::size_t appends_acked = 0;    // of them "ok"
  std::size_t appends_unknown = 0;  // outcome_unknown, connection_lost or timeout: may or may not be in the log
  std::size_t streams_read = 0;
  std::size_t records_read = 0;
  std::size_t sends = 0;
  std::size_t sends_ok = 0;
  std::size_t deliveries = 0;
  std::size_t publishes = 0;
  std::size_t receipts = 0;        // messages subscribers received
  std::size_t offers = 0;          // offers answered (a kind of send: counted in sends too)
  std::size_t offer_acks = 0;      // keys gateways acked
  std::size_t offer_receipts = 0;  // receipts offerers got (acked or timeout)
  std::size_t subscribers = 0;
  std::size_t faults = 0;
  std::size_t abandoned_gateways = 0;
  std::size_t users_probed = 0;    // users of live gateways
  std::size_t users_routable = 0;  // of them reached by a probe
  bool ok() const noexcept { return violations.empty(); }
};

struct check_options {
  // Allowance for a keepalive written just before the gateway stopped and
  // answered after, and for the send to reach the broker. (The workload
  // injects no fault from an abandon until the lease lapsed, so a stopped
  // node cannot hold such a keepalive back.)
  std::chrono::milliseconds expiry_slack{1000};
};

check_report check(const std::vector<event>& history, const check_options& options = {});

}  // namespace switchyard::chaos
