#pragma once
// State shared by all sessions of one server: configuration, the frame
// arena, the channel table, leases and the routing table, counters. Owned by server; lives on the
// broker's event-loop thread, and every member is used from that thread only.

#include "broker/channel_table.hpp"
#include "broker/frame_arena.hpp"
#include "broker/lease_table.hpp"
#include "broker/refusal_summary.hpp"
#include "broker/routing_table.hpp"
#include "broker/server_config.hpp"
#include "broker/server_counters.hpp"
#include "protocol/channel_name.hpp"
#include "protocol/frame_builder.hpp"
#include "protocol/read_buffer.hpp"
#include "storage/group_committer.hpp"
#include "storage/sequence_log.hpp"

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace spdlog {
class logger;
}

namespace switchyard::broker {

// The answer to a log request on a server without a data folder (which
// grants no "log" capability), as unsupported_message.
inline constexpr std::string_view log_off_message = "the sequence log is off (the server has no data dir)";

class session;

struct server_core {
  server_core(server_config c, clock_source clock);
  ~server_core();

  server_config config;
  // The arena is declared before everything that holds frame_refs, so it
  // outlives them (members are destroyed in reverse order).
  frame_arena arena;
  protocol::frame_builder builder;  // scratch encoder for the loop thread
  channel_table channels;
  lease_table leases;
  routing_table routing;
  // The sequence log and its group committer (null without a data dir).
  // The committer's writer thread posts acknowledgements back to the loop.
  std::unique_ptr<storage::sequence_log> stream_log;
  std::unique_ptr<storage::group_committer> committer;

  // Appends waiting for the group committer, by token (the slot's index):
  // whom to answer and, for a durable publish or send, what to deliver
  // once durable. Loop thread only; freed slots are reused.
  struct append_wait {
    std::weak_ptr<session> target;
    std::uint64_t request_id = 0;
    std::uint64_t ticket = 0;  // the session's (session::open_ticket)
    std::string stream;
    std::string channel;                  // a publish with a stream: deliver here once durable
    std::vector<std::string> route_keys;  // a send with a stream: deliver to these users
    std::vector<std::byte> payload;       // ... this payload
  };
  std::vector<append_wait> append_waits;
  std::vector<std::uint32_t> free_waits;
  // Set when a delivery finds its connection's queue past 256 KiB, or
  // full; a reader clears it before handling a read and, if it
  // is still clear after, may read more per turn (session::reader).
  bool backlog_seen = false;
  // Set when the last read filled its buffer: more input is already
  // waiting, so small writes may wait a turn or two for more frames
  // (session::writer).
  bool input_waiting = false;
  bool commit_wake_posted = false;
  // Every session reads into this buffer while it has no incomplete frame
  // (session::read_frames): one buffer per loop instead of one per
  // connection. Loop thread.
  protocol::read_buffer read_scratch;
  // Bytes held by the sessions' incomplete frames (their spill buffers),
  // and the part of them that counts against config.max_incomplete_bytes
  // (beyond each connection's free 4 KiB; at most the limit).
  std::size_t incomplete_bytes = 0;
  std::size_t incomplete_charged = 0;  // a committer wake() is due at the end of this loop turn
  // Results travel from the committer's thread to the loop through this
  // mailbox: one post per batch.
  std::mutex acks_mu;
  std::vector<storage::group_committer::token_result> acks;           // guarded by acks_mu
  std::vector<storage::group_committer::token_result> acks_draining;  // loop thread
  // Scratch for the encoded log subject (broker/log_subject.hpp) of the
  // append being queued: reused, so a durable publish or send allocates
  // nothing for it (the committer copies it along with the payload).
  std::vector<std::byte> subject_scratch;
  // Scratch for routing a send (session::deliver_to_users and its callers),
  // reused so that the steady state allocates nothing per send. Loop thread.
  struct send_target {
    std::string_view inbox;
    session* owner = nullptr;
    std::vector<std::string_view> keys;
  };
  std::vector<std::string_view> send_keys;      // a send's route keys
  std::vector<std::string_view> send_gateways;  // per key: the inbox it went to, or ""
  std::vector<send_target> send_targets;        // one per inbox (grows, never shrinks)
  std::unordered_map<std::string_view, std::size_t> send_index;  // inbox -> send_targets slot
  std::unordered_set<std::shared_ptr<session>> sessions;
  std::size_t rejected_closing = 0;  // sessions over the cap, saying goodbye (not counted against it)
  server_counters counters;
  refusal_summary refusals;  // refused appends, logged in summary lines
  std::shared_ptr<spdlog::logger> log;
  bool stopping = false;
  std::uint64_t next_session_id = 1;

  // True if the server configured `channel` as durable (--durable-channel).
  bool durable_channel(std::string_view channel) const {
    for (const auto& pattern : config.durable_channels)
      if (protocol::pattern_matches(pattern, channel)) return true;
    return false;
  }
};

}  // namespace switchyard::broker
