#!/bin/sh
# bench/plot-peers.sh on the committed peers results: it draws a PNG of
# non-trivial size, also from a file with only some workloads, and it fails
# with a message that names the problem on a missing file, an empty file, a
# file with no result rows, and no arguments. Exits 77 (ctest: skipped)
# when gnuplot or jq is missing (scripts/setup.sh installs both).
#
#   plot_peers_test.sh path/to/bench/plot-peers.sh path/to/results.jsonl
set -u
plot=${1:?usage: plot_peers_test.sh PLOT_SCRIPT RESULTS.jsonl}
results=${2:?usage: plot_peers_test.sh PLOT_SCRIPT RESULTS.jsonl}
. "$(dirname "$0")/plot_checks.sh"

# the whole committed run
if sh "$plot" "$results" "$tmp/all/peers.png" >"$tmp/out" 2>"$tmp/err"; then
  is_png "$tmp/all/peers.png" 20000
else
  fail "the committed results: exited non-zero: $(cat "$tmp/err")"
fi
# drawing twice gives the file again (idempotent)
sh "$plot" "$results" "$tmp/all/peers.png" >/dev/null 2>&1 || fail "a second run over the same output failed"
is_png "$tmp/all/peers.png" 20000

# only some workloads: latency lines alone, then fan-out lines alone
grep '"workload":"latency"' "$results" >"$tmp/latency.jsonl"
if sh "$plot" "$tmp/latency.jsonl" "$tmp/latency.png" >"$tmp/out" 2>"$tmp/err"; then
  is_png "$tmp/latency.png" 10000
else
  fail "latency lines only: exited non-zero: $(cat "$tmp/err")"
fi
grep '"workload":"fanout"' "$results" >"$tmp/fanout.jsonl"
if sh "$plot" "$tmp/fanout.jsonl" "$tmp/fanout.png" >"$tmp/out" 2>"$tmp/err"; then
  is_png "$tmp/fanout.png" 10000
else
  fail "fan-out lines only: exited non-zero: $(cat "$tmp/err")"
fi

# inputs it cannot draw
expect_failure "missing input" "cannot read $tmp/no-such.jsonl" "$tmp/no-such.jsonl" "$tmp/never.png"
: >"$tmp/empty.jsonl"
expect_failure "empty input" "is empty" "$tmp/empty.jsonl" "$tmp/never.png"
grep -v '"workload":"\(fanout\|latency\|durable\|route\)"' "$results" >"$tmp/meta.jsonl"
[ -s "$tmp/meta.jsonl" ] || echo '{"meta":"order","rep":1,"order":["nats"]}' >"$tmp/meta.jsonl"
expect_failure "no result rows" "no results in" "$tmp/meta.jsonl" "$tmp/never.png"
echo 'this is not json' >"$tmp/text.jsonl"
expect_failure "not JSON" "is not JSON lines" "$tmp/text.jsonl" "$tmp/never.png"
expect_failure "no arguments" "usage: plot-peers.sh RESULTS.jsonl OUT.png"

if [ "$failures" -gt 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "plot-peers.sh: all checks passed"
