#!/usr/bin/env bash
# Installs the build dependencies (idempotent), builds Switchyard with its
# tests, and runs every test with ctest.
#
#   scripts/run-tests.sh              # ASan+UBSan build in build/test
#   SANITIZE=0 scripts/run-tests.sh   # plain build (faster) in build/test-plain
#
# Extra arguments go to ctest, e.g. `scripts/run-tests.sh -R wildcard`.
# Without them, the lock rules are checked after the build
# (scripts/check-thread-safety.sh: clang-14's thread-safety analysis, a unit
# per core at once, about a minute and a half on two), and the fuzz targets run after the tests (scripts/run-fuzz.sh,
# each for FUZZ_SECONDS, default 30 here); FUZZ=0 skips them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/setup.sh --js

sanitize=${SANITIZE:-1}
if [[ $sanitize == 1 ]]; then
  dir=build/test
  flags=(-DCMAKE_BUILD_TYPE=Debug -DSWITCHYARD_SANITIZE=ON)
else
  dir=build/test-plain
  flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSWITCHYARD_SANITIZE=OFF)
fi
cmake -S . -B "$dir" -DSWITCHYARD_BUILD_TESTS=ON "${flags[@]}" >/dev/null
cmake --build "$dir" -j2
if [[ $# -eq 0 ]]; then
  scripts/check-thread-safety.sh "$dir"
fi
# Sanitizer reports fail the test that triggers them.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# Leaks inside libraries we link, each explained in the file.
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/lsan-suppressions.txt:print_suppressions=0}
ctest --test-dir "$dir" -j2 --output-on-failure --timeout 300 "$@"
if [[ ${FUZZ:-1} == 1 && $# -eq 0 ]]; then
  FUZZ_SECONDS=${FUZZ_SECONDS:-30} scripts/run-fuzz.sh
fi
