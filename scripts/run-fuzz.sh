#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang-14 with ASan+UBSan) in
# build/fuzz and runs each for a bounded time, printing libFuzzer's final
# statistics (executions, executions per second, coverage).
#
#   scripts/run-fuzz.sh                    # every target, 60 s each
#   FUZZ_SECONDS=600 scripts/run-fuzz.sh   # a longer run
#   scripts/run-fuzz.sh dispatch frame     # some targets only
#
# Seeds come from the targets themselves (SWITCHYARD_FUZZ_SEEDS, frames and
# values built with the project's encoders), plus the inputs of crashes
# found earlier, committed in fuzz/seeds/<target>/; what a run finds is kept in
# build/fuzz/corpus/<target> and reused by the next run. A crash fails the
# script; its input is in build/fuzz/crashes/<target>/. FUZZ_JOBS runs
# that many workers per target (default 1); FUZZ_PARALLEL targets run at
# once (default 2 on two cores or more). docs/security.md, "Fuzzing".
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

seconds=${FUZZ_SECONDS:-60}
jobs=${FUZZ_JOBS:-1}
targets=("$@")
(( ${#targets[@]} )) || targets=(frame dispatch destination config auth_file log_record)

dir=build/fuzz
CC=clang-14 CXX=clang++-14 cmake -S . -B "$dir" -DSWITCHYARD_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$dir" -j2 --target "${targets[@]/%/_fuzz}"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# One target: fuzz it, then print its summary; returns non-zero on a crash.
fuzz_one() {
  local t=$1
  local bin=$dir/fuzz/${t}_fuzz
  local seeds=$dir/seeds/$t corpus=$dir/corpus/$t crashes=$dir/crashes/$t
  local found=()
  [[ -d fuzz/seeds/$t ]] && found=("fuzz/seeds/$t")
  rm -rf "$seeds"
  mkdir -p "$corpus" "$crashes"
  SWITCHYARD_FUZZ_SEEDS=$seeds "$bin" >/dev/null
  local log=$dir/fuzz-$t.log
  echo "fuzz: $t for ${seconds} s" >&2
  local rc=0
  if (( jobs > 1 )); then
    "$bin" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$crashes/" \
      -fork="$jobs" "$corpus" "$seeds" "${found[@]}" >"$log" 2>&1 || rc=$?
  else
    "$bin" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$crashes/" \
      "$corpus" "$seeds" "${found[@]}" >"$log" 2>&1 || rc=$?
  fi
  # The last status line (executions, cov, ft, corpus) and the final stats.
  { grep -E '^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED)' "$log" || true; } | tail -1 | sed "s/^/fuzz: $t: /"
  { grep -E '^stat::' "$log" || true; } | sed "s/^/fuzz: $t: /"
  if (( rc != 0 )); then
    echo "fuzz: $t FAILED (exit $rc); log $log, inputs in $crashes" >&2
    grep -E 'ERROR|SUMMARY|runtime error' "$log" | head -5 >&2 || true
    return 1
  fi
}

# FUZZ_PARALLEL targets at a time (default 2, or 1 on one core): on two
# cores each gets one for its FUZZ_SECONDS (with FUZZ_JOBS > 1 they share).
parallel=${FUZZ_PARALLEL:-$(( $(nproc) < 2 ? 1 : 2 ))}
[[ $parallel =~ ^[1-9][0-9]*$ ]] || { echo "fuzz: FUZZ_PARALLEL must be a number from 1 (got '$parallel')" >&2; exit 2; }
# Interrupted: the targets running in the background stop too.
trap 'kill $(jobs -p) 2>/dev/null || true' INT TERM
failed=()
for ((i = 0; i < ${#targets[@]}; i += parallel)); do
  batch=("${targets[@]:i:parallel}")
  pids=()
  for t in "${batch[@]}"; do
    fuzz_one "$t" &
    pids+=($!)
  done
  for k in "${!pids[@]}"; do
    wait "${pids[k]}" || failed+=("${batch[k]}")
  done
done
if (( ${#failed[@]} )); then
  echo "fuzz: failed: ${failed[*]}" >&2
  exit 1
fi
