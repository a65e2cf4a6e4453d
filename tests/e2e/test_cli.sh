#!/usr/bin/env bash
# End-to-end: the command line and the life cycle of one agent.
#
#  - --help documents every flag with defaults and examples; version prints;
#  - a bad flag, a bad value, an unknown command: exit 2, a message naming
#    it and a pointer to --help;
#  - a bad job file: the loader's "FILE:LINE: key: problem", non-zero exit,
#    from both `config` and `run`; `config` prints overrides;
#  - `status` with no agent: a clear error, exit 1;
#  - keygen: a 0600 file of 64 hex characters, never overwritten;
#  - one agent: a 0700 data dir with a persisted node id and a 0600 admin
#    socket speaking one-line commands (help, status; unknown and overlong
#    lines answered with a JSON error); a second agent on the same data dir is refused; SIGTERM exits 0
#    and removes the socket; a restart keeps the id; after SIGKILL the stale
#    socket is replaced.
source "$(dirname "$0")/lib.sh"
t_start=$(now_ms)

# run_cli OUTFILE CMD… — run the binary, capture stdout+stderr, set RC.
run_cli() {
  local out=$1
  shift
  RC=0
  "$EA_BIN" "$@" >"$out" 2>&1 </dev/null || RC=$?
}
out=$EA_TMP/out

say "help and version"
run_cli "$out" --help
assert_eq "$RC" 0 "--help exit status"
for flag in --bind --advertise --join --name --role --data-dir --config --set --key-file \
  --log-level --log-format --socket --json keygen status config version Examples 0.0.0.0:7000 \
  ./elastic-agent-data; do
  grep -q -- "$flag" "$out" || fail "--help does not mention $flag"
done
run_cli "$out" status --help
assert_eq "$RC" 0 "status --help exit status"
run_cli "$out" version
assert_eq "$RC" 0 "version exit status"
grep -qE '^elastic-agent [0-9]+\.[0-9]+\.[0-9]+' "$out" || fail "version output: $(cat "$out")"
pass "--help lists every flag; version prints $(cat "$out")"

say "usage errors exit 2"
expect_usage() {
  local want=$1
  shift
  run_cli "$out" "$@"
  [ "$RC" -eq 2 ] || fail "'$*' exited $RC, want 2: $(cat "$out")"
  grep -q -- "$want" "$out" || fail "'$*' message lacks '$want': $(cat "$out")"
  grep -q -- "--help" "$out" || fail "'$*' message lacks the --help hint"
}
expect_usage "unknown option '--bogus'" --bogus
expect_usage "unknown option '--frobnicate'" run --frobnicate
expect_usage "option '--bind' needs a value" run --bind
expect_usage "--bind: cannot parse 'not-an-address'" run --bind not-an-address
expect_usage "--role: expected worker or observer" run --role boss
expect_usage "--join: cannot parse seed" run --join 'bad host:1'
expect_usage "membership.probe_interval_ms" run --set membership.probe_interval_ms=fast
expect_usage "want section.key=value" run --set nonsense
expect_usage "--log-level" run --log-level loud
expect_usage "unknown command 'frobnicate'" frobnicate
expect_usage "unknown option '--bogus'" status --bogus
pass "bad flags and values exit 2 with a message"

say "job file errors name file and line"
printf 'membership:\n  probe_interval_ms: 200\n  gossip_nodes: lots\n' >"$EA_TMP/bad.yaml"
run_cli "$out" config --config "$EA_TMP/bad.yaml"
[ "$RC" -ne 0 ] || fail "config accepted a bad file"
grep -q "bad.yaml:3:.*membership.gossip_nodes" "$out" || fail "config: no file:line message: $(cat "$out")"
run_cli "$out" run --config "$EA_TMP/bad.yaml" --data-dir "$EA_TMP/never"
[ "$RC" -ne 0 ] || fail "run accepted a bad file"
grep -q "bad.yaml:3:" "$out" || fail "run: no file:line message: $(cat "$out")"
[ ! -e "$EA_TMP/never" ] || fail "run with a bad file created its data dir"
printf 'membership:\n  probe_interval_msec: 200\n' >"$EA_TMP/typo.yaml"
run_cli "$out" config --config "$EA_TMP/typo.yaml"
[ "$RC" -ne 0 ] && grep -q "typo.yaml:2:" "$out" || fail "unknown key not reported with its line: $(cat "$out")"
run_cli "$out" config --config "$EA_TMP/missing.yaml"
[ "$RC" -ne 0 ] && grep -q "missing.yaml" "$out" || fail "missing file not reported: $(cat "$out")"
printf 'membership:\n  probe_interval_ms: 300\n' >"$EA_TMP/good.yaml"
run_cli "$out" config --config "$EA_TMP/good.yaml" --set membership.gossip_nodes=5
assert_eq "$RC" 0 "config with a good file"
grep -qE '^  probe_interval_ms: 300$' "$out" || fail "config does not show the file's value"
grep -qE '^  gossip_nodes: 5$' "$out" || fail "config does not show the --set value"
pass "bad job files: loader message with file:line, non-zero exit; config prints overrides"

say "status without an agent"
run_cli "$out" status --data-dir "$EA_TMP/nobody"
assert_eq "$RC" 1 "status exit status with no agent"
grep -q "no agent is running" "$out" || fail "status message: $(cat "$out")"
pass "status with no agent: $(head -n1 "$out")"

say "keygen"
run_cli "$out" keygen "$EA_TMP/cluster.key"
assert_eq "$RC" 0 "keygen exit status"
assert_eq "$(stat -c %a "$EA_TMP/cluster.key")" 600 "key file mode"
grep -qxE '[0-9a-f]{64}' "$EA_TMP/cluster.key" || fail "key file content: $(cat "$EA_TMP/cluster.key")"
key1=$(cat "$EA_TMP/cluster.key")
run_cli "$out" keygen "$EA_TMP/cluster.key"
[ "$RC" -ne 0 ] || fail "keygen overwrote an existing key"
assert_eq "$(cat "$EA_TMP/cluster.key")" "$key1" "key after a refused keygen"
"$EA_BIN" keygen | grep -qxE '[0-9a-f]{64}' || fail "keygen to stdout"
[ "$("$EA_BIN" keygen)" != "$("$EA_BIN" keygen)" ] || fail "two keys are equal"
printf 'short\n' >"$EA_TMP/bad.key"
run_cli "$out" run --key-file "$EA_TMP/bad.key" --data-dir "$EA_TMP/kd" --bind 127.0.0.1:0
[ "$RC" -eq 1 ] && grep -q "key-file" "$out" || fail "bad key file: rc=$RC $(cat "$out")"
pass "keygen writes a 0600 64-hex key and refuses to overwrite"

say "one agent's life cycle"
start_agent solo --key-file "$EA_TMP/cluster.key"
data=${AGENT_DIR[solo]}/data
assert_eq "$(stat -c %a "$data")" 700 "data dir mode"
assert_eq "$(stat -c %a "$data/admin.sock")" 600 "admin socket mode"
grep -qxE '[0-9a-f]{32}' "$data/node-id" || fail "node-id content"
id=$(cat "$data/node-id")
wait_for 5 sees_alive solo 1 || fail "status: $(ea_status solo)"
st=$(ea_status solo)
assert_contains "$st" "controller: solo (id $id)" "status controller line"
assert_contains "$st" "cluster key: yes" "status key line"
ea_status solo --json | "$PY" -c 'import json,sys; d=json.load(sys.stdin); assert d["self"]["id"]==sys.argv[1], d' "$id" ||
  fail "status --json"
# The admin protocol: one line in, one JSON document out; errors are JSON.
admin() {
  "$PY" - "$data/admin.sock" "$1" <<'PY'
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(5)
s.connect(sys.argv[1])
s.sendall(sys.argv[2].encode())
s.shutdown(socket.SHUT_WR)
buf = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    buf += b
print(json.dumps(json.loads(buf)))
PY
}
a=$(admin $'help\n') || fail "admin help"
assert_contains "$a" '"name": "status"' "admin help lists status"
a=$(admin $'frobnicate everything\n') || fail "admin unknown command"
assert_contains "$a" "unknown command 'frobnicate'" "admin unknown command"
a=$(admin $'drain nobody\n') || fail "admin drain of an unknown member"
assert_contains "$a" "no alive member named 'nobody'" "admin drain of an unknown member"
a=$(admin "$(head -c 3000 /dev/zero | tr '\0' x)") || fail "admin long line"
assert_contains "$a" "too long" "admin long line"
a=$(admin 'status') || fail "admin status without newline (EOF ends the line)"
assert_contains "$a" '"summary"' "admin status"
run_cli "$out" run --name dup --bind 127.0.0.1:0 --data-dir "$data"
assert_eq "$RC" 1 "second agent on the same data dir"
grep -q "in use by another agent" "$out" || fail "second agent message: $(cat "$out")"
stop_agent solo TERM
wait_exit solo 5 || fail "solo did not exit on SIGTERM"
assert_eq "$EXIT_RC" 0 "exit status after SIGTERM"
[ ! -e "$data/admin.sock" ] || fail "admin socket not removed at exit"
grep -q "exit stopped cleanly" "$(agent_log solo)" || fail "no clean stop: $(tail -3 "$(agent_log solo)")"
mv "$(agent_log solo)" "$EA_TMP/solo-first.log"
start_agent solo --key-file "$EA_TMP/cluster.key"
assert_eq "$(cat "$data/node-id")" "$id" "node id after restart"
grep -q "listen .*id=$id" "$(agent_log solo)" || fail "restarted agent does not use the persisted id"
stop_agent solo KILL
wait_exit solo 5 || fail "solo did not die on SIGKILL"
[ -S "$data/admin.sock" ] || fail "expected a stale socket after SIGKILL"
start_agent solo --key-file "$EA_TMP/cluster.key"
wait_for 5 sees_alive solo 1 || fail "status after replacing a stale socket: $(ea_status solo)"
pass "data dir 0700, socket 0600, id persisted, lock held, SIGTERM exits 0, stale socket replaced"

echo "WALL test_cli_ms=$(($(now_ms) - t_start))"
exit 0
