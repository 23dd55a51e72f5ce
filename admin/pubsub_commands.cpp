// switchyard-cli: pub and sub (channels; docs/protocol.md §5).

#include "admin/cli_context.hpp"
#include "admin/command.hpp"
#include "admin/interrupt.hpp"

#include <CLI/CLI.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

namespace switchyard::admin {

int command::pub() {
  const std::string payload = message_payload();
  const std::string what = "pub " + s_.channel;
  if (s_.confirm) {
    // Answered once the broker routed it: its refusals (forbidden, ...) are
    // reported.
    if (auto ec = client_->publish_confirmed(s_.channel, std::as_bytes(std::span(payload.data(), payload.size()))))
      return fail(ec, what);
  } else {
    // At most once, unanswered; the flush waits until the broker has
    // processed it, so it is not lost when the CLI exits. A refusal is only
    // in the broker's answer to --confirm.
    if (auto ec = client_->publish(s_.channel, payload)) return fail(ec, what);
    if (auto ec = client_->flush()) return fail(ec, what);
  }
  if (s_.json) {
    json_writer j;
    j.begin_object().string("channel", s_.channel).number("bytes", payload.size());
    j.boolean("confirmed", s_.confirm).end_object();
    out_ << j.str() << "\n";
    return exit_ok;
  }
  out_ << "published " << payload.size() << " bytes to " << s_.channel
       << (s_.confirm ? " (confirmed: the broker routed it)" : "") << "\n";
  return exit_ok;
}

// Deliveries arrive on the client's loop thread and are printed here, so
// that a slow terminal slows this thread, not the client's heartbeats.
// Waits are bounded (100 ms) so that SIGINT/SIGTERM, seen between them,
// end the command with exit 0 whatever arrives; --timeout-ms does not
// limit how long it listens.
int command::sub() {
  const std::string what = "sub " + s_.channel;
  interrupt_guard interrupt;
  auto events = events_;
  auto id = client_->subscribe(s_.channel, [events](const message& m) {
    {
      switchyard::lock_guard lock(events->mu);
      const std::size_t bytes = m.channel.size() + m.payload.size();
      if (events->queued_bytes + bytes > session_events::max_queued_bytes) {
        ++events->dropped_here;
      } else {
        events->queued_bytes += bytes;
        events->deliveries.push_back(
            {std::string(m.channel), std::string(m.payload_text()), std::string(m.stream), m.seq, m.epoch});
      }
    }
    events->cv.notify_one();
  });
  if (!id) return fail(id.error(), what);
  if (::isatty(STDERR_FILENO))
    err_ << cli_name << ": subscribed to " << s_.channel << "; waiting for messages (Ctrl-C ends)" << std::endl;
  std::uint64_t printed = 0;
  while (!interrupt.requested() && (s_.stop_after == 0 || printed < s_.stop_after)) {
    std::deque<session_events::delivery> batch;
    std::uint64_t dropped = 0, dropped_here = 0;
    bool closed = false;
    std::error_code why;
    {
      switchyard::unique_lock lock(events->mu);
      events->cv.wait_for(lock.native(), std::chrono::milliseconds(100), [&]() SWITCHYARD_REQUIRES(events->mu) {
        return !events->deliveries.empty() || events->dropped != 0 || events->dropped_here != 0 || events->closed;
      });
      batch.swap(events->deliveries);
      events->queued_bytes = 0;
      std::swap(dropped, events->dropped);
      std::swap(dropped_here, events->dropped_here);
      closed = events->closed;
      why = events->why;
    }
    for (const auto& d : batch) {
      if (s_.stop_after != 0 && printed == s_.stop_after) break;
      const auto payload = render_payload(d.payload);
      if (s_.json) {
        json_writer j;
        j.begin_object().string("channel", d.channel);
        j.string("encoding", payload.encoding()).string("payload", payload.value);
        if (!d.stream.empty()) {
          j.string("stream", d.stream).number("seq", d.seq).string("epoch", std::to_string(d.epoch));
        }
        j.end_object();
        out_ << j.str() << "\n";
      } else {
        out_ << d.channel << "  " << (payload.text ? "" : "base64:") << payload.value << "\n";
      }
      ++printed;
    }
    out_.flush();
    if (dropped != 0)
      err_ << cli_name << ": " << what << ": the broker dropped " << dropped
           << " messages for this subscriber (it read too slowly)" << std::endl;
    if (dropped_here != 0)
      err_ << cli_name << ": " << what << ": dropped " << dropped_here
           << " messages here: they came faster than they could be printed" << std::endl;
    if (closed && (s_.stop_after == 0 || printed < s_.stop_after))
      return fail(exit_connection, error_code_name(why),
                  what + ": the connection ended: " + (why ? why.message() : std::string("closed")));
  }
  return exit_ok;
}

void register_pubsub_commands(CLI::App& app, cli_context& cli) {
  settings& s = cli.s();
  auto* pub = app.add_subcommand("pub", "publish one message to a channel (at most once, like any publish)");
  pub->add_option("channel", s.channel, "channel, e.g. orders.eu (no wildcards)")->required();
  pub->add_option("message", s.message, "the payload; - reads it from stdin (all of it, bytes as they are)")
      ->required();
  pub->add_flag("--confirm", s.confirm,
                "wait for the broker's answer that it routed the message, so that a refusal (forbidden, ...) "
                "is reported; without it the CLI only waits until the broker has processed the publish");

  auto* sub = app.add_subcommand(
      "sub",
      "print the messages published to channels matching a pattern, one line each (with --json one object "
      "each), until SIGINT/SIGTERM (exit 0) or --count; --timeout-ms does not end it");
  sub->add_option("pattern", s.channel, "pattern: * matches one token, > (last) the rest, e.g. orders.>")->required();
  sub->add_option("--count", s.stop_after, "exit 0 after this many messages (0 = until interrupted)")
      ->check(whole_number)
      ->capture_default_str();
}

}  // namespace switchyard::admin
