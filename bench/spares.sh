#!/usr/bin/env bash
# bench/spares.sh — a member SIGKILLed with a ready spare (the world size is
# kept) against the same loss without one (the world shrinks), measured in
# the same run: built-in trainer and library mode (in place: a PyTorch DDP
# program on gloo, tests/python/torch_worker.py).  Issue 30's goal: the
# first step at the unchanged world size within 0.3 s of the time a shrink
# takes.
#
# Each variant is one cluster on 127.0.0.1 with compute.max_nodes 3: "spare"
# starts 4 agents, "shrink" 3.  A trial SIGKILLs a member that is not the
# controller (agent and worker) and times, from the kill, the first step of
# the new generation on a survivor (its `recovery training … world=W`
# line: W = 3 with a spare, 2 without).  Between trials a fresh node (new
# name, new data directory: a restarted one would count toward flapping) is
# started and waited for — as the spare, or to bring the world back to 3.
#
# Prints one table (median and max per variant, the difference spare −
# shrink) and the load average before and after.
#
# usage: bench/spares.sh [--quick] [--trials N] [--builtin-only]
#   --quick          2 trials per variant instead of 5
#   --builtin-only   skip library mode (no torch needed)
# env: EA_BIN (default bin/elastic-agent).
source "$(dirname "$0")/../tests/e2e/lib.sh"
export LC_ALL=C
TRIALS=5 LIB=1
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) TRIALS=2 ;;
    --trials) TRIALS=$2; shift ;;
    --builtin-only) LIB=0 ;;
    -h | --help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "spares: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
trap 'exit 130' INT TERM

sj() { ea_status "$1" --json 2>/dev/null | "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))' "$2" 2>/dev/null; }
world_is() { [ "$(sj "$1" 'd["generation"]["world"]')" = "$2" ]; }
spare_ready() { [ "$(sj "$1" 'd["spares"]["self"].get("state")')" = ready ]; }
# start_agent, without bash's "Killed" line when the bench kills it
start() { start_agent "$@" && disown "${AGENT_PID[$1]}" 2>/dev/null; }
ctl_name() { sj "$1" 'd["controller"]["name"]'; }
# any_spare_ready — one of run's ${alive[@]} is a ready spare (bash: run's locals are seen here)
any_spare_ready() {
  local n
  for n in "${alive[@]}"; do spare_ready "$n" && return 0; done
  return 1
}

BASE=(--set compute.min_nodes=2 --set compute.max_nodes=3 --set distributed.scale_up_delay_ms=300
  --set logging.level=debug --set checkpoint.save_interval_steps=0)
declare -A RESULT=()

# run MODE VARIANT — one cluster, TRIALS kills; appends ms figures to RESULT[MODE/VARIANT]
run() {
  local mode=$1 variant=$2 flags=() prog=() n i want next=0 alive=() times=()
  if [ "$mode" = library ]; then
    flags=(--set compute.protocol=library)
    prog=(-- "$PY" "$PWD/tests/python/torch_worker.py")
    export EA_TEST_PACE=0.01 EA_TEST_MODE=ddp EA_TEST_STEPS=100000000
  else
    flags=(--set train.steps=100000000)
  fi
  local pre=${mode:0:1}${variant:0:2}
  start "${pre}0" "${BASE[@]}" "${flags[@]}" "${prog[@]}"
  local seed=${AGENT_ADDR[${pre}0]}
  alive=("${pre}0")
  local total=3
  [ "$variant" = spare ] && total=4
  for ((i = 1; i < total; i++)); do
    start "$pre$i" --join "$seed" "${BASE[@]}" "${flags[@]}" "${prog[@]}"
    alive+=("$pre$i")
  done
  next=$total
  want=2
  [ "$variant" = spare ] && want=3
  for ((t = 0; t < TRIALS; t++)); do
    # settled: a member trains at world 3 (and, with a spare, one is ready)
    wait_for 120 world_is "${alive[0]}" 3 || { echo "  $mode/$variant: no world 3" >&2; return 1; }
    if [ "$variant" = spare ]; then
      wait_for 120 any_spare_ready || { echo "  $mode/$variant: no ready spare" >&2; return 1; }
    fi
    local ctl victim="" survivor=""
    ctl=$(ctl_name "${alive[0]}")
    for n in "${alive[@]}"; do
      [ "$n" = "$ctl" ] && continue
      [ "$(sj "$n" 'd["generation"]["world"]')" = 3 ] || continue
      if [ -z "$victim" ]; then victim=$n; elif [ -z "$survivor" ]; then survivor=$n; fi
    done
    [ -n "$survivor" ] || survivor=$ctl
    local wp mark t0 line ts
    wp=$(sj "$victim" 'd["workers"][0]["pid"]')
    mark=$(stat -c %s "$(agent_log "$survivor")")
    t0=$(now_ms)
    kill -KILL -- "-${AGENT_PID[$victim]}" 2>/dev/null
    [ -n "$wp" ] && [ "$wp" != 0 ] && kill -KILL "$wp" 2>/dev/null
    wait_for 60 sh -c "tail -c +$((mark + 1)) '$(agent_log "$survivor")' | grep -qE ' recovery training( [a-z]+)? gen=[^ ]* world=$want '" ||
      { echo "  $mode/$variant: $survivor did not train at world $want" >&2; return 1; }
    line=$(tail -c +$((mark + 1)) "$(agent_log "$survivor")" | grep -m1 -E " recovery training( [a-z]+)? gen=[^ ]* world=$want ")
    ts=$(log_ts_ms "$line")
    times+=($((ts - t0)))
    printf '  %-8s %-7s trial %d: killed %s, first step at world %d after %d ms\n' "$mode" "$variant" $((t + 1)) "$victim" "$want" $((ts - t0))
    local keep=()
    for n in "${alive[@]}"; do [ "$n" != "$victim" ] && keep+=("$n"); done
    alive=("${keep[@]}" "$pre$next")
    start "$pre$next" --join "${AGENT_ADDR[$survivor]}" "${BASE[@]}" "${flags[@]}" "${prog[@]}"
    next=$((next + 1))
  done
  RESULT[$mode/$variant]="${times[*]}"
  for n in "${alive[@]}"; do stop_agent "$n" KILL; done
}

echo "spares bench: $TRIALS trials per variant; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$EA_BIN" --version 2>/dev/null | head -n1
modes=(builtin)
[ $LIB = 1 ] && modes+=(library) && echo "torch $("$PY" -c 'import torch; print(torch.__version__)')"
for m in "${modes[@]}"; do
  for v in shrink spare; do run "$m" "$v" || exit 1; done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
printf '%-9s %-28s %-28s %s\n' mode "shrink: kill → world 2 (ms)" "spare: kill → world 3 (ms)" "spare − shrink (medians)"
for m in "${modes[@]}"; do
  "$PY" - "$m" "${RESULT[$m/shrink]}" "${RESULT[$m/spare]}" <<'PY'
import statistics, sys
m, a, b = sys.argv[1], [int(x) for x in sys.argv[2].split()], [int(x) for x in sys.argv[3].split()]
ma, mb = statistics.median(a), statistics.median(b)
print("%-9s %-28s %-28s %+.0f ms (goal: ≤ +300)" % (m, "median %.0f, max %d" % (ma, max(a)), "median %.0f, max %d" % (mb, max(b)), mb - ma))
PY
done
