#!/usr/bin/env bash
# bench/allreduce.sh — allreduce bus bandwidth of our tcp ring
# (build/bench/allreduce) against torch.distributed gloo
# (bench/allreduce_gloo.py), both on loopback, float32 sum, W = 2 and 4 by
# default, sizes 1 KiB … 256 MiB, in the same run.  Prints one table with
# the ratio ours/gloo per size, for bus bandwidth (wall clock) and for CPU
# cost (gloo's CPU per op / ours: > 1 means we spend less).
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
PY=${PY:-/usr/bin/python3}

if [ ! -x "$BUILD/bench/allreduce" ] || [ bench/allreduce.c -nt "$BUILD/bench/allreduce" ]; then
  make -s -j2 "$BUILD/bench/allreduce" >/dev/null
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

have_gloo=1
"$PY" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null || have_gloo=0
[ $have_gloo = 1 ] || echo "note: torch with gloo not importable by $PY; reporting ours only" >&2

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"
for w in $WS; do
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
print()
print("allreduce float32 sum on loopback: bus bandwidth GB/s (median), CPU µs per op (all ranks)")
print(f"{'W':>2} {'size':>9} | {'ours':>7} {'gloo':>7} {'ratio':>6} | {'ours cpu':>9} {'gloo cpu':>9} {'gloo/ours':>9}")
for w in ws:
    ours, gloo = load(f"ours_{w}.json"), load(f"gloo_{w}.json")
    for b in sorted(ours):
        o, g = ours[b], gloo.get(b)
        if g:
            print(f"{w:>2} {size(b):>9} | {o['busbw_gbps']:7.3f} {g['busbw_gbps']:7.3f} "
                  f"{o['busbw_gbps'] / g['busbw_gbps']:6.2f} | {o['cpu_us']:9.0f} {g['cpu_us']:9.0f} "
                  f"{g['cpu_us'] / o['cpu_us']:9.2f}")
        else:
            print(f"{w:>2} {size(b):>9} | {o['busbw_gbps']:7.3f} {'-':>7} {'-':>6} | {o['cpu_us']:9.0f}")
PYEOF
