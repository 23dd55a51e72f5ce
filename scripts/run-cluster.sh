#!/usr/bin/env bash
# A first try of cluster mode (docs/cluster.md), all on loopback: builds
# switchyard-server (Release), then starts three etcd members, three
# nats-servers routed into one cluster, and three switchyard nodes (a, b,
# c) on ports 7881..7883, with their data on tmpfs. Prints the addresses
# and waits; Ctrl-C stops all nine (nodes first, so they leave cleanly).
#
#   scripts/run-cluster.sh                 # build and run
#   SWITCHYARD_SERVER=path scripts/run-cluster.sh   # a server already built (no build)
#   BASE_PORT=17000 scripts/run-cluster.sh  # other ports (etcd BASE+0.., NATS BASE+20.., nodes BASE+40..)
#   NATS_FIRST=same scripts/run-cluster.sh  # every node lists the same NATS server first
#                                           # (default spread: each its own; docs/cluster.md)
#
# etcd runs with --unsafe-no-fsync: fast and fine for a try on tmpfs, NOT for
# production (an etcd member that loses power may then lose what it
# acknowledged). Logs: $dir/*.log, shown at the end when something failed.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
base=${BASE_PORT:-17000}
server=${SWITCHYARD_SERVER:-}
nats_first=${NATS_FIRST:-spread}
[[ $nats_first == spread || $nats_first == same ]] || { echo "run-cluster: NATS_FIRST is spread or same (got '$nats_first')" >&2; exit 2; }
if [[ -z $server ]]; then
  "$repo/scripts/setup.sh"
  cmake -S "$repo" -B "$repo/build/release" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$repo/build/release" -j2 --target switchyard-server
  server="$repo/build/release/broker/switchyard-server"
fi
tmp_root=/dev/shm
[[ -d $tmp_root && -w $tmp_root ]] || tmp_root=${TMPDIR:-/tmp}
dir=$(mktemp -d "$tmp_root/switchyard-cluster.XXXXXX")
pids=()
cleanup() {
  trap - EXIT INT TERM
  # Nodes first (they revoke their etcd leases), then NATS and etcd.
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT INT TERM

# Waits (up to 20 s) until host:port accepts a TCP connection.
wait_port() {
  for _ in $(seq 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "run-cluster: nothing listens on 127.0.0.1:$1 after 20 s; logs in $dir" >&2
  tail -n 20 "$dir"/*.log >&2 || true
  return 1
}

# etcd: three members, client ports base+0..2, peer ports base+10..12.
initial=""
for i in 0 1 2; do initial+="${initial:+,}e$i=http://127.0.0.1:$((base + 10 + i))"; done
etcd_endpoints=()
for i in 0 1 2; do
  etcd --name "e$i" --data-dir "$dir/etcd$i" \
    --listen-client-urls "http://127.0.0.1:$((base + i))" --advertise-client-urls "http://127.0.0.1:$((base + i))" \
    --listen-peer-urls "http://127.0.0.1:$((base + 10 + i))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((base + 10 + i))" \
    --initial-cluster "$initial" --initial-cluster-state new --initial-cluster-token "switchyard-try" \
    --unsafe-no-fsync --log-level error >"$dir/etcd$i.log" 2>&1 &
  pids+=($!)
  etcd_endpoints+=("127.0.0.1:$((base + i))")
done

# NATS: three servers routed into one cluster; client ports base+20..22,
# route ports base+30..32; max_payload above --max-frame (1 MiB) + 1 KiB.
routes=""
for i in 0 1 2; do routes+="${routes:+, }nats://127.0.0.1:$((base + 30 + i))"; done
nats_urls=()
for i in 0 1 2; do
  cat >"$dir/nats$i.conf" <<CONF
listen: 127.0.0.1:$((base + 20 + i))
max_payload: 2MB
cluster {
  name: switchyard
  listen: 127.0.0.1:$((base + 30 + i))
  routes: [$routes]
}
CONF
  nats-server -c "$dir/nats$i.conf" >"$dir/nats$i.log" 2>&1 &
  pids+=($!)
  nats_urls+=("nats://127.0.0.1:$((base + 20 + i))")
done
for i in 0 1 2; do wait_port $((base + i)); wait_port $((base + 20 + i)); done

# The nodes: a, b, c on 7881..7883 (clients), each nearest to one NATS
# server (NATS_FIRST=same: all to the first) and listing every etcd member.
nodes=(a b c)
for i in 0 1 2; do
  args=(--listen "127.0.0.1:$((7881 + i))" --data-dir "$dir/node-${nodes[i]}"
        --http "127.0.0.1:$((base + 40 + i))" --cluster-node-id "${nodes[i]}")
  for e in "${etcd_endpoints[@]}"; do args+=(--cluster-etcd "$e"); done
  first=$([[ $nats_first == same ]] && echo 0 || echo "$i")
  for k in 0 1 2; do args+=(--cluster-nats "${nats_urls[(first + k) % 3]}"); done
  "$server" "${args[@]}" >"$dir/node-${nodes[i]}.log" 2>&1 &
  pids+=($!)
done
for i in 0 1 2; do wait_port $((7881 + i)); done

cat <<EOF2
Switchyard cluster running (data and logs in $dir):
  nodes       a 127.0.0.1:7881   b 127.0.0.1:7882   c 127.0.0.1:7883
  monitoring  http://127.0.0.1:$((base + 40))/  http://127.0.0.1:$((base + 41))/  http://127.0.0.1:$((base + 42))/
  etcd        ${etcd_endpoints[*]}
  NATS        ${nats_urls[*]}
Try: switchyard-cli --address 127.0.0.1:7881 cluster status   (the others: 7882, 7883)
Ctrl-C stops everything.
EOF2
wait -n "${pids[@]}" || true
echo "run-cluster: a process exited; stopping the others (logs in $dir)" >&2
tail -n 20 "$dir"/*.log >&2 || true
