#!/bin/sh
# bench/route-latency.sh with stand-in benches (shell scripts, so no broker
# runs): every run's JSON line is kept with its setting's label, a failed
# run stops the sweep with the bench's own error (exit 1), and a missing
# bench is named (exit 2). Exits 77 (ctest: skipped) without jq.
#
#   route_latency_test.sh path/to/bench/route-latency.sh
set -u
script=${1:?usage: route_latency_test.sh ROUTE_LATENCY_SCRIPT}
. "$(dirname "$0")/script_test.sh"
needs jq
mkdir -p "$tmp/bench"

# A bench that answers like switchyard-bench --json route --rate R.
cat >"$tmp/bench/good" <<'SH'
#!/bin/sh
rate=0
while [ $# -gt 0 ]; do [ "$1" = --rate ] && rate=$2; shift; done
echo "route: summary on stdout before the JSON line"
echo "{\"workload\":\"route\",\"rate\":$rate,\"p50_us\":1,\"p99_us\":2,\"p999_us\":3}"
SH
# A bench whose run fails.
printf '#!/bin/sh\necho "switchyard-bench route: gateway connect: Connection refused" >&2\nexit 1\n' >"$tmp/bench/bad"
chmod +x "$tmp/bench/good" "$tmp/bench/bad"

if BENCH=$tmp/bench/good sh "$script" "$tmp/out.jsonl" 2 "1000 2000" >"$tmp/stdout" 2>"$tmp/err"; then
  n=$(wc -l <"$tmp/out.jsonl" | tr -d ' ')
  [ "$n" = 8 ] || fail "2 sweeps x 2 rates x 2 settings: expected 8 lines, got $n"
  on=$(jq -s 'map(select(.label == "coalescing (default)")) | length' "$tmp/out.jsonl")
  off=$(jq -s 'map(select(.label == "coalescing off" and .rate == 2000)) | length' "$tmp/out.jsonl")
  [ "$on" = 4 ] || fail "expected 4 lines labelled coalescing (default), got $on"
  [ "$off" = 2 ] || fail "expected 2 lines labelled coalescing off at 2000/s, got $off"
else
  fail "a good bench: exited non-zero: $(cat "$tmp/err")"
fi

if BENCH=$tmp/bench/bad sh "$script" "$tmp/bad.jsonl" 1 "1000" >"$tmp/stdout" 2>"$tmp/err"; then
  fail "a failing run: exited 0 ($(cat "$tmp/stdout"))"
else
  grep -q "the run at 1000/s (coalescing (default)) failed" "$tmp/err" || fail "a failing run: not named: $(cat "$tmp/err")"
  grep -q "Connection refused" "$tmp/err" || fail "a failing run: the bench's error not shown: $(cat "$tmp/err")"
fi

BENCH=$tmp/bench/none sh "$script" "$tmp/none.jsonl" >/dev/null 2>"$tmp/err"
code=$?
[ "$code" = 2 ] || fail "a missing bench: exit $code, expected 2"
grep -q "no switchyard-bench at $tmp/bench/none" "$tmp/err" || fail "a missing bench: not named: $(cat "$tmp/err")"

if [ "$failures" -gt 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "route-latency.sh: all checks passed"
