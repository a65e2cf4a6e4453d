# tests/e2e/pytorch_lib.sh — helpers of the library-mode e2e scripts
# (test_pytorch_inplace.sh, test_pytorch_worker_kill.sh); source it after
# lib.sh, don't run it.  Step reports are read from the agents' debug log.

# The program (tests/python/torch_worker.py) and the job flags every case
# starts its agents with; fails without torch (scripts/deps.sh installs it).
"$PY" -c 'import torch, msgpack' || fail "$PY has no torch or msgpack (scripts/deps.sh installs requirements.txt)"
PROG=(-- "$PY" "$PWD/tests/python/torch_worker.py")
CK=$EA_TMP/ck
J=(--set compute.protocol=library --set compute.min_nodes=2 --set distributed.scale_up_delay_ms=300
  --set logging.level=debug --set checkpoint.dir="$CK" --set checkpoint.save_interval_steps=20)
export EA_TEST_PACE=0.01 EA_TEST_MODE=ddp
# The agent must find python/ by itself, beside its binary (bin/../python).
# The sanitizer build's binary is build-asan/bin/elastic-agent, with no
# python/ beside it: make asan passes EA_PYTHONPATH for it.
unset PYTHONPATH
[[ ${EA_BIN:-bin/elastic-agent} == */build-asan/* || ${EA_BIN:-} == build-asan/* ]] || unset EA_PYTHONPATH

js() {
  ea_status "$1" --json 2>/dev/null |
    "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))' "$2" 2>/dev/null
}
size_of() { stat -c %s "$(agent_log "$1")"; }
log_after() { tail -c +"${2:-1}" "$(agent_log "$1")"; }
# steps_at NAME WORLD N [FROM] — NAME logged N step reports at world WORLD.
steps_at() {
  (($(log_after "$1" "${4:-1}" | grep -cE " step worker=0 gen=[0-9]+ rank=[0-9]+ world=$2 ") >= $3))
}
last_step() { log_after "$1" | grep -oE ' step worker=0 .* step=[0-9]+' | tail -n1 | sed 's/.*step=//'; }
first_ts() { # NAME REGEX FROM → epoch ms of the first matching line
  local line
  line=$(log_after "$1" "${3:-1}" | grep -m1 -E "$2") || return 1
  log_ts_ms "$line"
}
wpid() { js "$1" 'd["workers"][0]["pid"]'; }
track() { EA_PGIDS+=("$1"); }
# The digest check over every agent log given: see the header.
check_steps() {
  "$PY" - "$@" <<'PY'
import re, sys
pat = re.compile(r" step worker=\d+ gen=(\d+) rank=(\d+) world=(\d+) step=(\d+) loss=\S+ digest=([0-9a-f]+)")
by = {}
for f in sys.argv[1:]:
    for line in open(f, errors="replace"):
        m = pat.search(line)
        if m:
            g, r, w, s, d = m.groups()
            by.setdefault(int(s), {}).setdefault(int(g), {})[int(r)] = (d, f)
assert by, "no step reports"
steps = sorted(by)
assert steps == list(range(steps[0], steps[-1] + 1)), "steps missing: %s" % sorted(set(range(steps[0], steps[-1] + 1)) - set(steps))[:10]
# Every step in one generation, except one the leaver of a generation
# completed alone (a ring allreduce can finish on one rank and not on
# another when the others abort it): the next generation, without it,
# computes that step again, and the leaver's is lost with it, as after a
# SIGKILL.  Allowed only when every report of it in the older generation
# came from a node that is not in the newer one.
discarded = 0
for s in steps:
    gens = by[s]
    for g, ranks in gens.items():
        assert len({d for d, _ in ranks.values()}) == 1, "step %d gen %d: digests differ across ranks %s" % (s, g, ranks)
    if len(gens) == 1:
        continue
    assert len(gens) == 2, "step %d reported in generations %s (repeated)" % (s, sorted(gens))
    old, new = sorted(gens)
    new_files = {f for _, f in gens[new].values()}
    assert all(f not in new_files for _, f in gens[old].values()), \
        "step %d reported in generations %s (repeated) by a node that stayed" % (s, sorted(gens))
    discarded += 1
assert discarded <= 1, "%d steps computed twice" % discarded
print("steps %d..%d: each in one generation, identical digests across its ranks%s" % (
    steps[0], steps[-1], "; 1 step a leaver completed alone was computed again" if discarded else ""))
PY
}

# resumed_steps STRICT LOG… — world-1 step reports: every step from the
# first to the last is there, and a step computed again after a resume
# (from a checkpoint) carries the digest of its first computation —
# asserted when STRICT is 1, else only reported (scripts/gpu-check.sh on a
# GPU, whose kernels need not repeat bit for bit).
resumed_steps() {
  "$PY" - "$@" <<'PY'
import re, sys
pat = re.compile(r" step worker=0 gen=\d+ rank=0 world=1 step=(\d+) loss=\S+ digest=([0-9a-f]+)")
by = {}
for f in sys.argv[2:]:
    for line in open(f, errors="replace"):
        m = pat.search(line)
        if m:
            by.setdefault(int(m.group(1)), []).append(m.group(2))
steps = sorted(by)
assert steps, "no step reports"
missing = sorted(set(range(steps[0], steps[-1] + 1)) - set(steps))
again = [s for s in steps if len(by[s]) > 1]
differ = [s for s in again if len(set(by[s])) > 1]
print("steps %d..%d, none missing: %s; %d computed again after a resume, %d of them with another digest%s" % (
    steps[0], steps[-1], not missing, len(again), len(differ), (" (first: %d)" % differ[0]) if differ else ""))
assert not missing, "steps missing: %s" % missing[:10]
assert not differ or sys.argv[1] != "1", "a step computed again has another digest"
PY
}

# start_three — agents n1 (the seed), n2, n3 with the program; waits until
# each logged 40 steps at world 3; sets seed, p1 p2 p3 (worker pids, tracked).
start_three() {
  start_agent n1 "${J[@]}" "${PROG[@]}"
  seed=${AGENT_ADDR[n1]}
  start_agent n2 --join "$seed" "${J[@]}" "${PROG[@]}"
  start_agent n3 --join "$seed" "${J[@]}" "${PROG[@]}"
  local n p
  for n in n1 n2 n3; do
    wait_for 90 steps_at "$n" 3 40 || fail "$n does not train at world 3: $(tail -5 "$(agent_log "$n")")"
  done
  p1=$(wpid n1) p2=$(wpid n2) p3=$(wpid n3)
  for p in "$p1" "$p2" "$p3"; do [ -n "$p" ] && [ "$p" != 0 ] || fail "no worker pid in status"; track "$p"; done
}
