#include "bench/cpu_usage.hpp"

#include "bench/bench_common.hpp"
#include "bench/server_process.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <sstream>

namespace switchyard::bench {

namespace {

double seconds_of(const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; }

// User + system seconds of getrusage(`who`).
double rusage_seconds(int who) {
  rusage u{};
  if (::getrusage(who, &u) != 0) return NAN;
  return seconds_of(u.ru_utime) + seconds_of(u.ru_stime);
}

}  // namespace

double cpu_seconds_of(int pid) {
  if (pid <= 0) return NAN;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = all.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos || close + 2 > all.size()) return NAN;
  std::istringstream rest(all.substr(close + 2));
  std::string field;
  // Fields 3.. after the name; utime, stime, cutime, cstime are 14 to 17.
  for (int i = 3; i < 14 && rest >> field; ++i) {
  }
  unsigned long long utime = 0, stime = 0;
  long long cutime = 0, cstime = 0;
  if (!(rest >> utime >> stime >> cutime >> cstime)) return NAN;
  return static_cast<double>(utime + stime + static_cast<unsigned long long>(cutime + cstime)) /
         static_cast<double>(::sysconf(_SC_CLK_TCK));
}

double own_cpu_seconds() { return rusage_seconds(RUSAGE_SELF); }

cpu_meter::cpu_meter(const server_process* server) : server_(server) {
  if (server_) {
    reaped0_ = rusage_seconds(RUSAGE_CHILDREN);
    broker0_ = server_->pid() > 0 ? cpu_seconds_of(server_->pid()) : 0.0;
  }
  bench0_ = own_cpu_seconds();
}

cpu_cost cpu_meter::stop(std::uint64_t count, std::string_view unit) const {
  cpu_cost c;
  c.bench_s = own_cpu_seconds() - bench0_;
  c.count = count;
  c.unit = std::string(unit);
  if (!server_) {
    c.broker_note = "not measured for a broker of --address";
    return c;
  }
  const int pid = server_->pid();
  const double live = pid > 0 ? cpu_seconds_of(pid) : 0.0;
  c.broker_s = rusage_seconds(RUSAGE_CHILDREN) - reaped0_ + live - broker0_;
  if (!std::isfinite(c.broker_s)) c.broker_note = "not measured: /proc/" + std::to_string(pid) + "/stat unreadable";
  return c;
}

std::string cpu_cost::json() const {
  json_line j;
  j.str("unit", unit).integer("count", static_cast<long long>(count));
  j.num("bench_s", bench_s).num("broker_s", broker_s).num("total_s", total_s());
  j.num("us_per_msg", per_unit_us(total_s())).num("bench_us_per_msg", per_unit_us(bench_s));
  j.num("broker_us_per_msg", per_unit_us(broker_s));
  if (!broker_note.empty()) j.str("broker_note", broker_note);
  return j.done();
}

std::string cpu_cost::summary() const {
  const std::string broker = std::isfinite(broker_s) ? fmt::format("{:.3f}", broker_s) : "not measured";
  if (count == 0)
    return fmt::format("  CPU:       bench {:.3f} CPU-s, broker {}; no {} to divide by\n", bench_s, broker, unit);
  if (std::isfinite(broker_s))
    return fmt::format("  CPU:       {:.2f} us per {} (bench {:.2f} + broker {:.2f}; {:.3f} CPU-s for {})\n",
                       per_unit_us(total_s()), unit, per_unit_us(bench_s), per_unit_us(broker_s), total_s(), count);
  return fmt::format("  CPU:       bench {:.2f} us per {} ({:.3f} CPU-s for {}); broker {}\n", per_unit_us(bench_s),
                     unit, bench_s, count, broker_note);
}

}  // namespace switchyard::bench
