#!/usr/bin/env bash
# bench/goodput.sh — goodput under spot churn: how much of the wall clock
# turns into training that is kept, for torchrun (default, tuned),
# elastic-agent restart mode, elastic-agent in place, TorchFT and NVRx
# (in-process + in-job: default, tuned; in-job alone), one after another in
# one invocation, on one machine.
#
# Each system: 4 nodes on 127.0.0.1, one worker each, the model, data,
# optimizer and 50 ms step sleep of bench/recovery_pytorch.sh (torchrun and
# restart mode: bench/recovery_pytorch_ddp.py, the unchanged torchrun script
# with timestamps and its own checkpoint every 5 steps; in place:
# bench/recovery_pytorch_lib.py; TorchFT: bench/recovery_torchft.py; NVRx:
# bench/recovery_nvrx.py under ft_launcher, bench/lib.sh's nvrx_start), each
# system configured as in bench/recovery_pytorch.sh.  Per system:
#   1. start the 4 nodes, wait until all 4 step at world 4;
#   2. the baseline: --baseline seconds with no failure (its steps/s);
#   3. the churn: a run of T seconds in which, every --interval seconds
#      (the first at interval/2), a node other than the special one (torchrun:
#      node 0, the c10d store's host; elastic-agent: the controller's node;
#      TorchFT: node 0, the Lighthouse's host; NVRx: node 0, the stores'
#      host) is SIGKILLed — its agent / torchrun / ft_launcher and its
#      worker's session (and NVRx's monitor process), a host crash — and
#      started again --rejoin seconds later (a fresh node name for
#      elastic-agent, the same node index / replica group for the others;
#      NVRx admits it only at its next in-job restart).  Which node:
#      seeded (--seed), the k-th kill picks the same position among the
#      three candidates for every system;
#   4. then at most --deadline seconds for all 4 to step at world 4 again
#      (not counted): a system that has not is "not recovered" (nvrx,
#      nvrx-tuned: all but the last victim at world 3, as min-healthy keeps it).
# A system whose package (torchft, nvidia-resiliency-ext) is not in the
# virtualenv is skipped with a line that says so.
# Goodput = steps kept in the final model per second of the churn ÷ the
# same system's baseline steps per second.  Also: steps computed and thrown
# away per failure (rolled back to a checkpoint, or not committed), seconds
# lost per failure, the longest pause in training after each kill, the
# final loss.  A table on stdout, JSON (--json), and a PNG (--png) of kept
# steps against time for every system on one chart (written by
# bench/goodput.py without matplotlib: the project's virtualenv has none).
#
# A benchmark: it reports, never asserts timings.  Every node is its own
# session, SIGKILLed at the end with the workers torchrun started in
# sessions of their own; every wait has a deadline.
#
# usage: bench/goodput.sh [--minutes M | --quick | --seconds S] [--interval S]
#            [--rejoin S] [--baseline S] [--seed N] [--systems LIST]
#            [--deadline S] [--json PATH] [--png PATH] [--out DIR] [--keep]
#   --minutes M   churn per system (default 10); --quick: 3; --seconds S
#   --interval S  a kill every S seconds (default 60), the first at S/2
#   --rejoin S    the killed node starts again S seconds later (default 20)
#   --baseline S  failure-free seconds measured first (default 60; --quick 30)
#   --systems     comma list of torchrun-default,torchrun-tuned,ours,
#                 ours-inplace,torchft,torchft-tuned,nvrx,nvrx-tuned,
#                 nvrx-injob (default: all)
#   --parallel    run the systems at the same time, not one after another
#                 (the smoke test's way to stay short; the figures are then
#                 those of 24 processes on the machine's cores: not a
#                 measurement)
# env: EA_BINDIR (default bin) holds elastic-agent.
BENCH=goodput
. "$(dirname "$0")/lib.sh"
ANALYZE=$HERE/goodput.py
CHURN=600
INTERVAL=60
REJOIN=20
BASELINE=60
SEED=1
DEADLINE=180
ALL_SYSTEMS=torchrun-default,torchrun-tuned,ours,ours-inplace,torchft,torchft-tuned,nvrx,nvrx-tuned,nvrx-injob
SYSTEMS=$ALL_SYSTEMS
JSON=$HERE/results/goodput.json
PNG=$HERE/results/goodput.png
BASELINE_SET=0
PARALLEL=0
while [ $# -gt 0 ]; do
    case "$1" in
        --minutes) CHURN=$(($2 * 60)); shift ;;
        --quick) CHURN=180; [ $BASELINE_SET = 1 ] || BASELINE=30 ;;
        --seconds) CHURN=$2; shift ;;
        --interval) INTERVAL=$2; shift ;;
        --rejoin) REJOIN=$2; shift ;;
        --baseline) BASELINE=$2; BASELINE_SET=1; shift ;;
        --seed) SEED=$2; shift ;;
        --deadline) DEADLINE=$2; shift ;;
        --png) PNG=$2; shift ;;
        --parallel) PARALLEL=1 ;;
        -h|--help) sed -n '2,/^BENCH=/p' "$0" | sed '$d'; exit 0 ;;
        *) bench_arg "$@" || { echo "goodput: unknown argument $1" >&2; exit 2; }
           shift $((BENCH_SHIFT - 1)) ;;
    esac
    shift
done
bench_setup ea-goodput
RUNS=$OUT/runs.jsonl
: > "$RUNS"

# The schedule, the same for every system: kill k at START + (k + 1/2) ×
# INTERVAL, the node at position PICK[k] (0..2) among the three candidates.
RANDOM=$SEED
PICKS=()
NKILLS=0
while awk -v k=$NKILLS -v i="$INTERVAL" -v r="$REJOIN" -v c="$CHURN" 'BEGIN { exit !((k + 0.5) * i + r < c) }'; do
    PICKS+=($((RANDOM % 3)))
    NKILLS=$((NKILLS + 1))
done
log "schedule: $NKILLS kills (every $INTERVAL s from $((INTERVAL / 2)) s, back after $REJOIN s), positions ${PICKS[*]:-none}; churn $CHURN s, baseline $BASELINE s"

# ------------------------------------------------------------ process groups
cleanup() { bench_cleanup "$MARK"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

sleep_until() { local d; d=$(awk -v t="$1" -v n="$EPOCHREALTIME" 'BEGIN { d = t - n; if (d < 0) d = 0; printf "%.3f", d }'); sleep "$d"; }

# ------------------------------------------------------------ the systems
# Each system provides: sys_start (4 nodes), sys_nodes (the node keys, slot
# order), sys_special (the key never killed), sys_kill KEY, sys_rejoin KEY,
# sys_logs (the current logs of the 4 slots, comma-joined).
SYS=
D=
declare -A LOGOF=()   # slot key -> its current log
SLOTS=()              # slot keys in order
TR_PORT='' TR_RUNID='' TR_MON='' TR_CONF='' TFT_PORT='' TFT_TUNED=0 OURS_SEED='' OURS_LIB=0 OURS_NEXT=5

tr_start() { # SLOT
    local n=${1#s} ishost=false
    [ "$n" -eq 0 ] && ishost=true
    LOGOF[$1]=$D/node$n.log
    start_group "$1" "$D/node$n.log" env LOGLEVEL=INFO TORCH_DISABLE_SHARE_RDZV_TCP_STORE="$TR_NOSHARE" "$TORCHRUN" --nnodes=3:4 --nproc_per_node=1 --rdzv_backend=c10d \
        --rdzv_endpoint=127.0.0.1:"$TR_PORT" --rdzv_id="$TR_RUNID" --rdzv_conf="is_host=$ishost${TR_CONF:+,$TR_CONF}" \
        --max_restarts=100 --monitor_interval="$TR_MON" --redirects=1 --tee=1 \
        --log_dir="$D/torchrun-logs/node$n-$EPOCHREALTIME" \
        "$SCRIPT" --steps 100000000 --save-every 5 --step-sleep $STEP_SLEEP --ckpt "$D/ck" --gloo-timeout 10
}
tft_start() { # SLOT
    local n=${1#s} tuned=
    [ "$TFT_TUNED" = 1 ] && tuned=--tuned
    LOGOF[$1]=$D/node$n.log
    start_group "$1" "$D/node$n.log" env REPLICA_GROUP_ID="$n" TORCHFT_LIGHTHOUSE="http://127.0.0.1:$TFT_PORT" \
        "$TORCHRUN" --nnodes=1 --nproc_per_node=1 --standalone --max_restarts=100 \
        --redirects=1 --tee=1 --log_dir="$D/torchrun-logs/node$n-$EPOCHREALTIME" \
        "$TFTSCRIPT" --steps 100000000 --step-sleep $STEP_SLEEP --min-replicas 3 $tuned
}
ours_start() { # SLOT: a fresh node name each time
    local name=n$OURS_NEXT prog s
    OURS_NEXT=$((OURS_NEXT + 1))
    if [ -n "$OURS_SEED" ]; then # a joiner: any live node is its seed (the first may be gone)
        for s in "${SLOTS[@]}"; do
            [ "$s" != "$1" ] && [ -n "${PG[$s]:-}" ] && group_alive "${PG[$s]}" || continue
            OURS_SEED=$(grep -o 'gossip=[0-9.]*:[0-9]*' "${LOGOF[$s]}" | head -n1 | cut -d= -f2)
            [ -n "$OURS_SEED" ] && break
        done
    fi
    mkdir -p "$D/$name"
    if [ "$OURS_LIB" = 1 ]; then
        prog=(--set compute.protocol=library --set checkpoint.dir="$D/ck"
            -- "$PY" "$LIBSCRIPT" --steps 100000000 --step-sleep "$STEP_SLEEP")
    else
        prog=(-- "$PY" "$SCRIPT" --steps 100000000 --save-every 5 --step-sleep "$STEP_SLEEP" --ckpt "$D/ck")
    fi
    LOGOF[$1]=$D/$name.log
    NAMEOF[$1]=$name
    start_group "$1" "$D/$name.log" "$AGENT" run --name "$name" --bind 127.0.0.1:0 \
        --data-dir "$D/$name/data" ${OURS_SEED:+--join "$OURS_SEED"} \
        --set compute.min_nodes=3 --set compute.max_nodes=4 --set runtime.max_restarts=100 "${prog[@]}"
    for _ in $(seq 100); do grep -qs ' listen .*gossip=' "$D/$name.log" && break; sleep 0.1; done
    if [ -z "$OURS_SEED" ]; then
        OURS_SEED=$(grep -o 'gossip=[0-9.]*:[0-9]*' "$D/$name.log" | head -n1 | cut -d= -f2)
    fi
}
declare -A NAMEOF=()
ours_controller() { # → the controller's name as a running node sees it
    local s
    for s in "${SLOTS[@]}"; do
        group_alive "${PG[$s]:-0}" || continue
        "$AGENT" status --data-dir "$D/${NAMEOF[$s]}/data" --json 2>/dev/null |
            "$PY" -c 'import json,sys; print(json.load(sys.stdin)["controller"]["name"])' 2>/dev/null && return 0
    done
    return 1
}

sys_start() {
    local s
    SLOTS=(s0 s1 s2 s3)
    case $SYS in
        torchrun-*)
            TR_PORT=$(free_port) TR_RUNID=gp-$SYS-$$
            if [ "$SYS" = torchrun-default ]; then TR_MON=5 TR_CONF=; else TR_MON=1 TR_CONF=last_call_timeout=1,read_timeout=10; fi
            tr_start s0
            for s in $(seq 300); do (exec 3<>"/dev/tcp/127.0.0.1/$TR_PORT") 2>/dev/null && break; sleep 0.1; done
            for s in s1 s2 s3; do tr_start $s; done ;;
        torchft*)
            TFT_PORT=$(free_port) TFT_TUNED=0
            local lh=(--min_replicas 3 --bind "127.0.0.1:$TFT_PORT")
            if [ "$SYS" = torchft-tuned ]; then
                TFT_TUNED=1
                lh+=(--quorum_tick_ms 100 --join_timeout_ms 10000 --heartbeat_timeout_ms 1000)
            fi
            start_group lh "$D/lighthouse.log" env RUST_BACKTRACE=1 "$LIGHTHOUSE" "${lh[@]}"
            for s in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$TFT_PORT") 2>/dev/null && break; sleep 0.1; done
            for s in s0 s1 s2 s3; do tft_start $s; done ;;
        ours|ours-inplace)
            OURS_SEED='' OURS_NEXT=1 OURS_LIB=0
            [ "$SYS" = ours-inplace ] && OURS_LIB=1
            for s in s0 s1 s2 s3; do ours_start $s; done ;;
        nvrx*)
            NV_PORT=$(free_port) NV_VARIANT=${SYS#nvrx-}
            [ "$SYS" = nvrx ] && NV_VARIANT=default
            nv_start s0
            for s in $(seq 300); do (exec 3<>"/dev/tcp/127.0.0.1/$NV_PORT") 2>/dev/null && break; sleep 0.1; done
            for s in s1 s2 s3; do nv_start $s; done ;;
    esac
}
# NVRx (bench/lib.sh: nvrx_start): a rejoining node is started the same
# way; with in-process restart (nvrx, nvrx-tuned) min-healthy admits it only
# at the next in-job restart (when fewer than 3 nodes are left healthy), so
# after a kill training goes on at world 3: their "recovered" is all but the
# last victim stepping at world 3 (world_back), where the others' (and
# nvrx-injob's, any-failed: a joiner restarts every worker) is all 4 at 4.
NV_PORT='' NV_VARIANT=default
nv_start() { # SLOT
    LOGOF[$1]=$D/node${1#s}.log
    nvrx_start "$1" "${LOGOF[$1]}" "${1#s}" "$NV_PORT" "gp-$SYS-$$" "$NV_VARIANT" "$D/ck"
}
world_back() { case $SYS in nvrx|nvrx-tuned) echo 3 ;; *) echo 4 ;; esac; }
sys_logs() { local s out=(); for s in "${SLOTS[@]}"; do out+=("${LOGOF[$s]}"); done; join_by "${out[@]}"; }
sys_candidates() { # the slots that may be killed (all but the special one)
    local s ctl=
    case $SYS in
        ours|ours-inplace)
            ctl=$(ours_controller) || ctl=
            for s in "${SLOTS[@]}"; do [ "${NAMEOF[$s]}" != "$ctl" ] && echo "$s"; done | head -n 3 ;;
        *) echo s1; echo s2; echo s3 ;;
    esac
}
sys_kill() { # SLOT: the node's session and its worker's (a host crash)
    local w
    w=$(newest_pid "${LOGOF[$1]}") || w=
    [ -n "$w" ] && WORKER_PIDS+=("$w")
    kill -KILL -- "-${PG[$1]}" ${w:+"-$w"} 2>/dev/null
    case $SYS in nvrx*) nvrx_signal "$1" KILL ;; esac   # and the wrapper's monitor process
    kill_group "$1"
}
sys_rejoin() { # SLOT
    case $SYS in
        torchrun-*) tr_start "$1" ;;
        torchft*) tft_start "$1" ;;
        ours|ours-inplace) ours_start "$1" ;;
        nvrx*) nv_start "$1" ;;
    esac
}

MARK=$OUT
run_system() {
    SYS=$1 D=$OUT/$1 MARK=$OUT/$1/
    GROUP_ENV=(EA_BENCH_RUN="$MARK" OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1)
    mkdir -p "$D"
    LOGOF=() NAMEOF=()
    local t0 tb0 tb1 tc0 tc1 k tk victim cands rec=true tend kills=() backs=() all_logs wb s last=
    wb=$(world_back)
    log "$SYS: starting 4 nodes"
    t0=$EPOCHREALTIME
    sys_start
    if ! wait_world "$(sys_logs)" 4 "$t0" 180 > /dev/null; then
        log "$SYS: no world 4 within 180 s"
        printf '{"system":"%s","started":false}\n' "$SYS" >> "$RUNS"
        return 1
    fi
    tb0=$EPOCHREALTIME
    log "$SYS: world 4; baseline $BASELINE s"
    sleep "$BASELINE"
    tb1=$EPOCHREALTIME
    tc0=$tb1
    log "$SYS: churn $CHURN s"
    for ((k = 0; k < NKILLS; k++)); do
        tk=$(awk -v a="$tc0" -v k=$k -v i="$INTERVAL" 'BEGIN { printf "%.6f", a + (k + 0.5) * i }')
        sleep_until "$tk"
        mapfile -t cands < <(sys_candidates)
        victim=${cands[${PICKS[$k]}]:-${cands[0]}}
        kills+=("$EPOCHREALTIME")
        log "$SYS: kill $((k + 1))/$NKILLS: $victim (${NAMEOF[$victim]:-node${victim#s}})"
        sys_kill "$victim"
        last=$victim
        sleep_until "$(awk -v a="${kills[-1]}" -v r="$REJOIN" 'BEGIN { printf "%.6f", a + r }')"
        backs+=("$EPOCHREALTIME")
        sys_rejoin "$victim"
    done
    sleep_until "$(awk -v a="$tc0" -v c="$CHURN" 'BEGIN { printf "%.6f", a + c }')"
    tc1=$EPOCHREALTIME
    # recovered: all 4 step at world 4 after the last kill (not counted);
    # nvrx, nvrx-tuned: all but the last victim step at world 3, in a
    # process begun before the kill or after (the last kill may have hit a
    # node that was waiting to be admitted: training did not stop)
    tend=null
    if [ $NKILLS -gt 0 ]; then
        local wl=() any=
        [ "$wb" = 4 ] || any=--any-process
        for s in "${SLOTS[@]}"; do [ "$wb" = 4 ] || [ "$s" != "$last" ] && wl+=("${LOGOF[$s]}"); done
        tend=$(wait_world "$(join_by "${wl[@]}")" "$wb" "${kills[-1]}" "$DEADLINE" $any) || { rec=false; tend=null; }
    fi
    log "$SYS: churn over; recovered after the last kill: $rec"
    local f nl=()
    for f in "$D"/*.log; do [ "${f##*/}" = lighthouse.log ] || nl+=("$f"); done
    all_logs=$(join_by "${nl[@]}")
    local kj bj lj
    kj=$(printf '%s,' "${kills[@]:-}"); kj=${kj%,}
    bj=$(printf '%s,' "${backs[@]:-}"); bj=${bj%,}
    lj=$(printf '"%s",' ${all_logs//,/ }); lj=${lj%,}
    printf '{"system":"%s","started":true,"t_start":%s,"baseline":[%s,%s],"churn":[%s,%s],"kills":[%s],"rejoins":[%s],"recovered_end":%s,"t_recovered":%s,"world_back":%s,"logs":[%s]}\n' \
        "$SYS" "$t0" "$tb0" "$tb1" "$tc0" "$tc1" "$kj" "$bj" "$rec" "$tend" "$wb" "$lj" >> "$RUNS"
}

status=0
IFS=, read -r -a WANT <<< "$SYSTEMS"
SLIST=()
for s in "${WANT[@]}"; do
    [[ ",$ALL_SYSTEMS," == *",$s,"* ]] || { echo "goodput: unknown system $s" >&2; exit 2; }
    installed "$s" && SLIST+=("$s")
done
if [ "$PARALLEL" = 1 ]; then
    pids=()
    for s in "${SLIST[@]}"; do
        ( trap cleanup EXIT; run_system "$s" ) &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || status=1; done
    MARK=$OUT
    cleanup
else
    for s in "${SLIST[@]}"; do
        run_system "$s" || status=1
        cleanup
    done
fi
WALL=$(awk -v a="$T_BEGIN" -v b="$EPOCHREALTIME" 'BEGIN { printf "%d", b - a }')
cat > "$OUT/meta.json" <<EOF
{"torch":"$TORCH_VERSION","torchft":"$TORCHFT_VERSION","nvrx":"$NVRX_VERSION","host":"$(hostname)","date":"$(date -u +%FT%TZ)","cpus":$(nproc),
 "loadavg_start":"$LOAD_START","loadavg_end":"$(cut -d' ' -f1-3 /proc/loadavg)","wall_s":$WALL,
 "command":"bench/goodput.sh${ORIG_ARGS:+ $ORIG_ARGS}","churn_s":$CHURN,"interval_s":$INTERVAL,"rejoin_s":$REJOIN,
 "baseline_s":$BASELINE,"seed":$SEED,"kills":$NKILLS,"picks":[$(IFS=,; echo "${PICKS[*]:-}")],
 "settings":"as bench/recovery_pytorch.sh: torchrun --nnodes=3:4 c10d (default: monitor_interval 5, rendezvous as shipped; tuned: monitor_interval 1, last_call_timeout 1, read_timeout 10; script --gloo-timeout 10, checkpoint every 5 steps); elastic-agent min_nodes 3 max_nodes 4 (restart mode: the same script; in place: recovery_pytorch_lib.py, compute.protocol=library); torchft $TORCHFT_VERSION: recovery_torchft.py, Manager(min_replica_size=3), torchft_lighthouse --min_replicas 3 as shipped (tuned: --quorum_tick_ms 100 --join_timeout_ms 10000 --heartbeat_timeout_ms 1000, ProcessGroupGloo 5 s, Manager 30 s); nvrx $NVRX_VERSION: recovery_nvrx.py (inprocess.Wrapper, checkpoint every 5 steps) under ft_launcher --nnodes=3:4 --ft-restart-policy=min-healthy (NVRx's in-job + in-process example; wrapper timeouts as shipped, gloo 10 s, --monitor-interval=5; tuned: soft 5 / hard 8 / heartbeat 3 s, gloo 3 s, --monitor-interval=1, last_call_timeout=1); a kill also kills the wrapper's monitor process; a rejoining node is admitted only at the next in-job restart; nvrx-injob: ft_launcher --ft-restart-policy=any-failed (its default), the wrapper disabled, --monitor-interval=1, last_call_timeout=1, gloo 10 s"}
EOF
mkdir -p "$(dirname "$JSON")" "$(dirname "$PNG")"
"$PY" "$ANALYZE" "$OUT" --json "$JSON" --png "$PNG" || status=1
echo "json: $JSON"
echo "png: $PNG"
if [ "$KEEP" = 1 ]; then echo "logs: $OUT"; else rm -rf "$OUT"; fi
exit $status
