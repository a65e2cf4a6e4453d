#!/usr/bin/env bash
# End-to-end: restart mode's checkpoint before a mass preemption (issue 30,
# item 2; docs/torchrun.md "Preemption: SIGUSR1").
#
# Three agents in restart mode, compute.min_nodes 2, each polling its own
# fake metadata URL (http_receiver.py's /going/NAME), run an unmodified
# script that keeps its own checkpoint (a JSON file rank 0 writes) and
# handles SIGUSR1 by saving it:
#  1. the script runs at world 3 and starts from no checkpoint;
#  2. notices reach two nodes at once: the survivor alone would be fewer
#     than min_nodes, so the controller has every program sent SIGUSR1
#     (the documented signal) and waits runtime.preemption_grace_seconds
#     before it lets the two go: every rank received it, rank 0 saved its
#     step, the drained agents leave only after the grace and exit 0, and
#     preempted_checkpoint is logged;
#  3. everything is killed; two fresh agents start the script again, which
#     finds its own checkpoint and resumes at exactly the saved step;
#  4. a script that does not handle SIGUSR1 (its default action would kill
#     it): nothing is sent, the controller logs that there is nothing to
#     wait for, and the two drained nodes leave well within the grace.
source "$(dirname "$0")/lib.sh"
t_start=$(now_ms)

need_curl
start_receiver "$EA_TMP/srv"
SRV=$RECV_DIR
URL=$RECV_URL
D=$EA_TMP/prog
mkdir -p "$D"
GRACE=3

cat >"$EA_TMP/prog.py" <<'PY'
import json, os, signal, sys, time
D = sys.argv[1]
rank = int(os.environ["RANK"])
path = os.path.join(D, "ckpt.json")
step = 0
if os.path.exists(path):
    step = json.load(open(path))["step"]
    open(os.path.join(D, "resumed-%d" % rank), "w").write(str(step))
open(os.path.join(D, "started-%d-%d" % (rank, os.getpid())), "w").write(str(step))

def on_usr1(signum, frame):
    # The documented signal: save now (rank 0 holds the state to save).
    if rank == 0:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"step": step}, f)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, path)
    open(os.path.join(D, "usr1-%d" % rank), "w").write(str(step))

if len(sys.argv) < 3 or sys.argv[2] != "nohandler":
    signal.signal(signal.SIGUSR1, on_usr1)
while True:
    step += 1
    time.sleep(0.01)
PY

js() {
  ea_status "$1" --json 2>/dev/null |
    "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))' "$2" 2>/dev/null
}
trains() {
  [ "$(js "$1" '"%s %d" % (d["generation"]["phase"], d["generation"]["world"])')" = "running $2" ]
}
started() {
  local f k=0
  for f in "$D"/started-*; do [ -e "$f" ] && k=$((k + 1)); done
  ((k >= $1))
}
worker_pids() { js "$1" '" ".join(str(w["pid"]) for w in d["workers"] if w["pid"])'; }

JOB=(--set compute.min_nodes=2 --set distributed.scale_up_delay_ms=300 --set compute.warm_start=off
  --set runtime.preemption_grace_seconds="$GRACE" --set runtime.preemption_metadata_url="$URL"
  --set experiment.name=preempt-restart)
PROG=(-- "$PY" "$EA_TMP/prog.py" "$D")

say "1. three agents in restart mode run the script at world 3"
start_agent t1 "${JOB[@]}" --set runtime.preemption_notice="$URL/going/t1" "${PROG[@]}"
for n in t2 t3; do
  start_agent "$n" --join "${AGENT_ADDR[t1]}" "${JOB[@]}" --set runtime.preemption_notice="$URL/going/$n" "${PROG[@]}"
done
for n in t1 t2 t3; do wait_for 60 trains "$n" 3 || fail "$n does not run at world 3: $(ea_status "$n")"; done
wait_for 30 started 3 || fail "the script did not start on every rank: $(ls "$D")"
declare -A WK=()
for n in t1 t2 t3; do for p in $(worker_pids "$n"); do EA_PGIDS+=("$p"); WK[$n]="${WK[$n]:-} $p"; done; done
[ -e "$D/ckpt.json" ] && fail "a checkpoint exists before the preemption"
pass "world 3, the script started from no checkpoint"

say "2. notices to t2 and t3 at once"
t_touch=$(now_ms)
touch "$SRV/going-t2" "$SRV/going-t3"
sent() { [ "$(cat "$EA_TMP"/t?/log | grep -c ' preempt SIGUSR1 to worker 0 ')" -ge 3 ]; }
wait_for 20 sent || fail "SIGUSR1 not sent on every node: $(grep -h ' preempt ' "$EA_TMP"/t?/log | tail -n 6)"
for r in 0 1 2; do wait_for 5 test -e "$D/usr1-$r" || fail "rank $r did not receive SIGUSR1"; done
saved=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["step"])' "$D/ckpt.json") ||
  fail "rank 0 saved no checkpoint"
grep -hq 'alert checkpoint before a mass preemption: the programs of generation [0-9]* were sent SIGUSR1' "$EA_TMP"/t?/log ||
  fail "no preempted_checkpoint alert: $(grep -h ' alert ' "$EA_TMP"/t?/log | tail -n 3)"
t_sig=$(log_ts_ms "$(grep -h ' preempt SIGUSR1 to worker 0 ' "$EA_TMP"/t?/log | sort | head -n1)")
for n in t2 t3; do
  wait_exit "$n" 40 || fail "$n did not leave"
  assert_eq "$EXIT_RC" 0 "$n's exit status"
  t_left=$(log_ts_ms "$(grep -h ' leave left the cluster' "$(agent_log "$n")" | tail -n1)")
  ((t_left - t_sig >= GRACE * 1000 - 100)) ||
    fail "$n left $((t_left - t_sig)) ms after SIGUSR1, before the ${GRACE} s grace"
done
echo "SIGUSR1 $((t_sig - t_touch)) ms after the notices were raised; rank 0 saved step $saved"
pass "SIGUSR1 on every rank, rank 0 saved step $saved, t2 and t3 left after the ${GRACE} s grace (exit 0)"

say "3. everything killed; two fresh agents: the script resumes at step $saved"
for n in t1 t2 t3; do kill -KILL -- "-${AGENT_PID[$n]}" 2>/dev/null; done
for n in t1 t2 t3; do for p in ${WK[$n]:-}; do kill -KILL -- "-$p" 2>/dev/null; done; done
wait_for 10 agent_gone t1 || fail "t1 survived SIGKILL"
wait "${AGENT_PID[t1]}" 2>/dev/null
start_agent r1 "${JOB[@]}" "${PROG[@]}"
start_agent r2 --join "${AGENT_ADDR[r1]}" "${JOB[@]}" "${PROG[@]}"
for n in r1 r2; do wait_for 60 trains "$n" 2 || fail "$n does not run at world 2: $(ea_status "$n")"; done
wait_for 30 test -e "$D/resumed-0" || fail "rank 0 did not resume from its checkpoint: $(ls "$D")"
assert_eq "$(cat "$D/resumed-0")" "$saved" "the step rank 0 resumed at"
for n in r1 r2; do kill -KILL -- "-${AGENT_PID[$n]}" 2>/dev/null; for p in $(worker_pids "$n"); do kill -KILL -- "-$p" 2>/dev/null; done; done
for n in r1 r2; do wait "${AGENT_PID[$n]}" 2>/dev/null; done
pass "the script found its own checkpoint and resumed at step $saved"

say "4. a script without a SIGUSR1 handler: nothing to wait for"
D2=$EA_TMP/prog2
mkdir -p "$D2"
P4=(-- "$PY" "$EA_TMP/prog.py" "$D2" nohandler)
J4=("${JOB[@]}" --set runtime.preemption_grace_seconds=20)
start_agent u1 "${J4[@]}" --set runtime.preemption_notice="$URL/going/u1" "${P4[@]}"
for n in u2 u3; do
  start_agent "$n" --join "${AGENT_ADDR[u1]}" "${J4[@]}" --set runtime.preemption_notice="$URL/going/$n" "${P4[@]}"
done
for n in u1 u2 u3; do wait_for 60 trains "$n" 3 || fail "$n does not run at world 3: $(ea_status "$n")"; done
for n in u1 u2 u3; do for p in $(worker_pids "$n"); do EA_PGIDS+=("$p"); done; done
touch "$SRV/going-u2" "$SRV/going-u3"
for n in u2 u3; do
  wait_exit "$n" 15 || fail "$n did not leave within 15 s (the grace is 20 s: it waited for nothing)"
  assert_eq "$EXIT_RC" 0 "$n's exit status"
done
grep -hq "preempt this node's program does not handle SIGUSR1: nothing to wait for" "$EA_TMP"/u?/log ||
  fail "no 'nothing to wait for' line: $(grep -h ' preempt ' "$EA_TMP"/u?/log | tail -n 5)"
grep -hq ' preempt SIGUSR1 to worker' "$EA_TMP"/u?/log && fail "SIGUSR1 was sent to a program that does not handle it"
for r in 0 1 2; do [ -e "$D2/usr1-$r" ] && fail "rank $r got SIGUSR1"; done
pass "no handler: nothing sent, u2 and u3 left at once (exit 0)"
echo "WALL $(((($(now_ms) - t_start) + 500) / 1000)) s"
