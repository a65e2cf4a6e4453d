#!/usr/bin/env bash
# End-to-end: forged ring hellos (issue 11, item 7).
#
# The workers' data ring (tcp backend) is not sealed.  Before, one forged
# hello naming a newer generation, sent to a worker's ring port, made that
# rank's communicator init fail (-ESTALE) and cost the formation.  Now, with
# a cluster key, every hello carries a tag keyed with the generation's ring
# token (derived from the key; it never travels), and a hello without it is
# dropped unanswered and counted.
#
#  1. a keyed cluster of two trains at world 2;
#  2. a stranger keeps sending forged hellos (newer generation, every rank
#     pair; version 2 with a zero tag, and version 1 as before the token)
#     to every worker's ring port, and a third agent joins:
#     the job re-forms and trains at world 3 while the forgeries continue,
#     and a worker logs that it refused them.
source "$(dirname "$0")/lib.sh"

JOB=(--set train.steps=1000000000 --set train.context=8 --set train.embed_dim=16
  --set train.hidden=64 --set train.layers=1 --set distributed.global_batch=48
  --set distributed.micro_batch=16 --set distributed.scale_up_delay_ms=300
  --set distributed.backend=tcp)

js() {
  ea_status "$1" --json 2>/dev/null |
    "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))' "$2" 2>/dev/null
}
trains() {
  [ "$(js "$1" '"%s %d" % (d["generation"]["phase"], d["generation"]["world"])')" = "running $2" ]
}
steps_beyond() { (($(js "$1" 'd["generation"]["last_step"] or 0') > $2)); }

say "1. a keyed cluster of two"
"$EA_BIN" keygen "$EA_TMP/cluster.key" 2>/dev/null || fail "keygen"
start_agent h1 --key-file "$EA_TMP/cluster.key" "${JOB[@]}"
start_agent h2 --key-file "$EA_TMP/cluster.key" --join "${AGENT_ADDR[h1]}" "${JOB[@]}"
wait_for 30 trains h1 2 || fail "h1 does not train at world 2: $(ea_status h1)"
ports=$(cat "$(agent_log h1)" "$(agent_log h2)" | grep -o 'hello pid=[0-9]* comm=[0-9.]*:[0-9]*' |
  sed 's/.*comm=//' | sort -u | tr '\n' ' ')
[ -n "$ports" ] || fail "no worker ring address in the logs"
pass "h1 and h2 train at world 2; ring ports $ports"

say "2. forged hellos at every ring port, and a third agent joins"
setsid "$PY" - "$EA_TMP/forging" $ports <<'PY' &
import os, socket, struct, sys, time
flag, addrs = sys.argv[1], sys.argv[2:]
n = 0
# A burst of forged hellos at every ring port each second: they wait in the
# listeners' backlogs (a few dozen at most, far below the 64 a listener
# holds) for the next formation to read them.
deadline = time.time() + 60
while not os.path.exists(flag + ".stop") and time.time() < deadline:
    for a in addrs:
        h, p = a.rsplit(":", 1)
        for world, frm in ((3, 0), (3, 1), (2, 0)):
            to = (frm + 1) % world
            # magic "EAC1", version, kind hello, world, from, to, status 0,
            # a generation far in the future; version 2 with a zero tag, and
            # version 1 (32 bytes), the hello of agents before the token
            for version, tag in ((2, bytes(16)), (1, b"")):
                hello = struct.pack("<IHHIIIIQ", 0x45414331, version, 1, world, frm, to, 0,
                                    (1 << 62)) + tag
                try:
                    s = socket.create_connection((h, int(p)), timeout=1)
                    s.sendall(hello)
                    s.close()
                except OSError:
                    pass
    n += 1
    with open(flag + ".tmp", "w") as f:
        f.write(str(n))
    os.replace(flag + ".tmp", flag)
    time.sleep(1)
PY
forger=$!
EA_PGIDS+=("$forger")
bursts() { (($(cat "$EA_TMP/forging" 2>/dev/null || echo 0) >= $1)); }
wait_for 10 bursts 2 || fail "the forger did not send its bursts"
start_agent h3 --key-file "$EA_TMP/cluster.key" --join "${AGENT_ADDR[h1]}" "${JOB[@]}"
wait_for 60 trains h1 3 || fail "the job did not re-form at world 3 under forged hellos: $(ea_status h1)"
s0=$(js h1 'd["generation"]["last_step"] or 0')
wait_for 30 steps_beyond h1 "$((s0 + 20))" || fail "world 3 does not make steps: $(ea_status h1)"
# (before the token: "connecting rank 1/3: Stale file handle", and the
# generation failed and was formed again)
stale=$(grep -h 'Stale file handle' "$(agent_log h1)" "$(agent_log h2)" "$(agent_log h3)" | head -n1)
[ -z "$stale" ] || fail "a forged hello made a rank's init fail: $stale"
refused_line() {
  cat "$(agent_log h1)" "$(agent_log h2)" "$(agent_log h3)" |
    grep -o "refused [0-9]* ring hellos\? without this generation's token" | head -n1
}
refused=$(refused_line)
[ -n "$refused" ] || fail "no worker logged refused ring hellos"
touch "$EA_TMP/forging.stop"
pass "world 3 trains under forged hellos (step $s0 → $(js h1 'd["generation"]["last_step"]')); a worker $refused"
