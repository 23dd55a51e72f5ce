// switchyard-cli: routes get / list / delete, leases list / revoke, inboxes
// list and send (leases, the routing registry, inboxes and send-to-user,
// capability "routing"; docs/protocol.md §12; inboxes list reads the
// connection list, capability "admin", §14).

#include "admin/cli_context.hpp"
#include "admin/command.hpp"

#include <CLI/CLI.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace switchyard::admin {

int command::routes_get() {
  auto e = client_->registry_get(s_.key);
  if (!e) return fail(e.error(), "routes get " + s_.key, "no route (no live entry for that key)");
  if (s_.json) {
    json_writer j;
    write_route(j, *e);
    out_ << j.str() << "\n";
    return exit_ok;
  }
  out_ << format_table({{"key", e->key},
                        {"value", e->value},
                        {"version", std::to_string(e->version)},
                        {"lease", e->lease == 0 ? "(own TTL)" : std::to_string(e->lease)},
                        {"remaining", std::to_string(e->remaining.count()) + " ms"}},
                       {});
  return exit_ok;
}

int command::routes_list() {
  bool more = false;
  auto list = client_->registry_list(s_.prefix, s_.limit, &more);
  if (!list) return fail(list.error(), "routes list");
  return print_list("routes", *list, more, write_route, {"KEY", "VALUE", "VERSION", "LEASE", "REMAINING MS"},
                    {false, false, true, true, true}, [](const registry_entry& e) {
                      return std::vector<std::string>{e.key, e.value, std::to_string(e.version),
                                                      e.lease == 0 ? "-" : std::to_string(e.lease),
                                                      std::to_string(e.remaining.count())};
                    });
}

int command::routes_delete() {
  if (auto ec = client_->registry_delete(s_.key))
    return fail(ec, "routes delete " + s_.key, "no route (no live entry for that key)");
  if (s_.json) {
    json_writer j;
    j.begin_object().string("key", s_.key).boolean("deleted", true).end_object();
    out_ << j.str() << "\n";
    return exit_ok;
  }
  out_ << "deleted route " << s_.key << "\n";
  return exit_ok;
}

int command::leases_list() {
  lease_id next = 0;
  std::uint64_t total = 0;
  auto list = client_->lease_list(s_.limit, s_.cursor, &next, &total);
  if (!list) return fail(list.error(), "leases list");
  if (s_.json) {
    // Ids and the cursor as strings: a JSON reader may keep only 53 bits
    // of a number. next_cursor "0": this page is the last.
    json_writer j;
    j.begin_object().key("leases").begin_array();
    for (const auto& l : *list) {
      j.begin_object().string("id", std::to_string(l.id));
      j.number("ttl_ms", static_cast<std::uint64_t>(l.ttl.count()));
      j.number("remaining_ms", static_cast<std::uint64_t>(l.remaining.count())).end_object();
    }
    j.end_array().number("total", total).string("next_cursor", std::to_string(next)).end_object();
    out_ << j.str() << "\n";
    return exit_ok;
  }
  if (list->empty()) {
    out_ << "no leases" << (s_.cursor ? " after this cursor" : "") << "\n";
    return exit_ok;
  }
  std::vector<std::vector<std::string>> rows{{"LEASE", "TTL MS", "REMAINING MS"}};
  for (const auto& l : *list)
    rows.push_back({std::to_string(l.id), std::to_string(l.ttl.count()), std::to_string(l.remaining.count())});
  out_ << format_table(rows, {true, true, true});
  // A broker older than the cursor sends no total.
  out_ << list->size();
  if (total >= list->size()) out_ << " of " << total;
  out_ << " leases";
  if (next != 0) out_ << "; next page: --cursor " << next;
  out_ << "\n";
  return exit_ok;
}

int command::leases_revoke() {
  const std::string id = std::to_string(s_.lease);
  if (auto ec = client_->lease_revoke(s_.lease))
    return fail(ec, "leases revoke " + id, "no such lease (unknown, expired or revoked already)");
  if (s_.json) {
    json_writer j;
    j.begin_object().string("lease", id).boolean("revoked", true).end_object();
    out_ << j.str() << "\n";
    return exit_ok;
  }
  out_ << "revoked lease " << id << ": its registry entries and inboxes went with it\n";
  return exit_ok;
}

// Built from the connection list (ConnList, id order, a page of 1000 at a
// time): every inbox is held by one connection, which reports its inboxes
// and their leases. Connections that open or close during the walk may
// be missed or seen; one that stays open is seen once.
int command::inboxes_list() {
  struct inbox_row {
    std::string id;
    std::uint64_t conn = 0;
    std::string name;
    lease_id lease = 0;
  };
  std::vector<inbox_row> inboxes;
  std::uint64_t cursor = 0;
  // Bounded: each page's cursor is larger than the one before (id order).
  for (int page = 0; page < 100'000; ++page) {
    auto p = client_->connections(connection_order::id, 1000, cursor);
    if (!p) return fail(p.error(), "inboxes list");
    for (const auto& c : p->connections)
      for (std::size_t i = 0; i < c.inboxes.size(); ++i)
        inboxes.push_back({c.inboxes[i], c.id, c.name, i < c.inbox_leases.size() ? c.inbox_leases[i] : 0});
    if (p->next_cursor <= cursor) break;
    cursor = p->next_cursor;
  }
  return print_list(
      "inboxes", inboxes, std::nullopt,
      [](json_writer& j, const inbox_row& r) {
        j.begin_object().string("id", r.id).number("conn", r.conn).string("name", r.name);
        j.string("lease", std::to_string(r.lease)).end_object();
      },
      {"INBOX", "CONN", "NAME", "LEASE"}, {false, true, false, true},
      [](const inbox_row& r) {
        return std::vector<std::string>{r.id, std::to_string(r.conn), r.name.empty() ? "-" : r.name,
                                        std::to_string(r.lease)};
      });
}

int command::send() {
  if (!s_.send_stream.empty()) return send_durable();
  if (s_.offer_id != 0) return send_offer();
  if (s_.expires_ms != 0) return send_expiring();
  const std::string payload = message_payload();
  auto inbox = client_->send(s_.key, payload);
  if (!inbox && inbox.error() == errc::no_route)
    return fail(exit_no_route, "no_route",
                "send " + s_.key +
                    ": no route (no live registry entry for it, or its gateway's inbox is not "
                    "connected); nothing was delivered");
  if (!inbox) return fail(inbox.error(), "send " + s_.key);
  if (s_.json) {
    json_writer j;
    j.begin_object().string("route_key", s_.key).string("inbox", *inbox);
    j.number("bytes", payload.size()).end_object();
    out_ << j.str() << "\n";
    return exit_ok;
  }
  out_ << "sent " << payload.size() << " bytes to " << s_.key << " through inbox " << *inbox << "\n";
  return exit_ok;
}

int command::send_durable() {
  const std::string payload = message_payload();
  const std::array<std::string_view, 1> keys{s_.key};
  const auto bytes = std::as_bytes(std::span(payload.data(), payload.size()));
  auto r = s_.expires_ms ? client_->send_durable(keys, s_.send_stream, bytes,
                                                 std::chrono::milliseconds(static_cast<std::int64_t>(s_.expires_ms)))
                         : client_->send_durable(keys, s_.send_stream, bytes);
  if (!r) return fail(r.error(), "send " + s_.key + " --stream " + s_.send_stream);
  const std::string inbox = r->gateways.empty() ? std::string() : r->gateways.front();
  if (s_.json) {
    json_writer j;
    j.begin_object().string("route_key", s_.key).string("inbox", inbox).number("bytes", payload.size());
    j.string("stream", s_.send_stream).number("seq", r->seq).string("epoch", std::to_string(r->epoch)).end_object();
    out_ << j.str() << "\n";
  } else {
    out_ << "stored " << payload.size() << " bytes in " << s_.send_stream << " at " << r->seq << " (epoch " << r->epoch
         << ")";
    out_ << (inbox.empty() ? std::string(", no live route") : ", sent to " + s_.key + " through inbox " + inbox)
         << "\n";
  }
  // In the log either way; exit 6 says it reached no gateway now.
  return inbox.empty() ? exit_no_route : exit_ok;
}

// One registry entry as a JSON object; the lease id as a string (64-bit).
void command::write_route(json_writer& j, const registry_entry& e) {
  j.begin_object().string("key", e.key).string("value", e.value).number("version", e.version);
  j.string("lease", e.lease == 0 ? "" : std::to_string(e.lease));
  j.number("remaining_ms", static_cast<std::uint64_t>(e.remaining.count())).end_object();
}

void register_send_command(CLI::App& app, cli_context& cli) {
  settings& s = cli.s();
  auto* send = app.add_subcommand(
      "send",
      "send one message to the user behind a route key (through the gateway inbox its registry entry names); "
      "exit 6 when it has no route");
  send->add_option("route_key", s.key, "route key, e.g. user:alice")->required();
  send->add_option("message", s.message, "the payload; - reads it from stdin (all of it, bytes as they are)")
      ->required();
  auto* expires =
      send->add_option("--expires-ms", s.expires_ms,
                       "the broker never writes it to the gateway after this many ms (capability \"offers\"; the "
                       "gateway sees the time it had left)")
          ->check(whole_number)
          ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{UINT32_MAX}));
  auto* stream = send->add_option("--stream", s.send_stream,
                                  "a durable send: appended to this stream first (fsynced), then delivered with its "
                                  "place in the log (a gateway's device can resume from it)");
  auto* offer = send->add_option("--offer", s.offer_id,
                                 "an offer with this id (capability \"offers\"; needs --expires-ms): the gateway's "
                                 "ack becomes its receipt")
                    ->check(whole_number)
                    ->check(CLI::Range(std::uint64_t{1}, UINT64_MAX))
                    ->needs(expires);
  send->add_option("--receipt-ms", s.receipt_ms,
                   "with --offer: wait this long for the receipt (acked or timeout) and print it")
      ->check(whole_number)
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{UINT32_MAX}))
      ->needs(offer);
  stream->excludes(offer);
}

void register_routing_commands(CLI::App& app, cli_context& cli) {
  settings& s = cli.s();
  auto* routes = app.add_subcommand("routes", "the routing registry (user -> gateway), live entries only");
  routes->require_subcommand(1, 1);
  auto* route_get = routes->add_subcommand("get", "one entry: value (the gateway's inbox), version, lease, TTL left");
  route_get->add_option("key", s.key, "route key, e.g. user:alice")->required();
  auto* route_list = routes->add_subcommand("list", "entries in key order");
  route_list->add_option("--prefix", s.prefix, "only keys starting with this");
  route_list->add_option("--limit", s.limit, "at most this many (0 = the broker's default, 1000; at most 10000)")
      ->check(whole_number)
      ->capture_default_str();
  auto* route_delete = routes->add_subcommand(
      "delete", "delete a registry entry: the user is no longer routed (its gateway may put it again)");
  route_delete->add_option("key", s.key, "route key, e.g. user:alice")->required();

  auto* leases = app.add_subcommand("leases", "leases (gateways prove they are alive with them)");
  leases->require_subcommand(1, 1);
  auto* lease_list = leases->add_subcommand("list", "live leases: id, granted TTL, time left; a page at a time");
  lease_list->add_option("--limit", s.limit, "at most this many (0 = the broker's default, 1000; at most 10000)")
      ->check(whole_number)
      ->capture_default_str();
  lease_list->add_option("--cursor", s.cursor, "the next page: the cursor the page before printed (0 = the first page)")
      ->check(whole_number)
      ->capture_default_str();
  auto* lease_revoke =
      leases->add_subcommand("revoke", "revoke a lease now: the registry entries and inboxes bound to it go with it");
  lease_revoke->add_option("id", s.lease, "lease id, as leases list prints it")->required()->check(whole_number);

  auto* inboxes = app.add_subcommand("inboxes", "gateway inboxes");
  inboxes->require_subcommand(1, 1);
  inboxes->add_subcommand(
      "list", "the open inboxes: the connection holding each (id and name) and its lease; from the connection list");
}

}  // namespace switchyard::admin
