#pragma once
// What a request handler sees of the connection a request came on: its
// identity and granted capabilities, a way to answer, and the state the
// handlers keep per connection. broker/transport/connection.hpp implements it; the
// handlers (pubsub_handler, routing_handler, log_handler,
// stream_admin_handler) and the durable pipeline know only this.
//
// Loop thread only.

#include "auth/principal.hpp"
#include "broker/requests/capabilities.hpp"
#include "broker/tables/delivery_target.hpp"
#include "broker/tables/lease_table.hpp"
#include "protocol/errc.hpp"
#include "protocol/frame_builder.hpp"

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

namespace switchyard::broker {

class peer : public delivery_target {
 public:
  std::uint64_t id() const noexcept { return id_; }
  const capability_set& granted() const noexcept { return granted_; }
  bool wants_log_positions() const noexcept final { return granted_.sequence_log; }

  // Queues a control frame (an answer, a notice): never dropped, and
  // nothing after the goodbye. The bytes are borrowed for the call (they
  // may be the builder's buffer).
  virtual void send(protocol::bytes_view frame) = 0;
  // Answers `request_id` with an Error frame (not fatal).
  void send_error(std::uint64_t request_id, protocol::errc code, std::string_view message);
  // Answers `request_id` forbidden (docs/protocol.md §8). Every forbidden
  // answer is made here, so each names the operation, the resource and
  // this peer's principal: "{operation} {resource} is not allowed[: {why}]
  // (principal '{name}')". `resource` comes as the reader should see it
  // ("'orders.x'", "lease 5"; empty for a request on no resource). Only a
  // peer with a principal is ever forbidden anything.
  void send_forbidden(std::uint64_t request_id, std::string_view operation, std::string_view resource,
                      std::string_view why = {});
  // Sends a fatal error, stops reading and closes once it is written (or
  // after the shutdown grace). Idempotent.
  virtual void close_with_error(protocol::errc code, std::string_view message) = 0;
  // True once the connection is gone: answers are dropped.
  virtual bool closed() const noexcept = 0;
  // For answers that finish later (after the log): the peer may be gone
  // by then.
  virtual std::weak_ptr<peer> weak_peer() noexcept = 0;
  // A new subscription or inbox starts here: its subscriber must hear of
  // the first dropped delivery of every stream again (StreamDropped).
  virtual void restart_drop_reports() noexcept = 0;
  // Cluster mode: `count` messages from another node were lost in transit
  // (the link's numbering showed a gap), some of which may have been for
  // this peer: told as a Dropped notice (capability "dropped-notice").
  virtual void report_lost(std::uint64_t count) = 0;

  // Answers that wait for the log (appends, durable publishes and sends,
  // retention changes) finish out of line. Each takes a ticket when it is
  // queued and returns it once answered or failed; a Ping is answered only
  // after every request before it (the flush idiom). open_ticket returns
  // the ticket; close_ticket with an unknown ticket does nothing.
  std::uint64_t open_ticket();
  void close_ticket(std::uint64_t ticket);
  // Answers a Ping: at once unless an earlier request still waits.
  void ping(std::uint64_t request_id);

  // Who is on the other end (docs/security.md). Null on a broker without
  // an auth file: anyone may do anything, and everything is owned by
  // owner 0. The pointer is borrowed until the next set_principal (a
  // reload may replace it).
  const auth::principal* principal() const noexcept { return principal_.get(); }
  // The number leases this peer grants are owned by (lease_table::owner_id).
  owner_id owner() const noexcept { return owner_; }
  // May this peer do `op` on `name`? True without an auth file and for an
  // admin principal.
  bool may(auth::operation op, std::string_view name) const { return !principal_ || principal_->may(op, name); }
  // May it touch what `owner` created (a lease and what is bound to it)?
  bool may_touch(owner_id of) const noexcept { return !principal_ || principal_->admin || of == owner_; }
  // An admin principal, or no auth file.
  bool is_admin() const noexcept { return !principal_ || principal_->admin; }
  // Set at the hello and by a reload of the auth file.
  void set_principal(std::shared_ptr<const auth::principal> p, owner_id owner) noexcept {
    principal_ = std::move(p);
    owner_ = owner;
  }

  // State the handlers keep per connection (they read and change it; the
  // connection only holds it).
  std::unordered_set<std::string>& subscriptions() noexcept { return subscriptions_; }  // pubsub_handler
  std::vector<std::string>& inboxes() noexcept { return inboxes_; }                     // routing_handler
  const std::unordered_set<std::string>& subscriptions() const noexcept { return subscriptions_; }
  const std::vector<std::string>& inboxes() const noexcept { return inboxes_; }

 protected:
  // `builder` encodes the peer's own answers (errors, pongs): borrowed for
  // the peer's lifetime.
  peer(std::uint64_t id, protocol::frame_builder& builder) : id_(id), builder_(builder) {}
  ~peer() = default;

  capability_set granted_;  // set by the connection's hello

 private:
  std::shared_ptr<const auth::principal> principal_;
  owner_id owner_ = 0;
  const std::uint64_t id_;
  protocol::frame_builder& builder_;
  std::unordered_set<std::string> subscriptions_;
  std::vector<std::string> inboxes_;
  // Tickets first_open_ticket_ .. + open_tickets_.size() - 1 are taken;
  // open_tickets_[i] says whether that one was closed (popped from the
  // front once it and every one before it are).
  std::uint64_t first_open_ticket_ = 0;
  std::deque<bool> open_tickets_;
  // Pings waiting for open tickets: (request id, tickets taken before it).
  std::deque<std::pair<std::uint64_t, std::uint64_t>> held_pongs_;
};

}  // namespace switchyard::broker
