#!/usr/bin/env bash
# End-to-end smoke of bench/goodput.sh: every system it measures (torchrun
# default and tuned, elastic-agent restart mode and in place, TorchFT and
# TorchFT tuned, NVRx tuned; TorchFT and NVRx only where the virtualenv has
# them) runs 4 nodes on 127.0.0.1 for a 5 s baseline and a 20 s churn with
# one failure (a node SIGKILLed at 10 s, started again at 15 s).  Asserts
# only that the bench ran to its end, wrote the table and the JSON (and the
# PNG), and that every system recovered: all 4 nodes stepping at world 4
# again after the failure, within the bench's deadline (NVRx: the three
# others at world 3, as its min-healthy policy keeps it).  No timing is
# asserted (a benchmark reports those: docs/compare.md).  The systems run
# one after another: side by side (--parallel: 24 processes starting on 2
# cores) the in-place system did not reach world 4 within 180 s in a
# clean-clone CI run.  NVRx is nvrx-tuned alone: nvrx differs from it only
# in timeouts, nvrx-injob is ft_launcher's torchrun path, and all nine
# systems took 536 s here at load 4-6, against tests/run.sh's 600 s per
# end-to-end test; the benches run the other two.
source "$(dirname "$0")/lib.sh"
t_start=$(now_ms)
"$PY" -c 'import torch' || fail "$PY has no torch (scripts/deps.sh installs requirements.txt)"
systems=torchrun-default,torchrun-tuned,ours,ours-inplace
if "$PY" -c 'import torchft' 2>/dev/null && [ -x "$(dirname "$PY")/torchft_lighthouse" ]; then
  systems=$systems,torchft,torchft-tuned
else
  say "torchft not installed: TorchFT left out"
fi
if "$PY" -c 'import nvidia_resiliency_ext.inprocess' 2>/dev/null && [ -x "$(dirname "$PY")/ft_launcher" ]; then
  systems=$systems,nvrx-tuned
else
  say "nvidia-resiliency-ext not installed: NVRx left out"
fi
OUT=$EA_TMP/gp
out=$EA_TMP/goodput.out
say "bench/goodput.sh --seconds 20 --interval 20 --rejoin 5 --baseline 5 --systems $systems"
EA_BINDIR=$(dirname "$EA_BIN") timeout 900 bench/goodput.sh --seconds 20 --interval 20 --rejoin 5 --baseline 5 \
  --deadline 120 --systems "$systems" --out "$OUT" --json "$EA_TMP/goodput.json" --png "$EA_TMP/goodput.png" \
  > "$out" 2>&1
rc=$?
cat "$out"
[ -s "$EA_TMP/goodput.json" ] || fail "no JSON written (rc $rc)"
grep -q '^system .*goodput .*recovered' "$out" || fail "no table printed (rc $rc)"
[ -s "$EA_TMP/goodput.png" ] && [ "$(head -c 4 "$EA_TMP/goodput.png" | tail -c 3)" = PNG ] || fail "no PNG written"
"$PY" - "$EA_TMP/goodput.json" "$systems" <<'EOF' || fail "a system did not recover (table above)"
import json, sys
d = json.load(open(sys.argv[1]))
want = sys.argv[2].split(",")
got = {r["system"]: r for r in d["results"]}
bad = [s for s in want if s not in got or not got[s].get("recovered") or got[s].get("failures") != 1]
if bad:
    print("not recovered (or not run, or not one failure):", ", ".join(bad))
    sys.exit(1)
EOF
[ $rc = 0 ] || fail "bench/goodput.sh exited $rc"
# nothing the bench started outlives it
left=$(grep -lsa "EA_BENCH_RUN=$OUT" /proc/[0-9]*/environ 2>/dev/null | head -n 3)
[ -z "$left" ] || fail "processes left running: $left"
pass "every system recovered from its failure; table, JSON and PNG written ($(($(now_ms) - t_start)) ms)"
