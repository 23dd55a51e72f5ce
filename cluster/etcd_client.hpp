#pragma once
// A blocking client of etcd 3.4's v3 JSON gateway (HTTP/1.1 POSTs to
// http://host:port/v3/...): leases, keys, transactions, watches and the
// status of the members. Cluster mode's membership and partition ownership
// are built on it.
//
// Threads: the client is thread-compatible, not thread-safe. One thread (the
// broker's cluster thread) makes every call; a call blocks that thread until
// it is answered, fails, or its timeout passes. The one exception is stop(),
// which any thread may call at any time to unblock a call in progress (a
// watch, typically) and to finish the client.
//
// Endpoints: a call goes to the current endpoint over a kept-alive TCP
// connection. When that endpoint cannot be reached, does not answer in time,
// or says it cannot serve (gRPC Unavailable, e.g. "no leader"), the call
// moves on to the next endpoint (which stays the current one afterwards),
// trying each endpoint at most once. The call's timeout bounds the whole
// call: each attempt gets an equal share of what is left, so an endpoint
// that swallows packets cannot use up the time of the others. A call retried
// on another endpoint after a timeout may have been applied by the first:
// a put is then applied twice (harmless), a transaction's compare decides
// (create_if_absent then reports the caller's own key as the holder).
//
// Errors: every fallible call returns std::expected with a cluster::errc:
//   unreachable      no endpoint answered (refused, reset, closed, Unavailable)
//   timeout          the call's timeout passed (an endpoint took too long)
//   bad_response     an answer not shaped as the API documents, or one larger
//                    than max_response_bytes
//   lease_not_found  the lease expired, was revoked, or never existed
//   compacted        a revision asked for was compacted away
//   invalid_argument an empty key, or etcd refused the request's arguments
//   closed           stop() was called
// A transaction whose compare fails is not an error: txn_result::succeeded
// is false.

#include <chrono>
#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace switchyard::cluster {

// The largest answer body a call accepts, and the largest single message of
// a watch stream: 64 MiB. Bigger answers fail with errc::bad_response, so a
// misbehaving endpoint cannot make the client allocate without bound.
inline constexpr std::size_t max_response_bytes = std::size_t{64} << 20;

// A key as etcd stores it. key and value are bytes (any content).
struct kv {
  std::string key;
  std::string value;
  std::int64_t create_revision = 0;  // the revision that created the key
  std::int64_t mod_revision = 0;     // the revision of its last change
  std::int64_t version = 0;          // changes since creation (1 after the first put)
  std::int64_t lease = 0;            // the lease it is attached to; 0: none
};

// What a range read saw, and at which revision of the store.
struct range_result {
  std::vector<kv> kvs;        // in key order
  std::int64_t revision = 0;  // the store's revision when read (the header's)
};

// One condition of a transaction, on the current state of `key`.
struct txn_compare {
  enum class target { version, create_revision, mod_revision, value };
  enum class op { equal, not_equal, greater, less };
  std::string key;
  target what = target::mod_revision;
  op result = op::equal;
  std::int64_t number = 0;  // compared with version, create_revision or mod_revision
  std::string value;        // compared with the value (target::value)

  // create_revision == 0: the key does not exist.
  static txn_compare absent(std::string key);
  static txn_compare mod_revision_is(std::string key, std::int64_t revision);
  static txn_compare value_is(std::string key, std::string value);
};

// One operation of a transaction's success or failure branch.
struct txn_op {
  enum class kind { put, remove, range };
  kind type = kind::range;
  std::string key;
  std::string value;       // put only
  std::int64_t lease = 0;  // put only; 0: no lease
  bool prefix = false;     // remove and range: every key starting with `key`

  static txn_op put(std::string key, std::string value, std::int64_t lease = 0);
  static txn_op remove(std::string key);
  static txn_op remove_prefix(std::string prefix);
  static txn_op range(std::string key);
  static txn_op range_prefix(std::string prefix);
};

struct txn_result {
  bool succeeded = false;     // every compare held; the success branch ran
  std::int64_t revision = 0;  // the store's revision after the transaction
  // The keys each range op of the branch that ran found, in op order.
  std::vector<std::vector<kv>> ranges;
};

// The outcome of create_if_absent and put_if_mod_revision.
struct cas_result {
  bool succeeded = false;
  std::int64_t revision = 0;  // succeeded: the key's new mod_revision; else the store's revision
  std::optional<kv> current;  // not succeeded: the key as it is now (nullopt: absent)
};

// /v3/maintenance/status of one member.
struct endpoint_status {
  std::string endpoint;         // which configured endpoint answered
  std::uint64_t member_id = 0;  // the member that answered
  std::uint64_t leader = 0;     // the leader it knows; 0: none
  std::uint64_t raft_term = 0;
  std::int64_t db_size = 0;   // bytes of its database file
  std::int64_t revision = 0;  // the store's revision
  std::string version;        // etcd's version, e.g. "3.4.23"

  bool is_leader() const noexcept { return member_id != 0 && member_id == leader; }
};

// One configured endpoint as cluster_health() found it.
struct member_health {
  std::string endpoint;
  std::expected<endpoint_status, std::error_code> status;  // an error: not reachable (or not answering)
};

enum class event_type { put, remove };

struct watch_event {
  event_type type = event_type::put;
  cluster::kv kv;  // remove: key and mod_revision (the deletion's revision) only
};

// Called by watch_prefix on the watching thread with each batch of events
// (all of one revision or more, in revision order) and the revision the
// batch brings the watcher to (its last event's). With watch_options::tick,
// also called every tick with no events and the last revision seen.
// The span is valid during the call only. Returns false to end the watch.
// It may call the client's other methods (the watch has its own connection),
// but not watch_prefix.
using watch_callback = std::function<bool(std::span<const watch_event> events, std::int64_t revision)>;

struct watch_options {
  // > 0: the callback is also called every `tick` (whether events came or
  // not), so the watching thread can do periodic work (keep a lease alive).
  std::chrono::milliseconds tick{0};
};

class etcd_client {
 public:
  // `endpoints`: "host:port" or "http://host:port" (no TLS), at least one;
  // the first is the current one. `call_timeout` bounds each call (but not
  // a watch's waiting for events). Throws std::system_error with
  // errc::invalid_argument on an empty list or a malformed endpoint.
  // Connects lazily: the constructor does no I/O.
  etcd_client(std::vector<std::string> endpoints, std::chrono::milliseconds call_timeout);
  ~etcd_client();
  etcd_client(const etcd_client&) = delete;
  etcd_client& operator=(const etcd_client&) = delete;

  // A new lease of `ttl` (at least 1 s); its id.
  std::expected<std::int64_t, std::error_code> grant_lease(std::chrono::seconds ttl);
  // Renews `lease` once; its TTL in seconds from now. errc::lease_not_found
  // once it expired or was revoked.
  std::expected<std::int64_t, std::error_code> keep_alive(std::int64_t lease);
  // Revokes `lease`, deleting the keys attached to it. errc::lease_not_found
  // if it is already gone.
  std::expected<void, std::error_code> revoke_lease(std::int64_t lease);

  // Sets `key` to `value`, attached to `lease` (0: none); the new revision.
  // errc::lease_not_found when the lease is gone.
  std::expected<std::int64_t, std::error_code> put(std::string_view key, std::string_view value,
                                                   std::int64_t lease = 0);
  // `key`, or nullopt when absent.
  std::expected<std::optional<kv>, std::error_code> get(std::string_view key);
  // Every key starting with `prefix` ("" is every key), with the revision
  // they were read at (a watch from revision + 1 misses nothing).
  std::expected<range_result, std::error_code> range_prefix(std::string_view prefix);
  // Deletes `key`; how many keys were deleted (0 or 1).
  std::expected<std::int64_t, std::error_code> delete_key(std::string_view key);
  // Deletes every key starting with `prefix` (not empty); how many.
  std::expected<std::int64_t, std::error_code> delete_prefix(std::string_view prefix);

  // If every compare holds, runs `success`, else `failure`, atomically.
  std::expected<txn_result, std::error_code> txn(std::span<const txn_compare> compares, std::span<const txn_op> success,
                                                 std::span<const txn_op> failure);
  // Creates `key` only if absent; when not, `current` is the holder.
  std::expected<cas_result, std::error_code> create_if_absent(std::string_view key, std::string_view value,
                                                              std::int64_t lease = 0);
  // Fencing: sets `key` only if its mod_revision is still `expected_mod_revision`
  // (the caller's last write); when not, `current` is what replaced it.
  std::expected<cas_result, std::error_code> put_if_mod_revision(std::string_view key, std::string_view value,
                                                                 std::int64_t lease,
                                                                 std::int64_t expected_mod_revision);

  // The status of the member at the current endpoint (rotating like any call).
  std::expected<endpoint_status, std::error_code> status();
  // Every configured endpoint's status, each asked on a connection of its
  // own with `timeout` (in turn, so this takes at most endpoints × timeout).
  // Does not change the current endpoint. For `cluster status`.
  std::vector<member_health> cluster_health(std::chrono::milliseconds timeout);

  // Watches every key starting with `prefix` from `start_revision` (0: from
  // now) on a connection of its own, calling `callback` on this thread with
  // each batch of events. Blocks until the callback returns false or stop()
  // is called (both: success, resp. errc::closed after stop()), or an error:
  //   compacted    start_revision was compacted; last_compact_revision()
  //                tells the oldest revision still available. Resume by
  //                reading the keys (range_prefix) and watching from its
  //                revision + 1.
  //   unreachable, timeout  no endpoint took the watch, etcd did not say it
  //                created the watch within the call timeout after answering
  //                (up to twice the call timeout in all), or its connection
  //                dropped; resume with the last revision the callback saw + 1.
  //                A watch that failed before etcd created it sends the next
  //                one to the next endpoint first.
  // The watch asks etcd (gRPC metadata "hasleader") to cancel it when its
  // member loses the leader: a member cut off from the others ends it
  // (an error) instead of keeping it open and silent.
  // A watch waits for events without a timeout; a dead member is noticed by
  // its closed connection (TCP keep-alive probes after 10 s of silence).
  std::expected<void, std::error_code> watch_prefix(std::string_view prefix, std::int64_t start_revision,
                                                    const watch_callback& callback, watch_options options = {});
  // The compact revision etcd named when watch_prefix last failed with
  // errc::compacted; 0 before.
  std::int64_t last_compact_revision() const noexcept;

  // Any thread: ends the call in progress with errc::closed, and every later
  // one. The client cannot be restarted. Safe to call more than once.
  void stop() noexcept;

  // The endpoint calls go to now, as configured.
  const std::string& current_endpoint() const noexcept;

 private:
  struct state;
  std::unique_ptr<state> s_;
};

}  // namespace switchyard::cluster
