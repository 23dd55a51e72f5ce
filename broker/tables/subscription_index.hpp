#pragma once
// The channel subscription index: patterns -> subscribers, matched without
// scanning every subscription.
//
// A trie over dot-separated tokens. Each node has literal children (hash
// map), one `*` child and a list of `>` subscribers; a match walks at most
// (tokens x branching on `*`) nodes. Results are cached per channel and the
// cache is dropped whenever a subscription changes, so a steady publish
// stream costs one hash lookup per message. A subscriber appears at most once
// in a result even if several of its patterns match.
//
// Sub is a cheap, hashable, equality-comparable handle (a pointer or an id).
// Single-threaded.

#include "broker/tables/string_hash.hpp"
#include "protocol/channel_name.hpp"

#include <algorithm>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace switchyard::broker {

template <class Sub>
class subscription_index {
 public:
  // Cached results are bounded so a publisher cycling through unique channel
  // names cannot grow memory without limit.
  static constexpr std::size_t max_cache_entries = 4096;

  // Adds (pattern, sub). Precondition: protocol::is_valid_pattern(pattern).
  // Returns false if that pair was already present.
  bool add(std::string_view pattern, Sub sub) {
    node* n = &root_;
    std::string_view rest = pattern;
    while (!rest.empty()) {
      const std::string_view token = protocol::next_token(rest);
      if (token == ">") {
        if (!insert_unique(n->tail_subs, sub)) return false;
        return changed(+1);
      }
      std::unique_ptr<node>& child = token == "*" ? n->star : n->children[std::string(token)];
      if (!child) child = std::make_unique<node>();
      n = child.get();
    }
    if (!insert_unique(n->subs, sub)) return false;
    return changed(+1);
  }

  // Removes (pattern, sub); returns false if it was not present. Prunes
  // nodes that became empty.
  bool remove(std::string_view pattern, Sub sub) {
    if (!remove_at(root_, pattern, sub)) return false;
    return changed(-1);
  }

  // Every subscriber with a pattern matching `channel` (a valid channel
  // name), each once. The reference is valid until the next add/remove/match.
  const std::vector<Sub>& match(std::string_view channel) {
    return match(channel, [](const Sub&) { return true; });
  }
  // The same, keeping only the subscribers `keep(sub)` accepts; asked once
  // per subscriber when the channel's result is computed, then cached like
  // the result (forget_matches() drops the cache when `keep` would answer
  // differently).
  template <class Keep>
  const std::vector<Sub>& match(std::string_view channel, Keep&& keep) {
    if (auto it = cache_.find(channel); it != cache_.end()) return it->second;
    if (cache_.size() >= max_cache_entries) cache_.clear();
    std::vector<Sub> out;
    collect(root_, channel, out);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    std::erase_if(out, [&](const Sub& s) { return !keep(s); });
    return cache_.emplace(std::string(channel), std::move(out)).first->second;
  }
  void forget_matches() noexcept { cache_.clear(); }

  std::size_t size() const noexcept { return count_; }

 private:
  struct node {
    std::unordered_map<std::string, std::unique_ptr<node>, string_hash, std::equal_to<>> children;
    std::unique_ptr<node> star;
    std::vector<Sub> subs;       // patterns ending at this node
    std::vector<Sub> tail_subs;  // patterns ending in `>` here
    bool empty() const noexcept { return children.empty() && !star && subs.empty() && tail_subs.empty(); }
  };

  static bool insert_unique(std::vector<Sub>& v, Sub s) {
    if (std::find(v.begin(), v.end(), s) != v.end()) return false;
    v.push_back(s);
    return true;
  }
  static bool erase_one(std::vector<Sub>& v, Sub s) {
    auto it = std::find(v.begin(), v.end(), s);
    if (it == v.end()) return false;
    *it = v.back();
    v.pop_back();
    return true;
  }

  bool changed(int delta) {
    count_ += delta;
    cache_.clear();
    return true;
  }

  static bool remove_at(node& n, std::string_view rest, Sub sub) {
    if (rest.empty()) return erase_one(n.subs, sub);
    const std::string_view token = protocol::next_token(rest);
    if (token == ">") return erase_one(n.tail_subs, sub);
    if (token == "*") {
      if (!n.star || !remove_at(*n.star, rest, sub)) return false;
      if (n.star->empty()) n.star.reset();
      return true;
    }
    auto it = n.children.find(token);
    if (it == n.children.end() || !remove_at(*it->second, rest, sub)) return false;
    if (it->second->empty()) n.children.erase(it);
    return true;
  }

  static void collect(const node& n, std::string_view rest, std::vector<Sub>& out) {
    if (rest.empty()) {
      out.insert(out.end(), n.subs.begin(), n.subs.end());
      return;
    }
    out.insert(out.end(), n.tail_subs.begin(), n.tail_subs.end());
    const std::string_view token = protocol::next_token(rest);
    if (auto it = n.children.find(token); it != n.children.end()) collect(*it->second, rest, out);
    if (n.star) collect(*n.star, rest, out);
  }

  node root_;
  std::size_t count_ = 0;
  std::unordered_map<std::string, std::vector<Sub>, string_hash, std::equal_to<>> cache_;
};

}  // namespace switchyard::broker
