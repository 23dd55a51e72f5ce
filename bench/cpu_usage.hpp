#pragma once
// CPU time per message: the user + system time of switchyard-bench and of
// the broker it started, over a workload's measured phase, divided by what
// the phase handled (messages delivered, appends acknowledged, ...). On a
// shared 2-core machine rates vary 1.5-2x between runs; the CPU a message
// costs varies far less, and it is what an operator pays.

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

namespace switchyard::bench {

class server_process;

// User + system seconds of process `pid`, all its threads and the children
// it reaped (/proc/<pid>/stat: utime, stime, cutime, cstime, in clock
// ticks of 10 ms); NaN if it cannot be read.
double cpu_seconds_of(int pid);
// User + system seconds of this process, all its threads (getrusage).
double own_cpu_seconds();

// What one phase cost.
struct cpu_cost {
  double bench_s = NAN;     // this process
  double broker_s = NAN;    // the broker the bench started; NaN: not measured (see broker_note)
  std::string broker_note;  // why broker_s is NaN
  std::uint64_t count = 0;  // what the phase handled, in `unit`s
  std::string unit;         // "delivered message", "acknowledged append", ...

  double total_s() const noexcept { return bench_s + broker_s; }
  // Microseconds of `seconds` per unit (NaN without any).
  double per_unit_us(double seconds) const noexcept {
    return count > 0 ? seconds * 1e6 / static_cast<double>(count) : NAN;
  }
  // The JSON object of the "cpu" field: unit, count, bench_s, broker_s,
  // total_s, us_per_msg (total per unit), bench_us_per_msg and
  // broker_us_per_msg; null where not measured, with broker_note saying why.
  std::string json() const;
  // The summary line ("  CPU:       1.52 us per delivered message (...)\n").
  std::string summary() const;
};

// Measures from its construction to stop(). `server` is the broker the
// bench started, followed across restarts (the reconnect workload kills
// and restarts it): its CPU is that of the process running at stop() plus
// that of every broker process reaped meanwhile (this process's
// RUSAGE_CHILDREN), less what the one running at the start had used by
// then. nullptr: a broker of --address, whose CPU is not measured.
class cpu_meter {
 public:
  explicit cpu_meter(const server_process* server);
  cpu_cost stop(std::uint64_t count, std::string_view unit) const;

 private:
  const server_process* server_;
  double bench0_ = NAN, broker0_ = NAN, reaped0_ = NAN;
};

}  // namespace switchyard::bench
