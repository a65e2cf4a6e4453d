#!/usr/bin/env bash
# End-to-end: a checkpoint before a mass preemption (issue 30, item 2;
# docs/operations.md "A checkpoint before a mass preemption").
#
# Three agents, compute.min_nodes 2, a periodic checkpoint every INTERVAL
# steps, each polling its own fake metadata URL (http_receiver.py's
# /going/NAME).  Built-in trainer, then library mode (tests/python/
# torch_worker.py: DDP on gloo under elastic_agent):
#  1. the job trains and commits at least one periodic checkpoint;
#  2. notices reach two nodes at once: the one left would be fewer than
#     min_nodes, so the controller commits a checkpoint of the current
#     step first — step S, not a multiple of INTERVAL, newer than every
#     periodic one — logs it and raises preempted_checkpoint, and only then
#     lets the two go (their `left the cluster` lines come after the
#     commit; both exit 0); LATEST names that checkpoint;
#  3. every agent and worker is killed, two fresh agents (fresh data dirs)
#     start on the same checkpoint directory and resume from exactly step S;
#  4. (built-in) the controller is a spare: max_nodes 3, min_nodes 3, a
#     fourth agent with the lowest node id joins after the generation
#     formed, so it waits outside it and is elected; notices to two members:
#     the spare controller has a member pick the step, the checkpoint is
#     committed before the two leave, LATEST names it;
#  5. (built-in) it cannot finish in time: the survivor's worker is frozen
#     (SIGSTOP) before the notices, so no rank reaches the step asked for;
#     after runtime.preemption_grace_seconds (2 s) the controller says so
#     (preempted_checkpoint, critical, naming the last good checkpoint),
#     lets the two go, and LATEST still names the periodic checkpoint.
# Prints NOTICE→COMMIT: the seconds from the first notice line to the
# commit line, per mode.
source "$(dirname "$0")/lib.sh"
t_start=$(now_ms)

need_curl
start_receiver "$EA_TMP/srv"
SRV=$RECV_DIR
URL=$RECV_URL

js() {
  ea_status "$1" --json 2>/dev/null |
    "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))' "$2" 2>/dev/null
}
trains() {
  [ "$(js "$1" '"%s %d" % (d["generation"]["phase"], d["generation"]["world"])')" = "running $2" ]
}
ckpt_rows() { "$EA_BIN" ckpt ls "$1" 2>/dev/null | awk 'NR > 1 { print $(NF-1), $NF }'; }
complete_count() { ckpt_rows "$1" | grep -c '^complete '; }
latest() { cat "$1/LATEST" 2>/dev/null; }
has_complete() { [ "$(complete_count "$CK")" -ge 1 ]; }
step_of() { sed -n 's/^step-\([0-9]*\)\.gen-[0-9]*$/\1/p' <<<"$1"; }
worker_pids() { js "$1" '" ".join(str(w["pid"]) for w in d["workers"] if w["pid"])'; }
declare -A WK=()

# The tiny model of test_training.sh: ~1 ms steps.
TINY=(--set train.steps=1000000000 --set train.context=8 --set train.embed_dim=16
  --set train.hidden=64 --set train.layers=1 --set distributed.global_batch=32
  --set distributed.micro_batch=16)

# run_mode MODE INTERVAL ARGS… — the three steps above for one launch mode.
run_mode() {
  local mode=$1 interval=$2
  shift 2
  local -a prog=("$@")
  local p
  CK=$EA_TMP/ckpt-$mode
  mkdir -p "$CK"
  local -a JOB=(--set compute.min_nodes=2 --set distributed.scale_up_delay_ms=300
    --set checkpoint.dir="$CK" --set checkpoint.save_interval_steps="$interval"
    --set runtime.preemption_grace_seconds=15 --set runtime.preemption_metadata_url="$URL"
    --set experiment.name="preempt-$mode")
  [ "$mode" = builtin ] && JOB+=("${TINY[@]}")
  [ "$mode" = library ] && JOB+=(--set compute.protocol=library --set train.steps=100000000)

  say "$mode 1. three agents train, a periodic checkpoint every $interval steps"
  local a=${mode:0:1}1 b=${mode:0:1}2 c=${mode:0:1}3
  PYTHONPATH=$PWD/python start_agent "$a" "${JOB[@]}" --set runtime.preemption_notice="$URL/going/$a" "${prog[@]}"
  for n in "$b" "$c"; do
    PYTHONPATH=$PWD/python start_agent "$n" --join "${AGENT_ADDR[$a]}" "${JOB[@]}" \
      --set runtime.preemption_notice="$URL/going/$n" "${prog[@]}"
  done
  for n in "$a" "$b" "$c"; do wait_for 60 trains "$n" 3 || fail "$n does not train at world 3: $(ea_status "$n")"; done
  for n in "$a" "$b" "$c"; do
    for p in $(worker_pids "$n"); do EA_PGIDS+=("$p"); WK[$n]="${WK[$n]:-} $p"; done
  done
  wait_for 60 has_complete || fail "no periodic checkpoint: $("$EA_BIN" ckpt ls "$CK")"
  local periodic
  periodic=$(latest "$CK")
  pass "$mode: training at world 3; periodic checkpoint $periodic"

  say "$mode 2. notices to $b and $c at once"
  touch "$SRV/going-$b" "$SRV/going-$c"
  local logs=("$(agent_log "$a")" "$(agent_log "$b")" "$(agent_log "$c")")
  committed() { grep -hq ' preempt checkpoint step-[0-9]*\.gen-[0-9]* committed ' "${logs[@]}"; }
  wait_for 30 committed || fail "no checkpoint before the preemption: $(grep -h ' preempt \| drain ' "${logs[@]}" | tail -n 8)"
  local line name s
  line=$(grep -h ' preempt checkpoint step-[0-9]*\.gen-[0-9]* committed ' "${logs[@]}" | head -n1)
  echo "$line"
  name=$(grep -o 'step-[0-9]*\.gen-[0-9]*' <<<"$line" | head -n1)
  s=$(step_of "$name")
  ((s % interval != 0)) || echo "note: step $s happens to be a multiple of $interval"
  (($(step_of "$periodic") < s)) || fail "the preemption checkpoint $name is not newer than $periodic"
  grep -hq "alert checkpoint before a mass preemption: $name committed" "${logs[@]}" ||
    fail "no preempted_checkpoint alert: $(grep -h ' alert ' "${logs[@]}" | tail -n 3)"
  for n in "$b" "$c"; do
    wait_exit "$n" 40 || fail "$n did not leave after the checkpoint"
    assert_eq "$EXIT_RC" 0 "$n's exit status"
  done
  # Before they leave: the commit precedes both drained nodes' leave lines.
  local t_commit t_left t_notice
  t_commit=$(log_ts_ms "$line")
  for n in "$b" "$c"; do
    t_left=$(log_ts_ms "$(grep -h ' leave left the cluster' "$(agent_log "$n")" | tail -n1)")
    ((t_left >= t_commit)) || fail "$n left at $t_left, before the checkpoint was committed at $t_commit"
  done
  t_notice=$(grep -h ' notice preemption notice' "$(agent_log "$b")" "$(agent_log "$c")" | while read -r l; do log_ts_ms "$l"; done | sort -n | head -n1)
  assert_eq "$(latest "$CK")" "$name" "LATEST after the preemption"
  out=$("$EA_BIN" ckpt verify "$CK" 2>&1) || fail "ckpt verify: $out"
  echo "NOTICE→COMMIT $mode: $(awk -v a="$t_notice" -v b="$t_commit" 'BEGIN { printf "%.2f s", (b - a) / 1000 }') (step $s; periodic $periodic)"
  pass "$mode: $name committed before $b and $c left (exit 0), LATEST names it"

  say "$mode 3. everything killed; two fresh agents resume from exactly step $s"
  for n in "$a" "$b" "$c"; do kill -KILL -- "-${AGENT_PID[$n]}" 2>/dev/null; done
  for n in "$a" "$b" "$c"; do for p in ${WK[$n]:-}; do kill -KILL -- "-$p" 2>/dev/null; done; done
  wait_for 10 agent_gone "$a" || fail "$a survived SIGKILL"
  wait "${AGENT_PID[$a]}" 2>/dev/null
  local r1=${mode:0:1}r1 r2=${mode:0:1}r2
  PYTHONPATH=$PWD/python start_agent "$r1" "${JOB[@]}" "${prog[@]}"
  PYTHONPATH=$PWD/python start_agent "$r2" --join "${AGENT_ADDR[$r1]}" "${JOB[@]}" "${prog[@]}"
  for n in "$r1" "$r2"; do wait_for 60 trains "$n" 2 || fail "$n does not train at world 2: $(ea_status "$n")"; done
  for n in "$r1" "$r2"; do for p in $(worker_pids "$n"); do EA_PGIDS+=("$p"); done; done
  local loaded
  loaded=$(grep -h ' ckpt loaded ' "$(agent_log "$r1")" "$(agent_log "$r2")" | head -n1)
  [ -n "$loaded" ] || fail "no fresh agent loaded a checkpoint"
  echo "$loaded"
  assert_contains "$loaded" " ckpt loaded $name " "the checkpoint the cold start loaded"
  assert_contains "$loaded" " step=$s " "the step the cold start resumed at"
  for n in "$r1" "$r2"; do kill -KILL -- "-${AGENT_PID[$n]}" 2>/dev/null; done
  for n in "$r1" "$r2"; do wait "${AGENT_PID[$n]}" 2>/dev/null; done
  pass "$mode: the cold start resumed from $name (step $s), not $periodic"
}

# spare_controller — part 4.
spare_controller() {
  CK=$EA_TMP/ckpt-spare
  mkdir -p "$CK"
  local -a JOB=(--set compute.min_nodes=3 --set compute.max_nodes=3
    --set distributed.scale_up_delay_ms=300 --set checkpoint.dir="$CK"
    --set checkpoint.save_interval_steps=3000 --set runtime.preemption_grace_seconds=15
    --set runtime.preemption_metadata_url="$URL" --set experiment.name=preempt-spare "${TINY[@]}")
  say "spare 1. three members, then a spare with the lowest node id: the controller"
  start_agent c1 "${JOB[@]}" --set runtime.preemption_notice="$URL/going/c1"
  for n in c2 c3; do
    start_agent "$n" --join "${AGENT_ADDR[c1]}" "${JOB[@]}" --set runtime.preemption_notice="$URL/going/$n"
  done
  for n in c1 c2 c3; do wait_for 60 trains "$n" 3 || fail "$n does not train at world 3: $(ea_status "$n")"; done
  mkdir -p "$EA_TMP/c4/data" && chmod 700 "$EA_TMP/c4/data"
  echo 00000000000000000000000000000001 >"$EA_TMP/c4/data/node-id"
  start_agent c4 --join "${AGENT_ADDR[c1]}" "${JOB[@]}" --set runtime.preemption_notice="$URL/going/c4"
  is_ctrl() { [ "$(js c4 'd["controller"].get("self")')" = True ]; }
  wait_for 30 is_ctrl || fail "the spare c4 was not elected: $(ea_status c4 | head -n 12)"
  trains c4 3 && fail "c4 trains: it should be a spare"
  wait_for 60 has_complete || fail "no periodic checkpoint: $("$EA_BIN" ckpt ls "$CK")"
  local periodic
  periodic=$(latest "$CK")
  pass "c4 is a spare and the controller; periodic checkpoint $periodic"

  say "spare 2. notices to c2 and c3 at once"
  touch "$SRV/going-c2" "$SRV/going-c3"
  committed() { grep -q ' preempt checkpoint step-[0-9]*\.gen-[0-9]* committed ' "$(agent_log c4)"; }
  wait_for 30 committed || fail "no checkpoint before the preemption: $(grep -h ' preempt ' "$EA_TMP"/c?/log | tail -n 8)"
  local line name
  line=$(grep -h ' preempt checkpoint step-[0-9]*\.gen-[0-9]* committed ' "$(agent_log c4)" | head -n1)
  echo "$line"
  name=$(grep -o 'step-[0-9]*\.gen-[0-9]*' <<<"$line" | head -n1)
  grep -hq " preempt picking step $(step_of "$name") for the checkpoint" "$EA_TMP"/c[123]/log ||
    fail "no member picked step $(step_of "$name"): $(grep -h ' preempt ' "$EA_TMP"/c?/log | tail -n 6)"
  (($(step_of "$periodic") < $(step_of "$name"))) || fail "$name is not newer than $periodic"
  for n in c2 c3; do
    wait_exit "$n" 40 || fail "$n did not leave after the checkpoint"
    assert_eq "$EXIT_RC" 0 "$n's exit status"
    local t_left
    t_left=$(log_ts_ms "$(grep -h ' leave left the cluster' "$(agent_log "$n")" | tail -n1)")
    ((t_left >= $(log_ts_ms "$line"))) || fail "$n left before the checkpoint was committed"
  done
  assert_eq "$(latest "$CK")" "$name" "LATEST after the preemption"
  pass "the spare controller had a member pick the step: $name committed before c2 and c3 left"
}

# too_late — part 5.
too_late() {
  CK=$EA_TMP/ckpt-late
  mkdir -p "$CK"
  local -a JOB=(--set compute.min_nodes=2 --set distributed.scale_up_delay_ms=300
    --set checkpoint.dir="$CK" --set checkpoint.save_interval_steps=3000
    --set runtime.preemption_grace_seconds=2 --set runtime.preemption_metadata_url="$URL"
    --set experiment.name=preempt-late "${TINY[@]}")
  say "late 1. three agents train; a periodic checkpoint"
  start_agent d1 "${JOB[@]}" --set runtime.preemption_notice="$URL/going/d1"
  for n in d2 d3; do
    start_agent "$n" --join "${AGENT_ADDR[d1]}" "${JOB[@]}" --set runtime.preemption_notice="$URL/going/$n"
  done
  for n in d1 d2 d3; do wait_for 60 trains "$n" 3 || fail "$n does not train at world 3: $(ea_status "$n")"; done
  local w n p
  for n in d1 d2 d3; do for p in $(worker_pids "$n"); do EA_PGIDS+=("$p"); done; done
  wait_for 60 has_complete || fail "no periodic checkpoint: $("$EA_BIN" ckpt ls "$CK")"
  local periodic
  periodic=$(latest "$CK")
  say "late 2. d1's worker frozen, then notices to d2 and d3"
  w=$(worker_pids d1)
  kill -STOP "$w" || fail "cannot stop d1's worker $w"
  touch "$SRV/going-d2" "$SRV/going-d3"
  said() { grep -hq 'alert checkpoint before a mass preemption: step [0-9]* was not committed within 2 s' "$EA_TMP"/d?/log; }
  wait_for 30 said || { kill -CONT "$w"; fail "no alert for the late checkpoint: $(grep -h ' preempt \| alert ' "$EA_TMP"/d?/log | tail -n 6)"; }
  local line
  line=$(grep -h 'alert checkpoint before a mass preemption: step [0-9]* was not committed' "$EA_TMP"/d?/log | head -n1)
  echo "$line"
  assert_contains "$line" "severity=critical" "the late checkpoint's alert"
  assert_contains "$line" "($periodic) stays the newest" "the last good checkpoint named"
  for n in d2 d3; do
    wait_exit "$n" 30 || { kill -CONT "$w"; fail "$n did not leave after the grace"; }
    assert_eq "$EXIT_RC" 0 "$n's exit status"
  done
  kill -CONT "$w"
  assert_eq "$(latest "$CK")" "$periodic" "LATEST after the late checkpoint"
  out=$("$EA_BIN" ckpt verify "$CK" 2>&1) || fail "ckpt verify: $out"
  pass "not committed within the 2 s grace: said (critical), d2 and d3 left, LATEST still $periodic"
}

[[ ${EA_PREEMPT_MODES:-builtin library} == *builtin* ]] && run_mode builtin 3000
[[ ${EA_PREEMPT_MODES:-builtin library} == *builtin* ]] && spare_controller
[[ ${EA_PREEMPT_MODES:-builtin library} == *builtin* ]] && too_late
if [[ ${EA_PREEMPT_MODES:-builtin library} == *library* ]]; then
  "$PY" -c 'import msgpack' || fail "$PY lacks msgpack (scripts/deps.sh installs requirements.txt)"
  export EA_TEST_PACE=0.01
  run_mode library 100 -- "$PY" "$PWD/tests/python/torch_worker.py"
fi
echo "WALL $(((($(now_ms) - t_start) + 500) / 1000)) s"
