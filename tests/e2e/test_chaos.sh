#!/usr/bin/env bash
# End-to-end smoke of the chaos harness (bin/elastic-chaos), well under a
# minute:
#
#  1. the schedule is a function of the seed: two dry runs with one seed
#     print the same schedule byte for byte, another seed prints another one;
#     bad flags exit 2;
#  2. a real run through --config (a job file of our own, as an operator would
#     run it in CI for their cluster): 3 agents on loopback, a worker kill, a
#     node crash and a SIGTERM (spot reclaim), each recovered; the harness
#     exits 0 only when every invariant held, and its reports are well formed:
#     report.json says ok, every invariant is ok or skipped with a reason, at
#     least 3 faults were injected and recovered with a re-formation time,
#     the final history is bit-identical to the exact replay, junit.xml and
#     timeline.svg parse as XML.
#
# Prints the harness's recovery table (CHAOS lines) for the record.
source "$(dirname "$0")/lib.sh"
t_start=$(now_ms)
CHAOS=${EA_BINDIR:-bin}/elastic-chaos
[[ $CHAOS == /* ]] || CHAOS=$PWD/$CHAOS
[ -x "$CHAOS" ] || fail "$CHAOS is not built (run make)"

say "1. the schedule is a function of the seed"
"$CHAOS" --seed 42 --agents 4 --dry-run >"$EA_TMP/s1" || fail "dry run failed"
"$CHAOS" --seed 42 --agents 4 --dry-run >"$EA_TMP/s2" || fail "dry run failed"
"$CHAOS" --seed 43 --agents 4 --dry-run >"$EA_TMP/s3" || fail "dry run failed"
cmp -s "$EA_TMP/s1" "$EA_TMP/s2" || fail "seed 42 gave two different schedules: $(diff "$EA_TMP/s1" "$EA_TMP/s2")"
cmp -s "$EA_TMP/s1" "$EA_TMP/s3" && fail "seeds 42 and 43 gave the same schedule"
n=$(grep -c '^  #' "$EA_TMP/s1")
((n >= 10)) || fail "a default schedule has $n faults, fewer than 10"
"$CHAOS" --agents 1 --dry-run >/dev/null 2>&1
assert_eq "$?" 2 "exit status of --agents 1"
"$CHAOS" --faults no-such-kind --dry-run >/dev/null 2>&1
assert_eq "$?" 2 "exit status of an unknown fault kind"
pass "same seed, same schedule ($n faults); other seed, other schedule; bad flags exit 2"

say "2. a short run on our own job file"
cat >"$EA_TMP/job.yaml" <<'EOF'
# A small model and short timeouts: this smoke must stay under a minute.
compute:
  min_nodes: 2
distributed:
  global_batch: 32
  micro_batch: 16
  scale_up_delay_ms: 300
  communication_timeout_seconds: 3
runtime:
  failure_retry_times: 100
  rendezvous_timeout_seconds: 3
checkpoint:
  save_interval_steps: 400
  keep_last: 2
train:
  context: 8
  embed_dim: 16
  hidden: 64
  layers: 1
EOF
out=$EA_TMP/out
rc=0
"$CHAOS" --agents 3 --duration 12s --seed 5 --config "$EA_TMP/job.yaml" \
  --faults worker-kill,node-crash,sigterm --min-faults 3 \
  --agent "$EA_BIN" --work "$EA_TMP/w" --out "$out" --junit "$out/junit.xml" >"$EA_TMP/run.log" 2>&1 || rc=$?
tail -n 40 "$EA_TMP/run.log"
[ "$rc" -eq 0 ] || fail "elastic-chaos exited $rc (see above)"
"$PY" - "$out/report.json" <<'PY' || fail "report.json check failed"
import json, sys
d = json.load(open(sys.argv[1]))
bad = []
if d["ok"] is not True: bad.append("ok is not true")
for inv in d["invariants"]:
    if not inv["ok"]: bad.append("invariant %s failed: %s" % (inv["name"], inv["violations"][:2]))
    if inv["ok"] and inv["skipped"] is not None and not inv["skipped"]: bad.append("skip without a reason")
injected = [f for f in d["faults"] if f["state"] == "injected"]
if len(injected) < 3: bad.append("%d faults injected" % len(injected))
for f in injected:
    p = f["restored"] if f["kind"] == "worker-kill" else f["degraded"]
    if p["reformation_ms"] is None: bad.append("fault %d (%s): no re-formation time" % (f["index"], f["kind"]))
    if f["restored"]["timed_out"] or f["degraded"]["timed_out"]: bad.append("fault %d timed out" % f["index"])
r = d["reference"]["exact_replay"]
if not r["ran"] or r["first_mismatch"] != -1 or r["steps"] != d["target_steps"]:
    bad.append("exact replay: %s" % r)
if d["history"]["final_history_steps"] != d["target_steps"]: bad.append("final history is not the whole job")
for row in d["recovery"]:
    print("CHAOS %-12s %-20s n=%d detection=%s reformation=%s first_step=%s" % (
        row["kind"], row["phase"], row["n"], row["detection_ms"]["median"],
        row["reformation_ms"]["median"], row["first_step_ms"]["median"]))
for b in bad: print("  " + b)
sys.exit(1 if bad else 0)
PY
"$PY" -c 'import sys, xml.dom.minidom as m; [m.parse(f) for f in sys.argv[1:]]' "$out/junit.xml" "$out/timeline.svg" ||
  fail "junit.xml or timeline.svg is not well-formed XML"
grep -q '<testcase classname="elastic-chaos.invariants" name="each_step_once"' "$out/junit.xml" ||
  fail "junit.xml lacks the invariant test cases"
# Every agent and worker the harness started is gone (it ends them by pid).
left=$(ps -eo pid=,args= | grep -F -- "$EA_TMP/w/" | grep -v grep || true)
[ -z "$left" ] || fail "processes of the run are still there: $left"
pass "3 faults recovered, every invariant held, reports well formed"

echo "WALL test_chaos_ms=$(($(now_ms) - t_start))"
exit 0
