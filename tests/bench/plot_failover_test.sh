#!/bin/sh
# bench/plot-failover.sh on the committed switchyard-failover times: it
# draws a PNG of non-trivial size from one run and from several, and fails
# with a message that names the problem on a missing file, an empty file,
# a file that is not one time per line, a run without a title and wrong
# arguments. Exits 77 (ctest: skipped) when gnuplot or jq is missing
# (scripts/setup.sh installs both).
#
#   plot_failover_test.sh path/to/bench/plot-failover.sh path/to/times.txt
set -u
plot=${1:?usage: plot_failover_test.sh PLOT_SCRIPT TIMES}
times=${2:?usage: plot_failover_test.sh PLOT_SCRIPT TIMES}
. "$(dirname "$0")/plot_checks.sh"

if sh "$plot" "$tmp/one.png" "TTL 5 s=$times" >"$tmp/out" 2>"$tmp/err"; then
  is_png "$tmp/one.png" 10000
else
  fail "one run: exited non-zero: $(cat "$tmp/err")"
fi
head -n 100 "$times" >"$tmp/part.txt"
if sh "$plot" "$tmp/two.png" "all=$times" "part=$tmp/part.txt" >"$tmp/out" 2>"$tmp/err"; then
  is_png "$tmp/two.png" 20000
else
  fail "two runs: exited non-zero: $(cat "$tmp/err")"
fi

expect_failure "missing input" "cannot read $tmp/no-such.txt" "$tmp/never.png" "x=$tmp/no-such.txt"
: >"$tmp/empty.txt"
expect_failure "empty input" "is empty" "$tmp/never.png" "x=$tmp/empty.txt"
printf '12.5\nnot a time\n' >"$tmp/text.txt"
expect_failure "not times" "is not one time (ms) per line" "$tmp/never.png" "x=$tmp/text.txt"
expect_failure "no title" "is not TITLE=FILE" "$tmp/never.png" "$times"
expect_failure "one argument" "usage: plot-failover.sh OUT.png" "$tmp/never.png"

if [ "$failures" -gt 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "plot-failover.sh: all checks passed"
