#!/usr/bin/env bash
# End-to-end: a partition longer than dead_reclaim_ms heals by itself
# (issue 12 item 4; Serf's reconnect_interval / reconnect_timeout).
#
# Four agents, each in its own network namespace on one bridge, the
# built-in trainer, compute.min_nodes 2, quorum majority.  Once they train
# at world 4, nftables in p4's namespace drops everything between p4 and
# the other three for PART_S seconds: p1..p3 (a majority) train on at
# world 3; p4, alone, waits.  Past membership.dead_reclaim_ms both sides
# have reaped each other — without the reconnect loop neither would ever
# probe the other again.  Then the rules are flushed.  Asserted:
#   - during the partition: p1..p3 train at world 3, and once
#     dead_reclaim_ms has passed after the cut no view on either side
#     still lists the other (forgotten, not merely dead);
#   - after the heal, within one reconnect_interval_ms (plus the few
#     seconds gossip and the status poll take): one view — every agent
#     sees all four alive — and one controller (every agent names the
#     same one);
#   - training resumes at full size: all four train at world 4 and make
#     steps.
#
# By hand, the real thing (defaults: 5 minutes, reclaim 60 s, interval
# 10 s; about 6 minutes):
#   bash tests/e2e/partition_long.sh
# tests/e2e/test_partition_heal.sh runs the same script with a 12 s
# partition, reclaim 4 s and interval 3 s for `make check`.
#   PART_S, RECLAIM_MS, RECON_MS   override those.
#
# Needs root, iproute2 and nftables; without them it says why and is
# skipped (exit 77).
#
# Prints: PARTITION part_s=… forgotten_ms=… one_view_ms=… world4_ms=…
source "$(dirname "$0")/lib.sh"
t_start=$(now_ms)

skip() {
  echo "skip: $*"
  exit 77
}

PART_S=${PART_S:-300}
RECLAIM_MS=${RECLAIM_MS:-60000}
RECON_MS=${RECON_MS:-10000}
((PART_S * 1000 > RECLAIM_MS + 5000)) ||
  fail "PART_S=${PART_S} s does not outlast dead_reclaim_ms=${RECLAIM_MS} plus detection"
# After the heal: one reconnect interval, then a push-pull, gossip and a
# status poll.
HEAL_S=$(((RECON_MS + 5000 + 999) / 1000))
JOB=(--set train.steps=1000000000 --set train.context=8 --set train.embed_dim=16
  --set train.hidden=64 --set train.layers=1 --set distributed.global_batch=32
  --set distributed.micro_batch=16 --set distributed.scale_up_delay_ms=300
  --set compute.min_nodes=2 --set distributed.communication_timeout_seconds=3
  --set runtime.rendezvous_timeout_seconds=5 --set runtime.flap_threshold=0
  --set runtime.health_check_interval_seconds=0 --set checkpoint.save_interval_steps=0
  --set "membership.dead_reclaim_ms=$RECLAIM_MS"
  --set "membership.reconnect_interval_ms=$RECON_MS")

# ---- the network: pl<pid>b (a bridge) and pl<pid>s1..4 ------------------
netns_bridge pl 4
ip netns exec "$(ns_of 4)" nft -f - <<'EOF' || skip "nft does not work in a namespace"
add table inet part
add chain inet part input { type filter hook input priority 0 ; policy accept ; }
add chain inet part output { type filter hook output priority 0 ; policy accept ; }
EOF
pass "four namespaces on 198.18.$NET.0/24"

# ---- the cluster ---------------------------------------------------------
js() {
  ea_status "$1" --json 2>/dev/null |
    "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))' "$2" 2>/dev/null
}
trains() {
  [ "$(js "$1" '"%s %d" % (d["generation"]["phase"], d["generation"]["world"])')" = "running $2" ]
}
steps_past() { [ "$(js "$1" 'd["workers"][0]["step"] > '"$2")" = True ]; }
step_of() { js "$1" 'd["workers"][0]["step"]'; }
with_id() {
  mkdir -p "$EA_TMP/$1/data"
  printf '%s\n' "$(printf "$2%.0s" $(seq 16))" >"$EA_TMP/$1/data/node-id"
}
# knows OBS MEMBER — OBS's member table lists MEMBER at all (any state).
knows() { [ -n "$(member_state "$1" "$2")" ]; }
controller() { js "$1" 'd["controller"]["name"]'; }

NAMES=(p1 p2 p3 p4)
for s in 1 2 3 4; do
  n=p$s
  with_id "$n" "0$s" # p1 has the lowest id: the controller
  AGENT_NS[$n]=$(ns_of $s)
  AGENT_BIND[$n]=$(ip_of $s):7000
done
say "four agents in namespaces; partition ${PART_S} s, dead_reclaim_ms ${RECLAIM_MS}, reconnect_interval_ms ${RECON_MS}"
start_agent p1 "${JOB[@]}" --set experiment.name=partition-e2e
for n in p2 p3 p4; do start_agent "$n" --join "${AGENT_ADDR[p1]}" "${JOB[@]}"; done
for n in "${NAMES[@]}"; do wait_for 40 trains "$n" 4 || fail "$n does not train at world 4"; done
for n in "${NAMES[@]}"; do assert_eq "$(controller "$n")" p1 "$n's controller"; done
pass "world 4 trains, controller p1"

# ---- the partition ---------------------------------------------------------
OTHERS="{ $(ip_of 1), $(ip_of 2), $(ip_of 3) }"
say "cutting p4 off from p1..p3 for ${PART_S} s"
ip netns exec "$(ns_of 4)" nft add rule inet part input ip saddr "$OTHERS" drop &&
  ip netns exec "$(ns_of 4)" nft add rule inet part output ip daddr "$OTHERS" drop ||
  fail "nft rules"
t_cut=$(now_ms)
three_train() { trains p1 3 && trains p2 3 && trains p3 3; }
wait_for 30 three_train || fail "p1..p3 do not train at world 3 after the cut: $(js p1 'd["generation"]')"
pass "p1..p3 train at world 3 ($(($(now_ms) - t_cut)) ms after the cut)"
forgotten() {
  local n
  for n in p1 p2 p3; do knows "$n" p4 && return 1; done
  for n in p1 p2 p3; do knows p4 "$n" && return 1; done
  return 0
}
# Dead within a few seconds, reaped dead_reclaim_ms later.
wait_for $(((RECLAIM_MS + 15000) / 1000)) forgotten ||
  fail "the sides still list each other $(((RECLAIM_MS + 15000) / 1000)) s after the cut: $(ea_status p4 | grep -A6 '^members')"
forgotten_ms=$(($(now_ms) - t_cut))
pass "both sides forgot each other ${forgotten_ms} ms after the cut"
t_heal=$((t_cut + PART_S * 1000))
while (($(now_ms) < t_heal)); do
  trains p1 3 || fail "p1 stopped training at world 3 during the partition: $(js p1 'd["generation"]')"
  knows p1 p4 && fail "p1 learned of p4 across the partition"
  sleep 1
done
ip netns exec "$(ns_of 4)" nft flush chain inet part input &&
  ip netns exec "$(ns_of 4)" nft flush chain inet part output || fail "nft flush"
t_heal=$(now_ms)
say "healed after $(((t_heal - t_cut) / 1000)) s"

# ---- the heal: one view, one controller, world 4 ----------------------------
one_view() {
  local n
  for n in "${NAMES[@]}"; do sees_alive "$n" 4 || return 1; done
}
wait_for "$HEAL_S" one_view || fail "not one view ${HEAL_S} s after the heal: $(for n in "${NAMES[@]}"; do echo "$n: $(ea_status "$n" | grep '^members:')"; done)"
one_view_ms=$(($(now_ms) - t_heal))
for n in "${NAMES[@]}"; do assert_eq "$(controller "$n")" p1 "$n's controller after the heal"; done
pass "one view (all four alive everywhere) ${one_view_ms} ms after the heal, within reconnect_interval_ms ${RECON_MS} + 5 s; one controller, p1"
all_train() {
  local n
  for n in "${NAMES[@]}"; do trains "$n" 4 || return 1; done
}
wait_for 60 all_train || fail "not back at world 4 60 s after the heal: $(js p1 'd["generation"]')"
world4_ms=$(($(now_ms) - t_heal))
s4=$(step_of p4)
wait_for 20 steps_past p4 "$((s4 + 5))" || fail "world 4 makes no steps after the heal"
pass "training resumed at full size: world 4 ${world4_ms} ms after the heal, p4 past step $((s4 + 5))"
rc=$(js p1 'd["counters"]["swim"]["reconnects"]')
echo "PARTITION part_s=$PART_S reclaim_ms=$RECLAIM_MS reconnect_ms=$RECON_MS forgotten_ms=$forgotten_ms one_view_ms=$one_view_ms world4_ms=$world4_ms p1_reconnects=$rc total_ms=$(($(now_ms) - t_start))"
pass "a partition longer than dead_reclaim_ms healed by reconnect"
