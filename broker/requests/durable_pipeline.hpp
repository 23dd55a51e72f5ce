#pragma once
// The durable pipeline: append -> group commit -> acknowledgement (and, for
// a durable publish or send, delivery once the record is durable).
//
//   loop thread        append(): the request waits in a slot (reused, so
//                      the steady state allocates nothing) and is queued
//                      with the group committer under the slot's index;
//                      once per loop turn a commit step runs (posted): in
//                      the sync mode it wakes the committer's writer
//                      thread, in batch/none it commits up to 128 records
//                      on the loop and posts itself again while more wait.
//   writer thread      commits and fsyncs a batch, then puts its results in
//                      the mailbox (mailbox_mu_) and posts one drain to the
//                      loop when the mailbox was empty.
//   loop thread        drain(): per result, delivers (fanout) and answers
//                      the peer, if it is still there, then frees the slot.
//
// Thread contract: every member function runs on the loop thread, except
// the batch handler installed in the constructor, which runs on the
// committer's writer thread and touches only the mailbox. The loop thread
// never waits for a disk flush: in the sync mode the writer thread commits
// and syncs; in batch/none the loop's commit writes to the page cache only
// (the periodic sync runs on the committer's sync thread).

#include "broker/delivery/fanout.hpp"
#include "broker/tables/latency_histogram.hpp"
#include "broker/requests/peer.hpp"
#include "broker/tables/refusal_summary.hpp"
#include "broker/tables/server_counters.hpp"
#include "common/asio.hpp"
#include "common/mutex.hpp"
#include "protocol/frame_builder.hpp"
#include "storage/group_committer.hpp"
#include "storage/sequence_log.hpp"

#include <chrono>
#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace spdlog {
class logger;
}

namespace switchyard::broker {

class durable_pipeline {
 public:
  // Takes the open log and starts its group committer (writer thread).
  // Borrows the rest for its lifetime; `loop` is where results are posted.
  durable_pipeline(std::unique_ptr<storage::sequence_log> log, const storage::group_commit_options& options,
                   asio::any_io_executor loop, fanout& fan, protocol::frame_builder& builder,
                   std::shared_ptr<spdlog::logger> logger);
  // Stops the committer (joins its threads): what it completes meanwhile
  // is posted to the loop, so call it while the loop's io_context still
  // exists (results not yet drained are dropped with their posted
  // handlers). Idempotent; after it, only stats() and waiting() may be
  // called.
  void stop();
  ~durable_pipeline();
  durable_pipeline(const durable_pipeline&) = delete;
  durable_pipeline& operator=(const durable_pipeline&) = delete;

  storage::sequence_log& log() noexcept { return *log_; }
  storage::group_committer& committer() noexcept { return *committer_; }

  // Whether an append of this size may be queued: empty, or an error to
  // answer (bad_request) naming the limits.
  std::error_code check(std::string_view stream, std::size_t payload_size, std::size_t destination_size) const;
  // The message of a check() refusal, for the client.
  static std::string_view check_message() noexcept;

  // Queues an append (precondition: check() passed) with its encoded
  // destination (broker/tables/record_destination.hpp; empty for a plain append), and
  // takes one of `from`'s tickets until it is answered. Once durable:
  //   - a publish (`channel` set) is delivered to the channel's
  //     subscribers, and `from` answered Appended (with "log") or Ok (with
  //     "publish-ack", a channel made durable by the server);
  //   - a send (`route_keys` set) is routed and delivered, and `from`
  //     answered with a SendResult carrying the position;
  //   - a plain append is answered Appended.
  // A failed append is answered with its error (wire_code). A request id of
  // 0 gets no answer. Everything it borrows is copied. `expires_in` > 0 (a
  // publish or send with an expiry, capability "offers"; the destination
  // carries it too): the live delivery is never written `expires_in` after
  // this call, even if the record became durable only then.
  void append(peer& from, std::uint64_t request_id, std::string_view stream, std::span<const std::byte> payload,
              std::span<const std::byte> destination, std::string_view channel = {},
              std::span<const std::string_view> route_keys = {}, std::chrono::milliseconds expires_in = {});

  // Cluster mode: asked as each append becomes durable; a reason (not
  // empty) means this node may not acknowledge it now (it is out of
  // standing: the cluster may have declared its streams lost meanwhile):
  // the append is then answered outcome_unknown and not delivered (it is in
  // the log). Loop thread; null (the default): always acknowledged.
  void set_ack_gate(std::function<std::string()> gate) { ack_gate_ = std::move(gate); }

  // Cluster mode: a durable send, once durable, is handed to `router`
  // (route_relay::send_durable) instead of being delivered here: it
  // delivers wherever the keys' gateways are, answers the sender (null:
  // gone) with the SendResult and closes `ticket`, the one the append held
  // on it (so a Ping after the send still waits for that answer). Called
  // on the loop thread with the record's position and expiry ({} = none);
  // everything else borrowed for the call. Null (the default): delivered
  // by this node's fanout.
  using send_router = std::function<void(peer* from, std::uint64_t request_id, std::uint64_t ticket,
                                         std::span<const std::string_view> keys, protocol::bytes_view payload,
                                         const log_position& position, std::chrono::steady_clock::time_point deadline)>;
  void set_send_router(send_router router) { send_router_ = std::move(router); }

  // Scratch for the encoded destination of the append being queued
  // (reused: a durable publish or send allocates nothing for it).
  std::vector<std::byte>& destination_scratch() noexcept { return destination_scratch_; }

  // Logs the refused-append counts whose second has passed, and (at most
  // once a second) how many records retention trimmed since the last such
  // line. The lease sweeper calls it every sweep period.
  void report_refusals_due();

  storage::group_commit_stats stats() const { return committer_ ? committer_->stats() : final_stats_; }
  // From an append being queued to its result being handled on the loop
  // (durable and delivered, or refused): one observation per append.
  const latency_histogram& append_latency() const noexcept { return append_latency_; }
  // Appends waiting for the log now.
  std::size_t waiting() const noexcept { return slots_.size() - free_slots_.size(); }

 private:
  // A queued append: whom to answer and what to deliver once durable.
  struct slot {
    std::weak_ptr<peer> from;
    std::uint64_t request_id = 0;
    std::uint64_t ticket = 0;
    std::string stream;
    std::string channel;                              // a publish: deliver here once durable
    std::vector<std::string> route_keys;              // a send: deliver to these users
    std::vector<std::byte> payload;                   // ... this payload
    std::chrono::steady_clock::time_point queued_at;  // for append_latency
    std::chrono::steady_clock::time_point deadline;   // {} = no expiry
  };
  void commit_step();
  // Loop thread: delivers and answers what the mailbox holds (takes
  // mailbox_mu_ for the swap only).
  void drain() SWITCHYARD_EXCLUDES(mailbox_mu_);
  void finish(slot& s, const std::expected<storage::append_ack, std::error_code>& result);
  void release(std::uint32_t index);

  std::unique_ptr<storage::sequence_log> log_;
  std::unique_ptr<storage::group_committer> committer_;  // null once stopped
  storage::group_commit_stats final_stats_;              // its stats when it stopped
  asio::any_io_executor loop_;
  fanout& fanout_;
  protocol::frame_builder& builder_;
  std::shared_ptr<spdlog::logger> logger_;
  refusal_summary refusals_;
  std::vector<slot> slots_;
  std::vector<std::uint32_t> free_slots_;
  latency_histogram append_latency_;
  std::uint64_t trims_logged_ = 0;  // group_commit_stats::trimmed when last logged
  std::chrono::steady_clock::time_point trims_logged_at_{};
  bool commit_posted_ = false;  // a commit step is posted for this loop turn
  std::vector<std::byte> destination_scratch_;
  // The committer's results travel to the loop through this mailbox: one
  // post per batch.
  switchyard::mutex mailbox_mu_;
  std::vector<storage::group_committer::token_result> mailbox_ SWITCHYARD_GUARDED_BY(mailbox_mu_);
  std::vector<storage::group_committer::token_result> draining_;  // loop thread
  std::function<std::string()> ack_gate_;
  send_router send_router_;
};

}  // namespace switchyard::broker
