#!/usr/bin/env bash
# End-to-end: spare nodes (compute.max_nodes 3; docs/operations.md "Spares").
#
# Built-in trainer:
#  1. b1-b3 train at world 3; b4 joins and cannot write its probe file in
#     the checkpoint directory (a directory stands where the file goes): its
#     health check fails, status says "spare (unfit)" with the reason,
#     /metrics elastic_agent_spares{state="unfit"} 1 and
#     elastic_agent_spares_ready 0;
#  2. SIGKILL a member (not the controller): b4 is not swapped in — the
#     world shrinks to 2 and the controller raises no_spare;
#  3. the obstacle removed: b4's check passes, it joins (world 3).
# Library mode (a PyTorch program, tests/python/torch_worker.py):
#  4. n1-n3 train at world 3; n4 joins: its worker starts and says hello,
#     and it waits as a ready spare (status, text status, the controller's
#     spares.ready) without training;
#  5. SIGKILL a member other than the controller (agent and worker): n4 takes its place — the world stays
#     3, never 2 — n4's first step is the survivors' next one, and no_spare
#     fires (none is left);
#  6. drain a member: with no spare left the world drops to 2, the alert
#     still firing;
#  throughout 4-6: every step in one generation, digests equal across ranks.
# Prints RECOVERY lines: SIGKILL → first step at world 3 with a spare (ms).
source "$(dirname "$0")/lib.sh"

BJ=(--set compute.min_nodes=2 --set compute.max_nodes=3 --set distributed.scale_up_delay_ms=300
  --set train.steps=100000000 --set checkpoint.save_interval_steps=200)

py_field() { # JSON on stdin, a Python expression over d
  "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))' "$1" 2>/dev/null
}
sj() { ea_status "$1" --json 2>/dev/null | py_field "$2"; }
is_true() { [ "$("$@")" = True ]; }
world_is() { [ "$(sj "$1" 'd["generation"]["world"]')" = "$2" ]; }
spare_is() { [ "$(sj "$1" 'd["spares"]["self"].get("state")')" = "$2" ]; }
firing() { # NAME KIND — KIND is firing on NAME
  is_true sj "$1" "any(f['kind'] == '$2' for f in d['alerts']['firing'])"
}
metric() { curl -s "http://$1/metrics" | awk -v k="$2" '$1 == k { print $2 }'; }

say "1. built-in: b4 cannot write in the checkpoint directory: an unfit spare"
CKB=(--set checkpoint.dir="$EA_TMP/ckb") # pytorch_lib.sh uses $EA_TMP/ck
start_agent b1 "${BJ[@]}" "${CKB[@]}" --set observability.metrics_listen=127.0.0.1:0
for n in b2 b3; do start_agent $n --join "${AGENT_ADDR[b1]}" "${BJ[@]}" "${CKB[@]}"; done
wait_for 30 world_is b1 3 || fail "b1-b3 do not train at world 3: $(ea_status b1 | sed -n '/^generation/,+1p')"
start_agent b4 --join "${AGENT_ADDR[b1]}" "${BJ[@]}" "${CKB[@]}"
wait_for 20 is_true sj b4 'd["spares"]["self"]["spare"]' || fail "b4 is no spare: $(ea_status b4 | sed -n '/^generation/,/^checkpoint/p')"
probe=$EA_TMP/ckb/.ea-spare-check-$(sj b4 'd["self"]["pid"]')
mkdir "$probe" # open(O_WRONLY) of the probe file: EISDIR
wait_for 15 spare_is b4 unfit || fail "b4 not unfit: $(ea_status b4 | sed -n '/^spares/,+3p')"
txt=$(ea_status b4)
assert_contains "$txt" "this node: spare (unfit, 1 of 1 in line)" "b4's status"
assert_contains "$txt" "health check FAILED" "b4's status"
assert_contains "$txt" "checkpoint directory $EA_TMP/ckb: open of a 1 MiB probe failed: Is a directory" "b4's status"
grep -q "spare health check failed: checkpoint directory $EA_TMP/ckb" "$(agent_log b4)" || fail "no warning in b4's log"
maddr=$(metrics_addr b1)
wait_for 5 sh -c "curl -s http://$maddr/metrics | grep -q 'elastic_agent_spares{.*state=\"unfit\"} 1'" ||
  fail "b1's /metrics: $(curl -s "http://$maddr/metrics" | grep spare)"
assert_eq "$(metric "$maddr" "elastic_agent_spares_ready{job=\"default\",node=\"b1\"}")" 0 "elastic_agent_spares_ready"
pass "b4 unfit"

say "2. SIGKILL a member: the unfit spare is not swapped in; the world shrinks, no_spare fires"
ctl=$(controller_of b1 | awk '{print $1}')
victim=b3
[ "$ctl" = b3 ] && victim=b2
stay=b1
[ "$ctl" = b1 ] || [ "$ctl" = b4 ] || stay=$ctl
stop_agent $victim KILL
wait_for 20 world_is $stay 2 || fail "$stay not at world 2: $(ea_status $stay | sed -n '/^generation/,+1p')"
wait_for 10 firing "$ctl" no_spare || fail "no_spare not firing on $ctl: $(grep -h alert "$(agent_log "$ctl")" | tail -3)"
grep -q "alert no spare left: $victim lost; generation [0-9]* runs 2 of max_nodes 3 nodes" "$(agent_log "$ctl")" || fail "no alert line"
assert_eq "$(sj b4 'd["generation"]["world"]')" 0 "b4's world (it must not be taken in)"
pass "world 2 without b4; no_spare on $ctl"

say "3. the obstacle removed: b4's check passes and it joins"
rmdir "$probe"
wait_for 30 world_is b4 3 || fail "b4 did not join: $(ea_status b4 | sed -n '/^generation/,/^checkpoint/p')"
grep -q "health check passes again" "$(agent_log b4)" || fail "no 'passes again' line"
pass "b4 at world 3"
for n in b1 b2 b3 b4; do stop_agent $n KILL; done

source "$(dirname "$0")/pytorch_lib.sh"
J+=(--set compute.max_nodes=3)

say "4. library mode: n4 waits as a ready spare (its worker said hello) and does not train"
start_three
start_agent n4 --join "$seed" "${J[@]}" "${PROG[@]}"
wait_for 90 spare_is n4 ready ||
  fail "n4 is no ready spare: $(ea_status n4 | sed -n '/^generation/,/^checkpoint/p')"
p4=$(wpid n4)
[ -n "$p4" ] && [ "$p4" != 0 ] && track "$p4"
assert_eq "$(sj n4 'd["workers"][0]["state"]')" idle "n4's worker (said hello, in no generation)"
txt=$(ea_status n4)
assert_contains "$txt" "this node: spare (ready, 1 of 1 in line); every worker said hello" "n4's status"
assert_eq "$(sj n1 'd["spares"]["ready"]')" 1 "n1's spares.ready"
assert_eq "$(sj n1 '[x["name"] for x in d["spares"]["nodes"]]')" "['n4']" "n1's spares.nodes"
grep -q ' step worker=0 ' "$(agent_log n4)" && fail "n4 trained while a spare"
pass "n4 ready spare, worker pid $p4"

ctl=$(controller_of n1 | awk '{print $1}')
victim=n3
[ "$ctl" = n3 ] && victim=n2
say "5. SIGKILL $victim (a member, not the controller $ctl): n4 takes its place, the world stays 3"
others=()
for n in n1 n2 n3; do [ "$n" != "$victim" ] && others+=("$n"); done
m1=$(size_of "${others[0]}")
vp=$(wpid "$victim")
t_kill=$(now_ms)
kill -KILL -- "-${AGENT_PID[$victim]}" "-$vp" 2>/dev/null
wait_for 60 steps_at n4 3 10 || fail "n4 does not train at world 3: $(tail -5 "$(agent_log n4)")"
wait_for 30 steps_at "${others[0]}" 3 10 "$m1" || fail "${others[0]} does not go on at world 3"
s=$(first_ts n4 ' step worker=0 gen=[0-9]+ rank=[0-9]+ world=3 ') || fail "n4: no step"
log_after "${others[0]}" "$m1" | grep -q ' world=2 ' && fail "the world shrank to 2 although a spare was ready"
echo "RECOVERY spare-library-node-kill kill_to_first_step_ms=$((s - t_kill)) world=3"
wait_for 10 firing "$ctl" no_spare || fail "no_spare not firing on $ctl"
assert_eq "$(wpid n4)" "$p4" "n4's worker pid (the spare's process trains)"
pass "world 3 with n4 ($((s - t_kill)) ms to its first step); no_spare on $ctl"

say "6. drain a member: no spare left, the world drops to 2"
target=n4
[ "$ctl" = n4 ] && target=${others[1]}
[ "$target" = "$ctl" ] && target=${others[0]}
keep=()
for n in "${others[@]}" n4; do [ "$n" != "$target" ] && keep+=("$n"); done
mk=$(size_of "${keep[0]}")
out=$("$EA_BIN" drain "$target" --data-dir "${AGENT_DIR[${keep[0]}]}/data" 2>&1) || fail "drain: $out"
wait_for 45 steps_at "${keep[0]}" 2 10 "$mk" || fail "${keep[0]} not at world 2 after draining $target"
firing "$ctl" no_spare || fail "no_spare not firing on $ctl after the drain"
logs=()
for n in n1 n2 n3 n4; do [ "$n" != "$victim" ] && logs+=("$(agent_log "$n")"); done
check_steps "${logs[@]}" || fail "step reports"
pass "world 2 after draining $target"
