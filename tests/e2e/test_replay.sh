#!/usr/bin/env bash
# End-to-end: replayed sealed input (issue 11, item 1).
#
# Before: a sealed DRAIN frame captured on the wire and re-sent after the
# node restarted drained it again (it exited 0, its log indistinguishable
# from a real drain), because sealed frames carried no sequence and DRAIN
# named only the node.
#
#  1. a keyed cluster of two (n1 records every sealed frame and its first
#     sealed datagrams: EA_TEST_RECORD_FRAMES, a test hook); n1 drains n2
#     with the admin command, n2 exits 0;
#  2. n2 restarts and rejoins; once n1's control frames reach it, the
#     captured DRAIN bytes are sent to n2's control port, and a captured
#     gossip datagram to its gossip port: n2 keeps running, logs the replay,
#     and counts dropped_replayed on both channels;
#  3. n2 restarts alone (no peers, no --join), so the captured DRAIN is the
#     first frame it ever sees from n1 and its fresh replay window admits
#     it: the DRAIN names an incarnation of n2's earlier run and is refused,
#     logged naming both, and counted (drains_refused); n2 keeps running.
source "$(dirname "$0")/lib.sh"

JOB=(--set train.steps=1000000000 --set train.context=8 --set train.embed_dim=16
  --set train.hidden=64 --set train.layers=1 --set distributed.global_batch=32
  --set distributed.micro_batch=16 --set distributed.scale_up_delay_ms=300)

js() {
  ea_status "$1" --json 2>/dev/null |
    "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))' "$2" 2>/dev/null
}
ge() { local v; v=$(js "$1" "$2") && [ -n "$v" ] && (($v >= $3)); }
control_of() { grep -o 'control=[0-9.]*:[0-9]*' "$(agent_log "$1")" | tail -n1 | cut -d= -f2; }
# send_tcp ADDR FILE / send_udp ADDR FILE: the captured bytes, as they are
send_tcp() {
  "$PY" - "$1" "$2" <<'PY'
import socket, sys, time
h, p = sys.argv[1].rsplit(":", 1)
s = socket.create_connection((h, int(p)), timeout=5)
s.sendall(open(sys.argv[2], "rb").read())
time.sleep(0.2)
s.close()
PY
}
send_udp() {
  "$PY" - "$1" "$2" <<'PY'
import socket, sys
h, p = sys.argv[1].rsplit(":", 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.sendto(open(sys.argv[2], "rb").read(), (h, int(p)))
PY
}

say "1. a keyed cluster of two; n1 drains n2"
"$EA_BIN" keygen "$EA_TMP/cluster.key" 2>/dev/null || fail "keygen"
rec=$EA_TMP/rec
mkdir -p "$rec"
EA_TEST_RECORD_FRAMES=$rec start_agent n1 --key-file "$EA_TMP/cluster.key" "${JOB[@]}"
start_agent n2 --key-file "$EA_TMP/cluster.key" --join "${AGENT_ADDR[n1]}" "${JOB[@]}"
wait_for 30 sees_alive n1 2 || fail "n1 does not see 2 alive: $(ea_status n1)"
wait_for 30 sees_alive n2 2 || fail "n2 does not see 2 alive: $(ea_status n2)"
ls "$rec"/udp-*.bin >/dev/null 2>&1 || fail "n1 recorded no sealed datagram (EA_TEST_RECORD_FRAMES)"
out=$("$EA_BIN" drain n2 --data-dir "${AGENT_DIR[n1]}/data" 2>&1) || fail "drain command: $out"
wait_exit n2 30 || fail "n2 did not exit after the drain: $(tail -n 5 "$(agent_log n2)")"
assert_eq "$EXIT_RC" 0 "n2's exit status after a real drain"
drain=$(ls "$rec"/*-DRAIN-*.bin 2>/dev/null | head -n1)
[ -n "$drain" ] || fail "n1 recorded no DRAIN frame: $(ls "$rec")"
grep -q 'asked to drain by another agent' "$(agent_log n2)" || fail "n2 did not log its drain"
pass "n2 drained and exited 0; DRAIN captured ($(stat -c %s "$drain") bytes)"

say "2. n2 restarts; the captured DRAIN and a captured datagram are replayed to it"
mv "$(agent_log n2)" "$EA_TMP/n2-first.log"
start_agent n2 --key-file "$EA_TMP/cluster.key" --join "${AGENT_ADDR[n1]}" "${JOB[@]}"
wait_for 30 sees_alive n2 2 || fail "restarted n2 does not see 2 alive: $(ea_status n2)"
# n1 (the controller: n2 joined it) forms a generation with n2: its control
# frames, newer than the captured one, reach n2 first
wait_for 30 ge n2 'd["counters"]["control"]["frames_in"]' 1 ||
  fail "no control frame reached the restarted n2: $(ea_status n2)"
ctl2=$(control_of n2)
[ -n "$ctl2" ] || fail "no control address in n2's log"
send_tcp "$ctl2" "$drain" || fail "cannot send the captured DRAIN to $ctl2"
wait_for 10 ge n2 'd["counters"]["control"]["dropped_replayed"]' 1 ||
  fail "n2 did not count the replayed DRAIN: $(js n2 'd["counters"]["control"]')"
for f in "$rec"/udp-*.bin; do send_udp "${AGENT_ADDR[n2]}" "$f"; done
wait_for 10 ge n2 'd["counters"]["transport"]["dropped_replayed"]' 1 ||
  fail "n2 did not count a replayed datagram: $(js n2 'd["counters"]["transport"]')"
grep -q 'dropped a frame (replayed)' "$(agent_log n2)" ||
  fail "n2 did not log the replayed frame: $(tail -n 5 "$(agent_log n2)")"
grep -q 'dropped replayed input' "$(agent_log n2)" ||
  fail "n2 did not log the replayed datagram"
# still up, still a member, not draining, a while after the replay
wait_for 2 agent_gone n2 && fail "n2 exited after the replayed DRAIN: $(tail -n 5 "$(agent_log n2)")"
sees_alive n1 2 || fail "n1 no longer sees n2 alive: $(ea_status n1)"
[ "$(js n2 'd["counters"]["control"]["dropped_unauthenticated"]')" = 0 ] ||
  fail "a replay counted as unauthenticated"
grep -q 'asked to drain by another agent' "$(agent_log n2)" && fail "the restarted n2 started draining"
pass "replayed DRAIN and datagrams dropped: control $(js n2 'd["counters"]["control"]["dropped_replayed"]'), transport $(js n2 'd["counters"]["transport"]["dropped_replayed"]'); n2 runs"

say "3. n2 restarts alone: the captured DRAIN is the first frame it sees from n1"
stop_agent n2 KILL
wait_exit n2 10 || fail "n2 did not die"
stop_agent n1 KILL
wait_exit n1 10 || fail "n1 did not die"
rm -f "${AGENT_DIR[n2]}/data/peers"
mv "$(agent_log n2)" "$EA_TMP/n2-second.log"
start_agent n2 --key-file "$EA_TMP/cluster.key" "${JOB[@]}"
ctl2=$(control_of n2)
send_tcp "$ctl2" "$drain" || fail "cannot send the captured DRAIN to $ctl2"
wait_for 10 ge n2 'd["counters"]["rdzv"]["drains_refused"]' 1 ||
  fail "the DRAIN of n2's earlier run was not refused: $(js n2 'd["counters"]') $(tail -n 5 "$(agent_log n2)")"
line=$(grep 'refused a DRAIN' "$(agent_log n2)" | head -n1)
assert_contains "$line" "an old command (an earlier run of this node)" "refusal log line"
assert_contains "$line" "this run:" "refusal log line names this run's incarnations"
wait_for 2 agent_gone n2 && fail "n2 exited after the replayed DRAIN: $(tail -n 5 "$(agent_log n2)")"
grep -q 'asked to drain by another agent' "$(agent_log n2)" && fail "n2 started draining"
pass "refused: $line"
