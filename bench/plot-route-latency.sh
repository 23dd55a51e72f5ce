#!/bin/sh
# Draws send-to-user latency against the offered rate from
# `switchyard-bench route --rate R --json` lines, one line per broker
# setting: p50 and p99 (medians over the runs of each setting and rate) on
# a log scale. Each JSON line needs a "label" field naming the setting
# (bench/route-latency.sh adds it).
#
#   bench/route-latency.sh results.jsonl       # measure (see its header)
#   bench/plot-route-latency.sh results.jsonl docs/img/route-latency.png
#
# Needs gnuplot and jq (Debian: gnuplot-nox, jq); installs them when run as
# root and they are missing. Writes OUT.png over any earlier one.
set -eu
usage='usage: plot-route-latency.sh RESULTS.jsonl OUT.png'
case ${1:-} in -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; echo "$usage"; exit 0 ;; esac
if [ $# -ne 2 ]; then
  echo "$usage" >&2
  exit 2
fi
in=$1
out=$2
[ -r "$in" ] || { echo "plot-route-latency.sh: cannot read $in" >&2; exit 1; }
[ -s "$in" ] || { echo "plot-route-latency.sh: $in is empty" >&2; exit 1; }
. "$(dirname "$0")/plot-deps.sh"
need_gnuplot_and_jq plot-route-latency.sh
jq -e . "$in" >/dev/null 2>&1 || { echo "plot-route-latency.sh: $in is not JSON lines" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# One data file per label: rate (k/s), median p50, median p99 (µs).
jq -rs '
  def median: sort | if length == 0 then null elif length % 2 == 1 then .[length / 2 | floor]
                     else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  map(select(.workload == "route" and .label != null and .rate != null and .p50_us != null))
  | group_by(.label)[]
  | (.[0].label) as $l
  | group_by(.rate)[]
  | "\($l)\t\(.[0].rate / 1000)\t\(map(.p50_us) | median)\t\(map(.p99_us) | median)"
' "$in" > "$tmp/all.tsv"
[ -s "$tmp/all.tsv" ] || { echo "plot-route-latency.sh: no route --rate lines with a label in $in" >&2; exit 1; }
plot=""
i=0
cut -f1 "$tmp/all.tsv" | uniq > "$tmp/labels"
while IFS= read -r label; do
  i=$((i + 1))
  awk -F '\t' -v l="$label" '$1 == l { print $2, $3, $4 }' "$tmp/all.tsv" | sort -n > "$tmp/$i.dat"
  plot="$plot '$tmp/$i.dat' using 1:2 with linespoints lw 2 lc $i dt 1 title '$label: p50',"
  plot="$plot '$tmp/$i.dat' using 1:3 with linespoints lw 2 lc $i dt 2 title '$label: p99',"
done < "$tmp/labels"
gnuplot <<GP
set terminal pngcairo size 900,520 font ',10'
set output '$out'
set title 'Send-to-user latency (send -> gateway inbox) by offered rate; 200 gateways, 100,000 users, 128 B; medians'
set xlabel 'offered sends per second (thousands)'
set ylabel 'microseconds (log scale)'
set logscale y
set grid
set key top left
plot ${plot%,}
GP
echo "wrote $out"
