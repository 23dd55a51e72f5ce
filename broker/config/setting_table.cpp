#include "broker/config/setting_table.hpp"

#include "broker/tables/feature_flags.hpp"

#include "protocol/limits.hpp"

#include <CLI/CLI.hpp>

#include <array>
#include <charconv>
#include <chrono>
#include <limits>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>

namespace switchyard::broker {

namespace {

using std::chrono::hours;
using std::chrono::microseconds;
using std::chrono::milliseconds;
constexpr std::int64_t unbounded = std::numeric_limits<std::int64_t>::max();

// The byte offset of `m` in a server_config (no offsetof: the type is not
// standard-layout).
template <class T>
std::size_t offset_of(T server_config::*m) {
  static const server_config probe{};
  return static_cast<std::size_t>(reinterpret_cast<const char*>(&(probe.*m)) - reinterpret_cast<const char*>(&probe));
}

// A number as a signed 64-bit value, saturating (an unsigned value past
// INT64_MAX compares as INT64_MAX).
template <class T>
std::int64_t as_int64(T v) {
  if constexpr (std::is_unsigned_v<T>)
    return v > static_cast<std::make_unsigned_t<std::int64_t>>(unbounded) ? unbounded : static_cast<std::int64_t>(v);
  else
    return static_cast<std::int64_t>(v);
}

// One end of a range: a constant, or the value of another setting.
struct bound {
  std::int64_t value = 0;
  std::string_view follows;                            // the other setting's name
  std::int64_t (*of)(const server_config&) = nullptr;  // its value

  std::int64_t at(const server_config& c) const { return of ? of(c) : value; }
  std::string text(const server_config& c) const {
    return follows.empty() ? std::to_string(value) : std::string(follows) + " (" + std::to_string(of(c)) + ")";
  }
  std::string doc() const { return follows.empty() ? std::to_string(value) : "`--" + std::string(follows) + "`"; }
};
bound follows(std::string_view name, std::int64_t (*of)(const server_config&)) { return {0, name, of}; }

// "host:port" of --listen or --http. Throws std::invalid_argument naming
// the option.
std::pair<std::string, std::uint16_t> split_host_port(std::string_view option, const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos) throw std::invalid_argument("--" + std::string(option) + " must be host:port");
  const std::string_view port_text = std::string_view(text).substr(colon + 1);
  unsigned port = 0;
  const auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc{} || end != port_text.data() + port_text.size() || port_text.empty() || port > 65535)
    throw std::invalid_argument("--" + std::string(option) + " port must be a number 0..65535");
  return {text.substr(0, colon), static_cast<std::uint16_t>(port)};
}

// A row under construction: the kind-specific makers below fill in how it
// parses and shows; the chained calls add what every kind may have.
struct row {
  setting s;

  row& doc(std::string_view text) {
    s.doc = text;
    return *this;
  }
  row& reloadable() {
    s.effect = takes_effect::at_reload;
    return *this;
  }
  row& stats() {
    s.in_stats = true;
    return *this;
  }
  // A default that is a rule; `apply` (optional) sets it when the user
  // gave no value.
  row& default_rule(std::string_view text, std::function<void(server_config&)> apply = {}) {
    s.default_doc = text;
    s.derive = std::move(apply);
    return *this;
  }
  // Values outside lo..hi (in the row's unit) are refused by validate().
  template <class Get>
  row& range(bound lo, bound hi, Get get) {
    const bool open_ended = hi.value == unbounded && hi.follows.empty();
    const std::string unit = s.unit.empty() ? std::string() : " " + std::string(s.unit);
    s.range_doc = (open_ended ? "at least " + lo.doc() : lo.doc() + " .. " + hi.doc()) + unit;
    s.check = [name = s.name, unit, open_ended, lo, hi, get](const server_config& c) {
      const std::int64_t v = get(c);
      if (v >= lo.at(c) && v <= hi.at(c)) return;
      throw std::invalid_argument(
          std::string(name) + " must be " +
          (open_ended ? "at least " + lo.text(c) : "between " + lo.text(c) + " and " + hi.text(c)) + unit);
    };
    return *this;
  }
  // A check of its own (a range with a reason).
  row& check(std::string range_text, std::function<void(const server_config&)> f) {
    s.range_doc = std::move(range_text);
    s.check = std::move(f);
    return *this;
  }
};

row make(std::string_view name, std::string_view help, std::string_view unit, std::vector<std::size_t> fields) {
  row r;
  r.s.name = name;
  r.s.help = help;
  r.s.unit = unit;
  r.s.fields = std::move(fields);
  return r;
}

std::string flag_of(std::string_view name) { return "--" + std::string(name); }

// An integer, parsed by CLI11 (a non-number is CLI11's error).
template <class T>
row integer(std::string_view name, T server_config::*m, std::string_view help, std::string_view unit = {}) {
  row r = make(name, help, unit, {offset_of(m)});
  r.s.add = [name, help, m](CLI::App& app, server_config& into) {
    return app.add_option(flag_of(name), into.*m, std::string(help));
  };
  r.s.show = [m](const server_config& c) { return std::to_string(c.*m); };
  r.s.assign = [m](server_config& to, const server_config& from) { to.*m = from.*m; };
  return r;
}
template <class T>
auto value_of(T server_config::*m) {
  return [m](const server_config& c) { return as_int64(c.*m); };
}

// A duration, given as an integer count of its unit (s, ms or us).
template <class Rep, class Period>
row duration(std::string_view name, std::chrono::duration<Rep, Period> server_config::*m, std::string_view help) {
  using D = std::chrono::duration<Rep, Period>;
  row r = make(name, help,
               std::is_same_v<D, microseconds>           ? "us"
               : std::is_same_v<D, std::chrono::seconds> ? "s"
                                                         : "ms",
               {offset_of(m)});
  r.s.add = [name, help, m](CLI::App& app, server_config& into) {
    return app.add_option_function<std::int64_t>(
        flag_of(name), [&into, m](std::int64_t v) { into.*m = D(v); }, std::string(help));
  };
  r.s.show = [m](const server_config& c) { return std::to_string((c.*m).count()); };
  r.s.assign = [m](server_config& to, const server_config& from) { to.*m = from.*m; };
  return r;
}
template <class Rep, class Period>
auto count_of(std::chrono::duration<Rep, Period> server_config::*m) {
  return [m](const server_config& c) { return static_cast<std::int64_t>((c.*m).count()); };
}

// Text; `choices` (if any) are the only values accepted.
row text(std::string_view name, std::string server_config::*m, std::string_view help,
         std::vector<std::string> choices = {}) {
  row r = make(name, help, {}, {offset_of(m)});
  r.s.add = [name, help, m, choices](CLI::App& app, server_config& into) {
    auto* o = app.add_option(flag_of(name), into.*m, std::string(help));
    if (!choices.empty()) o->check(CLI::IsMember(choices));
    return o;
  };
  r.s.show = [m](const server_config& c) { return c.*m; };
  r.s.assign = [m](server_config& to, const server_config& from) { to.*m = from.*m; };
  if (!choices.empty()) {
    std::string one_of;
    for (const auto& c : choices) one_of += (one_of.empty() ? "" : ", ") + ("`" + c + "`");
    r.s.range_doc = one_of;
  }
  return r;
}

// An enumeration, given by the names in `names` (index = value).
template <class E, std::size_t N>
row choice(std::string_view name, E server_config::*m, std::array<std::string_view, N> names, std::string_view help) {
  row r = make(name, help, {}, {offset_of(m)});
  const std::vector<std::string> accepted(names.begin(), names.end());
  r.s.add = [name, help, m, names, accepted](CLI::App& app, server_config& into) {
    return app
        .add_option_function<std::string>(
            flag_of(name),
            [&into, m, names](const std::string& v) {
              for (std::size_t i = 0; i < N; ++i)
                if (names[i] == v) into.*m = static_cast<E>(i);
            },
            std::string(help))
        ->check(CLI::IsMember(accepted));
  };
  r.s.show = [m, names](const server_config& c) { return std::string(names[static_cast<std::size_t>(c.*m)]); };
  r.s.assign = [m](server_config& to, const server_config& from) { to.*m = from.*m; };
  std::string one_of;
  for (const auto& n : names) one_of += (one_of.empty() ? "" : ", ") + ("`" + std::string(n) + "`");
  r.s.range_doc = one_of;
  return r;
}

// A switch: given means true (a config file says true or false).
row toggle(std::string_view name, bool server_config::*m, std::string_view help) {
  row r = make(name, help, {}, {offset_of(m)});
  r.s.add = [name, help, m](CLI::App& app, server_config& into) {
    return app.add_flag(flag_of(name), into.*m, std::string(help));
  };
  r.s.show = [m](const server_config& c) { return std::string(c.*m ? "true" : "false"); };
  r.s.assign = [m](server_config& to, const server_config& from) { to.*m = from.*m; };
  return r;
}

// A repeatable text (a TOML list in a config file).
row repeated(std::string_view name, std::vector<std::string> server_config::*m, std::string_view help) {
  row r = make(name, help, {}, {offset_of(m)});
  r.s.add = [name, help, m](CLI::App& app, server_config& into) {
    return app.add_option(flag_of(name), into.*m, std::string(help));
  };
  r.s.show = [m](const server_config& c) {
    std::string out;
    for (const auto& v : c.*m) out += (out.empty() ? "" : ",") + v;
    return out;
  };
  r.s.assign = [m](server_config& to, const server_config& from) { to.*m = from.*m; };
  return r;
}

// host:port into two fields; an empty host shows as "" (off).
row address(std::string_view name, std::string server_config::*host, std::uint16_t server_config::*port,
            std::string_view help) {
  row r = make(name, help, {}, {offset_of(host), offset_of(port)});
  r.s.add = [name, help, host, port](CLI::App& app, server_config& into) {
    return app.add_option_function<std::string>(
        flag_of(name),
        [&into, name, host, port](const std::string& v) {
          std::tie(into.*host, into.*port) = split_host_port(name, v);
        },
        std::string(help));
  };
  r.s.show = [host, port](const server_config& c) {
    return (c.*host).empty() ? std::string() : c.*host + ":" + std::to_string(c.*port);
  };
  r.s.assign = [host, port](server_config& to, const server_config& from) {
    to.*host = from.*host;
    to.*port = from.*port;
  };
  return r;
}

// --flag NAME=PERCENT, repeatable.
row server_flags(std::string_view help) {
  row r = make("flag", help, {}, {offset_of(&server_config::flags)});
  r.s.add = [help](CLI::App& app, server_config& into) {
    return app.add_option_function<std::vector<std::string>>(
        "--flag",
        [&into](const std::vector<std::string>& given) {
          for (const auto& f : given) {
            const auto eq = f.find('=');
            const std::string name = f.substr(0, eq);
            if (eq == std::string::npos || !feature_flags::find(name))
              throw std::invalid_argument("--flag " + f + ": expected NAME=PERCENT with a known flag (offers)");
            const std::string pct = f.substr(eq + 1);
            if (pct.empty() || pct.size() > 3 || pct.find_first_not_of("0123456789") != std::string::npos ||
                std::stoi(pct) > 100)
              throw std::invalid_argument("--flag " + f + ": the percentage is 0..100");
            into.flags.emplace_back(name, static_cast<std::uint8_t>(std::stoi(pct)));
          }
        },
        std::string(help));
  };
  r.s.show = [](const server_config& c) {
    std::string out;
    for (const auto& [name, pct] : c.flags) out += (out.empty() ? "" : ",") + name + "=" + std::to_string(pct);
    return out;
  };
  r.s.assign = [](server_config& to, const server_config& from) { to.flags = from.flags; };
  r.s.range_doc = "0 .. 100 per flag";
  return r;
}

std::vector<setting> build() {
  using c = server_config;
  std::vector<row> rows;
  const auto add = [&rows](row r) { rows.push_back(std::move(r)); };

  // Where it listens and keeps its data.
  add(address("listen", &c::listen_host, &c::listen_port, "host:port to listen on (port 0 = any free port)")
          .doc("host:port (port 0 = any free port)"));
  add(text("data-dir", &c::data_dir, "data folder (created if missing)")
          .doc("data folder, created if missing; the sequence log lives in `<data-dir>/log` (an empty value turns "
               "the log off)")
          .stats());
  add(text("port-file", &c::port_file, "write the bound port to this file once listening")
          .doc("write the bound port there once listening"));
  add(address("http", &c::http_host, &c::http_port,
              "host:port of the HTTP monitoring port (/metrics, /healthz, /readyz, /stats, /connz, /; port 0 = any "
              "free port). Off by default")
          .doc("host:port of the HTTP monitoring port: `/metrics` (Prometheus), `/healthz`, `/readyz`, `/stats`, "
               "`/connz`, `/` (a status page); port 0 = any free port (\"The monitoring port\" below)"));
  add(toggle("http-public", &c::http_public,
             "allow --http on an address other hosts can reach (the monitoring port has no authentication)")
          .doc("allow `--http` on an address other hosts can reach (the monitoring port has no authentication; "
               "refused otherwise, exit 2)"));

  // Connections and frames.
  add(integer("max-frame", &c::max_frame, "largest accepted frame in bytes", "bytes")
          .range({protocol::min_max_frame}, {64 << 20}, value_of(&c::max_frame))
          .stats());
  add(integer("max-connections", &c::max_connections, "connection cap")
          .doc("connection cap; excess connections get `too_many_connections` with a retry hint "
               "([`docs/protocol.md`](protocol.md) §9.1)")
          .range({1}, {unbounded}, value_of(&c::max_connections))
          .reloadable()
          .stats());
  add(integer("admin-slots", &c::admin_slots,
              "connections beyond max-connections kept for clients asking the \"admin\" capability (the CLI)")
          .doc("connections beyond `--max-connections` kept for clients asking the `admin` capability "
               "(`switchyard-cli`), so an operator is never locked out (with `--auth-file`, admin principals only; "
               "without one, anyone may ask)")
          .range({0}, {1000}, value_of(&c::admin_slots))
          .reloadable());
  add(integer("max-hellos-per-s", &c::max_hellos_per_s,
              "new hellos admitted per second (token bucket; admin hellos exempt); others get rate_limited with a "
              "retry hint. 0 = no limit")
          .doc("new hellos admitted per second (token bucket; admin hellos exempt); excess hellos get `rate_limited` "
               "with a retry hint that spreads them one token apart; 0 = no limit")
          .reloadable());
  add(integer("hello-burst", &c::hello_burst, "hellos admitted at once after a quiet spell (0 = max-hellos-per-s)")
          .doc("hellos admitted at once after a quiet spell (0 = `--max-hellos-per-s`; needs it)")
          .reloadable());
  add(duration("drain-window-ms", &c::drain_window,
               "SIGUSR2 (or a Drain request without a window): close the connections spread over this long, then "
               "exit")
          .doc("SIGUSR2 (or `switchyard-cli drain` without `--window`): close the connections spread over this "
               "long, then exit")
          .range({1}, {86'400'000}, count_of(&c::drain_window))
          .reloadable());
  add(duration("shutdown-grace-ms", &c::shutdown_grace,
               "SIGTERM: time the shutting_down goodbyes may take before the server exits anyway")
          .doc("SIGTERM: how long the `shutting_down` goodbyes may take before the server exits anyway")
          .range({1}, {600'000}, count_of(&c::shutdown_grace))
          .reloadable());
  add(duration("hello-timeout-ms", &c::hello_timeout, "time a new connection has to send its hello")
          .range({1}, {unbounded}, count_of(&c::hello_timeout))
          .reloadable());
  // At most an hour: the deadline (heartbeat_deadline, 2.5 intervals) must
  // not overflow, and the Welcome carries the interval as 32 bits.
  add(duration("heartbeat-ms", &c::heartbeat_interval,
               "server ping interval; a connection silent for 2.5 intervals is closed")
          .range({10}, {3'600'000}, count_of(&c::heartbeat_interval))
          .stats());
  add(integer("max-pending-bytes", &c::max_pending_bytes,
              "per-connection outbound queue limit; past it the connection is a slow consumer", "bytes")
          .doc("per-connection outbound queue; past it the connection is a slow consumer")
          .range(follows("max-frame", [](const c& x) { return as_int64(x.max_frame); }), {unbounded},
                 value_of(&c::max_pending_bytes))
          .stats());
  add(integer("write-coalesce-turns", &c::write_coalesce_turns,
              "under load (more input already waiting), a connection's write waits up to this many loop turns for "
              "more frames; never while idle; 0 = off")
          .doc("under load (the last read filled its buffer), a connection's write waits up to this many loop "
               "turns for more frames; never while the loop is idle; 0 = off")
          .range({0}, {64}, value_of(&c::write_coalesce_turns))
          .reloadable());
  add(duration("write-coalesce-us", &c::write_coalesce_time,
               "a write that waits for more frames never waits past this long after its oldest queued frame")
          .doc("a write that waits for more frames never waits once its oldest queued frame has waited this long "
               "(0 = off)")
          .range({0}, {1'000'000}, count_of(&c::write_coalesce_time))
          .reloadable());
  add(integer("write-coalesce-bytes", &c::write_coalesce_bytes,
              "a connection with this much queued writes at once, under load or not", "bytes")
          .default_rule("65536, at most `--max-pending-bytes`",
                        [](c& x) { x.write_coalesce_bytes = std::min<std::size_t>(64 * 1024, x.max_pending_bytes); })
          .range({1}, follows("max-pending-bytes", [](const c& x) { return as_int64(x.max_pending_bytes); }),
                 value_of(&c::write_coalesce_bytes))
          .reloadable());
  add(duration("frame-timeout-ms", &c::frame_timeout,
               "a frame must complete this long after its first byte arrived, or the connection is closed")
          .doc("a frame must complete this long after its first byte, or the connection is closed "
               "(`limit_exceeded`)")
          .range({1}, {unbounded}, count_of(&c::frame_timeout))
          .reloadable());
  add(integer("max-incomplete-bytes", &c::max_incomplete_bytes,
              "memory all connections' incomplete frames may hold together; past it the connection whose frame "
              "would grow is closed",
              "bytes")
          .doc("memory the incomplete frames of all connections may hold together; past it the connection whose "
               "frame would grow is closed")
          .range(follows("max-frame", [](const c& x) { return as_int64(x.max_frame); }), {unbounded},
                 value_of(&c::max_incomplete_bytes)));

  // What clients may make the broker hold.
  add(integer("max-subscriptions", &c::max_subscriptions, "subscription patterns one connection may hold")
          .range({1}, {unbounded}, value_of(&c::max_subscriptions))
          .reloadable());
  add(integer("max-inboxes", &c::max_inboxes, "inboxes one connection may have open")
          .range({1}, {unbounded}, value_of(&c::max_inboxes))
          .reloadable());
  add(integer("max-leases", &c::max_leases, "live leases in the server (a registry entry's own TTL is one)")
          .doc("live leases in the server (an entry with its own TTL takes one)")
          .range({1}, {unbounded}, value_of(&c::max_leases))
          .reloadable());
  add(integer("max-registry-entries", &c::max_registry_entries, "registry entries in the server")
          .range({1}, {unbounded}, value_of(&c::max_registry_entries))
          .reloadable());

  // Offers (the tables are sized at start).
  add(integer("max-offers", &c::max_offers, "live offers in the server; past it the oldest are forgotten")
          .doc("live offers in the server; past it the oldest are forgotten (`offers_evicted_total`; "
               "[`docs/offers.md`](offers.md))")
          .range({1}, {unbounded}, value_of(&c::max_offers)));
  add(integer("max-offer-bytes", &c::max_offer_bytes,
              "bytes of live offers (payloads, keys, bookkeeping); past it the oldest are forgotten", "bytes")
          .doc("bytes live offers may hold (payloads, keys, bookkeeping, the users' pending lists); past it the "
               "oldest are forgotten")
          .range({1}, {unbounded}, value_of(&c::max_offer_bytes)));
  add(integer("max-pending-per-key", &c::max_pending_per_key,
              "offers pending per route key; past it the key's oldest leaves its pending list")
          .range({1}, {unbounded}, value_of(&c::max_pending_per_key)));
  add(duration("max-offer-expiry-ms", &c::max_offer_expiry, "longest expiry a publish, send or offer may ask")
          .range({1}, {unbounded}, count_of(&c::max_offer_expiry))
          .reloadable());
  add(duration("exposure-window-ms", &c::exposure_window,
               "longest rolling window of an exposure cap or query; counts older than this are forgotten")
          .range({1}, {unbounded}, count_of(&c::exposure_window)));
  add(integer("max-exposure-keys", &c::max_exposure_keys,
              "route keys whose offers are counted for caps at once; offers to new keys past it are not counted")
          .doc("route keys whose offers are counted for caps at once (about 230 bytes each); offers to new keys "
               "past it are not counted (`exposure_untracked_total`)")
          .range({1}, {unbounded}, value_of(&c::max_exposure_keys)));
  add(server_flags("NAME=PERCENT: a server flag's share of connections at start (0..100; known: offers; default "
                   "100); repeatable")
          .doc("`NAME=PERCENT`: a server flag's share of connections at start (repeatable; the only flag is "
               "`offers`, [`docs/protocol.md`](protocol.md) §15.6). `switchyard-cli flags set` changes flags at "
               "once; a reload does not")
          .default_rule("`offers=100`"));
  add(choice("slow-consumer", &c::slow_consumer, std::array<std::string_view, 2>{"drop", "disconnect"},
             "what to do with a slow consumer: drop or disconnect")
          .doc("`drop` (count, then send a \"dropped N\" notice) or `disconnect`")
          .reloadable()
          .stats());

  // Leases.
  add(duration("lease-min-ttl-ms", &c::lease_min_ttl, "shortest lease TTL granted (shorter asks are raised)")
          .range({1}, {unbounded}, count_of(&c::lease_min_ttl)));
  add(duration("lease-max-ttl-ms", &c::lease_max_ttl, "longest lease TTL granted (longer asks are lowered)")
          .range(follows("lease-min-ttl-ms",
                         [](const c& x) { return static_cast<std::int64_t>(x.lease_min_ttl.count()); }),
                 {7 * 24 * 3'600'000}, count_of(&c::lease_max_ttl)));
  add(duration("sweep-ms", &c::sweep_period, "lease sweeper period: leases expire at most this late")
          .range({1},
                 follows("lease-min-ttl-ms",
                         [](const c& x) { return static_cast<std::int64_t>(x.lease_min_ttl.count()); }),
                 count_of(&c::sweep_period)));
  add(integer("max-expiries-per-sweep", &c::max_expiries_per_sweep,
              "leases expired per sweep at most; the rest wait for the next turn")
          .range({1}, {unbounded}, value_of(&c::max_expiries_per_sweep)));
  {
    row r = duration("stall-threshold-ms", &c::stall_threshold,
                     "a sweeper this late was stalled: every lease then gets its full TTL from the stall's end");
    // Unset is -1 (stall_threshold_for derives it); a given value may not be negative.
    r.s.add = [help = r.s.help](CLI::App& app, server_config& into) {
      return app.add_option_function<std::int64_t>(
          "--stall-threshold-ms",
          [&into](std::int64_t v) {
            if (v < 0) throw std::invalid_argument("stall-threshold-ms must not be negative");
            into.stall_threshold = milliseconds(v);
          },
          std::string(help));
    };
    r.s.show = [](const server_config& x) {
      return x.stall_threshold.count() < 0 ? std::string() : std::to_string(x.stall_threshold.count());
    };
    add(std::move(r)
            .doc("a sweeper this late was stalled: every lease then gets at least its full TTL from the end of the "
                 "stall")
            .default_rule("`lease-min-ttl-ms`/2 − `sweep-ms`, at least `sweep-ms` (400)")
            .check("at least `--sweep-ms`, and with it at most half of `--lease-min-ttl-ms`", [](const c& x) {
              if (x.stall_threshold.count() < 0) return;  // the default
              // threshold + sweep > min_ttl / 2, without the sum (a huge threshold overflowed)
              if (x.stall_threshold < x.sweep_period || x.stall_threshold > x.lease_min_ttl / 2 - x.sweep_period)
                throw std::invalid_argument(
                    "stall-threshold-ms must be at least sweep-ms, and with sweep-ms at most half of "
                    "lease-min-ttl-ms (a longer pause could expire leases that were kept alive in time); leave it "
                    "unset for the default");
            }));
  }

  // The sequence log.
  add(choice("durability", &c::durability, std::array<std::string_view, 3>{"sync", "batch", "none"},
             "sequence log: sync (acknowledged = fsynced), batch (fsync every --sync-interval-ms) or none")
          .doc("sequence log: `sync` (acknowledged = fsynced), `batch` (fsync every `--sync-interval-ms`), `none`")
          .stats());
  add(duration("sync-interval-ms", &c::sync_interval, "batch durability: fsync at most this often")
          .range({1}, {unbounded}, count_of(&c::sync_interval)));
  add(integer("log-max-bytes", &c::log_max_bytes,
              "largest size of the sequence log; then appends fail with storage_full", "bytes")
          .doc("largest sequence log; then (or when the disk is full) appends fail with `storage_full`")
          .range({4 << 20}, {unbounded}, value_of(&c::log_max_bytes)));
  add(integer("retention-max-records", &c::retention_max_records, "keep at most this many records per stream (0 = all)")
          .doc("keep at most this many records per stream (0 = all); trimmed in each commit and in the background"));
  add(duration("retention-max-age-ms", &c::retention_max_age, "drop records older than this (0 = keep)")
          .range({0}, {unbounded}, count_of(&c::retention_max_age)));
  add(integer("retention-max-bytes", &c::retention_max_bytes,
              "keep at most this many record bytes (payload + delivery destination) per stream (0 = all)", "bytes"));
  add(repeated("durable-channel", &c::durable_channels,
               "channel pattern whose publishes go through the log (stream = channel name); repeatable")
          .doc("channel pattern whose plain publishes go through the log, into the stream named like the channel "
               "(repeatable; needs `--data-dir`)"));
  add(toggle("verify-on-start", &c::verify_on_start,
             "check the whole sequence log (in a child process) before opening it; refuse to start if damaged")
          .doc("check the whole sequence log (in a child process) before opening it; a damaged log: exit 1 "
               "([`docs/storage.md`](storage.md), \"Damage\")"));
  add(toggle("verify-log", &c::verify_log,
             "check the sequence log in --data-dir and exit: 0 intact, 1 damaged, 3 cannot check (safe next to a "
             "running broker)")
          .doc("check the sequence log in `--data-dir` and exit: 0 intact, 1 damaged, 3 nothing to check; safe "
               "next to a running broker"));
  add(toggle("json", &c::verify_json, "with --verify-log: print the report as one JSON object on stdout")
          .doc("with `--verify-log`: the report as one JSON object on stdout"));

  // TLS: the files are read again on SIGHUP (on or off is fixed at start).
  add(text("tls-cert", &c::tls_cert,
           "TLS on the client port: certificate chain (PEM); with --tls-key. Re-read on SIGHUP")
          .doc("TLS on the client port: the broker's certificate chain (PEM); needs `--tls-key`. TLS 1.2 at least; "
               "plain clients are refused ([`docs/security.md`](security.md), \"TLS\"). Read again on SIGHUP; "
               "turning TLS on or off takes a restart")
          .reloadable());
  add(text("tls-key", &c::tls_key, "private key of --tls-cert (PEM, unencrypted)")
          .doc("the private key of `--tls-cert` (PEM, unencrypted)")
          .reloadable());
  add(text("tls-ca", &c::tls_ca, "CAs (PEM) that client certificates must chain to").reloadable());
  add(toggle("tls-verify-client", &c::tls_verify_client,
             "mTLS: refuse clients without a certificate signed by --tls-ca")
          .doc("mTLS: refuse clients without a certificate signed by `--tls-ca` (needs `--tls-ca`)")
          .reloadable());

  // Authentication.
  add(text("auth-file", &c::auth_file,
           "authentication and permissions: TOML file of principals (docs/security.md). Re-read on SIGHUP")
          .doc("authentication and permissions: a TOML file of principals, their credentials (token hashes, Ed25519 "
               "public keys, client certificate subjects) and what each may do ([`docs/security.md`](security.md)); "
               "an invalid file: exit 2 with its line. The file is read again on SIGHUP; naming another file takes "
               "a restart"));
  add(toggle("allow-anonymous", &c::allow_anonymous,
             "without --auth-file, listen on a non-loopback address all the same (anyone may do anything)")
          .doc("without `--auth-file`, listen on a non-loopback address all the same: anyone who connects may do "
               "everything (protected mode refuses that otherwise, exit 2)"));
  add(duration("auth-failure-delay-ms", &c::auth_failure_delay, "how long a refused hello waits for its unauthorized")
          .doc("a hello that fails authentication is answered `unauthorized` after this delay, the same for every "
               "cause")
          .range({0}, {10'000}, count_of(&c::auth_failure_delay))
          .reloadable());
  add(integer("auth-failures-per-min", &c::auth_failures_per_min,
              "failed hellos per source address per minute before it is rate limited (0 = no limit)")
          .doc("failed authentications per source address per minute (and burst) before its hellos are answered "
               "`rate_limited`; 0 = no limit")
          .reloadable());

  // Cluster mode (docs/cluster.md).
  const auto name_check = [](std::string_view flag, std::string_view v) {
    if (v.empty() || v.size() > 64 ||
        v.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != std::string::npos)
      throw std::invalid_argument(std::string(flag) + " must be 1..64 letters, digits, '_' or '-'");
  };
  add(text("cluster-node-id", &c::cluster_node_id,
           "cluster mode: this node's id, unique in the cluster (needs --cluster-etcd and --cluster-nats). Off by "
           "default: one node")
          .doc("cluster mode ([`docs/cluster.md`](cluster.md)): this node's id, unique in the cluster; needs "
               "`--cluster-etcd` and `--cluster-nats`. Empty: a single node, as without cluster mode")
          .check("1..64 letters, digits, `_`, `-`",
                 [name_check](const server_config& c) {
                   if (c.cluster_node_id.empty()) return;
                   name_check("cluster-node-id", c.cluster_node_id);
                   if (c.cluster_etcd.empty() || c.cluster_nats.empty())
                     throw std::invalid_argument("cluster-node-id needs --cluster-etcd and --cluster-nats");
                 })
          .stats());
  add(text("cluster-name", &c::cluster_name,
           "cluster mode: the cluster's name (etcd key prefix /switchyard/<name>/, NATS subjects <name>.*)")
          .doc("the cluster's name: its keys in etcd are under `/switchyard/<name>/`, its NATS subjects `<name>.*`; "
               "clusters sharing etcd and NATS need different names")
          .check("1..64 letters, digits, `_`, `-`",
                 [name_check](const server_config& c) { name_check("cluster-name", c.cluster_name); }));
  add(repeated("cluster-etcd", &c::cluster_etcd,
               "cluster mode: an etcd client endpoint, host:port or http://host:port (repeatable)")
          .doc("an etcd client endpoint, `host:port` or `http://host:port` (repeatable; list every member)"));
  add(repeated("cluster-nats", &c::cluster_nats, "cluster mode: a NATS server URL, nats://host:port (repeatable)")
          .doc("a NATS server URL, `nats://host:port` (repeatable; the first is the node's nearest). NATS's "
               "`max_payload` must exceed `--max-frame` by 1 KiB (checked at start)"));
  add(text("cluster-advertise", &c::cluster_advertise,
           "cluster mode: host:port clients use to reach this node (default: --listen's)")
          .default_rule("`--listen`'s address"));
  add(integer("cluster-lease-ttl-s", &c::cluster_lease_ttl_s,
              "cluster mode: TTL of the node's etcd lease; a node silent this long leaves the cluster", "s")
          .doc("TTL of the node's etcd lease: a node that cannot renew it (dead, cut off from etcd, or its loop "
               "stuck) leaves the cluster this long after its last renewal")
          .range({2}, {60}, value_of(&c::cluster_lease_ttl_s)));
  add(duration("cluster-interest-timeout-ms", &c::cluster_interest_timeout,
               "cluster mode: how long a Subscribe waits for every other node to hold its interest")
          .doc("how long a Subscribe waits for every other node to acknowledge its interest; a node silent longer "
               "is presumed down, the Subscribe answered, and the node sent the whole interest when it answers")
          .range({100}, {60'000}, count_of(&c::cluster_interest_timeout)));
  add(duration("cluster-forward-timeout-ms", &c::cluster_forward_timeout,
               "cluster mode: how long a request forwarded to another node waits for its answer")
          .doc("how long a request this node forwards to another node (a send to a user whose gateway is "
               "elsewhere, a route put confirmed by its partition's owner, a request about a durable stream "
               "another node holds) waits for the answer; then it is answered outcome_unknown (a send or a stream "
               "request: it may or may not have been carried out) or unavailable (a put)")
          .range({100}, {60'000}, count_of(&c::cluster_forward_timeout)));
  add(duration("cluster-drain-after-s", &c::cluster_drain_after,
               "cluster mode: out of standing (cut off from etcd) this long, drain the clients to the other nodes "
               "and exit 75; 0 = never")
          .doc("a node out of standing (cut off from etcd) this long drains its clients to the other nodes over "
               "`drain-window-ms`, as SIGUSR2 does, and exits 75, for its supervisor to start it again. 0: never "
               "(the default: when etcd itself is down every node is cut off at once, and draining them all would "
               "turn an etcd outage into a total one)")
          .range({0}, {86'400}, count_of(&c::cluster_drain_after))
          .reloadable());

  // Logs.
  add(text("log-level", &c::log_level, "trace, debug, info, warn, error, critical or off",
           {"trace", "debug", "info", "warn", "error", "critical", "off"})
          .reloadable());
  add(text("log-format", &c::log_format,
           "text (ISO 8601 time with UTC offset, logger, level, message) or json (one object per line: time, level, "
           "logger, msg)",
           {"text", "json"})
          .doc("`text`: one line per event, `2026-12-01T16:12:05.123+00:00 [broker] [info] ...` (ISO 8601 with the "
               "UTC offset); `json`: one object per line, `{\"time\":...,\"level\":...,\"logger\":\"broker\","
               "\"msg\":...}`, for log shippers"));

  std::vector<setting> out;
  out.reserve(rows.size());
  for (auto& r : rows) out.push_back(std::move(r.s));
  return out;
}

std::string cell(std::string_view text) {
  std::string out;
  for (const char ch : text) {
    if (ch == '|')
      out += "\\|";
    else
      out += ch;
  }
  return out;
}

}  // namespace

std::span<const setting> settings() {
  static const std::vector<setting> table = build();
  return table;
}

const setting* find_setting(std::string_view name) {
  for (const auto& s : settings())
    if (s.name == name) return &s;
  return nullptr;
}

std::span<const std::size_t> internal_fields() {
  static const std::vector<std::size_t> fields{
      offset_of(&server_config::config_file),
      offset_of(&server_config::command_line),
      offset_of(&server_config::instance_id),
      offset_of(&server_config::log_wall_clock_ms),
  };
  return fields;
}

std::string settings_markdown() {
  const server_config defaults;
  std::string out =
      "| flag | default | range | on SIGHUP | meaning |\n"
      "| --- | --- | --- | --- | --- |\n";
  for (const auto& s : settings()) {
    std::string value;
    if (!s.default_doc.empty()) {
      value = std::string(s.default_doc);
    } else {
      const std::string v = s.show(defaults);
      value = v.empty() ? "–" : v == "false" ? "off" : v == "true" ? "on" : "`" + v + "`";
    }
    const std::string_view meaning = s.doc.empty() ? s.help : s.doc;
    out += "| `--" + std::string(s.name) + "` | " + cell(value) + " | " +
           cell(s.range_doc.empty() ? "–" : s.range_doc) + " | " +
           (s.effect == takes_effect::at_reload ? "applied" : "restart") + " | " + cell(meaning) + " |\n";
  }
  out += "| `--config` | – | – | – | TOML file with any of these settings, long names as keys |\n";
  return out;
}

}  // namespace switchyard::broker
