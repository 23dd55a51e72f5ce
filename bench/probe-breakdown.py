#!/usr/bin/env python3
"""Where one message's microseconds go: the latency probe's marks as a table.

    bench/probe-breakdown.py DIR [--json]

DIR holds the probe-<pid>.txt files a run of a SWITCHYARD_LATENCY_PROBE
build wrote (SWITCHYARD_PROBE_DIR=DIR switchyard-bench latency ...: the
bench's file and its broker's). Marks join by key (the message's sequence
number); each step is the time between two consecutive points of the same
message, shown as median, p90, p99 and p99.9 over the messages that have
both marks. The points and what each step crosses are in
common/latency_probe.hpp and docs/benchmarks.md.
"""

import glob
import json
import os
import sys

POINTS = ["pub_call", "pub_written", "broker_read", "broker_parsed", "broker_queued", "broker_writing",
          "broker_written", "sub_read", "sub_handler"]
# What each step is: the thread or hand-off it crosses.
STEPS = [
    ("pub_call", "pub_written", "publisher thread: encode, send(2) (no hand-off)"),
    ("pub_written", "broker_read", "loopback, the broker's loop wakes (epoll), read(2)"),
    ("broker_read", "broker_parsed", "broker loop: verify and dispatch the frame"),
    ("broker_parsed", "broker_queued", "broker loop: fan-out to the subscriber's queue"),
    ("broker_queued", "broker_writing", "broker loop: the writer coroutine wakes (timer cancel, a posted turn), gathers"),
    ("broker_writing", "broker_written", "broker loop: send(2), its completion's posted turn"),
    ("broker_written", "sub_read", "loopback, the subscriber's loop wakes (epoll), read(2)"),
    ("sub_read", "sub_handler", "subscriber loop: parse and dispatch to the handler"),
]


def percentile(sorted_values, p):
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, int(p / 100.0 * len(sorted_values)))
    return sorted_values[i]


def load(folder):
    marks = {}  # key -> {point index: ns}
    files = glob.glob(os.path.join(folder, "probe-*.txt"))
    if not files:
        sys.exit(f"probe-breakdown: no probe-*.txt in {folder}")
    for path in files:
        with open(path) as f:
            for line in f:
                p, key, ns = line.split()
                marks.setdefault(int(key), {})[int(p)] = int(ns)
    return marks


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(sys.argv) >= 2 else 2
    marks = load(sys.argv[1])
    index = {name: i for i, name in enumerate(POINTS)}
    rows = []
    for a, b, what in STEPS + [("pub_call", "sub_handler", "end to end (publish call -> handler)")]:
        ia, ib = index[a], index[b]
        d = sorted((m[ib] - m[ia]) / 1000.0 for m in marks.values() if ia in m and ib in m)
        rows.append({"from": a, "to": b, "what": what, "n": len(d), "p50_us": percentile(d, 50),
                     "p90_us": percentile(d, 90), "p99_us": percentile(d, 99), "p999_us": percentile(d, 99.9)})
    if "--json" in sys.argv:
        print(json.dumps({"messages": len(marks), "steps": rows}))
        return 0
    print(f"{len(marks)} messages")
    print("| step | what | n | p50 us | p90 us | p99 us | p99.9 us |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['from']} -> {r['to']} | {r['what']} | {r['n']} | {r['p50_us']:.1f} | {r['p90_us']:.1f} | "
              f"{r['p99_us']:.1f} | {r['p999_us']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
