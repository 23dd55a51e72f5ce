#!/usr/bin/env bash
# The WebSocket gateway's load and reconnect-storm measurements
# (docs/benchmarks.md, "The WebSocket gateway"): a broker and two gateways
# on loopback, then switchyard-ws-bench load and storm. Results as JSON
# lines in OUT (default ws-bench.jsonl); BUILD is the build folder.
#
#   bench/ws-bench.sh [DEVICES] [RATE]       # defaults 10000, 20000
#   TLS=1 bench/ws-bench.sh                  # the devices over wss:// (a test CA made here)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD:-$repo/build/release}
devices=${1:-10000}
rate=${2:-20000}
out=${OUT:-ws-bench.jsonl}
dir=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
head -c 32 /dev/urandom | base64 > "$dir/secret"
"$build/broker/switchyard-server" --listen 127.0.0.1:0 --port-file "$dir/broker.port" --data-dir "$dir/data" \
  --max-connections 100000 --log-level warn &
pids+=($!)
for _ in $(seq 100); do [[ -s $dir/broker.port ]] && break; sleep 0.1; done
broker=127.0.0.1:$(cat "$dir/broker.port")
tls_args=() bench_tls=() scheme=ws
if [[ ${TLS:-0} == 1 ]]; then
  ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
  openssl req -x509 "${ec[@]}" -days 2 -subj /CN=bench-ca -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null
  openssl req "${ec[@]}" -subj /CN=gateway -keyout "$dir/gw.key" -out "$dir/gw.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1\n' > "$dir/gw.ext"
  openssl x509 -req -days 2 -in "$dir/gw.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -set_serial 1 \
    -extfile "$dir/gw.ext" -out "$dir/gw.pem" 2>/dev/null
  tls_args=(--tls-cert "$dir/gw.pem" --tls-key "$dir/gw.key") bench_tls=(--ca "$dir/ca.pem") scheme=wss
fi
gateway() {  # NAME: starts a gateway, echoes its pid; its port in $dir/NAME.port
  "$build/gateway/switchyard-gateway" --broker "$broker" --listen 127.0.0.1:0 --port-file "$dir/$1.port" \
    --jwt-secret-file "$dir/secret" --inbox-id "$1" --max-sockets 100000 --hello-timeout-ms 60000 \
    "${tls_args[@]}" --log-level warn >/dev/null 2>&1 &
  echo $!
}
url() { echo "$scheme://127.0.0.1:$(cat "$dir/$1.port")/ws"; }
wait_port() { for _ in $(seq 200); do [[ -s $dir/$1.port ]] && return; sleep 0.1; done; }

a=$(gateway gw-a); pids+=("$a"); wait_port gw-a
echo "load: $devices devices ($scheme://), $rate sends/s (load average before: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
"$build/bench/switchyard-ws-bench" load --gateway "$(url gw-a)" --broker "$broker" --secret "$dir/secret" \
  "${bench_tls[@]}" --gateway-pid "$a" --devices "$devices" --rate "$rate" --seconds 10 --json | tee -a "$out"
kill "$a"; wait "$a" 2>/dev/null || true

a=$(gateway gw-a2); pids+=("$a"); wait_port gw-a2
b=$(gateway gw-b); pids+=("$b"); wait_port gw-b
echo "storm: $devices devices on gw-a2, killed; gw-b takes them" >&2
"$build/bench/switchyard-ws-bench" storm --gateway "$(url gw-a2)" --gateway "$(url gw-b)" --broker "$broker" \
  --secret "$dir/secret" "${bench_tls[@]}" --gateway-pid "$a" --devices "$devices" --json | tee -a "$out"
