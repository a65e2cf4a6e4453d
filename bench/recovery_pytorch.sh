#!/usr/bin/env bash
# bench/recovery_pytorch.sh — recovery of a user's torchrun script: the same
# torchrun-style program (examples/torchrun_ddp.py: tiny model, gloo,
# init_process_group("env://"), its own checkpoint every 5 steps) under
# torchrun and under elastic-agent restart mode, in one run, on one machine.
#
# The program is bench/recovery_pytorch_ddp.py: examples/torchrun_ddp.py with
# timestamps added (every line ends t=<time.time()>, one "phase" line per
# process: exec, script start, import torch done, gloo group up, checkpoint
# loaded, DDP built) and --gloo-timeout; the example stays unmodified.
#
# The systems, 4 nodes each on 127.0.0.1, one worker per node:
#   torchrun-default  torchrun --nnodes=3:4 --rdzv_backend=c10d as shipped
#                     (monitor_interval 5, last_call 30 s, read 60 s)
#   torchrun-tuned    --monitor_interval=1 --rdzv_conf=last_call_timeout=1,read_timeout=10
#                     (both as bench/recovery_torchrun.sh; node 0 hosts the store,
#                     node 3 is the victim).  The script gets --gloo-timeout 10
#                     in both: with torch's 30 min a SIGSTOPped node's peers
#                     would block for 30 min.
#   ours              4 elastic-agents, `elastic-agent run -- python3 SCRIPT`
#                     (compute.min_nodes 3, max_nodes 4, runtime.max_restarts
#                     100, everything else default; the script keeps its
#                     default gloo timeout); the victim is never the controller.
#                     Warm start is the default (compute.warm_start auto,
#                     compute.preload "torch, torch.distributed, torch._dynamo"):
#                     each agent keeps one spare Python per local rank that
#                     has imported the preload, and a new generation's worker
#                     is that spare, handed its argv and environment; the
#                     next spare starts 2 s after a take (EA__SUP_SPARE_DELAY_MS)
#                     and imports for seconds.  So that every fault finds
#                     ready spares, the bench waits before each fault (60 s
#                     deadline) until every live agent's status --json says
#                     workers[].spare.state "ready"; a start that is cold or
#                     "still importing" anyway is reported, not hidden.
#   ours-cold         ours with --set compute.warm_start=off: every worker is
#                     a fresh `python3 SCRIPT` (imports torch itself)
#   ours-inplace      the same model, data, optimizer and step sleep driven by
#                     the library (bench/recovery_pytorch_lib.py: `import
#                     elastic_agent`), `--set compute.protocol=library`, the
#                     rest as ours; timed to the first step at the new world
#                     size in a generation formed after the fault (the same
#                     processes go on); its worker-kill is timed twice: to the
#                     first step at world 3 (the survivors re-formed without
#                     the restarting worker: "worker-kill") and to the first
#                     step at world 4 with the restarted worker back, after its
#                     hello and the joiner batching ("worker-back")
#   torchft           TorchFT 0.2.0, the same model, data, optimizer and step
#                     sleep driven by its own API (bench/recovery_torchft.py:
#                     Manager, its DDP and Optimizer wrappers, ProcessGroupGloo),
#                     4 replica groups of one rank, each started as its README
#                     does (torchrun --nnodes=1 --nproc_per_node=1 --standalone,
#                     --max_restarts=100: torchrun hosts the group's store and
#                     restarts a killed worker); its Lighthouse on 127.0.0.1
#                     with --min_replicas 3 and everything else as shipped
#                     (join_timeout_ms 60000, quorum_tick_ms 100,
#                     heartbeat_timeout_ms 5000); Manager(min_replica_size=3),
#                     the library's timeouts (60 s); timed like ours-inplace, to
#                     the first committed step at the new size in a quorum
#                     formed after the fault
#   torchft-tuned     the same with the README's Lighthouse flags
#                     (--quorum_tick_ms 100 --join_timeout_ms 10000), the
#                     timeouts of its train_ddp.py example (ProcessGroupGloo 5 s,
#                     Manager 30 s) and --heartbeat_timeout_ms 1000 (ours: the
#                     documented "how long before a replica is considered dead")
#   nvrx              NVIDIA Resiliency Extension (nvidia-resiliency-ext, NVRx)
#                     as its in-job + in-process example runs: ft_launcher
#                     --nnodes=3:4 --ft-restart-policy=min-healthy per node
#                     (bench/lib.sh: nvrx_start), the same model, data,
#                     optimizer, step sleep and checkpoint every 5 steps
#                     under inprocess.Wrapper (bench/recovery_nvrx.py) with
#                     its default timeouts; a fresh cluster for every fault
#                     (NVRx takes no node back: min-healthy disables
#                     upscaling); timed to the first step at world 3 of a
#                     restart iteration begun after the fault; node-join:
#                     node 3 started again after the kill (30 s deadline:
#                     not admitted, as documented); spof: node 0
#   nvrx-tuned        the same with shorter wrapper timeouts (soft 5 s, hard
#                     8 s, heartbeat 3 s), gloo 3 s, --monitor-interval=1
#   nvrx-injob        NVRx's in-job restart alone: ft_launcher's default
#                     policy (any-failed: every worker restarted at any
#                     failure; joiners admitted), the wrapper disabled,
#                     --monitor-interval=1, last_call_timeout=1, gloo 10 s;
#                     one running cluster and torchrun's sequence of faults
# NVRx and TorchFT are skipped, with a line that says so, where the
# virtualenv lacks them.
# Per trial, on one running cluster per system:
#   node-kill    SIGKILL the victim's process groups (agent + worker)
#   node-join    a node (a fresh one) starts and joins: timed from its start
#   node-stop    SIGSTOP the victim's process groups; SIGKILLed once measured
#   node-join    again (the stopped node replaced)
#   worker-kill  SIGKILL the victim's worker only (ours-inplace: then
#                worker-back, the same kill timed to world 4 again)
# then once per system, the single point of failure ("spof", 60 s deadline):
#   torchrun: SIGKILL node 0, the c10d store's host; ours: the controller's
#   node; torchft: the Lighthouse; nvrx: node 0 (rendezvous and wrapper stores).  Recovered = the others step again at the
#   new size (torchft: at any size) within 60 s of the kill.
# ours-inplace also reports the running ranks' stall at each node-join, from
# the library's per-generation timing line (docs/pytorch.md, "join stall"):
# last step of the old generation → PREPARE → READY → COMMIT → old group
# destroyed → new group formed → state synced → first step.
# Each is timed from just before the signal (or the start) to the first step
# completed at the new world size by a process started after it (every node
# of the new group must have stepped twice for the fault to count as
# recovered).  Median and max over the trials; the ratio torchrun/ours; the
# load average at the start and the end; where our seconds go (from the
# script's timestamps); JSON to bench/results/recovery-pytorch.json.
# Where our seconds go, per phase of the process that gated the new group
# (the last to finish its imports), median and max: detect (fault → the
# first agent log line that knows: a member "->dead", "worker I pid=P
# exited", a new member "new->alive"), commit (→ "generation committed"),
# spawn (→ the gating process started: cold, its exec from /proc; warm, the
# agent's "worker I started pid=P (…, warm)" line), python (→ the script's
# first line), import torch, the other imports, gloo's init_process_group,
# the checkpoint load, DDP built, the first step; with how it started (warm,
# warm but "still importing", cold), and how every restarted worker of
# ours/ours-cold started, from the agents' "worker I started pid=P (…)"
# lines (agent-side times are the agent's own log stamps); the spares waits.
#
# A benchmark: it reports, never asserts timings.  Every node is its own
# process group (setsid) and every group and worker it started is SIGKILLed at
# the end; every wait has a deadline.
#
# usage: bench/recovery_pytorch.sh [--quick] [--trials N] [--systems LIST]
#            [--json PATH] [--out DIR] [--keep]
#   --trials N  trials per fault (default 3); --quick: 1 trial (a smoke run)
#   --systems   comma list of ours,ours-cold,ours-inplace,torchrun-tuned,
#               torchrun-default,torchft,torchft-tuned,nvrx,nvrx-tuned,
#               nvrx-injob (all)
#   --out DIR / --keep  keep the logs
# env: EA_BINDIR (default bin) holds elastic-agent.
BENCH=recovery_pytorch
. "$(dirname "$0")/lib.sh"
TRIALS=3
SYSTEMS=ours,ours-cold,ours-inplace,torchrun-tuned,torchrun-default,torchft,torchft-tuned,nvrx,nvrx-tuned,nvrx-injob
SPOF_S=60
JSON=$HERE/results/recovery-pytorch.json
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) TRIALS=1 ;;
        --trials) TRIALS=$2; shift ;;
        -h|--help) sed -n '2,/^BENCH=/p' "$0" | sed '$d'; exit 0 ;;
        *) bench_arg "$@" || { echo "recovery_pytorch: unknown argument $1" >&2; exit 2; }
           shift $((BENCH_SHIFT - 1)) ;;
    esac
    shift
done
bench_setup ea-rpt
EVENTS=$OUT/events.jsonl
: > "$EVENTS"
GROUP_ENV=(EA_BENCH_RUN="$OUT/")   # every process this run starts: cleanup finds them

cleanup() { bench_cleanup "$OUT/"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# event SYSTEM KIND TRIAL T0 WORLD OK T_END LOGS [AGENT_LOGS]
event() {
    local logs agents
    logs=$(printf '"%s",' ${8//,/ }); logs=[${logs%,}]
    agents=$logs
    [ -n "${9:-}" ] && { agents=$(printf '"%s",' ${9//,/ }); agents=[${agents%,}]; }
    printf '{"system":"%s","kind":"%s","trial":%s,"t0":%s,"world":%s,"recovered":%s,"t_end":%s,"logs":%s,"agent_logs":%s}\n' \
        "$1" "$2" "$3" "$4" "$5" "$6" "${7:-null}" "$logs" "$agents" >> "$EVENTS"
    log "$1 $2 trial $3: recovered=$6"
}
# measure SYSTEM KIND TRIAL T0 WORLD TIMEOUT LOGS [AGENT_LOGS]: wait, record; 0 if recovered
measure() {
    local t_end ok=true
    t_end=$(wait_world "$7" "$5" "$4" "$6") || ok=false
    event "$1" "$2" "$3" "$4" "$5" "$ok" "$t_end" "$7" "${8:-}"
    [ $ok = true ]
}

# ------------------------------------------------------------------ torchrun
tr_start_node() { # DIR NODE MON CONF PORT RUNID
    local d=$1 n=$2 ishost=false
    [ "$n" -eq 0 ] && ishost=true
    start_group "tr$n" "$d/node$n.log" env LOGLEVEL=INFO OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 \
        TORCH_DISABLE_SHARE_RDZV_TCP_STORE="$TR_NOSHARE" \
        "$TORCHRUN" --nnodes=3:4 --nproc_per_node=1 --rdzv_backend=c10d \
        --rdzv_endpoint=127.0.0.1:"$5" --rdzv_id="$6" --rdzv_conf="is_host=$ishost${4:+,$4}" \
        --max_restarts=100 --monitor_interval="$3" --redirects=1 --tee=1 \
        --log_dir="$d/torchrun-logs/node$n-$EPOCHREALTIME" \
        "$SCRIPT" --steps 100000000 --save-every 5 --step-sleep $STEP_SLEEP --ckpt "$d/ck" --gloo-timeout 10
}


# tr_signal_node DIR SIG: node 3 as a host crash or freeze would hit it — its
# torchrun's process group and its worker's: torch 2.x's torchrun starts each
# worker in a session of its own (start_new_session=True), so the group
# alone leaves the worker running (and training on with the survivors: the
# first 2.15.0 run of this bench saw no recovery because nothing had failed).
tr_signal_node() {
    local pid
    pid=$(newest_pid "$1/node3.log") || pid=
    kill -"$2" -- "-${PG[tr3]}" ${pid:+"-$pid"} 2>/dev/null
    TR3_WORKER=$pid
    [ -n "$pid" ] && WORKER_PIDS+=("$pid")
}

run_torchrun() { # default|tuned
    local v=$1 sys=torchrun-$1 mon conf dl d=$OUT/torchrun-$1
    case $v in
        default) mon=5 conf="" dl=150 ;;
        tuned) mon=1 conf=last_call_timeout=1,read_timeout=10 dl=90 ;;
    esac
    mkdir -p "$d"
    local port runid=rpt-$v-$$ n i t pid
    port=$(free_port)
    local L=() S=()
    for n in 0 1 2 3; do L+=("$d/node$n.log"); done
    for n in 0 1 2; do S+=("$d/node$n.log"); done
    local all survivors
    all=$(join_by "${L[@]}") survivors=$(join_by "${S[@]}")
    log "$sys: starting 4 torchrun nodes (monitor_interval=$mon rdzv_conf='$conf')"
    t=$EPOCHREALTIME
    tr_start_node "$d" 0 $mon "$conf" "$port" $runid
    for i in $(seq 300); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
    for n in 1 2 3; do tr_start_node "$d" $n $mon "$conf" "$port" $runid; done
    wait_world "$all" 4 "$t" 180 > /dev/null || { log "$sys: no world 4 within 180 s"; return 1; }
    for i in $(seq "$TRIALS"); do
        t=$EPOCHREALTIME; tr_signal_node "$d" KILL
        measure $sys node-kill "$i" "$t" 3 $dl "$survivors" || return 1
        kill_group tr3
        t=$EPOCHREALTIME; tr_start_node "$d" 3 $mon "$conf" "$port" $runid
        measure $sys node-join "$i" "$t" 4 $dl "$all" || return 1
        t=$EPOCHREALTIME; tr_signal_node "$d" STOP
        measure $sys node-stop "$i" "$t" 3 $dl "$survivors"; local ok=$?
        kill_group tr3
        [ -n "$TR3_WORKER" ] && kill -KILL -- "-$TR3_WORKER" 2>/dev/null
        [ $ok = 0 ] || return 1
        t=$EPOCHREALTIME; tr_start_node "$d" 3 $mon "$conf" "$port" $runid
        measure $sys node-join "$i" "$t" 4 $dl "$all" || return 1
        pid=$(newest_pid "$d/node3.log") || { log "$sys: no worker on node 3"; return 1; }
        t=$EPOCHREALTIME; kill -KILL "$pid"
        measure $sys worker-kill "$i" "$t" 4 $dl "$all" || return 1
    done
    # the single point: node 0, the c10d store's host (a host crash)
    local p0 others
    p0=$(newest_pid "$d/node0.log") || p0=
    [ -n "$p0" ] && WORKER_PIDS+=("$p0")
    others=$(join_by "$d/node1.log" "$d/node2.log" "$d/node3.log")
    t=$EPOCHREALTIME; kill -KILL -- "-${PG[tr0]}" ${p0:+"-$p0"} 2>/dev/null
    measure $sys spof 1 "$t" 3 $SPOF_S "$others" || true
}

# ---------------------------------------------------------------------- ours
OURS_SEED=
OURS_LIB=0    # 1: ours-inplace (library mode, bench/recovery_pytorch_lib.py)
OURS_COLD=0   # 1: ours-cold (compute.warm_start=off)
SPARE_S=60    # the deadline of the wait for ready spares before a fault
ours_start() { # DIR NAME
    local d=$1 n=$2 prog=()
    mkdir -p "$d/$n"
    [ "$OURS_COLD" = 1 ] && prog=(--set compute.warm_start=off)
    if [ "$OURS_LIB" = 1 ]; then
        prog+=(--set compute.protocol=library --set checkpoint.dir="$d/ck"
            -- "$PY" "$LIBSCRIPT" --steps 100000000 --step-sleep "$STEP_SLEEP")
    else
        prog+=(-- "$PY" "$SCRIPT" --steps 100000000 --save-every 5 --step-sleep "$STEP_SLEEP" --ckpt "$d/ck")
    fi
    start_group "ea-$n" "$d/$n.log" env OMP_NUM_THREADS=1 "$AGENT" run --name "$n" --bind 127.0.0.1:0 \
        --data-dir "$d/$n/data" ${OURS_SEED:+--join "$OURS_SEED"} \
        --set compute.min_nodes=3 --set compute.max_nodes=4 --set runtime.max_restarts=100 "${prog[@]}"
    local i
    for i in $(seq 100); do grep -q ' listen .*gossip=' "$d/$n.log" && break; sleep 0.1; done
    if [ -z "$OURS_SEED" ]; then
        OURS_SEED=$(grep -o 'gossip=[0-9.]*:[0-9]*' "$d/$n.log" | head -n1 | cut -d= -f2)
    fi
}
ours_controller() { # DIR NAME → the controller's name as NAME sees it
    "$AGENT" status --data-dir "$1/$2/data" --json 2>/dev/null |
        "$PY" -c 'import json,sys; print(json.load(sys.stdin)["controller"]["name"])' 2>/dev/null
}
ours_kill_node() { # DIR NAME SIGNAL: the agent's group and its worker's
    local w
    w=$(newest_pid "$1/$2.log") && WORKER_PIDS+=("$w")
    kill -"$3" -- "-${PG[ea-$2]}" ${w:+"-$w"} 2>/dev/null
}

# ours_spares DIR TRIAL BEFORE NAME…: wait (SPARE_S deadline) until every
# named agent's warm interpreters are ready ("off" counts: ours-cold); a
# miss is logged and recorded (OUT/spares.jsonl), and the fault goes ahead.
ours_spares() {
    local d=$1 tr=$2 before=$3 x dirs=()
    shift 3
    for x in "$@"; do dirs+=("$d/$x/data"); done
    "$PY" "$HELPER" spares --agent "$AGENT" --data-dirs "$(join_by "${dirs[@]}")" --timeout $SPARE_S \
        --record "$OUT/spares.jsonl" --system "$sys" --before "$before" --trial "$tr" 2>&1 |
        while IFS= read -r l; do log "$sys: before $before trial $tr: $l"; done
}

run_ours() { # [inplace|cold]
    local sys=ours d=$OUT/ours dl=60
    OURS_LIB=0 OURS_COLD=0
    [ "${1:-}" = inplace ] && { sys=ours-inplace d=$OUT/ours-inplace OURS_LIB=1; }
    [ "${1:-}" = cold ] && { sys=ours-cold d=$OUT/ours-cold OURS_COLD=1; }
    mkdir -p "$d"
    OURS_SEED=
    local names=(n1 n2 n3 n4) next=5 n i t victim ctl w
    log "$sys: starting 4 elastic-agents"
    t=$EPOCHREALTIME
    for n in "${names[@]}"; do ours_start "$d" "$n"; done
    logs_of() { local x out=(); for x in "$@"; do out+=("$d/$x.log"); done; join_by "${out[@]}"; }
    wait_world "$(logs_of "${names[@]}")" 4 "$t" 120 > /dev/null || { log "$sys: no world 4 within 120 s"; return 1; }
    for n in "${names[@]}"; do w=$(newest_pid "$d/$n.log") && WORKER_PIDS+=("$w"); done
    pick_victim() { # the newest node that is not the controller
        ctl=$(ours_controller "$d" "${names[0]}")
        local k
        for ((k = ${#names[@]} - 1; k >= 0; k--)); do
            [ "${names[$k]}" != "$ctl" ] && { victim=${names[$k]}; return; }
        done
    }
    drop() { local x keep=(); for x in "${names[@]}"; do [ "$x" != "$1" ] && keep+=("$x"); done; names=("${keep[@]}"); }
    join_one() { # TRIAL
        local nn=n$next
        next=$((next + 1))
        ours_spares "$d" "$1" node-join "${names[@]}"
        t=$EPOCHREALTIME; ours_start "$d" "$nn"
        names+=("$nn")
        measure $sys node-join "$1" "$t" 4 $dl "$(logs_of "${names[@]}")" || return 1
        w=$(newest_pid "$d/$nn.log") && WORKER_PIDS+=("$w")
    }
    for i in $(seq "$TRIALS"); do
        ours_spares "$d" "$i" node-kill "${names[@]}"
        pick_victim
        t=$EPOCHREALTIME; ours_kill_node "$d" "$victim" KILL
        drop "$victim"
        measure $sys node-kill "$i" "$t" 3 $dl "$(logs_of "${names[@]}")" || return 1
        kill_group "ea-$victim"
        join_one "$i" || return 1
        ours_spares "$d" "$i" node-stop "${names[@]}"
        pick_victim
        t=$EPOCHREALTIME; ours_kill_node "$d" "$victim" STOP
        drop "$victim"
        measure $sys node-stop "$i" "$t" 3 $dl "$(logs_of "${names[@]}")"; local ok=$?
        ours_kill_node "$d" "$victim" KILL
        kill_group "ea-$victim"
        [ $ok = 0 ] || return 1
        join_one "$i" || return 1
        ours_spares "$d" "$i" worker-kill "${names[@]}"
        if [ "$OURS_LIB" = 1 ]; then
            pick_victim
            w=$(newest_pid "$d/$victim.log") || { log "$sys: no worker on $victim"; return 1; }
            local others=() x
            for x in "${names[@]}"; do [ "$x" != "$victim" ] && others+=("$x"); done
            t=$EPOCHREALTIME; kill -KILL "$w"
            measure $sys worker-kill "$i" "$t" 3 $dl "$(logs_of "${others[@]}")" || return 1
            measure $sys worker-back "$i" "$t" 4 $dl "$(logs_of "${names[@]}")" || return 1
            w=$(newest_pid "$d/$victim.log") && WORKER_PIDS+=("$w")
            continue
        fi
        pick_victim
        w=$(newest_pid "$d/$victim.log") || { log "ours: no worker on $victim"; return 1; }
        t=$EPOCHREALTIME; kill -KILL "$w"
        measure $sys worker-kill "$i" "$t" 4 $dl "$(logs_of "${names[@]}")" || return 1
        for n in "${names[@]}"; do w=$(newest_pid "$d/$n.log") && WORKER_PIDS+=("$w"); done
    done
    ours_spof
}
# the single point: the controller's node (a host crash), once per system
ours_spof() {
    ours_spares "$d" 1 spof "${names[@]}"
    ctl=$(ours_controller "$d" "${names[0]}")
    [ -n "$ctl" ] || { log "$sys: no controller known"; return 1; }
    t=$EPOCHREALTIME; ours_kill_node "$d" "$ctl" KILL
    drop "$ctl"
    measure $sys spof 1 "$t" 3 $SPOF_S "$(logs_of "${names[@]}")" || true
}

# ------------------------------------------------------------------- torchft
# tft_start_node DIR N PORT: replica group N as TorchFT's README starts one
tft_start_node() {
    local d=$1 n=$2 tuned=
    [ "$TFT_TUNED" = 1 ] && tuned=--tuned
    start_group "tft$n" "$d/node$n.log" env OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 \
        REPLICA_GROUP_ID="$n" TORCHFT_LIGHTHOUSE="http://127.0.0.1:$3" \
        "$TORCHRUN" --nnodes=1 --nproc_per_node=1 --standalone --max_restarts=100 \
        --redirects=1 --tee=1 --log_dir="$d/torchrun-logs/node$n-$EPOCHREALTIME" \
        "$TFTSCRIPT" --steps 100000000 --step-sleep $STEP_SLEEP --min-replicas 3 $tuned
}
# tft_signal_node DIR N SIG: the replica group's torchrun and its worker's session
tft_signal_node() {
    local pid
    pid=$(newest_pid "$1/node$2.log") || pid=
    kill -"$3" -- "-${PG[tft$2]}" ${pid:+"-$pid"} 2>/dev/null
    TFT_WORKER=$pid
    [ -n "$pid" ] && WORKER_PIDS+=("$pid")
}
tft_lighthouse() { # DIR PORT: TorchFT's Lighthouse, its own process group
    local lh=(--min_replicas 3 --bind "127.0.0.1:$2")
    [ "$TFT_TUNED" = 1 ] && lh+=(--quorum_tick_ms 100 --join_timeout_ms 10000 --heartbeat_timeout_ms 1000)
    start_group lh "$1/lighthouse.log" env RUST_BACKTRACE=1 "$LIGHTHOUSE" "${lh[@]}"
}
TFT_TUNED=0
run_torchft() { # default|tuned
    local v=$1 sys=torchft d=$OUT/torchft-$1 dl=90
    TFT_TUNED=0
    [ "$v" = tuned ] && { sys=torchft-tuned TFT_TUNED=1; }
    mkdir -p "$d"
    local port n i t pid
    port=$(free_port)
    local L=() S=()
    for n in 0 1 2 3; do L+=("$d/node$n.log"); done
    for n in 0 1 2; do S+=("$d/node$n.log"); done
    local all survivors lhl=$d/lighthouse.log
    all=$(join_by "${L[@]}") survivors=$(join_by "${S[@]}")
    log "$sys: starting the Lighthouse and 4 replica groups"
    t=$EPOCHREALTIME
    tft_lighthouse "$d" "$port"
    for i in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
    for n in 0 1 2 3; do tft_start_node "$d" $n "$port"; done
    wait_world "$all" 4 "$t" 180 > /dev/null || { log "$sys: no world 4 within 180 s"; return 1; }
    for i in $(seq "$TRIALS"); do
        t=$EPOCHREALTIME; tft_signal_node "$d" 3 KILL
        measure $sys node-kill "$i" "$t" 3 $dl "$survivors" "$lhl" || return 1
        kill_group tft3
        t=$EPOCHREALTIME; tft_start_node "$d" 3 "$port"
        measure $sys node-join "$i" "$t" 4 $dl "$all" "$lhl" || return 1
        t=$EPOCHREALTIME; tft_signal_node "$d" 3 STOP
        measure $sys node-stop "$i" "$t" 3 $dl "$survivors" "$lhl"; local ok=$?
        kill_group tft3
        [ -n "$TFT_WORKER" ] && kill -KILL -- "-$TFT_WORKER" 2>/dev/null
        [ $ok = 0 ] || return 1
        t=$EPOCHREALTIME; tft_start_node "$d" 3 "$port"
        measure $sys node-join "$i" "$t" 4 $dl "$all" "$lhl" || return 1
        pid=$(newest_pid "$d/node3.log") || { log "$sys: no worker on node 3"; return 1; }
        WORKER_PIDS+=("$pid")
        t=$EPOCHREALTIME; kill -KILL "$pid"
        measure $sys worker-kill "$i" "$t" 4 $dl "$all" "$lhl" || return 1
    done
    # the single point: the Lighthouse.  Recovered = committed steps go on
    # (at any size) in the last 10 s of the 60 s after the kill.
    t=$EPOCHREALTIME; kill -KILL -- "-${PG[lh]}" 2>/dev/null
    spof_measure $sys "$t" "$all" "$lhl"
}

# spof_measure SYSTEM T0 LOGS [AGENT_LOGS] (torchft): steps in the window
spof_measure() {
    local r ok=false
    r=$("$PY" "$HELPER" progress --logs "$3" --after "$2" --timeout $SPOF_S) && ok=true
    event "$1" spof 1 "$2" 0 $ok "${r:-null}" "$3" "${4:-}"
}

# ---------------------------------------------------------------------- NVRx
# Four ft_launcher nodes running bench/recovery_nvrx.py (lib.sh: nvrx_start).
# Each fault on a cluster of its own: NVRx takes no node back after a fault
# (min-healthy "prevents unintended upscaling", its docs), so a cluster once
# at world 3 does not return to 4 until a fault brings it below 3 nodes.
# Victim node 3 (never node 0: it hosts the rendezvous store, the wrapper's
# store and the script's base store).  node-join: once per system, node 3
# started again after the node-kill; recorded as not recovered unless it
# steps at world 4 within JOIN_S (30 s).
NV_VARIANT=default NV_PORT= NV_RUNID= NV_DIR=
JOIN_S=30
nvrx_cluster() { # TAG: a fresh directory and 4 nodes; 0 when all 4 step at world 4
    local n i t
    NV_DIR=$NV_DIR0/$1 NV_PORT=$(free_port) NV_RUNID=rpt-$1-$$
    mkdir -p "$NV_DIR"
    log "$sys: $1: starting 4 ft_launcher nodes"
    t=$EPOCHREALTIME
    for n in 0 1 2 3; do
        nvrx_start "nv$n" "$NV_DIR/node$n.log" $n "$NV_PORT" "$NV_RUNID" $NV_VARIANT "$NV_DIR/ck"
        [ $n = 0 ] || continue
        for i in $(seq 300); do (exec 3<>"/dev/tcp/127.0.0.1/$NV_PORT") 2>/dev/null && break; sleep 0.1; done
    done
    wait_world "$(nvrx_logs 0 1 2 3)" 4 "$t" 180 > /dev/null || { log "$sys: no world 4 within 180 s"; return 1; }
}
nvrx_logs() { local n out=(); for n in "$@"; do out+=("$NV_DIR/node$n.log"); done; join_by "${out[@]}"; }
nvrx_down() { local n; for n in 0 1 2 3; do nvrx_signal "nv$n" KILL; kill_group "nv$n"; done; kill_workers; }
run_nvrx() { # default|tuned|injob
    local sys=nvrx dl=90 i t w ok
    NV_VARIANT=$1
    [ "$1" = default ] || sys=nvrx-$1
    NV_DIR0=$OUT/$sys
    [ "$1" = injob ] && { run_nvrx_injob; return; }
    for i in $(seq "$TRIALS"); do
        nvrx_cluster "kill$i" || return 1
        t=$EPOCHREALTIME; nvrx_signal nv3 KILL
        measure $sys node-kill "$i" "$t" 3 $dl "$(nvrx_logs 0 1 2)"; ok=$?
        kill_group nv3
        if [ $ok = 0 ] && [ "$i" = 1 ]; then
            t=$EPOCHREALTIME; nvrx_start nv3 "$NV_DIR/node3.log" 3 "$NV_PORT" "$NV_RUNID" $NV_VARIANT "$NV_DIR/ck"
            measure $sys node-join "$i" "$t" 4 $JOIN_S "$(nvrx_logs 0 1 2 3)"
        fi
        nvrx_down
        [ $ok = 0 ] || return 1
        nvrx_cluster "stop$i" || return 1
        t=$EPOCHREALTIME; nvrx_signal nv3 STOP
        measure $sys node-stop "$i" "$t" 3 $dl "$(nvrx_logs 0 1 2)"; ok=$?
        nvrx_down
        [ $ok = 0 ] || return 1
        nvrx_cluster "worker$i" || return 1
        w=$(newest_pid "$NV_DIR/node3.log") || { log "$sys: no worker on node 3"; nvrx_down; return 1; }
        WORKER_PIDS+=("$w")
        t=$EPOCHREALTIME; kill -KILL "$w"
        measure $sys worker-kill "$i" "$t" 3 $dl "$(nvrx_logs 0 1 2)"; ok=$?
        nvrx_down
        [ $ok = 0 ] || return 1
    done
    # the single point: node 0 (the rendezvous store's host, and the
    # wrapper's and the script's stores': every one is hosted by rank 0)
    nvrx_cluster spof || return 1
    t=$EPOCHREALTIME; nvrx_signal nv0 KILL
    measure $sys spof 1 "$t" 3 $SPOF_S "$(nvrx_logs 1 2 3)" || true
    nvrx_down
}
# nvrx-injob: ft_launcher's in-job restart alone (any-failed: every worker
# restarted, a joiner admitted): one running cluster, torchrun's sequence
run_nvrx_injob() {
    local all survivors
    nvrx_cluster run || return 1
    all=$(nvrx_logs 0 1 2 3) survivors=$(nvrx_logs 0 1 2)
    join3() { # TRIAL: node 3 started again
        t=$EPOCHREALTIME; nvrx_start nv3 "$NV_DIR/node3.log" 3 "$NV_PORT" "$NV_RUNID" injob "$NV_DIR/ck"
        measure $sys node-join "$1" "$t" 4 $dl "$all"
    }
    for i in $(seq "$TRIALS"); do
        t=$EPOCHREALTIME; nvrx_signal nv3 KILL
        measure $sys node-kill "$i" "$t" 3 $dl "$survivors" || return 1
        kill_group nv3
        join3 "$i" || return 1
        t=$EPOCHREALTIME; nvrx_signal nv3 STOP
        measure $sys node-stop "$i" "$t" 3 $dl "$survivors"; ok=$?
        nvrx_signal nv3 KILL; kill_group nv3
        [ $ok = 0 ] || return 1
        join3 "$i" || return 1
        w=$(newest_pid "$NV_DIR/node3.log") || { log "$sys: no worker on node 3"; return 1; }
        WORKER_PIDS+=("$w")
        t=$EPOCHREALTIME; kill -KILL "$w"
        measure $sys worker-kill "$i" "$t" 4 $dl "$all" || return 1
    done
    t=$EPOCHREALTIME; nvrx_signal nv0 KILL
    measure $sys spof 1 "$t" 3 $SPOF_S "$(nvrx_logs 1 2 3)" || true
    nvrx_down
}

# ------------------------------------------------------------------- the run
status=0
IFS=, read -r -a SLIST <<< "$SYSTEMS"
for s in "${SLIST[@]}"; do
    installed "$s" || continue
    case $s in
        ours) run_ours || { log "ours: stopped early"; status=1; } ;;
        ours-cold) run_ours cold || { log "$s: stopped early"; status=1; } ;;
        ours-inplace) run_ours inplace || { log "$s: stopped early"; status=1; } ;;
        torchrun-default) run_torchrun default || { log "$s: stopped early"; status=1; } ;;
        torchrun-tuned) run_torchrun tuned || { log "$s: stopped early"; status=1; } ;;
        torchft) run_torchft default || { log "$s: stopped early"; status=1; } ;;
        torchft-tuned) run_torchft tuned || { log "$s: stopped early"; status=1; } ;;
        nvrx) run_nvrx default || { log "$s: stopped early"; status=1; } ;;
        nvrx-tuned) run_nvrx tuned || { log "$s: stopped early"; status=1; } ;;
        nvrx-injob) run_nvrx injob || { log "$s: stopped early"; status=1; } ;;
        *) echo "recovery_pytorch: unknown system $s" >&2; exit 2 ;;
    esac
    cleanup
done
WALL=$(awk -v a="$T_BEGIN" -v b="$EPOCHREALTIME" 'BEGIN { printf "%d", b - a }')
cat > "$OUT/meta.json" <<EOF
{"torch":"$TORCH_VERSION","torchft":"$TORCHFT_VERSION","nvrx":"$NVRX_VERSION","host":"$(hostname)","date":"$(date -u +%FT%TZ)","cpus":$(nproc),
 "loadavg_start":"$LOAD_START","loadavg_end":"$(cut -d' ' -f1-3 /proc/loadavg)","trials":$TRIALS,
 "wall_s":$WALL,"command":"bench/recovery_pytorch.sh${ORIG_ARGS:+ $ORIG_ARGS}",
 "settings":{
  "script":"bench/recovery_pytorch_ddp.py (examples/torchrun_ddp.py + timestamps) --steps 100000000 --save-every 5 --step-sleep $STEP_SLEEP --ckpt DIR; gloo; OMP_NUM_THREADS=1",
  "torchrun-share-store":"TORCH_DISABLE_SHARE_RDZV_TCP_STORE=$TR_NOSHARE (1: torch's opt-out of the shared store, which breaks a join on 2.15.0)",
  "torchrun-common":"torchrun --nnodes=3:4 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:PORT --max_restarts=100 --redirects=1 --tee=1; node 0 is_host=true; victim node 3; script --gloo-timeout 10",
  "torchrun-default":"--monitor_interval=5, rendezvous timeouts as shipped",
  "torchrun-tuned":"--monitor_interval=1 --rdzv_conf=last_call_timeout=1,read_timeout=10",
  "torchft":"torchft $TORCHFT_VERSION: bench/recovery_torchft.py (the same model, data, SGD and step sleep; Manager(min_replica_size=3), torchft DDP + Optimizer, ProcessGroupGloo, library timeouts 60 s), one replica group per node under torchrun --nnodes=1 --nproc_per_node=1 --standalone --max_restarts=100; torchft_lighthouse --min_replicas 3 --bind 127.0.0.1:PORT, the rest as shipped (join_timeout_ms 60000, quorum_tick_ms 100, heartbeat_timeout_ms 5000); victim replica group 3; spof: the Lighthouse",
  "torchft-tuned":"as torchft with ProcessGroupGloo(timeout=5 s), Manager(timeout=30 s) (TorchFT's train_ddp.py example) and torchft_lighthouse --quorum_tick_ms 100 --join_timeout_ms 10000 (its README) --heartbeat_timeout_ms 1000",
  "ours-inplace":"bench/recovery_pytorch_lib.py (the same model, data, SGD and step sleep, driven by import elastic_agent; one phase line per generation) under elastic-agent run --set compute.protocol=library --set checkpoint.dir=DIR, the rest as ours",
  "ours":"elastic-agent run --set compute.min_nodes=3 --set compute.max_nodes=4 --set runtime.max_restarts=100 -- $EA_PYTHON SCRIPT ...; the rest default (scale_up_delay_ms 2000, lost_peer_grace_ms 500, warm_start auto, preload torch, torch.distributed, torch._dynamo); script's gloo timeout default (1800 s); victim never the controller; before each fault the bench waits (${SPARE_S} s deadline) until every live agent's spare is ready",
  "ours-cold":"as ours with --set compute.warm_start=off",
  "nvrx":"nvidia-resiliency-ext $NVRX_VERSION: bench/recovery_nvrx.py (the same model, data, SGD, step sleep and checkpoint every 5 steps; inprocess.Wrapper with its default timeouts (soft 60, hard 90, heartbeat 30, barrier 120 s), the example's store port and CudaHealthCheck; gloo timeout 10 s, the example's on CPU; RankMonitorClient heartbeats) under ft_launcher --nnodes=3:4 --nproc_per_node=1 --rdzv_backend=c10d --max-restarts=100 --monitor-interval=5 --ft-restart-policy=min-healthy --ft-enable-nic-monitor=False (NVRx's in-job + in-process example), rendezvous and FT heartbeat timeouts as shipped; a fresh cluster per fault; victim node 3; spof: node 0",
  "nvrx-tuned":"as nvrx with the wrapper's soft 5, hard 8, heartbeat 3, barrier and completion 30 s, gloo timeout 3 s, --monitor-interval=1 and last_call_timeout=1",
  "nvrx-injob":"ft_launcher's in-job restart alone: --ft-restart-policy=any-failed (its default), the script with --no-inprocess (Wrapper(enabled=False)), --monitor-interval=1, last_call_timeout=1, gloo 10 s; one running cluster, victim node 3, the faults in torchrun's order"}}
EOF
mkdir -p "$(dirname "$JSON")"
"$PY" "$HELPER" analyze "$OUT" --json "$JSON" || status=1
echo "json: $JSON"
if [ "$KEEP" = 1 ]; then echo "logs: $OUT"; else rm -rf "$OUT"; fi
exit $status
