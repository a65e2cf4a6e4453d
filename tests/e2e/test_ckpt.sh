#!/usr/bin/env bash
# End-to-end: sharded checkpoints while real agents train on 127.0.0.1, all
# sharing one checkpoint directory (the shared file system of a cluster).
#
#  1. three agents train with checkpoint.save_interval_steps=20: checkpoints
#     are committed (LATEST moves), `ckpt ls` lists them with world 3,
#     every one has 3 shards, `ckpt verify` exits 0, and `status` reports
#     them (committed count, latest);
#  2. the operators' resume check: SIGKILL every agent and every worker
#     process group at once, start two NEW agents (fresh data dirs, so
#     their generations would start at 1 without the floor read from the
#     checkpoint directory, and the generation fence would refuse every
#     commit), compute.min_nodes=2: they load the newest complete
#     checkpoint — its step, not 0 — at world 2; the params digest they
#     load equals the digest the old workers logged for that step, the
#     first step they compute is that step, its loss equals the old W=3
#     loss within 1e-5 relative (only summation order differs), and they
#     commit new checkpoints of a newer generation;
#  3. crash points: a third agent joins; then, 20 times, an agent is
#     SIGKILLed while checkpoints are written and replaced by a new one
#     (fresh data dir, as a lost spot instance is): most die by an armed
#     fault point of their own checkpoint I/O (EA_CKPT_FAULT=P:N:kill, P =
#     open | write | fsync | torn, or rename on a replacement given the
#     lowest id so that it becomes the controller: a kill before MANIFEST or
#     between MANIFEST and LATEST), the rest by a signal at a random step.
#     After every crash `ckpt verify` (holding the directory lock, so
#     retention cannot delete under it) passes for every committed
#     checkpoint, and afterwards the group commits again.  The seed is
#     printed; EA_SEED=… replays the same choices;
#  4. stale writer: SIGSTOP the controller's agent (not its worker), at a
#     moment it does not hold the directory lock: its worker goes on to
#     stage the next checkpoint of the old generation, which the stopped
#     agent holds unwritten and unreported, and the other agents' reports
#     of that step queue up in its socket.  The others re-form and commit a
#     checkpoint of a newer generation; then SIGCONT: the old agent writes
#     its shard, completes the old checkpoint and tries to commit it — it is
#     refused with an alert, no checkpoint of the old generation newer than
#     those committed before the stop appears, and LATEST never names one;
#  5. full disk: the checkpoint directory on a 2 MiB tmpfs, in a private
#     mount namespace (`unshare -m`; the whole part is skipped — exit 77
#     after parts 1-4 passed — when that is not possible): checkpoints
#     commit until the disk is full, then one fails with "No space left on
#     device" and an alert in the log, training goes on, and every
#     checkpoint committed before still verifies in full.
#
# Prints figures: RESUME (checkpoint, load time, start to first new commit),
# CRASHES (the kill points used), STALE (stop to the newer commit, and how
# the old checkpoint was refused), WALL.
SELF=$(realpath "$0")
source "$(dirname "$0")/lib.sh"
t_start=$(now_ms)

# The tiny model of test_training.sh: ~1 ms steps, a 340 KB state.
TINY=(--set train.steps=1000000000 --set train.context=8 --set train.embed_dim=16
  --set train.hidden=64 --set train.layers=1 --set distributed.global_batch=32
  --set distributed.micro_batch=16 --set distributed.scale_up_delay_ms=300)
INTERVAL=20

# js NAME EXPR — evaluate EXPR over NAME's status JSON (d).
js() {
  ea_status "$1" --json 2>/dev/null |
    "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))' "$2" 2>/dev/null
}
trains() {
  [ "$(js "$1" '"%s %d" % (d["generation"]["phase"], d["generation"]["world"])')" = "running $2" ]
}
last_step() { js "$1" 'd["generation"]["last_step"]'; }
advanced() {
  local s
  s=$(last_step "$1")
  [ -n "$s" ] && ((s > $2))
}
worker_pid() { js "$1" 'd["workers"][0]["pid"]'; }
# track_worker NAME — remember NAME's worker (lib.sh's cleanup ends its
# process group; kill_node too, even once the agent is gone).
declare -A WK=()
track_worker() {
  local p
  p=$(worker_pid "$1")
  [ -n "$p" ] && [ "$p" != 0 ] && EA_PGIDS+=("$p") && WK[$1]=$p
  echo "$p"
}
# launch NAME [flags…] — start_agent, but append to NAME's log (restarts
# keep the history), pass EA_CKPT_FAULT=$FAULT when FAULT is set, and
# restart a node on the addresses it had (a restarted machine keeps its
# ports; a member that comes back elsewhere before it was declared dead is
# another case, see the report of this test's author).
declare -A CTL_ADDR=()
launch() {
  local name=$1 dir
  shift
  dir=$EA_TMP/$name
  mkdir -p "$dir"
  local before bind=(--bind 127.0.0.1:0)
  [ -n "${AGENT_ADDR[$name]:-}" ] &&
    bind=(--bind "${AGENT_ADDR[$name]}" --control-bind "${CTL_ADDR[$name]}")
  before=$(grep -c ' listen .*gossip=' "$dir/log" 2>/dev/null)
  if [ -n "${FAULT:-}" ]; then
    EA_CKPT_FAULT=$FAULT setsid "$EA_BIN" run --name "$name" "${bind[@]}" \
      --data-dir "$dir/data" "$@" >>"$dir/log" 2>&1 </dev/null &
  else
    setsid "$EA_BIN" run --name "$name" "${bind[@]}" --data-dir "$dir/data" "$@" \
      >>"$dir/log" 2>&1 </dev/null &
  fi
  local pid=$!
  EA_PGIDS+=("$pid")
  AGENT_PID[$name]=$pid
  AGENT_DIR[$name]=$dir
  listening() { (($(grep -c ' listen .*gossip=' "$dir/log") > ${before:-0})); }
  wait_for 10 listening || fail "agent $name did not start listening: $(tail -n 5 "$dir/log")"
  AGENT_ADDR[$name]=$(grep -o 'gossip=[0-9.]*:[0-9]*' "$dir/log" | tail -n1 | cut -d= -f2)
  CTL_ADDR[$name]=$(grep -o 'control=[0-9.]*:[0-9]*' "$dir/log" | tail -n1 | cut -d= -f2)
}
# kill_node NAME — SIGKILL NAME's agent and its worker's process group, reap.
kill_node() {
  local w=${WK[$1]:-}
  agent_alive "$1" && w=$(worker_pid "$1")
  kill -KILL -- "-${AGENT_PID[$1]}" 2>/dev/null
  [ -n "$w" ] && [ "$w" != 0 ] && kill -KILL -- "-$w" 2>/dev/null
  wait_for 10 agent_gone "$1" || fail "$1 survived SIGKILL"
  wait "${AGENT_PID[$1]}" 2>/dev/null
  [ -z "$w" ] || [ "$w" = 0 ] || wait_for 10 eval '! pid_running '"$w" || fail "$1's worker $w survived"
}

# ckpt_rows DIR — "STATE NAME" per step directory (ls prints SIZE with a space).
ckpt_rows() { "$EA_BIN" ckpt ls "$1" 2>/dev/null | awk 'NR > 1 { print $(NF-1), $NF }'; }
complete_count() { ckpt_rows "$1" | grep -c '^complete '; }
newest_complete() { ckpt_rows "$1" | awk '$1 == "complete" { print $2; exit }'; }
latest() { cat "$1/LATEST" 2>/dev/null; }
# commits_after DIR NAME — LATEST names a checkpoint newer than NAME.
gen_of() { sed -n 's/^step-[0-9]*\.gen-\([0-9]*\)$/\1/p' <<<"$1"; }
step_of() { sed -n 's/^step-\([0-9]*\)\.gen-[0-9]*$/\1/p' <<<"$1"; }
latest_newer() {
  local l
  l=$(latest "$1")
  [ -n "$l" ] && [ "$l" != "$2" ] && { (($(gen_of "$l") > $(gen_of "$2"))) ||
    { (($(gen_of "$l") == $(gen_of "$2"))) && (($(step_of "$l") > $(step_of "$2"))); }; }
}
latest_gen_above() {
  local l
  l=$(latest "$1")
  [ -n "$l" ] && (($(gen_of "$l") > $2))
}
# verify_locked DIR — `ckpt verify` of every checkpoint while holding the
# directory's lock, which commits and retention take too: nothing is
# committed or deleted while it reads.
verify_locked() { flock "$1/.lock" "$EA_BIN" ckpt verify "$1"; }

CK=$EA_TMP/ckpt
mkdir -p "$CK"
JOB=("${TINY[@]}" --set checkpoint.dir="$CK" --set checkpoint.save_interval_steps=$INTERVAL)

if [ "${1:-}" = --full-disk ]; then
  # ---- part 5, run by part 5 below inside `unshare -m` ----------------------
  mount -t tmpfs -o size=2m tmpfs "$CK" || exit 77
  # keep_last large: retention never frees space, so once a shard does not
  # fit nothing will again (a failed write removes its own partial file).
  FJOB=("${JOB[@]}" --set checkpoint.keep_last=1000 --set compute.min_nodes=2)
  launch f1 "${FJOB[@]}"
  launch f2 --join "${AGENT_ADDR[f1]}" "${FJOB[@]}"
  for n in f1 f2; do wait_for 30 trains "$n" 2 || fail "$n does not train at world 2"; done
  for n in f1 f2; do track_worker "$n" >/dev/null; done
  nospace() { grep -hq 'alert checkpoint .*No space left on device' "$EA_TMP"/f?/log; }
  wait_for 30 nospace || fail "no ENOSPC alert: $(df -h "$CK" | tail -1)"
  line=$(grep -h 'alert checkpoint .*No space left on device' "$EA_TMP"/f?/log | head -n1)
  echo "ENOSPC alert: ${line:0:300}"
  n_ok=$(complete_count "$CK")
  ((n_ok >= 1)) || fail "no checkpoint was committed before the disk filled"
  at=$(last_step f1)
  wait_for 20 advanced f1 $((at + 5 * INTERVAL)) || fail "training stopped after the full disk"
  failed=$(js f1 'd["checkpoint"]["failed"] + 0' 2>/dev/null)
  failed2=$(js f2 'd["checkpoint"]["failed"] + 0' 2>/dev/null)
  ((${failed:-0} + ${failed2:-0} >= 1)) || fail "status counts no failed checkpoint"
  out=$(verify_locked "$CK" 2>&1) || fail "a checkpoint committed before the full disk does not verify: $out"
  pass "full disk: ENOSPC alert, training went on (step $at -> $(last_step f1)), $n_ok committed checkpoint(s) verify"
  exit 0
fi

say "1. three agents train with a checkpoint every $INTERVAL steps"
DJOB=("${JOB[@]}" --log-level debug)
launch n1 "${DJOB[@]}"
seed_addr=${AGENT_ADDR[n1]}
launch n2 --join "$seed_addr" "${DJOB[@]}"
launch n3 --join "$seed_addr" "${DJOB[@]}"
for n in n1 n2 n3; do wait_for 30 trains "$n" 3 || fail "$n does not train at world 3: $(ea_status "$n")"; done
for n in n1 n2 n3; do track_worker "$n" >/dev/null; done
world3() { [ "$("$EA_BIN" ckpt ls "$CK" | awk '$(NF-1) == "complete" && $(NF-5) == 3' | wc -l)" -ge 2 ]; }
wait_for 30 world3 || fail "no world-3 checkpoints: $("$EA_BIN" ckpt ls "$CK")"
ls_out=$("$EA_BIN" ckpt ls "$CK") || fail "ckpt ls exits non-zero: $ls_out"
echo "$ls_out" | head -n 5
out=$(verify_locked "$CK" 2>&1) || fail "ckpt verify: $out"
ctrl_committed=0
for n in n1 n2 n3; do
  c=$(js "$n" 'd["checkpoint"]["committed"]')
  ctrl_committed=$((ctrl_committed + ${c:-0}))
done
((ctrl_committed >= 2)) || fail "status reports $ctrl_committed committed checkpoints"
[ -n "$(js n1 'd["checkpoint"]["latest"]')" ] || fail "n1's status names no latest checkpoint"
human=$(ea_status n1) || fail "status"
assert_contains "$human" "^checkpoint: every $INTERVAL steps" "status checkpoint line"
grep -hq ' ckpt committed step-.* shards=3/3 ' "$EA_TMP"/n?/log || fail "no committed line in the logs"
pass "$(complete_count "$CK") complete checkpoints of world 3, 3 shards each, verify ok; LATEST $(latest "$CK")"

say "2. SIGKILL every agent and worker; two new agents resume at world 2"
wait_for 20 advanced n1 $(($(last_step n1) + 2 * INTERVAL)) || fail "n1 does not advance"
declare -A WPID=()
for n in n1 n2 n3; do WPID[$n]=$(worker_pid "$n"); done
for n in n1 n2 n3; do kill -KILL -- "-${AGENT_PID[$n]}" "-${WPID[$n]}" 2>/dev/null; done
for n in n1 n2 n3; do wait_for 10 agent_gone "$n" || fail "$n survived SIGKILL"; done
gone_w() { for p in "${WPID[@]}"; do pid_running "$p" && return 1; done; return 0; }
wait_for 10 gone_w || fail "a worker survived SIGKILL"
want=$(newest_complete "$CK")
[ -n "$want" ] || fail "no complete checkpoint after the kill"
# Nothing runs now: every complete checkpoint has its 3 shard files and a
# manifest that `ckpt show` prints.
for name in $(ckpt_rows "$CK" | awk '$1 == "complete" { print $2 }'); do
  show=$("$EA_BIN" ckpt show "$CK" "$CK/$name" 2>&1) || fail "ckpt show $name: $show"
  assert_contains "$show" "world size     3" "$name's world size"
  n_sh=$(ls "$CK/$name" | grep -c '^shard-[0-2]-of-3\.bin$')
  assert_eq "$n_sh" 3 "shard files of $name"
done
want_step=$(step_of "$want") want_gen=$(gen_of "$want")
echo "newest complete checkpoint after the kill: $want (LATEST: $(latest "$CK"))"
# The digest the old workers logged after completing step index S-1 (the
# checkpoint of step count S holds the state after S steps), and the loss
# they logged for step index S, if they got that far.
read -r old_digest old_loss < <("$PY" - "$want_step" "$want_gen" "$EA_TMP"/n?/log <<'PY'
import re, sys
s, g = int(sys.argv[1]), int(sys.argv[2])
pat = re.compile(r' step worker=\d+ gen=(\d+) rank=\d+ world=\d+ step=(\d+) loss=(\S+) digest=([0-9a-f]+)')
dig, loss = set(), set()
for path in sys.argv[3:]:
    for line in open(path, errors="replace"):
        m = pat.search(line)
        if not m:
            continue
        if int(m.group(1)) == g and int(m.group(2)) == s - 1:
            dig.add(m.group(4))
        if int(m.group(2)) == s:
            loss.add(m.group(3))
print(",".join(sorted(dig)) or "none", sorted(loss)[0] if loss else "none")
PY
)
[ "$old_digest" != none ] && [[ $old_digest != *,* ]] ||
  fail "the old workers' digests at step index $((want_step - 1)): '$old_digest'"
# Faster failure detection than the defaults (suspicion 120..360 ms), so
# that each crash below costs about half a second of re-formation.
RJOB=("${DJOB[@]}" --set compute.min_nodes=2 --set membership.probe_interval_ms=60
  --set membership.probe_timeout_ms=30 --set membership.suspicion_mult=2
  --set distributed.scale_up_delay_ms=100)
t_res=$(now_ms)
launch r1 "${RJOB[@]}"
launch r2 --join "${AGENT_ADDR[r1]}" "${RJOB[@]}"
for n in r1 r2; do wait_for 30 trains "$n" 2 || fail "$n does not train at world 2: $(ea_status "$n")"; done
for n in r1 r2; do track_worker "$n" >/dev/null; done
loaded=$(grep -h ' ckpt loaded ' "$EA_TMP"/r?/log | head -n1)
[ -n "$loaded" ] || fail "no agent logged a loaded checkpoint: $(grep -h 'resume\|no checkpoint' "$EA_TMP"/r?/log | head -3)"
echo "$loaded"
assert_contains "$loaded" " ckpt loaded $want " "the checkpoint loaded"
assert_contains "$loaded" " step=$want_step digest=$old_digest " "step and params digest loaded"
first=$(grep -h ' step worker=0 .* world=2 ' "$EA_TMP"/r?/log | head -n1)
first_step=$(sed -n 's/.* step=\([0-9]*\) .*/\1/p' <<<"$first")
assert_eq "$first_step" "$want_step" "the first step computed after the resume"
if [ "$old_loss" != none ]; then
  new_loss=$(sed -n 's/.* loss=\([^ ]*\) .*/\1/p' <<<"$first")
  awk -v a="$old_loss" -v b="$new_loss" 'BEGIN { d = (a - b) / a; if (d < 0) d = -d; exit !(d < 1e-5) }' ||
    fail "loss of step $want_step: $new_loss at world 2, $old_loss at world 3"
fi
resumed_name() { js "$1" '(d["checkpoint"]["resumed"] or {}).get("name", "")'; }
assert_eq "$(resumed_name r1)$(resumed_name r2)" "$want" "status: resumed from"
wait_for 30 latest_gen_above "$CK" "$want_gen" ||
  fail "no checkpoint of a newer generation committed after the resume (LATEST $(latest "$CK"))"
grep -q 'generations formed here start above it' "$(agent_log r1)" || fail "r1 did not take the generation floor"
echo "RESUME checkpoint=$want loaded_ms=$(sed -n 's/.* seconds=\([0-9.]*\).*/\1/p' <<<"$loaded" | awk '{ printf "%.1f", $1 * 1000 }') start_to_new_commit_ms=$(($(now_ms) - t_res))"
pass "resumed from $want at world 2 (digest $old_digest, first step $first_step, loss ${old_loss} vs ${new_loss:-?}); now LATEST $(latest "$CK")"

say "3. crash points: 20 SIGKILLs of an agent while checkpoints are written"
# A killed member is replaced by a new one (fresh data dir and id), as a
# spot instance is: a member that failed a formation sits out the next
# rendezvous timeout (rdzv/rdzv.c), so restarting the same identity would
# cost that timeout each round.
launch r3 --join "${AGENT_ADDR[r1]}" "${RJOB[@]}"
ALIVE=(r1 r2 r3)
for n in "${ALIVE[@]}"; do wait_for 30 trains "$n" 3 || fail "$n does not train at world 3: $(ea_status "$n")"; done
for n in "${ALIVE[@]}"; do track_worker "$n" >/dev/null; done
SEED=${EA_SEED:-$(($(date +%s%N) / 1000 % 2147483647))}
echo "crash points: EA_SEED=$SEED"
RANDOM=$SEED
POINTS=(open write fsync torn rename)
declare -A ARMED=()
kills_fault=0 kills_signal=0 points_used=()
all_train() {
  local n
  for n in "${ALIVE[@]}"; do trains "$n" "$1" || return 1; done
}
victim=${ALIVE[$((RANDOM % 3))]}
for round in $(seq 1 20); do
  if [ -n "${ARMED[$victim]:-}" ]; then
    # armed at its start: it SIGKILLs itself inside its own checkpoint I/O
    wait_for 15 agent_gone "$victim" ||
      fail "round $round (EA_SEED=$SEED): $victim armed with ${ARMED[$victim]} did not die"
    kills_fault=$((kills_fault + 1))
    points_used+=("${ARMED[$victim]}")
  else
    wait_for 10 advanced "$victim" $(($(last_step "$victim") + RANDOM % (3 * INTERVAL))) ||
      fail "round $round: $victim does not train"
    kills_signal=$((kills_signal + 1))
  fi
  kill_node "$victim"
  out=$(verify_locked "$CK" 2>&1) || fail "round $round (EA_SEED=$SEED): after killing $victim: $out"
  rest=()
  for n in "${ALIVE[@]}"; do [ "$n" != "$victim" ] && rest+=("$n"); done
  ALIVE=("${rest[@]}")
  # The replacement is the next victim two times in three, armed with a
  # fault point; "rename" only fires on the controller, so a node armed
  # with it gets an id that sorts first (the election's lowest id).
  new=c$round
  FAULT=
  mkdir -p "$EA_TMP/$new/data"
  if ((RANDOM % 3 != 0)); then
    p=${POINTS[$((RANDOM % 5))]}
    FAULT="$p:$((1 + RANDOM % 3)):kill"
    [ "$p" = rename ] && printf '%030x%02x\n' 0 "$round" >"$EA_TMP/$new/data/node-id"
    next=$new
  else
    next=${ALIVE[$((RANDOM % 2))]}
  fi
  ARMED[$new]=$FAULT
  launch "$new" --join "${AGENT_ADDR[${ALIVE[0]}]}" "${RJOB[@]}"
  FAULT=
  ALIVE+=("$new")
  if [ -z "${ARMED[$new]}" ]; then
    wait_for 30 all_train 3 || fail "round $round: the group does not train at world 3 with $new"
  fi
  track_worker "$new" >/dev/null
  victim=$next
done
# the last replacement may still be armed: let it fire, then replace it clean
if [ -n "${ARMED[$victim]:-}" ]; then
  wait_for 15 agent_gone "$victim" || fail "$victim armed with ${ARMED[$victim]} did not die"
  kill_node "$victim"
  points_used+=("${ARMED[$victim]}")
  kills_fault=$((kills_fault + 1))
  rest=()
  for n in "${ALIVE[@]}"; do [ "$n" != "$victim" ] && rest+=("$n"); done
  ALIVE=("${rest[@]}")
  launch c21 --join "${AGENT_ADDR[${ALIVE[0]}]}" "${RJOB[@]}"
  ALIVE+=(c21)
fi
wait_for 30 all_train 3 || fail "the group does not train at world 3 after the crashes"
for n in "${ALIVE[@]}"; do track_worker "$n" >/dev/null; done
before=$(latest "$CK")
wait_for 30 latest_newer "$CK" "$before" || fail "no checkpoint committed after the crashes"
out=$(verify_locked "$CK" 2>&1) || fail "after the crashes (EA_SEED=$SEED): $out"
echo "CRASHES fault_kills=$kills_fault signal_kills=$kills_signal points=${points_used[*]}"
pass "$((kills_fault + kills_signal)) crashes, every committed checkpoint verified after each; LATEST $(latest "$CK")"

say "4. stale writer: SIGSTOP the controller's agent, newer generation commits, SIGCONT"
X=$(for n in "${ALIVE[@]}"; do echo "$(js "$n" 'd["self"]["id"]') $n"; done | sort | head -n1 | cut -d' ' -f2)
gen_x=$(js "$X" 'd["generation"]["gen"]')
before_gen=$(gen_of "$(latest "$CK")")
# the newest checkpoint of X's generation committed before the stop
old_top=$(ckpt_rows "$CK" | awk -v g="$gen_x" '$1 == "complete" { split($2, a, /[-.]/); if (a[4] == g) { print a[2]; exit } }')
# Stop it while it does not hold the directory lock (flock, shown in
# /proc/locks): commits and retention take that lock, and a controller
# frozen inside a commit would hold off its successor's commits until it
# runs again (docs/checkpoints.md, "Known limits").
lock_ino=$(stat -c %i "$CK/.lock")
stopped_unlocked() {
  kill -STOP "${AGENT_PID[$X]}"
  if awk -v p="${AGENT_PID[$X]}" -v i=":$lock_ino" '$2 == "FLOCK" && $5 == p && substr($6, length($6) - length(i) + 1) == i { f = 1 } END { exit !f }' /proc/locks; then
    kill -CONT "${AGENT_PID[$X]}"
    return 1
  fi
}
t_stop=$(now_ms)
wait_for 10 stopped_unlocked || fail "$X always held the checkpoint directory lock"
others=()
for n in "${ALIVE[@]}"; do [ "$n" != "$X" ] && others+=("$n"); done
for n in "${others[@]}"; do wait_for 30 trains "$n" 2 || { kill -CONT "${AGENT_PID[$X]}"; fail "$n did not re-form without the stopped $X"; }; done
wait_for 30 latest_gen_above "$CK" "$gen_x" || { kill -CONT "${AGENT_PID[$X]}"; fail "no newer generation committed while $X was stopped"; }
newer=$(latest "$CK")
t_newer=$(now_ms)
kill -CONT "${AGENT_PID[$X]}"
# After SIGCONT the stopped agent writes the shard its worker staged,
# completes that old-generation checkpoint and commits it — refused: by the
# generation fence (-ESTALE, "stale"), or earlier, because the new
# controller's retention already removed the other ranks' shards of that
# abandoned step ("failed … No such file").  Either way an alert.
refused_re="alert checkpoint (stale|failed) step-[0-9]*\\.gen-$gen_x .*(refused|No such file)"
refused() { grep -Eq "$refused_re" "$(agent_log "$X")"; }
wait_for 20 refused || fail "$X did not try to commit its old-generation checkpoint: $(grep -h ' ckpt \| alert ' "$(agent_log "$X")" | tail -n 5)"
refusal=$(grep -Eh "$refused_re" "$(agent_log "$X")" | head -n1)
echo "${refusal:0:300}"
wait_for 30 all_train 3 || fail "the group does not train at world 3 after SIGCONT"
l=$(latest "$CK")
(($(gen_of "$l") != gen_x)) || fail "LATEST names $l, of the stopped agent's generation"
late=$(ckpt_rows "$CK" | awk -v g="$gen_x" -v top="${old_top:-0}" '$1 == "complete" { split($2, a, /[-.]/); if (a[4] == g && a[2] > top) print $2 }')
[ -z "$late" ] || fail "checkpoints of the old generation committed after the stop: $late"
out=$(verify_locked "$CK" 2>&1) || fail "after the stale writer: $out"
how=$(grep -Eo 'alert checkpoint (stale|failed)' <<<"$refusal" | awk '{ print $3 }')
echo "STALE stopped=$X gen=$gen_x newer=$newer stop_to_newer_commit_ms=$((t_newer - t_stop)) refused_as=$how LATEST=$l (was gen $before_gen)"
pass "the stopped agent's old-generation checkpoint was refused ($how); LATEST $l"

say "5. full disk (tmpfs in a private mount namespace)"
for n in "${ALIVE[@]}"; do kill_node "$n"; done
if [ "$(id -u)" != 0 ] || ! unshare -m --propagation private true 2>/dev/null; then
  echo "skip: the full-disk part needs root and unshare -m (parts 1-4 passed)"
  exit 77
fi
EA_BIN=$EA_BIN unshare -m --propagation private bash "$SELF" --full-disk
rc=$?
[ $rc = 77 ] && {
  echo "skip: the full-disk part cannot mount a tmpfs (parts 1-4 passed)"
  exit 77
}
[ $rc = 0 ] || fail "full-disk part failed (rc=$rc)"

echo "WALL test_ckpt_ms=$(($(now_ms) - t_start))"
exit 0
