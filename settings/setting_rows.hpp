#pragma once
// Builders of settings-table rows (setting.hpp) over a program's config
// struct, one per kind of value: integer, duration, text, choice, toggle,
// repeated text, host:port address. Each fills in how the row parses
// (CLI11), shows, copies and which fields it holds; the chained calls of
// row<Config> add what every kind may have (docs text, reloadable, stats,
// a default rule, a range). And markdown(): the docs' flag table of rows.
//
//   using c = my_config;
//   std::vector<setting<c>> rows{
//       integer("max-peers", &c::max_peers, "peers at most").range({1}, {1000}, value_of(&c::max_peers)).s,
//       duration("timeout-ms", &c::timeout, "how long a peer may be silent").reloadable().s,
//   };
//
// Every text a builder takes (name, help, doc, unit, default rule) is a
// std::string_view borrowed for as long as the rows live: give string
// literals. Builders throw nothing but std::bad_alloc.

#include "settings/setting.hpp"

#include <CLI/CLI.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace switchyard::settings {

// The upper end of a range without one.
inline constexpr std::int64_t unbounded = std::numeric_limits<std::int64_t>::max();

// The byte offset of `m` in a Config (no offsetof: the type need not be
// standard-layout). Config must be default-constructible.
template <class Config, class T>
std::size_t offset_of(T Config::*m) {
  static const Config probe{};
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
template <class Config>
struct bound {
  std::int64_t value = 0;
  std::string_view follows;                     // the other setting's name
  std::int64_t (*of)(const Config&) = nullptr;  // its value

  std::int64_t at(const Config& c) const { return of ? of(c) : value; }
  // For an error message: "16384", or "max-frame (1048576)".
  std::string text(const Config& c) const {
    return follows.empty() ? std::to_string(value) : std::string(follows) + " (" + std::to_string(of(c)) + ")";
  }
  // For the docs: "16384", or "`--max-frame`".
  std::string doc() const { return follows.empty() ? std::to_string(value) : "`--" + std::string(follows) + "`"; }
};
// The end of a range that is the value of the setting `name`, read by `of`.
// Config is not deduced from a lambda: call follows<my_config>(...).
template <class Config>
bound<Config> follows(std::string_view name, std::int64_t (*of)(const Config&)) {
  return {0, name, of};
}

// "host:port" given to the option `option` (without dashes), split. Throws
// std::invalid_argument naming the option when there is no colon or the
// port is not a number 0..65535.
std::pair<std::string, std::uint16_t> split_host_port(std::string_view option, const std::string& text);

namespace detail {
inline std::string flag_of(std::string_view name) { return "--" + std::string(name); }
// "`a`, `b`, `c`": the docs' range of a setting with fixed choices.
std::string one_of(std::span<const std::string> choices);
// `text` with '|' escaped, for a Markdown table cell.
std::string markdown_cell(std::string_view text);
}  // namespace detail

// A row under construction: the kind-specific makers below fill in how it
// parses and shows; the chained calls add what every kind may have. The
// finished row is `s`.
template <class Config>
struct row {
  setting<Config> s;

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
  row& default_rule(std::string_view text, std::function<void(Config&)> apply = {}) {
    s.default_doc = text;
    s.derive = std::move(apply);
    return *this;
  }
  // Values outside lo..hi (in the row's unit), as `get` reads them from a
  // Config, are refused by the row's check: "NAME must be between LO and
  // HI UNIT" ("at least LO UNIT" when hi is unbounded).
  template <class Get>
  row& range(bound<Config> lo, bound<Config> hi, Get get) {
    const bool open_ended = hi.value == unbounded && hi.follows.empty();
    const std::string unit = s.unit.empty() ? std::string() : " " + std::string(s.unit);
    s.range_doc = (open_ended ? "at least " + lo.doc() : lo.doc() + " .. " + hi.doc()) + unit;
    s.check = [name = s.name, unit, open_ended, lo, hi, get](const Config& c) {
      const std::int64_t v = get(c);
      if (v >= lo.at(c) && v <= hi.at(c)) return;
      throw std::invalid_argument(
          std::string(name) + " must be " +
          (open_ended ? "at least " + lo.text(c) : "between " + lo.text(c) + " and " + hi.text(c)) + unit);
    };
    return *this;
  }
  // A check of its own (a range with a reason), documented as `range_text`.
  row& check(std::string range_text, std::function<void(const Config&)> f) {
    s.range_doc = std::move(range_text);
    s.check = std::move(f);
    return *this;
  }
};

// A row with its name, help, unit and fields only: for a kind of its own,
// whose maker then sets s.add, s.show and s.assign.
template <class Config>
row<Config> make(std::string_view name, std::string_view help, std::string_view unit, std::vector<std::size_t> fields) {
  row<Config> r;
  r.s.name = name;
  r.s.help = help;
  r.s.unit = unit;
  r.s.fields = std::move(fields);
  return r;
}

// An integer, parsed by CLI11 (a non-number is CLI11's error).
template <class Config, class T>
row<Config> integer(std::string_view name, T Config::*m, std::string_view help, std::string_view unit = {}) {
  row<Config> r = make<Config>(name, help, unit, {offset_of(m)});
  r.s.add = [name, help, m](CLI::App& app, Config& into) {
    return app.add_option(detail::flag_of(name), into.*m, std::string(help));
  };
  r.s.show = [m](const Config& c) { return std::to_string(c.*m); };
  r.s.assign = [m](Config& to, const Config& from) { to.*m = from.*m; };
  return r;
}
// The value of an integer field, for range().
template <class Config, class T>
auto value_of(T Config::*m) {
  return [m](const Config& c) { return as_int64(c.*m); };
}

// A duration, given as an integer count of its unit (s, ms or us).
template <class Config, class Rep, class Period>
row<Config> duration(std::string_view name, std::chrono::duration<Rep, Period> Config::*m, std::string_view help) {
  using D = std::chrono::duration<Rep, Period>;
  row<Config> r = make<Config>(name, help,
                               std::is_same_v<D, std::chrono::microseconds> ? "us"
                               : std::is_same_v<D, std::chrono::seconds>    ? "s"
                                                                            : "ms",
                               {offset_of(m)});
  r.s.add = [name, help, m](CLI::App& app, Config& into) {
    return app.add_option_function<std::int64_t>(
        detail::flag_of(name), [&into, m](std::int64_t v) { into.*m = D(v); }, std::string(help));
  };
  r.s.show = [m](const Config& c) { return std::to_string((c.*m).count()); };
  r.s.assign = [m](Config& to, const Config& from) { to.*m = from.*m; };
  return r;
}
// The count of a duration field, for range().
template <class Config, class Rep, class Period>
auto count_of(std::chrono::duration<Rep, Period> Config::*m) {
  return [m](const Config& c) { return static_cast<std::int64_t>((c.*m).count()); };
}

// Text; `choices` (if any) are the only values accepted.
template <class Config>
row<Config> text(std::string_view name, std::string Config::*m, std::string_view help,
                 std::vector<std::string> choices = {}) {
  row<Config> r = make<Config>(name, help, {}, {offset_of(m)});
  if (!choices.empty()) r.s.range_doc = detail::one_of(choices);
  r.s.add = [name, help, m, choices = std::move(choices)](CLI::App& app, Config& into) {
    auto* o = app.add_option(detail::flag_of(name), into.*m, std::string(help));
    if (!choices.empty()) o->check(CLI::IsMember(choices));
    return o;
  };
  r.s.show = [m](const Config& c) { return c.*m; };
  r.s.assign = [m](Config& to, const Config& from) { to.*m = from.*m; };
  return r;
}

// An enumeration, given by the names in `names` (index = value).
template <class Config, class E, std::size_t N>
row<Config> choice(std::string_view name, E Config::*m, std::array<std::string_view, N> names, std::string_view help) {
  row<Config> r = make<Config>(name, help, {}, {offset_of(m)});
  const std::vector<std::string> accepted(names.begin(), names.end());
  r.s.add = [name, help, m, names, accepted](CLI::App& app, Config& into) {
    return app
        .add_option_function<std::string>(
            detail::flag_of(name),
            [&into, m, names](const std::string& v) {
              for (std::size_t i = 0; i < N; ++i)
                if (names[i] == v) into.*m = static_cast<E>(i);
            },
            std::string(help))
        ->check(CLI::IsMember(accepted));
  };
  r.s.show = [m, names](const Config& c) { return std::string(names[static_cast<std::size_t>(c.*m)]); };
  r.s.assign = [m](Config& to, const Config& from) { to.*m = from.*m; };
  r.s.range_doc = detail::one_of(accepted);
  return r;
}

// NAME=PERCENT, repeatable: a feature flag's ramp (the share of users or
// connections it is on for). `known` says which names exist; `known_text`
// lists them for the error ("offers").
template <class Config>
row<Config> flag_ramp(std::string_view name, std::vector<std::pair<std::string, std::uint8_t>> Config::*m,
                      std::function<bool(std::string_view)> known, std::string known_text, std::string_view help) {
  row<Config> r = make<Config>(name, help, {}, {offset_of(m)});
  r.s.add = [name, help, m, known, known_text](CLI::App& app, Config& into) {
    return app.add_option_function<std::vector<std::string>>(
        detail::flag_of(name),
        [&into, name, m, known, known_text](const std::vector<std::string>& given) {
          for (const auto& f : given) {
            const auto eq = f.find('=');
            const std::string flag = f.substr(0, eq);
            if (eq == std::string::npos || !known(flag))
              throw std::invalid_argument(detail::flag_of(name) + " " + f +
                                          ": expected NAME=PERCENT with a known flag (" + known_text + ")");
            const std::string pct = f.substr(eq + 1);
            if (pct.empty() || pct.size() > 3 || pct.find_first_not_of("0123456789") != std::string::npos ||
                std::stoi(pct) > 100)
              throw std::invalid_argument(detail::flag_of(name) + " " + f + ": the percentage is 0..100");
            (into.*m).emplace_back(flag, static_cast<std::uint8_t>(std::stoi(pct)));
          }
        },
        std::string(help));
  };
  r.s.show = [m](const Config& c) {
    std::string out;
    for (const auto& [flag, pct] : c.*m) out += (out.empty() ? "" : ",") + flag + "=" + std::to_string(pct);
    return out;
  };
  r.s.assign = [m](Config& to, const Config& from) { to.*m = from.*m; };
  r.s.range_doc = "0 .. 100 per flag";
  return r;
}

// A switch: given means true (a config file says true or false).
template <class Config>
row<Config> toggle(std::string_view name, bool Config::*m, std::string_view help) {
  row<Config> r = make<Config>(name, help, {}, {offset_of(m)});
  r.s.add = [name, help, m](CLI::App& app, Config& into) {
    return app.add_flag(detail::flag_of(name), into.*m, std::string(help));
  };
  r.s.show = [m](const Config& c) { return std::string(c.*m ? "true" : "false"); };
  r.s.assign = [m](Config& to, const Config& from) { to.*m = from.*m; };
  return r;
}

// A repeatable text (a TOML list in a config file); shown comma-separated.
template <class Config>
row<Config> repeated(std::string_view name, std::vector<std::string> Config::*m, std::string_view help) {
  row<Config> r = make<Config>(name, help, {}, {offset_of(m)});
  r.s.add = [name, help, m](CLI::App& app, Config& into) {
    return app.add_option(detail::flag_of(name), into.*m, std::string(help));
  };
  r.s.show = [m](const Config& c) {
    std::string out;
    for (const auto& v : c.*m) out += (out.empty() ? "" : ",") + v;
    return out;
  };
  r.s.assign = [m](Config& to, const Config& from) { to.*m = from.*m; };
  return r;
}

// host:port into two fields (split_host_port's errors); an empty host
// shows as "" (off).
template <class Config>
row<Config> address(std::string_view name, std::string Config::*host, std::uint16_t Config::*port,
                    std::string_view help) {
  row<Config> r = make<Config>(name, help, {}, {offset_of(host), offset_of(port)});
  r.s.add = [name, help, host, port](CLI::App& app, Config& into) {
    return app.add_option_function<std::string>(
        detail::flag_of(name),
        [&into, name, host, port](const std::string& v) {
          std::tie(into.*host, into.*port) = split_host_port(name, v);
        },
        std::string(help));
  };
  r.s.show = [host, port](const Config& c) {
    return (c.*host).empty() ? std::string() : c.*host + ":" + std::to_string(c.*port);
  };
  r.s.assign = [host, port](Config& to, const Config& from) {
    to.*host = from.*host;
    to.*port = from.*port;
  };
  return r;
}

// The flag table of a program's docs (Markdown): a header, then one row per
// setting, in order: flag, default (the rule, or the value in `defaults`:
// "–" when unset, "on"/"off" for a switch), range, on SIGHUP ("applied" or
// "restart"), meaning (doc, else help); then `extra_rows` verbatim (whole
// table lines, each ending in "\n", e.g. one for --config).
template <class Config>
std::string markdown(std::span<const setting<Config>> rows, const Config& defaults, std::string_view extra_rows = {}) {
  std::string out =
      "| flag | default | range | on SIGHUP | meaning |\n"
      "| --- | --- | --- | --- | --- |\n";
  for (const auto& s : rows) {
    std::string value;
    if (!s.default_doc.empty()) {
      value = std::string(s.default_doc);
    } else {
      const std::string v = s.show(defaults);
      value = v.empty() ? "–" : v == "false" ? "off" : v == "true" ? "on" : "`" + v + "`";
    }
    const std::string_view meaning = s.doc.empty() ? s.help : s.doc;
    out += "| `--" + std::string(s.name) + "` | " + detail::markdown_cell(value) + " | " +
           detail::markdown_cell(s.range_doc.empty() ? "–" : s.range_doc) + " | " +
           (s.effect == takes_effect::at_reload ? "applied" : "restart") + " | " + detail::markdown_cell(meaning) +
           " |\n";
  }
  out += extra_rows;
  return out;
}

}  // namespace switchyard::settings
