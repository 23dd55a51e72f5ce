#include "broker/server_admin_handler.hpp"

#include <spdlog/spdlog.h>

namespace switchyard::broker {

server_admin_handler::server_admin_handler(drain_fn drain, const std::chrono::milliseconds& default_window,
                                           protocol::frame_builder& builder, std::shared_ptr<spdlog::logger> logger)
    : drain_(std::move(drain)), default_window_(default_window), builder_(builder), logger_(std::move(logger)) {}

void server_admin_handler::drain(peer& from, std::uint64_t rid, const protocol::wire::Drain& m) {
  const auto window = m.window_ms() > 0 ? std::chrono::milliseconds(m.window_ms()) : default_window_;
  logger_->info("conn={} asked for a drain over {} ms", from.id(), window.count());
  if (rid != 0) from.send(builder_.ok(rid));
  drain_(window);
}

}  // namespace switchyard::broker
