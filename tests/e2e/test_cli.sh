#!/usr/bin/env bash
# End-to-end: the command line and the life cycle of one agent.
#
#  - --help documents every flag with defaults and examples; version prints;
#  - a bad flag, a bad value, an unknown command: exit 2, a message naming
#    it and a pointer to --help;
#  - a bad job file: the loader's "FILE:LINE: key: problem", non-zero exit,
#    from both `config` and `run`; `config` prints overrides;
#  - `status` with no agent: a clear error, exit 1;
#  - keygen: a 0600 file of 64 hex characters, never overwritten; a key
#    file that group or others can read is refused, exit 2 (issue 11);
#  - one agent: a 0700 data dir with a persisted node id and a 0600 admin
#    socket speaking one-line commands (help, status; unknown and overlong
#    lines answered with a JSON error); a second agent on the same data dir is refused; SIGTERM exits 0
#    and removes the socket; a restart keeps the id; after SIGKILL the stale
#    socket is replaced.  40 held admin connections do not stop `status`
#    (the held ones are answered "busy", never reset); only the agent's user
#    or root may drain (SO_PEERCRED), even through a loosened socket.
#  - issue 13: the bare command prints a short usage and exits 2, any flag
#    alone still runs the agent; every command has its own --help (exit 0,
#    stdout); stray arguments are errors naming them; --tags wants
#    KEY=VALUE; --control-bind/--advertise want a port; a gossip bind
#    failure names the address and --bind; a job file's every problem is
#    printed; the deployment guide's job file (file:// URIs) runs one agent
#    to the job's end with JSON logs whose progress lines carry step, loss,
#    generation and node as fields.
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
  --log-level --log-format --socket --json --bootstrap keygen status config version Examples 0.0.0.0:7000 \
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
expect_usage "--bootstrap: only with --join" run --bootstrap
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
chmod 600 "$EA_TMP/bad.key"
run_cli "$out" run --key-file "$EA_TMP/bad.key" --data-dir "$EA_TMP/kd" --bind 127.0.0.1:0
[ "$RC" -eq 1 ] && grep -q "key-file" "$out" || fail "bad key file: rc=$RC $(cat "$out")"
pass "keygen writes a 0600 64-hex key and refuses to overwrite"

say "a key file that group or others can read is refused (as ssh does)"
cp "$EA_TMP/cluster.key" "$EA_TMP/loose.key"
for mode in 644 640 604; do
  chmod "$mode" "$EA_TMP/loose.key"
  run_cli "$out" run --key-file "$EA_TMP/loose.key" --data-dir "$EA_TMP/kd" --bind 127.0.0.1:0
  [ "$RC" -eq 2 ] && grep -q -- "--key-file $EA_TMP/loose.key: key file: mode 0$mode" "$out" ||
    fail "a mode $mode key file: rc=$RC $(cat "$out")"
done
pass "mode 0644, 0640, 0604 key files: exit 2 naming the file and its mode"

say "one agent's life cycle"
# train.steps: the agent must outlive this script (the job ending would free the data dir)
start_agent solo --key-file "$EA_TMP/cluster.key" --set train.steps=100000000
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
# Issue 11: 40 held admin connections (half with a partial request) made
# every status fail with "Connection reset by peer".  Now a status still
# works while they are held, the held ones are answered "busy" or time
# out (never a reset), and the agent's open fds stay bounded.
"$PY" - "$data/admin.sock" "$EA_BIN" "$data" "${AGENT_PID[solo]}" <<'PY' || fail "admin connections held"
import json, os, select, socket, subprocess, sys, time
path, binary, data, pid = sys.argv[1:5]
fds0 = len(os.listdir(f"/proc/{pid}/fd"))
held = []
for i in range(40):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    if i % 2:
        s.sendall(b"sta")
    held.append(s)
# wait (5 s at most) until the agent has dealt with all 40: the 24 over the
# limit are answered at once (evicted "busy"), the 16 it serves are not
deadline = time.time() + 5
while time.time() < deadline:
    readable, _, _ = select.select(held, [], [], 0.05)
    if len(readable) >= 40 - 16:
        break
fds = len(os.listdir(f"/proc/{pid}/fd"))
# one descriptor per held connection at most (16 served, the evicted ones
# read until their EOF for 1 s), nothing else
assert fds <= fds0 + 40 + 2, f"agent fds {fds0} -> {fds} with 40 held connections"
for attempt in range(3):
    r = subprocess.run([binary, "status", "--data-dir", data, "--json"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, f"status with 40 held connections: rc={r.returncode} {r.stderr}"
    assert "summary" in json.loads(r.stdout), r.stdout[:200]
answers = {"busy": 0, "timeout": 0, "closed": 0}
deadline = time.time() + 8
for s in held:
    s.settimeout(max(0.1, deadline - time.time()))
    buf = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            buf += b
    except ConnectionResetError:
        raise AssertionError("a held admin connection was reset")
    text = buf.decode()
    if "busy" in text:
        answers["busy"] += 1
    elif "no request line" in text:
        answers["timeout"] += 1
    else:
        answers["closed"] += 1
    s.close()
assert answers["busy"] >= 40 - 16, answers
print("held connections:", answers, f"fds {fds0} -> {fds}")
PY
pass "status works with 40 admin connections held; the held ones are answered busy or time out"
# Issue 11: only the agent's user (or root) may drain, even when an operator
# loosens the socket's mode: SO_PEERCRED.  Another uid may still read status.
chmod 755 "$EA_TMP" "${AGENT_DIR[solo]}" "$data"
chmod 666 "$data/admin.sock"
"$PY" - "$data/admin.sock" <<'PY' || fail "drain from another uid"
import json, os, socket, sys
os.setgid(65534)
os.setuid(65534)
def ask(line):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    s.connect(sys.argv[1])
    s.sendall(line)
    s.shutdown(socket.SHUT_WR)
    buf = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        buf += b
    return json.loads(buf)
d = ask(b"drain solo\n")
assert "permission denied" in d.get("error", "") and "uid 65534" in d["error"], d
assert "summary" in ask(b"status\n")
PY
chmod 700 "$EA_TMP" "$data"
chmod 600 "$data/admin.sock"
a=$(admin $'drain nobody\n') || fail "admin drain as the agent's user"
assert_contains "$a" "no alive member named 'nobody'" "drain as the agent's user still runs"
grep -q "refused 'drain' from uid 65534" "$(agent_log solo)" || fail "no log line for the refused drain"
pass "drain from uid 65534 refused (SO_PEERCRED), status allowed; the agent's user may drain"
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

say "the bare command, per-command help, stray arguments (issue 13)"
RC=0
"$EA_BIN" >"$EA_TMP/bare.out" 2>"$EA_TMP/bare.err" </dev/null || RC=$?
assert_eq "$RC" 2 "bare elastic-agent exit status"
[ ! -s "$EA_TMP/bare.out" ] || fail "bare elastic-agent wrote to stdout: $(cat "$EA_TMP/bare.out")"
grep -q "^Usage: elastic-agent COMMAND" "$EA_TMP/bare.err" || fail "bare usage: $(cat "$EA_TMP/bare.err")"
[ "$(wc -l <"$EA_TMP/bare.err")" -le 5 ] || fail "bare usage is not short: $(wc -l <"$EA_TMP/bare.err") lines"
for cmd in run status drain worker ckpt keygen config version; do
  RC=0
  "$EA_BIN" "$cmd" --help >"$EA_TMP/h.out" 2>"$EA_TMP/h.err" </dev/null || RC=$?
  assert_eq "$RC" 0 "$cmd --help exit status"
  [ ! -s "$EA_TMP/h.err" ] || fail "$cmd --help wrote to stderr: $(cat "$EA_TMP/h.err")"
  grep -q "Usage:" "$EA_TMP/h.out" || fail "$cmd --help has no Usage line: $(head -3 "$EA_TMP/h.out")"
  # its own text, not the whole manual: no other command's flag section
  [ "$cmd" = run ] || ! grep -q "Flags of \`run\`" "$EA_TMP/h.out" || fail "$cmd --help prints run's flags"
done
"$EA_BIN" run --help | grep -q -- "--bind ADDR" || fail "run --help lacks --bind"
"$EA_BIN" run --help | grep -q "without a port takes port 7000" || fail "run --help does not say what a portless --bind means"
"$EA_BIN" help config | grep -q "Flags of \`config\`" || fail "help config"
expect_usage "unexpected argument 'extra'" run --bind 127.0.0.1:0 extra
expect_usage "status: unexpected argument 'extra'" status extra
expect_usage "drain: unexpected argument 'two'" drain one two
expect_usage "worker: unexpected argument 'extra'" worker --ipc-fd 3 extra
expect_usage "keygen: unexpected argument 'b'" keygen "$EA_TMP/a.key" b
expect_usage "config: unexpected argument 'extra'" config extra
expect_usage "version: unexpected argument 'extra'" version extra
expect_usage "help: unexpected argument 'b'" help a b
expect_usage "unknown option '--frob'" config --frob
expect_usage "unknown option '--frob'" worker --frob
pass "bare command exits 2 with a short usage; each command's --help; stray arguments named"

say "flag values: --tags, ports, bind failure (issue 13)"
expect_usage "--tags: 'foo' is not KEY=VALUE" --tags foo
expect_usage "--tags: '=v' is not KEY=VALUE" run --tags a=1,=v
expect_usage "--role: expected worker or observer" run --tags rack=r1,gpu= --role boss # tags accepted
expect_usage "--control-bind: '127.0.0.1' has no port" run --control-bind 127.0.0.1
expect_usage "--advertise: '10.0.0.1' has no port" run --advertise 10.0.0.1
expect_usage "--role: expected worker or observer" run --bind 127.0.0.1 --role boss # portless --bind parses
busy=$("$PY" -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# hold a UDP port for the duration of one agent start
rm -f "$EA_TMP/holder.ready"
"$PY" -c 'import socket,sys,time; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1",int(sys.argv[1]))); open(sys.argv[2], "w").close(); time.sleep(20)' "$busy" "$EA_TMP/holder.ready" &
holder=$!
wait_for 10 test -e "$EA_TMP/holder.ready" || fail "the port holder did not bind 127.0.0.1:$busy"
RC=0
# --control-bind port 0: by default the control channel takes the next port
# over TCP, and a clean-clone CI run found 127.0.0.1:$((busy + 1)) taken by
# someone else (the agent said so, correctly, before it tried the gossip port)
timeout 10 "$EA_BIN" run --bind "127.0.0.1:$busy" --control-bind 127.0.0.1:0 --name busy \
  --data-dir "$EA_TMP/busy" --set observability.metrics_listen= >"$out" 2>&1 </dev/null || RC=$?
kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null || true
assert_eq "$RC" 1 "agent on a busy gossip port"
grep -q "cannot listen for gossip on 127.0.0.1:$busy: .*--bind HOST:PORT" "$out" ||
  fail "bind failure message: $(cat "$out")"
pass "--tags k=v only; control/advertise need a port; bind failure names 127.0.0.1:$busy and --bind"

say "any flag alone runs the agent (issue 13)"
mkdir -p "$EA_TMP/flag"
setsid "$EA_BIN" --join 127.0.0.1:9 --bind 127.0.0.1:0 --name flag --data-dir "$EA_TMP/flag/data" \
  --set observability.metrics_listen= >"$EA_TMP/flag/log" 2>&1 </dev/null &
fpid=$!
EA_PGIDS+=("$fpid")
wait_for 10 grep -q ' listen .*gossip=' "$EA_TMP/flag/log" || fail "'elastic-agent --join …' did not start: $(tail -3 "$EA_TMP/flag/log")"
kill -TERM -- "-$fpid" 2>/dev/null
wait "$fpid" 2>/dev/null || true
pass "elastic-agent --join seed:port starts an agent"

say "every problem of a job file at once (issue 13)"
printf 'compute:\n  worker_nodes: two\n  gpus: 8\ncheckpoint:\n  storage_uri: "s3://b/x"\n' >"$EA_TMP/multi.yaml"
run_cli "$out" config --config "$EA_TMP/multi.yaml"
assert_eq "$RC" 1 "config with three problems"
grep -q "^elastic-agent: $EA_TMP/multi.yaml:2: compute.worker_nodes: expected an integer" "$out" || fail "multi: line 2: $(cat "$out")"
grep -q "^elastic-agent: $EA_TMP/multi.yaml:3: compute.gpus: unknown key" "$out" || fail "multi: line 3: $(cat "$out")"
grep -q "^elastic-agent: $EA_TMP/multi.yaml:5: checkpoint.storage_uri: scheme s3:// is not supported" "$out" || fail "multi: line 5: $(cat "$out")"
assert_eq "$(wc -l <"$out")" 3 "lines for three problems"
pass "three problems, three FILE:LINE: key: problem lines"

say "the deployment guide's job file runs to the job's end (issue 13)"
g=$EA_TMP/guide
mkdir -p "$g"
sed "s|@DIR@|$g|g" tests/data/guide_job.yaml >"$g/job.yaml"
grep -q 'storage_uri: "file://' "$g/job.yaml" || fail "guide file: $(cat "$g/job.yaml")"
RC=0
timeout 120 "$EA_BIN" run --name g1 --bind 127.0.0.1:0 --data-dir "$g/data" --config "$g/job.yaml" \
  --set train.steps=41 --set train.warmup_steps=5 --set observability.metrics_listen= \
  --log-format json >"$g/stderr" 2>&1 </dev/null || RC=$?
log=$g/experiments/training_baseline_v1/logs/g1.log
assert_eq "$RC" 0 "exit status of the guide's job ($(tail -3 "$log" 2>/dev/null))"
ls "$g/experiments/training_baseline_v1/checkpoints/" | grep -q '^step-41\.gen-' ||
  fail "no final checkpoint under storage_uri: $(ls -R "$g/experiments" | head)"
"$EA_BIN" ckpt verify "$g/experiments/training_baseline_v1/checkpoints" >/dev/null || fail "final checkpoint does not verify"
[ -s "$log" ] || fail "logs_uri has no g1.log"
"$PY" - "$log" <<'PY' || fail "JSON progress lines: $(grep -m2 progress "$log")"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
prog = [l for l in lines if l["event"] == "progress" and l["node"] == "g1"]
assert len(prog) >= 3, prog
for l in prog:
    for k in ("step", "loss", "generation", "world", "node", "job"):
        assert k in l, (k, l)
    assert isinstance(l["step"], int) and l["step"] % 20 == 0, l   # metrics_interval_steps: 20
    assert isinstance(l["loss"], float) and l["generation"] >= 1 and l["world"] == 4, l
    assert l["job"] == "training_baseline_v1", l
gen = [l for l in lines if l["event"] == "generation" and "generation" in l]
assert gen, "no generation line with a generation field"
assert any(l["event"] == "metrics" for l in lines), "no metrics line (metrics_export_interval_seconds)"
PY
pass "guide file: 1 agent × 4 workers to step 41, checkpoint under storage_uri verifies, JSON logs under logs_uri"

say "a smoke run of the guide's job file"
RC=0
timeout 120 "$EA_BIN" run --smoke 30 --name g2 --bind 127.0.0.1:0 --data-dir "$g/data2" --config "$g/job.yaml" \
  --set observability.metrics_listen= >"$g/smoke.out" 2>"$g/smoke.err" </dev/null || RC=$?
assert_eq "$RC" 0 "exit status of the guide's smoke run ($(grep -E '^(FAIL|smoke)' "$g/smoke.out"))"
grep -q '^smoke: PASS (8 passed, 0 failed)$' "$g/smoke.out" || fail "smoke report: $(cat "$g/smoke.out")"
grep -q '^PASS  restore     generation [0-9]* (fresh, world 4) loaded the checkpoint' "$g/smoke.out" ||
  fail "restore row: $(grep restore "$g/smoke.out")"
ls "$g/experiments/training_baseline_v1/checkpoints/smoke" | grep -q '^step-30\.gen-' ||
  fail "no smoke checkpoint under storage_uri/smoke: $(ls -R "$g/experiments" | head)"
pass "guide file: run --smoke 30 passes its 8 checks at world 4"

echo "WALL test_cli_ms=$(($(now_ms) - t_start))"
exit 0
