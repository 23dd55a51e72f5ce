#include "broker/cluster/node_bus.hpp"

#include "broker/cluster/node_link_generated.h"
#include "protocol/channel_name.hpp"
#include "protocol/frame_parser.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace switchyard::broker {

namespace {
using clock = std::chrono::steady_clock;

std::uint32_t get_u32(const std::uint8_t* p) {
  return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
         static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
}
}  // namespace

node_bus::node_bus(asio::io_context& io, node_bus_options options, channel_table& channels, fanout& fan,
                   std::shared_ptr<spdlog::logger> logger)
    : io_(io),
      options_(std::move(options)),
      channels_(channels),
      fanout_(fan),
      logger_(std::move(logger)),
      builder_(std::make_unique<flatbuffers::FlatBufferBuilder>(4096)),
      deadline_timer_(io),
      resync_timer_(io) {}

node_bus::~node_bus() { stop(); }

std::string node_bus::subject_of(std::string_view node_id) const {
  return options_.cluster_name + ".node." + std::string(node_id);
}

void node_bus::start() {
  cluster::nats_link_options o;
  o.servers = options_.nats_servers;
  o.name = "switchyard " + options_.cluster_name + "/" + options_.node_id;
  // At least one message of the largest size the link carries.
  o.queue_max_bytes =
      std::max<std::size_t>(options_.nats_queue_bytes, std::size_t{options_.max_frame} + envelope_bytes);
  link_ = std::make_unique<cluster::nats_link>(io_.get_executor(), std::move(o));
  link_->set_status_handler([this](cluster::link_state s) {
    if (s == cluster::link_state::connected) {
      logger_->info("cluster: NATS connected ({})", link_->stats().server_url);
      // Whatever was sent while reconnecting may be gone: exchange the
      // whole interest with every peer again.
      for (auto& [id, p] : peers_) send_sync(*p, true);
    } else if (!stopped_) {
      logger_->warn("cluster: NATS {}", cluster::to_string(s));
    }
  });
  if (auto started = link_->start(); !started)
    throw std::runtime_error("cluster: cannot connect to NATS (" + options_.nats_servers.front() +
                             (options_.nats_servers.size() > 1 ? ", ..." : "") + "): " + started.error().message());
  const auto max_payload = static_cast<std::uint64_t>(link_->max_payload());
  if (max_payload < std::uint64_t{options_.max_frame} + envelope_bytes)
    throw std::runtime_error("cluster: NATS's max_payload (" + std::to_string(max_payload) +
                             " bytes) cannot carry a frame of --max-frame (" + std::to_string(options_.max_frame) +
                             " bytes) plus " + std::to_string(envelope_bytes) +
                             " bytes of envelope: raise max_payload in nats-server's configuration (e.g. "
                             "\"max_payload: 2MB\") or lower --max-frame");
  options_.batch_bytes = std::min<std::size_t>(options_.batch_bytes, max_payload - envelope_bytes);
  std::error_code ready_ec;
  bool ready = false;
  auto sub = link_->subscribe(
      subject_of(options_.node_id), [this](const cluster::inbound_message& m) { on_message(m); },
      [&](std::error_code ec) {
        ready_ec = ec;
        ready = true;
      });
  if (!sub) throw std::runtime_error("cluster: cannot subscribe on NATS: " + sub.error().message());
  // The loop is not running yet: run it until the server confirmed the SUB.
  // (A work guard: an io_context out of work stops and runs nothing more.)
  {
    auto guard = asio::make_work_guard(io_);
    const auto give_up = clock::now() + std::chrono::seconds(10);
    while (!ready && clock::now() < give_up) io_.run_one_for(std::chrono::milliseconds(100));
  }
  io_.restart();
  if (!ready) throw std::runtime_error("cluster: NATS did not confirm the subscription within 10 s");
  if (ready_ec) throw std::runtime_error("cluster: NATS refused the subscription: " + ready_ec.message());
}

void node_bus::stop() {
  if (stopped_) return;
  stopped_ = true;
  deadline_timer_.cancel();
  resync_timer_.cancel();
  if (link_) link_->stop();
}

std::vector<std::string> node_bus::peer_ids() const {
  std::vector<std::string> ids;
  ids.reserve(peers_.size());
  for (const auto& [id, p] : peers_) ids.push_back(id);
  return ids;
}

void node_bus::apply_view(std::shared_ptr<const cluster_view> view, std::int64_t own_incarnation) {
  const bool restarted = own_incarnation != incarnation_;
  if (restarted && !first_view_) {
    // This node is a new incarnation (its lease lapsed): what the others
    // sent the old one is lost; every link starts afresh.
    logger_->warn("cluster: this node is now incarnation {}; every link starts afresh", own_incarnation);
    if (link_loss_) link_loss_(1);
  }
  first_view_ = false;
  incarnation_ = own_incarnation;
  view_ = std::move(view);
  for (auto it = peers_.begin(); it != peers_.end();) {
    const auto* m = view_->find(it->first);
    if (m && m->incarnation == it->second->member().incarnation && !restarted) {
      ++it;
      continue;
    }
    logger_->info("cluster: link to node '{}' (incarnation {}) ends", it->first, it->second->member().incarnation);
    // A node that comes back as a new incarnation is still waited for.
    drop_peer(it++, /*gone=*/m == nullptr);
  }
  for (const auto& m : view_->members) {
    if (m.node_id == options_.node_id || peers_.contains(m.node_id)) continue;
    auto node = std::make_unique<remote_node>(m, relaying_, options_.batch_bytes, [this](remote_node& n, bool full) {
      if (full)
        send_batch(n);
      else
        schedule_flush();
    });
    auto& p = *node;
    peers_.emplace(m.node_id, std::move(node));
    joined_at_[m.node_id] = clock::now();
    interest_.node_added(m.node_id);
    logger_->info("cluster: link to node '{}' at {} (incarnation {}) starts", m.node_id, m.address, m.incarnation);
    send_sync(p, true);
  }
  arm_resync_timer();
}

void node_bus::drop_peer(std::map<std::string, std::unique_ptr<remote_node>, std::less<>>::iterator it, bool gone) {
  remote_node& p = *it->second;
  for (const auto& pattern : p.patterns()) channels_.unsubscribe(pattern, &p);
  const auto& c = p.counters();
  departed_.messages_out += c.messages_out;
  departed_.messages_in += c.messages_in;
  departed_.records_out += c.records_out;
  departed_.records_in += c.records_in;
  departed_.lost_in += c.lost_in;
  departed_.failed_out += c.failed_out;
  if (gone) {
    done_scratch_.clear();
    interest_.node_gone(it->first, done_scratch_);
    answer(done_scratch_);
  }
  joined_at_.erase(it->first);
  peers_.erase(it);
}

void node_bus::local_subscribe(std::string_view pattern) {
  if (interest_.add_local(pattern, peer_ids(), clock::now() + options_.interest_timeout)) {
    schedule_flush();
    arm_deadline_timer();
  }
}

void node_bus::local_unsubscribe(std::string_view pattern) {
  done_scratch_.clear();
  if (interest_.remove_local(pattern, done_scratch_)) schedule_flush();
  answer(done_scratch_);
}

bool node_bus::answer_when_confirmed(std::string_view pattern, peer& from, std::uint64_t rid) {
  if (!interest_.is_pending(pattern)) return false;
  // A ticket keeps the Ping flush idiom: a Ping after this Subscribe is
  // answered after its Ok.
  return interest_.wait(pattern, {from.weak_peer(), rid, from.open_ticket()});
}

void node_bus::answer(std::vector<channel_interest::waiter>& done) {
  for (auto& w : done) {
    auto p = w.who.lock();
    if (!p || p->closed()) continue;
    if (w.request_id != 0) p->send(ok_builder_.ok(w.request_id));
    p->close_ticket(w.ticket);
  }
  done.clear();
}

void node_bus::arm_deadline_timer() {
  if (timer_armed_) return;
  const auto next = interest_.next_deadline();
  if (!next) return;
  timer_armed_ = true;
  deadline_timer_.expires_at(*next);
  deadline_timer_.async_wait([this](const asio_error_code& ec) {
    timer_armed_ = false;
    if (ec || stopped_) return;
    std::vector<std::string> silent;
    done_scratch_.clear();
    interest_.expire(clock::now(), done_scratch_, silent);
    if (!done_scratch_.empty() || !silent.empty()) {
      ++interest_timeouts_;
      std::string names;
      for (const auto& n : silent) names += (names.empty() ? "'" : ", '") + n + "'";
      logger_->warn("cluster: no interest ack from {} within {} ms; answering {} subscribe(s) and resyncing", names,
                    options_.interest_timeout.count(), done_scratch_.size());
      for (const auto& n : silent)
        if (auto it = peers_.find(n); it != peers_.end() && it->second->sync_out_ticket == 0)
          send_sync(*it->second, true);
    }
    answer(done_scratch_);
    arm_deadline_timer();
  });
}

void node_bus::arm_resync_timer() {
  if (resync_armed_ || stopped_ || peers_.empty()) return;
  resync_armed_ = true;
  resync_timer_.expires_after(options_.interest_timeout);
  resync_timer_.async_wait([this](const asio_error_code& ec) {
    resync_armed_ = false;
    if (ec || stopped_) return;
    const auto now = clock::now();
    for (auto& [id, p] : peers_)
      if (p->sync_out_ticket != 0 && now - p->sync_out_at >= options_.interest_timeout) {
        logger_->info("cluster: node '{}' did not acknowledge our interest; sending it again", id);
        send_sync(*p, p->sync_out_reply_wanted || !p->synced_in);
      }
    arm_resync_timer();
  });
}

bool node_bus::synced() const {
  const auto now = clock::now();
  for (const auto& [id, p] : peers_)
    if (!p->synced_in && now - joined_at_.at(id) < options_.interest_timeout) return false;
  return true;
}

void node_bus::schedule_flush() {
  if (flush_posted_ || stopped_) return;
  flush_posted_ = true;
  asio::post(io_, [this] {
    flush_posted_ = false;
    flush();
  });
}

namespace {
// Splits `patterns` into runs of at most `bytes` of text (at least one
// pattern each): the [begin, end) index pairs; one empty run for none.
std::vector<std::pair<std::size_t, std::size_t>> parts_of(const std::vector<std::string>& patterns, std::size_t bytes) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  std::size_t begin = 0, size = 0;
  for (std::size_t i = 0; i < patterns.size(); ++i) {
    if (i > begin && size + patterns[i].size() + 8 > bytes) {
      out.emplace_back(begin, i);
      begin = i;
      size = 0;
    }
    size += patterns[i].size() + 8;
  }
  if (begin < patterns.size() || out.empty()) out.emplace_back(begin, patterns.size());
  return out;
}

}  // namespace

void node_bus::flush() {
  if (stopped_) return;
  // The interest delta first: a subscriber's Subscribe may wait for it.
  if (const auto ticket = next_ticket_ + 1; interest_.take_delta(ticket, add_scratch_, remove_scratch_)) {
    next_ticket_ = ticket;
    // Additions and removals each in parts; only the very last part of
    // the change carries the ticket.
    using parts = std::vector<std::pair<std::size_t, std::size_t>>;
    const parts adds = add_scratch_.empty() ? parts{} : parts_of(add_scratch_, part_bytes);
    const parts removes = remove_scratch_.empty() ? parts{} : parts_of(remove_scratch_, part_bytes);
    for (auto& [id, p] : peers_) {
      const std::size_t total = adds.size() + removes.size();
      std::size_t sent = 0;
      auto& b = *builder_;
      for (const auto& [begin, end] : adds) {
        b.Clear();
        const bool last = ++sent == total;
        send(*p, link::Body::Interest,
             link::CreateInterest(b,
                                  b.CreateVectorOfStrings(add_scratch_.begin() + static_cast<std::ptrdiff_t>(begin),
                                                          add_scratch_.begin() + static_cast<std::ptrdiff_t>(end)),
                                  0, last ? ticket : 0));
      }
      for (const auto& [begin, end] : removes) {
        b.Clear();
        const bool last = ++sent == total;
        send(*p, link::Body::Interest,
             link::CreateInterest(b, 0,
                                  b.CreateVectorOfStrings(remove_scratch_.begin() + static_cast<std::ptrdiff_t>(begin),
                                                          remove_scratch_.begin() + static_cast<std::ptrdiff_t>(end)),
                                  last ? ticket : 0));
      }
    }
  }
  for (auto& [id, p] : peers_)
    if (!p->batch().empty()) send_batch(*p);
}

bool node_bus::send_body(std::string_view node_id, link::Body type, flatbuffers::Offset<void> body) {
  return send_body(node_id, type, body, *builder_);
}

bool node_bus::send_body(std::string_view node_id, link::Body type, flatbuffers::Offset<void> body,
                         flatbuffers::FlatBufferBuilder& in) {
  const auto it = peers_.find(node_id);
  if (it == peers_.end() || stopped_) return false;
  return send_in(in, *it->second, type, body);
}

bool node_bus::send_in(flatbuffers::FlatBufferBuilder& b, remote_node& to, link::Body type,
                       flatbuffers::Offset<void> body) {
  const auto from = b.CreateString(options_.node_id);
  link::LinkMessageBuilder m(b);
  m.add_from_node(from);
  m.add_incarnation(incarnation_);
  m.add_seq(to.next_out());
  m.add_body_type(type);
  m.add_body(body);
  m.add_to_incarnation(to.member().incarnation);
  b.Finish(m.Finish(), link::LinkMessageIdentifier());
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(b.GetBufferPointer()), b.GetSize());
  ++to.counters().messages_out;
  if (auto sent = link_->publish(subject_of(to.member().node_id), bytes); !sent) {
    // The receiver sees the gap in the numbering.
    ++to.counters().failed_out;
    logger_->debug("cluster: a message to node '{}' was not sent: {}", to.member().node_id, sent.error().message());
    return false;
  }
  return true;
}

void node_bus::send_batch(remote_node& to) {
  auto& b = *builder_;
  b.Clear();
  const auto& batch = to.batch();
  const auto records = b.CreateVector(reinterpret_cast<const std::uint8_t*>(batch.data()), batch.size());
  to.counters().records_out += to.batched_records();
  send(to, link::Body::Deliveries, link::CreateDeliveries(b, records));
  to.batch_sent();
}

void node_bus::send_sync(remote_node& to, bool reply_wanted) {
  const auto ticket = ++next_ticket_;
  const auto patterns = interest_.patterns();
  const auto parts = parts_of(patterns, part_bytes);
  auto& b = *builder_;
  for (std::uint32_t i = 0; i < parts.size(); ++i) {
    b.Clear();
    const bool last = i + 1 == parts.size();
    send(to, link::Body::InterestSync,
         link::CreateInterestSync(
             b,
             b.CreateVectorOfStrings(patterns.begin() + static_cast<std::ptrdiff_t>(parts[i].first),
                                     patterns.begin() + static_cast<std::ptrdiff_t>(parts[i].second)),
             last ? ticket : 0, reply_wanted, i, last));
  }
  to.sync_out_ticket = ticket;
  to.sync_out_at = clock::now();
  to.sync_out_reply_wanted = reply_wanted;
}

void node_bus::send_ack(remote_node& to, std::uint64_t ticket, bool sync) {
  auto& b = *builder_;
  b.Clear();
  send(to, link::Body::InterestAck, link::CreateInterestAck(b, ticket, sync));
}

void node_bus::count_malformed(std::string_view why) {
  ++dropped_malformed_;
  const auto now = clock::now();
  if (now - malformed_logged_ < std::chrono::seconds(1)) return;
  malformed_logged_ = now;
  logger_->warn("cluster: dropped a malformed message from another node: {} ({} so far)", why, dropped_malformed_);
}

void node_bus::on_message(const cluster::inbound_message& m) {
  if (stopped_) return;
  const auto* data = reinterpret_cast<const std::uint8_t*>(m.payload.data());
  // The verifier checks the size before it reads anything (an empty
  // payload may have no buffer at all).
  if (m.payload.size() < 8) return count_malformed("too short for a LinkMessage");
  flatbuffers::Verifier verifier(data, m.payload.size());
  if (!link::VerifyLinkMessageBuffer(verifier)) return count_malformed("not a LinkMessage");
  const auto* msg = link::GetLinkMessage(data);
  const auto it = peers_.find(msg->from_node()->str());
  if (it == peers_.end() || it->second->member().incarnation != msg->incarnation() ||
      msg->to_incarnation() != incarnation_) {
    // Another incarnation's (ours or theirs), or a node not in our view.
    ++dropped_unknown_;
    return;
  }
  // A body type without its body (the verifier lets it pass): malformed,
  // and its number taken for nothing.
  if (msg->body_type() == link::Body::NONE || !msg->body()) return count_malformed("a message without its body");
  remote_node& from = *it->second;
  auto& c = from.counters();
  // The numbering: a gap is lost messages; an old number a duplicate; a
  // jump past max_seq_jump is not believed.
  auto& expected = from.expected_in();
  const auto seq = msg->seq();
  if (seq == 0 || (expected != 0 && seq > expected && seq - expected > max_seq_jump) ||
      (expected == 0 && seq > max_seq_jump))
    return count_malformed("an implausible sequence number");
  if (expected != 0 && seq < expected) return;
  ++c.messages_in;
  if (expected != 0 && seq > expected) {
    const auto lost = seq - expected;
    c.lost_in += lost;
    lost_in_ += lost;
    logger_->warn("cluster: {} message(s) from node '{}' lost in transit; resyncing its interest", lost,
                  from.member().node_id);
    if (link_loss_) link_loss_(lost);
    // Our own sync (reply wanted) brings its whole interest back; one at
    // a time: while one is unacknowledged, the resync timer resends it.
    if (from.sync_out_ticket == 0) send_sync(from, true);
  } else if (expected == 0 && seq > 1) {
    // The first message we take from this incarnation is not its first:
    // what came before was dropped (we did not know it yet) or lost.
    if (from.sync_out_ticket == 0) send_sync(from, true);
  }
  expected = seq + 1;

  switch (msg->body_type()) {
    case link::Body::Interest: {
      const auto* in = msg->body_as_Interest();
      if (!in) return count_malformed("an Interest without its body");
      if (const auto* add = in->add())
        for (const auto* s : *add) {
          const auto pattern = s->string_view();
          if (!protocol::is_valid_pattern(pattern)) return count_malformed("an invalid pattern");
          if (from.patterns().size() >= max_remote_patterns) return count_malformed("over max_remote_patterns");
          if (from.patterns().emplace(pattern).second) channels_.subscribe(pattern, &from);
        }
      if (const auto* remove = in->remove())
        for (const auto* s : *remove)
          if (from.patterns().erase(s->str()) != 0) channels_.unsubscribe(s->string_view(), &from);
      if (in->ticket() != 0) send_ack(from, in->ticket(), false);
      break;
    }
    case link::Body::InterestSync: {
      const auto* in = msg->body_as_InterestSync();
      if (!in) return count_malformed("an InterestSync without its body");
      auto& staged = from.sync_in_parts;
      if (in->part() == 0) {
        staged.clear();
      } else if (in->part() != from.sync_in_next_part) {
        staged.clear();  // a part missed (the gap above asked for a resync)
        from.sync_in_next_part = 0;
        break;
      }
      if (const auto* patterns = in->patterns())
        for (const auto* s : *patterns) {
          if (!protocol::is_valid_pattern(s->string_view())) return count_malformed("an invalid pattern");
          if (staged.size() >= max_remote_patterns) return count_malformed("over max_remote_patterns");
          staged.insert(s->str());
        }
      from.sync_in_next_part = in->part() + 1;
      if (!in->last()) break;
      for (const auto& p : from.patterns())
        if (!staged.contains(p)) channels_.unsubscribe(p, &from);
      for (const auto& p : staged)
        if (!from.patterns().contains(p)) channels_.subscribe(p, &from);
      from.patterns() = std::move(staged);
      staged.clear();
      from.sync_in_next_part = 0;
      from.synced_in = true;
      send_ack(from, in->ticket(), true);
      if (in->reply_wanted()) send_sync(from, false);
      break;
    }
    case link::Body::InterestAck: {
      const auto* in = msg->body_as_InterestAck();
      if (!in) return count_malformed("an InterestAck without its body");
      if (in->sync() && from.sync_out_ticket != 0 && in->ticket() >= from.sync_out_ticket) from.sync_out_ticket = 0;
      done_scratch_.clear();
      interest_.acked(from.member().node_id, in->ticket(), in->sync(), done_scratch_);
      answer(done_scratch_);
      break;
    }
    case link::Body::Deliveries: {
      const auto* d = msg->body_as_Deliveries();
      if (!d) return count_malformed("Deliveries without their body");
      if (const auto* records = d->records()) relay(from, {records->data(), records->size()});
      break;
    }
    case link::Body::RouteUpdate:
    case link::Body::RouteAck:
    case link::Body::RouteRebuild:
    case link::Body::SendForward:
    case link::Body::SendOutcome:
    case link::Body::Sends:
      if (route_handler_) route_handler_(from, *msg);
      break;
    case link::Body::StreamRequest:
    case link::Body::StreamAnswer:
    case link::Body::StreamBatch:
      if (stream_handler_) stream_handler_(from, *msg);
      break;
    case link::Body::OfferAsk:
    case link::Body::OfferReply:
    case link::Body::OfferWithdrawn:
      if (offer_handler_) offer_handler_(from, *msg);
      break;
    default:
      return count_malformed("an unknown body");
  }
}

bool node_bus::relay(remote_node& from, std::span<const std::uint8_t> records) {
  const auto now = clock::now();
  std::size_t at = 0;
  relaying_ = true;
  bool ok = true;
  while (at < records.size()) {
    if (records.size() - at < 8) {
      ok = false;
      break;
    }
    const std::uint32_t len = get_u32(records.data() + at);
    const std::uint32_t time_left_ms = get_u32(records.data() + at + 4);
    const std::size_t padded = (std::size_t{len} + 7) & ~std::size_t{7};
    if (len == 0 || padded > records.size() - at - 8) {
      ok = false;
      break;
    }
    // decode_frame wants the frame at an 8-byte boundary.
    record_scratch_.resize(padded / 8);
    std::memcpy(record_scratch_.data(), records.data() + at + 8, len);
    at += 8 + padded;
    const auto frame = protocol::decode_frame({reinterpret_cast<const std::uint8_t*>(record_scratch_.data()), len},
                                              options_.max_frame);
    const auto* deliver = frame ? (*frame)->message_as_Deliver() : nullptr;
    if (!deliver || !deliver->channel() || !protocol::is_valid_channel(deliver->channel()->string_view())) {
      ok = false;
      break;
    }
    const auto* p = deliver->payload();
    const protocol::bytes_view payload = p ? protocol::bytes_view{p->data(), p->size()} : protocol::bytes_view{};
    ++from.counters().records_in;
    // A durable publish's record carries its place in the holder's log:
    // passed on to the local subscribers that want it.
    log_position at_log;
    const log_position* position = nullptr;
    if (deliver->stream() && !deliver->stream()->string_view().empty() && deliver->seq() != 0) {
      at_log = {deliver->stream()->string_view(), deliver->seq(), deliver->epoch()};
      position = &at_log;
    }
    if (time_left_ms != 0)
      fanout_.publish_expiring(deliver->channel()->string_view(), payload,
                               now + std::chrono::milliseconds(time_left_ms), now, position);
    else
      fanout_.publish(deliver->channel()->string_view(), payload, position);
  }
  relaying_ = false;
  if (!ok) count_malformed("a damaged Deliveries record");
  return ok;
}

node_bus_status node_bus::status() const {
  node_bus_status s;
  if (link_) s.nats = link_->stats();
  s.totals = departed_;
  for (const auto& [id, p] : peers_) {
    const auto& c = p->counters();
    s.totals.messages_out += c.messages_out;
    s.totals.messages_in += c.messages_in;
    s.totals.records_out += c.records_out;
    s.totals.records_in += c.records_in;
    s.totals.lost_in += c.lost_in;
    s.totals.failed_out += c.failed_out;
    s.remote_patterns += p->patterns().size();
    peer_link_status l;
    l.member = p->member();
    l.synced_in = p->synced_in;
    l.patterns = p->patterns().size();
    l.counters = p->counters();
    s.peers.push_back(std::move(l));
  }
  s.local_patterns = interest_.size();
  s.unconfirmed = interest_.unconfirmed();
  s.interest_timeouts = interest_timeouts_;
  s.dropped_unknown = dropped_unknown_;
  s.dropped_malformed = dropped_malformed_;
  s.lost_in = lost_in_;
  return s;
}

}  // namespace switchyard::broker
