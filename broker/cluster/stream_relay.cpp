#include "broker/cluster/stream_relay.hpp"

#include "broker/cluster/node_link_generated.h"
#include "broker/cluster/partition_map.hpp"
#include "broker/cluster/remote_peer.hpp"
#include "protocol/errc.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace switchyard::broker {

using protocol::errc;

// A request this node forwarded, waiting for its StreamAnswer.
struct stream_relay::pending {
  std::weak_ptr<peer> who;
  std::uint64_t request_id = 0;
  std::uint64_t peer_ticket = 0;
  std::string node;    // asked
  std::string stream;  // for the error's text
  clock::time_point deadline;
};

// A StreamList asked of every member: the answers so far, and who has not
// answered.
struct stream_relay::gather {
  std::weak_ptr<peer> who;
  std::uint64_t request_id = 0;
  std::uint64_t peer_ticket = 0;
  std::vector<std::string> waiting;  // members not answered yet ("" = this node)
  std::vector<std::vector<std::uint8_t>> answers;
  list_merge merge;
  clock::time_point deadline;
};

// A request waiting for its stream's partition to get a holder (this node
// asked etcd for it): from a client here (`who`), or from node `origin`.
struct stream_relay::held {
  std::weak_ptr<peer> who;
  std::uint64_t request_id = 0;
  std::uint64_t peer_ticket = 0;
  std::string origin;  // empty: a client of this node
  std::uint64_t origin_ticket = 0;
  std::uint32_t caps = 0;
  std::string stream;
  std::vector<std::uint8_t> frame;
  clock::time_point deadline;
};

stream_relay::stream_relay(asio::io_context& io, stream_relay_options options, node_bus& bus, bool has_log,
                           std::function<bool()> in_standing, std::function<void(std::uint32_t)> pin,
                           std::shared_ptr<spdlog::logger> logger)
    : io_(io),
      options_(options),
      has_log_(has_log),
      bus_(bus),
      in_standing_(std::move(in_standing)),
      pin_(std::move(pin)),
      logger_(std::move(logger)),
      parser_(options.max_frame),
      outboxes_(
          bus,
          [this](std::string_view node, outbox& box) {
            auto& b = box.b;
            const auto requests = b.CreateVector(box.requests);
            const auto answers = b.CreateVector(box.answers);
            return bus_.send_body(node, link::Body::StreamBatch, link::CreateStreamBatch(b, requests, answers).Union(),
                                  b);
          },
          [this] { schedule_flush(); }),
      timer_(io) {
  bus_.on_stream_message([this](remote_node& from, const link::LinkMessage& m) { on_message(from, m); });
}

stream_relay::~stream_relay() {
  *alive_ = false;
  bus_.on_stream_message(nullptr);
  // What still waits is answered: the node leaves the cluster, and a Ping
  // after these must not hang.
  for (auto& [ticket, p] : pending_)
    if (auto who = p.who.lock(); who && !who->closed()) {
      who->send_error(p.request_id, errc::outcome_unknown,
                      "this node left the cluster before node '" + p.node +
                          "' answered: the request may or may not have been carried out");
      who->close_ticket(p.peer_ticket);
    }
  for (auto& [partition, queue] : held_)
    for (auto& h : queue)
      if (auto who = h.who.lock(); who && !who->closed()) {
        who->send_error(h.request_id, errc::unavailable, "this node left the cluster");
        who->close_ticket(h.peer_ticket);
      }
  for (auto& [ticket, g] : gathers_)
    if (auto who = g.who.lock(); who && !who->closed()) {
      who->send_error(g.request_id, errc::unavailable, "this node left the cluster before the others listed theirs");
      who->close_ticket(g.peer_ticket);
    }
}

stream_relay::decision stream_relay::decide(std::string_view stream, std::uint32_t partition) const {
  using kind = decision::kind;
  const auto* view = bus_.view();
  if (!view || partition >= view->stream_holders.size())
    return {kind::unavailable, "this node has no cluster view yet"};
  const std::string& self = bus_.node_id();
  const std::string& holder = view->stream_holders[partition];
  if (holder == self) {
    // In standing, and in a view that lists this node's current
    // incarnation (the watch is ordered: such a view holds every takeover
    // made while this node was not a member).
    const auto* me = view->find(self);
    if (!in_standing_() || !me || me->incarnation != bus_.incarnation())
      return {kind::unavailable, "stream '" + std::string(stream) +
                                     "' is held here, and this node is out of standing (cut off from etcd) or "
                                     "rejoining"};
    const std::string& log = partition < view->stream_logs.size() ? view->stream_logs[partition] : options_.log_id;
    if (log.empty()) return {kind::take, {}};  // a takeover's: this log is recorded first
    if (log != options_.log_id)
      return {kind::unavailable, "stream '" + std::string(stream) + "' was held here in log " + log +
                                     ", not this node's log now: its streams are lost (cluster takeover " + self +
                                     " from another node while this one is stopped)"};
    return {kind::here, {}};
  }
  if (!holder.empty()) {
    if (view->find(holder) && bus_.has_link(holder)) return {kind::forward, holder};
    if (view->find(holder))
      return {kind::unavailable, "stream '" + std::string(stream) + "' is held by node '" + holder +
                                     "', which this node has no link to yet; try again"};
    return {kind::unavailable, "stream '" + std::string(stream) + "' is held by node '" + holder +
                                   "', which is not a member now (until it is back, or an operator declares its "
                                   "streams lost: switchyard-cli cluster takeover " +
                                   holder + ")"};
  }
  // Nobody holds the partition's streams yet: its owner takes them.
  const auto* owner = view->owner(partition);
  if (owner && owner->node_id == self) {
    if (in_standing_()) return {kind::take, {}};
    return {kind::unavailable, "this node owns the partition of stream '" + std::string(stream) +
                                   "' and is out of standing (cut off from etcd)"};
  }
  if (owner && bus_.has_link(owner->node_id)) return {kind::forward, owner->node_id};
  return {kind::unavailable,
          "stream '" + std::string(stream) + "': its partition " + std::to_string(partition) + " has no owner now"};
}

bool stream_relay::take(peer& from, std::uint64_t rid, std::string_view stream, protocol::bytes_view raw,
                        bool forwardable) {
  const auto partition = partition_map::partition_of(stream);
  auto d = decide(stream, partition);
  using kind = decision::kind;
  if (d.what == kind::here) return false;
  if (d.what == kind::forward && !forwardable)
    d = {kind::unavailable, "an offer with a stream is taken only by the node holding stream '" + std::string(stream) +
                                "' (node '" + d.node + "'), for now: send it there"};
  if (d.what == kind::forward && pending_.size() >= max_pending)
    d = {kind::unavailable, fmt::format("{} requests already wait for other nodes", max_pending)};
  switch (d.what) {
    case kind::here:
      return false;
    case kind::unavailable:
      ++counters_.unavailable;
      from.send_error(rid, errc::unavailable, d.node);
      return true;
    case kind::forward:
      forward(from, rid, from.open_ticket(), d.node, stream, raw);
      return true;
    case kind::take:
      if (hold(partition, from.weak_peer(), rid, 0, {}, 0, 0, stream, raw)) {
        held_[partition].back().peer_ticket = from.open_ticket();
        return true;
      }
      ++counters_.unavailable;
      from.send_error(rid, errc::unavailable, held_full_message());
      return true;
  }
  return false;
}

void stream_relay::list_everywhere(peer& from, std::uint64_t rid, protocol::bytes_view raw, list_merge merge) {
  if (pending_.size() + gathers_.size() >= max_pending) {
    ++counters_.unavailable;
    return from.send_error(rid, errc::unavailable,
                           fmt::format("{} requests already wait for other nodes", max_pending));
  }
  const auto ticket = ++next_ticket_;
  gather g;
  g.who = from.weak_peer();
  g.request_id = rid;
  g.peer_ticket = from.open_ticket();
  g.merge = std::move(merge);
  g.deadline = clock::now() + options_.forward_timeout;
  g.waiting.emplace_back();  // this node
  const auto caps = capability_bits(from.granted(), from.wants_offer_fields());
  if (const auto* view = bus_.view())
    for (const auto& m : view->members) {
      if (m.node_id == bus_.node_id() || !m.has_log) continue;
      auto* box = outboxes_.get(m.node_id, raw.size() + bus_.node_id().size() + 64);
      if (!box) {
        g.waiting.push_back(m.node_id);  // no link: the timeout names it
        continue;
      }
      auto& b = box->b;
      box->requests.push_back(link::CreateStreamRequest(b, b.CreateString(bus_.node_id()), ticket, b.CreateString(""),
                                                        b.CreateVector(raw.data(), raw.size()), caps));
      ++counters_.forwarded;
      g.waiting.push_back(m.node_id);
    }
  gathers_.emplace(ticket, std::move(g));
  arm_timer();
  // This node's own list (its answer may come at once).
  const auto refused =
      has_log_ ? run_here(raw, {}, caps,
                          [this, ticket](protocol::bytes_view frames) { gathered(ticket, {}, frames, nullptr); })
               : std::optional<refusal>{};
  if (!has_log_)
    gathered(ticket, {}, {}, nullptr);
  else if (refused)
    gathered(ticket, {}, {}, &*refused);
}

void stream_relay::gathered(std::uint64_t ticket, std::string_view node, protocol::bytes_view frames,
                            const refusal* error) {
  const auto it = gathers_.find(ticket);
  if (it == gathers_.end()) return;  // answered already
  auto& g = it->second;
  const auto w = std::find(g.waiting.begin(), g.waiting.end(), node);
  if (w == g.waiting.end()) return;
  g.waiting.erase(w);
  auto who = g.who.lock();
  if (error) {
    if (who && !who->closed()) {
      who->send_error(g.request_id, error->code, error->why);
      who->close_ticket(g.peer_ticket);
    }
    gathers_.erase(it);
    return;
  }
  if (!frames.empty()) g.answers.emplace_back(frames.begin(), frames.end());
  if (!g.waiting.empty()) return;
  auto done = std::move(g);
  gathers_.erase(it);
  if (!who) return;
  if (!who->closed()) {
    std::vector<protocol::bytes_view> views;
    for (const auto& a : done.answers) views.emplace_back(a.data(), a.size());
    done.merge(*who, views);
  }
  who->close_ticket(done.peer_ticket);
}

void stream_relay::forward(peer& from, std::uint64_t rid, std::uint64_t peer_ticket, std::string_view node,
                           std::string_view stream, protocol::bytes_view raw) {
  auto* box = outboxes_.get(node, raw.size() + stream.size() + bus_.node_id().size() + 64);
  if (!box) {
    ++counters_.unavailable;
    from.send_error(rid, errc::unavailable,
                    "cannot reach node '" + std::string(node) + "', which holds stream '" + std::string(stream) + "'");
    from.close_ticket(peer_ticket);
    return;
  }
  auto& b = box->b;
  const auto ticket = ++next_ticket_;
  box->requests.push_back(link::CreateStreamRequest(b, b.CreateString(bus_.node_id()), ticket, b.CreateString(stream),
                                                    b.CreateVector(raw.data(), raw.size()),
                                                    capability_bits(from.granted(), from.wants_offer_fields())));
  box->own.push_back(ticket);
  ++counters_.forwarded;
  pending_.emplace(ticket, pending{from.weak_peer(), rid, peer_ticket, std::string(node), std::string(stream),
                                   clock::now() + options_.forward_timeout});
  arm_timer();
}

void stream_relay::on_message(remote_node& from, const link::LinkMessage& m) {
  if (const auto* batch = m.body_as_StreamBatch()) return on_batch(from, *batch);
  if (const auto* r = m.body_as_StreamRequest()) return on_request(from, *r);
  if (const auto* a = m.body_as_StreamAnswer()) return on_answer(from, *a);
}

void stream_relay::on_batch(remote_node& from, const link::StreamBatch& batch) {
  if (const auto* requests = batch.requests())
    for (const auto* r : *requests) on_request(from, *r);
  if (const auto* answers = batch.answers())
    for (const auto* a : *answers) on_answer(from, *a);
}

void stream_relay::settle_refused() {
  // Taken first: answering may send another request.
  auto refused = std::move(outboxes_.refused());
  outboxes_.refused().clear();
  for (const auto ticket : refused) {
    const auto it = pending_.find(ticket);
    if (it == pending_.end()) continue;
    auto p = std::move(it->second);
    pending_.erase(it);
    auto who = p.who.lock();
    if (!who || who->closed()) continue;
    ++counters_.unavailable;
    who->send_error(p.request_id, errc::unavailable,
                    "cannot reach node '" + p.node + "', which holds stream '" + p.stream + "'");
    who->close_ticket(p.peer_ticket);
  }
}

void stream_relay::schedule_flush() {
  if (flush_posted_) return;
  flush_posted_ = true;
  asio::post(io_, [this, alive = alive_] {
    if (!*alive) return;
    flush_posted_ = false;
    flush();
  });
}

void stream_relay::flush() {
  outboxes_.flush();
  settle_refused();
}

void stream_relay::on_request(remote_node& from, const link::StreamRequest& r) {
  const std::string_view origin = from.member().node_id;
  if (r.stream() && r.frame() && r.stream()->size() == 0 && has_log_) {
    // A request about no stream (a StreamList asked of every member): runs
    // here, listing what this node holds (the runner takes no other).
    const protocol::bytes_view frame{r.frame()->data(), r.frame()->size()};
    const auto refused = run_here(
        frame, {}, r.caps(), [this, origin = std::string(origin), ticket = r.ticket()](protocol::bytes_view frames) {
          answer(origin, ticket, frames);
        });
    if (refused) answer_error(origin, r.ticket(), refused->code, refused->why);
    return;
  }
  if (!r.stream() || !r.frame() || r.stream()->size() == 0) {
    logger_->warn("cluster: a StreamRequest without its stream or frame from node '{}'", origin);
    return answer_error(origin, r.ticket(), errc::bad_request, "a malformed request between nodes");
  }
  if (!has_log_)
    return answer_error(origin, r.ticket(), errc::unavailable,
                        "node '" + bus_.node_id() + "' has no sequence log (--data-dir): it holds no streams");
  const std::string_view stream = r.stream()->string_view();
  const protocol::bytes_view frame{r.frame()->data(), r.frame()->size()};
  const auto partition = partition_map::partition_of(stream);
  const auto d = decide(stream, partition);
  using kind = decision::kind;
  if (d.what == kind::here) {
    const auto refused = run_here(frame, stream, r.caps(),
                                  [this, origin = std::string(origin), ticket = r.ticket()](
                                      protocol::bytes_view frames) { answer(origin, ticket, frames); });
    if (refused) answer_error(origin, r.ticket(), refused->code, refused->why);
    return;
  }
  if (d.what == kind::take) {
    if (!hold(partition, {}, 0, 0, origin, r.ticket(), r.caps(), stream, frame))
      answer_error(origin, r.ticket(), errc::unavailable, held_full_message());
    return;
  }
  // Not here: the origin's view differs from ours (it is answered, never
  // passed on: one hop at most).
  ++counters_.unavailable;
  const std::string why = d.what == kind::forward ? "stream '" + std::string(stream) + "' is not held by node '" +
                                                        bus_.node_id() + "' (the cluster's view is changing; try again)"
                                                  : d.node;
  answer_error(origin, r.ticket(), errc::unavailable, why);
}

std::string stream_relay::held_full_message() const {
  return fmt::format("{} requests (or {} MiB of them) already wait here for a holder of their stream", max_pending,
                     max_held_bytes >> 20);
}

bool stream_relay::hold(std::uint32_t partition, std::weak_ptr<peer> who, std::uint64_t rid, std::uint64_t peer_ticket,
                        std::string_view origin, std::uint64_t origin_ticket, std::uint32_t caps,
                        std::string_view stream, protocol::bytes_view frame) {
  if (held_count_ >= max_pending || held_bytes_ + frame.size() > max_held_bytes) return false;
  held h;
  h.who = std::move(who);
  h.request_id = rid;
  h.peer_ticket = peer_ticket;
  h.origin = origin;
  h.origin_ticket = origin_ticket;
  h.caps = caps;
  h.stream = stream;
  h.frame.assign(frame.begin(), frame.end());
  h.deadline = clock::now() + options_.forward_timeout;
  held_bytes_ += h.frame.size();
  held_[partition].push_back(std::move(h));
  ++held_count_;
  pin_(partition);
  arm_timer();
  return true;
}

std::optional<stream_relay::refusal> stream_relay::run_here(protocol::bytes_view frame, std::string_view stream,
                                                            std::uint32_t caps,
                                                            std::function<void(protocol::bytes_view frames)> done) {
  if (running_.size() >= max_pending)
    return refusal{errc::unavailable, fmt::format("{} requests of other nodes already run here", max_pending)};
  auto parsed = parser_.next(frame);
  if (!parsed || !*parsed || (*parsed)->size != frame.size())
    return refusal{errc::bad_request, "a malformed request frame"};
  bool offer_fields = false;
  const auto caps_set = capabilities_of(caps, offer_fields);
  const auto id = ++next_running_;
  auto p = std::make_shared<remote_peer>(id, answers_, caps_set, offer_fields,
                                         [this, id, done = std::move(done)](remote_peer& finished) {
                                           done(finished.answers());
                                           finished.release_answers();
                                           // Not destroyed from within its own call.
                                           asio::post(io_, [this, alive = alive_, id] {
                                             if (*alive) running_.erase(id);
                                           });
                                         });
  running_.emplace(id, p);
  // Only a request about `stream` runs (the runner checks the frame names it).
  if (!runner_ || !runner_(*p, *(*parsed)->frame, stream)) {
    running_.erase(id);
    return refusal{errc::bad_request, "not a request about stream '" + std::string(stream) + "'"};
  }
  ++counters_.served;
  p->finish();
  return std::nullopt;
}

void stream_relay::answer(std::string_view origin, std::uint64_t ticket, protocol::bytes_view frames) {
  // A request is answered with about one frame, and one --max-frame
  // crosses the link (NATS's max_payload was checked against it at start).
  if (frames.size() > options_.max_frame)
    return answer_error(origin, ticket, errc::limit_exceeded,
                        "the answer is larger than --max-frame can carry between nodes; ask for less");
  // No link (the origin gone) or refused by NATS: the origin answers
  // outcome_unknown at its deadline.
  auto* box = outboxes_.get(origin, frames.size() + 64);
  if (!box) return;
  auto& b = box->b;
  box->answers.push_back(link::CreateStreamAnswer(b, ticket, b.CreateVector(frames.data(), frames.size())));
}

void stream_relay::answer_error(std::string_view origin, std::uint64_t ticket, errc code, std::string_view why) {
  auto* box = outboxes_.get(origin, why.size() + 64);
  if (!box) return;
  auto& b = box->b;
  box->answers.push_back(
      link::CreateStreamAnswer(b, ticket, 0, static_cast<std::uint16_t>(code), b.CreateString(why.data(), why.size())));
}

void stream_relay::on_answer(remote_node& from, const link::StreamAnswer& a) {
  if (gathers_.contains(a.ticket())) {
    const auto* frames = a.frames();
    const protocol::bytes_view bytes =
        frames ? protocol::bytes_view{frames->data(), frames->size()} : protocol::bytes_view{};
    if (const auto* error = a.error()) {
      const auto code = a.code() != 0 && a.code() <= static_cast<std::uint16_t>(protocol::wire::ErrorCode::MAX)
                            ? static_cast<errc>(a.code())
                            : errc::internal;
      const refusal r{code, "node '" + from.member().node_id + "': " + std::string(error->string_view())};
      return gathered(a.ticket(), from.member().node_id, {}, &r);
    }
    return gathered(a.ticket(), from.member().node_id, bytes, nullptr);
  }
  const auto it = pending_.find(a.ticket());
  if (it == pending_.end() || it->second.node != from.member().node_id) return;  // answered at its deadline already
  auto p = std::move(it->second);
  pending_.erase(it);
  auto who = p.who.lock();
  if (!who || who->closed()) return;
  if (const auto* error = a.error()) {
    const auto code = a.code() != 0 && a.code() <= static_cast<std::uint16_t>(protocol::wire::ErrorCode::MAX)
                          ? static_cast<errc>(a.code())
                          : errc::internal;
    if (code == errc::unavailable) ++counters_.unavailable;
    who->send_error(p.request_id, code, error->string_view());
    who->close_ticket(p.peer_ticket);
    return;
  }
  const auto* frames = a.frames();
  deliver_frames(*who, p.peer_ticket,
                 frames ? protocol::bytes_view{frames->data(), frames->size()} : protocol::bytes_view{});
}

void stream_relay::deliver_frames(peer& to, std::uint64_t peer_ticket, protocol::bytes_view all) {
  // Each frame length-prefixed, as written to the client.
  std::size_t at = 0;
  while (all.size() - at >= protocol::frame_header_size) {
    const std::size_t total = protocol::frame_header_size + protocol::read_frame_length(all.data() + at);
    if (total > all.size() - at) break;
    to.send(all.subspan(at, total));
    at += total;
  }
  to.close_ticket(peer_ticket);
}

void stream_relay::refuse(held& h, std::string_view why) {
  ++counters_.unavailable;
  if (!h.origin.empty()) return answer_error(h.origin, h.origin_ticket, errc::unavailable, why);
  if (auto who = h.who.lock(); who && !who->closed()) {
    who->send_error(h.request_id, errc::unavailable, why);
    who->close_ticket(h.peer_ticket);
  }
}

void stream_relay::release(std::uint32_t partition) {
  auto it = held_.find(partition);
  if (it == held_.end()) return;
  auto queue = std::move(it->second);
  held_.erase(it);
  held_count_ -= queue.size();
  for (const auto& h : queue) held_bytes_ -= h.frame.size();
  using kind = decision::kind;
  for (auto& h : queue) {
    const auto d = decide(h.stream, partition);
    if (d.what == kind::take) {  // still waiting (etcd not asked yet, or not answered)
      held_bytes_ += h.frame.size();
      held_[partition].push_back(std::move(h));
      ++held_count_;
      continue;
    }
    if (!h.origin.empty()) {
      if (d.what == kind::here) {
        const auto refused = run_here(h.frame, h.stream, h.caps,
                                      [this, origin = h.origin, ticket = h.origin_ticket](protocol::bytes_view frames) {
                                        answer(origin, ticket, frames);
                                      });
        if (refused) refuse(h, refused->why);
      } else {
        refuse(h, d.what == kind::forward ? "stream '" + h.stream + "' is held by node '" + d.node +
                                                "' (the cluster's view changed; try again)"
                                          : d.node);
      }
      continue;
    }
    auto who = h.who.lock();
    if (!who || who->closed()) continue;
    if (d.what == kind::here) {
      // Run as a forwarded request is: the client's ticket closes once the
      // request is answered (a Ping after it waits for the fsync too).
      const auto refused = run_here(h.frame, h.stream, capability_bits(who->granted(), who->wants_offer_fields()),
                                    [w = h.who, ticket = h.peer_ticket, this](protocol::bytes_view frames) {
                                      if (auto p = w.lock(); p && !p->closed()) deliver_frames(*p, ticket, frames);
                                    });
      if (refused) refuse(h, refused->why);
    } else if (d.what == kind::forward) {
      forward(*who, h.request_id, h.peer_ticket, d.node, h.stream, h.frame);
    } else {
      refuse(h, d.node);
    }
  }
}

void stream_relay::view_changed() {
  const auto* view = bus_.view();
  if (view && view->stream_holders.size() == partition_map::partition_count) {
    std::size_t mine = 0;
    std::vector<std::uint32_t> lost;
    held_before_.resize(partition_map::partition_count);
    for (std::uint32_t p = 0; p < partition_map::partition_count; ++p) {
      const auto& h = view->stream_holders[p];
      const bool ours = h == bus_.node_id();
      mine += ours;
      // Another holder now, or none (the key vanished: nothing here
      // deletes one): either way this log's streams are not the cluster's.
      if (held_before_[p] && !ours) lost.push_back(p);
      held_before_[p] = ours;
    }
    counters_.held_partitions = mine;
    if (!lost.empty() && taken_over_) taken_over_(lost);
  }
  // An outbox made for a node that left, or for an earlier incarnation of
  // it, is not sent (link_outboxes::get): its requests are answered unavailable.
  outboxes_.drop_stale(view);
  settle_refused();
  std::vector<std::uint32_t> partitions;
  for (const auto& [p, queue] : held_) partitions.push_back(p);
  for (const auto p : partitions) release(p);
  // Requests to a node that left: no answer can come.
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (view && view->find(it->second.node)) {
      ++it;
      continue;
    }
    if (auto who = it->second.who.lock(); who && !who->closed()) {
      ++counters_.unknown;
      who->send_error(it->second.request_id, errc::outcome_unknown,
                      "node '" + it->second.node + "' left the cluster before it answered (stream '" +
                          it->second.stream + "'): the request may or may not have been carried out");
      who->close_ticket(it->second.peer_ticket);
    }
    it = pending_.erase(it);
  }
}

stream_relay_counters stream_relay::counters() const {
  auto c = counters_;
  c.pending = pending_.size() + gathers_.size() + held_count_;
  return c;
}

void stream_relay::arm_timer() {
  if (timer_armed_ || (pending_.empty() && gathers_.empty() && held_count_ == 0)) return;
  timer_armed_ = true;
  timer_.expires_after(std::max(options_.forward_timeout / 4, std::chrono::milliseconds(25)));
  timer_.async_wait([this, alive = alive_](const asio_error_code& ec) {
    if (!*alive) return;
    timer_armed_ = false;
    if (ec) return;
    on_timer();
    arm_timer();
  });
}

void stream_relay::on_timer() {
  const auto now = clock::now();
  for (auto it = gathers_.begin(); it != gathers_.end();) {
    auto& g = it->second;
    if (now < g.deadline) {
      ++it;
      continue;
    }
    if (auto who = g.who.lock(); who && !who->closed()) {
      std::string nodes;
      for (const auto& n : g.waiting) nodes += (nodes.empty() ? "'" : ", '") + (n.empty() ? bus_.node_id() : n) + "'";
      ++counters_.unavailable;
      who->send_error(g.request_id, errc::unavailable,
                      fmt::format("the stream list: node {} did not answer within {} ms; retry", nodes,
                                  options_.forward_timeout.count()));
      who->close_ticket(g.peer_ticket);
    }
    it = gathers_.erase(it);
  }
  for (auto it = pending_.begin(); it != pending_.end();) {
    auto& p = it->second;
    if (now < p.deadline) {
      ++it;
      continue;
    }
    if (auto who = p.who.lock(); who && !who->closed()) {
      ++counters_.unknown;
      who->send_error(p.request_id, errc::outcome_unknown,
                      fmt::format("no answer from node '{}' (stream '{}') within {} ms: the request may or may not "
                                  "have been carried out",
                                  p.node, p.stream, options_.forward_timeout.count()));
      who->close_ticket(p.peer_ticket);
    }
    it = pending_.erase(it);
  }
  for (auto it = held_.begin(); it != held_.end();) {
    auto& queue = it->second;
    while (!queue.empty() && now >= queue.front().deadline) {
      refuse(queue.front(), "stream '" + queue.front().stream +
                                "': etcd did not name a holder for its partition within " +
                                std::to_string(options_.forward_timeout.count()) + " ms");
      held_bytes_ -= queue.front().frame.size();
      queue.pop_front();
      --held_count_;
    }
    it = queue.empty() ? held_.erase(it) : std::next(it);
  }
}

}  // namespace switchyard::broker
