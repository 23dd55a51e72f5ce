#!/bin/sh
# Draws the reconnect-time histograms of `switchyard-bench reconnect --json`
# as one PNG: clients back per time bin after the disruption, one panel per
# phase (kill, drain), with the 99% mark.
#
#   switchyard-bench reconnect --json | tail -n 1 > storm.json
#   bench/plot-reconnect.sh storm.json docs/img/reconnect-storm.png
#
# Needs gnuplot and jq (Debian: gnuplot-nox, jq); installs them when run as
# root and they are missing.
set -eu
in=${1:?usage: plot-reconnect.sh RESULT.json OUT.png}
out=${2:?usage: plot-reconnect.sh RESULT.json OUT.png}
. "$(dirname "$0")/plot-deps.sh"
need_gnuplot_and_jq plot-reconnect.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
phases=$(jq -r '.phases[].phase' "$in")
[ -n "$phases" ] || { echo "plot-reconnect.sh: no phases in $in" >&2; exit 1; }
title=$(jq -r '"\(.clients) clients (\(.gateways) gateways), broker limited to \(.max_hellos_per_s) handshakes/s; best possible \(.theoretical_best_s) s"' "$in")
n=0
plots=""
for p in $phases; do
  jq -r --arg p "$p" '.phases[] | select(.phase == $p) | .bin_s as $b | .histogram | to_entries[] | "\(.key * $b) \(.value)"' "$in" >"$tmp/$p.dat"
  t99=$(jq -r --arg p "$p" '.phases[] | select(.phase == $p) | .t99_s' "$in")
  att=$(jq -r --arg p "$p" '.phases[] | select(.phase == $p) | .attempts_per_client' "$in")
  bin=$(jq -r --arg p "$p" '.phases[] | select(.phase == $p) | .bin_s' "$in")
  xmax=$(jq -r --arg p "$p" '.phases[] | select(.phase == $p) | .bin_s as $b | [(.histogram | length) * $b, (.t99_s // 0)] | max + $b' "$in")
  n=$((n + 1))
  plots="$plots
set title '$p: 99% back at $t99 s, $att attempts per client'
set xrange [0:$xmax]
set arrow 1 from $t99, graph 0 to $t99, graph 1 nohead dashtype 2 linecolor rgb '#c0392b'
plot '$tmp/$p.dat' using (\$1 + $bin / 2):2 with boxes fill solid 0.6 linecolor rgb '#2c7fb8' notitle"
done
gnuplot <<GP
set terminal pngcairo size 900, $((300 * n + 40)) font 'sans,10'
set output '$out'
set multiplot layout $n, 1 title "$title"
set xlabel 'seconds after the broker was killed / asked to drain'
set ylabel 'clients back'
set boxwidth 0.9 relative
set style fill solid 0.6
set grid ytics
set yrange [0:*]
$plots
unset multiplot
GP
echo "wrote $out"
