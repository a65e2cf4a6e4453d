#!/usr/bin/env bash
# End-to-end: `elastic-agent preflight` (issue 13, item 6) against real agents
# on 127.0.0.1.
#
#  - a good setup (a sealed 2-agent cluster sharing one checkpoint.dir):
#    every row PASS or WARN, exit 0; the seed answered and accepted our key,
#    every agent sees the probe file, a clock offset is printed; --json is
#    a document with ok=true and the same rows; the probe file is gone;
#  - each bad setup FAILs its row with the right hint and exits 1: a
#    cluster key the seeds do not have, no key for a sealed cluster, a
#    per-node checkpoint dir (the default), a data dir another agent holds,
#    a port in use, a bad job file, the nccl backend on this CPU-only
#    machine (the tcp backend: WARN), a program not on PATH, a python whose
#    `import torch` fails, a checkpoint dir too small for keep_last + 1
#    states;
#  - library mode with Debian's python: import torch and import
#    elastic_agent PASS;
#  - usage errors exit 2, --help exits 0.
source "$(dirname "$0")/lib.sh"
t_start=$(now_ms)

# pf OUT ARGS… — run preflight with a fresh data dir of its own and free
# ports; RC is its exit status, OUT its stdout+stderr.
PF_DATA=$EA_TMP/pf-data
pf() {
  local out=$1
  shift
  RC=0
  # the control port too: free_port says nothing of gossip port + 1 (the
  # default), which another test's agent may hold (a FAIL seen 1 run in 6)
  "$EA_BIN" preflight --data-dir "$PF_DATA" --bind "127.0.0.1:$(free_port)" \
    --control-bind "127.0.0.1:$(free_port)" --set observability.metrics_listen= "$@" >"$out" 2>&1 \
    </dev/null || RC=$?
}
# row OUT CHECK — the status word of CHECK's row.
row() { awk -v c="$2" '$2 == c { print $1; exit }' "$1"; }
out=$EA_TMP/out

"$EA_BIN" keygen "$EA_TMP/k1" 2>/dev/null || fail "keygen"
"$EA_BIN" keygen "$EA_TMP/k2" 2>/dev/null || fail "keygen"
SHARED=$EA_TMP/shared
mkdir -p "$SHARED"

say "usage"
RC=0
"$EA_BIN" preflight --help >"$out" 2>&1 || RC=$?
assert_eq "$RC" 0 "preflight --help"
assert_contains "$(cat "$out")" "--join SEEDS" "preflight --help"
RC=0
"$EA_BIN" preflight --no-such-flag >"$out" 2>&1 || RC=$?
assert_eq "$RC" 2 "an unknown flag"
RC=0
"$EA_BIN" preflight stray >"$out" 2>&1 || RC=$?
assert_eq "$RC" 2 "a stray argument"

say "a sealed 2-agent cluster sharing $SHARED"
# min_nodes 3: the two agents wait (no training) and answer probes.
common=(--key-file "$EA_TMP/k1" --set compute.min_nodes=3 --set "checkpoint.dir=$SHARED")
start_agent a1 "${common[@]}"
start_agent a2 "${common[@]}" --join "${AGENT_ADDR[a1]}"
wait_for 10 sees_alive a1 2 || fail "a1 does not see 2 alive"
wait_for 10 sees_alive a2 2 || fail "a2 does not see 2 alive"

say "good setup: PASS"
pf "$out" --join "${AGENT_ADDR[a1]}" --key-file "$EA_TMP/k1" --set "checkpoint.dir=$SHARED"
cat "$out"
assert_eq "$RC" 0 "preflight on a good setup"
for c in config key data_dir program ckpt_dir ckpt_io ckpt_space gossip_port control_port seed \
  ckpt_shared clock; do
  assert_eq "$(row "$out" "$c")" PASS "row $c"
done
assert_eq "$(row "$out" gpu)" WARN "the tcp backend's gpu row"
assert_contains "$(grep '^PASS  seed' "$out")" "accepted our key: 2 members, 2 alive" "seed row"
assert_contains "$(grep '^PASS  ckpt_shared' "$out")" "all 2 agents see" "ckpt_shared row"
grep -q '^PASS  clock .*offset [+-][0-9.]* ms (± [0-9.]* ms)' "$out" || fail "clock row: $(cat "$out")"
grep -q 'O_DIRECT write of 4 MiB [0-9.]* ms .*fsync [0-9.]* ms' "$out" || fail "ckpt_io timings"
assert_contains "$(cat "$out")" "preflight: 12 passed, 1 warnings, 0 failed" "summary"
[ -z "$(ls -A "$SHARED")" ] || fail "preflight left files in $SHARED: $(ls -A "$SHARED")"
grep -q 'checkpoint-dir probe from .*: seen in' "$(agent_log a2)" || fail "a2 did not log the probe"

pf "$out" --json --join "${AGENT_ADDR[a1]}" --key-file "$EA_TMP/k1" --set "checkpoint.dir=$SHARED"
[ "$RC" = 0 ] || fail "preflight --json on a good setup exited $RC: $(cat "$out")"
"$PY" - "$out" <<'EOF' || fail "preflight --json: $(cat "$out")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["ok"] is True and d["failed"] == 0, d
names = [c["check"] for c in d["checks"]]
assert "ckpt_shared" in names and "clock" in names and "seed" in names, names
for c in d["checks"]:
    assert c["status"] in ("PASS", "WARN", "FAIL"), c
    assert (c["hint"] is None) == (c["status"] == "PASS"), c
EOF

say "bad: another cluster key"
pf "$out" --join "${AGENT_ADDR[a1]}" --key-file "$EA_TMP/k2" --set "checkpoint.dir=$SHARED"
assert_eq "$RC" 1 "a wrong key"
assert_eq "$(row "$out" seed)" FAIL "seed row with a wrong key"
assert_contains "$(cat "$out")" "did not accept our key" "wrong key detail"
assert_contains "$(cat "$out")" "same --key-file" "wrong key hint"

say "bad: no key for a sealed cluster"
pf "$out" --join "${AGENT_ADDR[a1]}" --set "checkpoint.dir=$SHARED"
assert_eq "$RC" 1 "no key"
assert_eq "$(row "$out" seed)" FAIL "seed row without a key"
assert_contains "$(cat "$out")" "pass --key-file" "no key detail"

say "bad: nobody at the seed"
pf "$out" --join "127.0.0.1:$(free_port)" --key-file "$EA_TMP/k1"
assert_eq "$RC" 1 "a dead seed"
assert_contains "$(grep -A1 '^FAIL  seed' "$out")" "no agent listens there" "dead seed hint"

say "bad: a per-node checkpoint dir (the default)"
pf "$out" --join "${AGENT_ADDR[a1]}" --key-file "$EA_TMP/k1"
assert_eq "$RC" 1 "per-node checkpoint dir"
assert_eq "$(row "$out" ckpt_shared)" FAIL "ckpt_shared row"
assert_contains "$(cat "$out")" "is not the directory 2 of 2 agents see" "ckpt_shared detail"
assert_contains "$(cat "$out")" "shared storage" "ckpt_shared hint"
assert_contains "$(cat "$out")" "a1: absent in $SHARED" "ckpt_shared names where a1 looks"

say "bad: the data dir of a running agent, its port"
RC=0
"$EA_BIN" preflight --data-dir "${AGENT_DIR[a1]}/data" --bind "${AGENT_ADDR[a1]}" \
  --set observability.metrics_listen= >"$out" 2>&1 || RC=$?
assert_eq "$RC" 1 "a busy data dir and port"
assert_eq "$(row "$out" data_dir)" FAIL "data_dir row"
assert_contains "$(cat "$out")" "in use by another agent (pid ${AGENT_PID[a1]})" "data_dir detail"
assert_contains "$(cat "$out")" "a data dir of its own" "data_dir hint"
assert_eq "$(row "$out" gossip_port)" FAIL "gossip_port row"
assert_contains "$(cat "$out")" "Address already in use" "gossip_port detail"
assert_contains "$(cat "$out")" "choose another port with --bind" "gossip_port hint"
stop_agent a1 KILL
stop_agent a2 KILL
wait "${AGENT_PID[a1]}" "${AGENT_PID[a2]}" 2>/dev/null

say "bad: a job file with errors"
printf 'compute:\n  workers_per_node: -3\ntrain:\n  nosuchkey: 1\n' >"$EA_TMP/bad.yaml"
pf "$out" --config "$EA_TMP/bad.yaml"
assert_eq "$RC" 1 "a bad job file"
assert_eq "$(row "$out" config)" FAIL "config row"
assert_contains "$(cat "$out")" "bad.yaml:2" "config detail names file and line"

say "bad: nccl on this CPU-only machine; tcp is a WARN"
pf "$out" --set distributed.backend=nccl
assert_eq "$RC" 1 "nccl without a GPU"
assert_eq "$(row "$out" gpu)" FAIL "gpu row for nccl"
grep -A1 '^FAIL  gpu' "$out" | grep -q 'distributed.backend: tcp' || fail "nccl hint: $(cat "$out")"
pf "$out" --set distributed.backend=tcp
assert_eq "$RC" 0 "tcp backend"
assert_eq "$(row "$out" gpu)" WARN "gpu row for tcp"

say "bad: the program"
pf "$out" -- no-such-program-here --flag
assert_eq "$RC" 1 "a program not on PATH"
assert_eq "$(row "$out" program)" FAIL "program row"
assert_contains "$(cat "$out")" "'no-such-program-here' is not found in PATH" "program detail"
assert_eq "$(row "$out" ckpt_space)" WARN "a program's state size is unknown"
mkdir -p "$EA_TMP/bin"
cat >"$EA_TMP/bin/python3.99" <<'EOF'
#!/bin/sh
echo "Traceback (most recent call last):"
echo "ModuleNotFoundError: No module named 'torch'"
exit 1
EOF
chmod +x "$EA_TMP/bin/python3.99"
pf "$out" -- "$EA_TMP/bin/python3.99" train.py
assert_eq "$RC" 1 "a python without torch"
assert_eq "$(row "$out" import_torch)" FAIL "import_torch row"
assert_contains "$(cat "$out")" "No module named 'torch'" "import_torch detail"
assert_contains "$(cat "$out")" "install PyTorch" "import_torch hint"
if "$PY" -c 'import torch' 2>/dev/null; then
  pf "$out" --set compute.protocol=library -- "$PY" train.py
  assert_eq "$RC" 0 "library mode with Debian's python: $(cat "$out")"
  assert_eq "$(row "$out" import_torch)" PASS "import torch"
  assert_eq "$(row "$out" import_elastic_agent)" PASS "import elastic_agent"
else
  say "skip: $PY has no torch (the library-mode PASS case)"
fi

say "bad: a checkpoint dir too small"
pf "$out" --set train.hidden=65536 --set train.layers=16 --set train.embed_dim=4096 \
  --set train.context=1024
assert_eq "$RC" 1 "too little space"
assert_eq "$(row "$out" ckpt_space)" FAIL "ckpt_space row"
assert_contains "$(cat "$out")" "(keep_last 3 + the one being written)" "ckpt_space detail"
assert_contains "$(cat "$out")" "lower checkpoint.keep_last" "ckpt_space hint"

pass "preflight: PASS on a good setup, FAIL with the right hint on each bad one ($(($(now_ms) - t_start)) ms)"
