#!/bin/sh
# Draws `switchyard-ws-bench storm --json` as one PNG: devices back per
# quarter second after their gateway was killed (with the 99% mark), and
# how many connection attempts each took.
#
#   bench/ws-bench.sh && tail -n 1 ws-bench.jsonl > storm.json
#   bench/plot-ws-storm.sh storm.json docs/img/ws-storm.png
set -eu
in=${1:?usage: plot-ws-storm.sh RESULT.json OUT.png}
out=${2:?usage: plot-ws-storm.sh RESULT.json OUT.png}
. "$(dirname "$0")/plot-deps.sh"
need_gnuplot_and_jq plot-ws-storm.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
jq -r '.bin_s as $b | .histogram | to_entries[] | "\(.key * $b) \(.value)"' "$in" >"$tmp/back.dat"
jq -r '.attempts_histogram | to_entries[] | select(.key > 0) | "\(.key) \(.value)"' "$in" >"$tmp/attempts.dat"
devices=$(jq -r '.devices' "$in")
t99=$(jq -r '.t99_s' "$in")
bin=$(jq -r '.bin_s' "$in")
att=$(jq -r '.attempts_mean' "$in")
gnuplot <<GP
set terminal pngcairo size 900, 640 font 'sans,10'
set output '$out'
set multiplot layout 2, 1 title "$devices WebSocket devices, their gateway killed (kill -9), another one up: 99% back at $t99 s, $att attempts each"
set style fill solid 0.6
set boxwidth 0.9 relative
set grid ytics
set yrange [0:*]
set xlabel 'seconds after the kill'
set ylabel 'devices welcomed again (routable)'
set arrow 1 from $t99, graph 0 to $t99, graph 1 nohead dashtype 2 linecolor rgb '#c0392b'
plot '$tmp/back.dat' using (\$1 + $bin / 2):2 with boxes linecolor rgb '#2c7fb8' notitle
unset arrow 1
set xlabel 'connection attempts it took (the first to the dead gateway, then the next one)'
set ylabel 'devices'
set xtics 1
plot '$tmp/attempts.dat' using 1:2 with boxes linecolor rgb '#41ab5d' notitle
unset multiplot
GP
echo "wrote $out"
