// The sequence log's lock file: one process at a time has a log open for
// writing (flock on <dir>/switchyard.lock, holding its pid); read-only
// opens take no lock.

#include "storage/errc.hpp"
#include "storage/sequence_log.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace {

namespace sy = switchyard::storage;
using switchyard::test::temp_dir;

sy::log_options options(const temp_dir& d) {
  sy::log_options o;
  o.dir = d.path() / "log";
  o.mode = sy::durability::none;
  o.initial_map_size = std::size_t{1} << 20;
  o.max_map_size = std::size_t{16} << 20;
  return o;
}

}  // namespace

TEST_CASE("a second open of a log in use fails with locked and names the holder's pid", "[storage][lock]") {
  temp_dir d{"switchyard-lock"};
  auto first = sy::sequence_log::open(options(d));
  REQUIRE(first);
  // The lock file holds our pid.
  std::ifstream lock(d.path() / "log" / "switchyard.lock");
  std::string pid;
  lock >> pid;
  CHECK(pid == std::to_string(::getpid()));

  sy::diagnostics diag;
  auto second = sy::sequence_log::open(options(d), &diag);
  REQUIRE_FALSE(second);
  CHECK(second.error() == sy::errc::locked);
  CHECK(diag.pid == static_cast<std::uint64_t>(::getpid()));
  CHECK(diag.message == "the log in " + (d.path() / "log").string() + " is in use by another process (pid " +
                            std::to_string(::getpid()) + ", lock file " +
                            (d.path() / "log" / "switchyard.lock").string() + ")");
  // The first one is unharmed.
  REQUIRE((*first)->append("s", std::vector<std::byte>(3)));
}

TEST_CASE("closing the log releases its lock", "[storage][lock]") {
  temp_dir d{"switchyard-lock"};
  {
    auto first = sy::sequence_log::open(options(d));
    REQUIRE(first);
  }
  auto again = sy::sequence_log::open(options(d));
  REQUIRE(again);
}

TEST_CASE("a log held by another process is refused with that process's pid until it exits", "[storage][lock]") {
  temp_dir d{"switchyard-lock"};
  int ready[2], release[2];
  REQUIRE(::pipe(ready) == 0);
  REQUIRE(::pipe(release) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(ready[0]);
    ::close(release[1]);
    auto log = sy::sequence_log::open(options(d));
    const char ok = log ? 'y' : 'n';
    (void)!::write(ready[1], &ok, 1);
    char c;
    (void)!::read(release[0], &c, 1);  // until the parent says so (or dies)
    ::_exit(0);
  }
  ::close(ready[1]);
  ::close(release[0]);
  char ok = 0;
  REQUIRE(::read(ready[0], &ok, 1) == 1);
  REQUIRE(ok == 'y');

  sy::diagnostics diag;
  auto refused = sy::sequence_log::open(options(d), &diag);
  CHECK_FALSE(refused);
  if (!refused) CHECK(refused.error() == sy::errc::locked);
  CHECK(diag.pid == static_cast<std::uint64_t>(child));

  // Readers next door are fine.
  auto o = options(d);
  o.read_only = true;
  auto reader = sy::sequence_log::open(o);
  CHECK(reader);
  if (reader) reader->reset();

  ::close(release[1]);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  auto after = sy::sequence_log::open(options(d));
  REQUIRE(after);
}
