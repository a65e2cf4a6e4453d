#!/usr/bin/env bash
# `make demo`: three elastic-agents on this machine (127.0.0.1) train the
# built-in byte-level language model together (examples/job.yaml), one of
# them is killed with SIGKILL mid-run and the other two carry on from the
# step they had, a fresh fourth agent joins and receives the state, training
# finishes, and everything is stopped cleanly.  A progress line a second
# shows the step, the loss, the world size and the generation.  Logs stay in
# demo-run/ to read; every process the demo starts is ended when it exits,
# whatever way (Ctrl-C included).
#
#   scripts/demo.sh                    (make demo runs it after building)
#   EA_DEMO_STEPS=4000 scripts/demo.sh  a shorter run (default 18000 steps,
#                                       about 2-3 minutes on 2 busy cores)
#   EA_BIN=path/to/elastic-agent scripts/demo.sh
set -u
cd "$(dirname "$0")/.."
EA_BIN=${EA_BIN:-bin/elastic-agent}
[[ $EA_BIN == /* ]] || EA_BIN=$PWD/$EA_BIN
[ -x "$EA_BIN" ] || { echo "demo: $EA_BIN is not built; run 'make' first" >&2; exit 1; }
. scripts/python.sh
PY=$EA_PYTHON
# Python turns SIGINT into an exception and exits 1; bash then assumes the
# child handled Ctrl-C and carries on.  Dying of the signal lets the trap
# below run.
PYPRE='import json, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); '
JOB=$PWD/examples/job.yaml
# Steps: the built-in model (examples/job.yaml: C16 E24 H256 L2, batch 64)
# ran 110-190 steps/s at world 2-3 on this project's shared 2-core machine
# (load average 4-6), so 18000 steps take 2-3 minutes.
STEPS=${EA_DEMO_STEPS:-18000}
KILL_AT=$((STEPS * 20 / 100))
JOIN_AT=$((STEPS * 45 / 100))

DEMO=${EA_DEMO_DIR:-$PWD/demo-run}
# The admin socket path must fit in 108 bytes; fall back to /tmp if not.
if [ ${#DEMO} -gt 80 ]; then DEMO=$(mktemp -d /tmp/ea-demo.XXXXXX); fi
rm -rf "$DEMO"
mkdir -p "$DEMO"
declare -A PID=()
GROUPS_TO_KILL=()

cleanup() {
  local p
  {
    for p in "${PID[@]}" "${GROUPS_TO_KILL[@]}"; do kill -KILL -- "-$p"; done
    for p in "${PID[@]}"; do wait "$p"; done
  } 2>/dev/null
  rm -rf "$DEMO"/*/data
}
trap cleanup EXIT
trap 'echo; echo "demo: interrupted; stopping every agent and worker"; exit 130' INT TERM

if [ -t 1 ]; then
  bold() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
  loud() { printf '\n\033[1;31m!! %s\033[0m\n' "$*"; }
else
  bold() { printf '\n== %s\n' "$*"; }
  loud() { printf '\n!! %s\n' "$*"; }
fi
now_ms() { date +%s%3N; }
# wait_for TIMEOUT_S CMD… : poll every 50 ms until CMD succeeds or time is up.
wait_for() {
  local deadline=$(($(now_ms) + $1 * 1000))
  shift
  until "$@" >/dev/null 2>&1; do
    (($(now_ms) >= deadline)) && return 1
    sleep 0.05
  done
}
status() { "$EA_BIN" status --data-dir "$DEMO/$1/data" "${@:2}"; }
running() { [ -e "/proc/$1" ] && ! grep -q '^[0-9]* (.*) Z' "/proc/$1/stat" 2>/dev/null; }
die() {
  echo "demo: $*" >&2
  for f in "$DEMO"/*.log; do echo "--- $f"; grep -v ' debug ' "$f" | tail -n 8; done
  exit 1
}

# field NAME EXPR: a value from NAME's status JSON (d), empty on failure.
field() {
  status "$1" --json 2>/dev/null |
    "$PY" -c "$PYPRE"'d=json.load(sys.stdin); print(eval(sys.argv[1]))' "$2" 2>/dev/null
}
# snap NAME: "phase|world|step|loss|gen|controller|nodes" from NAME's status.
snap() {
  status "$1" --json 2>/dev/null | "$PY" -c "$PYPRE"'
d = json.load(sys.stdin); g = d["generation"]
loss = g["last_loss"]
print("|".join(str(x) for x in (g["phase"], g["world"], g["last_step"],
      "-" if loss is None else "%.3f" % loss, g["gen"] >> 16, d["controller"]["name"] or "-",
      " ".join(g["nodes"]) or "-")))' 2>/dev/null
}

start() { # start NAME [flags…]
  local name=$1
  shift
  mkdir -p "$DEMO/$name"
  echo "  \$ elastic-agent run --name $name --bind 127.0.0.1:0 --data-dir demo-run/$name/data \\"
  echo "        --config examples/job.yaml --set train.steps=$STEPS --set checkpoint.dir=demo-run/ckpt $*"
  setsid "$EA_BIN" run --name "$name" --bind 127.0.0.1:0 --data-dir "$DEMO/$name/data" \
    --config "$JOB" --set train.steps="$STEPS" --set observability.metrics_listen=127.0.0.1:0 \
    --set checkpoint.dir="$DEMO/ckpt" \
    "$@" >"$DEMO/$name.log" 2>&1 </dev/null &
  PID[$name]=$!
  wait_for 10 grep -q ' listen .*gossip=' "$DEMO/$name.log" || die "$name did not start"
}
addr_of() { grep -o 'gossip=[0-9.]*:[0-9]*' "$DEMO/$1.log" | head -n1 | cut -d= -f2; }
# page_of NAME: the address of NAME's page (its metrics listener's /), from its listen line.
page_of() {
  wait_for 5 grep -q ' listen .*page=http://' "$DEMO/$1.log"
  grep -o 'page=http://[^ ]*' "$DEMO/$1.log" | head -n1 | cut -d= -f2
}
worker_of() { field "$1" 'd["workers"][0]["pid"]'; }

# A live agent to ask (the one we killed is skipped).
ALIVE=()
ask() { echo "${ALIVE[0]}"; }

T0=$(now_ms)
LAST_STEP=0 LAST_T=$T0
# progress: one line from a live agent's status.
progress() {
  local s t rate="" phase world step loss gen ctl nodes
  s=$(snap "$(ask)")
  [ -n "$s" ] || return 1
  IFS='|' read -r phase world step loss gen ctl nodes <<<"$s"
  t=$(now_ms)
  if ((step > LAST_STEP && t > LAST_T)); then
    rate=$(awk -v d=$((step - LAST_STEP)) -v ms=$((t - LAST_T)) 'BEGIN { printf "%4.0f steps/s", d * 1000 / ms }')
  fi
  LAST_STEP=$step LAST_T=$t
  printf '  [%6.1fs] step %6s/%s  loss %-6s  world %s (%s)  gen %-3s %-8s controller %-3s %s\n' \
    "$(awk -v ms=$((t - T0)) 'BEGIN { print ms / 1000 }')" "$step" "$STEPS" "$loss" "$world" \
    "$nodes" "$gen" "$phase" "$ctl" "$rate"
  STEP=$step WORLD=$world PHASE=$phase
}
# watch TIMEOUT_S CMD…: a progress line a second until CMD succeeds.
watch() {
  local deadline=$(($(now_ms) + $1 * 1000)) next
  shift
  while :; do
    next=$(($(now_ms) + 1000))
    progress
    "$@" && return 0
    (($(now_ms) >= deadline)) && return 1
    while (($(now_ms) < next)); do sleep 0.05; done
  done
}
STEP=0 WORLD=0 PHASE=none
step_at_least() { ((${STEP:-0} >= $1)); }
world_is() { [ "${PHASE:-}" = running ] && [ "${WORLD:-0}" = "$1" ]; }
finished() { [ "$(field "$(ask)" 'd["generation"]["last_step"]')" = "$STEPS" ]; }
# first_ts LOG REGEX AFTER_MS: epoch ms of LOG's first matching line at or after AFTER_MS.
first_ts() {
  local line ts
  while IFS= read -r line; do
    ts=$(date -d "${line%% *}" +%s%3N)
    ((ts >= $3)) && { echo "$ts"; return 0; }
  done < <(grep -E "$2" "$1")
  return 1
}

bold "elastic-agent $("$EA_BIN" version | cut -d' ' -f2): training on a 3-agent cluster on 127.0.0.1"
echo "Each agent gossips (SWIM over UDP, push-pull over TCP), talks rendezvous over its"
echo "control port, and runs one worker process training the built-in byte-level language"
echo "model on /usr/share/common-licenses: global batch 64 split across the ranks, a ring"
echo "allreduce over TCP, $STEPS steps. Agent n1 is the seed; n2 and n3 join it."
echo "(No --key-file here, so each agent warns once that gossip is unauthenticated.)"
start n1
seed=$(addr_of n1)
start n2 --join "$seed"
start n3 --join "$seed"
ALIVE=(n1 n2 n3)
echo
echo "Every agent serves a page of the cluster, its generations and its training (it only"
echo "reads; open one in a browser on this machine while the demo runs):"
for n in n1 n2 n3; do echo "  $n: $(page_of "$n")"; done
echo
echo "The controller waits distributed.scale_up_delay_ms (2 s) for more nodes, then forms"
echo "generation 1 with all three:"
watch 60 world_is 3 || die "no generation of 3 formed"
for n in n1 n2 n3; do GROUPS_TO_KILL+=("$(worker_of "$n")"); done
watch $((STEPS / 5 + 120)) step_at_least "$KILL_AT" || die "training did not reach step $KILL_AT"

# Kill the controller: its failure must be detected by gossip, a new
# controller elected, and the group re-formed without it.
victim=$(field n1 'd["controller"]["name"]')
case $victim in n1 | n2 | n3) ;; *) victim=n3 ;; esac
vworker=$(worker_of "$victim")
KILL_STEP=$(field "$victim" 'd["generation"]["last_step"]')
loud "CRASH: kill -9 $victim (the controller) and its worker, pids ${PID[$victim]} and $vworker, at step ${KILL_STEP:-$STEP}"
T_KILL=$(now_ms)
{
  kill -KILL -- "-${PID[$victim]}" "-$vworker"
  wait "${PID[$victim]}"
} 2>/dev/null
unset "PID[$victim]"
ALIVE=()
for n in n1 n2 n3; do [ "$n" != "$victim" ] && ALIVE+=("$n"); done
KILL_STEP=${KILL_STEP:-$STEP}
watch 60 world_is 2 || die "the survivors did not re-form"
survivor=${ALIVE[0]}
c=$(first_ts "$DEMO/$survivor.log" 'generation committed .* world=2 ' "$T_KILL") || die "no commit line"
r=$(first_ts "$DEMO/$survivor.log" 'recovery training again .* world=2 ' "$T_KILL") || die "no recovery line"
REC_COMMIT=$((c - T_KILL)) REC_STEP=$((r - T_KILL))
resumed=$(grep -E 'recovery training again .* world=2 ' "$DEMO/$survivor.log" | tail -n1 | grep -o ' step=[0-9]*' | cut -d= -f2)
held=$(grep -E 'generation committed .* world=2 ' "$DEMO/$survivor.log" | tail -n1 | grep -o 'at step [0-9]*' | cut -d' ' -f3)
echo
echo "   ${ALIVE[*]} noticed $victim dead (SWIM: suspect, then dead), elected a new controller,"
echo "   committed generation $(field "$survivor" 'd["generation"]["gen"] >> 16') with world 2 ${REC_COMMIT} ms after the kill, and trained"
echo "   again ${REC_STEP} ms after it — the same worker processes, resuming at step $resumed"
echo "   (0-based) after the $held steps the survivors had completed: nothing lost or repeated."
grep -hE "member name=$victim .*->(suspect|dead)|generation committed .* world=2 |recovery training again .* world=2 " \
  "$DEMO/$survivor.log" | head -n 4 | sed 's/^/     /'

watch $((STEPS / 5 + 120)) step_at_least "$JOIN_AT" || die "training did not reach step $JOIN_AT"
bold "Scale up: a fresh agent n4 joins through ${ALIVE[0]}"
T_JOIN=$(now_ms)
start n4 --join "$(addr_of "${ALIVE[0]}")"
ALIVE+=(n4)
echo "  n4's page: $(page_of n4)"
JOIN_STEP=$STEP
watch 60 world_is 3 || die "n4 was not taken in"
GROUPS_TO_KILL+=("$(worker_of n4)")
j=$(first_ts "$DEMO/n4.log" 'recovery training started' "$T_JOIN") || die "n4 did not train"
JOIN_MS=$((j - T_JOIN))
synced=$(grep -o 'sync_ms=[0-9.]* sync=received' "$DEMO/n4.log" | head -n1 | cut -d' ' -f1 | cut -d= -f2)
echo
echo "   n4 was batched for distributed.scale_up_delay_ms, taken in at a step boundary, and its"
echo "   worker received the full training state (params + optimizer) over the new ring in"
echo "   ${synced:-?} ms: training at world 3 ${JOIN_MS} ms after n4 started."

bold "elastic-agent status --data-dir demo-run/n4/data"
status n4 | sed -n '1,/^workers/p'

bold "Spot reclaim: SIGTERM n4 (it drains: the job re-forms without it, then it leaves)"
t=$(now_ms)
kill -TERM -- "-${PID[n4]}"
wait_for 40 bash -c "! [ -e /proc/${PID[n4]} ] || grep -q '^[0-9]* (.*) Z' /proc/${PID[n4]}/stat" ||
  die "n4 did not exit after SIGTERM"
rc=0
wait "${PID[n4]}" || rc=$?
unset "PID[n4]"
[ "$rc" -eq 0 ] || die "the drained n4 exited with status $rc, not 0"
echo "  n4 exited with status 0 after $(($(now_ms) - t)) ms (drained)"

bold "The job ends at train.steps: the final checkpoint is committed, every agent leaves, exit 0"
# progress lines until the first agent leaves with the job (status cannot be
# asked once they are gone)
ended() { grep -q ' job finished: ' "$DEMO"/n[1-3].log; }
watch $((STEPS / 3 + 300)) ended || die "training did not finish"
STOPPED=()
for n in n1 n2 n3; do
  [ -n "${PID[$n]:-}" ] || continue # the crashed one
  wait_for 60 bash -c "! [ -e /proc/${PID[$n]} ] || grep -q '^[0-9]* (.*) Z' /proc/${PID[$n]}/stat" ||
    die "$n did not exit when the job finished"
  rc=0
  wait "${PID[$n]}" || rc=$?
  unset "PID[$n]"
  [ "$rc" -eq 0 ] || die "$n exited with status $rc when the job ended: $(grep -h ' job ' "$DEMO/$n.log" | tail -n1)"
  STOPPED+=("$n")
done
T_END=$(now_ms)
fin=$(grep -h ' job finished: ' "$DEMO/${STOPPED[0]}.log" | tail -n1)
echo "  ${fin#* job }"
echo "  ${STOPPED[*]} exited with status 0"
FINAL_LOSS=$(grep -h 'progress gen=.* step=' "$DEMO/${STOPPED[0]}.log" | tail -n1 | grep -o 'loss=[0-9.]*' | cut -d= -f2)
FIRST_LOSS=$(grep -m1 -h 'progress gen=.* step=0 ' "$DEMO"/n1.log "$DEMO"/n2.log "$DEMO"/n3.log 2>/dev/null |
  grep -o 'loss=[0-9.]*' | head -n1 | cut -d= -f2)
LAST_CKPT=$(find "$DEMO/ckpt" -maxdepth 1 -name "step-$STEPS.gen-*" | head -n1)
if [ -z "$LAST_CKPT" ] || [ ! -f "$LAST_CKPT/MANIFEST" ]; then die "no committed checkpoint of step $STEPS in $DEMO/ckpt"; fi
"$EA_BIN" ckpt verify "$DEMO/ckpt" "$STEPS" >/dev/null || die "the final checkpoint does not verify"
echo "  final checkpoint $(basename "$LAST_CKPT") committed and verified (elastic-agent ckpt verify demo-run/ckpt $STEPS)"

bold "Summary"
printf '  %-12s %s\n' "training" "$STEPS of $STEPS steps in $(((T_END - T0) / 1000)) s; loss ${FIRST_LOSS:-?} -> $FINAL_LOSS nats/byte"
printf '  %-12s %s\n' "crash" "kill -9 $victim at step $KILL_STEP: world 3 -> 2; new generation ${REC_COMMIT} ms after the kill,"
printf '  %-12s %s\n' "" "training again after ${REC_STEP} ms at step $resumed (the survivors had completed $held)"
printf '  %-12s %s\n' "scale up" "n4 joined at step $JOIN_STEP: world 2 -> 3; training ${JOIN_MS} ms after it started"
printf '  %-12s %s\n' "" "(including the ${synced:-?} ms state hand-off and the scale_up_delay batching)"
printf '  %-12s %s\n' "end" "n4 drained and left (exit 0); the job finished at step $STEPS, final checkpoint"
printf '  %-12s %s\n' "" "committed and verified, ${STOPPED[*]} exited 0"
echo
echo "Logs: $DEMO/n1.log … n4.log: one line per membership change, election, generation,"
echo "recovery and progress (grep ' generation \\| recovery ' for the story)."
