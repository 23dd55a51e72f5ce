#include "chaos/harness.hpp"

#include <fmt/format.h>

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <future>
#include <stdexcept>

namespace switchyard::chaos {
namespace {

namespace fs = std::filesystem;

// Ports free a moment ago, distinct: each bound to port 0 and held (the
// sockets in `held`, which the caller closes) so that nothing else takes
// them meanwhile.
std::vector<std::uint16_t> free_ports(std::size_t n, std::vector<int>& held) {
  std::vector<std::uint16_t> ports;
  for (std::size_t i = 0; i < n; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      if (fd >= 0) ::close(fd);
      throw std::runtime_error("chaos harness: cannot find a free port on 127.0.0.1");
    }
    held.push_back(fd);
    ports.push_back(ntohs(addr.sin_port));
  }
  return ports;
}

bool listens(std::uint16_t port) {
  asio::io_context io;
  asio::ip::tcp::socket s(io);
  asio_error_code ec;
  s.connect(asio::ip::tcp::endpoint(asio::ip::address_v4::loopback(), port), ec);
  return !ec;
}

std::string tail_of(const fs::path& log) {
  std::ifstream in(log);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (all.size() > 2000) all = "..." + all.substr(all.size() - 2000);
  return all;
}

}  // namespace

harness::harness(harness_options o) : options_(std::move(o)) {
  fs::create_directories(options_.dir);
  proxy_thread_ = std::thread([this] { proxy_io_.run(); });
  std::vector<int> held;  // the chosen ports, until the proxies have theirs
  try {
    set_up(held);
  } catch (...) {
    for (const int fd : held) ::close(fd);
    shutdown();  // the proxy thread must be joined before the members go
    throw;
  }
}

void harness::set_up(std::vector<int>& held) {
  const auto ports = free_ports(5 * size, held);
  auto port = ports.begin();
  std::vector<std::uint16_t> etcd_peer_ports, nats_route_ports;
  for (int i = 0; i < size; ++i) {
    etcd_ports_.push_back(*port++);
    etcd_peer_ports.push_back(*port++);
    nats_ports_.push_back(*port++);
    nats_route_ports.push_back(*port++);
    node_ports_.push_back(*port++);
  }
  std::string initial;
  for (int i = 0; i < size; ++i)
    initial += fmt::format("{}e{}=http://127.0.0.1:{}", i ? "," : "", i, etcd_peer_ports[i]);
  for (int i = 0; i < size; ++i) {
    const auto client = fmt::format("http://127.0.0.1:{}", etcd_ports_[i]);
    const auto peer = fmt::format("http://127.0.0.1:{}", etcd_peer_ports[i]);
    etcd_.push_back(std::make_unique<child_process>(
        fmt::format("etcd {}", i),
        std::vector<std::string>{options_.etcd_binary, "--name", fmt::format("e{}", i), "--data-dir",
                                 (options_.dir / fmt::format("etcd{}", i)).string(), "--listen-client-urls", client,
                                 "--advertise-client-urls", client, "--listen-peer-urls", peer,
                                 "--initial-advertise-peer-urls", peer, "--initial-cluster", initial,
                                 "--initial-cluster-state", "new", "--initial-cluster-token", options_.cluster_name,
                                 // Test-only (see above). Short raft timing: an election takes about 0.5 s.
                                 "--unsafe-no-fsync", "--heartbeat-interval", "50", "--election-timeout", "500",
                                 "--log-level", "warn"},
        options_.dir / fmt::format("etcd{}.log", i)));
  }
  std::string routes;
  for (int i = 0; i < size; ++i) routes += fmt::format("{}nats://127.0.0.1:{}", i ? ", " : "", nats_route_ports[i]);
  for (int i = 0; i < size; ++i) {
    const auto conf = options_.dir / fmt::format("nats{}.conf", i);
    std::ofstream(conf) << fmt::format(
        "listen: 127.0.0.1:{}\nmax_payload: 2MB\ncluster {{\n  name: {}\n  listen: 127.0.0.1:{}\n  routes: [{}]\n}}\n",
        nats_ports_[i], options_.cluster_name, nats_route_ports[i], routes);
    nats_.push_back(std::make_unique<child_process>(fmt::format("nats {}", i),
                                                    std::vector<std::string>{options_.nats_binary, "-c", conf.string()},
                                                    options_.dir / fmt::format("nats{}.log", i)));
  }
  for (int i = 0; i < size; ++i) {
    auto& proxies = node_proxies_.emplace_back();
    for (const auto p : etcd_ports_) proxies.push_back(std::make_unique<tcp_proxy>(proxy_io_, p));
    for (const auto p : nats_ports_) proxies.push_back(std::make_unique<tcp_proxy>(proxy_io_, p));
    std::vector<std::string> args{options_.server_binary,
                                  "--listen",
                                  fmt::format("127.0.0.1:{}", node_ports_[i]),
                                  "--data-dir",
                                  (options_.dir / ("node-" + node_name(i))).string(),
                                  "--log-level",
                                  "warn",
                                  "--cluster-node-id",
                                  node_name(i),
                                  "--cluster-name",
                                  options_.cluster_name,
                                  "--cluster-lease-ttl-s",
                                  std::to_string(options_.cluster_lease_ttl_s)};
    for (int k = 0; k < size; ++k)
      args.insert(args.end(), {"--cluster-etcd", fmt::format("127.0.0.1:{}", proxies[k]->port())});
    for (int k = 0; k < size; ++k) {  // nearest (its own) first
      const auto& proxy = proxies[size + (i + k) % size];
      args.insert(args.end(), {"--cluster-nats", fmt::format("nats://127.0.0.1:{}", proxy->port())});
    }
    nodes_.push_back(std::make_unique<child_process>("node " + node_name(i), std::move(args),
                                                     options_.dir / ("node-" + node_name(i) + ".log")));
  }
  for (const int fd : held) ::close(fd);  // the proxies are bound: the programs may take theirs now
  held.clear();
  const auto start_all = [&](auto& group, const std::vector<std::uint16_t>& ports) {
    for (auto& p : group)
      if (auto r = p->start(); !r) throw std::runtime_error(r.error());
    for (int i = 0; i < size; ++i)
      if (auto r = start_and_wait(*group[i], ports[i]); !r) throw std::runtime_error(r.error());
  };
  start_all(etcd_, etcd_ports_);
  start_all(nats_, nats_ports_);
  start_all(nodes_, node_ports_);
}

harness::~harness() { shutdown(); }

void harness::shutdown() {
  for (auto& n : nodes_) n->stop();
  for (auto& n : nats_) n->stop();
  for (auto& e : etcd_) e->stop();
  nodes_.clear();
  nats_.clear();
  etcd_.clear();
  if (proxy_thread_.joinable()) {
    on_proxies([this] {
      for (auto& proxies : node_proxies_)
        for (auto& p : proxies) p->close();
    });
    proxy_work_.reset();
    proxy_io_.stop();
    proxy_thread_.join();
  }
}

std::expected<void, std::string> harness::start_and_wait(child_process& p, std::uint16_t port) {
  if (auto r = p.start(); !r) return r;
  const auto give_up = std::chrono::steady_clock::now() + options_.start_timeout;
  while (!listens(port)) {
    if (!p.running())
      return std::unexpected(fmt::format("{} exited while starting; its log ({}):\n{}", p.name(), p.log_file().string(),
                                         tail_of(p.log_file())));
    if (std::chrono::steady_clock::now() >= give_up)
      return std::unexpected(fmt::format("{} does not listen on 127.0.0.1:{} after {} ms; its log ({}):\n{}", p.name(),
                                         port, options_.start_timeout.count(), p.log_file().string(),
                                         tail_of(p.log_file())));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return {};
}

void harness::on_proxies(const std::function<void()>& fn) {
  std::promise<void> done;
  asio::post(proxy_io_, [&] {
    fn();
    done.set_value();
  });
  done.get_future().wait();
}

std::string harness::node_address(int i) const { return fmt::format("127.0.0.1:{}", node_ports_.at(i)); }

std::vector<std::string> harness::node_addresses() const {
  std::vector<std::string> out;
  for (int i = 0; i < size; ++i) out.push_back(node_address(i));
  return out;
}

void harness::kill_node(int i) { nodes_.at(i)->kill(); }
std::expected<void, std::string> harness::restart_node(int i) { return start_and_wait(*nodes_.at(i), node_ports_[i]); }
void harness::stop_node(int i) { nodes_.at(i)->signal(SIGSTOP); }
void harness::continue_node(int i) { nodes_.at(i)->signal(SIGCONT); }

void harness::cut_node(int i) {
  on_proxies([&] {
    for (auto& p : node_proxies_.at(i)) p->cut();
  });
}

void harness::heal_node(int i) {
  on_proxies([&] {
    for (auto& p : node_proxies_.at(i)) p->heal();
  });
}

void harness::kill_etcd(int i) { etcd_.at(i)->kill(); }
std::expected<void, std::string> harness::restart_etcd(int i) { return start_and_wait(*etcd_.at(i), etcd_ports_[i]); }
void harness::kill_nats(int i) { nats_.at(i)->kill(); }
std::expected<void, std::string> harness::restart_nats(int i) { return start_and_wait(*nats_.at(i), nats_ports_[i]); }

std::vector<std::string> harness::exited() {
  std::vector<std::string> out;
  for (auto* group : {&etcd_, &nats_, &nodes_})
    for (auto& p : *group)
      if (!p->running()) out.push_back(p->name());
  return out;
}

}  // namespace switchyard::chaos
