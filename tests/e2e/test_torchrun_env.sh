#!/usr/bin/env bash
# End-to-end: the environment and arguments a restart-mode program gets from
# elastic-agent match what torchrun of the pinned torch gives the same
# script, key by key (docs/torchrun.md, "The environment").  tests/e2e/
# env_dump.py writes each rank's os.environ, sys.argv and cwd; both launchers
# run it from this same shell (so both start from the same environment):
#
#  1. one node, two workers: `torchrun --nnodes=1 --nproc_per_node=2` against
#     one agent with compute.workers_per_node 2;
#  2. two nodes, two workers each: two torchruns (c10d rendezvous) against
#     two agents;
#  3. one node, two workers, the program as a shell compute.worker_command.
#
# Each script is given `--local-rank=${local_rank} --tag=$local_rank` (the
# macro torchrun replaces per worker, as torch.distributed.launch-era scripts
# that want --local-rank are run) and `--price=$$5`; a shell command
# sees its own `$$` and so is given `--price=5`.  The comparison: the same set of names (but ours' own
# EA_GENERATION, EA_NODE_NAME, EA_DATA_DIR and PYTHONUNBUFFERED); the same
# values for every name but the documented differences —
# TORCHELASTIC_USE_AGENT_STORE (False: no agent store; rank 0 hosts it),
# MASTER_ADDR (rank 0's node address, where torchrun names its host),
# MASTER_PORT and TORCHELASTIC_ERROR_FILE (each launcher's own choice, checked
# for their shape); the same argv and cwd.
source "$(dirname "$0")/lib.sh"
[ -x "$EA_TORCHRUN" ] || fail "$EA_TORCHRUN is missing (scripts/deps.sh installs requirements.txt)"
DUMP=$PWD/tests/e2e/env_dump.py
RUN_ID=ea-env-test
# torchrun's --max-restarts default is 0, ours (runtime.max_restarts) 3:
# both given 3 so that TORCHELASTIC_MAX_RESTARTS can be compared.
TR=(--nproc_per_node=2 --max-restarts=3 --rdzv_backend=c10d --rdzv_id=$RUN_ID)
OURS=(--set experiment.name=$RUN_ID --set compute.workers_per_node=2 --set runtime.max_restarts=3
  --set distributed.scale_up_delay_ms=300)
ARGS=(--local-rank='${local_rank}' --tag='$local_rank' --price='$$5')

run_torchrun() { # OUT NNODES
  mkdir -p "$1"
  local port pids=() i
  port=$(free_port)
  for ((i = 0; i < $2; i++)); do
    EA_ENV_DUMP_DIR=$1 timeout 120 "$EA_TORCHRUN" --nnodes="$2" "${TR[@]}" --rdzv_endpoint=127.0.0.1:"$port" \
      "$DUMP" "${ARGS[@]}" >"$1.log.$i" 2>&1 &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || fail "torchrun exited $? (log: $(tail -5 "$1".log.*))"; done
}

run_ours() { # OUT NAME NNODES [flags…]: agents NAME1..NAME<NNODES>
  local out=$1 name=$2 n=$3 i
  shift 3
  mkdir -p "$out"
  export EA_ENV_DUMP_DIR=$out
  start_agent "${name}1" --set compute.min_nodes="$n" "${OURS[@]}" "$@"
  for ((i = 2; i <= n; i++)); do
    start_agent "$name$i" --join "${AGENT_ADDR[${name}1]}" --set compute.min_nodes="$n" "${OURS[@]}" "$@"
  done
  unset EA_ENV_DUMP_DIR
  for ((i = 1; i <= n; i++)); do
    wait_exit "$name$i" 60 || fail "$name$i did not exit: $(tail -5 "$(agent_log "$name$i")")"
    assert_eq "$EXIT_RC" 0 "$name$i's exit status"
  done
}

compare() { # THEIRS OURS WORLD SHELL
  "$PY" - "$@" <<'PY'
import glob, json, os, re, sys
theirs_dir, ours_dir, world, shell = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
load = lambda d: {int(re.search(r"rank(\d+)", p).group(1)): json.load(open(p)) for p in glob.glob(d + "/rank*.json")}
T, O = load(theirs_dir), load(ours_dir)
assert sorted(T) == list(range(world)) and sorted(O) == list(range(world)), (sorted(T), sorted(O))
OURS_ONLY = {"EA_GENERATION", "EA_NODE_NAME", "EA_DATA_DIR", "PYTHONUNBUFFERED"}
DIFFER = {"TORCHELASTIC_USE_AGENT_STORE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_ERROR_FILE"}
# the test's own: where to dump (a directory per launcher), and bash's "_"
# (the command that started the launcher: timeout or setsid)
for d in list(T.values()) + list(O.values()):
    d["env"].pop("EA_ENV_DUMP_DIR", None)
    d["env"].pop("_", None)
bad = []
for r in range(world):
    t, o = T[r]["env"], O[r]["env"]
    for k in sorted(set(t) - set(o)):
        bad.append("rank %d: torchrun gives %s=%r, we do not" % (r, k, t[k]))
    for k in sorted(set(o) - set(t) - OURS_ONLY):
        bad.append("rank %d: we give %s=%r, torchrun does not" % (r, k, o[k]))
    for k in sorted((set(t) & set(o)) - DIFFER):
        if t[k] != o[k]:
            bad.append("rank %d: %s: torchrun %r, ours %r" % (r, k, t[k], o[k]))
    if t["TORCHELASTIC_USE_AGENT_STORE"] != "True" or o["TORCHELASTIC_USE_AGENT_STORE"] != "False":
        bad.append("rank %d: TORCHELASTIC_USE_AGENT_STORE %r/%r" % (r, t["TORCHELASTIC_USE_AGENT_STORE"], o["TORCHELASTIC_USE_AGENT_STORE"]))
    if not re.fullmatch(r"\d+\.\d+\.\d+\.\d+", o["MASTER_ADDR"]) or not o["MASTER_PORT"].isdigit():
        bad.append("rank %d: ours MASTER_ADDR:PORT %s:%s" % (r, o["MASTER_ADDR"], o["MASTER_PORT"]))
    if not o["TORCHELASTIC_ERROR_FILE"].endswith(".json") or not os.path.isabs(o["TORCHELASTIC_ERROR_FILE"]):
        bad.append("rank %d: ours TORCHELASTIC_ERROR_FILE %r" % (r, o["TORCHELASTIC_ERROR_FILE"]))
    for k in OURS_ONLY - {"PYTHONUNBUFFERED"}:
        if not o.get(k):
            bad.append("rank %d: ours lacks %s" % (r, k))
    targv, oargv = T[r]["argv"], O[r]["argv"]
    want = ["--local-rank=%s" % t["LOCAL_RANK"], "--tag=%s" % t["LOCAL_RANK"], "--price=$5"]
    if targv[1:] != want:
        bad.append("rank %d: torchrun's argv %r, expected %r" % (r, targv, want))
    if shell:
        want = want[:2] + ["--price=5"]  # the shell's own $$ (its pid) followed by 5
        oargv = oargv[:3] + [re.sub(r"^--price=\d+5$", "--price=5", oargv[3])] if len(oargv) == 4 else oargv
    if oargv[1:] != want:
        bad.append("rank %d: our argv %r, expected %r" % (r, oargv, want))
    if T[r]["cwd"] != O[r]["cwd"]:
        bad.append("rank %d: cwd %r vs %r" % (r, T[r]["cwd"], O[r]["cwd"]))
# one MASTER_ADDR:PORT per job, as torchrun
for who, D in (("torchrun", T), ("ours", O)):
    if len({(d["env"]["MASTER_ADDR"], d["env"]["MASTER_PORT"]) for d in D.values()}) != 1:
        bad.append("%s: more than one MASTER_ADDR:PORT" % who)
if bad:
    print("\n".join(bad))
    sys.exit(1)
print("world %d: %d names each, identical but for %s" % (world, len(T[0]["env"]),
      ", ".join(sorted(DIFFER | OURS_ONLY))))
PY
}

say "1. one node, two workers"
run_torchrun "$EA_TMP/t1" 1
run_ours "$EA_TMP/o1" a 1 -- "$PY" "$DUMP" "${ARGS[@]}"
compare "$EA_TMP/t1" "$EA_TMP/o1" 2 0 || fail "one node: the environments differ"
pass "one node, two workers: as torchrun"

say "2. two nodes, two workers each"
run_torchrun "$EA_TMP/t2" 2
run_ours "$EA_TMP/o2" b 2 -- "$PY" "$DUMP" "${ARGS[@]}"
compare "$EA_TMP/t2" "$EA_TMP/o2" 4 0 || fail "two nodes: the environments differ"
pass "two nodes, two workers each: as torchrun"

say "3. one node, the program as a shell worker_command"
run_ours "$EA_TMP/o3" c 1 --set compute.worker_command="$PY $DUMP --local-rank=\${local_rank} --tag=\$local_rank --price=\$\$5"
compare "$EA_TMP/t1" "$EA_TMP/o3" 2 1 || fail "worker_command: the environments differ"
pass "worker_command: \${local_rank} replaced before the shell sees it"
