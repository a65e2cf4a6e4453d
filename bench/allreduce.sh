#!/usr/bin/env bash
# bench/allreduce.sh — allreduce bus bandwidth of our tcp ring
# (build/bench/allreduce) against torch.distributed gloo
# (bench/allreduce_gloo.py) and against the wire itself, all on loopback,
# float32 sum, W = 2 and 4 by default, sizes 1 KiB … 256 MiB, in the same run.
# The wire is measured two ways (build/bench/allreduce --stream, timed per op
# as the ring is):
#   stream  one TCP stream between two processes (one sender, one receiver);
#   links   W processes in a ring of plain TCP streams, each sending to its
#           right and receiving from its left at once — what each link of a
#           W-rank ring can carry when the W ranks share this machine's CPUs
#           (on a host with one rank per node, links ≈ stream).
# Prints one table with the ratios ours/gloo, ours/stream and ours/links per
# size, for bus bandwidth (wall clock), and CPU cost (gloo's CPU per op /
# ours: > 1 means we spend less).
#
#   bench/allreduce.sh                 # W = 2 4, 1K … 256M
#   WS="2" MIN=16M MAX=64M bench/allreduce.sh
#
# Wall-clock figures on a machine shared with other work swing with its
# load (the load average is printed before and after); the CPU column moves
# much less.  Benchmarks report, they do not assert.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
WS=${WS:-"2 4"}
MIN=${MIN:-1K}
MAX=${MAX:-256M}
. scripts/python.sh
PY=$EA_PYTHON

if [ ! -x "$BUILD/bench/allreduce" ] || [ bench/allreduce.c -nt "$BUILD/bench/allreduce" ]; then
  make -s -j2 "$BUILD/bench/allreduce" >/dev/null
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

have_gloo=1
"$PY" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null || have_gloo=0
[ $have_gloo = 1 ] || echo "note: torch with gloo not importable by $PY; reporting ours only" >&2

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"
"$BUILD/bench/allreduce" --stream -w 1 --min "$MIN" --max "$MAX" --json >"$tmp/stream.json"
for w in $WS; do
  "$BUILD/bench/allreduce" --stream -w "$w" --min "$MIN" --max "$MAX" --json >"$tmp/links_$w.json"
  "$BUILD/bench/allreduce" -w "$w" --min "$MIN" --max "$MAX" --json >"$tmp/ours_$w.json"
  if [ $have_gloo = 1 ]; then
    "$PY" bench/allreduce_gloo.py -w "$w" --min "$MIN" --max "$MAX" >"$tmp/gloo_$w.json"
  fi
done
echo "load after:  $(cut -d' ' -f1-3 /proc/loadavg)"

"$PY" - "$tmp" $WS <<'PYEOF'
import json, os, sys
tmp, ws = sys.argv[1], sys.argv[2:]
def load(name):
    p = os.path.join(tmp, name)
    return {r["bytes"]: r for r in json.load(open(p))["results"]} if os.path.exists(p) else {}
def size(b):
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= k:
            return f"{b / k:g} {unit}"
    return f"{b} B"
stream = load("stream.json")
def ratio(x, y):
    return f"{x / y:6.2f}" if y else f"{'-':>6}"
def col(r, key="busbw_gbps"):
    return f"{r[key]:7.3f}" if r else f"{'-':>7}"
print()
print("allreduce float32 sum on loopback: bus bandwidth GB/s (median), CPU µs per op (all ranks)")
print("stream: one TCP stream; links: a ring of W plain TCP streams (see the head of this script)")
print(f"{'W':>2} {'size':>9} | {'ours':>7} {'gloo':>7} {'stream':>7} {'links':>7} | "
      f"{'/gloo':>6} {'/stream':>7} {'/links':>6} | {'ours cpu':>9} {'gloo cpu':>9} {'gloo/ours':>9}")
for w in ws:
    ours, gloo, links = load(f"ours_{w}.json"), load(f"gloo_{w}.json"), load(f"links_{w}.json")
    for b in sorted(ours):
        o, g, s1, l = ours[b], gloo.get(b), stream.get(b), links.get(b)
        bw = o["busbw_gbps"]
        gcpu = f"{g['cpu_us']:9.0f}" if g else f"{'-':>9}"
        gr = ratio(g["cpu_us"], o["cpu_us"]) if g else "-"
        print(f"{w:>2} {size(b):>9} | {bw:7.3f} {col(g)} {col(s1)} {col(l)} | "
              f"{ratio(bw, g and g['busbw_gbps'])} {ratio(bw, s1 and s1['busbw_gbps']):>7} "
              f"{ratio(bw, l and l['busbw_gbps'])} | {o['cpu_us']:9.0f} {gcpu} {gr:>9}")
PYEOF
