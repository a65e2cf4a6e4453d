#!/usr/bin/env bash
# End-to-end: a PyTorch program using `import elastic_agent` (DDP, gloo;
# tests/python/torch_worker.py) under real agents on 127.0.0.1 in library
# mode (compute.protocol library, `run … -- python3 PROGRAM`); the agents put
# python/ on its PYTHONPATH themselves.
#
#  1. three agents: the program trains at world 3;
#  2. SIGKILL n3 (agent and worker): n1 and n2 go on at world 2 in the SAME
#     worker processes (same pids, no restart), from the step reached;
#  3. n4 joins: world 3 again, n4's first step is the survivors' next one
#     (it received the state by broadcast, it did not start from 0);
#  4. checkpoints commit through the agents, and `ckpt show` lists the
#     program's tensors (model.0.weight f32 16x8, …) from its ea-state table;
#  throughout 1–6: after every step all ranks of a generation report the
#     same parameters' digest, and every step number from 0 to the last was
#     reported in exactly one generation (none lost, none repeated) — except
#     at most one step that a node leaving completed alone (its ring
#     allreduce finished there and was aborted on the others), which the
#     survivors compute again without it;
#  5. `elastic-agent drain n4`: n4 exits 0, n1 and n2 go on at world 2 in the
#     same worker pids from the step after the last one completed at world 3;
#  6. n5 joins (world 3), then SIGTERM n5's agent: the same (exit 0, n1 and
#     n2 at world 2 in the same pids, no step lost or repeated);
#  7. kill everything; two fresh agents on the same checkpoint.dir resume
#     from the newest checkpoint: the digest loaded is the one logged after
#     that step, training goes on from there at world 2 to EA_TEST_STEPS,
#     every rank sends done, and both agents exit 0.
#
# Prints RECOVERY lines: SIGKILL / drain / SIGTERM → first step at world 2 (ms), with the
# detection bound.  Step reports are read from the agents' debug log.
source "$(dirname "$0")/lib.sh"
t_start=$(now_ms)
source "$(dirname "$0")/pytorch_lib.sh"

say "1. three agents, library mode: the program trains at world 3"
start_three
grep -q "library mode: workers get PYTHONPATH=$PWD/python" "$(agent_log n1)" || fail "no PYTHONPATH line"
assert_eq "$(js n1 'd["job"]["protocol"]')" library "status job.protocol"
# the program's report fields reach status: loss, digest, compute time
"$PY" -c 'import json,sys; w=json.load(sys.stdin)["workers"][0]; assert w["state"] == "training" and w["loss"] is not None and w["compute_ms"] >= 0 and w["digest"] != "0000000000000000", w' \
  < <(ea_status n1 --json) || fail "status workers[0] lacks the program's report fields: $(ea_status n1 --json | head -c 600)"
pass "world 3; worker pids $p1 $p2 $p3"

say "2. SIGKILL n3 (agent and worker): n1 and n2 go on at world 2 in the same processes"
bound=$(counter n1 detection_bound_ms)
m1=$(size_of n1) m2=$(size_of n2)
s_kill=$(last_step n1)
t_kill=$(now_ms)
kill -KILL -- "-${AGENT_PID[n3]}" "-$p3" 2>/dev/null
wait_for 40 steps_at n1 2 20 "$m1" || fail "n1 does not train at world 2: $(tail -5 "$(agent_log n1)")"
wait_for 40 steps_at n2 2 20 "$m2" || fail "n2 does not train at world 2"
s=$(first_ts n1 ' step worker=0 gen=[0-9]+ rank=[0-9]+ world=2 ' "$m1") || fail "n1: no step at world 2"
first2=$(log_after n1 "$m1" | grep -m1 -oE ' world=2 step=[0-9]+' | sed 's/.*step=//')
echo "RECOVERY library-node-kill kill_to_first_step_ms=$((s - t_kill)) bound_ms=$bound step_at_kill=$s_kill first_step_world2=$first2"
assert_eq "$(wpid n1)" "$p1" "n1's worker pid after the kill"
assert_eq "$(wpid n2)" "$p2" "n2's worker pid after the kill"
pid_running "$p1" && pid_running "$p2" || fail "a survivor's worker is gone"
grep -q 'worker 0 restart' "$(agent_log n1)" "$(agent_log n2)" && fail "a survivor's worker was restarted"
# The world-2 generation goes on from the highest step any survivor completed.
last3=$(cat "$(agent_log n1)" "$(agent_log n2)" | grep -oE ' world=3 step=[0-9]+' | sed 's/.*step=//' | sort -n | tail -n1)
((first2 >= s_kill)) || fail "world 2 began at step $first2, before the kill's step $s_kill"
assert_eq "$first2" "$((last3 + 1))" "world 2's first step vs the last step completed at world 3"
pass "world 2 in the same pids from step $first2 ($((s - t_kill)) ms after the SIGKILL)"

say "3. n4 joins: world 3 again, with the state"
m1=$(size_of n1)
start_agent n4 --join "$seed" "${J[@]}" "${PROG[@]}"
wait_for 60 steps_at n4 3 20 || fail "n4 does not train at world 3: $(tail -5 "$(agent_log n4)")"
wait_for 20 steps_at n1 3 20 "$m1" || fail "n1 is not at world 3 with n4"
p4=$(wpid n4)
track "$p4"
n4first=$(log_after n4 | grep -m1 -oE ' step worker=0 .* step=[0-9]+' | sed 's/.*step=//')
((n4first > first2)) || fail "n4's first step is $n4first: it did not receive the state"
grep -q 'every worker said hello: this node can be taken in' "$(agent_log n4)" || fail "n4: no hello gate line"
assert_eq "$(wpid n1)" "$p1" "n1's worker pid after the join"
pass "n4 joined at step $n4first with the survivors' state; n1 still pid $p1"

say "4. checkpoints commit; ckpt show lists the program's tensors"
wait_for 20 grep -q ' ckpt committed step-' "$(agent_log n1)" "$(agent_log n2)" "$(agent_log n4)" ||
  fail "no checkpoint committed"
m1=$(size_of n1)
wait_for 20 sh -c "tail -c +$m1 '$(agent_log n1)' '$(agent_log n2)' '$(agent_log n4)' | grep -q ' ckpt committed step-'" ||
  fail "no checkpoint committed at world 3 with n4"
show=$("$EA_BIN" ckpt show "$CK" 2>&1) || fail "ckpt show: $show"
assert_contains "$show" "model.0.weight  *f32  *16x8" "ckpt show tensor table"
assert_contains "$show" "optimizer.state.0.momentum_buffer" "ckpt show optimizer tensors"
"$EA_BIN" ckpt verify "$CK" >/dev/null 2>&1 || fail "ckpt verify"
check_steps "$(agent_log n1)" "$(agent_log n2)" "$(agent_log n3)" "$(agent_log n4)" || fail "step digests"
pass "checkpoints committed and verify; tensors listed; digests identical per step"

# survivors_in_place WHAT O1 O2 T0 — after a node left (log offsets O1, O2 of
# n1, n2 and epoch ms T0 taken just before it was told to): n1 and n2 train at world 2 in
# their first worker pids, from the step after the last one they completed at
# world 3, and neither worker was restarted.
survivors_in_place() {
  local what=$1 o1=$2 o2=$3 t0=$4 s first last
  wait_for 40 steps_at n1 2 20 "$o1" || fail "n1 does not train at world 2 after the $what: $(tail -5 "$(agent_log n1)")"
  wait_for 40 steps_at n2 2 20 "$o2" || fail "n2 does not train at world 2 after the $what: $(tail -5 "$(agent_log n2)")"
  s=$(first_ts n1 ' step worker=0 gen=[0-9]+ rank=[0-9]+ world=2 ' "$o1") || fail "n1: no step at world 2"
  first=$(log_after n1 "$o1" | grep -m1 -oE ' world=2 step=[0-9]+' | sed 's/.*step=//')
  # (the whole logs: the leaver can go before n1 or n2 logs a world-3 step past
  # O1/O2, and every earlier world-3 step is lower)
  last=$(cat "$(agent_log n1)" "$(agent_log n2)" | grep -oE ' world=3 step=[0-9]+' | sed 's/.*step=//' | sort -n | tail -n1)
  assert_eq "$first" "$((last + 1))" "world 2's first step after the $what vs the last step completed at world 3"
  assert_eq "$(wpid n1)" "$p1" "n1's worker pid after the $what"
  assert_eq "$(wpid n2)" "$p2" "n2's worker pid after the $what"
  pid_running "$p1" && pid_running "$p2" || fail "a survivor's worker is gone after the $what"
  grep -q 'worker 0 restart' "$(agent_log n1)" "$(agent_log n2)" && fail "a survivor's worker was restarted"
  echo "RECOVERY library-$what first_step_world2_ms=$((s - t0)) first_step_world2=$first"
  FIRST2=$first
}

say "5. elastic-agent drain n4: it exits 0, n1 and n2 go on at world 2 in the same processes"
m1=$(size_of n1) m2=$(size_of n2)
t0=$(now_ms)
out=$("$EA_BIN" drain n4 --data-dir "${AGENT_DIR[n1]}/data" 2>&1) || fail "drain command: $out"
assert_contains "$out" "asked n4 to drain" "drain command output"
wait_exit n4 45 || fail "n4 did not exit after the drain: $(tail -5 "$(agent_log n4)")"
assert_eq "$EXIT_RC" 0 "n4's exit status after the drain"
wait_for 15 sh -c "! kill -0 $p4 2>/dev/null" || fail "n4's worker still runs after the drain"
survivors_in_place drain "$m1" "$m2" "$t0"
pass "n4 drained and exited 0; n1 and n2 at world 2 in pids $p1 $p2 from step $FIRST2"

check_steps "$(agent_log n1)" "$(agent_log n2)" "$(agent_log n3)" "$(agent_log n4)" || fail "step digests"

say "6. n5 joins; SIGTERM n5's agent: it exits 0, n1 and n2 go on at world 2"
m1=$(size_of n1)
start_agent n5 --join "$seed" "${J[@]}" "${PROG[@]}"
wait_for 60 steps_at n5 3 20 || fail "n5 does not train at world 3: $(tail -5 "$(agent_log n5)")"
wait_for 20 steps_at n1 3 20 "$m1" || fail "n1 is not at world 3 with n5"
p5=$(wpid n5)
track "$p5"
m1=$(size_of n1) m2=$(size_of n2)
t0=$(now_ms)
stop_agent n5 TERM
wait_exit n5 45 || fail "n5 did not exit after SIGTERM: $(tail -5 "$(agent_log n5)")"
assert_eq "$EXIT_RC" 0 "n5's exit status after SIGTERM"
wait_for 15 sh -c "! kill -0 $p5 2>/dev/null" || fail "n5's worker still runs after SIGTERM"
survivors_in_place sigterm "$m1" "$m2" "$t0"
check_steps "$(agent_log n1)" "$(agent_log n2)" "$(agent_log n3)" "$(agent_log n4)" "$(agent_log n5)" || fail "step digests"
pass "n5 left on SIGTERM and exited 0; n1 and n2 at world 2 in pids $p1 $p2 from step $FIRST2"

say "7. kill everything; two fresh agents resume from the newest checkpoint"
for n in n1 n2; do kill -KILL -- "-${AGENT_PID[$n]}" 2>/dev/null; done
kill -KILL -- "-$p1" "-$p2" 2>/dev/null
wait_for 10 sh -c "! kill -0 $p1 2>/dev/null && ! kill -0 $p2 2>/dev/null" ||
  fail "workers still running after SIGKILL"
# The agents too, before LATEST is read: one still dying can commit the
# checkpoint whose shards it already had (a clean-clone CI run read
# step-560 here, then the resume loaded step-580).
for n in n1 n2; do wait_exit "$n" 10 || fail "$n still running after SIGKILL"; done
latest=$(cat "$CK/LATEST")
ls_step=$(sed -E 's/^step-([0-9]+)\..*/\1/' <<<"$latest")
want=$(cat "$(agent_log n1)" "$(agent_log n2)" "$(agent_log n4)" "$(agent_log n5)" |
  grep -m1 -oE " step worker=0 gen=[0-9]+ rank=[0-9]+ world=[0-9]+ step=$((ls_step - 1)) loss=\S+ digest=[0-9a-f]+" |
  sed 's/.*digest=//')
[ -n "$want" ] || fail "no digest logged for step $((ls_step - 1)) (checkpoint $latest)"
export EA_TEST_STEPS=$((ls_step + 30))
start_agent r1 "${J[@]}" "${PROG[@]}"
start_agent r2 --join "${AGENT_ADDR[r1]}" "${J[@]}" "${PROG[@]}"
for n in r1 r2; do
  wait_exit "$n" 60 || fail "$n did not finish: $(tail -5 "$(agent_log "$n")")"
  assert_eq "$EXIT_RC" 0 "$n's exit status after the job"
done
line=$(grep -h ' ckpt loaded ' "$(agent_log r1)" "$(agent_log r2)" | head -n1)
assert_contains "$line" "loaded $latest " "the checkpoint loaded"
assert_contains "$line" "digest=$want" "the digest loaded vs the one logged at step $((ls_step - 1))"
r_first=$(grep -m1 -oE ' step worker=0 .* world=2 step=[0-9]+' "$(agent_log r1)" | sed 's/.*step=//')
assert_eq "$r_first" "$ls_step" "the first step after the resume"
grep -q ' job finished: ' "$(agent_log r1)" || fail "r1 did not report the job finished"
check_steps "$(agent_log r1)" "$(agent_log r2)" || fail "resumed step digests"
pass "resumed $latest (digest $want) at world 2, trained to step $EA_TEST_STEPS; both agents exited 0"

echo "WALL test_pytorch_inplace_ms=$(($(now_ms) - t_start))"
exit 0
