#!/usr/bin/env bash
# bench/ckpt_pytorch.sh — the checkpoint stall of a PyTorch program driven by
# the library (issue 10): a model of MIB MiB of float32 parameters plus its
# SGD momentum (bench/ckpt_pytorch_lib.py), checkpointed through the agents
# every INTERVAL steps, at world 1 and 2 (agents on 127.0.0.1, one worker
# each, one shared checkpoint dir).  Per rank and checkpoint, the stall is
# what staging cost the training thread (flatten, copy into the memfd, hash:
# the agent's `ckpt shard_written … stall_ms=`); the baseline, in the same
# run on the same file system, is torch.save of the same state with an fsync
# (the program's TORCHSAVE lines, before it joins).  Prints a table with the
# medians and the ratio, and the load average.
#
#   bench/ckpt_pytorch.sh [--mib 128] [--steps 12] [--interval 3] [--dir DIR] [--keep]
#
# Runs the project's interpreter (scripts/python.sh: the pinned torch).  Benchmarks
# report; they do not assert.
set -euo pipefail
cd "$(dirname "$0")/.."
MIB=128 STEPS=12 INTERVAL=3 DIR= KEEP=0
while [ $# -gt 0 ]; do
  case $1 in
    --mib) MIB=$2; shift ;;
    --steps) STEPS=$2; shift ;;
    --interval) INTERVAL=$2; shift ;;
    --dir) DIR=$2; shift ;;
    --keep) KEEP=1 ;;
    -h | --help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "ckpt_pytorch.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
BIN=${EA_BINDIR:-bin}/elastic-agent
. scripts/python.sh
PY=$EA_PYTHON
[ -x "$BIN" ] || { echo "ckpt_pytorch.sh: $BIN is not built (run make)" >&2; exit 1; }
"$PY" -c 'import torch, msgpack' 2>/dev/null || { echo "ckpt_pytorch.sh: $PY lacks torch or msgpack" >&2; exit 1; }
WORK=${DIR:-$(mktemp -d /tmp/ea-ckpt-pytorch.XXXXXX)}
mkdir -p "$WORK"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -KILL -- "-$p" 2>/dev/null || true; done
  [ "$KEEP" = 1 ] || [ -n "$DIR" ] || rm -rf "$WORK"
}
trap cleanup EXIT
load_start=$(cut -d' ' -f1-3 /proc/loadavg)

run_world() { # W → logs in $WORK/wW/
  local w=$1 d=$WORK/w$1 seed=
  mkdir -p "$d/ck"
  for i in $(seq 1 "$w"); do
    local saves=0 args=()
    [ "$i" = 1 ] && saves=3
    [ -n "$seed" ] && args=(--join "$seed")
    setsid "$BIN" run --name "n$i" --bind 127.0.0.1:0 --data-dir "$d/n$i" "${args[@]}" \
      --set compute.protocol=library --set compute.min_nodes="$w" --set compute.max_nodes="$w" \
      --set distributed.scale_up_delay_ms=300 --set checkpoint.dir="$d/ck" \
      --set checkpoint.save_interval_steps="$INTERVAL" --set logging.level=debug \
      --set observability.metrics_listen= \
      -- "$PY" "$PWD/bench/ckpt_pytorch_lib.py" --mib "$MIB" --steps "$STEPS" --saves "$saves" \
      --save-dir "$d" >"$d/n$i.log" 2>&1 </dev/null &
    PIDS+=($!)
    if [ -z "$seed" ]; then
      for _ in $(seq 1 200); do
        seed=$(grep -o 'gossip=[0-9.]*:[0-9]*' "$d/n1.log" 2>/dev/null | head -n1 | cut -d= -f2) || true
        [ -n "$seed" ] && break
        sleep 0.05
      done
      [ -n "$seed" ] || { echo "n1 did not start: $(tail -3 "$d/n1.log")" >&2; exit 1; }
    fi
  done
  local rc=0
  for p in "${PIDS[@]: -$w}"; do wait "$p" || rc=$?; done
  [ "$rc" = 0 ] || echo "world $w: an agent exited $rc (logs in $d)" >&2
}

echo "ckpt_pytorch: $MIB MiB of parameters (+ momentum), $STEPS steps, a checkpoint every $INTERVAL, in $WORK"
for w in 1 2; do run_world "$w"; done
"$PY" - "$WORK" "$MIB" "$load_start" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import glob, re, statistics, sys
work, mib, l0, l1 = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def med(v):
    return statistics.median(v) if v else float("nan")
print(f"load average at start: {l0}   at end: {l1}")
print(f"{'world':>5} {'ckpts':>5} {'state MiB':>9} {'stall/rank ms med (max)':>24} {'write ms med':>12} {'torch.save ms med':>17} {'stall/torch.save':>16}")
for wdir in sorted(glob.glob(work + "/w*")):
    w = int(wdir.rsplit("w", 1)[1])
    stalls, writes, saves, total, ckpts = [], [], [], 0, set()
    for f in glob.glob(wdir + "/n*.log"):
        for line in open(f, errors="replace"):
            m = re.search(r" ckpt shard_written (step-\d+\S*) shard=\d+/\d+ bytes=(\d+) write_ms=([\d.]+) stall_ms=([\d.]+)", line)
            if m:
                ckpts.add(m.group(1)); stalls.append(float(m.group(4))); writes.append(float(m.group(3)))
            m = re.search(r" ckpt committed \S+ bytes=(\d+)", line)
            if m:
                total = max(total, int(m.group(1)))
            m = re.search(r"TORCHSAVE bytes=(\d+) seconds=([\d.]+)", line)
            if m:
                saves.append(float(m.group(2)) * 1e3)
    ratio = med(stalls) / med(saves) if saves and stalls else float("nan")
    print(f"{w:>5} {len(ckpts):>5} {total / 2**20:>9.1f} {med(stalls):>15.1f} ({max(stalls) if stalls else float('nan'):.1f}) {med(writes):>12.1f} {med(saves):>17.1f} {ratio:>16.3f}")
PY
