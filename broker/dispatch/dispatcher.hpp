#pragma once
// Dispatch: one table from message type to {required capability, handler}.
// It is the one place where a welcomed connection's requests are checked
// before any handler runs: capabilities, then the principal's permissions
// (authorize(): a denied request is answered forbidden and the connection
// stays), and the one place that knows which handler serves which
// message. Ownership of leases and what is bound to them needs the tables
// and is checked by routing_handler.
//
//   Publish, Subscribe, Unsubscribe            pubsub_handler       (none)
//   Lease*, Registry*, Inbox*, Send            routing_handler      "routing"
//   Append, Read                               log_handler          "log"
//   StreamInfo, StreamList, SetRetention,
//   StreamDelete                               stream_admin_handler "log"
//   OfferAck, Withdraw, PendingOffers,
//   ExposureQuery                              offer_handler        "offers"
//   (a Send with offer fields goes from routing_handler to offer_handler)
//   Drain, Stats, ConnList, FlagSet, FlagList,
//   ClusterStatus, ClusterTakeover             server_admin_handler "admin"
//   Ping (answered in order: peer::ping), Pong, Error (a client's notice,
//   logged), Hello (a second one: bad_request)  here                (none)
//   anything else (server-to-client types)     closes the connection
//
// Cluster mode: a request about a durable stream another node holds goes
// there (stream_relay) once its capability and permissions are checked.
//
// Loop thread only. The connection handles the Hello itself (before the
// welcome, nothing reaches dispatch).

#include "broker/requests/peer.hpp"
#include "broker/tables/server_counters.hpp"
#include "protocol/frame_parser.hpp"

#include <array>
#include <cstddef>
#include <memory>
#include <span>

namespace spdlog {
class logger;
}

namespace switchyard::broker {

class pubsub_handler;
class routing_handler;
class log_handler;
class stream_admin_handler;
class server_admin_handler;
class offer_handler;
class stream_relay;

class dispatcher {
 public:
  // What a message needs granted before its handler runs.
  enum class requirement : std::uint8_t { none, routing, sequence_log, admin, offers };

  // The handlers, borrowed for the dispatcher's lifetime. `log` and
  // `stream_admin` are null on a server without a sequence log.
  struct handlers {
    pubsub_handler& pubsub;
    routing_handler& routing;
    log_handler* log = nullptr;
    stream_admin_handler* stream_admin = nullptr;
    server_admin_handler* admin = nullptr;  // null: Drain is answered unsupported_message
    offer_handler* offers = nullptr;        // null: offer requests are answered unsupported_message
  };
  dispatcher(handlers h, server_counters& counters, std::shared_ptr<spdlog::logger> logger);

  // Handles one verified frame from a welcomed peer: checks what it needs,
  // then runs its handler (which answers on `from`). A request whose
  // capability is missing is answered unsupported_message and the
  // connection stays. Returns false when the frame closed the connection
  // (a message type clients may not send): the caller stops reading.
  // `raw`: the frame's bytes as they came (length prefix included;
  // borrowed for the call): in cluster mode a request about a durable
  // stream another node holds is forwarded there (stream_relay); without
  // them (a request another node forwarded here) it runs here.
  bool dispatch(peer& from, const protocol::wire::Frame& frame, protocol::bytes_view raw = {});

  // Cluster mode: requests naming a durable stream (Append, Read,
  // StreamInfo, SetRetention, StreamDelete, a durable Publish) go to
  // `streams` first, after the capability and permission checks. Borrowed;
  // null on a single node.
  void use_cluster(stream_relay* streams) noexcept { streams_ = streams; }
  // The durable stream `frame` from `from` names (see use_cluster), or
  // empty. `local_only`, if given, is set for a request that only the
  // stream's holder may serve and that is not forwarded (an offer with a
  // stream).
  std::string_view stream_of(const peer& from, const protocol::wire::Frame& frame, bool* local_only = nullptr) const;

  // Cache hints before frames[i] is handled (frames verified ahead of
  // handling, in order). Also the start of a batch: REQUIRES a call with
  // i == 0 before the first frame of every batch is dispatched (the
  // routing handler reads the lease clock there once for the batch's
  // sends; without it a send finds no route).
  void look_ahead(const peer& from, std::span<const protocol::frame_view> frames, std::size_t i) const noexcept;

  // `p` closed: every handler forgets it (subscriptions, inboxes).
  void disconnected(peer& p);

  // What `type` needs, and whether clients may send it at all (for tests).
  requirement needs(protocol::wire::Message type) const noexcept;
  bool accepts(protocol::wire::Message type) const noexcept;

 private:
  using handler_fn = void (*)(void* handler, peer& from, const protocol::wire::Frame& frame);
  struct route {
    bool from_clients = false;  // false: a server-to-client type, closes the connection
    requirement needs = requirement::none;
    void* handler = nullptr;
    handler_fn fn = nullptr;  // null: needs what this server never grants
  };
  // Ping, Pong, Error and a second Hello: answered here.
  struct session_messages {
    std::shared_ptr<spdlog::logger> logger;
    void ping(peer& from, std::uint64_t request_id, const protocol::wire::Ping& m);
    void pong(peer& from, std::uint64_t request_id, const protocol::wire::Pong& m);
    void error(peer& from, std::uint64_t request_id, const protocol::wire::Error& m);
    void hello(peer& from, std::uint64_t request_id, const protocol::wire::Hello& m);
  };
  template <auto Method, class Handler>
  void bind(protocol::wire::Message type, Handler* handler, requirement needs);
  void refuse(peer& from, std::uint64_t request_id, requirement missing);
  // The principal's permissions for this request (docs/security.md): true
  // when it may go on; otherwise it was answered forbidden. Always true
  // without an auth file or for an admin principal.
  bool authorize(peer& from, const protocol::wire::Frame& frame);

  static constexpr std::size_t table_size = static_cast<std::size_t>(protocol::wire::Message::MAX) + 1;
  std::array<route, table_size> table_{};
  handlers handlers_;
  stream_relay* streams_ = nullptr;
  session_messages session_;
  server_counters& counters_;
  std::shared_ptr<spdlog::logger> logger_;
};

}  // namespace switchyard::broker
