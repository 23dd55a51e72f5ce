#pragma once
// route_relay: routes and send-to-user across the nodes of a cluster
// (docs/cluster.md, "Routes and send-to-user").
//
//   home   The node a gateway is connected to keeps everything bound to
//          its lease as on one node (lease, inbox, registry entries in
//          routing_table). Each put is written to the directory of the
//          key's partition owner before the put is answered (RouteUpdate,
//          answered by RouteAck); each entry that goes (delete, lease
//          expiry or revoke) is removed there, in batches.
//   owner  Keeps a route_directory of its partitions: key -> the home
//          node's incarnation. A partition it gains starts empty and is
//          rebuilt from every member (RouteRebuild, answered by
//          RouteUpdate parts); until every member answered, sends and
//          puts that need it are answered `unavailable`. Each put it
//          confirms gets a route_stamp (the revision it holds the
//          partition at, its count of confirmations), kept by the home
//          and told in its answers: of two homes that hold one key (a
//          gateway moved while the old lease lives), the later confirmed
//          put wins a rebuild, whatever order the answers come in.
//   send   At the node S the client sent to: the keys are grouped by
//          owner; S -> owner (SendForward) -> home (SendForward, to_home),
//          where fanout::send_to_users delivers as on one node; the home
//          (and the owner, for what it delivered or could not look up)
//          answers S (SendOutcome). S answers the client once every part
//          is in, holding a peer ticket meanwhile (a Ping after it waits).
//          No answer within the forward timeout: outcome_unknown.
//   durable A durable send takes the same path from the stream's holder
//          once its record is durable there (S is then the holder), each
//          forward carrying the record's place and any expiry as time
//          left; it is answered with the place and the keys routed, never
//          outcome_unknown (its record is in the log).
//
// Out of standing in etcd, this node acts as an owner for nothing.
// Batching: puts and removals to one owner go out once per loop turn, in
// one RouteUpdate; a send is one SendForward per owner and per home, and
// the SendForwards and SendOutcomes for one node go out once per loop turn
// (or at the link's batch bytes) in one Sends message.
//
// Memory a client or peer can make this node hold: one pending entry per
// forwarded send and per unconfirmed put (each until answered or the
// forward timeout), each holding its keys or its answer; the directory
// (route_directory.hpp); one outbox per peer (the link's batch bytes plus
// one send); per local route, its key, principal and stamp (about 110
// bytes beside the routing_table's entry).
//
// Loop thread only.

#include "broker/cluster/cluster_view.hpp"
#include "broker/cluster/link_outboxes.hpp"
#include "broker/cluster/node_bus.hpp"
#include "broker/cluster/route_directory.hpp"
#include "broker/delivery/fanout.hpp"
#include "broker/requests/peer.hpp"
#include "broker/tables/exposure_table.hpp"
#include "broker/tables/routing_table.hpp"
#include "broker/tables/string_hash.hpp"
#include "common/asio.hpp"
#include "protocol/frame_builder.hpp"

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace spdlog {
class logger;
}
namespace switchyard::broker::link {
struct RouteUpdate;
struct RouteAck;
struct RouteRebuild;
struct SendForward;
struct SendOutcome;
struct Sends;
}  // namespace switchyard::broker::link

namespace switchyard::broker {

struct route_relay_options {
  std::chrono::milliseconds forward_timeout{2000};
  std::size_t part_bytes = 32u << 10;  // keys per RouteUpdate part (a rebuild's answer)
};

// For /metrics and cluster status.
struct route_relay_counters {
  std::uint64_t sends_forwarded = 0;   // SendForwards this node sent
  std::uint64_t sends_unknown = 0;     // answered outcome_unknown
  std::uint64_t unavailable = 0;       // requests answered unavailable
  std::uint64_t puts_confirmed = 0;    // puts an owner confirmed (remote)
  std::uint64_t rebuilds = 0;          // partitions this node rebuilt after gaining them
  std::size_t directory_entries = 0;   // in this node's route_directory
  std::size_t partitions_held = 0;     // owned by this node, in the view last applied
  std::size_t partitions_unowned = 0;  // without an owner (a member) in that view
  std::size_t partitions_rebuilding = 0;
  std::size_t pending = 0;  // sends and puts waiting for another node
};

class route_relay {
 public:
  // Sends waiting for other nodes at once; past it a send that needs
  // another node is answered unavailable.
  static constexpr std::size_t max_pending_sends = 65'536;

  // Borrows everything for its lifetime. `in_standing` says whether this
  // node may act as an owner now (membership::in_standing).
  route_relay(asio::io_context& io, route_relay_options options, node_bus& bus, routing_table& routing, fanout& fan,
              std::function<bool()> in_standing, std::shared_ptr<spdlog::logger> logger);
  ~route_relay();
  route_relay(const route_relay&) = delete;
  route_relay& operator=(const route_relay&) = delete;

  // The node_bus applied a new view: partitions gained are rebuilt, lost
  // ones forgotten, the entries of homes gone dropped; after a
  // re-registration (a new own incarnation), every local entry is written
  // to its owner again.
  void view_changed();

  // Before a RegistryPut of `key`: answers it `unavailable` and returns
  // true when it cannot be confirmed now (its partition has no owner, or
  // is being rebuilt here, or this node owns it out of standing).
  bool refuse_put(peer& from, std::uint64_t request_id, std::string_view key);
  // After the local put of `key`: answers `answer` (the RegistryEntry,
  // copied) on `from` once the key's owner has it in its directory: at
  // once when that is this node; else when its RouteAck comes, or
  // `unavailable` after the forward timeout or a refusal.
  // `principal`: who put it ("" without an auth file, or an admin): the
  // owner refuses a put of a key another principal holds on another node
  // (answered forbidden, and the local put undone).
  void confirm_put(peer& from, std::uint64_t request_id, std::string_view key, std::string_view principal,
                   protocol::bytes_view answer);
  // A Send without stream or offer fields, to `keys` (borrowed for the
  // call): delivered wherever the keys' gateways are, answered on `from`
  // as on one node (SendResult, or no_route for one key without a route)
  // once every node involved answered.
  void send(peer& from, std::uint64_t request_id, std::span<const std::string_view> keys, protocol::bytes_view payload);
  // A durable send whose record this node's log holds at `position`
  // (durable_pipeline, once the record is durable; everything borrowed for
  // the call), `ticket` the ticket its append holds on `from` (closed here
  // once answered: a Ping after the send still waits for its answer):
  // delivered as send() does, each delivery carrying the
  // position, never written at or after `deadline` when one is set (an
  // expiring send); answered on `from` (null: the sender has gone, only
  // delivered) with a SendResult carrying the position, even for one key
  // without a route, as on one node. Keys whose nodes do not answer within
  // half the forward timeout count as not routed: the record is durable
  // either way, and the answer reaches a node that forwarded the send here
  // within that node's own timeout.
  void send_durable(peer* from, std::uint64_t request_id, std::uint64_t ticket, std::span<const std::string_view> keys,
                    protocol::bytes_view payload, const log_position& position,
                    std::chrono::steady_clock::time_point deadline);

  // What became of an offer sent with send_offer: per key of the send,
  // the inbox it was delivered into ("" = not routed); how many keys were
  // routed; how many had an owner out of reach; whether a node asked did
  // not answer within the forward timeout (`silent` names them: those
  // keys may or may not have been delivered). Borrowed for the call.
  struct offer_outcome {
    std::span<const std::string> gateways;
    std::span<const std::uint8_t> capped;  // per key of the send: 1 = left out over its exposure cap
    std::uint32_t routed = 0;
    std::uint32_t unavailable = 0;
    std::uint32_t capped_keys = 0;
    bool timed_out = false;
    std::string_view silent;
  };
  // What an offer carries besides its payload (send_offer).
  struct offer_fields {
    std::uint64_t offer_id = 0;                        // 0 = an expiry alone
    std::chrono::steady_clock::time_point deadline{};  // {} = none
    bool counted = false;                              // counted for exposure (an id or a cap)
    std::uint32_t cap_max = 0;                         // 0 = no cap
    std::chrono::milliseconds cap_window{0};
  };
  using offer_done = std::function<void(const offer_outcome&)>;
  // An offer (a Send with an offer id or an expiry, no stream: the
  // offer_handler checked it) to `keys` (borrowed for the call):
  // delivered as send() does, each delivery carrying the offer id and
  // never written at or after the deadline. A counted offer is counted
  // for exposure by each key's owner (use_exposure), which leaves out a
  // key over the offer's cap (`capped` in the outcome). Instead of
  // answering, calls `done` once: at once when no other node is needed,
  // else when every node asked answered, or as timed out when the forward
  // timeout passed or this relay is destroyed first. `done` answers
  // `from`; a peer ticket on `from` is held until it returns (a Ping
  // waits).
  void send_offer(peer& from, std::span<const std::string_view> keys, protocol::bytes_view payload,
                  const offer_fields& offer, offer_done done);
  // The exposure counts of the keys this node owns (borrowed until the
  // next call; null: none kept, no cap checked here), the counter of keys
  // the table had no room for, and `first`, called when a count goes into
  // the empty table (its owner then sweeps it).
  void use_exposure(exposure_table* table, std::uint64_t* untracked, std::function<void()> first) {
    exposure_ = table;
    exposure_untracked_ = untracked;
    exposure_first_ = std::move(first);
  }

  route_relay_counters counters() const;

  // Sends now what waits for the end of the loop turn (route updates, the
  // outboxes: outcomes other nodes wait for): the node is about to leave
  // the cluster. Loop thread, or after the loop stopped.
  void flush_now() { flush(); }

 private:
  struct key_group;
  struct node_groups;
  struct pending_send;
  // A SendForward of this node's send `ticket` (to an owner, or to a home)
  // for `keys` keys.
  struct refused_forward {
    std::uint64_t ticket = 0;
    std::uint32_t keys = 0;
    bool to_home = false;
  };
  // Per peer: SendForwards (requests) and SendOutcomes (answers), one Sends
  // message per loop turn.
  using outboxes = link_outboxes<link::SendForward, link::SendOutcome, refused_forward>;
  using outbox = outboxes::outbox;
  struct put_batch;
  struct rebuild;
  // Home side, per local route key (for a rebuild's answer): who put it
  // ("" without an auth file, or an admin) and when its owner confirmed
  // it ({} until then).
  struct home_entry {
    std::string principal;
    route_stamp stamp;
    std::uint64_t serial = 0;  // this entry's, among the home's (a re-put after a removal is another)
  };
  // A rebuild's answer being sent (answer_rebuild, pump_answers).
  struct key_answer {
    std::string to;
    std::int64_t incarnation = 0;  // the asker's: a restarted asker's tickets start again
    std::uint64_t ticket = 0;
    std::vector<std::string> keys;  // the live keys found when asked (each sent only if still live)
    std::size_t next = 0;           // the first key not sent yet
    std::uint32_t part = 0;         // the next part's number
  };
  // Bytes of answer parts sent per loop turn at most (other work runs between).
  static constexpr std::size_t answer_turn_bytes = 1u << 20;
  using clock = std::chrono::steady_clock;
  // What a durable send or an offer adds to a send: the record's place,
  // the expiry, the offer id.
  struct delivery_part {
    log_position position;         // stream "" = not durable
    clock::time_point deadline{};  // {} = none
    std::uint64_t ticket = 0;      // the append's ticket on the sender (origin only, durable)
    std::uint64_t offer_id = 0;
    bool counted = false;  // an offer counted for exposure
    std::uint32_t cap_max = 0;
    std::chrono::milliseconds cap_window{0};
    bool durable() const noexcept { return !position.stream.empty(); }
  };
  // Owner side of a counted offer: `key` (whose partition this node
  // holds) is over the offer's cap.
  bool over_cap(std::string_view key, const delivery_part* part, clock::time_point now) const;
  // Owner side: a counted offer found a route for `key`.
  void count_exposure(std::string_view key, const delivery_part* part, clock::time_point now);

  // send(), send_durable() and send_offer(): `part` null for a plain send.
  void route(peer* from, std::uint64_t request_id, std::span<const std::string_view> keys, protocol::bytes_view payload,
             const delivery_part* part, offer_done* done = nullptr);
  // Delivers `keys` here (fanout) with the durable part, if any; the
  // gateways into `gateways`. Returns the keys routed.
  std::uint32_t deliver_here(std::span<const std::string_view> keys, protocol::bytes_view payload,
                             const delivery_part* part, std::vector<std::string_view>& gateways);

  // Owner side: a put of `key` by `principal` from `home` would take over
  // a route another principal holds on another live node.
  bool taken_elsewhere(std::string_view key, std::uint32_t partition, std::int64_t home,
                       std::string_view principal) const;
  // Answers a put taken_elsewhere() forbidden, undoing the local put.
  void refuse_taken(peer& from, std::uint64_t request_id, std::string_view key);
  // Why a request that needs `key`'s owner cannot be served now, or nullopt.
  std::optional<std::string> unavailable_for(std::string_view key) const;
  // What this node, as home, keeps of local route `key`; nullptr if none.
  const home_entry* home_route(std::string_view key) const;
  // The owner of `partition` in the view when it is a member with that
  // incarnation; nullptr when nobody holds it.
  const cluster_member* owner_of(std::uint32_t partition) const;
  // This node owns `partition`, in standing, and its directory is complete.
  bool ready(std::uint32_t partition) const;
  // Local route `key` is gone: its home entry goes, and its removal to the
  // partition's owner in the view and to the partition's last asker when
  // the view does not name it (remove_at).
  void removed(std::string_view key);
  // Queues the removal of this home's entry for `key` at `node` (this
  // node: its own directory, when it holds `partition`).
  void remove_at(const std::string& node, std::string_view key, std::uint32_t partition);
  void on_message(remote_node& from, const link::LinkMessage& m);
  void on_route_update(remote_node& from, const link::RouteUpdate& u);
  void on_route_ack(remote_node& from, const link::RouteAck& a);
  void on_rebuild(remote_node& from, const link::RouteRebuild& r);
  void on_sends(remote_node& from, const link::Sends& s);
  void on_forward(remote_node& from, const link::SendForward& f);
  void on_outcome(const link::SendOutcome& o);
  // Delivers `keys` here (this node is their home) and tells the origin.
  void deliver_home(std::string_view origin, std::uint64_t ticket, std::span<const std::string_view> keys,
                    std::span<const std::uint32_t> indices, protocol::bytes_view payload, const delivery_part* part);
  void apply_outcome(std::uint64_t ticket, std::uint32_t routed, std::span<const std::string_view> gateways,
                     std::span<const std::uint32_t> indices, std::uint32_t forwarded, std::uint32_t unavailable,
                     bool from_owner, std::span<const std::uint32_t> capped = {});
  // Answers send `ticket` once every node asked answered.
  void finish(std::uint64_t ticket);
  // Answers `s` with what it has (closing its peer ticket).
  void answer(pending_send& s);
  // Puts a SendForward to `node` in its outbox; false when it has no link.
  bool forward(std::string_view node, std::string_view origin, std::uint64_t ticket,
               std::span<const std::string_view> keys, std::span<const std::uint32_t> indices,
               protocol::bytes_view payload, bool to_home, const delivery_part* part);
  // Puts a SendOutcome to `to` in its outbox (dropped when it has no link:
  // the origin answers outcome_unknown at its deadline).
  void send_outcome(std::string_view to, std::uint64_t ticket, std::uint32_t routed,
                    std::span<const std::string_view> gateways, std::span<const std::uint32_t> indices,
                    std::uint32_t forwarded, std::uint32_t unavailable, bool from_owner,
                    std::span<const std::uint32_t> capped = {});
  // The answer to rebuild `rebuild_ticket`: the keys this node is home of
  // in `partitions` (one flag per partition), to `to`, in numbered parts.
  // Kept as a key_answer and sent by pump_answers; asked again (same `to`
  // and ticket), it starts over.
  void answer_rebuild(const cluster_member& to, const std::vector<bool>& partitions, std::uint64_t rebuild_ticket);
  // Sends parts of the answers in key_answers_, one of each in turn, while
  // the link is connected and holds less than a quarter of
  // --cluster-nats-queue-bytes (NATS would drop the rest: the asker would
  // find the answer broken and ask again, forever at the seed's scale) and
  // at most answer_turn_bytes per loop turn; continues in a later turn (a
  // timer while the link is full or reconnecting). An answer whose asker
  // left or restarted (another incarnation) is dropped.
  void pump_answers();
  // Sends `to` one RouteUpdate of `keys` (this node's routes; borrowed for
  // the call) with the principal and stamp of each: a part of the answer to
  // rebuild `rebuild`, or (rebuild 0) stamps that came after an answer.
  // False when NATS refused it.
  bool send_routes(const std::string& to, std::span<const std::string_view> keys, std::uint64_t rebuild, bool last,
                   std::uint32_t part);
  // Asks `from` (members; this node skipped) for their routes in
  // `partitions`; blocking: they were just gained (this node's own keys go
  // in at once, and they answer unavailable until every member answered).
  void start_rebuild(std::vector<std::uint32_t> partitions, const std::vector<std::string>& from, bool blocking);
  void ask_rebuild(const std::string& member, std::uint64_t ticket, const std::vector<std::uint32_t>& partitions);
  // A part of `member`'s answer to rebuild `ticket`.
  void rebuild_part(const std::string& member, std::uint64_t ticket, std::uint32_t part, bool last);
  // The forwards NATS refused or that were never sent (outboxes_.refused()): their keys count unavailable
  // in their sends, which are answered once complete. Not called while a
  // send is being forwarded (it would see the send half made).
  void settle_refused();
  void schedule_flush();
  void flush();
  // Sends `owner`'s batch now (it reached part_bytes, or the loop turn ends).
  void flush_owner(const std::string& owner, put_batch& batch);
  void arm_timer();
  void on_timer();
  const std::string& node_id_of(std::int64_t incarnation) const;

  asio::io_context& io_;
  route_relay_options options_;
  node_bus& bus_;
  routing_table& routing_;
  fanout& fanout_;
  std::function<bool()> in_standing_;
  std::shared_ptr<spdlog::logger> logger_;
  protocol::frame_builder answers_;

  route_directory directory_;
  // Per partition: the owner key revision this node holds it at (0: not
  // held), and the rebuild ticket while its directory is incomplete.
  std::vector<std::int64_t> held_;
  std::vector<std::uint64_t> rebuilding_;
  std::map<std::uint64_t, rebuild> rebuilds_;
  std::int64_t incarnation_ = 0;
  std::vector<cluster_member> members_;  // of the view last applied

  std::uint64_t next_ticket_ = 0;
  std::map<std::uint64_t, pending_send> sends_;
  // Per owner node: puts and removals not sent yet, and the puts sent and
  // waiting for their RouteAck (by ticket).
  std::map<std::string, put_batch, std::less<>> outgoing_;
  std::map<std::uint64_t, put_batch> unacked_;
  // Per peer: SendForwards and SendOutcomes not sent yet.
  outboxes outboxes_;
  // Home side, per local route key: what a rebuild's answer tells.
  std::unordered_map<std::string, home_entry, string_hash, std::equal_to<>> home_routes_;
  std::uint64_t home_serial_ = 0;  // home_entry serials given
  // Home side, per partition: the node that last asked this node for its
  // routes in it (a rebuild) and when, cleared when this node gains it:
  // told the stamp of a put sent before it asked whose ack came after, and
  // every removal while the view does not name it (it may own the partition
  // before this node's view says so).
  struct asker {
    std::string node_id;
    clock::time_point at{};
  };
  std::vector<asker> asked_by_ = std::vector<asker>(partition_map::partition_count);
  // Owner side: puts confirmed (the version of their stamps).
  std::uint64_t confirmations_ = 0;
  bool flush_posted_ = false;
  asio::steady_timer timer_;
  // Home side: rebuilds' answers being sent, in turn.
  std::deque<key_answer> key_answers_;
  bool pump_posted_ = false;
  asio::steady_timer pump_timer_;
  bool timer_armed_ = false;
  bool stopped_ = false;
  // Cleared by the destructor: a posted flush or a timer handler that runs
  // later finds it false and touches nothing.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  std::unique_ptr<key_group> here_, all_;
  std::unique_ptr<node_groups> homes_, owners_;
  std::vector<std::uint32_t> index_scratch_;
  std::vector<std::string_view> gateway_scratch_;
  std::vector<std::string_view> answer_scratch_;
  std::vector<std::string> offer_gateways_;  // an offer decided at once (route)
  std::vector<std::uint8_t> offer_capped_;
  std::vector<std::uint32_t> capped_scratch_;  // places of keys capped here (route, on_forward)
  exposure_table* exposure_ = nullptr;
  std::uint64_t* exposure_untracked_ = nullptr;
  std::function<void()> exposure_first_;
  route_relay_counters counters_;
};

}  // namespace switchyard::broker
