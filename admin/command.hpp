#pragma once
// switchyard-cli's commands (internal to admin/): what the command line set
// (`settings`) and one run of one command (`command`). cli.cpp parses the
// command line, connects and runs the command; the commands are grouped by
// what they administer, and each file registers its own subcommands and
// their options (register_*_commands, cli_context.hpp):
//
//   cli.cpp               parsing, the global options, connecting, errors;
//                         ping, drain, stats, conns; keygen and hash-token
//                         (no broker)
//   stream_commands.cpp   streams list / info / retention / read / tail / delete
//   routing_commands.cpp  routes get / list / delete, leases list / revoke,
//                         inboxes list, send
//   offer_commands.cpp    pending, send --expires-ms, flags list / set
//   pubsub_commands.cpp   pub, sub
//   cluster_commands.cpp  cluster status

#include "admin/cli.hpp"
#include "admin/format.hpp"

#include <switchyard/client.hpp>

#include "common/mutex.hpp"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <istream>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace switchyard::admin {

inline constexpr std::string_view cli_name = "switchyard-cli";

// Everything the command line can set; filled by CLI11.
struct settings {
  std::string address = "127.0.0.1:7878";
  std::int64_t timeout_ms = 5000;
  bool json = false;
  std::string command;  // "streams list", "ping", ...
  std::string stream;
  std::string key;               // routes get / delete, send: a route key
  std::string channel;           // pub: a channel; sub: a pattern
  std::string message;           // pub, send: the payload, "-" = read it from stdin
  std::uint64_t expires_ms = 0;  // send: the expiry (0 = none); at most 2^32 - 1
  std::string send_stream;       // send --stream: a durable send through this stream
  std::uint64_t offer_id = 0;    // send --offer: an offer with this id (0 = a plain send)
  std::uint64_t receipt_ms = 0;  // send --receipt-ms: wait this long for the offer's receipt (0 = none asked)
  std::string flag;              // flags set: the flag's name
  std::string node;              // cluster takeover: the node whose streams are declared lost
  bool yes = false;              // cluster takeover: the loss is confirmed
  unsigned percent = 0;          // flags set: 0..100
  std::string prefix;
  std::size_t limit = 0;
  std::uint64_t from = 0;
  bool from_given = false;  // streams tail: --from was given
  std::size_t count = 100;  // streams read
  // sub, streams tail: stop after this many messages or records (0 = run
  // until interrupted; tail without --follow: until the stream's end).
  std::uint64_t stop_after = 0;
  std::uint64_t last = 10;  // streams tail without --from: start this many records before the end
  bool follow = false;      // streams tail
  bool confirm = false;     // pub
  std::uint64_t lease = 0;  // leases revoke
  std::uint64_t max_records = 0;
  std::uint64_t max_age_ms = 0;
  std::uint64_t max_bytes = 0;
  bool set_limits = false;  // any --max-* given
  bool clear = false;
  std::string window;        // drain: "30s", "500ms", "2m"; empty = the broker's default
  std::string sort = "id";   // conns
  std::uint64_t cursor = 0;  // conns, leases list
  // TLS to the broker (client_options::tls). Every --tls-* option implies tls.
  bool tls = false;
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  std::string tls_server_name;
  bool tls_insecure = false;
  // Credentials, at most one: from --token / --key-file, else from the
  // environment (SWITCHYARD_TOKEN / SWITCHYARD_KEY_FILE). hash-token uses
  // the flag only.
  std::string token;
  std::string key_file;
  // keygen / hash-token
  std::string out_file;
  bool generate = false;
};

// What the client's loop thread reports while a command runs: deliveries
// (sub), dropped-delivery notices and the end of the connection. Written
// on the loop thread, read on the command's; cv is notified on each.
struct session_events {
  struct delivery {
    std::string channel;
    std::string payload;
    std::string stream;  // a durable publish: its place in the log
    std::uint64_t seq = 0;
    std::uint64_t epoch = 0;
  };
  // Deliveries wait here for the command's thread; past this many bytes
  // (the output is slower than the traffic) they are dropped and counted,
  // so that the CLI's memory stays bounded and the client's loop thread
  // never blocks (its heartbeats go on).
  static constexpr std::size_t max_queued_bytes = std::size_t{64} << 20;
  switchyard::mutex mu;
  std::condition_variable cv;  // waited on under mu
  std::deque<delivery> deliveries SWITCHYARD_GUARDED_BY(mu);
  std::size_t queued_bytes SWITCHYARD_GUARDED_BY(mu) = 0;    // of channels and payloads in `deliveries`
  std::uint64_t dropped SWITCHYARD_GUARDED_BY(mu) = 0;       // by the broker, since the command last looked
  std::uint64_t dropped_here SWITCHYARD_GUARDED_BY(mu) = 0;  // past max_queued_bytes, since the command last looked
  bool closed SWITCHYARD_GUARDED_BY(mu) = false;             // the connection ended (reconnect is off)
  std::error_code why SWITCHYARD_GUARDED_BY(mu);             // ... with this
  std::deque<receipt> receipts SWITCHYARD_GUARDED_BY(mu);    // send --offer --receipt-ms
};

// A stored or delivered payload as text, or base64 when it is not
// printable UTF-8 (format.hpp: is_printable_utf8).
struct rendered_payload {
  bool text = true;
  std::string value;
  std::string_view encoding() const noexcept { return text ? "text" : "base64"; }
};
rendered_payload render_payload(std::string_view bytes);

inline std::string_view text_of(const std::vector<std::byte>& b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

// One run of one command: the settings, the output streams and, for the
// commands that talk to a broker, the connection.
class command {
 public:
  command(const settings& s, std::istream& in, std::ostream& out, std::ostream& err)
      : s_(s), in_(in), out_(out), err_(err) {}

  // Runs s.command (keygen and hash-token locally, the others after
  // connecting); returns the exit code.
  int run();

  // Reports an error: a message on stderr and, with --json, an error
  // object on stdout. Returns `code`.
  int fail(int code, std::string_view kind, const std::string& message);

 private:
  // ---- cli.cpp ----
  int connect_failed(std::error_code ec, const std::string& why);
  // An error the client library or the broker answered for `what` (the
  // command and its argument); `missing` names what not_found means.
  int fail(std::error_code ec, const std::string& what, std::string_view missing = "no such stream");
  int keygen();
  int hash_token();
  bool read_token(std::string& token);
  int ping();
  int stats();
  int conns();
  int drain();
  // The payload of pub and send: s.message, or all of stdin for "-".
  std::string message_payload();

  // ---- stream_commands.cpp ----
  int streams_list();
  int streams_info();
  int streams_retention();
  int streams_read();
  int streams_tail();
  int streams_delete();
  // A read of `stream` that failed at `from` with corrupted: says which
  // record and how to read past it.
  int fail_corrupted(std::error_code ec, const std::string& what, std::uint64_t from);
  static std::string delivered_to(const stream_record& rec);
  static std::string describe(const stream_summary& st);
  static void write_stream(json_writer& j, const stream_summary& st);
  void print_stream(const stream_summary& st);

  // ---- routing_commands.cpp ----
  int routes_get();
  int routes_list();
  int routes_delete();
  int leases_list();
  int leases_revoke();
  int inboxes_list();
  int send();
  static void write_route(json_writer& j, const registry_entry& e);

  // ---- offer_commands.cpp ----
  int pending();
  int send_expiring();  // send with --expires-ms
  int send_durable();   // send with --stream
  int send_offer();     // send with --offer (and --receipt-ms: waits for the receipt)
  int flags_list();
  int flags_set();
  static void write_flag(json_writer& j, const flag_info& f);

  // ---- pubsub_commands.cpp ----
  int pub();
  int sub();

  // ---- cluster_commands.cpp ----
  int cluster_status();
  int cluster_takeover();
  void write_cluster_status(json_writer& j, const cluster_status_info& st) const;

  // Prints a list command's answer: `{"<what>":[...],"more":...}` with
  // --json (write_item writes one element), else a table of `header` and
  // row(item), or a line saying there is none. `more`: the list was cut
  // (nullopt: the command cannot tell).
  template <class T, class WriteItem, class Row>
  int print_list(std::string_view what, const std::vector<T>& items, std::optional<bool> more, WriteItem write_item,
                 std::vector<std::string> header, const std::vector<bool>& right_aligned, Row row) {
    if (s_.json) {
      json_writer j;
      j.begin_object().key(what).begin_array();
      for (const auto& item : items) write_item(j, item);
      j.end_array();
      if (more) j.boolean("more", *more);
      j.end_object();
      out_ << j.str() << "\n";
      return exit_ok;
    }
    if (items.empty()) {
      out_ << "no " << what << (s_.prefix.empty() ? "" : " starting with '" + s_.prefix + "'") << "\n";
      return exit_ok;
    }
    std::vector<std::vector<std::string>> rows{std::move(header)};
    for (const auto& item : items) rows.push_back(row(item));
    out_ << format_table(rows, right_aligned);
    if (more && *more) out_ << "(more " << what << ": narrow --prefix or raise --limit)\n";
    return exit_ok;
  }

  const settings& s_;
  std::istream& in_;
  std::ostream& out_;
  std::ostream& err_;
  std::shared_ptr<session_events> events_ = std::make_shared<session_events>();
  std::unique_ptr<client> client_;
};

}  // namespace switchyard::admin
