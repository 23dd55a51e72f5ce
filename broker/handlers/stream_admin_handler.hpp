#pragma once
// Stream administration on the sequence log (capability "log";
// docs/protocol.md §13.1): StreamInfo and StreamList read the log on the
// loop thread; SetRetention and StreamDelete go through the group
// committer's writer thread and are answered on the loop thread once the
// change is on disk.
//
// Loop thread only. Exists only on a server with a data folder.

#include "broker/requests/durable_pipeline.hpp"
#include "broker/requests/peer.hpp"
#include "broker/config/server_config.hpp"
#include "common/asio.hpp"
#include "protocol/frame_builder.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>

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
  // Cluster mode: StreamList lists only the streams `held` says this node
  // holds (null: every stream of the log; borrowed until the next call).
  void set_list_filter(std::function<bool(std::string_view stream)> held) { held_ = std::move(held); }
  // Cluster mode: answers StreamList `request_id` on `from` with the lists
  // every member answered (`answers`: each the frames a member's
  // StreamList was answered with, borrowed for the call): merged in name
  // order, at most the list's limit (`limit` as the request asked) and
  // one frame; an Error among them is the answer.
  void merge_lists(peer& from, std::uint64_t request_id, std::uint32_t limit,
                   std::span<const protocol::bytes_view> answers);
  // Answered once the change is on disk (a ticket of `from` is held until
  // then, so a Ping after it waits).
  // Limits need a printable stream name (protocol::is_printable_stream_name);
  // a clear takes any name the log holds. Logged once on disk, saying
  // whether the stream was created.
  void set_retention(peer& from, std::uint64_t request_id, const protocol::wire::SetRetention& m);
  // Deletes the stream (records, metadata, own limits) after the appends
  // the server took before this request; answered like set_retention,
  // with the stream as it was.
  void delete_stream(peer& from, std::uint64_t request_id, const protocol::wire::StreamDelete& m);

 private:
  storage::retention server_default() const;
  // A committer completion that answers `from` on the loop thread once the
  // change is on disk (StreamInfoResult, or the error), after calling
  // on_done(connection id, change) on success (also when `from` is gone
  // by then); holds one of `from`'s tickets until then.
  template <class OnDone>
  storage::group_committer::change_completion answer_when_done(peer& from, std::uint64_t request_id, OnDone on_done);

  const server_config& config_;
  durable_pipeline& durable_;
  asio::any_io_executor loop_;
  protocol::frame_builder& builder_;
  std::shared_ptr<spdlog::logger> logger_;
  std::function<bool(std::string_view)> held_;
};

}  // namespace switchyard::broker
