#pragma once
// Channels: Subscribe, Unsubscribe and Publish (docs/protocol.md §5). A
// publish without a stream is delivered at once (fanout::publish); one
// with a stream, or to a channel the server made durable
// (--durable-channel), goes through the durable pipeline first.
//
// Loop thread only. Each handler answers on `from` itself; the dispatcher
// has checked the connection's capabilities.

#include "broker/tables/channel_table.hpp"
#include "broker/delivery/fanout.hpp"
#include "broker/requests/peer.hpp"
#include "broker/config/server_config.hpp"
#include "protocol/frame_builder.hpp"

#include <cstdint>
#include <memory>

namespace spdlog {
class logger;
}

namespace switchyard::broker {

class durable_pipeline;
class node_bus;

class pubsub_handler {
 public:
  // Borrows everything for its lifetime; `durable` is null without a
  // sequence log.
  pubsub_handler(const server_config& config, channel_table& channels, fanout& fan, durable_pipeline* durable,
                 protocol::frame_builder& builder, std::shared_ptr<spdlog::logger> logger);

  void subscribe(peer& from, std::uint64_t request_id, const protocol::wire::Subscribe& m);
  void unsubscribe(peer& from, std::uint64_t request_id, const protocol::wire::Unsubscribe& m);
  void publish(peer& from, std::uint64_t request_id, const protocol::wire::Publish& m);
  // `p` closed: its subscriptions go.
  void disconnected(peer& p);
  // The stream a publish from `from` is appended to first: its own, or
  // its channel's when the server made the channel durable; empty for a
  // publish that is not durable (or that publish() refuses: a stream
  // without the "log" capability, or no sequence log here).
  std::string_view durable_stream(const peer& from, const protocol::wire::Publish& m) const;
  // Cluster mode: the other nodes learn of each pattern's first and last
  // local subscriber, and a Subscribe is answered once they hold it
  // (docs/cluster.md, "Channels"). Borrowed; null on a single node.
  void use_cluster(node_bus* bus) noexcept { cluster_ = bus; }

 private:
  // True if the server configured `channel` as durable.
  bool durable_channel(std::string_view channel) const;

  const server_config& config_;
  channel_table& channels_;
  fanout& fanout_;
  durable_pipeline* durable_;
  node_bus* cluster_ = nullptr;
  protocol::frame_builder& builder_;
  std::shared_ptr<spdlog::logger> logger_;
};

}  // namespace switchyard::broker
