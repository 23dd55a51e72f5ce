#pragma once
// Running programs from end-to-end tests: a shell command with its output
// captured, and the switchyard-server binary as a child process.

#include "bench/server_process.hpp"

#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace switchyard::test {

// What a shell command left behind: its raw wait status (as from waitpid)
// and its stdout.
struct command_result {
  int status = -1;
  std::string out;
};

// Runs `cmd` through popen and reads its stdout to the end.
inline command_result run_command(const std::string& cmd) {
  command_result r;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) r.out.append(buf, n);
  r.status = ::pclose(p);
  return r;
}

// Runs `cmd`; returns its exit code (-1 when it did not exit normally) and stdout.
inline std::pair<int, std::string> run_for_exit_code(const std::string& cmd) {
  auto r = run_command(cmd);
  return {WIFEXITED(r.status) ? WEXITSTATUS(r.status) : -1, std::move(r.out)};
}

// The switchyard-server binary under test, started with `args`; FAILs the
// test if it does not come up.
inline bench::server_process start_server_process(const std::vector<std::string>& args = {}) {
  auto s = bench::server_process::start(SWITCHYARD_SERVER_BINARY, args, std::chrono::seconds(10));
  if (!s) FAIL(s.error());
  return std::move(*s);
}

}  // namespace switchyard::test
