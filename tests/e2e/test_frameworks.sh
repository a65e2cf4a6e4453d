#!/usr/bin/env bash
# End-to-end: frameworks on top, unmodified (issue 25 item 5).  A PyTorch
# Lightning script and a Hugging Face Accelerate script, each written as its
# framework's docs show (examples/frameworks/lightning_ddp.py,
# examples/frameworks/accelerate_ddp.py: a small MLP regression on a seeded
# random data set, gloo on CPU, the framework's own checkpointing), each run
# by three agents on 127.0.0.1 in restart mode (`elastic-agent run … --
# $EA_PYTHON SCRIPT …`).  For each framework:
#
#  1. three agents: every rank starts, and every node's worker trains at world 3;
#  2. the framework has written a checkpoint (Lightning: ModelCheckpoint's
#     last.ckpt; Accelerate: save_state's step_N folder);
#  3. SIGKILL one node that is not the controller (agent and worker): both
#     survivors restart at world 2, and their workers resume from the
#     framework's checkpoint — the start line says resumed=yes at a step > 0
#     (a multiple of --save-every, no later than the last step completed at
#     world 3, the same on both), and steps go on at world 2 past it;
#  4. the finish file: rank 0 sees it, every rank stops at that step and exits
#     0, and both agents report the job finished and exit 0.
#
# What each framework needs from the torchrun environment: Accelerate
# (Accelerator(cpu=True), MULTI_CPU/gloo) reads RANK, WORLD_SIZE, LOCAL_RANK,
# LOCAL_WORLD_SIZE, MASTER_ADDR/PORT and nothing else; it runs at whatever
# size it is started with.  Lightning sees TORCHELASTIC_RUN_ID and uses its
# TorchElasticEnvironment, which raises at fit() unless devices * num_nodes ==
# WORLD_SIZE ("ValueError: You set `devices=1` and `num_nodes=3` in Lightning,
# but the product (1 * 3) does not match the world size (2)."), so a script
# with a fixed num_nodes cannot change size — under an elastic torchrun no more
# than here.  The Lightning script takes devices = LOCAL_WORLD_SIZE and
# num_nodes = WORLD_SIZE // LOCAL_WORLD_SIZE from the environment; under
# `torchrun --nnodes=1 --nproc_per_node=3` the same script runs (devices 3,
# num_nodes 1) and resumes from its last.ckpt under --nproc_per_node=2 alike.
#
# Prints RECOVERY lines per framework (ms from the SIGKILL to the world-2
# generation committed, to the resumed start line and to the first step at
# world 2) and the whole test's wall time.
source "$(dirname "$0")/lib.sh"
t_start=$(now_ms)
"$PY" -c 'import lightning, accelerate' 2>/dev/null || {
  echo "skip: $PY has neither lightning nor accelerate (scripts/venv.sh installs requirements.txt)"
  exit 77
}
# The agents start workers in their own sessions (no parent-death signal): a
# test that fails half-way would leave them training when lib.sh's trap kills
# the agents.  Every worker has this test's mktemp dir in its argv (--ckpt,
# --finish-file): kill the agents first (none can start another worker), then
# exactly those workers, by pid, then lib.sh's cleanup (logs, the dir).
fw_cleanup() {
  local d p cmd
  for p in "${EA_PGIDS[@]}"; do kill -KILL -- "-$p" 2>/dev/null; done
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = $$ ] && continue
    cmd=$( { tr '\0' ' ' <"$d/cmdline"; } 2>/dev/null) || continue
    [[ $cmd == *"$EA_TMP/"* ]] && kill -KILL "$p" 2>/dev/null
  done
  ea_cleanup
}
trap fw_cleanup EXIT

JOB=(--set compute.min_nodes=2 --set distributed.scale_up_delay_ms=300)
SAVE_EVERY=3

js() {
  ea_status "$1" --json 2>/dev/null |
    "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))' "$2" 2>/dev/null
}
log_after() { tail -c +"${2:-1}" "$(agent_log "$1")"; }
size_of() { stat -c %s "$(agent_log "$1")"; }
# FW is the framework's print prefix (lightning, accelerate).
at_world() { log_after "$1" "${3:-1}" | grep -qE "stdout \[rank [0-9]+\] $FW rank=[0-9]+ world=$2 step=[0-9]+ loss"; }
resumed_line() { log_after "$1" "${3:-1}" | grep -m1 -E "$FW rank=[0-9]+ world=$2 start step=[1-9][0-9]* resumed=yes"; }
resumed_at() { resumed_line "$@" >/dev/null; }
# last_step NAME W FROM — the highest step NAME's worker printed at world W after FROM.
last_step() {
  log_after "$1" "${3:-1}" | grep -oE "$FW rank=[0-9]+ world=$2 step=[0-9]+ loss" |
    sed -E 's/.* step=([0-9]+) .*/\1/' | sort -n | tail -n1
}
# steps_past NAME W FROM S — NAME trained at world W past step S.
steps_past() { local l; l=$(last_step "$1" "$2" "$3"); [ -n "$l" ] && [ "$l" -gt "$4" ]; }
first_ts() { # NAME REGEX FROM_BYTE → epoch ms of the first matching line
  local line
  line=$(log_after "$1" "${3:-1}" | grep -m1 -E "$2") || return 1
  log_ts_ms "$line"
}
# ckpts DIR — the framework's complete checkpoints there (Lightning's
# last.ckpt, Accelerate's step_N folders; not a step_N.tmp being written).
ckpts() {
  local f
  for f in "$1"/last.ckpt "$1"/step_*; do
    [ -e "$f" ] && [[ ${f##*/} =~ ^(last\.ckpt|step_[0-9]+)$ ]] && echo "${f##*/}"
  done
}
has_ckpt() { [ -n "$(ckpts "$1")" ]; }

# run_framework FW SCRIPT P — the scenario above with agents P1, P2, P3.
run_framework() {
  FW=$1
  local script=$PWD/$2 p=$3 ck=$EA_TMP/$1-ck fin=$EA_TMP/$1-finish n c s r t0 victim vw
  local -a prog=(-- "$PY" "$script" --steps 400 --save-every "$SAVE_EVERY" --step-sleep 0.1
    --ckpt "$ck" --finish-file "$fin")
  local -a nodes=("${p}1" "${p}2" "${p}3") survivors=()
  local r0=
  t0=$(now_ms)

  say "$FW 1. three agents run the script at world 3"
  start_agent "${p}1" "${JOB[@]}" "${prog[@]}"
  start_agent "${p}2" --join "${AGENT_ADDR[${p}1]}" "${JOB[@]}" "${prog[@]}"
  start_agent "${p}3" --join "${AGENT_ADDR[${p}1]}" "${JOB[@]}" "${prog[@]}"
  for n in "${nodes[@]}"; do
    wait_for 60 at_world "$n" 3 || fail "$FW: $n's worker does not train at world 3: $(tail -5 "$(agent_log "$n")")"
  done
  assert_eq "$(js "${p}1" 'd["job"]["protocol"]')" torchrun "$FW: status job.protocol"
  pass "$FW: 3 ranks train at world 3 ($(($(now_ms) - t0)) ms from the first agent's start)"

  say "$FW 2. the framework's own checkpoint is there"
  wait_for 30 has_ckpt "$ck" || fail "$FW: no checkpoint in $ck: $(ls -la "$ck" 2>&1)"
  pass "$FW: checkpoint $(ckpts "$ck" | tr '\n' ' ')"

  say "$FW 3. SIGKILL a node that is not the controller (agent and worker)"
  local ctl
  ctl=$(controller_of "${p}1")
  [ -n "$ctl" ] || fail "$FW: ${p}1 names no controller"
  for n in "${p}3" "${p}2" "${p}1"; do
    [[ $ctl == "$n "* ]] && continue
    victim=$n
    break
  done
  for n in "${nodes[@]}"; do [ "$n" != "$victim" ] && survivors+=("$n"); done
  vw=$(js "$victim" 'd["workers"][0]["pid"]')
  { [ -n "$vw" ] && [ "$vw" != 0 ]; } || fail "$FW: no worker pid for $victim"
  local -A mark=()
  for n in "${survivors[@]}"; do mark[$n]=$(size_of "$n"); done
  local before t_kill
  t_kill=$(now_ms)
  kill -KILL -- "-${AGENT_PID[$victim]}" "-$vw" 2>/dev/null
  say "$FW: killed $victim (controller: $ctl); survivors ${survivors[*]}"
  for n in "${survivors[@]}"; do
    wait_for 60 resumed_at "$n" 2 "${mark[$n]}" ||
      fail "$FW: $n's worker did not resume at world 2 from a checkpoint: $(log_after "$n" "${mark[$n]}" | grep -E "$FW rank|generation|rror" | tail -5)"
    # The last step completed at world 3 (none can complete after the kill:
    # each needs the dead rank's gradients).
    before=$(last_step "$n" 3)
    r=$(resumed_line "$n" 2 "${mark[$n]}" | sed -E 's/.* start step=([0-9]+) .*/\1/')
    (((r % SAVE_EVERY) == 0)) || fail "$FW: $n resumed at step $r, not a multiple of --save-every $SAVE_EVERY"
    assert_le "$r" "$before" "$FW: $n's resumed step vs the last step seen at world 3"
    wait_for 60 steps_past "$n" 2 "${mark[$n]}" $((r + 2)) ||
      fail "$FW: $n does not train at world 2 past step $r: $(tail -5 "$(agent_log "$n")")"
    [ -z "${r0:-}" ] || assert_eq "$r" "$r0" "$FW: $n's resumed step vs ${survivors[0]}'s (one checkpoint)"
    r0=$r
  done
  c=$(first_ts "${survivors[0]}" 'generation committed gen=.* world=2 ' "${mark[${survivors[0]}]}") ||
    fail "$FW: ${survivors[0]}: no world-2 commit line"
  local rs
  rs=$(first_ts "${survivors[0]}" "$FW rank=[0-9]+ world=2 start step=" "${mark[${survivors[0]}]}") ||
    fail "$FW: no start line at world 2"
  s=$(first_ts "${survivors[0]}" "$FW rank=[0-9]+ world=2 step=" "${mark[${survivors[0]}]}") ||
    fail "$FW: no step at world 2"
  echo "RECOVERY $FW node-kill kill_to_commit_ms=$((c - t_kill)) kill_to_resumed_start_ms=$((rs - t_kill))" \
    "kill_to_first_step_ms=$((s - t_kill)) resumed_step=$r last_step_before_kill=$before"
  agent_gone "$victim" || fail "$FW: $victim still runs after SIGKILL"
  pass "$FW: world 2 after the SIGKILL, resumed from the framework's checkpoint at step $r, training on"

  say "$FW 4. the finish file: every rank exits 0, both agents exit 0"
  touch "$fin"
  for n in "${survivors[@]}"; do
    wait_exit "$n" 60 || fail "$FW: $n did not exit after the finish file: $(tail -5 "$(agent_log "$n")")"
    assert_eq "$EXIT_RC" 0 "$FW: $n's exit status after the job finished"
    grep -q ' job finished: all 2 workers of generation [0-9]* exited 0' "$(agent_log "$n")" ||
      fail "$FW: $n did not report the job finished"
    log_after "$n" "${mark[$n]}" | grep -qE "$FW rank=[0-9]+ world=2 done step=" ||
      fail "$FW: $n's worker did not finish cleanly"
  done
  wait "${AGENT_PID[$victim]}" 2>/dev/null
  pass "$FW: job finished at world 2; ${survivors[*]} exited 0 ($(($(now_ms) - t0)) ms for $FW)"
}

run_framework lightning examples/frameworks/lightning_ddp.py l
run_framework accelerate examples/frameworks/accelerate_ddp.py a

echo "WALL test_frameworks_ms=$(($(now_ms) - t_start))"
exit 0
