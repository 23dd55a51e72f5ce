#include "broker/cluster/membership.hpp"

#include "broker/cluster/partition_map.hpp"
#include "cluster/errc.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <stdexcept>

namespace switchyard::broker {

namespace {

using std::chrono::duration_cast;
using std::chrono::milliseconds;

std::int64_t steady_ns(std::chrono::steady_clock::time_point t) {
  return duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// Each etcd call: at most a fifth of the lease, between 200 ms and 1 s.
milliseconds call_timeout(std::chrono::seconds ttl) {
  return std::clamp(duration_cast<milliseconds>(ttl) / 5, milliseconds(200), milliseconds(1000));
}

std::string member_value(const membership_options& o) {
  return nlohmann::json{{"address", o.advertise}, {"version", SWITCHYARD_VERSION}, {"log", !o.log_id.empty()}}.dump();
}

// A member key's value; a value that is not ours (or damaged) gives an
// empty address rather than an error: the member is still a member.
cluster_member member_of(std::string_view prefix, const cluster::kv& kv) {
  cluster_member m;
  m.node_id = kv.key.substr(prefix.size());
  m.incarnation = kv.lease;
  const auto j = nlohmann::json::parse(kv.value, nullptr, false);
  if (j.is_object() && j.contains("address") && j["address"].is_string()) m.address = j["address"].get<std::string>();
  if (j.is_object() && j.contains("log") && j["log"].is_boolean()) m.has_log = j["log"].get<bool>();
  return m;
}

}  // namespace

membership::membership(asio::any_io_executor loop, membership_options options, std::shared_ptr<spdlog::logger> logger)
    : loop_(std::move(loop)), options_(std::move(options)), logger_(std::move(logger)), beat_timer_(loop_) {}

membership::~membership() { leave(); }

std::string membership::cluster_prefix() const { return "/switchyard/" + options_.cluster_name + "/"; }

std::string membership::members_prefix() const { return cluster_prefix() + "members/"; }

std::shared_ptr<const cluster_view> membership::join(view_handler on_view, standing_handler on_standing) {
  on_view_ = std::move(on_view);
  on_standing_ = std::move(on_standing);
  const auto timeout = call_timeout(options_.lease_ttl);
  try {
    client_ = std::make_unique<cluster::etcd_client>(options_.etcd_endpoints, timeout);
    prober_ = std::make_unique<cluster::etcd_client>(options_.etcd_endpoints, timeout);
    pinner_ = std::make_unique<cluster::etcd_client>(options_.etcd_endpoints, timeout);
  } catch (const std::system_error& e) {
    throw std::runtime_error(std::string("--cluster-etcd: ") + e.what());
  }
  partitions_ = std::make_unique<partition_keeper>(*client_, options_.cluster_name, options_.node_id, logger_);
  register_self(true);
  if (reload() == 0)
    throw std::runtime_error("etcd: cannot read the cluster's keys under " + cluster_prefix() + " (" +
                             client_->current_endpoint() + ")");
  // The partitions nobody holds that this node is preferred for: claimed
  // before the first view, so a node starts owning.
  partitions_->claim(members_, lease_);
  auto view = make_view();
  loop_watch_.beat(clock::now());
  beat();
  keeper_ = std::thread([this, next = revision_ + 1] { keeper_main(next); });
  prober_thread_ = std::thread([this] { probe_main(); });
  pinner_thread_ = std::thread([this] { pin_main(); });
  return view;
}

bool membership::register_self(bool at_start) {
  const auto ttl = options_.lease_ttl;
  const auto fail = [&](const std::string& what) {
    if (at_start) throw std::runtime_error(what);
    logger_->error("cluster: {}", what);
    return false;
  };
  const std::string key = members_prefix() + options_.node_id;
  const auto value = member_value(options_);
  // A key held by another lease: a previous run of this node that died
  // less than a TTL ago (its lease still counts down), or another live
  // node given the same id (its lease never lapses). The lease is granted
  // only once the key is free, so that it is not left unrenewed meanwhile.
  // Counted from when etcd first answered (it may have been waited for).
  std::optional<clock::time_point> give_up;
  const auto etcd_give_up = clock::now() + start_wait;
  bool told = false, waited = false, stopped = false;
  // At start, etcd not up yet (or without a leader yet) is waited for:
  // true when `e` is that and there is time left (after a pause).
  const auto wait_for_etcd = [&](std::error_code e) {
    if (!at_start || (e != cluster::errc::unreachable && e != cluster::errc::timeout) || clock::now() >= etcd_give_up)
      return false;
    if (!waited)
      logger_->info("cluster: waiting up to {} s for etcd ({}, ...): {}", start_wait.count(),
                    client_->current_endpoint(), e.message());
    waited = true;
    stopped = !pause(milliseconds(250));
    return !stopped;
  };
  const auto waited_note = [&] { return waited ? " (waited " + std::to_string(start_wait.count()) + " s)" : ""; };
  std::int64_t lease = 0;
  clock::time_point granted_at;
  for (;;) {
    auto current = client_->get(key);
    if (!current) {
      if (wait_for_etcd(current.error())) continue;
      if (stopped) return fail("stopped while joining");
      return fail("etcd (" + client_->current_endpoint() + ", ...): cannot read the member key " + key + ": " +
                  current.error().message() + waited_note());
    }
    if (!give_up) give_up = clock::now() + ttl + std::chrono::seconds(2);
    if (*current) {
      const auto holder = (*current)->lease;
      if (clock::now() >= *give_up)
        return fail("node id '" + options_.node_id + "' is held by a live member (etcd lease " +
                    std::to_string(holder) + ", " + (*current)->value +
                    "): another node runs with this --cluster-node-id");
      if (!told)
        logger_->info("cluster: waiting for the previous holder of node id '{}' (etcd lease {}) to lapse",
                      options_.node_id, holder);
      told = true;
      if (!pause(milliseconds(250))) return fail("stopped while joining");
      continue;
    }
    granted_at = clock::now();
    auto granted = client_->grant_lease(ttl);
    if (!granted) {
      if (wait_for_etcd(granted.error())) continue;
      if (stopped) return fail("stopped while joining");
      return fail("etcd (" + client_->current_endpoint() +
                  ", ...): cannot grant a lease: " + granted.error().message() + waited_note());
    }
    auto made = client_->create_if_absent(key, value, *granted);
    if (made && (made->succeeded || (made->current && made->current->lease == *granted))) {
      lease = *granted;
      break;
    }
    (void)client_->revoke_lease(*granted);  // taken meanwhile, or etcd failed: start over
    if (!made) {
      if (wait_for_etcd(made.error())) continue;
      if (stopped) return fail("stopped while joining");
      return fail("etcd: cannot create the member key " + key + ": " + made.error().message() + waited_note());
    }
  }
  lease_ = lease;
  incarnation_.store(lease, std::memory_order_release);
  set_valid_until(granted_at + ttl);
  next_renewal_ = granted_at + milliseconds(ttl) / 3;
  logger_->info("cluster: joined '{}' as node '{}' (incarnation {}, lease TTL {} s)", options_.cluster_name,
                options_.node_id, lease_, ttl.count());
  return true;
}

void membership::keeper_main(std::int64_t next_revision) {
  const auto prefix = cluster_prefix();
  const milliseconds period = std::max(milliseconds(100), duration_cast<milliseconds>(options_.lease_ttl) / 10);
  for (;;) {
    {
      switchyard::lock_guard lock(mu_);
      if (leaving_) return;
    }
    auto watched = client_->watch_prefix(
        prefix, next_revision,
        [&](std::span<const cluster::watch_event> events, std::int64_t revision) {
          if (!events.empty()) {
            apply(events, revision);
            next_revision = revision + 1;
          }
          tick();
          switchyard::lock_guard lock(mu_);
          return !leaving_;
        },
        cluster::watch_options{period});
    {
      switchyard::lock_guard lock(mu_);
      if (leaving_) return;
    }
    if (!watched)
      logger_->warn("cluster: the watch of {} ended: {}; reading the keys again", prefix, watched.error().message());
    // Renew while etcd is unreachable, then read the members afresh (a
    // compacted revision, events missed while the watch was down).
    for (;;) {
      tick();
      if (const auto revision = reload(); revision > 0) {
        balance(true);
        next_revision = revision + 1;
        break;
      }
      if (!pause(period)) return;
    }
  }
}

void membership::tick() {
  const auto now = clock::now();
  const milliseconds ttl = options_.lease_ttl;    // in ms: a third of 2 s is not 0
  const auto silence = loop_watch_.silence(now);  // the loop's own beats (loop_watch)
  if (now >= next_renewal_) {
    next_renewal_ = now + ttl / 3;
    if (silence > ttl / 2) {
      if (!loop_warned_)
        logger_->error("cluster: the loop has not answered for {} ms: the etcd lease is not renewed",
                       duration_cast<milliseconds>(silence).count());
      loop_warned_ = true;
    } else {
      loop_warned_ = false;
      auto renewed = client_->keep_alive(lease_);
      if (renewed) {
        set_valid_until(now + std::chrono::seconds(*renewed));
      } else if (renewed.error() == cluster::errc::lease_not_found) {
        logger_->error("cluster: etcd lease {} lapsed; registering again as a new incarnation", lease_);
        if (register_self(false)) post_view();
      } else {
        logger_->warn("cluster: cannot renew the etcd lease: {}", renewed.error().message());
      }
    }
    // Claims that failed (etcd unreachable) are tried again; a drain gives back.
    balance(false);
  }
  const bool standing = in_standing();
  if (std::exchange(standing_posted_, standing) != standing) {
    if (standing)
      logger_->info("cluster: in standing again (etcd lease {} renewed)", lease_);
    else
      logger_->error("cluster: out of standing: etcd lease {} not renewed in time (it may lapse at etcd)", lease_);
    asio::post(loop_, [alive = alive_, h = on_standing_, standing] {
      if (*alive) h(standing);
    });
  }
}

void membership::apply(std::span<const cluster::watch_event> events, std::int64_t revision) {
  const auto prefix = members_prefix();
  for (const auto& e : events) {
    if (partitions_->apply(e) || !e.kv.key.starts_with(prefix)) continue;
    const std::string id = e.kv.key.substr(prefix.size());
    const auto it = std::lower_bound(members_.begin(), members_.end(), id,
                                     [](const cluster_member& m, const std::string& k) { return m.node_id < k; });
    const bool present = it != members_.end() && it->node_id == id;
    if (e.type == cluster::event_type::remove) {
      if (present) members_.erase(it);
    } else if (present) {
      *it = member_of(prefix, e.kv);
    } else {
      members_.insert(it, member_of(prefix, e.kv));
    }
  }
  revision_ = revision;
  balance(true);
}

std::int64_t membership::reload() {
  const auto prefix = members_prefix();
  auto read = client_->range_prefix(cluster_prefix());
  if (!read) return 0;
  members_.clear();
  std::vector<cluster::kv> owner_keys;
  for (auto& kv : read->kvs) {
    if (kv.key.starts_with(prefix))
      members_.push_back(member_of(prefix, kv));
    else if (kv.key.starts_with(partitions_->prefix()) || kv.key.starts_with(partitions_->streams_prefix()))
      owner_keys.push_back(std::move(kv));
  }
  partitions_->reset(owner_keys);
  revision_ = read->revision;
  return revision_;
}

std::shared_ptr<const cluster_view> membership::make_view() const {
  auto view = std::make_shared<cluster_view>();
  view->revision = revision_;
  view->members = members_;
  view->owners = partitions_->owners();
  view->stream_holders = partitions_->stream_holders();
  view->stream_logs = partitions_->stream_logs();
  // Partitions being given back: this node no longer acts for them.
  for (const auto p : giving_back_) view->owners[p] = {};
  return view;
}

void membership::post_view() {
  asio::post(loop_, [alive = alive_, h = on_view_, v = make_view()] {
    if (*alive) h(v);
  });
}

void membership::balance(bool post) {
  if (!in_standing()) {  // acts for nothing out of standing
    if (post) post_view();
    return;
  }
  const bool draining = draining_.load(std::memory_order_acquire);
  // Give back first: what another member is preferred for (everything,
  // draining). The loop must stop acting for them before the keys go: a
  // view without them, then a probe; the keys go once the loop ran it.
  giving_back_ = draining ? partitions_->held_list() : partitions_->surplus(members_);
  if (!giving_back_.empty()) {
    post_view();
    const auto asked = ++probes_posted_;
    asio::post(loop_, [seen = loop_probe_] { seen->store(seen->load() + 1, std::memory_order_release); });
    const auto give_up = clock::now() + milliseconds(1000);
    while (loop_probe_->load(std::memory_order_acquire) < asked && clock::now() < give_up)
      if (!pause(milliseconds(5))) return;
    if (loop_probe_->load(std::memory_order_acquire) >= asked) {
      const auto given = partitions_->release(giving_back_);
      logger_->info("cluster: gave back {} partition(s){}", given, draining ? " (draining)" : "");
    }
    giving_back_.clear();
    post = true;
  }
  if (!draining) {
    if (const auto taken = partitions_->claim(members_, lease_); taken > 0) {
      logger_->info("cluster: took {} partition(s); holding {}", taken, partitions_->held());
      post = true;
    }
  }
  if (post) post_view();
}

void membership::release_partitions() { draining_.store(true, std::memory_order_release); }

void membership::pin_streams(std::uint32_t partition) {
  {
    switchyard::lock_guard lock(mu_);
    if (std::find(pins_wanted_.begin(), pins_wanted_.end(), partition) != pins_wanted_.end()) return;
    pins_wanted_.push_back(partition);
  }
  cv_.notify_all();
}

void membership::pin_main() {
  const auto prefix = cluster_prefix() + "streams/";
  std::vector<takeover_job> jobs;
  for (;;) {
    std::vector<std::uint32_t> wanted;
    {
      switchyard::unique_lock lock(mu_);
      cv_.wait(lock.native(),
               [&]() SWITCHYARD_REQUIRES(mu_) { return leaving_ || !pins_wanted_.empty() || !takeovers_.empty(); });
      if (leaving_) return;
      wanted = pins_wanted_;
      jobs.swap(takeovers_);
    }
    for (auto& job : jobs) run_takeover(job);
    jobs.clear();
    if (wanted.empty()) continue;
    // Out of standing this node may not take anything: asked again once
    // in standing (checked every 100 ms). A draining node takes nothing
    // (it leaves: the requests waiting answer unavailable at their
    // deadline).
    std::vector<std::uint32_t> done;
    if (draining_.load(std::memory_order_acquire)) {
      done = wanted;
    } else if (in_standing()) {
      for (const auto p : wanted) {
        // The keeper's watch tells the loop who holds it (this node, or
        // another that was faster).
        auto made = pin_key(*pinner_, p);
        if (!made) {
          logger_->warn("cluster: cannot take the streams of partition {}: {}", p, made.error().message());
          break;
        }
        if (*made) logger_->info("cluster: holds the streams of partition {} from now on", p);
        done.push_back(p);
      }
    }
    {
      switchyard::lock_guard lock(mu_);
      std::erase_if(pins_wanted_,
                    [&](std::uint32_t p) { return std::find(done.begin(), done.end(), p) != done.end(); });
    }
    if (done.size() != wanted.size() && !pause(milliseconds(100))) return;
  }
}

std::expected<bool, std::error_code> membership::pin_key(cluster::etcd_client& etcd, std::uint32_t partition) {
  const auto key = cluster_prefix() + "streams/" + std::to_string(partition);
  const auto mine = partition_keeper::holder_value(options_.node_id, options_.log_id);
  auto made = etcd.create_if_absent(key, mine, 0);
  if (!made) return std::unexpected(made.error());
  if (made->succeeded) return true;
  // A takeover named this node without a log: it records its own.
  if (made->current && made->current->value == options_.node_id && !options_.log_id.empty()) {
    const cluster::txn_compare still[] = {cluster::txn_compare::value_is(key, options_.node_id)};
    const cluster::txn_op put[] = {cluster::txn_op::put(key, mine)};
    auto r = etcd.txn(still, put, {});
    if (!r) return std::unexpected(r.error());
    return r->succeeded;
  }
  return false;
}

std::vector<std::uint32_t> membership::pin_at_start(std::span<const std::uint32_t> partitions) {
  std::vector<std::uint32_t> taken_by_others;
  for (const auto p : partitions) {
    auto made = pin_key(*pinner_, p);
    if (!made)
      throw std::runtime_error("etcd: cannot record this node as the holder of the streams in its log (partition " +
                               std::to_string(p) + "): " + made.error().message());
    if (!*made) taken_by_others.push_back(p);
  }
  return taken_by_others;
}

void membership::take_over(std::string from, moves wanted, std::vector<std::string> expected, takeover_done done) {
  {
    switchyard::lock_guard lock(mu_);
    takeovers_.push_back({std::move(from), std::move(wanted), std::move(expected), std::move(done)});
  }
  cv_.notify_all();
}

void membership::run_takeover(takeover_job& job) {
  const auto prefix = cluster_prefix() + "streams/";
  moves made;
  std::string failed;
  if (!in_standing()) failed = "this node is out of standing (cut off from etcd)";
  for (std::size_t i = 0; i < job.wanted.size() && i < job.expected.size(); ++i) {
    const auto& [p, to] = job.wanted[i];
    if (!failed.empty()) break;
    const std::string key = prefix + std::to_string(p);
    // Fenced: only while etcd lists no member of that id (a node that
    // registered again meanwhile is a member, whatever this node's view).
    const cluster::txn_compare still[] = {cluster::txn_compare::value_is(key, job.expected[i]),
                                          cluster::txn_compare::absent(members_prefix() + job.from)};
    const cluster::txn_op put[] = {cluster::txn_op::put(key, to)};
    auto r = pinner_->txn(still, put, {});
    if (!r) {
      failed = "etcd: " + r.error().message();
      break;
    }
    if (r->succeeded) {
      made.emplace_back(p, to);
      continue;
    }
    // Moved meanwhile (another takeover), or the node is a member again.
    if (auto m = pinner_->get(members_prefix() + job.from); m && *m) {
      failed = "node '" + job.from + "' is a member again";
      break;
    }
  }
  if (!made.empty())
    logger_->warn(
        "cluster: takeover: the streams of {} partition(s) held by node '{}' declared lost; new holders "
        "start them again with new epochs",
        made.size(), job.from);
  if (!failed.empty() && !made.empty())
    failed += " (" + std::to_string(made.size()) + " partition(s) moved before that: ask again for the rest)";
  std::expected<moves, std::string> result =
      failed.empty() ? std::expected<moves, std::string>(std::move(made)) : std::unexpected(std::move(failed));
  asio::post(loop_, [alive = alive_, done = std::move(job.done), result = std::move(result)]() mutable {
    if (*alive) done(std::move(result));
  });
}

void membership::probe_main() {
  do {
    std::vector<etcd_endpoint_health> found;
    for (auto& h : prober_->cluster_health(milliseconds(500))) {
      etcd_endpoint_health e;
      e.endpoint = h.endpoint;
      if (h.status) {
        e.reachable = true;
        e.leader = h.status->is_leader();
        e.version = h.status->version;
      } else {
        e.error = h.status.error().message();
      }
      found.push_back(std::move(e));
    }
    switchyard::lock_guard lock(mu_);
    health_ = std::move(found);
  } while (pause(options_.probe_interval));
}

bool membership::pause(milliseconds d) {
  switchyard::unique_lock lock(mu_);
  cv_.wait_for(lock.native(), d, [&]() SWITCHYARD_REQUIRES(mu_) { return leaving_; });
  return !leaving_;
}

void membership::set_valid_until(clock::time_point t) {
  valid_until_ns_.store(steady_ns(t), std::memory_order_release);
}

bool membership::in_standing() const noexcept {
  const auto until = clock::time_point(std::chrono::nanoseconds(valid_until_ns_.load(std::memory_order_acquire)));
  return clock::now() + duration_cast<milliseconds>(options_.lease_ttl) / 5 < until;
}

std::vector<etcd_endpoint_health> membership::etcd_health() const {
  switchyard::lock_guard lock(mu_);
  return health_;
}

void membership::beat() {
  beat_timer_.expires_after(loop_watch::beat_period(options_.lease_ttl));
  beat_timer_.async_wait([this, alive = alive_](const asio_error_code& ec) {
    if (ec || !*alive) return;
    loop_watch_.beat(clock::now());
    beat();
  });
}

void membership::leave() {
  if (left_) return;
  left_ = true;
  *alive_ = false;
  beat_timer_.cancel();
  {
    switchyard::lock_guard lock(mu_);
    leaving_ = true;
  }
  cv_.notify_all();
  if (client_) client_->stop();
  if (prober_) prober_->stop();
  if (pinner_) pinner_->stop();
  if (keeper_.joinable()) keeper_.join();
  if (prober_thread_.joinable()) prober_thread_.join();
  if (pinner_thread_.joinable()) pinner_thread_.join();
  if (lease_ == 0) return;
  // The keeper's client is stopped for good: a fresh one for the revoke.
  try {
    cluster::etcd_client last(options_.etcd_endpoints, milliseconds(1000));
    if (auto r = last.revoke_lease(lease_); r || r.error() == cluster::errc::lease_not_found)
      logger_->info("cluster: left '{}' (etcd lease {} revoked)", options_.cluster_name, lease_);
    else
      logger_->warn("cluster: cannot revoke etcd lease {} ({}); the member key goes when it lapses", lease_,
                    r.error().message());
  } catch (const std::exception& e) {
    logger_->warn("cluster: cannot revoke etcd lease {}: {}", lease_, e.what());
  }
}

}  // namespace switchyard::broker
