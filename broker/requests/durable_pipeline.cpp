#include "broker/requests/durable_pipeline.hpp"

#include "broker/requests/wire_error.hpp"

#include <spdlog/spdlog.h>

namespace switchyard::broker {

namespace {
// Appends committed per loop turn on the loop thread (batch and none modes).
constexpr std::size_t commit_step_records = 128;
}  // namespace

durable_pipeline::durable_pipeline(std::unique_ptr<storage::sequence_log> log,
                                   const storage::group_commit_options& options, asio::any_io_executor loop,
                                   fanout& fan, protocol::frame_builder& builder,
                                   std::shared_ptr<spdlog::logger> logger)
    : log_(std::move(log)),
      committer_(std::make_unique<storage::group_committer>(*log_, options)),
      loop_(std::move(loop)),
      fanout_(fan),
      builder_(builder),
      logger_(std::move(logger)) {
  // Writer thread: queue the batch's results in the mailbox, and post one
  // drain to the loop when the mailbox was empty.
  committer_->set_batch_handler([this](std::span<const storage::group_committer::token_result> r) {
    bool first = false;
    {
      switchyard::lock_guard lock(mailbox_mu_);
      first = mailbox_.empty();
      mailbox_.insert(mailbox_.end(), r.begin(), r.end());
    }
    if (first) asio::post(loop_, [this] { drain(); });
  });
}

void durable_pipeline::stop() {
  if (!committer_) return;
  final_stats_ = committer_->stats();
  committer_.reset();
}

// The committer's last completions post to the loop: it stops (joining its
// threads) before the mailbox goes.
durable_pipeline::~durable_pipeline() { stop(); }

std::error_code durable_pipeline::check(std::string_view stream, std::size_t payload_size,
                                        std::size_t destination_size) const {
  return log_->check(stream, payload_size, destination_size);
}

std::string_view durable_pipeline::check_message() noexcept {
  return "stream names are 1..255 bytes, records at most 16 MiB, and a send's route keys at most 64 KiB "
         "as stored with the record";
}

void durable_pipeline::append(peer& from, std::uint64_t request_id, std::string_view stream,
                              std::span<const std::byte> payload, std::span<const std::byte> destination,
                              std::string_view channel, std::span<const std::string_view> route_keys,
                              std::chrono::milliseconds expires_in) {
  // The waiting append lives in a reused slot: its strings and buffers keep
  // their capacity, so the steady state allocates nothing here.
  std::uint32_t index = 0;
  if (!free_slots_.empty()) {
    index = free_slots_.back();
    free_slots_.pop_back();
  } else {
    index = static_cast<std::uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  slot& s = slots_[index];
  s.queued_at = std::chrono::steady_clock::now();
  s.deadline = expires_in.count() > 0 ? s.queued_at + expires_in : std::chrono::steady_clock::time_point{};
  s.from = from.weak_peer();
  s.request_id = request_id;
  s.stream.assign(stream);
  s.channel.assign(channel);
  // Assigned into the slot's strings, so their buffers are reused too.
  s.route_keys.resize(route_keys.size());
  for (std::size_t i = 0; i < route_keys.size(); ++i) s.route_keys[i].assign(route_keys[i]);
  // A publish or send needs its payload again once durable, to deliver it.
  if (!s.channel.empty() || !s.route_keys.empty())
    s.payload.assign(payload.begin(), payload.end());
  else
    s.payload.clear();
  if (auto ec = committer_->append(stream, payload, destination, index)) {
    // check() refuses the same: not expected.
    release(index);
    from.send_error(request_id, wire_code(ec), ec.message());
    return;
  }
  s.ticket = from.open_ticket();
  // Commit once this loop turn is over: a reader hands all the appends of
  // its read buffer over first, so they share one commit. A lone append
  // waits only for the end of the current handler.
  if (!commit_posted_) {
    commit_posted_ = true;
    asio::post(loop_, [this] { commit_step(); });
  }
}

void durable_pipeline::commit_step() {
  commit_posted_ = false;
  // In the sync mode the writer thread commits (an fsync must not hold the
  // loop); in the others a commit only writes to the page cache, and doing
  // it here saves two thread hand-offs per batch.
  if (log_->mode() == storage::durability::sync) return committer_->wake();
  // At most commit_step_records per step, the rest in the next loop turn:
  // the answers to the first ones are written (and the client sends more)
  // while the rest is committed, instead of everything waiting for one
  // large commit.
  if (committer_->commit_queued(commit_step_records)) {
    commit_posted_ = true;
    asio::post(loop_, [this] { commit_step(); });
  }
}

void durable_pipeline::release(std::uint32_t index) {
  slot& s = slots_[index];
  s.from.reset();
  s.route_keys.clear();
  free_slots_.push_back(index);
}

void durable_pipeline::drain() {
  {
    switchyard::lock_guard lock(mailbox_mu_);
    draining_.swap(mailbox_);  // both keep their capacity
  }
  const auto now = std::chrono::steady_clock::now();
  for (const auto& [token, result] : draining_) {
    const auto index = static_cast<std::uint32_t>(token);
    append_latency_.observe(now - slots_[index].queued_at);
    finish(slots_[index], result);
    release(index);
  }
  draining_.clear();
}

void durable_pipeline::finish(slot& s, const std::expected<storage::append_ack, std::error_code>& result) {
  const protocol::bytes_view payload{reinterpret_cast<const std::uint8_t*>(s.payload.data()), s.payload.size()};
  auto from = s.from.lock();
  if (result && ack_gate_) [[unlikely]] {
    if (const auto why = ack_gate_(); !why.empty()) {
      if (from) {
        if (!from->closed())
          from->send_error(s.request_id, protocol::errc::outcome_unknown,
                           "appended as seq " + std::to_string(result->seq) + " of '" + s.stream +
                               "', but not acknowledged: " + why);
        from->close_ticket(s.ticket);
      }
      return;
    }
  }
  if (result && !s.route_keys.empty()) {
    // A durable send: route and deliver now, then answer with the routes
    // and the position (the record is in the log even if no key had a
    // route).
    const log_position position{s.stream, result->seq, result->epoch};
    auto& keys = fanout_.key_scratch();
    keys.assign(s.route_keys.begin(), s.route_keys.end());
    if (send_router_) {
      // Across the cluster: the router answers and closes the ticket.
      if (from && from->closed()) from->close_ticket(s.ticket);
      send_router_(from && !from->closed() ? from.get() : nullptr, s.request_id, s.ticket, keys, payload, position,
                   s.deadline);
      return;
    }
    auto& gateways = fanout_.gateway_scratch();
    const auto routed = s.deadline == std::chrono::steady_clock::time_point{}
                            ? fanout_.send_to_users(keys, payload, &position, gateways)
                            : fanout_.send_offer(keys, payload, delivery_meta{s.deadline, 0, false},
                                                 std::chrono::steady_clock::now(), gateways, &position);
    if (from) {
      if (!from->closed() && s.request_id != 0)
        from->send(builder_.send_result(s.request_id, gateways, routed, result->seq, result->epoch));
      from->close_ticket(s.ticket);
    }
    return;
  }
  if (result && !s.channel.empty()) {
    // Durable now: deliver, even if the publisher has gone meanwhile.
    const log_position position{s.stream, result->seq, result->epoch};
    if (s.deadline == std::chrono::steady_clock::time_point{})
      fanout_.publish(s.channel, payload, &position);
    else
      fanout_.publish_expiring(s.channel, payload, s.deadline, std::chrono::steady_clock::now(), &position);
  }
  // Logged (in summary) whether or not the appender is still there.
  if (!result)
    refusals_.refused(*logger_, from ? from->id() : 0, s.stream, result.error());
  else
    refusals_.report_due(*logger_);
  if (!from) return;
  if (!from->closed()) {
    if (!result) {
      from->send_error(s.request_id, wire_code(result.error()), result.error().message());
    } else if (s.request_id != 0) {
      // A peer without "log" (a plain publish to a channel the server made
      // durable) gets the answer it knows: Ok, if it asked for publish acks.
      if (from->granted().sequence_log)
        from->send(builder_.appended(s.request_id, s.stream, result->seq, result->epoch));
      else if (from->granted().publish_ack)
        from->send(builder_.ok(s.request_id));
    }
  }
  from->close_ticket(s.ticket);
}

void durable_pipeline::report_refusals_due() {
  refusals_.report_due(*logger_);
  const auto now = std::chrono::steady_clock::now();
  if (now - trims_logged_at_ < std::chrono::seconds(1)) return;
  const auto s = stats();
  if (s.trimmed == trims_logged_) return;
  logger_->info("retention: {} records trimmed since the last report ({} in all, {} of them by commits)",
                s.trimmed - trims_logged_, s.trimmed, s.trimmed_in_commits);
  trims_logged_ = s.trimmed;
  trims_logged_at_ = now;
}

}  // namespace switchyard::broker
