// client: durable subscriptions (gap-free delivery of durable streams), and
// the durable trackers of subscriptions and inboxes: their recovery reads
// and positions.

#include "switchyard/client.hpp"

#include "client_impl_inline.hpp"

namespace switchyard {

void client::impl::durable_read(const std::weak_ptr<durable_state>& weak, const std::string& stream, std::uint64_t from,
                                std::size_t batch) {
  const auto count = static_cast<std::uint32_t>(std::min<std::size_t>(batch, UINT32_MAX));
  call_async<stream_read>([&](std::uint64_t r) { return local_builder().read(r, stream, from, count, 0); },
                          detail::parse_records,
                          [weak, stream](std::expected<stream_read, std::error_code> r) {
                            const auto d = weak.lock();
                            if (!d || !d->active) return;
                            if (r)
                              d->tracker->read_done(stream, *r, d->deliver);
                            else
                              d->tracker->read_failed(stream, r.error());
                          });
}

std::expected<std::shared_ptr<durable_state>, std::error_code> client::impl::make_durable(durable_options& o) {
  if (auto ec = detail::stream_tracker::check(o.resume_from)) return std::unexpected(ec);
  if (!stream_drops)
    log(log_level::info,
        "switchyard: connection {}: the broker does not report dropped first messages "
        "(no \"stream-drops\"): a stream whose first messages are dropped starts at the first that arrives",
        session_id.load());
  auto d = std::make_shared<durable_state>();
  d->read_batch = o.read_batch;
  std::weak_ptr<durable_state> weak_d = d;
  std::weak_ptr<impl> weak_self = weak_from_this();
  d->tracker.emplace(
      [weak_d, weak_self](const std::string& stream, std::uint64_t from) {
        const auto self = weak_self.lock();
        const auto dd = weak_d.lock();
        if (self && dd) self->durable_read(weak_d, stream, from, dd->read_batch);
      },
      std::move(o.on_unrecoverable));
  d->tracker->resume_from(o.resume_from);
  return d;
}

stream_positions client::impl::positions_of(const std::shared_ptr<durable_state>& d) {
  if (!d) return {};
  return on_loop([d] { return d->tracker->positions(); });
}

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
    switchyard::lock_guard lock(p.mu);
    for (const auto& s : *p.subs)
      if (s->id == id) d = s->durable;
  }
  return p.positions_of(d);
}

}  // namespace switchyard
