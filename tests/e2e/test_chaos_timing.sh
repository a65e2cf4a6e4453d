#!/usr/bin/env bash
# The chaos harness times each fault by its own events only (chaos/history.c).
#
# Seed 51 with --faults pause and 3 agents on loopback: fault #1 SIGSTOPs
# slot 1's agent for 0.7 s, shorter than failure detection, so the cluster
# rides it out (no "dead", no generation without the node); fault #4 pauses
# the same node for 4.2 s, which is detected and re-formed around.  The
# report must give #1 no detection and no re-formation of its own, and no
# fault a time past the next fault's injection.  Before the fix the search
# for "the victim declared dead" had no end: #1 reported fault #4's
# detection, 30.7 s after its own injection, and the pause row's max with it
# (likely how soak seed 2996676745 reported a pause "detected" in 16.3 s).
source "$(dirname "$0")/lib.sh"
CHAOS=${EA_BINDIR:-bin}/elastic-chaos
[[ $CHAOS == /* ]] || CHAOS=$PWD/$CHAOS
[ -x "$CHAOS" ] || fail "$CHAOS is not built (run make)"

out=$EA_TMP/out
rc=0
"$CHAOS" --agents 3 --duration 40s --seed 51 --faults pause --min-faults 4 \
  --agent "$EA_BIN" --work "$EA_TMP/w" --out "$out" >"$EA_TMP/run.log" 2>&1 || rc=$?
tail -n 25 "$EA_TMP/run.log"
[ "$rc" -eq 0 ] || fail "elastic-chaos exited $rc (see above)"
"$PY" - "$out/report.json" <<'PY' || fail "a fault's times reach past the next fault (see above)"
import json, sys
d = json.load(open(sys.argv[1]))
fs = [f for f in d["faults"] if f["state"] == "injected"]
bad = []
if len(fs) != 4: bad.append("%d faults injected, want 4" % len(fs))
for f, nxt in zip(fs, fs[1:]):
    g = f["degraded"]
    for k in ("detection_ms", "reformation_ms"):
        if g[k] is not None and f["t_inject_s"] + g[k] / 1000.0 >= nxt["t_inject_s"]:
            bad.append("fault %d (%s): %s %d ms, past fault %d's injection %.1f s later" % (
                f["index"], f["description"], k, g[k], nxt["index"],
                nxt["t_inject_s"] - f["t_inject_s"]))
    print("fault %d: %-60s observed=%s detection=%s reformation=%s" % (
        f["index"], f["description"][:60], g["observed"], g["detection_ms"], g["reformation_ms"]))
first = fs[0]["degraded"] if fs else None
if first and not first["observed"] and first["detection_ms"] is not None:
    bad.append("fault 1 was ridden out, yet reports a detection of %d ms" % first["detection_ms"])
for b in bad: print("  " + b)
sys.exit(1 if bad else 0)
PY
pass "each fault timed by its own events (a ridden-out pause has no detection)"
