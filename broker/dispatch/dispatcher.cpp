#include "broker/dispatch/dispatcher.hpp"

#include "broker/cluster/stream_relay.hpp"
#include "broker/handlers/log_handler.hpp"
#include "broker/handlers/offer_handler.hpp"
#include "broker/handlers/pubsub_handler.hpp"
#include "broker/handlers/routing_handler.hpp"
#include "broker/handlers/server_admin_handler.hpp"
#include "broker/handlers/stream_admin_handler.hpp"

#include "protocol/channel_name.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <string>

namespace switchyard::broker {

namespace wire = protocol::wire;
using protocol::errc;

namespace {

// The handler class and message type of a handler member function
// `void H::f(peer&, std::uint64_t request_id, const M&)`.
template <auto Method>
struct method_traits;
template <class H, class M, void (H::*Method)(peer&, std::uint64_t, const M&)>
struct method_traits<Method> {
  using handler = H;
  using message = M;
};

template <auto Method>
void invoke(void* handler, peer& from, const wire::Frame& frame) {
  using traits = method_traits<Method>;
  (static_cast<typename traits::handler*>(handler)->*Method)(from, frame.request_id(),
                                                             *frame.template message_as<typename traits::message>());
}

}  // namespace

void dispatcher::session_messages::ping(peer& from, std::uint64_t rid, const wire::Ping&) { from.ping(rid); }
void dispatcher::session_messages::pong(peer&, std::uint64_t, const wire::Pong&) {}
void dispatcher::session_messages::error(peer& from, std::uint64_t, const wire::Error& m) {
  // A client's notice: logged only.
  if (m.message()) logger->debug("conn={} client error: {}", from.id(), m.message()->string_view());
}
void dispatcher::session_messages::hello(peer& from, std::uint64_t rid, const wire::Hello&) {
  from.send_error(rid, errc::bad_request, "hello already received");
}

template <auto Method, class Handler>
void dispatcher::bind(wire::Message type, Handler* handler, requirement needs) {
  static_assert(std::is_same_v<typename method_traits<Method>::handler, Handler>);
  table_[static_cast<std::size_t>(type)] = {true, needs, handler, &invoke<Method>};
}

dispatcher::dispatcher(handlers h, server_counters& counters, std::shared_ptr<spdlog::logger> logger)
    : handlers_(h), session_{logger}, counters_(counters), logger_(std::move(logger)) {
  using M = wire::Message;
  using R = requirement;
  auto* s = &session_;
  bind<&session_messages::ping>(M::Ping, s, R::none);
  bind<&session_messages::pong>(M::Pong, s, R::none);
  bind<&session_messages::error>(M::Error, s, R::none);
  bind<&session_messages::hello>(M::Hello, s, R::none);

  auto* pubsub = &h.pubsub;
  bind<&pubsub_handler::publish>(M::Publish, pubsub, R::none);
  bind<&pubsub_handler::subscribe>(M::Subscribe, pubsub, R::none);
  bind<&pubsub_handler::unsubscribe>(M::Unsubscribe, pubsub, R::none);

  auto* routing = &h.routing;
  bind<&routing_handler::lease_grant>(M::LeaseGrant, routing, R::routing);
  bind<&routing_handler::lease_keepalive>(M::LeaseKeepAlive, routing, R::routing);
  bind<&routing_handler::lease_revoke>(M::LeaseRevoke, routing, R::routing);
  bind<&routing_handler::lease_time_to_live>(M::LeaseTimeToLive, routing, R::routing);
  bind<&routing_handler::lease_list>(M::LeaseList, routing, R::routing);
  bind<&routing_handler::registry_put>(M::RegistryPut, routing, R::routing);
  bind<&routing_handler::registry_get>(M::RegistryGet, routing, R::routing);
  bind<&routing_handler::registry_delete>(M::RegistryDelete, routing, R::routing);
  bind<&routing_handler::registry_list>(M::RegistryList, routing, R::routing);
  bind<&routing_handler::inbox_open>(M::InboxOpen, routing, R::routing);
  bind<&routing_handler::inbox_close>(M::InboxClose, routing, R::routing);
  bind<&routing_handler::send>(M::Send, routing, R::routing);

  // Without a log these stay bound to nothing but still need "log", which
  // such a server never grants: the capability check answers them.
  for (M type : {M::Append, M::Read, M::StreamInfo, M::StreamList, M::SetRetention, M::StreamDelete})
    table_[static_cast<std::size_t>(type)] = {true, R::sequence_log, nullptr, nullptr};
  if (h.log) {
    bind<&log_handler::append>(M::Append, h.log, R::sequence_log);
    bind<&log_handler::read>(M::Read, h.log, R::sequence_log);
  }
  if (h.stream_admin) {
    bind<&stream_admin_handler::stream_info>(M::StreamInfo, h.stream_admin, R::sequence_log);
    bind<&stream_admin_handler::stream_list>(M::StreamList, h.stream_admin, R::sequence_log);
    bind<&stream_admin_handler::set_retention>(M::SetRetention, h.stream_admin, R::sequence_log);
    bind<&stream_admin_handler::delete_stream>(M::StreamDelete, h.stream_admin, R::sequence_log);
  }
  for (M type : {M::Drain, M::Stats, M::ConnList, M::FlagSet, M::FlagList, M::ClusterStatus, M::ClusterTakeover})
    table_[static_cast<std::size_t>(type)] = {true, R::admin, nullptr, nullptr};
  if (h.admin) {
    bind<&server_admin_handler::drain>(M::Drain, h.admin, R::admin);
    bind<&server_admin_handler::stats>(M::Stats, h.admin, R::admin);
    bind<&server_admin_handler::conn_list>(M::ConnList, h.admin, R::admin);
    bind<&server_admin_handler::flag_set>(M::FlagSet, h.admin, R::admin);
    bind<&server_admin_handler::flag_list>(M::FlagList, h.admin, R::admin);
    bind<&server_admin_handler::cluster_status>(M::ClusterStatus, h.admin, R::admin);
    bind<&server_admin_handler::cluster_takeover>(M::ClusterTakeover, h.admin, R::admin);
  }
  for (M type : {M::OfferAck, M::Withdraw, M::PendingOffers, M::ExposureQuery})
    table_[static_cast<std::size_t>(type)] = {true, R::offers, nullptr, nullptr};
  if (h.offers) {
    bind<&offer_handler::ack>(M::OfferAck, h.offers, R::offers);
    bind<&offer_handler::withdraw>(M::Withdraw, h.offers, R::offers);
    bind<&offer_handler::pending>(M::PendingOffers, h.offers, R::offers);
    bind<&offer_handler::exposure>(M::ExposureQuery, h.offers, R::offers);
  }
}

void dispatcher::refuse(peer& from, std::uint64_t rid, requirement missing) {
  if (missing == requirement::routing)
    return from.send_error(rid, errc::unsupported_message, "this needs the \"routing\" capability in the hello");
  if (missing == requirement::admin)
    return from.send_error(rid, errc::unsupported_message, "this needs the \"admin\" capability in the hello");
  if (missing == requirement::offers)
    return from.send_error(rid, errc::unsupported_message, "this needs the \"offers\" capability in the hello");
  from.send_error(rid, errc::unsupported_message, no_log_message(handlers_.log != nullptr));
}

bool dispatcher::authorize(peer& from, const wire::Frame& frame) {
  const auth::principal& who = *from.principal();
  if (who.admin) return true;
  const auto rid = frame.request_id();
  const auto forbid = [&](std::string_view operation, std::string_view resource, std::string_view why = {}) {
    ++counters_.forbidden;
    from.send_forbidden(rid, operation, resource, why);
    return false;
  };
  // An empty name is not checked here: the handler refuses it (bad_request).
  const auto check = [&](auth::operation op, std::string_view name) {
    return name.empty() || who.may(op, name) || forbid(auth::to_string(op), fmt::format("'{}'", name));
  };
  const auto text = [](const flatbuffers::String* s) { return s ? s->string_view() : std::string_view{}; };
  const auto admin_only = [&](const char* what) { return forbid(what, {}, "it needs an admin principal"); };
  using M = wire::Message;
  using op = auth::operation;
  switch (frame.message_type()) {
    case M::Publish: {
      const auto& m = *frame.message_as_Publish();
      return check(op::publish, m.channel()->string_view()) && check(op::stream_append, text(m.stream()));
    }
    case M::Subscribe: {
      const std::string_view pattern = frame.message_as_Subscribe()->pattern()->string_view();
      // An invalid pattern goes on to the handler's bad_request. One that
      // only overlaps a denied name is allowed: fan-out leaves the denied
      // channels out (connection::receives), checked once per channel.
      if (!protocol::is_valid_pattern(pattern) ||
          who.rule(op::subscribe).check_subscribe(pattern) != auth::permission_rule::subscribe_verdict::denied)
        return true;
      return forbid(auth::to_string(op::subscribe), fmt::format("'{}'", pattern));
    }
    case M::Send: {
      const auto& m = *frame.message_as_Send();
      const auto& send_rule = who.rule(op::send);
      if (!send_rule.allows_everything())
        for (const auto* k : *m.route_keys())
          if (!check(op::send, k->string_view())) return false;
      return check(op::stream_append, text(m.stream()));
    }
    case M::RegistryPut:
      return check(op::registry_put, frame.message_as_RegistryPut()->key()->string_view());
    case M::RegistryGet:
      return check(op::registry_get, frame.message_as_RegistryGet()->key()->string_view());
    case M::RegistryDelete:
      return check(op::registry_delete, frame.message_as_RegistryDelete()->key()->string_view());
    case M::InboxOpen:
      return check(op::inbox, frame.message_as_InboxOpen()->inbox_id()->string_view());
    case M::Append:
      return check(op::stream_append, frame.message_as_Append()->stream()->string_view());
    case M::Read:
      return check(op::stream_read, frame.message_as_Read()->stream()->string_view());
    case M::StreamInfo:
      return check(op::stream_read, frame.message_as_StreamInfo()->stream()->string_view());
    case M::LeaseList:
      return admin_only("LeaseList");
    case M::RegistryList:
      return admin_only("RegistryList");
    case M::StreamList:
      return admin_only("StreamList");
    case M::SetRetention:
      return admin_only("SetRetention");
    case M::StreamDelete:
      return admin_only("StreamDelete");
    case M::Drain:
      return admin_only("Drain");
    case M::Stats:
      return admin_only("Stats");
    case M::ConnList:
      return admin_only("ConnList");
    case M::FlagSet:
      return admin_only("FlagSet");
    case M::FlagList:
      return admin_only("FlagList");
    case M::ClusterStatus:
      return admin_only("ClusterStatus");
    case M::ClusterTakeover:
      return admin_only("ClusterTakeover");
    // A user's pending offers are read like its registry entry; exposure
    // counts are asked by whoever may send to the keys. Withdraw checks
    // the offer's owner (offer_handler).
    case M::PendingOffers:
      return check(op::registry_get, frame.message_as_PendingOffers()->route_key()->string_view());
    case M::OfferAck:
      return check(op::registry_get, text(frame.message_as_OfferAck()->route_key()));
    case M::ExposureQuery: {
      const auto& send_rule = who.rule(op::send);
      if (!send_rule.allows_everything())
        for (const auto* k : *frame.message_as_ExposureQuery()->route_keys())
          if (!check(op::send, k->string_view())) return false;
      return true;
    }
    default:
      return true;  // unsubscribe, lease requests (ownership: routing_handler), inbox close, ping, ...
  }
}

bool dispatcher::dispatch(peer& from, const wire::Frame& frame, protocol::bytes_view raw) {
  const auto type = frame.message_type();
  const route& r = table_[static_cast<std::size_t>(type)];
  if (!r.from_clients) {
    ++counters_.protocol_errors;
    from.close_with_error(errc::unsupported_message,
                          std::string("message type ") + wire::EnumNameMessage(type) + " is not accepted from clients");
    return false;
  }
  const capability_set& granted = from.granted();
  const bool allowed = r.needs == requirement::none || (r.needs == requirement::routing && granted.routing) ||
                       (r.needs == requirement::sequence_log && granted.sequence_log) ||
                       (r.needs == requirement::admin && granted.admin) ||
                       (r.needs == requirement::offers && granted.offers);
  if (!allowed || !r.fn) {
    refuse(from, frame.request_id(), r.needs);
    return true;
  }
  if (from.principal() && !authorize(from, frame)) return true;
  if (streams_ && !raw.empty() && type == wire::Message::StreamList && handlers_.stream_admin) {
    // Cluster mode: every member lists the streams it holds.
    const auto limit = frame.message_as_StreamList()->limit();
    streams_->list_everywhere(
        from, frame.request_id(), raw,
        [h = handlers_.stream_admin, rid = frame.request_id(), limit](
            peer& who, std::span<const protocol::bytes_view> answers) { h->merge_lists(who, rid, limit, answers); });
    return true;
  }
  if (streams_ && !raw.empty()) {
    bool local_only = false;
    if (const auto stream = stream_of(from, frame, &local_only);
        !stream.empty() && streams_->take(from, frame.request_id(), stream, raw, !local_only))
      return true;
  }
  r.fn(r.handler, from, frame);
  return true;
}

std::string_view dispatcher::stream_of(const peer& from, const wire::Frame& frame, bool* local_only) const {
  using M = wire::Message;
  switch (frame.message_type()) {
    case M::Send: {
      const auto& m = *frame.message_as_Send();
      if (!m.stream() || m.stream()->size() == 0) return {};
      // An offer's receipts and acks live where it was sent: it is not
      // forwarded (served only by the stream's holder, for now).
      if (local_only && offer_handler::is_offer(m) && !offer_handler::is_expiring_durable_send(m)) *local_only = true;
      return m.stream()->string_view();
    }
    case M::Append:
      return frame.message_as_Append()->stream()->string_view();
    case M::Read:
      return frame.message_as_Read()->stream()->string_view();
    case M::StreamInfo:
      return frame.message_as_StreamInfo()->stream()->string_view();
    case M::SetRetention:
      return frame.message_as_SetRetention()->stream()->string_view();
    case M::StreamDelete:
      return frame.message_as_StreamDelete()->stream()->string_view();
    case M::Publish:
      return handlers_.pubsub.durable_stream(from, *frame.message_as_Publish());
    default:
      return {};
  }
}

void dispatcher::look_ahead(const peer& from, std::span<const protocol::frame_view> frames,
                            std::size_t i) const noexcept {
  // Only sends warm anything.
  if (from.granted().routing) handlers_.routing.look_ahead(frames, i);
}

void dispatcher::disconnected(peer& p) {
  handlers_.pubsub.disconnected(p);
  handlers_.routing.disconnected(p);
  if (handlers_.offers) handlers_.offers->disconnected(p);
}

dispatcher::requirement dispatcher::needs(wire::Message type) const noexcept {
  return table_[static_cast<std::size_t>(type)].needs;
}

bool dispatcher::accepts(wire::Message type) const noexcept {
  return table_[static_cast<std::size_t>(type)].from_clients;
}

}  // namespace switchyard::broker
