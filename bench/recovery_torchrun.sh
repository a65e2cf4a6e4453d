#!/usr/bin/env bash
# bench/recovery_torchrun.sh — the torchrun baseline of bench/recovery.
#
# Four torchrun "nodes" on loopback (each its own torchrun agent with one
# gloo worker running bench/recovery_torchrun.py, --rdzv_backend=c10d,
# --nnodes=3:4), then faults, each timed from the SIGKILL:
#   node-kill      SIGKILL a whole node (agent + worker process group) that
#                  does not host the c10d store; the job must go on with 3;
#                  then the node is started again and joins (node-join:
#                  how long until it trains, how many running workers
#                  torchrun restarted to let it in).
#   worker-kill    SIGKILL only node 3's worker; its agent restarts it.
#   storehost-kill SIGKILL the node hosting the c10d store (node 0), once,
#                  at the end of the tuned run:
#                  c10d cannot survive it; reported as recovered or not.
# under two settings: "default" (torchrun as shipped) and "tuned" (the
# knobs below turned down).  The node logs are analysed by
# `recovery_torchrun.py analyze`, which prints the table and writes the JSON.
#
# Why it is built this way: every node is its own session (setsid), so a
# "node crash" is one kill of its process group and teardown can never miss
# a worker; node 0 is told it hosts the store (is_host=true) and the others
# that they do not, so which node must not be killed is known, not raced;
# the agents' stderr is stamped line by line with $EPOCHREALTIME because
# torchrun's log lines carry no time; every wait is a poll with a deadline.
#
# usage: bench/recovery_torchrun.sh [--quick] [--trials N] [--variants default,tuned]
#            [--no-storehost] [--json PATH] [--tsv PATH] [--out DIR] [--keep]
# --quick runs 2 trials instead of 5; --out DIR (kept) or --keep keeps the logs.
set -u
export LC_ALL=C   # $EPOCHREALTIME must use '.' as decimal point

HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../scripts/python.sh"
PY=$EA_PYTHON
TORCHRUN=$EA_TORCHRUN
SCRIPT=$HERE/recovery_torchrun.py
TRIALS=5
VARIANTS=default,tuned
STOREHOST=1
JSON=$HERE/results/recovery-torchrun.json
TSV=
OUT=
KEEP=0
NODES=(0 1 2 3)
VICTIM=3          # a node that is not the store host
# Restarts are budgeted per agent and every node-kill or worker-kill costs
# the survivors one; 100 is far above what one run spends.
MAX_RESTARTS=100
STEADY_STEPS=5    # steps per node at world 4 before the first fault
RECOVER_STEPS=3   # steps at the new world size that count as "recovered"
# The tuned settings recover a non-host node in ~20 s; three times that
# without a step means the job is not coming back.
STOREHOST_WAIT=60

while [ $# -gt 0 ]; do
    case "$1" in
        --quick) TRIALS=2 ;;
        --trials) TRIALS=$2; shift ;;
        --variants) VARIANTS=$2; shift ;;
        --no-storehost) STOREHOST=0 ;;
        --json) JSON=$2; shift ;;
        --tsv) TSV=$2; shift ;;
        --out) OUT=$2; KEEP=1; shift ;;
        --keep) KEEP=1 ;;
        -h|--help) sed -n '2,29p' "$0"; exit 0 ;;
        *) echo "recovery_torchrun: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done

if [ ! -x "$TORCHRUN" ] || ! "$PY" -c 'import torch.distributed' 2>/dev/null; then
    echo "recovery_torchrun: needs $TORCHRUN and torch in $PY (scripts/deps.sh installs requirements.txt)" >&2
    exit 3
fi

if [ -z "$OUT" ]; then
    OUT=$(mktemp -d /tmp/ea-recovery-torchrun.XXXXXX)
else
    mkdir -p "$OUT"
fi
EVENTS=$OUT/events.jsonl
: > "$EVENTS"

declare -A PG=()  # node -> process group id (= its session leader's pid)

log() { printf '[recovery_torchrun %s] %s\n' "$(date +%T)" "$*" >&2; }

# A free TCP port for the c10d store (bind port 0 and read it back).
free_port() {
    "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

group_alive() { kill -0 -- "-$1" 2>/dev/null; }

# End the nodes: SIGTERM their groups (torchrun forwards it to the
# workers), give them 5 s, then SIGKILL what is left.  All at once, so
# teardown costs one grace period, not one per node.
stop_nodes() {
    local n i left
    for n in "$@"; do kill -TERM -- "-${PG[$n]}" 2>/dev/null; done
    for i in $(seq 50); do
        left=0
        for n in "$@"; do group_alive "${PG[$n]}" && left=1; done
        [ $left = 0 ] && break
        sleep 0.1
    done
    for n in "$@"; do group_alive "${PG[$n]}" && kill -KILL -- "-${PG[$n]}" 2>/dev/null; done
    for i in $(seq 50); do
        left=0
        for n in "$@"; do group_alive "${PG[$n]}" && left=1; done
        [ $left = 0 ] && break
        sleep 0.1
    done
    for n in "$@"; do
        group_alive "${PG[$n]}" && log "node $n: process group ${PG[$n]} survived SIGKILL"
        unset "PG[$n]"
    done
    return 0
}

stop_all() {
    [ ${#PG[@]} -gt 0 ] && stop_nodes "${!PG[@]}"
    # torch 2.x's torchrun puts each worker in a session of its own: end
    # the workers of this run (their command line names our script) too
    pkill -KILL -f -- "$SCRIPT" 2>/dev/null
    return 0
}
trap 'stop_all' EXIT
trap 'exit 130' INT TERM

# Settings of the current variant (set by set_variant).
MON=5 RDZV_CONF= GLOO=1800 PORT= RUNID= VDIR=

set_variant() {
    case "$1" in
        default)
            MON=5          # torchrun's default --monitor_interval
            RDZV_CONF=     # join 600 s, last_call 30 s, close 30 s, read 60 s
            GLOO=1800 ;;   # torch's default gloo timeout (30 min)
        tuned)
            MON=1          # poll the workers every second, not every 5
            # last_call_timeout: the wait for more nodes once min_nodes have
            # joined (30 s by default) is spent after every node loss.
            # read_timeout: c10d store operations (60 s by default).
            RDZV_CONF=last_call_timeout=1,read_timeout=10
            GLOO=10 ;;     # a hung peer fails a collective in 10 s, not 30 min
        *) echo "recovery_torchrun: unknown variant $1" >&2; exit 2 ;;
    esac
}

start_node() {
    local n=$1 ishost=false
    [ "$n" -eq 0 ] && ishost=true
    local conf=is_host=$ishost${RDZV_CONF:+,$RDZV_CONF}
    # The stamper is a bash loop, so it costs no fork per line.
    setsid bash -c '"$@" 2>&1 | while IFS= read -r l; do printf "%s %s\n" "$EPOCHREALTIME" "$l"; done' _ \
        env LOGLEVEL=INFO OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 \
        "$TORCHRUN" --nnodes=3:4 --nproc_per_node=1 --rdzv_backend=c10d \
        --rdzv_endpoint=127.0.0.1:"$PORT" --rdzv_id="$RUNID" --rdzv_conf="$conf" \
        --max_restarts=$MAX_RESTARTS --monitor_interval=$MON \
        --redirects=1 --tee=1 --log_dir="$VDIR/torchrun-logs/node$n" \
        "$SCRIPT" --node "$n" --log "$VDIR/node$n.jsonl" --gloo-timeout $GLOO \
        >> "$VDIR/agent$n.log" 2>&1 < /dev/null &
    PG[$n]=$!
    # Out of the job table: bash still reaps it, but does not print
    # "Killed" when the benchmark kills it on purpose.
    disown "$!"
    # setsid only forks when its caller leads a process group; a background
    # job of this (non-interactive) script never does, so $! is the leader.
    local pgid
    pgid=$(ps -o pgid= -p "$!" 2>/dev/null | tr -d ' ')
    if [ "$pgid" != "$!" ]; then
        log "node $n: pid $! is not its group leader (pgid '$pgid')"
        return 1
    fi
}

# Wait until the store host listens, so it is the one that binds the port.
wait_listen() {
    local i
    for i in $(seq 300); do
        (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

# wait_world NODES WORLD AFTER TIMEOUT [STEPS] [ALIVE_PIDS]: prints the time it held.
wait_world() {
    "$PY" "$SCRIPT" wait "$VDIR" --nodes "$1" --world "$2" --after "$3" --timeout "$4" \
        --steps "${5:-$RECOVER_STEPS}" ${6:+--alive "$6"}
}

start_cluster() {
    PORT=$(free_port)
    RUNID=ea-bench-$1-$$
    local t0=$EPOCHREALTIME
    start_node 0 || return 1
    wait_listen || { log "store host never listened on $PORT"; return 1; }
    local n
    for n in 1 2 3; do start_node "$n" || return 1; done
    wait_world 0,1,2,3 4 "$t0" 120 $STEADY_STEPS > /dev/null \
        || { log "$1: the 4 nodes did not train at world 4 within 120 s"; return 1; }
}

# current_worker N: pid of node N's newest worker, if it is alive.
current_worker() {
    local pid
    pid=$("$PY" - "$VDIR/node$1.jsonl" <<'EOF'
import json, sys
pid = ""
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if r["ev"] == "start":
        pid = r["pid"]
print(pid)
EOF
)
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

event() { printf '%s\n' "$1" >> "$EVENTS"; }

# Recovery deadlines: the default settings need ~50 s by design (15 s
# heartbeat expiry + 30 s last call), so give each fault well over twice that.
deadline_for() { [ "$1" = default ] && echo 150 || echo 90; }

run_variant() {
    local v=$1 dl
    set_variant "$v"
    dl=$(deadline_for "$v")
    VDIR=$OUT/$v; mkdir -p "$VDIR"
    log "$v: starting 4 nodes (monitor_interval=$MON rdzv_conf='${RDZV_CONF}' gloo=${GLOO}s)"
    if ! start_cluster "$v"; then stop_all; return 1; fi
    local i t_kill t_end t_join ok rc wpid
    for i in $(seq "$TRIALS"); do
        # node-kill: the victim's whole process group and its worker's, as a
        # host crash would (torch 2.x's torchrun starts each worker in a
        # session of its own: the group alone leaves the worker running).
        wpid=$(current_worker $VICTIM) || wpid=
        t_kill=$EPOCHREALTIME
        kill -KILL -- "-${PG[$VICTIM]}" ${wpid:+"-$wpid"} 2>/dev/null
        t_end=$(wait_world 0,1,2 3 "$t_kill" "$dl"); rc=$?
        unset "PG[$VICTIM]"
        ok=false; [ $rc -eq 0 ] && ok=true
        event "{\"type\":\"fault\",\"variant\":\"$v\",\"kind\":\"node-kill\",\"trial\":$i,\"victim\":$VICTIM,\"dead\":[$VICTIM],\"expect_world\":3,\"t_kill\":$t_kill,\"t_end\":${t_end:-$EPOCHREALTIME},\"recovered\":$ok}"
        log "$v node-kill $i: recovered=$ok"
        [ $ok = true ] || { stop_all; return 1; }
        # node-join: the killed node comes back.
        t_join=$EPOCHREALTIME
        start_node $VICTIM || { stop_all; return 1; }
        t_end=$(wait_world $VICTIM 4 "$t_join" "$dl"); rc=$?
        ok=false; [ $rc -eq 0 ] && ok=true
        event "{\"type\":\"join\",\"variant\":\"$v\",\"trial\":$i,\"node\":$VICTIM,\"old_nodes\":[0,1,2],\"expect_world\":4,\"t_join\":$t_join,\"t_end\":${t_end:-$EPOCHREALTIME},\"recovered\":$ok}"
        log "$v node-join $i: recovered=$ok"
        [ $ok = true ] || { stop_all; return 1; }
    done
    for i in $(seq "$TRIALS"); do
        wpid=$(current_worker $VICTIM) || { log "$v: node $VICTIM has no live worker"; stop_all; return 1; }
        t_kill=$EPOCHREALTIME
        kill -KILL "$wpid"
        t_end=$(wait_world $VICTIM 4 "$t_kill" "$dl"); rc=$?
        ok=false; [ $rc -eq 0 ] && ok=true
        event "{\"type\":\"fault\",\"variant\":\"$v\",\"kind\":\"worker-kill\",\"trial\":$i,\"victim\":$VICTIM,\"dead\":[],\"expect_world\":4,\"t_kill\":$t_kill,\"t_end\":${t_end:-$EPOCHREALTIME},\"recovered\":$ok}"
        log "$v worker-kill $i: recovered=$ok"
        [ $ok = true ] || { stop_all; return 1; }
    done
    if [ "$v" = tuned ] && [ "$STOREHOST" = 1 ]; then
        storehost_kill tuned
        STOREHOST=done
    fi
    stop_all
}

# The store host dies: the survivors' agents lose the rendezvous backend.
# Run once, on the running tuned cluster (it is at world 4 after the last
# worker-kill), so a failure shows within a minute and no cluster start is
# spent on it.
storehost_kill() {
    local t_kill t_end rc ok outcome wpid
    log "storehost: SIGKILL node 0 (the c10d store host)"
    wpid=$(current_worker 0) || wpid=
    t_kill=$EPOCHREALTIME
    kill -KILL -- "-${PG[0]}" ${wpid:+"-$wpid"} 2>/dev/null
    t_end=$(wait_world 1,2,3 3 "$t_kill" $STOREHOST_WAIT $RECOVER_STEPS "${PG[1]},${PG[2]},${PG[3]}"); rc=$?
    unset "PG[0]"
    case $rc in
        0) ok=true; outcome="recovered" ;;
        2) ok=false; outcome="every surviving torchrun agent exited" ;;
        *) ok=false; outcome="no step at world 3 within $STOREHOST_WAIT s" ;;
    esac
    event "{\"type\":\"fault\",\"variant\":\"storehost\",\"dir\":\"$1\",\"kind\":\"storehost-kill\",\"trial\":1,\"victim\":0,\"dead\":[0],\"expect_world\":3,\"t_kill\":$t_kill,\"t_end\":${t_end:-$EPOCHREALTIME},\"recovered\":$ok,\"outcome\":\"$outcome\"}"
    log "storehost-kill: $outcome"
}

# Without the tuned variant, the store-host kill gets a cluster of its own.
run_storehost() {
    set_variant tuned
    VDIR=$OUT/storehost; mkdir -p "$VDIR"
    log "storehost: starting 4 nodes (tuned settings)"
    if ! start_cluster storehost; then stop_all; return 1; fi
    storehost_kill storehost
    stop_all
}

TORCH_VERSION=$("$PY" -c 'import torch; print(torch.__version__)')
cat > "$OUT/meta.json" <<EOF
{"nodes":[0,1,2,3],"torch":"$TORCH_VERSION","host":"$(hostname)","date":"$(date -u +%FT%TZ)",
 "cpus":$(nproc),"loadavg":"$(cut -d' ' -f1-3 /proc/loadavg)","trials":$TRIALS,
 "settings":{
  "common":"torchrun --nnodes=3:4 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:PORT --max_restarts=$MAX_RESTARTS --redirects=1 --tee=1; node 0 --rdzv_conf=is_host=true, others is_host=false; worker: DDP(gloo) MLP 64-256-256-10, batch 32, 50 ms sleep per step",
  "default":"--monitor_interval=5, rdzv timeouts as shipped (last_call 30 s, read 60 s), gloo timeout 1800 s",
  "tuned":"--monitor_interval=1 --rdzv_conf=last_call_timeout=1,read_timeout=10, gloo timeout 10 s",
  "fixed":"rendezvous keep-alive every 5 s, node declared dead after 3 missed (15 s): hard-coded in torch 1.13 DynamicRendezvousHandler.from_backend, no torchrun flag",
  "storehost":"tuned settings, SIGKILL node 0 which hosts the c10d store (on the tuned cluster after its worker-kill trials)"}}
EOF

status=0
IFS=, read -r -a VLIST <<< "$VARIANTS"
for v in "${VLIST[@]}"; do
    run_variant "$v" || status=1
done
if [ "$STOREHOST" = 1 ]; then run_storehost || status=1; fi  # not done with "tuned"

"$PY" "$SCRIPT" analyze "$OUT" --json "$JSON" ${TSV:+--tsv "$TSV"} || status=1
echo "json: $JSON"
if [ "$KEEP" = 1 ]; then echo "logs: $OUT"; else rm -rf "$OUT"; fi
exit $status
