#!/usr/bin/env bash
# End-to-end: member names are unique (issue 27, item 5).  Before, a second
# agent with the same --name was admitted without a word: `status` showed two
# rows of that name and `drain NAME` acted on whichever it met first.
#
#  1. n1 starts the cluster; an agent with --join n1 and --name n1 (another
#     data dir, so another node id) is refused: it logs that the name is held
#     by live member n1 (its id and address), leaves and exits 2; n1 goes on,
#     and its status shows one live member named n1;
#  2. an agent with a name of its own joins (two alive);
#  3. a --bootstrap agent (not held at the gate: it could have started the
#     cluster alone) named n2 gets in beside n2; both log an error naming the
#     other, and `drain n2` is refused as ambiguous — nothing is drained.
source "$(dirname "$0")/lib.sh"
t_start=$(now_ms)

# live_named OBSERVER NAME — how many alive or suspect rows of OBSERVER's
# status are named NAME.
live_named() {
  ea_status "$1" --json 2>/dev/null | "$PY" -c '
import json, sys
d = json.load(sys.stdin)
print(sum(1 for m in d["members"] if m["name"] == sys.argv[1] and m["state"] in ("alive", "suspect")))' "$2"
}

say "1. a second agent named n1 is refused"
start_agent n1
start_agent twin --join "${AGENT_ADDR[n1]}" --name n1
wait_exit twin 15 || fail "the twin named n1 is still running after 15 s: $(live_named n1 n1) live members named n1 at n1"
assert_eq "$EXIT_RC" 2 "the twin's exit status"
grep -q "refused: the name 'n1' is held by live member id [0-9a-f]* (127.0.0.1:[0-9]*, alive)" "$(agent_log twin)" ||
  fail "the twin does not say why: $(grep -i "name\|refused" "$(agent_log twin)" | tail -3)"
agent_alive n1 || fail "n1 exited"
wait_for 10 output_is 1 live_named n1 n1 || fail "n1 shows $(live_named n1 n1) live members named n1"
pass "refused (exit 2) and named the holder; n1 sees one live n1"

say "2. a unique name joins"
start_agent n2 --join "${AGENT_ADDR[n1]}"
wait_for 15 sees_alive n1 2 || fail "n2 did not join: $(ea_status n1)"
agent_alive n2 || fail "n2 exited"
pass "n2 joined"

say "3. a --bootstrap agent named n2: drain n2 is refused as ambiguous"
start_agent boot --join "${AGENT_ADDR[n1]}" --bootstrap --name n2
wait_for 15 output_is 2 live_named n1 n2 || fail "n1 shows $(live_named n1 n2) live members named n2"
wait_for 10 grep -q "has this node's name too" "$(agent_log n2)" ||
  fail "n2 does not warn about the other n2"
out=$("$EA_BIN" drain n2 --data-dir "${AGENT_DIR[n1]}/data" 2>&1) && fail "drain n2 succeeded: $out"
assert_contains "$out" "ambiguous: 2 live members are named 'n2'" "drain n2"
agent_alive n2 && agent_alive boot || fail "an n2 went away"
pass "drain n2 refused: $out"
echo "PASS test_names ($(($(now_ms) - t_start)) ms)"
