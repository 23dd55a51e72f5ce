#pragma once
// link_outboxes: per peer node, the requests and answers one loop turn
// produced for it (route_relay: SendForwards and SendOutcomes; stream_relay:
// StreamRequests and StreamAnswers), built into one flatbuffers builder as
// they come and sent as one link message at the end of the loop turn, or
// before one more would take it past the link's batch bytes.
//
// An outbox is tied to the incarnation the peer had when it was made: one
// made for an earlier incarnation (or for a node that left) is never sent
// (its answers carry that incarnation's tickets; this node's own requests
// in it are handed back as refused), as is one NATS refused. Builders are
// kept across loop turns, so that their memory is reused, unless one large
// answer grew one past twice the batch bytes.
//
// Memory: one builder per peer, about the link's batch bytes (or one
// request or answer larger than that).
//
// Loop thread only.

#include "broker/cluster/cluster_view.hpp"
#include "broker/cluster/node_bus.hpp"

#include <flatbuffers/flatbuffers.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace switchyard::broker {

// `Request` and `Answer` are the link tables batched; `Own` what the owner
// keeps of each of its own requests in a box (handed back when refused).
template <class Request, class Answer, class Own>
class link_outboxes {
 public:
  struct outbox {
    flatbuffers::FlatBufferBuilder b{initial_bytes};
    std::vector<flatbuffers::Offset<Request>> requests;
    std::vector<flatbuffers::Offset<Answer>> answers;
    std::vector<Own> own;          // this node's requests in it
    std::int64_t incarnation = 0;  // the peer's, when the box was made
    bool empty() const noexcept { return requests.empty() && answers.empty(); }
  };
  // Builds `box`'s message in its builder from its requests and answers
  // and sends it to `node`; false when NATS refused it.
  using send_fn = std::function<bool(std::string_view node, outbox& box)>;

  // Borrows `bus` for its lifetime. `schedule_flush` is called whenever a
  // box is handed out: the owner then calls flush() before the loop turn
  // ends.
  link_outboxes(node_bus& bus, send_fn send, std::function<void()> schedule_flush)
      : bus_(bus), send_(std::move(send)), schedule_flush_(std::move(schedule_flush)) {}

  // The outbox for `node` with room for about `bytes` more (what it held is
  // sent first when it would pass the link's batch bytes); nullptr when
  // `node` is not a member with a link. A box made for an earlier
  // incarnation of `node` is dropped first (its own requests refused).
  outbox* get(std::string_view node, std::size_t bytes) {
    const auto* view = bus_.view();
    const auto* member = view ? view->find(node) : nullptr;
    if (!member || !bus_.has_link(node)) return nullptr;
    auto it = boxes_.find(node);
    if (it != boxes_.end() && it->second->incarnation != member->incarnation) {
      refuse(*it->second);
      boxes_.erase(it);
      it = boxes_.end();
    }
    if (it == boxes_.end()) {
      it = boxes_.emplace(std::string(node), std::make_unique<outbox>()).first;
      it->second->incarnation = member->incarnation;
    }
    auto& box = *it->second;
    if (!box.empty() && box.b.GetSize() + bytes > bus_.options().batch_bytes) send(node, box);
    schedule_flush_();
    return &box;
  }

  // Sends every box that holds something.
  void flush() {
    for (auto& [node, box] : boxes_) send(node, *box);
  }

  // The view changed: boxes for nodes that left, or for an earlier
  // incarnation, are dropped unsent (their own requests refused).
  void drop_stale(const cluster_view* view) {
    for (auto it = boxes_.begin(); it != boxes_.end();) {
      const auto* m = view ? view->find(it->first) : nullptr;
      if (m && m->incarnation == it->second->incarnation) {
        ++it;
        continue;
      }
      refuse(*it->second);
      it = boxes_.erase(it);
    }
  }

  // This node's requests in boxes dropped or refused since the last call
  // (the owner settles them, then clears this).
  std::vector<Own>& refused() noexcept { return refused_; }

 private:
  static constexpr std::size_t initial_bytes = 16u << 10;

  void send(std::string_view node, outbox& box) {
    if (box.empty()) return;
    if (!send_(node, box)) refuse(box);
    if (box.b.GetSize() > 2 * bus_.options().batch_bytes)
      box.b = flatbuffers::FlatBufferBuilder(initial_bytes);
    else
      box.b.Clear();
    box.requests.clear();
    box.answers.clear();
    box.own.clear();
  }
  void refuse(outbox& box) { refused_.insert(refused_.end(), box.own.begin(), box.own.end()); }

  node_bus& bus_;
  send_fn send_;
  std::function<void()> schedule_flush_;
  std::map<std::string, std::unique_ptr<outbox>, std::less<>> boxes_;
  std::vector<Own> refused_;
};

}  // namespace switchyard::broker
