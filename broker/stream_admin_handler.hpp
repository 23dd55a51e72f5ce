#pragma once
// Stream administration on the sequence log (capability "log";
// docs/protocol.md §7.4): StreamInfo and StreamList read the log on the
// loop thread; SetRetention goes through the group committer's writer
// thread and is answered on the loop thread once the change is on disk.
//
// Loop thread only. Exists only on a server with a data folder.

#include "broker/durable_pipeline.hpp"
#include "broker/peer.hpp"
#include "broker/server_config.hpp"
#include "common/asio.hpp"
#include "protocol/frame_builder.hpp"

#include <cstdint>
#include <memory>

namespace spdlog {
class logger;
}

namespace switchyard::broker {

class stream_admin_handler {
 public:
  // Borrows everything for its lifetime; `loop` is where SetRetention's
  // answer is posted back to.
  stream_admin_handler(const server_config& config, durable_pipeline& durable, asio::any_io_executor loop,
                       protocol::frame_builder& builder, std::shared_ptr<spdlog::logger> logger);

  void stream_info(peer& from, std::uint64_t request_id, const protocol::wire::StreamInfo& m);
  void stream_list(peer& from, std::uint64_t request_id, const protocol::wire::StreamList& m);
  // Answered once the change is on disk (a ticket of `from` is held until
  // then, so a Ping after it waits).
  void set_retention(peer& from, std::uint64_t request_id, const protocol::wire::SetRetention& m);

 private:
  storage::retention server_default() const;

  const server_config& config_;
  durable_pipeline& durable_;
  asio::any_io_executor loop_;
  protocol::frame_builder& builder_;
  std::shared_ptr<spdlog::logger> logger_;
};

}  // namespace switchyard::broker
