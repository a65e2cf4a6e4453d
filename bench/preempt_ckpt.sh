#!/usr/bin/env bash
# Notice → checkpoint committed: the checkpoint before a mass preemption
# (issue 30, docs/operations.md "A checkpoint before a mass preemption"),
# for a library-mode program (bench/preempt_ckpt.py: DDP on gloo) whose
# state is STATE MiB (parameters + momentum).
#
# Each repeat: two agents on 127.0.0.1, compute.min_nodes 2, periodic
# checkpoints every 100000 steps (none during the run: the figure is the
# preemption checkpoint's alone), each polling its own fake metadata URL
# (tests/e2e/http_receiver.py /going/NAME).  Once both train, the notice is
# raised for n2: without it fewer than min_nodes remain, so the controller
# commits a checkpoint of the current step before n2 leaves.  Per repeat:
#   notice→commit  n2's `notice preemption notice` line to the controller's
#                  `preempt checkpoint … committed` line (the figure; goal
#                  ≤ 5 s for 256 MiB)
#   raise→commit   from the moment the fake service answers (the agents
#                  poll every 2 s, on the wall clock's multiples of 2 s)
#   write          the slowest shard's write (hash + io_uring + fsync)
#   step           the step time just before the notice (the checkpoint is
#                  taken at a step ≥ 2 ahead: ~300 ms of steps, at least 2)
#   torch.save     baseline, same run: rank 0 saving the same state
#                  synchronously with torch.save + fsync, as a program that
#                  saves its own on SIGTERM would
# Prints the median of each and the load average at start and end.
#
#   bench/preempt_ckpt.sh [--quick] [--repeats N] [--mib STATE_MiB] [--keep]
# Defaults: 5 repeats, STATE 256 (--quick: 2 repeats).  Needs torch in the
# project's virtualenv (scripts/python.sh).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
REPEATS=5 STATE=256 KEEP=
while [ $# -gt 0 ]; do
  case $1 in
    --quick) REPEATS=2 ;;
    --repeats) REPEATS=$2; shift ;;
    --mib) STATE=$2; shift ;;
    --keep) KEEP=1 ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "bench/preempt_ckpt.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
. scripts/python.sh
PY=$EA_PYTHON
EA_BIN=$PWD/${EA_BINDIR:-bin}/elastic-agent
[ -x "$EA_BIN" ] || { echo "$EA_BIN is not built (make)" >&2; exit 3; }
"$PY" -c 'import torch, msgpack' 2>/dev/null || { echo "$PY lacks torch or msgpack" >&2; exit 3; }
WORK=$(mktemp -d /tmp/ea-preempt-bench.XXXXXX)
PGIDS=()
cleanup() {
  local p
  for p in "${PGIDS[@]}"; do kill -KILL -- "-$p" 2>/dev/null; done
  for p in "${PGIDS[@]}"; do wait "$p" 2>/dev/null; done
  if [ -n "$KEEP" ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
now_ms() { date +%s%3N; }
wait_for() { # TIMEOUT_S CMD…
  local deadline=$(($(now_ms) + $1 * 1000))
  shift
  until "$@" >/dev/null 2>&1; do
    (($(now_ms) >= deadline)) && return 1
    sleep 0.1
  done
}
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

setsid "$PY" tests/e2e/http_receiver.py "$WORK" >"$WORK/recv.log" 2>&1 </dev/null &
PGIDS+=($!)
wait_for 10 test -s "$WORK/port" || { echo "the fake metadata service did not start" >&2; exit 1; }
URL=http://127.0.0.1:$(cat "$WORK/port")

# torch.save baseline: rank 0 of the first repeat's state, once per repeat.
"$PY" - "$((STATE / 2))" "$WORK" "$REPEATS" >"$WORK/torchsave.log" 2>&1 <<'PY' &
import os, sys, time, torch
mib, d, n_rep = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
n = int(((mib << 20) / 8) ** 0.5)
model = torch.nn.Sequential(torch.nn.Linear(n, n, bias=False), torch.nn.Linear(n, n, bias=False))
opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
model(torch.randn(2, n)).pow(2).mean().backward(); opt.step()
for i in range(n_rep):
    path = os.path.join(d, "torch-save.pt")
    t0 = time.monotonic()
    with open(path, "wb") as f:
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, f)
        f.flush(); os.fsync(f.fileno())
    print(f"TORCHSAVE bytes={os.path.getsize(path)} seconds={time.monotonic() - t0:.4f}", flush=True)
    os.unlink(path)
PY
wait $!

run_one() {
  local i=$1 d=$WORK/r$1 seed="" n
  mkdir -p "$d/ckpt"
  local JOB=(--set compute.protocol=library --set compute.min_nodes=2
    --set distributed.scale_up_delay_ms=300 --set checkpoint.dir="$d/ckpt"
    --set checkpoint.save_interval_steps=100000 --set runtime.preemption_grace_seconds=60
    --set runtime.rendezvous_timeout_seconds=90 --set distributed.communication_timeout_seconds=120
    --set runtime.preemption_metadata_url="$URL" --set observability.metrics_listen=
    --set experiment.name=preempt-bench)
  for n in n1 n2; do
    local join=()
    [ -n "$seed" ] && join=(--join "$seed")
    PYTHONPATH=$PWD/python setsid "$EA_BIN" run --name "$n" --bind 127.0.0.1:0 --data-dir "$d/$n" \
      "${join[@]}" "${JOB[@]}" --set runtime.preemption_notice="$URL/going/r$i-$n" \
      -- "$PY" "$PWD/bench/preempt_ckpt.py" --mib "$((STATE / 2))" >"$d/$n.log" 2>&1 </dev/null &
    PGIDS+=($!)
    if [ -z "$seed" ]; then
      wait_for 10 grep -q ' listen .*gossip=' "$d/n1.log" || { echo "n1 did not start" >&2; return 1; }
      seed=$(grep -o 'gossip=[0-9.]*:[0-9]*' "$d/n1.log" | head -n1 | cut -d= -f2)
    fi
  done
  trained() { [ "$(grep -h -c 'train rank=[01] world=2 step=' "$d/n1.log" "$d/n2.log" | paste -sd+ | bc)" -ge 8 ]; }
  wait_for 240 trained || { echo "repeat $i: the job did not train at world 2 (logs in $d)" >&2; return 1; }
  # The notice lands on the next 2 s multiple of the wall clock (the poll).
  date +%s%3N >"$d/raised"
  touch "$WORK/going-r$i-n2"
  done_() { grep -hq ' preempt checkpoint step-[0-9.gen-]* committed \| alert checkpoint before a mass preemption: step' "$d/n1.log" "$d/n2.log"; }
  wait_for 120 done_ || { echo "repeat $i: no preemption checkpoint (logs in $d)" >&2; return 1; }
  sleep 0.5 # the drained agent's last lines
  # The workers run in process groups of their own: their pids from the
  # agents' status, then every group by id.
  local w mine=("${PGIDS[@]: -2}")
  for n in n1 n2; do
    for w in $("$EA_BIN" status --data-dir "$d/$n" --json 2>/dev/null |
      "$PY" -c 'import json,sys; print(" ".join(str(w["pid"]) for w in json.load(sys.stdin)["workers"] if w["pid"]))' 2>/dev/null); do
      PGIDS+=("$w")
      kill -KILL -- "-$w" 2>/dev/null
    done
  done
  for p in "${mine[@]}"; do kill -KILL -- "-$p" 2>/dev/null; done
  for p in "${mine[@]}"; do wait "$p" 2>/dev/null; done
}

echo "preempt_ckpt: $STATE MiB state (library mode, DDP/gloo, 2 agents, min_nodes 2), $REPEATS repeats, in $WORK"
for i in $(seq 1 "$REPEATS"); do run_one "$i" || true; done
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
"$PY" - "$WORK" "$REPEATS" "$STATE" "$LOAD_START" "$LOAD_END" <<'PY'
import datetime, glob, os, re, statistics, sys
work, reps, state, l0, l1 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
def ts(line):
    return datetime.datetime.strptime(line.split()[0], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()
def med(v):
    return statistics.median(v) if v else float("nan")
rows = []
for i in range(1, reps + 1):
    d = os.path.join(work, "r%d" % i)
    lines = []
    for f in ("n1.log", "n2.log"):
        try:
            lines += open(os.path.join(d, f), errors="replace").read().splitlines()
        except FileNotFoundError:
            pass
    notice = [ts(l) for l in lines if " notice preemption notice" in l]
    commit = [(ts(l), l) for l in lines if re.search(r" preempt checkpoint step-\d+\.gen-\d+ committed ", l)]
    failed = [l for l in lines if "alert checkpoint before a mass preemption: step" in l]
    steps = [float(m.group(1)) for l in lines for m in [re.search(r"step .* seconds=([\d.]+)", l)] if m]
    tr = sorted(float(m.group(1)) for l in lines for m in [re.search(r"train rank=0 world=2 step=\d+ t=([\d.]+)", l)] if m)
    raised = float(open(os.path.join(d, "raised")).read()) / 1000 if os.path.exists(os.path.join(d, "raised")) else None
    if not notice or not commit:
        rows.append((i, None, None, None, None, "failed" if failed else "no result", ""))
        continue
    t_c, line = commit[0]
    persist = float(re.search(r"slowest shard write ([\d.]+) s", line).group(1))
    step_s = [b - a for a, b in zip(tr, tr[1:]) if b < min(notice)]
    name = re.search(r"step-\d+\.gen-\d+", line).group(0)
    rows.append((i, t_c - min(notice), t_c - raised if raised else None, persist,
                 med(step_s[-5:]) if step_s else None, "ok", name))
saves = [float(m.group(1)) for l in open(os.path.join(work, "torchsave.log")) for m in [re.search(r"seconds=([\d.]+)", l)] if m]
print(f"load average at start: {l0}   at end: {l1}")
print(f"{'repeat':>6} {'notice→commit s':>15} {'raise→commit s':>14} {'write s':>9} {'step s':>7}  checkpoint")
for i, nc, rc, p, st, how, name in rows:
    f = lambda v: f"{v:.2f}" if v is not None else "-"
    print(f"{i:>6} {f(nc):>15} {f(rc):>14} {f(p):>9} {f(st):>7}  {name or how}")
ok = [r for r in rows if r[5] == "ok"]
print(f"median {med([r[1] for r in ok]):>15.2f} {med([r[2] for r in ok if r[2] is not None]):>14.2f} "
      f"{med([r[3] for r in ok]):>9.2f} {med([r[4] for r in ok if r[4] is not None]):>7.2f}  ({len(ok)} of {reps})")
print(f"baseline: torch.save + fsync of the same {state} MiB state on one rank: median {med(saves):.2f} s "
      f"(notice→commit / torch.save: {med([r[1] for r in ok]) / med(saves):.2f})" if saves and ok else "baseline: -")
print("goal (issue 30): notice → checkpoint committed ≤ 5 s for 256 MiB")
PY
