// client: durable subscriptions (gap-free delivery of durable streams).

#include "switchyard/client.hpp"

#include "client_impl.hpp"

namespace switchyard {

std::expected<subscription_id, std::error_code> client::subscribe_durable(std::string_view pattern,
                                                                          message_handler handler,
                                                                          durable_options options) {
  auto& p = *impl_;
  if (p.loop.on_loop_thread()) return std::unexpected(make_error_code(errc::would_deadlock));
  if (!p.log_cap) return std::unexpected(make_error_code(errc::not_supported));
  auto made = p.make_durable(options);
  if (!made) return std::unexpected(made.error());
  auto durable = std::move(*made);
  auto promise = std::make_shared<std::promise<std::expected<subscription_id, std::error_code>>>();
  auto result = promise->get_future();
  detail::add_subscription(impl_, pattern, std::move(handler), durable,
                           [promise](std::expected<subscription_id, std::error_code> r) { promise->set_value(r); });
  auto id = result.get();
  // Live delivery is on: read what was missed since the saved positions.
  // Live messages meanwhile are sorted out by sequence.
  if (id && !options.resume_from.empty())
    asio::post(p.io, [durable] {
      if (durable->active) durable->tracker->check_all();
    });
  return id;
}

stream_positions client::stream_positions_of(subscription_id id) const {
  auto& p = *impl_;
  std::shared_ptr<durable_state> d;
  {
    std::lock_guard lock(p.mu);
    for (const auto& s : *p.subs)
      if (s->id == id) d = s->durable;
  }
  return p.positions_of(d);
}

}  // namespace switchyard
