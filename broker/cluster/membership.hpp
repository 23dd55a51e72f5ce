#pragma once
// membership: this node's place in the cluster, kept in etcd
// (docs/cluster.md, "Membership").
//
// One etcd lease per node (--cluster-lease-ttl-s) and one member key,
// "/switchyard/<cluster>/members/<node-id>", attached to it; its value says
// where clients reach the node. The lease id is the node's incarnation: a
// restarted node is a new incarnation, and its peers start their links to
// it afresh. Every change of the member keys becomes a new cluster_view,
// posted to the loop.
//
// Threads: join() on the thread that will run the loop, before it runs
// (it blocks); leave() on the loop thread, or after the loop stopped. The
// keeper thread watches the member keys and renews the lease; the probe
// thread asks every etcd endpoint for its status every probe_interval (for
// `cluster status`); the pin thread writes the stream keys asked for
// (pin_streams). Handlers run on the loop.
//
// The lease is renewed (every TTL/3) only while the loop shows it is
// alive: a timer on the loop beats every TTL/10 (loop_watch) and the
// keeper renews only while the last beat is at most TTL/2 old. A stuck
// loop so loses its membership rather than holding it. The node is "in
// standing" while its last renewal's answer, counted from when the renewal
// was sent, leaves more than TTL/5 of the lease: a node cut off from etcd
// leaves standing before its lease can have lapsed at etcd (the standing
// handler tells the loop; /readyz then fails). A lease etcd no longer knows
// (it lapsed) makes the node register again: a new incarnation.

#include "broker/cluster/cluster_view.hpp"
#include "broker/cluster/loop_watch.hpp"
#include "broker/cluster/partition_keeper.hpp"
#include "cluster/etcd_client.hpp"
#include "common/asio.hpp"
#include "common/mutex.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace spdlog {
class logger;
}

namespace switchyard::broker {

struct membership_options {
  std::string cluster_name;  // the etcd key prefix's and NATS subjects' name
  std::string node_id;
  std::string advertise;  // host:port clients use to reach this node
  std::vector<std::string> etcd_endpoints;
  std::chrono::seconds lease_ttl{5};
  std::chrono::milliseconds probe_interval{2000};
  // The id of this node's sequence log (empty without one): recorded with
  // each stream key this node takes (partition_keeper).
  std::string log_id;
};

class membership {
 public:
  using view_handler = std::function<void(std::shared_ptr<const cluster_view>)>;
  using standing_handler = std::function<void(bool in_standing)>;

  // No I/O; handlers are posted to `loop`.
  membership(asio::any_io_executor loop, membership_options options, std::shared_ptr<spdlog::logger> logger);
  ~membership();  // leave()
  membership(const membership&) = delete;
  membership& operator=(const membership&) = delete;

  // Start-up (blocking; before the loop runs): grants the lease, creates
  // the member key and reads the members; returns that first view (this
  // node included) and starts the threads, which post later views and
  // standing changes to the handlers. A member key of the same node id
  // held by another lease (a previous run killed less than a TTL ago)
  // is waited for up to TTL + 2 s; a holder still there after that is
  // another live node with this id. etcd not answering (not started yet,
  // or without a leader yet) is waited for up to start_wait. Throws
  // std::runtime_error: etcd not reachable after that, the node id taken.
  std::shared_ptr<const cluster_view> join(view_handler on_view, standing_handler on_standing);
  // After join(), before the loop runs (the pin thread is idle then):
  // records this node (and its log) as the holder of each of
  // `partitions`' streams, which nobody held in join()'s view; returns
  // those another node got first. Throws std::runtime_error when etcd
  // cannot be asked. The keeper's watch then posts the new holders.
  std::vector<std::uint32_t> pin_at_start(std::span<const std::uint32_t> partitions);
  // How long join() waits for an etcd that does not answer.
  static constexpr std::chrono::seconds start_wait{30};

  // Loop thread: stops the threads and revokes the lease, so the member
  // key goes at once (blocks up to about a second for the revoke; a node
  // that cannot reach etcd leaves by its lease lapsing). Idempotent; no
  // handler runs after it returns.
  void leave();

  // Any thread.
  std::int64_t incarnation() const noexcept { return incarnation_.load(std::memory_order_acquire); }
  // The lease's last renewal (counted from when it was sent) leaves more
  // than TTL/5 of it: read from the clock at each call, so it turns false
  // in time even while the keeper waits for etcd.
  bool in_standing() const noexcept;
  std::vector<etcd_endpoint_health> etcd_health() const;
  const membership_options& options() const noexcept { return options_; }
  // "/switchyard/<cluster>/" and "/switchyard/<cluster>/members/"
  std::string cluster_prefix() const;
  std::string members_prefix() const;
  // Any thread (a drain): from now on the node gives back every partition
  // it holds and claims none (at the keeper's next renewal, within TTL/3).
  void release_partitions();
  // Any thread: this node is to hold the streams of `partition` (the pin
  // thread writes the stream key, create only if absent, at once while in
  // standing); the keeper's watch then posts a view naming the holder
  // (this node, or another that was faster).
  void pin_streams(std::uint32_t partition);
  // `cluster takeover`: moves the holder of each partition's streams in
  // `moves` (partition, new holder) away from node `from`, each only if
  // its key still holds `expected[i]` (a transaction per partition), on
  // the pin thread. The new holder is written without a log: it records
  // its own when it first serves the partition. `done` is posted to the loop with the moves made, or with why
  // etcd could not be asked (the moves before it were made). Any thread.
  using moves = std::vector<std::pair<std::uint32_t, std::string>>;
  using takeover_done = std::function<void(std::expected<moves, std::string>)>;
  void take_over(std::string from, moves wanted, std::vector<std::string> expected, takeover_done done);

 private:
  using clock = std::chrono::steady_clock;
  // Keeper thread: the watch, renewals, standing.
  void keeper_main(std::int64_t next_revision);
  // Keeper thread: renews the lease when due, re-registers when it lapsed,
  // updates the standing.
  void tick();
  // Loop thread: arms the beat timer; each expiry beats loop_watch_ and
  // arms it again, until leave() (from join(), which runs on the loop).
  void beat();
  // Grants a lease and creates the member key (join, re-registration).
  // Throws std::runtime_error (join) / returns false (re-registration).
  bool register_self(bool at_start);
  // Applies a batch of watch events to the members and the partition
  // owners, then balances.
  void apply(std::span<const cluster::watch_event> events, std::int64_t revision);
  // Reads every key of the cluster again (join, a watch that failed); the
  // revision read at, 0 when etcd could not be read.
  std::int64_t reload();
  // Gives back the partitions another member is preferred for (all of
  // them while draining), once the loop stopped acting for them; claims
  // those this node is preferred for that nobody holds. Posts the view
  // when anything changed or `post`.
  void balance(bool post);
  std::shared_ptr<const cluster_view> make_view() const;
  void post_view();
  // Pin thread: writes the stream keys pin_streams() asked for.
  void pin_main();
  // Writes partition's stream key as this node's (and its log's): when
  // absent, or when a takeover named this node without a log. True when
  // written; false when another holder is there.
  std::expected<bool, std::error_code> pin_key(cluster::etcd_client& etcd, std::uint32_t partition);
  void probe_main();
  // Waits up to `d` or until leave(); false once leaving.
  bool pause(std::chrono::milliseconds d);

  asio::any_io_executor loop_;
  const membership_options options_;
  std::shared_ptr<spdlog::logger> logger_;
  view_handler on_view_;
  standing_handler on_standing_;
  // Calls from the keeper thread only (after join).
  std::unique_ptr<cluster::etcd_client> client_;
  std::unique_ptr<cluster::etcd_client> prober_;
  std::unique_ptr<cluster::etcd_client> pinner_;
  // Keeper thread (join before the thread starts).
  std::vector<cluster_member> members_;
  std::unique_ptr<partition_keeper> partitions_;
  std::vector<std::uint32_t> giving_back_;  // left out of the views posted meanwhile
  std::uint64_t probes_posted_ = 0;
  std::int64_t revision_ = 0;
  std::int64_t lease_ = 0;
  clock::time_point next_renewal_{};
  bool standing_posted_ = true;  // the standing the loop was last told (join: in standing)
  void set_valid_until(clock::time_point t);
  bool loop_warned_ = false;
  // The loop beats (beat(), its timer), the keeper reads (tick()).
  loop_watch loop_watch_;
  asio::steady_timer beat_timer_;  // loop thread
  // Cleared by leave() on the loop: posted handlers check it first.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  // Counts the loop's runs of the keeper's release probes (balance).
  std::shared_ptr<std::atomic<std::uint64_t>> loop_probe_ = std::make_shared<std::atomic<std::uint64_t>>(0);
  std::atomic<bool> draining_{false};
  std::atomic<std::int64_t> incarnation_{0};
  std::atomic<std::int64_t> valid_until_ns_{0};  // steady ns: the lease's end as last renewed

  mutable switchyard::mutex mu_;
  std::condition_variable cv_;
  bool leaving_ SWITCHYARD_GUARDED_BY(mu_) = false;
  std::vector<etcd_endpoint_health> health_ SWITCHYARD_GUARDED_BY(mu_);
  std::vector<std::uint32_t> pins_wanted_ SWITCHYARD_GUARDED_BY(mu_);
  struct takeover_job {
    std::string from;
    moves wanted;
    std::vector<std::string> expected;
    takeover_done done;
  };
  std::vector<takeover_job> takeovers_ SWITCHYARD_GUARDED_BY(mu_);
  // Pin thread: one takeover.
  void run_takeover(takeover_job& job);

  std::thread keeper_;
  std::thread prober_thread_;
  std::thread pinner_thread_;
  bool left_ = false;  // loop thread
};

}  // namespace switchyard::broker
