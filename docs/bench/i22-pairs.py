#!/usr/bin/env python3
"""i22-pairs.py RUNS.json PREFIX BIN,BIN…: the medians of alternating `orisun bench --only api --json`
runs of several binaries (docs/performance.md, "Carrying the event body as sent"). RUNS.json maps
each run's file name, PREFIX-BIN-N.json, to its report (docs/bench/i22-raw-pairs.json). Per row and
binary: the median ratio to raw_insert, events/s, the node's and the client's CPU microseconds per
event (cpu_s / events: what a loaded machine disturbs least), and the load averages."""
import json, statistics, sys

runs, prefix, bins = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3].split(",")
agg = {}
for b in bins:
    for name, d in sorted(runs.items()):
        if not name.startswith(f"{prefix}-{b}-"):
            continue
        for r in d["rows"]:
            agg.setdefault((r["name"], b), []).append((
                r["ratio"], r["events_per_s"], r["cpu_s"] / r["events"] * 1e6,
                r["client_cpu_s"] / r["events"] * 1e6, d["limits"][0]["events_per_s"],
                f'{d["load_start"][0]}→{d["load_end"][0]}'))
for (row, b), v in sorted(agg.items()):
    med = lambda i: statistics.median(x[i] for x in v)
    print(f"{row:30s} {b:4s} n={len(v)} ratio {med(0):.3f} ({', '.join('%.3f' % x[0] for x in v)})"
          f"  events/s {med(1):,.0f}  node µs/event {med(2):.1f} ({', '.join('%.1f' % x[2] for x in v)})"
          f"  client µs/event {med(3):.1f}  raw_insert {med(4):,.0f}  load {', '.join(x[5] for x in v)}")
