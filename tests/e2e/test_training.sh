#!/usr/bin/env bash
# End-to-end: agents on 127.0.0.1 train the built-in model together and keep
# training through a crash, a join, a drain command and a SIGTERM.
#
#  1. three agents (with a cluster key: control frames are sealed) join
#     through one seed, form a generation of world 3 and the step advances
#     on all three;
#  2. SIGKILL one agent and its worker's process group mid-run: the other two
#     re-form with world 2 and continue from the step they had, with the SAME
#     worker processes (pids read from status before and after, no restart);
#  3. a fourth agent joins: world 3 again, its worker receives the state and
#     then logs the same params digest and loss as the others at every step;
#     then n4's worker alone is SIGKILLed: its agent restarts it (a new pid,
#     restarts 1), the group re-forms and the new process gets the state,
#     while the other workers keep their pids;
#  4. `elastic-agent drain n2` (asked through n1's admin socket, so the DRAIN
#     travels over the control channel): world 2, and n2 exits 0;
#  5. SIGTERM n4 (a spot reclaim): the group re-forms without it, it exits 0;
#  6. the whole history, from every agent's per-step log lines: each worker's
#     steps strictly increase (none repeated or rolled back), every step from
#     the first to the last was completed by some rank (none lost), in each
#     generation every rank completed every step until the first of them
#     stopped, and the ranks of a generation that completed step s hold
#     bit-identical parameters (one digest per step and generation).  (A
#     node that leaves may finish a step its group then recomputes without
#     it, in another summation order: its copy leaves with it.)
#
# Prints the recovery times measured from the SIGKILL (log timestamps):
#   RECOVERY kill_to_commit_ms=… kill_to_first_step_ms=… bound_ms=…
#   JOIN start_to_first_step_ms=…   WORKER kill_to_first_step_ms=…
#   DRAIN cmd_to_commit_ms=… cmd_to_exit_ms=…
source "$(dirname "$0")/lib.sh"
t_start=$(now_ms)

# A small model keeps steps short on a shared 2-core machine; the step count
# is out of reach so training never finishes during the test.  Per-step lines
# are debug level.
JOB=(--set train.steps=1000000000 --set train.context=8 --set train.embed_dim=16
  --set train.hidden=64 --set train.layers=1 --set distributed.global_batch=32
  --set distributed.micro_batch=16 --set distributed.scale_up_delay_ms=300 --log-level debug)

# js NAME EXPR — evaluate EXPR over NAME's status JSON (d).
js() {
  ea_status "$1" --json 2>/dev/null |
    "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))' "$2" 2>/dev/null
}
# trains NAME W — NAME runs a generation of world W.
trains() {
  [ "$(js "$1" '"%s %d" % (d["generation"]["phase"], d["generation"]["world"])')" = "running $2" ]
}
last_step() { js "$1" 'd["generation"]["last_step"]'; }
# advanced NAME N — NAME's workers completed more than N steps.
advanced() {
  local s
  s=$(last_step "$1")
  [ -n "$s" ] && ((s > $2))
}
worker_pid() { js "$1" 'd["workers"][0]["pid"]'; }
# Worker processes lead their own process groups (the supervisor detaches
# them); lib.sh's cleanup ends every group listed in EA_PGIDS.
track_worker() {
  local p
  p=$(worker_pid "$1")
  [ -n "$p" ] && [ "$p" != 0 ] && EA_PGIDS+=("$p")
  echo "$p"
}
# first_ts NAME REGEX AFTER_MS — epoch ms of NAME's first log line matching
# REGEX stamped at or after AFTER_MS; empty when none.
first_ts() {
  local line ts
  while IFS= read -r line; do
    ts=$(log_ts_ms "$line")
    ((ts >= $3)) && {
      echo "$ts"
      return 0
    }
  done < <(grep -E "$2" "$(agent_log "$1")")
  return 1
}
max() { if (($1 > $2)); then echo "$1"; else echo "$2"; fi; }

say "1. three agents through one seed form world 3"
# A cluster key: every control frame of every formation below is sealed.
"$EA_BIN" keygen "$EA_TMP/cluster.key" 2>/dev/null || fail "keygen"
JOB+=(--key-file "$EA_TMP/cluster.key")
start_agent n1 "${JOB[@]}"
seed=${AGENT_ADDR[n1]}
start_agent n2 --join "$seed" "${JOB[@]}"
start_agent n3 --join "$seed" "${JOB[@]}"
for n in n1 n2 n3; do
  wait_for 30 trains "$n" 3 || fail "$n does not train at world 3: $(ea_status "$n")"
done
for n in n1 n2 n3; do track_worker "$n" >/dev/null; done
s0=$(last_step n1)
for n in n1 n2 n3; do
  wait_for 20 advanced "$n" $((s0 + 30)) || fail "$n's step does not advance: $(last_step "$n")"
done
for n in n1 n2 n3; do
  (($(js "$n" 'd["counters"]["control"]["frames_in"]') > 0)) || fail "$n received no control frame"
  assert_eq "$(js "$n" 'd["counters"]["control"]["dropped_unauthenticated"] + d["counters"]["control"]["dropped_malformed"]')" 0 "$n's dropped control frames"
done
pass "world 3 on all three, step $(last_step n1) and rising ($(($(now_ms) - t_start)) ms after the first start)"

say "2. SIGKILL n3 (agent and worker) mid-run"
bound=$(counter n1 detection_bound_ms)
declare -A WPID=()
for n in n1 n2; do WPID[$n]=$(worker_pid "$n"); done
victim_worker=$(worker_pid n3)
[ -n "$victim_worker" ] && [ "$victim_worker" != 0 ] || fail "no worker pid for n3"
at_kill=$(last_step n1)
t_kill=$(now_ms)
kill -KILL -- "-${AGENT_PID[n3]}" "-$victim_worker" 2>/dev/null
for n in n1 n2; do
  wait_for 30 trains "$n" 2 || fail "$n did not re-form at world 2: $(ea_status "$n")"
done
for n in n1 n2; do
  wait_for 20 advanced "$n" $((at_kill + 30)) || fail "$n does not train after the kill"
done
for n in n1 n2; do
  assert_eq "$(worker_pid "$n")" "${WPID[$n]}" "$n's worker pid across the recovery"
  assert_eq "$(js "$n" 'd["workers"][0]["restarts"]')" 0 "$n's worker restarts"
done
commit_ms=0 step_ms=0
for n in n1 n2; do
  c=$(first_ts "$n" 'generation committed .* world=2 ' "$t_kill") || fail "$n: no commit line for world 2"
  s=$(first_ts "$n" 'recovery training again .* world=2 ' "$t_kill") || fail "$n: no recovery line"
  commit_ms=$(max "$commit_ms" $((c - t_kill)))
  step_ms=$(max "$step_ms" $((s - t_kill)))
done
echo "RECOVERY kill_to_commit_ms=$commit_ms kill_to_first_step_ms=$step_ms bound_ms=$bound"
assert_le "$step_ms" $((bound + 5000)) "kill to first step vs the detection bound + 5 s"
pass "n1 and n2 train at world 2 with the same worker pids (${WPID[n1]}, ${WPID[n2]})"

say "3. a fourth agent joins"
t_join=$(now_ms)
start_agent n4 --join "$seed" "${JOB[@]}"
for n in n1 n2 n4; do
  wait_for 30 trains "$n" 3 || fail "$n does not train at world 3 with n4: $(ea_status "$n")"
done
track_worker n4 >/dev/null
wait_for 20 advanced n4 $(($(last_step n1) + 20)) || fail "n4 does not advance"
grep -q 'sync=received' "$(agent_log n4)" || fail "n4's worker did not receive the state"
j=$(first_ts n4 'recovery training started' "$t_join") || fail "n4: no first-step line"
echo "JOIN start_to_first_step_ms=$((j - t_join))"
pass "n4 joined: world 3, state received"

say "   SIGKILL n4's worker only: its agent restarts it and the group re-forms"
old_worker=$(worker_pid n4)
t_wk=$(now_ms)
kill -KILL -- "-$old_worker" 2>/dev/null
restarted() { [ "$(js n4 '"%d %s" % (d["workers"][0]["restarts"], d["workers"][0]["state"])')" = "1 training" ]; }
wait_for 20 restarted || fail "n4's worker was not restarted: $(ea_status n4)"
track_worker n4 >/dev/null
[ "$(worker_pid n4)" != "$old_worker" ] || fail "n4's worker pid did not change"
w=$(first_ts n4 'recovery training again .* world=3 ' "$t_wk") || fail "n4 did not train again at world 3"
for n in n1 n2; do
  assert_eq "$(worker_pid "$n")" "${WPID[$n]}" "$n's worker pid across n4's worker restart"
done
grep -q 'worker 0 restart 1 of' "$(agent_log n4)" || fail "no restart line on n4"
echo "WORKER kill_to_first_step_ms=$((w - t_wk))"
pass "n4's worker restarted (pid $old_worker -> $(worker_pid n4)); world 3 trains again"

say "4. elastic-agent drain n2 (asked through n1)"
t_drain=$(now_ms)
out=$("$EA_BIN" drain n2 --data-dir "${AGENT_DIR[n1]}/data" 2>&1) || fail "drain command: $out"
assert_contains "$out" "asked n2 to drain" "drain command output"
wait_exit n2 20 || fail "n2 did not exit after the drain: $(tail -5 "$(agent_log n2)")"
t_gone=$(now_ms)
assert_eq "$EXIT_RC" 0 "n2's exit status after the drain"
for n in n1 n4; do
  wait_for 20 trains "$n" 2 || fail "$n does not train at world 2 without n2: $(ea_status "$n")"
done
at_drain=$(last_step n1)
wait_for 20 advanced n4 $((at_drain + 20)) || fail "n4 does not train after the drain"
grep -q 'drain drained: the group re-formed without this node' "$(agent_log n2)" ||
  fail "n2 did not wait for the re-formation before leaving"
c=$(first_ts n1 'generation committed .* world=2 nodes=(n1,n4|n4,n1) ' "$((t_drain - 1000))") ||
  fail "n1: no commit line for n1,n4"
echo "DRAIN cmd_to_commit_ms=$((c - t_drain)) cmd_to_exit_ms=$((t_gone - t_drain))"
pass "n2 drained and exited 0; n1 and n4 train at world 2"

say "5. SIGTERM n4: drain, then leave"
stop_agent n4 TERM
wait_exit n4 20 || fail "n4 did not exit after SIGTERM: $(tail -5 "$(agent_log n4)")"
assert_eq "$EXIT_RC" 0 "n4's exit status after SIGTERM"
grep -q 'drain drained:' "$(agent_log n4)" || fail "n4 left without draining: $(tail -5 "$(agent_log n4)")"
wait_for 20 trains n1 1 || fail "n1 does not train alone: $(ea_status n1)"
wait_for 20 advanced n1 $(($(last_step n1) + 20)) || fail "n1 does not train after n4 left"
pass "n4 drained on SIGTERM and exited 0; n1 trains alone"

say "6. the step history of every worker"
stop_agent n1 KILL
logs=()
for n in n1 n2 n3 n4; do logs+=("$(agent_log "$n")"); done
"$PY" - "${logs[@]}" <<'PY' || fail "step history check failed"
import re, sys
pat = re.compile(r' (n\d) step worker=(\d+) gen=(\d+) rank=(\d+) world=(\d+) step=(\d+) '
                 r'loss=(\S+) digest=([0-9a-f]+)')
by_worker, steps_seen, by_gen = {}, set(), {}
for path in sys.argv[1:]:
    for line in open(path, errors="replace"):
        m = pat.search(line)
        if not m:
            continue
        node, w, gen, rank, world, step, loss, dig = m.groups()
        step = int(step)
        by_worker.setdefault((node, w), []).append(step)
        steps_seen.add(step)
        g = by_gen.setdefault(int(gen), {"world": int(world), "steps": {}, "last": {}})
        g["steps"].setdefault(step, set()).add((rank, dig))
        g["last"][rank] = step
bad = []
for key, steps in by_worker.items():
    for a, b in zip(steps, steps[1:]):
        if b <= a:
            bad.append("%s/w%s: step %d after %d (repeated or rolled back)" % (key[0], key[1], b, a))
lo, hi = min(steps_seen), max(steps_seen)
missing = [s for s in range(lo, hi + 1) if s not in steps_seen]
if missing:
    bad.append("steps never completed by any rank: %s" % missing[:10])
for gen, g in sorted(by_gen.items()):
    # Every rank logs every step until the first of them stops (a failure,
    # or a SIGKILLed agent that could no longer log what its worker did).
    stop = min(g["last"].values())
    for s, ranks in sorted(g["steps"].items()):
        digests = {d for _, d in ranks}
        if len(digests) != 1:
            bad.append("gen %d step %d: ranks disagree on the params: %s" % (gen, s, sorted(ranks)))
        if s <= stop and len(ranks) != g["world"]:
            bad.append("gen %d (world %d) step %d completed by ranks %s only" %
                       (gen, g["world"], s, sorted(r for r, _ in ranks)))
print("history: %d workers, steps %d..%d, %d generations with steps" %
      (len(by_worker), lo, hi, len(by_gen)))
for b in bad[:20]:
    print("  " + b)
sys.exit(1 if bad else 0)
PY
# The recovery itself: the first step of the world-2 generation after the
# kill is the next one after the highest step a survivor completed.
"$PY" - "$(agent_log n1)" "$(agent_log n2)" <<'PY' || fail "the survivors did not continue from the step they had"
import re, sys
pat = re.compile(r' step worker=\d+ gen=(\d+) rank=\d+ world=(\d+) step=(\d+) ')
gens = {}
for path in sys.argv[1:]:
    for line in open(path, errors="replace"):
        m = pat.search(line)
        if m:
            g = gens.setdefault(int(m.group(1)), [int(m.group(2)), []])
            g[1].append(int(m.group(3)))
order = sorted(gens)  # generation numbers grow with their term
w3 = next(g for g in order if gens[g][0] == 3)
w2 = next(g for g in order if gens[g][0] == 2 and g > w3)
had = max(s for g in order if g < w2 for s in gens[g][1])
first = min(gens[w2][1])
print("survivors had completed step %d; world 2 resumed at step %d" % (had, first))
sys.exit(0 if first == had + 1 else 1)
PY
pass "no step repeated, none lost, one params digest per step on every rank"

echo "WALL test_training_ms=$(($(now_ms) - t_start))"
exit 0
