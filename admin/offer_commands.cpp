// switchyard-cli: pending and send --expires-ms (offers, capability
// "offers"), flags list / set (the broker's flags, capability "admin").

#include "admin/cli_context.hpp"
#include "admin/command.hpp"

#include <CLI/CLI.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace switchyard::admin {

using namespace std::chrono_literals;

namespace {

std::string_view outcome_name(key_outcome o) {
  switch (o) {
    case key_outcome::routed:
      return "routed";
    case key_outcome::capped:
      return "capped";
    case key_outcome::no_route:
      break;
  }
  return "no_route";
}

std::vector<std::string> flag_row(const flag_info& f) {
  return {f.name, std::to_string(f.percent), std::to_string(f.connections_on), std::to_string(f.connections_off)};
}

}  // namespace

// One flag as a JSON object (flags list, flags set).
void command::write_flag(json_writer& j, const flag_info& f) {
  j.begin_object().string("name", f.name).number("percent", static_cast<std::uint64_t>(f.percent));
  j.number("connections_on", f.connections_on).number("connections_off", f.connections_off).end_object();
}

int command::flags_list() {
  auto list = client_->flags();
  if (!list) return fail(list.error(), "flags list");
  return print_list("flags", *list, std::nullopt, write_flag, {"FLAG", "PERCENT", "ON", "OFF"},
                    {false, true, true, true}, flag_row);
}

int command::flags_set() {
  auto f = client_->set_flag(s_.flag, s_.percent);
  if (!f)
    return fail(f.error(), "flags set " + s_.flag + " " + std::to_string(s_.percent),
                "no such flag (flags list shows the broker's flags)");
  if (s_.json) {
    json_writer j;
    write_flag(j, *f);
    out_ << j.str() << "\n";
    return exit_ok;
  }
  out_ << format_table({{"FLAG", "PERCENT", "ON", "OFF"}, flag_row(*f)}, {false, true, true, true});
  return exit_ok;
}

int command::pending() {
  auto offers = client_->pending_offers(s_.key, s_.limit);
  if (!offers) return fail(offers.error(), "pending " + s_.key);
  if (s_.json) {
    // Offer ids as strings: a JSON reader may keep only 53 bits of a number.
    json_writer j;
    j.begin_object().string("route_key", s_.key).key("offers").begin_array();
    for (const auto& o : *offers) {
      const auto payload = render_payload(o.payload_text());
      j.begin_object().string("offer_id", std::to_string(o.offer_id));
      j.number("time_left_ms", static_cast<std::uint64_t>(o.time_left.count()));
      j.number("age_ms", static_cast<std::uint64_t>(o.age.count()));
      j.string("encoding", payload.encoding()).string("payload", payload.value).end_object();
    }
    j.end_array().end_object();
    out_ << j.str() << "\n";
    return exit_ok;
  }
  if (offers->empty()) {
    out_ << "no pending offers for " << s_.key << "\n";
    return exit_ok;
  }
  std::vector<std::vector<std::string>> rows{{"OFFER", "TIME LEFT", "AGE", "ENCODING", "PAYLOAD"}};
  for (const auto& o : *offers) {
    const auto payload = render_payload(o.payload_text());
    rows.push_back({std::to_string(o.offer_id), format_elapsed(static_cast<std::uint64_t>(o.time_left.count())),
                    format_elapsed(static_cast<std::uint64_t>(o.age.count())), std::string(payload.encoding()),
                    payload.value});
  }
  out_ << format_table(rows, {true, true, true, false, false});
  return exit_ok;
}

// send with --expires-ms: client::send_offer without an offer id (a plain
// send that the broker never writes to the gateway after the expiry).
int command::send_expiring() {
  const std::string payload = message_payload();
  const std::array<std::string_view, 1> keys{s_.key};
  offer_options o;
  o.expires_in = std::chrono::milliseconds(static_cast<std::int64_t>(s_.expires_ms));
  auto r = client_->send_offer(keys, payload, o);
  if (!r) return fail(r.error(), "send " + s_.key);
  const key_outcome outcome = r->outcomes.empty() ? key_outcome::no_route : r->outcomes.front();
  const std::string inbox = r->gateways.empty() ? std::string() : r->gateways.front();
  if (outcome == key_outcome::no_route)
    return fail(exit_no_route, "no_route",
                "send " + s_.key +
                    ": no route (no live registry entry for it, or its gateway's inbox is not "
                    "connected); nothing was delivered");
  if (s_.json) {
    json_writer j;
    j.begin_object().string("route_key", s_.key).string("inbox", inbox).number("bytes", payload.size());
    j.number("expires_in_ms", s_.expires_ms).string("outcome", outcome_name(outcome)).end_object();
    out_ << j.str() << "\n";
    return exit_ok;
  }
  if (outcome != key_outcome::routed) {
    out_ << "not sent to " << s_.key << ": " << outcome_name(outcome) << "\n";
    return exit_ok;
  }
  out_ << "sent " << payload.size() << " bytes to " << s_.key << " through inbox " << inbox << " (expires in "
       << format_duration_ms(s_.expires_ms) << ")\n";
  return exit_ok;
}

int command::send_offer() {
  const std::string payload = message_payload();
  const std::array<std::string_view, 1> keys{s_.key};
  offer_options o;
  o.offer_id = s_.offer_id;
  o.expires_in = std::chrono::milliseconds(static_cast<std::int64_t>(s_.expires_ms));
  o.receipt_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(s_.receipt_ms));
  auto r = client_->send_offer(keys, payload, o);
  if (!r) return fail(r.error(), "send " + s_.key + " --offer " + std::to_string(s_.offer_id));
  const key_outcome outcome = r->outcomes.empty() ? key_outcome::no_route : r->outcomes.front();
  const std::string inbox = r->gateways.empty() ? std::string() : r->gateways.front();
  std::optional<receipt> got;
  if (outcome == key_outcome::routed && s_.receipt_ms != 0) {
    // The broker answers by the receipt timeout at the latest; a second more
    // for the way back.
    switchyard::unique_lock lock(events_->mu);
    events_->cv.wait_for(
        lock.native(), std::chrono::milliseconds(static_cast<std::int64_t>(s_.receipt_ms)) + 1s,
        [&]() SWITCHYARD_REQUIRES(events_->mu) { return !events_->receipts.empty() || events_->closed; });
    if (!events_->receipts.empty()) got = events_->receipts.front();
  }
  if (s_.json) {
    json_writer j;
    j.begin_object().string("route_key", s_.key).string("inbox", inbox).number("bytes", payload.size());
    j.number("offer", s_.offer_id).string("outcome", outcome_name(outcome));
    if (got) {
      j.key("receipt").begin_object().string("outcome", got->outcome == receipt_outcome::acked ? "acked" : "timeout");
      j.string("inbox", got->inbox_id).number("elapsed_us", static_cast<std::uint64_t>(got->elapsed.count()));
      j.end_object();
    }
    out_ << j.end_object().str() << "\n";
  } else {
    out_ << "offer " << s_.offer_id << " to " << s_.key << ": " << outcome_name(outcome)
         << (inbox.empty() ? std::string() : " through inbox " + inbox) << "\n";
    if (got)
      out_ << "receipt: " << (got->outcome == receipt_outcome::acked ? "acked" : "timeout") << " after "
           << format_duration_ms(static_cast<std::uint64_t>(got->elapsed.count() / 1000)) << "\n";
  }
  if (outcome == key_outcome::no_route) return exit_no_route;
  if (s_.receipt_ms != 0 && !got) return fail(exit_connection, "timeout", "no receipt came");
  return exit_ok;
}

void register_offer_commands(CLI::App& app, cli_context& cli) {
  settings& s = cli.s();
  auto* pending = app.add_subcommand(
      "pending", "the offers still pending for a user (unexpired, not acknowledged by its gateway), oldest first");
  pending->add_option("route_key", s.key, "route key, e.g. user:alice")->required();
  pending->add_option("--limit", s.limit, "at most this many (0 = all the broker keeps for a key)")
      ->check(whole_number)
      ->capture_default_str();

  auto* flags = app.add_subcommand("flags", "the broker's flags: features turned on for a share of the connections");
  flags->require_subcommand(1, 1);
  flags->add_subcommand(
      "list", "every flag: its percentage, and the open connections that asked for its capability, on and off");
  auto* flag_set = flags->add_subcommand(
      "set", "turn a flag on for PERCENT of the connections (by a hash of their client id), at once");
  flag_set->add_option("name", s.flag, "flag name, e.g. offers")->required();
  flag_set->add_option("percent", s.percent, "0 (off for all) .. 100 (on for all)")
      ->required()
      ->check(whole_number)
      ->check(CLI::Range(0u, 100u));
}

}  // namespace switchyard::admin
