#include "broker/handlers/pubsub_handler.hpp"

#include "common/latency_probe.hpp"

#include "broker/cluster/node_bus.hpp"
#include "broker/requests/durable_pipeline.hpp"
#include "broker/handlers/offer_handler.hpp"
#include "broker/tables/record_destination.hpp"
#include "protocol/channel_name.hpp"

#include <spdlog/spdlog.h>

namespace switchyard::broker {

using protocol::errc;

pubsub_handler::pubsub_handler(const server_config& config, channel_table& channels, fanout& fan,
                               durable_pipeline* durable, protocol::frame_builder& builder,
                               std::shared_ptr<spdlog::logger> logger)
    : config_(config),
      channels_(channels),
      fanout_(fan),
      durable_(durable),
      builder_(builder),
      logger_(std::move(logger)) {}

bool pubsub_handler::durable_channel(std::string_view channel) const {
  for (const auto& pattern : config_.durable_channels)
    if (protocol::pattern_matches(pattern, channel)) return true;
  return false;
}

std::string_view pubsub_handler::durable_stream(const peer& from, const protocol::wire::Publish& m) const {
  if (!durable_) return {};
  if (m.stream() && !m.stream()->string_view().empty())
    return from.granted().sequence_log ? m.stream()->string_view() : std::string_view{};
  const std::string_view channel = m.channel()->string_view();
  return protocol::is_valid_channel(channel) && durable_channel(channel) ? channel : std::string_view{};
}

void pubsub_handler::subscribe(peer& from, std::uint64_t rid, const protocol::wire::Subscribe& m) {
  const std::string_view pattern = m.pattern()->string_view();
  if (!protocol::is_valid_pattern(pattern))
    return from.send_error(rid, errc::bad_request, "invalid subscription pattern");
  auto& patterns = from.subscriptions();
  if (patterns.size() >= config_.max_subscriptions && !patterns.contains(std::string(pattern)))
    return from.send_error(
        rid, errc::limit_exceeded,
        "this connection holds max-subscriptions (" + std::to_string(config_.max_subscriptions) + ") patterns");
  if (patterns.emplace(pattern).second) {
    channels_.subscribe(pattern, &from);
    if (cluster_) cluster_->local_subscribe(pattern);
  }
  // A subscription starts here (a client sends Subscribe for every durable
  // subscription, even of a pattern it already has): from now on, the first
  // dropped delivery of each stream is told again (StreamDropped), so that
  // the new subscription learns of every stream whose first messages it
  // lost.
  from.restart_drop_reports();
  logger_->debug("conn={} subscribe channel={}", from.id(), pattern);
  // In a cluster, the Ok waits until every node holds the interest.
  if (cluster_ && cluster_->answer_when_confirmed(pattern, from, rid)) return;
  if (rid != 0) from.send(builder_.ok(rid));
}

void pubsub_handler::unsubscribe(peer& from, std::uint64_t rid, const protocol::wire::Unsubscribe& m) {
  const std::string_view pattern = m.pattern()->string_view();
  auto& patterns = from.subscriptions();
  auto it = patterns.find(std::string(pattern));
  if (it == patterns.end()) return from.send_error(rid, errc::not_found, "not subscribed to that pattern");
  channels_.unsubscribe(pattern, &from);
  if (cluster_) cluster_->local_unsubscribe(pattern);
  patterns.erase(it);
  if (rid != 0) from.send(builder_.ok(rid));
}

void pubsub_handler::publish(peer& from, std::uint64_t rid, const protocol::wire::Publish& m) {
  const std::string_view channel = m.channel()->string_view();
  if (!protocol::is_valid_channel(channel))
    return from.send_error(rid, errc::bad_request, "invalid channel name (wildcards are for subscriptions)");
  const auto* p = m.payload();
  const protocol::bytes_view payload = p ? protocol::bytes_view{p->data(), p->size()} : protocol::bytes_view{};
  // A stream named by the publisher, or the channel's own when the server
  // configured the channel as durable (then no "log" capability is needed:
  // it is the server's policy, not the publisher's request).
  std::string_view stream = m.stream() ? m.stream()->string_view() : std::string_view{};
  const bool by_policy = stream.empty() && durable_channel(channel);
  if (by_policy) stream = channel;
  const std::chrono::milliseconds expires_in(m.expires_in_ms());
  if (expires_in.count() != 0) {
    if (offer_handler::refuse_expiry(from, rid, m.expires_in_ms(), config_)) return;
    if (stream.empty()) {
      const auto now = std::chrono::steady_clock::now();
      fanout_.publish_expiring(channel, payload, now + expires_in, now);
      if (rid != 0 && from.granted().publish_ack) from.send(builder_.ok(rid));
      return;
    }
  }
  if (stream.empty()) {
    const std::uint64_t key = probe::key_of(payload.data(), payload.size());  // --latency-probe builds only
    probe::mark_held(probe::point::broker_read, key);
    probe::mark(probe::point::broker_parsed, key);
    fanout_.publish(channel, payload);
    probe::mark(probe::point::broker_queued, key);
    probe::remember(key);
    if (rid != 0 && from.granted().publish_ack) from.send(builder_.ok(rid));
    return;
  }
  // Durable publish: append first, deliver once the log has it.
  if ((!from.granted().sequence_log && !by_policy) || !durable_)
    return from.send_error(rid, errc::unsupported_message, no_log_message(durable_ != nullptr));
  const auto bytes = std::as_bytes(payload);
  // An expiry is kept with the record: reads skip it once expired.
  const std::size_t expiry_bytes = expires_in.count() != 0 ? destination_expiry_bytes : 0;
  if (durable_->check(stream, bytes.size(), channel_destination_size(channel) + expiry_bytes))
    return from.send_error(rid, errc::bad_request, durable_pipeline::check_message());
  auto& destination = durable_->destination_scratch();
  encode_channel_destination(channel, destination, m.expires_in_ms());
  durable_->append(from, rid, stream, bytes, destination, channel, {}, expires_in);
}

void pubsub_handler::disconnected(peer& p) {
  for (const auto& pattern : p.subscriptions()) {
    channels_.unsubscribe(pattern, &p);
    if (cluster_) cluster_->local_unsubscribe(pattern);
  }
  p.subscriptions().clear();
}

}  // namespace switchyard::broker
