#!/usr/bin/env bash
# End-to-end: `elastic-agent run --smoke N` (issue 13, item 7) on 127.0.0.1.
#
#  - two agents of the built-in trainer with one shared checkpoint.dir:
#    the job forms at world 2, trains N steps, commits one checkpoint into
#    checkpoint.dir/smoke (the real directory's contents untouched), then
#    restores it into a fresh generation of the job (JOB_RESTORE: no node
#    offers its live state, so one rank reads the checkpoint and the other
#    receives it from that rank) whose params digest equals the workers'
#    before it; each agent verifies the checkpoint and loads it once more
#    into a fresh trainer of its own; both print the report and exit 0;
#    `ckpt verify` agrees;
#  - two agents with per-node checkpoint dirs (the default): no checkpoint
#    can be committed, both exit 1 with the report's FAIL rows, and the
#    controller says once, plainly, that checkpoint.dir is not shared
#    (each alert names the cause);
#  - one agent whose checkpoint.dir cannot be created: exit 1;
#  - a torchrun-mode program: still running at N s, drained, exit 0, its
#    output captured; a program that fails: exit 1 with its exit code and
#    message in the report.
source "$(dirname "$0")/lib.sh"
t_start=$(now_ms)

# A small model: the smoke run checks the flow, not the model.
small=(--set train.hidden=32 --set train.layers=1 --set train.embed_dim=8)

# smoke_pair NAME1 NAME2 N ARGS… — two agents with --smoke N, the second
# joining the first; waits for both to exit (RC1, RC2).
smoke_pair() {
  local n1=$1 n2=$2 n=$3
  shift 3
  start_agent "$n1" --smoke "$n" --set compute.min_nodes=2 "${small[@]}" "$@"
  start_agent "$n2" --smoke "$n" --set compute.min_nodes=2 "${small[@]}" "$@" \
    --join "${AGENT_ADDR[$n1]}"
  wait_exit "$n1" 30 || fail "$n1 did not exit"
  RC1=$EXIT_RC
  wait_exit "$n2" 30 || fail "$n2 did not exit"
  RC2=$EXIT_RC
}

say "two agents, one shared checkpoint dir: PASS"
SHARED=$EA_TMP/shared
mkdir -p "$SHARED"
echo "keep me" >"$SHARED/real-checkpoint-marker"
smoke_pair s1 s2 150 --set "checkpoint.dir=$SHARED"
for n in s1 s2; do
  log=$(agent_log "$n")
  grep -q '^smoke: PASS (8 passed, 0 failed)' "$log" || fail "$n report: $(grep -A12 '^smoke run' "$log")"
  grep -q '^PASS  restore     generation [0-9]* (fresh, world 2) loaded the checkpoint.*: params digest \([0-9a-f]*\) at step 150 = the workers. \1 before it$' "$log" ||
    fail "$n restore row: $(grep restore "$log")"
  # the fresh generation: no live state offered, the checkpoint of step 150 named
  grep -q ' generation committed gen=.* world=2 .* sync=none (no live state): resume 150 ' "$log" ||
    fail "$n: no generation resumed the checkpoint: $(grep -E 'committed gen|smoke' "$log")"
done
assert_eq "$RC1" 0 "s1 exit status"
assert_eq "$RC2" 0 "s2 exit status"
log=$(agent_log s1)
grep -q '^PASS  trained     steps 1..150 at world 2: [0-9.]* steps/s; loss [0-9.]* -> [0-9.]*' "$log" ||
  fail "trained row: $(grep trained "$log")"
grep -q '^PASS  reload      step-150.gen-[0-9]* loaded into a fresh trainer .* params digest \([0-9a-f]*\) = the workers. \1 at step 150' "$log" ||
  fail "reload row: $(grep reload "$log")"
# One rank read the checkpoint in the fresh generation (the sync root); the
# controller asked for it once.
assert_eq "$(cat "$(agent_log s1)" "$(agent_log s2)" | grep -c ' worker resumed from .*/step-150\.gen-')" 1 "ranks that read the checkpoint"
assert_eq "$(cat "$(agent_log s1)" "$(agent_log s2)" | grep -c ' job smoke run: generation [0-9]* reached train.steps 150 with its checkpoint committed; restoring it into a fresh generation')" 1 "restore orders"
grep -q '^PASS  checkpoint  step-150.gen-[0-9]* committed here: .*s from first shard to MANIFEST' "$(agent_log s1)" "$(agent_log s2)" ||
  grep -q 'committed here' "$(agent_log s1)" "$(agent_log s2)" || fail "no node committed the checkpoint"
grep -h '^PASS  \|^smoke' "$log"
[ "$(ls "$SHARED")" = "$(printf 'real-checkpoint-marker\nsmoke')" ] || fail "checkpoint.dir: $(ls "$SHARED")"
name=$(ls "$SHARED/smoke" | grep '^step-150\.gen-' | head -n1)
[ -n "$name" ] || fail "no step-150 checkpoint in $SHARED/smoke: $(ls "$SHARED/smoke")"
"$EA_BIN" ckpt verify "$SHARED/smoke" 150 >/dev/null || fail "ckpt verify disagrees"

say "two agents, per-node checkpoint dirs: FAIL, and said plainly"
smoke_pair u1 u2 40
assert_eq "$RC1" 1 "u1 exit status"
assert_eq "$RC2" 1 "u2 exit status"
for n in u1 u2; do
  grep -q '^smoke: FAIL' "$(agent_log "$n")" || fail "$n report"
  grep -q '^FAIL  job_end     exit status 5: the final checkpoint could not be committed' \
    "$(agent_log "$n")" || fail "$n job_end row: $(grep job_end "$(agent_log "$n")")"
done
said=$(cat "$(agent_log u1)" "$(agent_log u2)" | grep -c 'is not shared between the nodes: shards that other nodes wrote')
assert_eq "$said" 1 "the plain 'not shared' line, once"
cat "$(agent_log u1)" "$(agent_log u2)" | grep ' alert checkpoint step-40\.gen-[0-9]* not committed: checkpoint.dir .* is not shared between the nodes' >/dev/null ||
  fail "the alert does not name the cause: $(grep -h ' alert ' "$(agent_log u1)" "$(agent_log u2)" | head -3)"

say "one agent, a checkpoint dir that cannot be created: FAIL"
: >"$EA_TMP/a-file"
start_agent b1 --smoke 20 "${small[@]}" --set "checkpoint.dir=$EA_TMP/a-file/ckpt"
wait_exit b1 30 || fail "b1 did not exit"
assert_eq "$EXIT_RC" 1 "b1 exit status"
grep -q '^FAIL  job_end' "$(agent_log b1)" || fail "b1 report: $(grep -A8 '^smoke run' "$(agent_log b1)")"

say "a torchrun-mode program: N seconds, then drained"
start_agent p1 --smoke 3 --set distributed.scale_up_delay_ms=200 -- sh -c 'echo "hello from rank $RANK of $WORLD_SIZE"; sleep 60'
wait_exit p1 20 || fail "p1 did not exit"
assert_eq "$EXIT_RC" 0 "p1 exit status"
log=$(agent_log p1)
grep -q '^PASS  ran         still running after 3 s, then drained: exit status 0' "$log" || fail "p1 report: $(grep -A8 '^smoke run' "$log")"
grep -q '^PASS  output      1 line of the program' "$log" || fail "p1 output row"
grep -q '^smoke: PASS' "$log" || fail "p1 verdict"

say "a torchrun-mode program that fails"
start_agent p2 --smoke 20 --set runtime.max_restarts=0 -- sh -c 'echo "cannot open data" >&2; exit 7'
wait_exit p2 20 || fail "p2 did not exit"
assert_eq "$EXIT_RC" 1 "p2 exit status"
log=$(agent_log p2)
grep -q 'last failure: rank 0 on p2 exited with code 7: cannot open data' "$log" || fail "p2 failure line: $(grep -A8 '^smoke run' "$log")"
grep -q '^smoke: FAIL' "$log" || fail "p2 verdict"

pass "smoke runs: exit 0 when every check passed, 1 otherwise ($(($(now_ms) - t_start)) ms)"
