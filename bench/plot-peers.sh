#!/bin/sh
# Draws the results of the peers comparison harness (Switchyard's rows from
# switchyard-bench, the others from nats-server, Redis and Mosquitto) as one
# PNG of grouped bars, one bar per broker and the median over the reps:
#   - messages per second: fan-out per subscriber count and send-to-user
#     (delivered/s), durable appends (acknowledged/s);
#   - CPU microseconds (client + broker) per message, per workload;
#   - one-way latency percentiles at the harness's fixed rate.
# Workloads and brokers missing from the file are left out; a panel with no
# data is not drawn. Skipped and failed runs, and medians of 0 (which a log
# scale cannot show), are not plotted.
#
#   SWITCHYARD_BENCH=$PWD/build/release/bench/switchyard-bench REPS=3 <peers>/run results.jsonl
#   bench/plot-peers.sh results.jsonl docs/img/peers.png
#
# The title carries the date (YYYY-MM-DD from the file's name, else its
# modification date; PLOT_DATE overrides) and a machine note (PLOT_NOTE,
# default "2 cores, loopback"). Writes OUT.png over any earlier one.
#
# Needs gnuplot and jq (Debian: gnuplot-nox, jq); installs them when run as
# root and they are missing.
set -eu
usage='usage: plot-peers.sh RESULTS.jsonl OUT.png'
in=${1:?$usage}
out=${2:?$usage}
. "$(dirname "$0")/plot-deps.sh"
need_gnuplot_and_jq plot-peers.sh
die() { echo "plot-peers.sh: $*" >&2; exit 1; }
if [ ! -f "$in" ] || [ ! -r "$in" ]; then die "cannot read $in (no such file, or not a readable file)"; fi
[ -s "$in" ] || die "$in is empty: expected the JSON lines the peers harness writes"
jq -e -n '[inputs] | length >= 0' "$in" >/dev/null 2>&1 || die "$in is not JSON lines"

# The result rows (measured runs, not meta, disk-probe, skipped or failed
# lines), the panels and their groups, one place for every query below.
JQ_LIB='
def median: map(select(type == "number")) | sort
  | if length == 0 then null elif length % 2 == 1 then .[length / 2 | floor]
    else (.[length / 2 - 1] + .[length / 2]) / 2 end;
def rows: map(select(type == "object" and (.workload | IN("fanout", "latency", "durable", "route"))
  and .broker != null and .skipped == null and .error == null));
def border: {"switchyard": 0, "switchyard-tls": 1, "nats": 2, "nats-tls": 3, "redis": 4, "redis-always": 5,
  "mqtt": 6, "floor": 7}[.] // 9;
def fanouts($m): map(select(.workload == "fanout") | .subs) | unique | map(select(. != null))
  | .[] | {w: "fanout", subs: ., m: $m, label: "fan-out 1:\(.)"};
def groups($panel): rows as $r
  | if $panel == "rate" then
      [ ($r | fanouts("delivered_rate")),
        {w: "route", m: "delivered_rate", label: "send-to-user"},
        {w: "durable", m: "acked_rate", label: "durable append (acked/s)"} ]
    elif $panel == "cpu" then
      [ ($r | fanouts("cpu_us_per_msg")),
        {w: "route", m: "cpu_us_per_msg", label: "send-to-user"},
        {w: "durable", m: "cpu_us_per_msg", label: "durable append (per ack)"},
        {w: "latency", m: "cpu_us_per_msg", label: "latency run (fixed rate)"} ]
    else
      [ {w: "latency", m: "p50_us", label: "p50"}, {w: "latency", m: "p90_us", label: "p90"},
        {w: "latency", m: "p99_us", label: "p99"}, {w: "latency", m: "p999_us", label: "p99.9"} ]
    end;
# [{label, values: {broker: median}}] of the groups that have data
def cells($panel): rows as $r
  | [ groups($panel)[] as $g
      | {label: $g.label, values: ($r | map(select(.workload == $g.w and ($g.subs == null or .subs == $g.subs)))
          | group_by(.broker) | map({key: .[0].broker, value: (map(.[$g.m]) | median)})
          | map(select(.value != null and .value > 0)) | from_entries)}
      | select(.values != {}) ];
def brokers($panel): [ cells($panel)[].values | keys[] ] | unique | sort_by(border);
def fmt: if . >= 1e6 then "\((. / 1e4 | round) / 100)M" elif . >= 1e4 then "\(. / 1e3 | round)k"
  elif . >= 1e3 then "\((. / 1e2 | round) / 10)k" elif . >= 100 then "\(round)"
  elif . >= 10 then "\((. * 10 | round) / 10)" else "\((. * 100 | round) / 100)" end;
'
q() { jq -r -s --arg panel "${panel:-}" "$JQ_LIB$1" "$in"; }

[ "$(q 'rows | length')" -gt 0 ] \
  || die "no results in $in: no fanout, latency, durable or route line that ran (is it the peers harness output?)"

date=${PLOT_DATE:-$(basename "$in" | grep -o '[0-9]\{4\}-[0-9]\{2\}-[0-9]\{2\}' | head -n 1 || true)}
[ -n "$date" ] || date=$(date -u -r "$in" +%F)
note=${PLOT_NOTE:-2 cores, loopback}
reps=$(q 'rows | map(.rep) | map(select(. != null)) | unique | length')
size=$(q 'rows | map(.size) | map(select(. != null)) | unique | map(tostring) | join("/")')
rate=$(q 'rows | map(select(.workload == "latency") | .rate) | map(select(. != null)) | first // "the fixed"')
title="Switchyard and its peers, $date ($note): medians of ${reps:-?} rep(s)${size:+, $size B messages}\\nThis VM varies 1.5-2x between runs: compare bars within this chart, not with other runs"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
colour() {
  case $1 in
    switchyard) echo '#2c7fb8' ;; switchyard-tls) echo '#85c1e9' ;; nats) echo '#27ae60' ;;
    nats-tls) echo '#82e0aa' ;; redis) echo '#c0392b' ;;
    redis-always) echo '#e67e22' ;; mqtt) echo '#8e44ad' ;; floor) echo '#7f8c8d' ;; *) echo '#34495e' ;;
  esac
}
legend() {
  case $1 in
    switchyard) echo 'Switchyard' ;; switchyard-tls) echo 'Switchyard over TLS' ;; nats) echo 'NATS (nats-server)' ;;
    nats-tls) echo 'NATS over TLS' ;; redis) echo 'Redis' ;;
    redis-always) echo 'Redis (fsync always)' ;; mqtt) echo 'MQTT (Mosquitto)' ;;
    floor) echo 'floor (no broker)' ;; *) echo "$1" ;;
  esac
}

n=0
plots=""
for panel in rate cpu latency; do
  [ "$(q 'cells($panel) | length')" -gt 0 ] || continue
  n=$((n + 1))
  # one line per bar: x, value, x low, x high, label, broker; bars of a
  # group side by side around the group's index, 0.8 wide in all
  q 'brokers($panel) as $b | ($b | length) as $nb | (0.8 / $nb) as $w
     | cells($panel) | to_entries[] | .key as $gi | .value.values as $v
     | $b | to_entries[] | select($v[.value] != null)
     | ($gi + (.key - ($nb - 1) / 2) * $w) as $x
     | "\($x)\t\($v[.value])\t\($x - $w / 2 * 0.92)\t\($x + $w / 2 * 0.92)\t\($v[.value] | fmt)\t\(.value)"' \
    >"$tmp/$panel.dat"
  xtics=$(q 'cells($panel) | to_entries | map("\"\(.value.label)\" \(.key)") | join(", ")')
  # at least three groups wide, so one or two groups do not get giant bars
  xrange=$(q 'cells($panel) | length as $n | ((([$n, 3] | max) - $n) / 2) as $pad | "\(-0.5 - $pad):\($n - 0.5 + $pad)"')
  # log scale from the decade below the smallest value to room above the largest for labels
  yrange=$(q '[cells($panel)[].values[]] | "\(pow(10; (min | log10 | floor))):\(max * 4)"')
  ybase=${yrange%%:*}
  case $panel in
    rate)
      ptitle='Throughput: messages delivered per second (durable: appends acknowledged per second); higher is better'
      ylabel='messages/s (log scale)'; yformat='%.0s%c' ;;
    cpu)
      ptitle='CPU cost: client + broker CPU-microseconds per delivered (durable: acknowledged) message; lower is better'
      ylabel='CPU µs per message (log scale)'; yformat='%g' ;;
    latency)
      ptitle="One-way latency at $rate msg/s, publish call to receive; median over reps of each percentile; lower is better"
      ylabel='µs (log scale)'; yformat='%g' ;;
  esac
  bars=""
  for b in $(q 'brokers($panel)[]'); do
    bars="$bars${bars:+, }'$tmp/$panel.dat' using (strcol(6) eq '$b' ? \$1 : NaN):2:3:4:($ybase):2 with boxxyerror fill solid 0.75 noborder linecolor rgb '$(colour "$b")' title '$(legend "$b")'"
  done
  plots="$plots
set title '$ptitle'
set ylabel '$ylabel'
set format y '$yformat'
set xrange [$xrange]
set yrange [$yrange]
set xtics ($xtics)
plot $bars, '$tmp/$panel.dat' using 1:(\$2 * 1.12):5 with labels font 'sans,8' offset 0,0.2 notitle"
done
[ "$n" -gt 0 ] || die "no plottable figures in $in"

mkdir -p "$(dirname "$out")"
gnuplot <<GP
set encoding utf8
set terminal pngcairo size 1400, $((400 * n + 70)) font 'sans,10'
set output '$out'
set datafile separator '\t'
set multiplot layout $n, 1 title "$title" font 'sans,11'
set logscale y
set grid ytics
set xtics nomirror scale 0
set key below horizontal Left reverse samplen 1.5 width 2 font 'sans,9'
set lmargin 11
set rmargin 3
$plots
unset multiplot
GP
echo "wrote $out"
