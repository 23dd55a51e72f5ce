#include "auth/auth_config.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <utility>

namespace switchyard::auth {
namespace {

constexpr std::size_t max_principal_name = 128;
constexpr std::size_t max_file_size = std::size_t{1} << 20;  // 1 MiB
constexpr std::size_t max_shown = 64;                        // bytes of a name or key an error shows

// A name or key as an error message shows it: quoted, at most max_shown
// bytes, anything but printable ASCII as \xNN.
std::string shown(std::string_view s) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size() && i < max_shown; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += digits[c >> 4];
      out += digits[c & 0xf];
    }
  }
  if (s.size() > max_shown) out += "...";
  out += '"';
  return out;
}

bool is_valid_principal_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > max_principal_name) return false;
  for (const char c : name)
    if (c <= ' ' || c >= 0x7f) return false;
  return true;
}

// What the parse of one file has gathered; the first error stops it.
class reader {
 public:
  std::optional<auth_file_error> error;

  // Records an error at `at` and returns false (for `return fail(...)`).
  bool fail(const toml::source_region& at, std::string message) {
    error = auth_file_error{std::move(message), at.begin.line, at.begin.column};
    return false;
  }

  bool read_principal(std::string_view name, const toml::key& key, const toml::node& node, principal& out) {
    prefix_ = "principal " + shown(name) + ": ";
    if (!is_valid_principal_name(name))
      return fail(key.source(), "principal name " + shown(name) + ": must be 1.." + std::to_string(max_principal_name) +
                                    " printable ASCII characters, without spaces");
    const auto* table = node.as_table();
    if (!table) return fail(node.source(), prefix_ + "must be a table ([principals." + std::string(name) + "])");
    out.name = std::string(name);
    for (const auto& [k, v] : *table) {
      const std::string_view field = k.str();
      operation op{};
      if (field == "admin") {
        const auto* b = v.as_boolean();
        if (!b) return fail(v.source(), prefix_ + "admin must be true or false");
        out.admin = b->get();
      } else if (field == "token_sha256") {
        if (!read_digests(field, v, out.token_hashes)) return false;
      } else if (field == "ed25519_public_keys") {
        if (!read_digests(field, v, out.public_keys)) return false;
      } else if (field == "tls_subjects") {
        if (!read_subjects(v, out.tls_subjects)) return false;
      } else if (from_string(field, op)) {
        if (!read_rule(field, v, out.rules[static_cast<std::size_t>(op)])) return false;
      } else {
        return fail(k.source(), prefix_ + "unknown key " + shown(field) +
                                    " (expected admin, token_sha256, ed25519_public_keys, tls_subjects or an "
                                    "operation: publish, subscribe, send, registry_put, registry_get, "
                                    "registry_delete, inbox, stream_append, stream_read)");
      }
    }
    if (out.token_hashes.empty() && out.public_keys.empty() && out.tls_subjects.empty())
      return fail(key.source(), prefix_ +
                                    "no credentials: give at least one of token_sha256, "
                                    "ed25519_public_keys, tls_subjects");
    return true;
  }

  // Each credential is held by one principal only.
  bool check_unique(const principal& p, const toml::table& table) {
    for (std::size_t i = 0; i < p.token_hashes.size(); ++i)
      if (!claim(token_owner_, p.token_hashes[i], p.name, table, "token_sha256", i)) return false;
    for (std::size_t i = 0; i < p.public_keys.size(); ++i)
      if (!claim(key_owner_, p.public_keys[i], p.name, table, "ed25519_public_keys", i)) return false;
    for (std::size_t i = 0; i < p.tls_subjects.size(); ++i)
      if (!claim(subject_owner_, p.tls_subjects[i], p.name, table, "tls_subjects", i)) return false;
    return true;
  }

 private:
  // An array of 64-hex-digit strings, each decoded into a 32-byte array.
  template <typename Digest>
  bool read_digests(std::string_view field, const toml::node& node, std::vector<Digest>& out) {
    const auto* list = node.as_array();
    if (!list) return fail(node.source(), prefix_ + std::string(field) + " must be an array of strings");
    for (std::size_t i = 0; i < list->size(); ++i) {
      const toml::node& element = (*list)[i];
      const auto* s = element.as_string();
      Digest d{};
      if (!s || !from_hex(s->get(), d))
        return fail(element.source(), prefix_ + std::string(field) + "[" + std::to_string(i) + "] must be " +
                                          std::to_string(2 * d.size()) + " hex digits");
      out.push_back(d);
    }
    return true;
  }

  bool read_subjects(const toml::node& node, std::vector<std::string>& out) {
    const auto* list = node.as_array();
    if (!list) return fail(node.source(), prefix_ + "tls_subjects must be an array of strings");
    for (std::size_t i = 0; i < list->size(); ++i) {
      const toml::node& element = (*list)[i];
      const auto* s = element.as_string();
      if (!s || s->get().empty())
        return fail(element.source(), prefix_ + "tls_subjects[" + std::to_string(i) + "] must be a non-empty string");
      out.push_back(s->get());
    }
    return true;
  }

  // `{ allow = [...], deny = [...] }`, both optional.
  bool read_rule(std::string_view op, const toml::node& node, permission_rule& out) {
    const auto* table = node.as_table();
    if (!table)
      return fail(node.source(), prefix_ + std::string(op) + " must be a table: { allow = [...], deny = [...] }");
    std::vector<std::string> allow, deny;
    for (const auto& [k, v] : *table) {
      const std::string_view field = k.str();
      if (field == "allow") {
        if (!read_patterns(op, field, v, allow)) return false;
      } else if (field == "deny") {
        if (!read_patterns(op, field, v, deny)) return false;
      } else {
        return fail(k.source(),
                    prefix_ + std::string(op) + ": unknown key " + shown(field) + " (expected allow, deny)");
      }
    }
    out = permission_rule(std::move(allow), std::move(deny));
    return true;
  }

  bool read_patterns(std::string_view op, std::string_view field, const toml::node& node,
                     std::vector<std::string>& out) {
    const std::string where = std::string(op) + "." + std::string(field);
    const auto* list = node.as_array();
    if (!list) return fail(node.source(), prefix_ + where + " must be an array of strings");
    for (std::size_t i = 0; i < list->size(); ++i) {
      const toml::node& element = (*list)[i];
      const auto* s = element.as_string();
      if (!s) return fail(element.source(), prefix_ + where + "[" + std::to_string(i) + "] must be a string");
      if (!is_valid_rule_pattern(s->get()))
        return fail(element.source(),
                    prefix_ + where + "[" + std::to_string(i) + "]: " + shown(s->get()) +
                        " is not a valid pattern (1..255 bytes, dot-separated non-empty tokens of printable ASCII, "
                        "`*` for one token, `>` as the last token for one or more)");
      out.push_back(s->get());
    }
    return true;
  }

  template <typename Credential>
  bool claim(std::map<Credential, std::string>& owners, const Credential& c, const std::string& name,
             const toml::table& table, std::string_view field, std::size_t index) {
    const auto [it, inserted] = owners.emplace(c, name);
    if (inserted) return true;
    const toml::node* at = table.get(field);
    if (const auto* list = at ? at->as_array() : nullptr; list && index < list->size()) at = list->get(index);
    return fail(at ? at->source() : table.source(), prefix_ + std::string(field) + "[" + std::to_string(index) +
                                                        "] is also a credential of principal " + shown(it->second) +
                                                        ": a credential belongs to one principal");
  }

  std::string prefix_;
  std::map<sha256_digest, std::string> token_owner_;
  std::map<ed25519_public_key, std::string> key_owner_;
  std::map<std::string, std::string> subject_owner_;
};

}  // namespace

std::string auth_file_error::to_string(std::string_view source) const {
  std::string out(source);
  if (line != 0) {
    out += ':' + std::to_string(line);
    if (column != 0) out += ':' + std::to_string(column);
  }
  out += ": ";
  out += message;
  return out;
}

std::expected<auth_config, auth_file_error> auth_config::parse(std::string_view text) {
  toml::table doc;
  try {
    doc = toml::parse(text);
  } catch (const toml::parse_error& e) {
    return std::unexpected(
        auth_file_error{"TOML: " + std::string(e.description()), e.source().begin.line, e.source().begin.column});
  }
  reader r;
  const toml::node* principals_node = nullptr;
  for (const auto& [k, v] : doc) {
    if (k.str() == "principals") {
      principals_node = &v;
    } else {
      r.fail(k.source(),
             "unknown top-level key " + shown(k.str()) + " (an auth file has only [principals.<name>] tables)");
      return std::unexpected(std::move(*r.error));
    }
  }
  const auto* principals = principals_node ? principals_node->as_table() : nullptr;
  if (principals_node && !principals) {
    r.fail(principals_node->source(), "principals must be a table of [principals.<name>] tables");
    return std::unexpected(std::move(*r.error));
  }
  if (!principals || principals->empty()) {
    return std::unexpected(auth_file_error{"no principals: an auth file must define at least one",
                                           principals ? principals->source().begin.line : 0,
                                           principals ? principals->source().begin.column : 0});
  }
  auth_config config;
  for (const auto& [k, v] : *principals) {
    principal p;
    if (!r.read_principal(k.str(), k, v, p) || !r.check_unique(p, *v.as_table()))
      return std::unexpected(std::move(*r.error));
    config.principals_.push_back(std::make_shared<const principal>(std::move(p)));
  }
  return config;
}

std::expected<auth_config, auth_file_error> auth_config::load(const std::filesystem::path& file) {
  std::FILE* f = std::fopen(file.c_str(), "rb");
  if (!f) return std::unexpected(auth_file_error{std::string("cannot read: ") + std::strerror(errno)});
  std::string text;
  char buffer[64 * 1024];
  bool too_large = false, failed = false;
  while (true) {
    const std::size_t n = std::fread(buffer, 1, sizeof buffer, f);
    if (text.size() + n > max_file_size) {
      too_large = true;
      break;
    }
    text.append(buffer, n);
    if (n < sizeof buffer) {
      failed = std::ferror(f) != 0;
      break;
    }
  }
  const int read_errno = errno;
  std::fclose(f);
  if (too_large) return std::unexpected(auth_file_error{"cannot read: larger than 1 MiB"});
  if (failed) return std::unexpected(auth_file_error{std::string("cannot read: ") + std::strerror(read_errno)});
  return parse(text);
}

std::shared_ptr<const principal> auth_config::by_token(std::string_view token, equal_fn equal) const {
  const sha256_digest digest = sha256(token);
  std::shared_ptr<const principal> found;
  // Every stored hash is compared, whatever matched before: no early exit.
  for (const auto& p : principals_) {
    for (const auto& h : p->token_hashes) {
      const bool same = equal(h, digest);
      if (same && !found) found = p;
    }
  }
  return found;
}

std::shared_ptr<const principal> auth_config::by_public_key(std::span<const std::uint8_t> key) const {
  if (key.size() != std::tuple_size_v<ed25519_public_key>) return nullptr;
  for (const auto& p : principals_)
    for (const auto& k : p->public_keys)
      if (std::equal(k.begin(), k.end(), key.begin())) return p;
  return nullptr;
}

std::shared_ptr<const principal> auth_config::by_tls_subject(std::string_view subject) const {
  for (const auto& p : principals_)
    for (const auto& s : p->tls_subjects)
      if (s == subject) return p;
  return nullptr;
}

std::shared_ptr<const principal> auth_config::by_name(std::string_view name) const {
  for (const auto& p : principals_)
    if (p->name == name) return p;
  return nullptr;
}

}  // namespace switchyard::auth
