#!/usr/bin/env bash
# scripts/gpu-check.sh — NCCL on a real GPU, at world 1 (one GPU: NCCL refuses
# two ranks on one device).  Never part of make check; run it by hand on a
# node with a GPU, against a binary built with NCCL (make finds CUDA and NCCL
# under CUDA_HOME, default /usr/local/cuda):
#
#   scripts/gpu-check.sh                      # bin/elastic-agent, the project's python
#   EA_BIN=… EA_PYTHON=… scripts/gpu-check.sh # another binary or interpreter
#   GPU_CHECK_BACKEND=tcp scripts/gpu-check.sh   # the same steps on CPU (a dry run)
#
# What it runs, each step a PASS or a FAIL with the reason:
#  0. the machine: GPU, driver, torch, torch's NCCL, the NCCL the agent loads;
#  1. the C communicator alone (tests/unit/test_comm.c, case nccl): a one-rank
#     NCCL communicator — allreduce, broadcast, barrier, then abort → the
#     next op fails with -ECANCELED, then free;
#  2. the library's TorchBackend alone: form an NCCL group (generation 1),
#     allreduce on the GPU, abort it (torch's ProcessGroup.abort()), tear
#     down, form generation 2 on the same GPU and allreduce again; the same
#     with no backend asked for (torch's default: gloo for CPU tensors, NCCL
#     for CUDA ones), a CPU and a GPU tensor allreduced in each group;
#  3. the built-in trainer under two agents, compute.max_nodes 1: b1 trains
#     at world 1 on backend nccl, b2 waits as a spare; `drain b1` ends b1's
#     generation (its worker's communicator is aborted and freed) and b2
#     re-forms the job at world 1 and trains on; SIGKILL of b2's worker:
#     its agent re-forms again from the checkpoint; b1 exits 0;
#  4. the same for library mode (tests/python/torch_worker.py with the model
#     on the GPU, DDP over NCCL): drain, then a killed worker restarted,
#     then the job is ended and every agent exits 0.
# Prints RESULT lines with the times from the fault to the first step after it.
source "$(dirname "$0")/../tests/e2e/lib.sh"
source tests/e2e/pytorch_lib.sh
BACKEND=${GPU_CHECK_BACKEND:-nccl}
DEVICE=cuda TBACKEND=nccl
[ "$BACKEND" = nccl ] || DEVICE=cpu TBACKEND=gloo
STRICT=0 # a GPU's kernels need not repeat bit for bit: digests reported
[ "$BACKEND" = nccl ] || STRICT=1
t_all=$(now_ms)

say "0. the machine"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader
else
  echo "no nvidia-smi"
fi
"$PY" -c 'import torch, sys
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "gpus", torch.cuda.device_count(),
      "nccl", ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else "-")'
"$EA_BIN" version
ldd "$EA_BIN" | grep -E 'nccl|cudart|not found' || echo "the agent links no NCCL (a build without it)"
[ "$BACKEND" != nccl ] || ldd "$EA_BIN" | grep -q 'libnccl' || fail "$EA_BIN was built without NCCL"
[ "$BACKEND" != nccl ] || "$PY" -c 'import torch, sys; sys.exit(torch.cuda.device_count() == 0)' ||
  fail "no GPU visible to $PY (torch.cuda.device_count() is 0); GPU_CHECK_BACKEND=tcp runs the same steps on CPU"

say "1. the C communicator alone: one rank, then abort"
if [ -x "${GPU_CHECK_TEST_COMM:-build/tests/test_comm}" ]; then
  out=$(CK_RUN_CASE=nccl CK_DEFAULT_TIMEOUT=60 "${GPU_CHECK_TEST_COMM:-build/tests/test_comm}" 2>&1)
  echo "$out"
  grep -q '100%: Checks: 1, Failures: 0, Errors: 0' <<<"$out" || fail "test_comm's nccl case"
  [ "$BACKEND" != nccl ] || grep -q 'GPU present, running W=1' <<<"$out" || fail "test_comm ran no communicator on the GPU"
  pass "test_comm nccl case"
else
  echo "skipped: no build/tests/test_comm (make tests)"
fi

say "2. the library's TorchBackend alone: form, allreduce, abort, form again; then the default"
PYTHONPATH=$PWD/python "$PY" - "$TBACKEND" <<'PY' || fail "TorchBackend on $TBACKEND"
import sys, time, torch, torch.distributed as dist
from elastic_agent.torch import TorchBackend


def allreduce(t):
    want = t.clone()
    dist.all_reduce(t)
    if t.device.type == "cuda":
        torch.cuda.synchronize()
    assert bool((t == want).all()), "allreduce on %s: wrong" % t.device
    return "correct on %s" % t.device


# the backend asked for (nccl on a GPU), then none: torch's own default
for be in (sys.argv[1], None):
    b = TorchBackend(be)
    addr = b.start("127.0.0.1:0", 0)
    for gen in (1, 2):
        t0 = time.monotonic()
        b.form({"gen": gen, "store": addr, "rank": 0, "world": 1, "timeout_ms": 30000})
        ok = [allreduce(torch.arange(1 << 20, dtype=torch.float32, device=b.device))]
        if b.device.type == "cuda":  # a CPU tensor in the same group (gloo's part of the default)
            if be is None:
                ok.append(allreduce(torch.arange(1000, dtype=torch.float32)))
        print("%s gen %d: formed %s on %s in %.3f s; allreduce of 4 MiB %s" % (
            be or "default", gen, b.name, b.device, time.monotonic() - t0, ", ".join(ok)))
        if gen == 1:
            t0 = time.monotonic()
            b.abort()
            print("%s gen 1: abort returned in %.3f s" % (be or "default", time.monotonic() - t0))
            try:
                allreduce(torch.ones(4, device=b.device))
                print("%s gen 1: an allreduce after the abort returned (no error)" % (be or "default"))
            except Exception as e:  # what torch raises after ncclCommAbort
                print("%s gen 1: an allreduce after the abort fails: %s: %s" % (
                    be or "default", type(e).__name__, str(e).splitlines()[0][:160]))
            b.teardown()
    b.close()
print("TorchBackend: two generations on one device, the first aborted, for each backend")
PY
pass "TorchBackend on $TBACKEND"

# The two agents of a case: max_nodes 1, so the second one waits as a spare.
spare_state() { js "$1" 'd["spares"]["self"].get("state")'; }
STEP_RE=' step worker=0 gen=[0-9]+ rank=0 world=1 '
last_gen() { log_after "$1" | grep -E "$STEP_RE" | tail -n1 | grep -oE ' gen=[0-9]+' | cut -d= -f2; }
# new_steps NAME OLDGEN FROM N — NAME logged N steps of a generation other
# than OLDGEN after byte FROM.
new_steps() { (($(log_after "$1" "$3" | grep -E "$STEP_RE" | grep -vc " gen=$2 ") >= $4)); }
# first_new NAME OLDGEN FROM → "GEN STEP TS_MS" of the first such step
first_new() {
  local line
  line=$(log_after "$1" "$3" | grep -E "$STEP_RE" | grep -v -m1 " gen=$2 ") || return 1
  echo "$(grep -oE ' gen=[0-9]+' <<<"$line" | cut -d= -f2) $(grep -oE ' step=[0-9]+' <<<"$line" | cut -d= -f2) $(log_ts_ms "$line")"
}
# drain_and_kill LABEL A B FLAGS… — steps 3 and 4: A trains, B is its spare,
# drain A, then SIGKILL B's worker.  Prints RESULT lines.
drain_and_kill() {
  local label=$1 a=$2 b=$3
  shift 3
  start_agent "$a" "$@"
  wait_for 120 steps_at "$a" 1 50 || fail "$a does not train at world 1: $(grep -E 'fail|error|nccl|NCCL' "$(agent_log "$a")" | tail -5)"
  pass "$a trains at world 1"
  start_agent "$b" --join "${AGENT_ADDR[$a]}" "$@"
  wait_for 120 output_is ready spare_state "$b" || fail "$b is no ready spare: $(ea_status "$b" | sed -n '/^spares/,+2p')"
  pass "$b waits as a ready spare"

  local mb t0 g0 s0 g1 s1 ts1 pw
  mb=$(size_of "$b")
  g0=$(last_gen "$a")
  t0=$(now_ms)
  "$EA_BIN" drain "$a" --data-dir "${AGENT_DIR[$a]}/data" || fail "drain $a"
  wait_for 120 new_steps "$b" "$g0" "$mb" 20 || fail "$b does not train after the drain: $(tail -5 "$(agent_log "$b")")"
  wait_exit "$a" 60 || fail "$a did not exit after its drain"
  assert_eq "$EXIT_RC" 0 "$a's exit status after its drain"
  s0=$(last_step "$a")
  read -r g1 s1 ts1 < <(first_new "$b" "$g0" "$mb")
  echo "RESULT $label drain: $a's last step $s0 (gen $g0); $b's first step $s1 (gen $g1), $((ts1 - t0)) ms after the drain command"
  pass "drained $a (exit 0); $b trains at world 1"

  pw=$(wpid "$b")
  [ -n "$pw" ] && [ "$pw" != 0 ] || fail "no worker pid in $b's status"
  mb=$(size_of "$b")
  g0=$(last_gen "$b")
  s0=$(last_step "$b")
  t0=$(now_ms)
  kill -KILL "$pw"
  wait_for 120 new_steps "$b" "$g0" "$mb" 20 || fail "$b does not train after its worker was killed: $(tail -5 "$(agent_log "$b")")"
  read -r g1 s1 ts1 < <(first_new "$b" "$g0" "$mb")
  echo "RESULT $label worker-kill: last step before $s0 (gen $g0); first after $s1 (gen $g1, worker pid $(wpid "$b")), $((ts1 - t0)) ms after the SIGKILL"
  pass "$b's worker killed; training again at world 1"
}

say "3. the built-in trainer on backend $BACKEND: drain to a spare, then a killed worker"
B=(--set distributed.backend="$BACKEND" --set compute.max_nodes=1 --set distributed.scale_up_delay_ms=300
  --set train.steps=100000000 --set train.data="$PWD/docs" --set logging.level=debug
  --set checkpoint.dir="$EA_TMP/ckb" --set checkpoint.save_interval_steps=200)
drain_and_kill builtin b1 b2 "${B[@]}"
stop_agent b2 TERM
wait_exit b2 60 || fail "b2 did not exit on SIGTERM"
echo "b2 exited $EXIT_RC on SIGTERM"
resumed_steps "$STRICT" "$(agent_log b1)" "$(agent_log b2)" || fail "step reports"
"$EA_BIN" ckpt verify "$EA_TMP/ckb" | tail -n 2

say "4. library mode, torch $TBACKEND on $DEVICE: drain to a spare, then a killed worker, then the end"
export EA_TEST_DEVICE=$DEVICE EA_TEST_PACE=0.002 EA_TEST_STEPS_FILE=$EA_TMP/steps
L=(--set compute.protocol=library --set distributed.backend="$BACKEND" --set compute.max_nodes=1
  --set distributed.scale_up_delay_ms=300 --set logging.level=debug
  --set checkpoint.dir="$EA_TMP/ckl" --set checkpoint.save_interval_steps=50
  -- "$PY" "$PWD/tests/python/torch_worker.py")
drain_and_kill library l1 l2 "${L[@]}"
end=$(($(last_step l2) + 200))
echo "$end" >"$EA_TMP/steps"
wait_exit l2 120 || fail "l2 did not end at step $end"
assert_eq "$EXIT_RC" 0 "l2's exit status at the end of the job"
resumed_steps "$STRICT" "$(agent_log l1)" "$(agent_log l2)" || fail "step reports"
grep -hE 'NCCL|nccl' "$(agent_log l1)" "$(agent_log l2)" | grep -viE ' step worker=' | head -n 5
pass "library job ended at step $end; every agent exited 0"
echo "PASS: gpu-check on $BACKEND in $((($(now_ms) - t_all) / 1000)) s"
