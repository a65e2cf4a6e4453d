#!/usr/bin/env bash
# End-to-end: the job's lifecycle and exit status, outside torch.
#
#  1. the built-in trainer reaching train.steps (250, checkpoints every 100):
#     the final checkpoint (step-250, not a multiple of the interval) is
#     committed, every agent reports the job finished and exits 0, and
#     `ckpt ls` shows it; one agent started again with --resume-from 250
#     ends at once, exit 0;
#  2. a --resume-from that cannot resolve (a word, a step that is not in the
#     directory) exits 2 at start naming it, before anything listens; one
#     given to a torchrun-mode program is refused the same way; a program
#     given twice is refused too;
#  3. a failure loop: a program that dies at once (it prints a line on
#     stderr and exits 1) under two agents with runtime.max_restarts 4: the
#     generations back off (each restart waits longer: at least 3.75 s in
#     all instead of milliseconds), exactly 5 generations commit (the first
#     and 4 restarts, counted in the controller's log, not hundreds), one
#     churn alert names the reason and the count, and both agents then exit
#     3 with the program's stderr line in the alert; both alerts reach a
#     webhook receiver on 127.0.0.1 (generation_churn once, from the
#     controller; job_failed from each agent), their JSON bodies checked;
#  4. (root: a 1 MiB tmpfs, full before the job starts) the final checkpoint
#     fails, is retried (the log says when), and commits once the test frees
#     the disk: every agent exits 0 and step-300 verifies; with
#     checkpoint.timeout_seconds 3 and the disk never freed, every agent
#     exits 5 and the alert counts the retries.
source "$(dirname "$0")/lib.sh"
t_start=$(now_ms)
TINY=(--set train.context=8 --set train.embed_dim=16 --set train.hidden=64 --set train.layers=1
  --set distributed.global_batch=32 --set distributed.micro_batch=16
  --set distributed.scale_up_delay_ms=300 --set compute.min_nodes=3)

say "1. the built-in job reaches train.steps: final checkpoint committed, every agent exits 0"
CK=$EA_TMP/ck
JOB=("${TINY[@]}" --set train.steps=250 --set checkpoint.save_interval_steps=100
  --set checkpoint.dir="$CK")
start_agent n1 "${JOB[@]}"
start_agent n2 --join "${AGENT_ADDR[n1]}" "${JOB[@]}"
start_agent n3 --join "${AGENT_ADDR[n1]}" "${JOB[@]}"
for n in n1 n2 n3; do
  wait_exit "$n" 60 || fail "$n did not exit after train.steps: $(tail -5 "$(agent_log "$n")")"
  assert_eq "$EXIT_RC" 0 "$n's exit status"
  grep -q ' job finished: all 3 ranks reached train.steps 250 in generation [0-9]*; final checkpoint step-250 committed' "$(agent_log "$n")" ||
    fail "$n did not report the job finished: $(grep ' job ' "$(agent_log "$n")")"
done
ls=$("$EA_BIN" ckpt ls "$CK" 2>&1) || fail "ckpt ls: $ls"
grep -qE ' 250 .* complete +step-250\.gen-' <<<"$ls" || fail "no step-250 checkpoint: $ls"
"$EA_BIN" ckpt verify "$CK" 250 >/dev/null 2>&1 || fail "step-250 does not verify"
pass "every agent exited 0 after step 250; step-250 committed and verifies"

# A cold start from the final checkpoint itself has nothing left to train or
# to checkpoint: it ends at once, exit 0 (it used to wait for a final commit
# that nobody would write).
start_agent r1 "${JOB[@]}" --set compute.min_nodes=1 --resume-from 250
wait_exit r1 30 || fail "a resume from the final checkpoint did not end: $(tail -5 "$(agent_log r1)")"
assert_eq "$EXIT_RC" 0 "r1's exit status (resumed at train.steps)"
grep -q ' job finished: ' "$(agent_log r1)" || fail "r1 does not report the job finished"
pass "a cold start from step-250 with train.steps 250 ends at once, exit 0"

say "2. a --resume-from that cannot resolve exits 2 at start"
run_bad() { # NAME EXPECT-IN-LOG ARGS…
  local name=$1 want=$2 dir=$EA_TMP/$1
  shift 2
  mkdir -p "$dir"
  RC=0
  timeout 20 "$EA_BIN" run --name "$name" --bind 127.0.0.1:0 --data-dir "$dir/data" "$@" \
    >"$dir/log" 2>&1 </dev/null || RC=$?
  assert_eq "$RC" 2 "$name's exit status"
  grep -q -- "$want" "$dir/log" || fail "$name: the log does not say '$want': $(cat "$dir/log")"
  grep -q ' listen ' "$dir/log" && fail "$name started listening before refusing"
  return 0
}
run_bad b1 "--resume-from nosuch: no such checkpoint in $CK" --set checkpoint.dir="$CK" --resume-from nosuch
run_bad b2 "--resume-from 999: no such checkpoint in $CK" --set checkpoint.dir="$CK" --resume-from 999
run_bad b3 "--resume-from names a checkpoint of the built-in trainer" --resume-from 250 -- /bin/true
run_bad b4 "the program is given twice" --set compute.worker_command=/bin/true -- /bin/true
run_bad b5 "compute.protocol builtin runs the built-in trainer" --set compute.protocol=builtin -- /bin/true
pass "bad --resume-from (a word, a missing step, torchrun mode) and conflicting programs exit 2"

say "3. a failure loop backs off, raises one alert, then fails the job (exit 3)"
PROG=(-- /bin/sh -c 'echo "boom: the dataset is not mounted" >&2; exit 1')
start_receiver "$EA_TMP/recv"
J3=(--set compute.min_nodes=2 --set distributed.scale_up_delay_ms=100 --set runtime.max_restarts=4
  --set runtime.rendezvous_timeout_seconds=5 --set experiment.name=loop
  --set observability.alert_webhook="$RECV_URL/hook")
t_loop=$(now_ms)
start_agent f1 "${J3[@]}" "${PROG[@]}"
start_agent f2 --join "${AGENT_ADDR[f1]}" "${J3[@]}" "${PROG[@]}"
for n in f1 f2; do
  wait_exit "$n" 40 || fail "$n did not exit after the restarts were used up: $(tail -5 "$(agent_log "$n")")"
  assert_eq "$EXIT_RC" 3 "$n's exit status"
done
t_end=$(now_ms)
ctrl=f1
grep -q 'controller: the job restarts exhausted' "$(agent_log f2)" && ctrl=f2
gens=$(grep -c ' generation committed gen=' "$(agent_log "$ctrl")")
alerts=$(cat "$(agent_log f1)" "$(agent_log f2)" | grep -c ' alert generation churn:')
echo "LOOP generations=$gens churn_alerts=$alerts loop_ms=$((t_end - t_loop))"
assert_eq "$gens" 5 "generations committed in the failure loop (the first and 4 restarts)"
assert_eq "$alerts" 1 "churn alerts"
grep -qE ' alert generation churn: 3 generations in a row failed within 60 s of their commit: .* reported a failure; latest: rank [01] on f[12] exited with code 1: boom: the dataset is not mounted' \
  "$(agent_log "$ctrl")" || fail "the churn alert lacks the count, reason or failure: $(grep 'alert generation churn' "$(agent_log "$ctrl")")"
((t_end - t_loop >= 3750)) || fail "the loop did not back off: $((t_end - t_loop)) ms for 4 restarts"
for n in f1 f2; do
  grep -qE ' alert job failed \(restarts exhausted, exit status 3\): .*failing worker: rank [01] on f[12] exited with code 1: boom: the dataset is not mounted \(last lines of its stderr\)' "$(agent_log "$n")" ||
    fail "$n's job alert lacks the failing worker's stderr: $(grep 'alert job' "$(agent_log "$n")")"
done
# The deliveries (flushed before each agent exited).
b=$(posts generation_churn)
assert_eq "$(wc -l <<<"$b")" 1 "generation_churn POSTs"
"$PY" - "$b" "$ctrl" <<'EOF' || fail "generation_churn body: $b"
import json, re, sys
b = json.loads(sys.argv[1])
assert b["job"] == "loop" and b["node"] == sys.argv[2] and b["severity"] == "critical", b
assert b["status"] == "firing" and b["endsAt"] is None, b
assert re.match(r"generation churn: 3 generations in a row failed within 60 s of their commit: .*"
                r"latest: rank [01] on f[12] exited with code 1: boom: the dataset is not mounted", b["summary"]), b
EOF
b=$(posts job_failed)
assert_eq "$(wc -l <<<"$b")" 2 "job_failed POSTs (one per agent)"
"$PY" - "$b" <<'EOF' || fail "job_failed bodies: $b"
import json, re, sys
bs = [json.loads(l) for l in sys.argv[1].splitlines()]
assert sorted(b["node"] for b in bs) == ["f1", "f2"], bs
for b in bs:
    assert b["job"] == "loop" and b["severity"] == "critical", b
    assert re.match(r"job failed \(restarts exhausted, exit status 3\): .*failing worker: rank [01] on "
                    r"f[12] exited with code 1: boom: the dataset is not mounted", b["summary"]), b
EOF
pass "5 generations in $((t_end - t_loop)) ms, one churn alert, exit 3 with the program's stderr line; both alerts POSTed"

say "4. the final checkpoint on a full disk is retried: freed, the job succeeds; never freed, exit 5"
# A small tmpfs that is full before the job starts: every checkpoint fails,
# the final one (step 300) is retried until the test frees the disk.
if [ "$(id -u)" != 0 ] || ! command -v mount >/dev/null; then
  echo "skip part 4: a tmpfs needs root"
else
  FULL=$EA_TMP/full
  mkdir -p "$FULL"
  mount -t tmpfs -o size=1m tmpfs "$FULL" || fail "mount a tmpfs on $FULL"
  trap 'umount -l "$FULL" 2>/dev/null; ea_cleanup' EXIT
  fill() { dd if=/dev/zero of="$FULL/filler" bs=64k 2>/dev/null || true; }
  retried() { grep -q 'the final checkpoint (step 300) failed: .*trying again in' "$(agent_log "$1")"; }
  fill
  JF=("${TINY[@]}" --set train.steps=300 --set checkpoint.save_interval_steps=100
    --set checkpoint.dir="$FULL" --set checkpoint.timeout_seconds=120)
  start_agent d1 "${JF[@]}"
  start_agent d2 --join "${AGENT_ADDR[d1]}" "${JF[@]}"
  start_agent d3 --join "${AGENT_ADDR[d1]}" "${JF[@]}"
  ctrl=
  wait_for 60 sh -c "grep -lq 'the final checkpoint (step 300) failed: .*trying again in' $EA_TMP/d[123]/log" ||
    fail "no retry of the final checkpoint on the full disk: $(grep -h ' job \| ckpt ' "$EA_TMP"/d[123]/log | tail -5)"
  for n in d1 d2 d3; do retried "$n" && ctrl=$n; done
  agent_alive d1 && agent_alive d2 && agent_alive d3 || fail "an agent exited while the final checkpoint is retried"
  rm -f "$FULL/filler"
  for n in d1 d2 d3; do
    wait_exit "$n" 60 || fail "$n did not finish once the disk was freed: $(tail -3 "$(agent_log "$n")")"
    assert_eq "$EXIT_RC" 0 "$n's exit status after the retried final checkpoint"
  done
  grep -q 'trying the final checkpoint (step 300) again: retry' "$(agent_log "$ctrl")" || fail "$ctrl logged no retry"
  grep -q ' job finished: all 3 ranks reached train.steps 300 .*final checkpoint step-300 committed' "$(agent_log d1)" ||
    fail "d1 does not report the final checkpoint committed: $(grep ' job ' "$(agent_log d1)" | tail -3)"
  "$EA_BIN" ckpt verify "$FULL" 300 >/dev/null 2>&1 || fail "step-300 does not verify"
  pass "the final checkpoint failed on the full disk, was retried, committed once freed; every agent exited 0"

  rm -rf "${FULL:?}"/*
  fill
  JF=("${TINY[@]}" --set train.steps=300 --set checkpoint.save_interval_steps=100
    --set checkpoint.dir="$FULL" --set checkpoint.timeout_seconds=3)
  start_agent e1 "${JF[@]}"
  start_agent e2 --join "${AGENT_ADDR[e1]}" "${JF[@]}"
  start_agent e3 --join "${AGENT_ADDR[e1]}" "${JF[@]}"
  for n in e1 e2 e3; do
    wait_exit "$n" 60 || fail "$n did not give up on the full disk: $(tail -3 "$(agent_log "$n")")"
    assert_eq "$EXIT_RC" 5 "$n's exit status when the final checkpoint never commits"
    grep -qE 'alert job failed \(final checkpoint failed, exit status 5\): the final checkpoint \(step 300\) could not be committed in [0-9.]+ s \([0-9]+ retries; checkpoint.timeout_seconds 3.0\)' "$(agent_log "$n")" ||
      fail "$n's alert does not say why: $(grep 'alert job' "$(agent_log "$n")")"
  done
  pass "never freed: every agent exited 5 after checkpoint.timeout_seconds, the retries counted"
  umount -l "$FULL"
fi

echo "WALL test_job_ms=$(($(now_ms) - t_start))"
exit 0
