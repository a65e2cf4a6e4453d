#!/usr/bin/env bash
# End-to-end: real agents on 127.0.0.1 form, detect a crash, agree on a
# controller, leave gracefully, and keep strangers out with the cluster key.
#
#  1. five agents join through one seed; every one sees 5 alive and the same
#     controller;
#  2. SIGKILL the controller: the four survivors log it dead within the
#     worst-case detection bound the agents report (status
#     config.detection_bound_ms, derivation in docs/operations.md), and all
#     four agree on one new controller;
#  3. SIGTERM another: it exits 0 and the others show it `left`, not dead;
#     restarted without --join it finds the cluster through its peers file
#     and comes back alive with a higher incarnation;
#  4. a keyed cluster forms; an agent with a different key and one with no
#     key try to join through its seed: neither ever appears, and the seed's
#     dropped_unauthenticated counter grows.
#
# Prints the measured detection time and the bound:
#   DETECT kill_to_dead_on_all_ms=… bound_ms=…
source "$(dirname "$0")/lib.sh"

t_start=$(now_ms)
names=(n1 n2 n3 n4 n5)

say "1. five agents through one seed"
start_agent n1
seed=${AGENT_ADDR[n1]}
for n in n2 n3 n4 n5; do start_agent "$n" --join "$seed"; done
for n in "${names[@]}"; do
  wait_for 10 sees_alive "$n" 5 || fail "$n does not see 5 alive: $(ea_status "$n")"
done
pass "all five see 5 alive ($(($(now_ms) - t_start)) ms after the first start)"

same_controller() {
  local first="" c n
  for n in "$@"; do
    c=$(controller_of "$n")
    [ -n "$c" ] || return 1
    [ -z "$first" ] && first=$c
    [ "$c" = "$first" ] || return 1
  done
  echo "$first"
}
wait_for 5 same_controller "${names[@]}" || fail "controllers differ: $(for n in "${names[@]}"; do controller_of "$n"; done)"
ctl=$(same_controller "${names[@]}")
ctl_name=${ctl%% *}
pass "one controller on all five: $ctl"
ea_status n1 --json | "$PY" -m json.tool >/dev/null || fail "status --json is not valid JSON"

say "2. SIGKILL the controller ($ctl_name)"
bound=$(counter n1 detection_bound_ms)
[ -n "$bound" ] || fail "no detection_bound_ms in status"
victim=$ctl_name
survivors=()
for n in "${names[@]}"; do [ "$n" != "$victim" ] && survivors+=("$n"); done
t_kill=$(now_ms)
stop_agent "$victim" KILL
dead_line() { grep -m1 "member name=$2 .*state=[a-z]*->dead" "$(agent_log "$1")"; }
worst=0
for n in "${survivors[@]}"; do
  wait_for $((bound / 1000 + 10)) dead_line "$n" "$victim" ||
    fail "$n never saw $victim dead: $(ea_status "$n")"
done
for n in "${survivors[@]}"; do
  ts=$(log_ts_ms "$(dead_line "$n" "$victim")")
  d=$((ts - t_kill))
  echo "   $n saw $victim dead after $d ms"
  ((d > worst)) && worst=$d
done
echo "DETECT kill_to_dead_on_all_ms=$worst bound_ms=$bound"
assert_le "$worst" "$bound" "detection time vs bound"
for n in "${survivors[@]}"; do
  assert_eq "$(member_state "$n" "$victim")" dead "$victim's state on $n"
done
wait_for 5 same_controller "${survivors[@]}" ||
  fail "survivors disagree: $(for n in "${survivors[@]}"; do controller_of "$n"; done)"
new_ctl=$(same_controller "${survivors[@]}")
[ "${new_ctl%% *}" != "$victim" ] || fail "the dead member is still controller: $new_ctl"
grep -q "election controller=${new_ctl%% *} " "$(agent_log "${survivors[0]}")" ||
  fail "controller change not logged on ${survivors[0]}"
pass "dead on all four within $worst ms (bound $bound ms); new controller on all four: $new_ctl"

say "3. SIGTERM ${survivors[3]}: graceful leave"
leaver=${survivors[3]}
rest=("${survivors[@]:0:3}")
stop_agent "$leaver" TERM
wait_exit "$leaver" 5 || fail "$leaver did not exit within 5 s of SIGTERM"
assert_eq "$EXIT_RC" 0 "$leaver exit status"
for n in "${rest[@]}"; do
  wait_for 5 sees_state "$n" "$leaver" left || fail "$n shows $leaver as '$(member_state "$n" "$leaver")', not left"
done
[ ! -e "${AGENT_DIR[$leaver]}/data/admin.sock" ] || fail "$leaver left its admin socket behind"
grep -q "leave .*left the cluster" "$(agent_log "$leaver")" || fail "$leaver did not log its leave"
pass "$leaver exited 0 and is 'left' on ${rest[*]}"

say "   restart $leaver without --join: it finds the cluster through its peers file"
grep -q "^127.0.0.1:" "${AGENT_DIR[$leaver]}/data/peers" || fail "no peers file: $(cat "${AGENT_DIR[$leaver]}/data/peers")"
mv "$(agent_log "$leaver")" "$EA_TMP/$leaver-first.log"
start_agent "$leaver"
for n in "${rest[@]}"; do
  wait_for 10 sees_state "$n" "$leaver" alive || fail "$n does not see the restarted $leaver alive: $(ea_status "$n")"
done
wait_for 5 sees_alive "$leaver" 4 || fail "restarted $leaver does not see 4 alive: $(ea_status "$leaver")"
grep -q "remembered peer" "$(agent_log "$leaver")" || fail "$leaver did not use its peers file"
inc=$(ea_status "${rest[0]}" | awk -v m="$leaver" '$1 == m { print $4 }')
(( inc > 0 )) || fail "restarted $leaver should have refuted its old 'left' with a higher incarnation, has $inc"
pass "$leaver rejoined from its peers file (incarnation $inc)"

say "4. cluster key"
"$EA_BIN" keygen "$EA_TMP/good.key" 2>/dev/null || fail "keygen"
"$EA_BIN" keygen "$EA_TMP/other.key" 2>/dev/null || fail "keygen"
start_agent k1 --key-file "$EA_TMP/good.key"
kseed=${AGENT_ADDR[k1]}
start_agent k2 --key-file "$EA_TMP/good.key" --join "$kseed"
start_agent k3 --key-file "$EA_TMP/good.key" --join "$kseed"
for n in k1 k2 k3; do
  wait_for 10 sees_alive "$n" 3 || fail "keyed cluster: $n does not see 3 alive: $(ea_status "$n")"
done
grep -q "security gossip is not authenticated" "$(agent_log k1)" && fail "keyed agent warned about no key"
pass "keyed cluster of 3 formed"
before=$(counter k1 dropped_unauthenticated)
start_agent wrongkey --key-file "$EA_TMP/other.key" --join "$kseed"
start_agent nokey --join "$kseed"
grep -c "security gossip is not authenticated" "$(agent_log nokey)" | grep -qx 1 ||
  fail "keyless agent must warn exactly once"
tried_twice() { grep -q "join attempt 2 failed" "$(agent_log "$1")"; }
wait_for 10 tried_twice wrongkey || fail "wrongkey did not retry its join: $(tail -3 "$(agent_log wrongkey)")"
wait_for 10 tried_twice nokey || fail "nokey did not retry its join"
grows() { (($(counter k1 dropped_unauthenticated) >= before + 2)); }
wait_for 5 grows || fail "dropped_unauthenticated on k1 did not grow: $before -> $(counter k1 dropped_unauthenticated)"
after=$(counter k1 dropped_unauthenticated)
for n in k1 k2 k3; do
  st=$(ea_status "$n")
  grep -qE '^  (wrongkey|nokey) ' <<<"$st" && fail "$n lets a stranger in: $st"
  grep -qE 'member name=(wrongkey|nokey) ' "$(agent_log "$n")" && fail "$n logged a stranger as member"
  sees_alive "$n" 3 || fail "$n no longer sees exactly 3 alive"
done
sees_alive wrongkey 1 || fail "wrongkey should see only itself"
sees_alive nokey 1 || fail "nokey should see only itself"
pass "strangers kept out; k1 dropped_unauthenticated $before -> $after"

echo "WALL test_cluster_ms=$(($(now_ms) - t_start))"
exit 0
