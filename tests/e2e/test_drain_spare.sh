#!/usr/bin/env bash
# End-to-end: a one-node job drained to its spare loses no steps
# (docs/operations.md "A checkpoint before a mass preemption").
#
# Built-in trainer, compute.max_nodes 1, checkpoints on but far apart
# (every 100000 steps): b1 trains at world 1, b2 waits as a ready spare.
# `drain b1`: the next generation would be b2 alone, which holds no state.
# Before, b2 resumed the last periodic checkpoint — here none, so step 0;
# on the GPU (scripts/gpu-check.sh) 100 steps were lost.  Now the
# controller holds b1's generation for one checkpoint of its current step
# (the last moment, as for a mass preemption), then b2 resumes it:
#  1. b2's first step is within a few steps of b1's last one;
#  2. the controller said why it held, the checkpoint was committed and b1
#     exited 0, with no preempted_checkpoint alert (a drain to a spare is
#     routine);
#  3. every step from 0 on was reported, and the steps b2 computed again
#     carry the digests b1 reported for them.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/pytorch_lib.sh"
B=(--set compute.max_nodes=1 --set distributed.scale_up_delay_ms=300 --set train.steps=100000000
  --set logging.level=debug --set checkpoint.dir="$EA_TMP/ck" --set checkpoint.save_interval_steps=100000)

say "1. b1 trains at world 1; b2 waits as its spare"
start_agent b1 "${B[@]}"
wait_for 30 steps_at b1 1 100 || fail "b1 does not train: $(tail -5 "$(agent_log b1)")"
start_agent b2 --join "${AGENT_ADDR[b1]}" "${B[@]}"
wait_for 30 output_is ready js b2 'd["spares"]["self"].get("state")' ||
  fail "b2 is no ready spare: $(ea_status b2 | sed -n '/^spares/,+2p')"
pass "b2 is b1's ready spare"

say "2. drain b1: one checkpoint of its current step, then b2 resumes it"
m2=$(size_of b2)
t0=$(now_ms)
"$EA_BIN" drain b1 --data-dir "${AGENT_DIR[b1]}/data" >/dev/null || fail "drain b1"
wait_for 30 steps_at b2 1 20 "$m2" || fail "b2 does not train after the drain: $(tail -5 "$(agent_log b2)")"
wait_exit b1 30 || fail "b1 did not exit after its drain"
assert_eq "$EXIT_RC" 0 "b1's exit status"
last1=$(last_step b1)
line=$(log_after b2 "$m2" | grep -m1 -E ' step worker=0 gen=[0-9]+ rank=0 world=1 ')
first2=$(grep -oE ' step=[0-9]+' <<<"$line" | cut -d= -f2)
echo "RECOVERY drain-to-spare ms=$(($(log_ts_ms "$line") - t0)) b1_last=$last1 b2_first=$first2"
[ "$first2" -gt $((last1 - 50)) ] ||
  fail "b2 began at step $first2, b1 had reached $last1: the drain lost $((last1 + 1 - first2)) steps"
# the controller says it (b2 or b1: the lower id; a controller outside the
# generation has b1 pick the step)
both=$(cat "$(agent_log b1)" "$(agent_log b2)")
grep -q 'every member drains and only spares would form the next generation: checkpoint of' <<<"$both" ||
  fail "no word of the hold: $(grep preempt <<<"$both" | tail -3)"
grep -qE "preempt .*committed .*letting the drained nodes go; the next generation resumes from it" <<<"$both" ||
  fail "no checkpoint committed for b2: $(grep preempt <<<"$both" | tail -3)"
grep -q 'kind=preempted_checkpoint' <<<"$both" && fail "a drain to a spare raised an alert"
pass "b2 began at step $first2, b1 had reached $last1"

say "3. every step reported; the ones computed again equal b1's"
stop_agent b2 TERM
wait_exit b2 30 || fail "b2 did not exit on SIGTERM"
out=$(resumed_steps 1 "$(agent_log b1)" "$(agent_log b2)") || fail "step reports: $out"
echo "$out"
grep -q '^steps 0\.\.' <<<"$out" || fail "the first step reported is not 0: $out"
pass "drain to a spare"
