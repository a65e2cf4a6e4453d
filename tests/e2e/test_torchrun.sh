#!/usr/bin/env bash
# End-to-end: an unmodified torchrun-style DDP script (examples/torchrun_ddp.py:
# gloo, init_process_group("env://"), its own torch.save checkpoint every 5
# steps, resumed at start, torchelastic's @record) under agents on 127.0.0.1
# in restart mode (`elastic-agent run … -- python3 SCRIPT …`).
#
#  1. three agents: the script runs at world 3, and every variable of the
#     torchrun contract is present and consistent on every rank (each rank
#     dumps its environment to a file; compared here): RANK 0..2 once each,
#     WORLD_SIZE, LOCAL_*, GROUP_*, ROLE_*, one MASTER_ADDR:MASTER_PORT per
#     generation and a fresh port the next one, TORCHELASTIC_RESTART_COUNT,
#     _MAX_RESTARTS, _RUN_ID, _USE_AGENT_STORE=False, an ERROR_FILE of its own
#     in the node's data dir, EA_GENERATION, EA_NODE_NAME, EA_DATA_DIR;
#  2. rank 2 raises once (at step 8): one restart, RESTART_COUNT 1 on every
#     rank of the next generation, which resumes from the script's checkpoint
#     (step 5), and the job goes on; status counts 1 restart;
#  3. SIGKILL n3 (agent and worker): n1 and n2 restart at world 2 and resume
#     from the checkpoint; a lost node is not a restart (still 1);
#  4. n4 joins: world 3 again (every worker restarted);
#  5. SIGSTOP n4 (agent and worker frozen): n1 and n2 are at world 2 again
#     within the detection bound (the survivors' gloo calls, blocked on the
#     frozen peer, never get to time out: the agents SIGKILL them), and
#     train on;
#  6. the script finishes (a file tells rank 0 to stop): every rank exits 0,
#     every agent reports the job finished and exits 0;
#  7. two agents with compute.workers_per_node 2: contiguous ranks per node
#     (n1: 0,1; n2: 2,3), LOCAL_RANK 0,1, OMP_NUM_THREADS=1 and the log line
#     saying so; all four finish, both agents exit 0;
#  8. three agents, rank 1 always raises: after runtime.max_restarts (1)
#     every agent exits 3, and the log (an alert) and the status name the
#     failing rank, its node, exit code 1 and the error file's message.
#
# Steps 1-7 run with warm start on (the default: each worker starts from a
# warm interpreter, docs/warm-start.md; step 6 checks that the restarts after
# the faults were warm), step 8 with compute.warm_start off (cold, as before).
#
# Prints RECOVERY lines: kill/stop → the world-2 generation committed and →
# its first step, in ms, with the detection bound.
source "$(dirname "$0")/lib.sh"
t_start=$(now_ms)
"$PY" -c 'import torch' || fail "$PY has no torch (scripts/deps.sh installs requirements.txt)"
SCRIPT=$PWD/examples/torchrun_ddp.py
CK=$EA_TMP/ck
ENVD=$EA_TMP/env
FIN=$EA_TMP/finish
MARK=$EA_TMP/failed-once
# Short waits for joiners; the rest is the defaults (probe 150 ms, rendezvous
# timeout 30 s, max_restarts 3, lost_peer_grace_ms 500).
# A 2 s stall timeout, checked at every sample: the script reports no steps
# to the agent, and a healthy restart-mode job must never be called stalled
# (step 4 asserts it; before, /readyz failed with a critical `stalled` alert
# after runtime.stall_timeout_seconds).
JOB=(--set compute.min_nodes=2 --set distributed.scale_up_delay_ms=300
  --set runtime.stall_timeout_seconds=2 --set runtime.health_check_interval_seconds=0)
PROG=(-- "$PY" "$SCRIPT" --steps 100000 --save-every 5 --step-sleep 0.05 --ckpt "$CK"
  --env-dir "$ENVD" --finish-file "$FIN" --fail-once "2:8:$MARK")

js() {
  ea_status "$1" --json 2>/dev/null |
    "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))' "$2" 2>/dev/null
}
# trains NAME W — NAME's program printed a step at world W after mark $2.
log_after() { tail -c +"${2:-1}" "$(agent_log "$1")"; }
size_of() { stat -c %s "$(agent_log "$1")"; }
at_world() { log_after "$1" "${3:-1}" | grep -qE "stdout \[rank [0-9]+\] train rank=[0-9]+ world=$2 step=[0-9]+ loss"; }
resumed_at() { log_after "$1" "${3:-1}" | grep -qE "train rank=[0-9]+ world=$2 start step=[1-9][0-9]* resumed=yes"; }
worker_pid() { js "$1" 'd["workers"][0]["pid"]'; }
track_worker() {
  local p
  p=$(worker_pid "$1")
  [ -n "$p" ] && [ "$p" != 0 ] && EA_PGIDS+=("$p")
  echo "$p"
}
first_ts() { # NAME REGEX FROM_BYTE → epoch ms of the first matching line
  local line
  line=$(log_after "$1" "${3:-1}" | grep -m1 -E "$2") || return 1
  log_ts_ms "$line"
}

say "1. three agents run the script at world 3"
start_agent n1 "${JOB[@]}" "${PROG[@]}"
seed=${AGENT_ADDR[n1]}
start_agent n2 --join "$seed" "${JOB[@]}" "${PROG[@]}"
start_agent n3 --join "$seed" "${JOB[@]}" "${PROG[@]}"
for n in n1 n2 n3; do
  wait_for 40 at_world "$n" 3 || fail "$n's worker does not train at world 3: $(tail -5 "$(agent_log "$n")")"
done
assert_eq "$(js n1 'd["job"]["protocol"]')" torchrun "status job.protocol"
assert_contains "$(js n1 'd["job"]["command"]')" torchrun_ddp.py "status job.command"
assert_contains "$(ea_status n1)" "job:" "human status job line"

say "2. rank 2 fails once at step 8: one restart, resumed from the script's checkpoint"
wait_for 40 test -e "$MARK" || fail "rank 2 never reached step 8"
for n in n1 n2 n3; do
  wait_for 40 resumed_at "$n" 3 || fail "$n did not resume at world 3 after the failure: $(tail -5 "$(agent_log "$n")")"
done
wait_for 10 output_is 1 js n1 'd["job"]["restarts"]' ||
  fail "n1's status does not count 1 restart: $(js n1 'd["job"]'); the agents' failure lines: $(grep -h 'failed gen=\|exited with code\|restarts exhausted' "$(agent_log n1)" "$(agent_log n2)" "$(agent_log n3)" | tail -6)"
grep -q 'failed gen=.*rank 2 on .* exited with code 1: RuntimeError: injected failure at step 8' "$(agent_log n1)" "$(agent_log n2)" "$(agent_log n3)" ||
  fail "no log line names rank 2's failure and its error-file message"
"$PY" - "$ENVD" n1 n2 n3 <<'PY' || fail "the torchrun environment is wrong"
import glob, json, os, sys
envd, nodes = sys.argv[1], sys.argv[2:]
envs = [json.load(open(p)) for p in glob.glob(os.path.join(envd, "env-*.json"))]
gens = {}
for e in envs:
    gens.setdefault(int(e["EA_GENERATION"]), []).append(e)
full = sorted(g for g, es in gens.items() if len(es) == 3)
assert len(full) >= 2, "want two generations of 3 ranks, got %s" % {g: len(v) for g, v in gens.items()}
ports = []
for g in full[:2]:
    es = gens[g]
    ranks = sorted(int(e["RANK"]) for e in es)
    assert ranks == [0, 1, 2], (g, ranks)
    for e in es:
        r = int(e["RANK"])
        want = {"WORLD_SIZE": "3", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": str(r),
                "GROUP_WORLD_SIZE": "3", "ROLE_NAME": "default", "ROLE_RANK": str(r),
                "ROLE_WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1", "TORCHELASTIC_MAX_RESTARTS": "3",
                "TORCHELASTIC_RUN_ID": "default", "TORCHELASTIC_USE_AGENT_STORE": "False"}
        for k, v in want.items():
            assert e[k] == v, "gen %d rank %d: %s=%r, want %r" % (g, r, k, e[k], v)
        assert e["EA_NODE_NAME"] in nodes, e["EA_NODE_NAME"]
        dd = e["EA_DATA_DIR"]
        assert dd.endswith("/%s/data" % e["EA_NODE_NAME"]) and os.path.isabs(dd), dd
        ef = e["TORCHELASTIC_ERROR_FILE"]
        assert ef.startswith(dd + "/workers/gen-%d/" % g), ef
        assert e["OMP_NUM_THREADS"] is None, "OMP_NUM_THREADS set with one worker per node"
    for k in ("MASTER_PORT", "TORCHELASTIC_RESTART_COUNT", "EA_GENERATION"):
        assert len({e[k] for e in es}) == 1, "gen %d: ranks disagree on %s" % (g, k)
    assert len({e["TORCHELASTIC_ERROR_FILE"] for e in es}) == 3
    assert len({e["EA_NODE_NAME"] for e in es}) == 3
    assert 0 < int(es[0]["MASTER_PORT"]) < 65536
    ports.append(es[0]["MASTER_PORT"])
rc = [gens[g][0]["TORCHELASTIC_RESTART_COUNT"] for g in full[:2]]
assert rc == ["0", "1"], "restart counts %s" % rc
assert ports[0] != ports[1], "MASTER_PORT was not fresh: %s" % ports
print("env: generations %s, 3 ranks each, ports %s, restart counts %s" % (full[:2], ports, rc))
PY
pass "every torchrun variable consistent on 3 ranks; one restart after rank 2 failed; resumed from the checkpoint"

say "3. SIGKILL n3 (agent and worker): n1 and n2 restart at world 2"
bound=$(counter n1 detection_bound_ms)
victim=$(track_worker n3)
[ -n "$victim" ] && [ "$victim" != 0 ] || fail "no worker pid for n3"
m1=$(size_of n1) m2=$(size_of n2)
t_kill=$(now_ms)
kill -KILL -- "-${AGENT_PID[n3]}" "-$victim" 2>/dev/null
wait_for 40 resumed_at n1 2 "$m1" || fail "n1 did not resume at world 2: $(tail -5 "$(agent_log n1)")"
wait_for 40 resumed_at n2 2 "$m2" || fail "n2 did not resume at world 2: $(tail -5 "$(agent_log n2)")"
c=$(first_ts n1 'generation committed gen=.* world=2 ' "$m1") || fail "n1: no world-2 commit line"
s=$(first_ts n1 'train rank=[0-9]+ world=2 step=' "$m1") || fail "n1: no step at world 2"
echo "RECOVERY node-kill kill_to_commit_ms=$((c - t_kill)) kill_to_first_step_ms=$((s - t_kill)) bound_ms=$bound"
assert_eq "$(js n1 'd["job"]["restarts"]')" 1 "restarts after a node was lost (membership change, not a restart)"
pass "world 2 after the SIGKILL, resumed from the script's checkpoint"

say "4. n4 joins: world 3 again"
m1=$(size_of n1)
start_agent n4 --join "$seed" "${JOB[@]}" "${PROG[@]}"
for n in n1 n4; do wait_for 40 at_world "$n" 3 "$( [ $n = n1 ] && echo "$m1" || echo 1)" || fail "$n does not train at world 3 with n4"; done
# Steps 1-3 took well over the 2 s stall timeout: no stall, and ready.
for n in n1 n4; do
  assert_eq "$(js $n 'd["generation"]["stalled"]')" False "$n generation.stalled in restart mode"
  assert_contains "$(js $n 'd["self"]["ready_reason"]')" "restart mode" "$n self.ready_reason"
  assert_eq "$(js $n 'd["self"]["ready"]')" True "$n self.ready"
done
! grep -h ' alert stalled ' "$(agent_log n1)" "$(agent_log n2)" "$(agent_log n4)" ||
  fail "a restart-mode agent raised the stalled alert"
pass "n4 joined: world 3; not stalled, ready (restart mode awaits no steps)"

say "5. SIGSTOP n4 (agent and worker): n1 and n2 at world 2 within the detection bound"
frozen=$(track_worker n4)
[ -n "$frozen" ] && [ "$frozen" != 0 ] || fail "no worker pid for n4"
m1=$(size_of n1) m2=$(size_of n2)
t_stop=$(now_ms)
kill -STOP -- "-${AGENT_PID[n4]}" "-$frozen"
wait_for 40 at_world n1 2 "$m1" || fail "n1 is not at world 2 after the SIGSTOP: $(tail -5 "$(agent_log n1)")"
wait_for 40 at_world n2 2 "$m2" || fail "n2 is not at world 2 after the SIGSTOP"
c=$(first_ts n1 'generation committed gen=.* world=2 ' "$m1") || fail "n1: no world-2 commit line"
s=$(first_ts n1 'train rank=[0-9]+ world=2 step=' "$m1") || fail "n1: no step at world 2"
echo "RECOVERY node-stop stop_to_commit_ms=$((c - t_stop)) stop_to_first_step_ms=$((s - t_stop)) bound_ms=$bound"
assert_le $((c - t_stop)) $((bound + 3000)) "SIGSTOP to the world-2 commit vs the detection bound + 3 s"
kill -KILL -- "-${AGENT_PID[n4]}" "-$frozen" 2>/dev/null
pass "world 2 $((c - t_stop)) ms after the SIGSTOP (bound $bound ms)"

say "6. the script finishes: every rank exits 0, every agent exits 0"
touch "$FIN"
for n in n1 n2; do
  wait_exit "$n" 30 || fail "$n did not exit after the job finished: $(tail -5 "$(agent_log "$n")")"
  assert_eq "$EXIT_RC" 0 "$n's exit status after the job finished"
  grep -q ' job finished: all 2 workers of generation [0-9]* exited 0' "$(agent_log "$n")" ||
    fail "$n did not report the job finished"
done
n_warm=$(grep -c 'worker 0 started pid=[0-9]* (.*warm' "$(agent_log n1)")
[ "$n_warm" -ge 2 ] || fail "n1 started $n_warm workers warm (want ≥ 2: the first and a restart): $(grep 'worker 0 started' "$(agent_log n1)")"
pass "the job finished; n1 and n2 exited 0; n1's workers started warm ($n_warm)"

say "7. two agents, two workers each: contiguous ranks, OMP_NUM_THREADS=1"
rm -rf "$ENVD" "$CK"
P2=(-- "$PY" "$SCRIPT" --steps 3 --ckpt "$CK" --env-dir "$ENVD")
W2=(--set compute.min_nodes=2 --set compute.workers_per_node=2 --set distributed.scale_up_delay_ms=300)
start_agent w1 "${W2[@]}" "${P2[@]}"
start_agent w2 --join "${AGENT_ADDR[w1]}" "${W2[@]}" "${P2[@]}"
for n in w1 w2; do
  wait_exit "$n" 60 || fail "$n did not exit: $(tail -5 "$(agent_log "$n")")"
  assert_eq "$EXIT_RC" 0 "$n's exit status"
done
grep -q 'Setting OMP_NUM_THREADS environment variable for each process to be 1' "$(agent_log w1)" ||
  fail "no OMP_NUM_THREADS line"
"$PY" - "$ENVD" <<'PY' || fail "ranks are not contiguous per node"
import glob, json, sys
es = [json.load(open(p)) for p in glob.glob(sys.argv[1] + "/env-*.json")]
assert len(es) == 4, len(es)
by = {}
for e in es:
    assert e["WORLD_SIZE"] == "4" and e["LOCAL_WORLD_SIZE"] == "2" and e["GROUP_WORLD_SIZE"] == "2"
    assert e["OMP_NUM_THREADS"] == "1", e
    by.setdefault(e["EA_NODE_NAME"], []).append((int(e["RANK"]), int(e["LOCAL_RANK"]), int(e["GROUP_RANK"])))
for node, rs in by.items():
    rs.sort()
    g = rs[0][2]
    assert rs == [(2 * g, 0, g), (2 * g + 1, 1, g)], (node, rs)
print("ranks per node:", {k: sorted(r for r, _, _ in v) for k, v in by.items()})
PY
pass "contiguous ranks per node, LOCAL_RANK 0/1, OMP_NUM_THREADS=1; both agents exited 0"

say "8. rank 1 always fails: every agent exits 3 naming it"
rm -rf "$CK"
P3=(-- "$PY" "$SCRIPT" --steps 100000 --ckpt "$CK" --always-fail 1:1)
J3=(--set compute.min_nodes=2 --set distributed.scale_up_delay_ms=300 --set runtime.max_restarts=1
  --set compute.warm_start=off)
start_agent f1 "${J3[@]}" "${P3[@]}"
start_agent f2 --join "${AGENT_ADDR[f1]}" "${J3[@]}" "${P3[@]}"
start_agent f3 --join "${AGENT_ADDR[f1]}" "${J3[@]}" "${P3[@]}"
# Keep the newest status of each agent until it is gone (the end is brief).
deadline=$(($(now_ms) + 90000))
while (($(now_ms) < deadline)); do
  alive=0
  for n in f1 f2 f3; do
    agent_alive "$n" || continue
    alive=1
    ea_status "$n" --json >"$EA_TMP/$n.st.tmp" 2>/dev/null && mv "$EA_TMP/$n.st.tmp" "$EA_TMP/$n.st"
  done
  ((alive)) || break
  sleep 0.05
done
for n in f1 f2 f3; do
  wait_exit "$n" 5 || fail "$n did not exit after the job failed"
  assert_eq "$EXIT_RC" 3 "$n's exit status (restarts exhausted)"
  grep -qE ' alert job failed \(restarts exhausted, exit status 3\): .*failing worker: rank 1 on f[123] exited with code 1: RuntimeError: always failing at step 1' "$(agent_log "$n")" ||
    fail "$n's alert does not name rank 1, its node, code and message: $(grep alert "$(agent_log "$n")")"
done
ok=0
for n in f1 f2 f3; do
  f=$("$PY" -c 'import json,sys; d=json.load(open(sys.argv[1]))["job"]["failure"]; print("%s %s %s" % (d["rank"], d["exit_code"], d["message"]))' "$EA_TMP/$n.st" 2>/dev/null) || continue
  [[ $f == "1 1 RuntimeError: always failing at step 1"* ]] && ok=$((ok + 1))
done
((ok >= 1)) || fail "no agent's status named the failing rank with its exit code and message"
! grep -q 'warm interpreter pid\|started pid=[0-9]* (.*warm' "$(agent_log f1)" ||
  fail "f1 (compute.warm_start off) kept or used a warm interpreter"
pass "f1, f2, f3 exited 3 (cold: warm start off); alerts and status name rank 1, exit code 1, the error file's message"

echo "WALL test_torchrun_ms=$(($(now_ms) - t_start))"
exit 0
