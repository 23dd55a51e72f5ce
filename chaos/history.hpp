#pragma once
// The history of a chaos run: what the workload asked of the cluster, what
// it was told, what its gateways received, and which faults the harness
// injected when. One event per line of JSON (docs/chaos.md lists the
// fields). The checker (checker.hpp) reads nothing else: a history written
// by hand, or by another tool, is checked the same way.

#include "common/mutex.hpp"

#include <chrono>
#include <cstdint>
#include <expected>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace switchyard::chaos {

enum class event_type {
  append,     // an append answered: outcome "ok" with stream, epoch, seq, payload; else the error's name
  read,       // a stream read to its end after the run: stream, epoch, records (seq, payload)
  route,      // a gateway registered user's route (gateway, user)
  send,       // a send answered: id, user, node, outcome ("ok": gateway it went to; else the error's name)
  deliver,    // a gateway received id for user
  abandon,    // a gateway stopped its keepalives (gateway, ttl_ms, sweep_ms): its routes must lapse
  fault,      // the harness injected fault on target
  heal,       // the harness ended fault on target
  probe,      // after the run: a user of a live gateway routable again (outcome "ok") or not
  subscribe,  // a subscriber's subscription is in place (proc, channel: its pattern)
  publish,  // a publish handed to the client (proc, channel, payload: the id, outcome); proc "prober-<node>" after the
            // run
  receive,  // a subscriber received id on channel
  offer_ack,      // a gateway acked offer id (payload) for user, before telling the broker
  offer_receipt,  // an offerer got offer id's receipt for user: outcome "acked" or "timeout", gateway its inbox
};

// One event. `t_us` is the workload's monotonic clock (microseconds from
// the run's start); for append and send it is when the call was made, so
// that an answer is known to come after it.
struct event {
  std::int64_t t_us = 0;
  event_type type = event_type::append;
  std::string proc;     // the workload client that acted (e.g. "appender-1", "sender-0", "gw-3")
  std::string stream;   // append, read
  std::string channel;  // subscribe (the pattern), publish, receive
  std::string payload;  // append: the payload; send, deliver, probe, publish, receive: the message id
  std::string user;     // route, send, deliver, probe
  std::string gateway;  // route, deliver, abandon; send/probe "ok": where the node said it went
  std::string outcome;  // append, send, read, probe: "ok" or an error's name
  std::uint64_t seq = 0;
  std::uint64_t epoch = 0;
  std::int64_t ttl_ms = 0;    // abandon: the lease's TTL
  std::int64_t sweep_ms = 0;  // abandon: the broker's sweep period
  std::string fault;          // fault, heal: kill-node, kill-etcd, kill-nats, stop-node, cut-node
  std::string target;         // fault, heal: the node, etcd member or NATS server
  std::vector<std::pair<std::uint64_t, std::string>> records;  // read: (seq, payload), in order
};

std::string_view type_name(event_type t) noexcept;

// One line of JSON for `e` (no newline).
std::string to_json(const event& e);
// Parses one line; errors name what is wrong (std::errc::invalid_argument
// with no more detail is never returned: the string says).
std::expected<event, std::string> from_json(std::string_view line);

// Reads a history file; the error names the line that did not parse.
std::expected<std::vector<event>, std::string> read_history(const std::filesystem::path& file);

// Collects events from the workload's threads, stamping each with the run's
// clock, and writes them to a file (when given) as they come. Thread-safe.
class history_recorder {
 public:
  // `file` empty: kept in memory only. Throws std::runtime_error when the
  // file cannot be created (start-up).
  explicit history_recorder(const std::filesystem::path& file = {});

  // Microseconds since this recorder was made (steady clock).
  std::int64_t now_us() const noexcept;
  // Records `e`; stamps it with now_us() unless e.t_us is already set.
  void record(event e);
  // Everything recorded so far, in the order recorded.
  std::vector<event> events() const;

 private:
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  mutable switchyard::mutex mutex_;
  std::vector<event> events_ SWITCHYARD_GUARDED_BY(mutex_);
  mutable std::ofstream out_ SWITCHYARD_GUARDED_BY(mutex_);  // mutable: events() flushes it
};

}  // namespace switchyard::chaos
