#!/usr/bin/env bash
# End-to-end: a gray link in library mode (issue 27 item 3) — one-way loss
# between two members of a PyTorch program's generation, found by the link
# probe (agent/job/link.c), since gloo's error names no peer.
#
# Three agents, each in its own network namespace on one bridge, library
# mode with tests/python/torch_worker.py (DDP, gloo), min_nodes 2.  n1 has
# the lowest id: the controller.  Once they train at world 3, everything n2
# sends to n3 is dropped on n3's input chain (nftables) for DROP_S seconds.
# Gossip still reaches both through n1, so SWIM keeps both alive, and the
# collective hangs (gloo's own timeout, distributed.
# communication_timeout_seconds, is set far past the bound).  Asserted:
#   - the link probe starts while no step is made: `status` of n2 or n3
#     says `degraded (link probe: …)` (generation.link_probe.active,
#     generation.degraded) rather than a plain `running`;
#   - n2 and n3 find each other unreachable; the controller holds n3 out
#     (the higher name of the two: a one-way drop breaks TCP both ways),
#     why "link", its reason a link probe's;
#   - n1 and n2 train at world 2 within BOUND_MS of the fault, in the same
#     worker processes: detection_bound_ms (what a crash of a node costs to
#     be seen) + one re-formation;
#   - n3 is not taken back while held, and is back at world 3 after the
#     heal and the cooldown; every step in one generation with identical
#     digests across its ranks (pytorch_lib.sh check_steps).
#
# Restart mode: tests/e2e/test_gray_restart.sh (the probe always runs there).
#
# Needs root, iproute2, nftables and torch; otherwise skipped (exit 77).
#
# Prints: GRAY library probe_ms=… world2_ms=… bound_ms=… back_ms=… load=…
source "$(dirname "$0")/lib.sh"
t_start=$(now_ms)

skip() {
  echo "skip: $*"
  exit 77
}
"$PY" -c 'import torch, msgpack' 2>/dev/null || skip "$PY has no torch"
source "$(dirname "$0")/pytorch_lib.sh"
source "$(dirname "$0")/gray_lib.sh"

COMM_S=60 # gloo's timeout: far past the bound, so the probe is what finds the link
COOL=12   # runtime.flap_cooldown_seconds: the hold-out outlasts the fault
DROP_S=8
# One library re-formation: PREPARE (the survivors' collective aborted
# through its sockets), READY, COMMIT, a new process group and the state
# check, then a step.  Measured 0.4-1.5 s on an idle 2-core machine; 4 s
# leaves room for a loaded one.
REFORM_MS=4000
JOB=("${J[@]}" --set "distributed.communication_timeout_seconds=$COMM_S"
  --set runtime.flap_threshold=0 --set "runtime.flap_cooldown_seconds=$COOL"
  --set runtime.rendezvous_timeout_seconds=30 --set checkpoint.save_interval_steps=0)

# ---- the network: gl<pid>b (a bridge) and gl<pid>s1..3 -------------------
gray_net gl 3
pass "three namespaces on 198.18.$NET.0/24"

# ---- the cluster -------------------------------------------------------------
for s in 1 2 3; do
  with_id "n$s" "0$s" # n1 has the lowest id: the controller
  AGENT_NS[n$s]=$(ns_of $s)
  AGENT_BIND[n$s]=$(ip_of $s):7000
done
say "three agents in namespaces, library mode; gloo timeout ${COMM_S} s, cooldown ${COOL} s"
start_agent n1 "${JOB[@]}" "${PROG[@]}"
for n in n2 n3; do start_agent "$n" --join "${AGENT_ADDR[n1]}" "${JOB[@]}" "${PROG[@]}"; done
for n in n1 n2 n3; do
  wait_for 60 steps_at "$n" 3 30 || fail "$n does not train at world 3: $(tail -5 "$(agent_log "$n")")"
done
assert_eq "$(js n1 'd["controller"]["name"]')" n1 "the controller"
p1=$(wpid n1) p2=$(wpid n2) p3=$(wpid n3)
for p in "$p1" "$p2" "$p3"; do [ -n "$p" ] && [ "$p" != 0 ] || fail "no worker pid in status"; track "$p"; done
bound=$(counter n1 detection_bound_ms)
[ -n "$bound" ] || fail "no detection_bound_ms in n1's status"
BOUND_MS=$((bound + REFORM_MS))
pass "world 3 trains (workers $p1 $p2 $p3), $(($(now_ms) - t_start)) ms after the start"

# ---- the fault -----------------------------------------------------------------
m1=$(size_of n1) m2=$(size_of n2) m3=$(size_of n3)
say "dropping everything n2 ($(ip_of 2)) sends to n3, on n3's input, for ${DROP_S} s"
ip netns exec "$(ns_of 3)" nft add rule inet gray input ip saddr "$(ip_of 2)" drop || fail "nft rule"
t_fault=$(now_ms)

# The probe shows in status (JSON and text) before world 2 trains.
probe_ms=""
probe_text=""
deadline=$((t_fault + BOUND_MS + 5000))
until steps_at n1 2 3 "$m1"; do
  (($(now_ms) < deadline)) || fail "not at world 2 within $((BOUND_MS + 5000)) ms: $(js n1 'd["generation"]["reason"]')"
  if [ -z "$probe_ms" ]; then
    for n in n2 n3; do
      line=$(ea_status "$n" 2>/dev/null | grep '^generation:')
      if [[ $line == *"degraded (link probe: "* ]]; then
        [ "$(js "$n" 'd["generation"]["degraded"] and d["generation"]["link_probe"]["active"]')" = True ] ||
          [ "$(js n1 'len(d["held_out"])')" = 1 ] || fail "$n's JSON status does not say degraded: $(js "$n" 'd["generation"]')"
        probe_ms=$(($(now_ms) - t_fault))
        probe_text="$n: $line"
        break
      fi
    done
  fi
  sleep 0.1
done
t2=$(first_ts n1 ' step worker=0 gen=[0-9]+ rank=[0-9]+ world=2 ' "$m1") || fail "n1: no step at world 2"
world2_ms=$((t2 - t_fault))
[ -n "$probe_ms" ] || fail "neither n2 nor n3 said 'degraded (link probe: …)' while no step was made"
pass "the probe showed in status ${probe_ms} ms after the fault ($probe_text)"
wait_for 10 steps_at n2 2 3 "$m2" || fail "n2 does not train at world 2"
((world2_ms <= BOUND_MS)) || fail "world 2 trained ${world2_ms} ms after the fault, over the bound ${BOUND_MS} ms (detection_bound_ms ${bound} + ${REFORM_MS})"
assert_eq "$(wpid n1)" "$p1" "n1's worker pid at world 2"
assert_eq "$(wpid n2)" "$p2" "n2's worker pid at world 2"
# Both ends find the other unreachable, about at once; the first verdict
# re-forms the job, and the other end's probe may end (training moves)
# before its second miss.
found=$(grep -ho 'link probe: n[23] unreachable from n[23]' "$(agent_log n2)" "$(agent_log n3)" | sort -u | paste -sd,)
[ -n "$found" ] || fail "neither n2 nor n3 found the other unreachable"
grep -q 'link probe: n2 unreachable from n1\|link probe: n3 unreachable from n1' "$(agent_log n1)" &&
  fail "n1 found a member unreachable: $(grep 'unreachable from n1' "$(agent_log n1)" | head -2)"
gray_held n1 n3 "$COOL" n1,n2
pass "$found; world 2 trains ${world2_ms} ms after the fault (bound ${BOUND_MS} ms = detection_bound_ms ${bound} + ${REFORM_MS}); n3 held out: $(js n1 'd["held_out"][0]["reason"]')"

# ---- the heal; n3 stays out until the hold ends, then is back ------------------
healed=0 # gray_heal sets it
gray_heal n1 3 3 "$t_fault" "$DROP_S" "$COOL"
m1=$(size_of n1) m3=$(size_of n3)
wait_for 30 steps_at n3 3 10 "$m3" || fail "n3 not back at world 3 after the cooldown: $(js n1 'd["generation"]')"
back_ms=$(($(now_ms) - t_fault))
wait_for 10 steps_at n1 3 10 "$m1" || fail "n1 not at world 3 with n3 back"
assert_eq "$(wpid n1)" "$p1" "n1's worker pid at the end"
assert_eq "$(wpid n2)" "$p2" "n2's worker pid at the end"
pass "n3 back at world 3 ${back_ms} ms after the fault (healed at $(((healed - t_fault) / 1000)) s)"
check_steps "$(agent_log n1)" "$(agent_log n2)" "$(agent_log n3)" || fail "step reports"

load=$(cut -d' ' -f1 /proc/loadavg)
echo "GRAY library probe_ms=$probe_ms world2_ms=$world2_ms bound_ms=$BOUND_MS detection_bound_ms=$bound back_ms=$back_ms load=$load total_ms=$(($(now_ms) - t_start))"
pass "one-way loss between two members in library mode: found by the link probe, held out, taken back"
