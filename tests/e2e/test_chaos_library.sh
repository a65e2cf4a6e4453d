#!/usr/bin/env bash
# End-to-end: the chaos harness on a library-mode job (issue 27, item 6:
# one-way loss in library mode as a chaos fault).
#
# Three agents in network namespaces (elastic-chaos --netns) run
# examples/pytorch_inplace.py through the elastic_agent library (DDP, gloo),
# which trains the job's train.steps (EA_TRAIN_STEPS, set by the harness once
# it has measured the steps/s).  The schedule is two `oneway` faults: all
# that one member sends to its ring neighbour is dropped on the receiver's
# input for 15-20 s.  gloo's error names no peer; the link probe finds the
# link, the controller holds the receiver out, the others train on.
# Asserted, from the harness's report.json:
#   - the harness exits 0: every invariant held or was skipped with a reason;
#     the history ones (each_step_once, ranks_agree, one_generation, ...) are
#     judged on the program's own step reports, not skipped; the reference
#     and the replay are skipped because the program is not the built-in
#     trainer;
#   - both faults were injected, and in each the other two re-formed at
#     world 2 without the receiver within the fault's bound;
#   - after the first heal all three trained at world 3 again (the restore
#     bound runs from the end of the receiver's hold-out);
#   - training reached the target step.
#
# Needs root (network namespaces), nftables and torch; otherwise skipped.
# Prints the harness's recovery table (CHAOS lines) for the record.
source "$(dirname "$0")/lib.sh"
t_start=$(now_ms)

skip() {
  echo "skip: $*"
  exit 77
}
[ "$(id -u)" = 0 ] || skip "needs root for network namespaces"
command -v nft >/dev/null || skip "no nft"
"$PY" -c 'import torch, msgpack' 2>/dev/null || skip "$PY has no torch"
# The agent finds python/ beside its binary; the sanitizer build's has none.
unset PYTHONPATH STEPS
[[ ${EA_BIN:-bin/elastic-agent} == */build-asan/* || ${EA_BIN:-} == build-asan/* ]] || unset EA_PYTHONPATH
CHAOS=${EA_BINDIR:-bin}/elastic-chaos
[[ $CHAOS == /* ]] || CHAOS=$PWD/$CHAOS
[ -x "$CHAOS" ] || fail "$CHAOS is not built (run make)"

cat >"$EA_TMP/job.yaml" <<EOF
compute:
  min_nodes: 2
  max_nodes: 4
  protocol: library
  worker_command: "$PY $PWD/examples/pytorch_inplace.py"
distributed:
  communication_timeout_seconds: 5
  scale_up_delay_ms: 500
runtime:
  failure_retry_times: 1000
  flap_threshold: 0
  flap_cooldown_seconds: 5
  rendezvous_timeout_seconds: 30
checkpoint:
  save_interval_steps: 100
  keep_last: 2
EOF
out=$EA_TMP/out
rc=0
"$CHAOS" --agents 3 --netns --faults oneway --duration 30s --min-faults 2 --seed 3 \
  --config "$EA_TMP/job.yaml" --agent "$EA_BIN" --work "$EA_TMP/w" --out "$out" \
  --junit "$out/junit.xml" >"$EA_TMP/run.log" 2>&1 || rc=$?
tail -n 45 "$EA_TMP/run.log"
[ "$rc" -eq 0 ] || fail "elastic-chaos exited $rc (see above)"
"$PY" - "$out/report.json" <<'PY' || fail "report.json check failed"
import json, sys
d = json.load(open(sys.argv[1]))
bad = []
if d["ok"] is not True: bad.append("ok is not true")
inv = {i["name"]: i for i in d["invariants"]}
for i in inv.values():
    if not i["ok"]: bad.append("invariant %s failed: %s" % (i["name"], i["violations"][:2]))
for name in ("target_step", "each_step_once", "ranks_agree", "one_generation", "one_plan",
             "generations_grow", "recovery_bound"):
    if inv[name]["skipped"]: bad.append("%s skipped: %s" % (name, inv[name]["skipped"]))
if "library" not in (inv["matches_reference"]["skipped"] or ""):
    bad.append("matches_reference not skipped as a library job: %r" % inv["matches_reference"]["skipped"])
faults = [f for f in d["faults"] if f["state"] == "injected"]
if len(faults) != 2 or any(f["kind"] != "oneway" for f in faults):
    bad.append("faults injected: %s" % [(f["kind"], f["state"]) for f in d["faults"]])
for f in faults:
    g = f["degraded"]
    if not g["observed"] or g["timed_out"] or g["world"] != 2 or f["victim"] in g["nodes"].split(","):
        bad.append("fault %d: not re-formed without %s: %s" % (f["index"], f["victim"], g))
    elif g["reformation_ms"] > g["bound_ms"]:
        bad.append("fault %d: re-formed in %s ms, bound %s" % (f["index"], g["reformation_ms"], g["bound_ms"]))
if faults:
    r = faults[0]["restored"]
    if not r["observed"] or r["world"] != 3: bad.append("fault 1: not back at world 3: %s" % r)
if d["history"]["step_records"] < 1000: bad.append("history: %s step records" % d["history"]["step_records"])
if bad:
    print("\n".join(bad))
    sys.exit(1)
print("CHAOS library oneway: re-formed without the receiver in %s ms; back at world 3 %s ms after the heal; %d step records, final history %d steps"
      % ([f["degraded"]["reformation_ms"] for f in faults], faults[0]["restored"]["reformation_ms"],
         d["history"]["step_records"], d["history"]["final_history_steps"]))
PY
"$PY" -c 'import sys, xml.dom.minidom as m; m.parse(sys.argv[1])' "$out/junit.xml" || fail "junit.xml does not parse"
pass "a library-mode job through two one-way faults: every invariant held ($(($(now_ms) - t_start)) ms)"
