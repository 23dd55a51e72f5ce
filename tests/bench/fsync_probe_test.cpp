// The durable workload's disk probe (bench/fsync_probe.hpp) on a temporary
// folder: what it measures and reports, and that it leaves nothing there.

#include "bench/fsync_probe.hpp"
#include "tests/support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <filesystem>

using switchyard::bench::probe_fsync;
using switchyard::test::temp_dir;

TEST_CASE("the fsync probe times appends with fdatasync in a folder and removes its file", "[bench]") {
  temp_dir dir;
  const auto r = probe_fsync(dir.path(), 0.05);
  REQUIRE(r);
  CHECK(r->error.empty());
  CHECK(r->ops >= 1);
  CHECK(r->bytes == 4096);
  CHECK(r->dir == dir.path().string());
  CHECK_FALSE(r->fs.empty());
  CHECK(r->p50_us <= r->p90_us);
  CHECK(r->p90_us <= r->p99_us);
  CHECK(r->p99_us <= r->max_us);
  CHECK(r->p50_us > 0);
  const auto json = r->json();
  for (const char* field : {R"("op":"append 4096 B + fdatasync")", R"("ops":)", R"("p50_us":)", R"("p99_us":)",
                            R"("max_us":)", R"("fs":")"})
    CHECK(json.find(field) != std::string::npos);
  CHECK(std::filesystem::is_empty(dir.path()));
}

TEST_CASE("the fsync probe says why when it cannot write in the folder", "[bench]") {
  temp_dir dir;
  const auto missing = dir.path() / "no-such-folder";
  const auto r = probe_fsync(missing, 0.05);
  REQUIRE_FALSE(r);
  CHECK(r.error().find("cannot create " + (missing / ".switchyard-bench-fsync-probe.").string()) == 0);
  CHECK(r.error().find("No such file or directory") != std::string::npos);
}
