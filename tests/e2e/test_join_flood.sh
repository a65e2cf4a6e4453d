#!/usr/bin/env bash
# End-to-end: joins through a connection flood (issue 27, item 2).
#
# A keyed seed trains alone.  A host without the key then floods its gossip
# port (tests/e2e/join_flood.py): about 200 connections held open without a
# byte, each reopened the moment the seed closes it, as fast as it can —
# first from one source address, then from 25 (127.0.0.2 … .26) — and the
# same against its control channel's port.  While each flood runs (FLOOD_S
# seconds), an agent with the key joins through the seed.  Asserted, for
# both:
#   - the joiner logs "joined" while the flood still runs (before this
#     change, with 25 sources every attempt timed out or was reset until the
#     flood stopped: 9.6-9.8 s for a 12 s flood), and trains with the seed
#     (over the flooded control channel) before the flood ends;
#   - the seed counted what it refused on both ports: `refused_rate` (closed
#     at accept, over the source's connect rate) and `preauth_evicted`;
#   - the seed's status answered throughout.
# Prints: JOINFLOOD sources=N join_ms=… flood_connects_per_s=…
source "$(dirname "$0")/lib.sh"

FLOOD_S=12
"$EA_BIN" keygen "$EA_TMP/key" >/dev/null 2>&1 || fail "keygen"
J=(--key-file "$EA_TMP/key" --set compute.min_nodes=1 --set train.steps=1000000000
  --set checkpoint.save_interval_steps=0 --set distributed.scale_up_delay_ms=300)
js() {
  ea_status "$1" --json 2>/dev/null |
    "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))' "$2" 2>/dev/null
}
world_is() { [ "$(js "$1" 'd["generation"]["world"]')" = "$2" ]; }
refused_over() { [ "$(js seed 'd["counters"]["transport"]["refused_rate"]')" -gt "$1" ]; }
joined() { grep -q ' join joined via ' "$(agent_log "$1")"; }

say "a keyed seed"
start_agent seed "${J[@]}"
wait_for 20 world_is seed 1 || fail "the seed does not train"
port=${AGENT_ADDR[seed]#*:}
cport=$(js seed 'd["self"]["control"]' | sed 's/.*://')

round=0
for nsrc in 1 25; do
  round=$((round + 1))
  name=j$round
  say "$nsrc source(s) flood the seed's gossip port for $FLOOD_S s; $name joins with the key"
  before=$(js seed 'd["counters"]["transport"]["refused_rate"]')
  "$PY" tests/e2e/join_flood.py 127.0.0.1 "$port" "$nsrc" "$FLOOD_S" >"$EA_TMP/flood$round.out" 2>&1 &
  fpid=$!
  EA_PGIDS+=("$fpid")
  # the control channel's port too: the joiner trains through it
  "$PY" tests/e2e/join_flood.py 127.0.0.1 "$cport" "$nsrc" "$FLOOD_S" >"$EA_TMP/cflood$round.out" 2>&1 &
  cpid=$!
  EA_PGIDS+=("$cpid")
  # the flood is at full rate once the seed has refused a few hundred
  wait_for 10 refused_over $((before + 300)) ||
    fail "the flood does not reach the seed: $(cat "$EA_TMP/flood$round.out")"
  t0=$(now_ms)
  start_agent "$name" --join "${AGENT_ADDR[seed]}" "${J[@]}"
  wait_for $((FLOOD_S - 2)) joined "$name" || {
    kill "$fpid" 2>/dev/null
    fail "$name did not join while $nsrc source(s) flooded: $(grep -h 'join' "$(agent_log "$name")" | tail -3)"
  }
  ln=$(grep -m1 ' join joined via ' "$(agent_log "$name")")
  join_ms=$(($(log_ts_ms "$ln") - t0))
  kill -0 "$fpid" 2>/dev/null || fail "the flood ended before the join: not a test of it"
  js seed 'd["self"]["name"]' >/dev/null || fail "the seed's status does not answer under the flood"
  wait_for $((FLOOD_S - 2)) world_is "$name" $((round + 1)) ||
    fail "$name does not train at world $((round + 1)) during the flood (control port flooded too)"
  kill -0 "$cpid" 2>/dev/null || fail "the control port's flood ended before the join was trained"
  wait "$fpid" "$cpid"
  rate=$(awk '{print $4}' "$EA_TMP/flood$round.out")
  crate=$(awk '{print $4}' "$EA_TMP/cflood$round.out")
  echo "JOINFLOOD sources=$nsrc join_ms=$join_ms flood_connects_per_s=$rate control_flood_connects_per_s=$crate"
  pass "$name joined in $join_ms ms during a flood from $nsrc source(s) ($rate connects/s)"
done

refused=$(js seed 'd["counters"]["transport"]["refused_rate"]')
evicted=$(js seed 'd["counters"]["transport"]["preauth_evicted"]')
[ "${refused:-0}" -gt 0 ] || fail "refused_rate not counted"
[ "${evicted:-0}" -gt 0 ] || fail "preauth_evicted not counted"
assert_contains "$(ea_status seed)" "over the connect rate $refused" "text status"
crefused=$(js seed 'd["counters"]["control"]["refused_rate"]')
[ "${crefused:-0}" -gt 0 ] || fail "control refused_rate not counted"
pass "the seed refused $refused gossip and $crefused control connects over the rate, evicted $evicted on probation"
