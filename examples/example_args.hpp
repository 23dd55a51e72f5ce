#pragma once
// The command line every example shares, the way switchyard-cli takes it:
//   --help, -h                print the usage on stdout and exit 0
//   --address HOST:PORT       the broker ("[::1]:7878" for IPv6); default:
//                             $SWITCHYARD_ADDRESS, else 127.0.0.1:7878
// A flag's value is the next argument or follows '=' (--address=h:7878).
// A bad argument prints what is wrong and the usage on stderr and exits 2.
// Standard library only, so an example stays a program you can copy.

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace example {

constexpr std::string_view default_address = "127.0.0.1:7878";

// "host:port" or "[v6]:port", port 1..65535; false if it does not parse.
inline bool parse_address(std::string_view text, std::string& host, std::uint16_t& port) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == text.size()) return false;
  std::string_view h = text.substr(0, colon);
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  const std::string_view digits = text.substr(colon + 1);
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc{} || end != digits.data() + digits.size() || value == 0 || value > 65535) return false;
  host = std::string(h);
  port = static_cast<std::uint16_t>(value);
  return true;
}

class command_line {
 public:
  // `usage`: the whole text --help prints (ends with a newline).
  command_line(int argc, char** argv, std::string_view usage) : argc_(argc), argv_(argv), usage_(usage) {
    const char* env = std::getenv("SWITCHYARD_ADDRESS");
    if (env && *env) {
      address_ = env;
      address_source_ = "SWITCHYARD_ADDRESS";
    }
  }

  // Steps to the next argument; false after the last one. Handles --help
  // (exits 0) and --address itself.
  bool next() {
    if (++i_ >= argc_) return false;
    if (arg() == "--help" || arg() == "-h") {
      std::fwrite(usage_.data(), 1, usage_.size(), stdout);
      std::exit(0);
    }
    if (std::string value; take("--address", value)) {
      address_ = value;
      address_source_ = "--address";
      return next();
    }
    return true;
  }
  std::string_view arg() const { return argv_[i_]; }
  bool is_flag() const { return arg().size() > 1 && arg().front() == '-'; }

  // True if the current argument is `flag` (then `value` gets its value:
  // the next argument, or what follows '=').
  bool take(std::string_view flag, std::string& value) {
    const std::string_view a = arg();
    if (a.size() > flag.size() && a.starts_with(flag) && a[flag.size()] == '=') {
      value = std::string(a.substr(flag.size() + 1));
      return true;
    }
    if (a != flag) return false;
    if (i_ + 1 >= argc_) fail(std::string(flag) + " needs a value");
    value = argv_[++i_];
    return true;
  }
  // The same for a whole number in [min, max].
  bool take_number(std::string_view flag, long long min, long long max, long long& value) {
    std::string text;
    if (!take(flag, text)) return false;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc{} || end != text.data() + text.size() || value < min || value > max)
      fail(std::string(flag) + " must be a whole number from " + std::to_string(min) + " to " + std::to_string(max) +
           ", got '" + text + "'");
    return true;
  }

  // The current argument is not one the example takes.
  [[noreturn]] void unexpected() const {
    const std::string a(arg());
    if (a == "--host" || a == "--port" || a.starts_with("--host=") || a.starts_with("--port="))
      fail("unknown option " + a + ": give the broker as --address HOST:PORT");
    fail((is_flag() ? "unknown option " : "unexpected argument '") + a + (is_flag() ? "" : "'"));
  }

  // Prints `message` and the usage on stderr; exits 2.
  [[noreturn]] void fail(const std::string& message) const {
    std::fprintf(stderr, "%s: %s\n", argv_[0], message.c_str());
    std::fwrite(usage_.data(), 1, usage_.size(), stderr);
    std::exit(2);
  }

  // The broker's address, checked (a bad one fails as above).
  void address(std::string& host, std::uint16_t& port) const {
    if (!parse_address(address_, host, port))
      fail(address_source_ + " must be HOST:PORT (port 1..65535), got '" + address_ + "'");
  }
  const std::string& address_text() const { return address_; }

 private:
  int argc_;
  char** argv_;
  std::string_view usage_;
  int i_ = 0;
  std::string address_{default_address};
  std::string address_source_ = "--address";
};

}  // namespace example
