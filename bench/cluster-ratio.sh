#!/usr/bin/env bash
# Cluster mode against one node (issue 28's ratios, docs/benchmarks.md):
# one workload of switchyard-bench, alternating one node (the bench starts
# its own server) with scripts/run-cluster.sh (nine processes: 3 etcd,
# 3 nats-servers, nodes a, b, c) in each NATS topology, REPS rounds. The
# service or publisher talks to node b, the gateways or subscribers to node
# a. Prints one line per run: the rate, and for the cluster runs the CPU
# the nodes, the nats-servers and etcd used per message sent (utime+stime
# from /proc, before and after the bench).
#
#   bench/cluster-ratio.sh route [REPS]     # send-to-user, window $WINDOW (256)
#   bench/cluster-ratio.sh fanout [REPS]    # 1 publisher, 4 subscribers
#
# COUNT (default 100,000 sends / 200,000 publishes), WINDOW (route's
# --window), TOPOLOGIES (default "spread same": NATS_FIRST of
# scripts/run-cluster.sh). BENCH and SERVER default to build/test-plain's
# (RelWithDebInfo). Uses ports 7881-7883 and 17000-17042: nothing else may
# hold them. Run on a quiet machine (check `uptime`): nine processes share
# the cores.
set -euo pipefail
usage='usage: bench/cluster-ratio.sh route|fanout [REPS]'
case ${1:-} in -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; echo "$usage"; exit 0 ;; esac
workload=${1:-}
reps=${2:-3}
case $workload in
  route) count=${COUNT:-100000}; args=(route --users 10000 --gateways 20 --window "${WINDOW:-256}" --count "$count") ;;
  fanout) count=${COUNT:-200000}; args=(fanout --subs 4 --count "$count") ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
[[ $reps =~ ^[1-9][0-9]*$ ]] || { echo "cluster-ratio: REPS must be a positive number, not '$reps'" >&2; echo "$usage" >&2; exit 2; }
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bench=${BENCH:-$repo/build/test-plain/bench/switchyard-bench}
server=${SERVER:-$repo/build/test-plain/broker/switchyard-server}
[[ -x $bench && -x $server ]] || { echo "cluster-ratio: no $bench or $server (build build/test-plain, or set BENCH and SERVER)" >&2; exit 2; }
tck=$(getconf CLK_TCK)
ticks() {  # ticks PID...: CPU used so far (utime + stime), in clock ticks
  local t=0 f
  for p in "$@"; do
    [[ -r /proc/$p/stat ]] || continue
    read -ra f <<<"$(sed 's/^.*) //' "/proc/$p/stat")"
    t=$((t + f[11] + f[12]))
  done
  echo "$t"
}
ports_busy() { ss -ltn | grep -qE '127\.0\.0\.1:(788[123]|170[0-4][0-9]) '; }
rate_of() { grep -o '"delivered_rate":[0-9]*' | cut -d: -f2; }

cluster_pid=
stop_cluster() {
  [[ -n $cluster_pid ]] || return 0
  kill -TERM -- "-$cluster_pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$cluster_pid" 2>/dev/null || break; sleep 0.1; done
  cluster_pid=
}
trap stop_cluster EXIT

for ((r = 1; r <= reps; r++)); do
  one=$("$bench" --json "${args[@]}" 2>/dev/null | tail -1)
  echo "round $r one node: $(rate_of <<<"$one")/s, $(grep -o '"us_per_msg":[0-9.]*' <<<"$one" | cut -d: -f2) us CPU per delivered message (bench + broker)"
  for topology in ${TOPOLOGIES:-spread same}; do
    for _ in $(seq 100); do ports_busy || break; sleep 0.2; done
    NATS_FIRST=$topology SWITCHYARD_SERVER=$server BASE_PORT=17000 setsid "$repo/scripts/run-cluster.sh" >/dev/null 2>&1 &
    cluster_pid=$!
    for _ in $(seq 60); do [[ $(pgrep -fc -- "--cluster-node-id" || true) == 3 ]] && break; sleep 0.5; done
    sleep 8  # partitions claimed, directories rebuilt
    read -ra nodes <<<"$(pgrep -f -- '--cluster-node-id' | tr '\n' ' ')"
    read -ra nats <<<"$(pgrep -x nats-server | tr '\n' ' ')"
    read -ra etcd <<<"$(pgrep -x etcd | tr '\n' ' ')"
    n0=$(ticks "${nodes[@]}") s0=$(ticks "${nats[@]}") e0=$(ticks "${etcd[@]}")
    out=$("$bench" --address 127.0.0.1:7882 --json "${args[@]}" --sub-address 127.0.0.1:7881 2>/dev/null | tail -1)
    n1=$(ticks "${nodes[@]}") s1=$(ticks "${nats[@]}") e1=$(ticks "${etcd[@]}")
    per() { awk -v t="$1" -v k="$tck" -v n="$count" 'BEGIN { printf "%.2f", t / k * 1e6 / n }'; }
    echo "round $r cluster ($topology first): $(rate_of <<<"$out")/s; CPU us per message sent: nodes $(per $((n1 - n0))), nats-servers $(per $((s1 - s0))), etcd $(per $((e1 - e0))), bench $(grep -o '"bench_us_per_msg":[0-9.]*' <<<"$out" | cut -d: -f2) per delivered"
    stop_cluster
  done
done
