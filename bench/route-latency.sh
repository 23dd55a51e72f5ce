#!/bin/sh
# Measures send-to-user latency at fixed offered rates for several broker
# settings, alternating the settings at each rate and repeating the sweep,
# and writes the bench's JSON lines with a "label" field per setting (for
# bench/plot-route-latency.sh).
#
#   bench/route-latency.sh OUT.jsonl [REPS] [RATES]
#
# REPS: sweeps (default 3); RATES: offered sends per second (default
# "20000 50000 100000 150000 200000"; on a 2-core machine 200,000/s paced
# already fills both cores). Each run sends rate * 3 messages
# (three seconds) to 100,000 users on 200 gateways, fire and forget, with
# `switchyard-bench route --rate`. The settings compared: the broker's
# write coalescing by default and off (--write-coalesce-turns 0). BENCH
# (default build/release/bench/switchyard-bench) starts its own broker for
# each run.
set -eu
usage='usage: route-latency.sh OUT.jsonl [REPS] [RATES]'
case ${1:-} in -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; echo "$usage"; exit 0 ;; esac
out=${1:?$usage}
reps=${2:-3}
rates=${3:-"20000 50000 100000 150000 200000"}
bench=${BENCH:-build/release/bench/switchyard-bench}
[ -x "$bench" ] || { echo "route-latency.sh: no switchyard-bench at $bench (build build/release, or set BENCH)" >&2; exit 2; }
command -v jq >/dev/null 2>&1 || { echo "route-latency.sh: needs jq (apt-get install jq)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
server=$(dirname "$(dirname "$(readlink -f "$bench")")")/broker/switchyard-server
printf '#!/bin/sh\nexec %s --write-coalesce-turns 0 "$@"\n' "$server" > "$tmp/off"
chmod +x "$tmp/off"
: > "$out"
for rep in $(seq "$reps"); do
  for rate in $rates; do
    for setting in on off; do
      if [ "$setting" = on ]; then label="coalescing (default)"; binary=$server; else label="coalescing off"; binary=$tmp/off; fi
      if ! line=$("$bench" --server "$binary" --json route --rate "$rate" --count $((rate * 3)) --window 0 2>"$tmp/err" |
        tail -n 1) || [ -z "$line" ]; then
        echo "route-latency.sh: the run at $rate/s ($label) failed:" >&2
        cat "$tmp/err" >&2
        exit 1
      fi
      printf '%s\n' "$line" | jq -c --arg l "$label" --argjson rep "$rep" '. + {label: $l, rep: $rep}' >> "$out"
      [ -t 2 ] && printf '\rroute-latency: rep %s/%s, %s/s, %s   ' "$rep" "$reps" "$rate" "$label" >&2
    done
  done
done
[ -t 2 ] && printf '\r\033[K' >&2
echo "wrote $out"
