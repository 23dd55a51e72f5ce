#!/bin/sh
# bench/cluster-ratio.sh's arguments (no cluster is started): --help prints
# the header and the usage; no workload or an unknown one, REPS that is not
# a positive number, and a bench or server that is not there, are refused
# with exit 2 and named.
#
#   cluster_ratio_test.sh path/to/bench/cluster-ratio.sh
set -u
script=${1:?usage: cluster_ratio_test.sh CLUSTER_RATIO_SCRIPT}
. "$(dirname "$0")/script_test.sh"

bash "$script" --help >"$tmp/help" 2>&1 || fail "--help exited $?"
grep -q '^usage: bench/cluster-ratio.sh route|fanout \[REPS\]$' "$tmp/help" || fail "--help has no usage: $(cat "$tmp/help")"
grep -q 'alternating one node' "$tmp/help" || fail "--help has not the header: $(cat "$tmp/help")"

# Stand-ins that exist, so only the workload is wrong.
printf '#!/bin/sh\nexit 0\n' >"$tmp/exe"
chmod +x "$tmp/exe"
status=0
BENCH=$tmp/exe SERVER=$tmp/exe bash "$script" latency >"$tmp/out" 2>&1 || status=$?
[ "$status" = 2 ] || fail "an unknown workload: exit $status, expected 2"
grep -q 'usage:' "$tmp/out" || fail "an unknown workload: no usage: $(cat "$tmp/out")"

status=0
bash "$script" >"$tmp/out" 2>&1 || status=$?
[ "$status" = 2 ] || fail "no workload: exit $status, expected 2"
grep -q '^usage:' "$tmp/out" || fail "no workload: no usage: $(cat "$tmp/out")"

status=0
BENCH=$tmp/exe SERVER=$tmp/exe bash "$script" route abc >"$tmp/out" 2>&1 || status=$?
[ "$status" = 2 ] || fail "REPS not a number: exit $status, expected 2"
grep -q "not 'abc'" "$tmp/out" || fail "REPS not a number is not named: $(cat "$tmp/out")"

status=0
BENCH=$tmp/missing SERVER=$tmp/exe bash "$script" route 1 >"$tmp/out" 2>&1 || status=$?
[ "$status" = 2 ] || fail "a missing bench: exit $status, expected 2"
grep -q "$tmp/missing" "$tmp/out" || fail "a missing bench is not named: $(cat "$tmp/out")"

[ "$failures" = 0 ] && echo "ok: cluster-ratio.sh arguments"
exit "$failures"
