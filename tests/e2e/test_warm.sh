#!/usr/bin/env bash
# End-to-end: a restart-mode worker started from a warm interpreter
# (compute.warm_start, issue 29) cannot tell that it was.  tests/e2e/
# warm_dump.py writes what it can see — environment, argv, orig_argv,
# __name__, __file__, __main__'s names, sys.path, cwd, sys.executable,
# flags, every signal's disposition, stdio kinds and buffering, open fds,
# process group and session, umask, and a multiprocessing spawn child's view —
# and each case runs it twice on one agent with two workers, warm (the
# default) and with compute.warm_start off, and compares the dumps:
#
#  1. `-- python SCRIPT ARG…`: the same dump; the warm run's workers were
#     started warm (the log says so, for both local ranks) and the cold
#     run's were not; their stdout and stderr lines are in the generation's
#     output files both times;
#  2. `-- python -u -m warm_dump ARG…` from tests/e2e: the same dump;
#  3. rank 1 raises inside torchelastic's @record, runtime.max_restarts 0:
#     the same exit status of the agent, the same error file (message and
#     Python call stack), and no frame of the warm launcher in its stderr;
#  4. a preload that fails (compute.preload=no_such_module_xyz): one warning
#     per local rank naming the module, workers started cold, the job
#     finishes with status 0;
#  5. a program that is not Python (/bin/true) never starts warm (the log
#     says why), and compute.warm_start on refuses it (exit 2, naming why).
source "$(dirname "$0")/lib.sh"
DUMP=$PWD/tests/e2e/warm_dump.py
COMMON=(--set compute.workers_per_node=2 --set distributed.scale_up_delay_ms=300
  --set runtime.max_restarts=0)

# run_job NAME DUMPDIR [flags…] -- PROGRAM… : one agent to the job's end; EXIT_RC
run_job() {
  local name=$1 out=$2
  shift 2
  mkdir -p "$out"
  export EA_WARM_DUMP_DIR=$out
  start_agent "$name" "${COMMON[@]}" "$@"
  unset EA_WARM_DUMP_DIR
  wait_exit "$name" 180 || fail "$name did not exit: $(tail -5 "$(agent_log "$name")")"
}

# started_warm NAME: how many worker starts the log calls warm
started_warm() { grep -c 'worker . started pid=[0-9]* (.*warm' "$(agent_log "$1")"; }

compare() { # WARMDIR COLDDIR WARMDATA COLDDATA
  "$PY" - "$@" <<'PY'
import json, sys
wd, cd, wdata, cdata = sys.argv[1:5]
bad = []
for r in (0, 1):
    w, c = (json.load(open("%s/rank%d.json" % (d, r))) for d in (wd, cd))
    for d, data in ((w, wdata), (c, cdata)):
        e = d["env"]
        # each run's own: where it dumps, its port, its name, its data dir
        for k in ("EA_WARM_DUMP_DIR", "MASTER_PORT", "EA_NODE_NAME", "_"):
            e.pop(k, None)
        for k in list(e):
            e[k] = e[k].replace(data, "DATA")
    for k in sorted(set(w) | set(c)):
        if w.get(k) != c.get(k):
            if isinstance(w.get(k), dict) and isinstance(c.get(k), dict):
                for kk in sorted(set(w[k]) | set(c[k])):
                    if w[k].get(kk) != c[k].get(kk):
                        bad.append("rank %d %s.%s: warm %r, cold %r" % (r, k, kk, w[k].get(kk), c[k].get(kk)))
            else:
                bad.append("rank %d %s: warm %r, cold %r" % (r, k, w.get(k), c.get(k)))
if bad:
    print("\n".join(bad))
    sys.exit(1)
print("ranks 0, 1: %d items each, identical" % len(w))
PY
}

say "1. python SCRIPT: warm and cold see the same"
run_job w1 "$EA_TMP/d-w1" -- "$EA_PYTHON" "$DUMP" --tag x
assert_eq "$EXIT_RC" 0 "w1's exit status"
assert_eq "$(started_warm w1)" 2 "warm starts in w1's log"
run_job c1 "$EA_TMP/d-c1" --set compute.warm_start=off -- "$EA_PYTHON" "$DUMP" --tag x
assert_eq "$EXIT_RC" 0 "c1's exit status"
assert_eq "$(started_warm c1)" 0 "warm starts in c1's log"
compare "$EA_TMP/d-w1" "$EA_TMP/d-c1" "$EA_TMP/w1/data" "$EA_TMP/c1/data" || fail "warm and cold dumps differ"
for n in w1 c1; do
  for r in 0 1; do
    grep -q "warm_dump rank $r: stdout" "$EA_TMP/$n"/data/workers/gen-*/rank-$r.stdout ||
      fail "$n: rank $r's stdout line is not in its output file"
    grep -q "warm_dump rank $r: stderr" "$EA_TMP/$n"/data/workers/gen-*/rank-$r.stderr ||
      fail "$n: rank $r's stderr line is not in its output file"
  done
done
pass "python SCRIPT: the same dump warm and cold; 2 warm starts; output captured both ways"

say "2. python -u -m MODULE from tests/e2e"
pushd tests/e2e >/dev/null || fail "cd tests/e2e"
run_job w2 "$EA_TMP/d-w2" -- "$EA_PYTHON" -u -m warm_dump --tag y
rc_w=$EXIT_RC
run_job c2 "$EA_TMP/d-c2" --set compute.warm_start=off -- "$EA_PYTHON" -u -m warm_dump --tag y
rc_c=$EXIT_RC
popd >/dev/null || fail "cd back"
assert_eq "$rc_w/$rc_c" 0/0 "exit statuses warm/cold"
assert_eq "$(started_warm w2)" 2 "warm starts in w2's log"
compare "$EA_TMP/d-w2" "$EA_TMP/d-c2" "$EA_TMP/w2/data" "$EA_TMP/c2/data" || fail "-m: warm and cold dumps differ"
pass "python -u -m MODULE: the same dump warm and cold"

say "3. rank 1 raises under @record"
run_job w3 "$EA_TMP/d-w3" -- "$EA_PYTHON" "$DUMP" --fail
rc_w=$EXIT_RC
run_job c3 "$EA_TMP/d-c3" --set compute.warm_start=off -- "$EA_PYTHON" "$DUMP" --fail
rc_c=$EXIT_RC
[ "$rc_w" != 0 ] || fail "the failed job exited 0 warm"
assert_eq "$rc_w" "$rc_c" "the agent's exit status, warm vs cold"
"$PY" - "$EA_TMP"/w3/data/workers/gen-*/rank-1.error.json "$EA_TMP"/c3/data/workers/gen-*/rank-1.error.json <<'PY' || fail "error files differ"
import json, sys
w, c = (json.load(open(p))["message"] for p in sys.argv[1:3])
assert w["message"] == c["message"], (w["message"], c["message"])
assert "rank 1 fails on purpose" in w["message"], w["message"]
ws, cs = w["extraInfo"]["py_callstack"], c["extraInfo"]["py_callstack"]
assert ws == cs, (ws, cs)
print("error file: %s; call stacks identical (%d lines)" % (w["message"], len(ws.splitlines())))
PY
grep -q "rank 1 fails on purpose" "$EA_TMP"/w3/data/workers/gen-*/rank-1.stderr ||
  fail "the traceback is not in rank 1's stderr"
! grep -q "_warm.py" "$EA_TMP"/w3/data/workers/gen-*/rank-1.stderr ||
  fail "the warm launcher shows in the traceback: $(grep -n _warm.py "$EA_TMP"/w3/data/workers/gen-*/rank-1.stderr)"
pass "a failure: exit $rc_w both ways, the same error file, no launcher frame"

say "4. a preload that fails"
run_job p4 "$EA_TMP/d-p4" --set compute.preload=no_such_module_xyz -- "$EA_PYTHON" "$DUMP"
assert_eq "$EXIT_RC" 0 "p4's exit status"
n=$(grep -c "no warm interpreter: its preload failed (no_such_module_xyz: ModuleNotFoundError" "$(agent_log p4)")
assert_eq "$n" 2 "preload warnings (one per local rank)"
assert_eq "$(started_warm p4)" 0 "warm starts after a failed preload"
pass "a failed preload: one warning per local rank, cold starts, exit 0"

say "5. not Python"
start_agent n5 "${COMMON[@]}" -- /bin/true
wait_exit n5 60 || fail "n5 did not exit"
assert_eq "$EXIT_RC" 0 "n5's exit status"
grep -q "warm start: off: not a Python interpreter: /bin/true" "$(agent_log n5)" ||
  fail "n5's log does not say why it is cold: $(grep warm "$(agent_log n5)")"
! grep -q "warm interpreter pid" "$(agent_log n5)" || fail "a warm interpreter was started for /bin/true"
out=$("$EA_BIN" run --name o5 --bind 127.0.0.1:0 --data-dir "$EA_TMP/o5" --set observability.metrics_listen= \
  --set compute.warm_start=on -- /bin/true 2>&1)
rc=$?
assert_eq "$rc" 2 "warm_start on with /bin/true"
assert_contains "$out" "compute.warm_start on: not a Python interpreter: /bin/true" "the refusal"
pass "/bin/true: cold, and refused with warm_start on"
