#!/bin/sh
# bench/plot-route-latency.sh on the committed route --rate results: it
# draws a PNG of non-trivial size, also from one setting's lines alone, and
# fails with a message that names the problem on a missing file, an empty
# file, a file that is not JSON lines, a file without labelled route --rate
# lines, and wrong arguments. Exits 77 (ctest: skipped) when gnuplot or jq
# is missing (scripts/setup.sh installs both).
#
#   plot_route_latency_test.sh path/to/bench/plot-route-latency.sh path/to/results.jsonl
set -u
plot=${1:?usage: plot_route_latency_test.sh PLOT_SCRIPT RESULTS.jsonl}
results=${2:?usage: plot_route_latency_test.sh PLOT_SCRIPT RESULTS.jsonl}
. "$(dirname "$0")/plot_checks.sh"

if sh "$plot" "$results" "$tmp/all.png" >"$tmp/out" 2>"$tmp/err"; then
  is_png "$tmp/all.png" 20000
else
  fail "the committed results: exited non-zero: $(cat "$tmp/err")"
fi
grep '"label":"coalescing off"' "$results" >"$tmp/off.jsonl"
if sh "$plot" "$tmp/off.jsonl" "$tmp/off.png" >"$tmp/out" 2>"$tmp/err"; then
  is_png "$tmp/off.png" 10000
else
  fail "one setting's lines only: exited non-zero: $(cat "$tmp/err")"
fi

expect_failure "missing input" "cannot read $tmp/no-such.jsonl" "$tmp/no-such.jsonl" "$tmp/never.png"
: >"$tmp/empty.jsonl"
expect_failure "empty input" "is empty" "$tmp/empty.jsonl" "$tmp/never.png"
echo 'this is not json' >"$tmp/text.jsonl"
expect_failure "not JSON" "is not JSON lines" "$tmp/text.jsonl" "$tmp/never.png"
jq -c 'del(.label)' "$results" >"$tmp/unlabelled.jsonl"
expect_failure "no labels" "no route --rate lines with a label" "$tmp/unlabelled.jsonl" "$tmp/never.png"
expect_failure "one argument" "usage: plot-route-latency.sh RESULTS.jsonl OUT.png" "$results"

if [ "$failures" -gt 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "plot-route-latency.sh: all checks passed"
