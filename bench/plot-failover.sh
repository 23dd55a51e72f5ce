#!/bin/sh
# Draws the failover histograms of switchyard-failover --out as one PNG:
# users routable again per 100 ms bin after the node's kill -9, one panel
# per run, with the 99% mark.
#
#   switchyard-failover --lease-ttl 5 --out ttl5.txt
#   bench/plot-failover.sh docs/img/failover.png "node lease TTL 5 s=ttl5.txt" "TTL 2 s=ttl2.txt"
#
# Each run is "TITLE=FILE", FILE one time per line (ms after the kill).
# Needs gnuplot and jq (Debian: gnuplot-nox, jq); installs them when run as
# root and they are missing.
set -eu
out=${1:?usage: plot-failover.sh OUT.png "TITLE=TIMES" ...}
shift
[ $# -gt 0 ] || { echo "usage: plot-failover.sh OUT.png \"TITLE=TIMES\" ..." >&2; exit 1; }
. "$(dirname "$0")/plot-deps.sh"
need_gnuplot_and_jq plot-failover.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
plots=""
for run in "$@"; do
  case $run in
    *=*) ;;
    *) echo "plot-failover.sh: '$run' is not TITLE=FILE" >&2; exit 1 ;;
  esac
  title=${run%%=*}
  file=${run#*=}
  [ -r "$file" ] || { echo "plot-failover.sh: cannot read $file" >&2; exit 1; }
  [ -s "$file" ] || { echo "plot-failover.sh: $file is empty" >&2; exit 1; }
  if grep -qv '^[0-9][0-9]*\(\.[0-9]*\)\{0,1\}$' "$file"; then
    echo "plot-failover.sh: $file is not one time (ms) per line" >&2
    exit 1
  fi
  n=$((n + 1))
  sort -n "$file" >"$tmp/$n.sorted"
  count=$(wc -l <"$tmp/$n.sorted")
  # Nearest rank, as switchyard-failover computes it.
  p99=$(awk -v c="$count" 'BEGIN { r = int(0.99 * c + 0.5); if (r < 1) r = 1 } NR == r { printf "%.2f", $1 / 1000 }' "$tmp/$n.sorted")
  p50=$(awk -v c="$count" 'BEGIN { r = int(0.5 * c + 0.5); if (r < 1) r = 1 } NR == r { printf "%.2f", $1 / 1000 }' "$tmp/$n.sorted")
  awk '{ b = int($1 / 100); h[b]++; if (b > m) m = b } END { for (i = 0; i <= m; i++) printf "%.1f %d\n", i / 10, h[i] + 0 }' \
    "$tmp/$n.sorted" >"$tmp/$n.dat"
  plots="$plots
set title '$title: $count users probed; half routable at $p50 s, 99% at $p99 s'
set arrow 1 from $p99, graph 0 to $p99, graph 1 nohead dashtype 2 linecolor rgb '#c0392b'
plot '$tmp/$n.dat' using (\$1 + 0.05):2 with boxes fill solid 0.6 linecolor rgb '#2c7fb8' notitle"
done
gnuplot <<GP
set terminal pngcairo size 900, $((280 * n + 40)) font 'sans,10'
set output '$out'
set multiplot layout $n, 1 title "kill -9 of one of three nodes: its gateways' users routable again (200 gateways, 100,000 users)"
set xlabel 'seconds after the kill'
set ylabel 'users routable again'
set boxwidth 0.09
set style fill solid 0.6
set grid ytics
set xrange [0:*]
set yrange [0:*]
$plots
unset multiplot
GP
echo "wrote $out"
