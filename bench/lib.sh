# bench/lib.sh — sourced by bench/recovery_pytorch.sh and bench/goodput.sh
# (not run): what both need around their systems — the paths, the options
# they share, the prerequisites, the output folder, process groups, the log
# readers, and how an NVRx node starts.  The caller sets BENCH (its name, for
# messages), sources this file with its own arguments still in "$@", and then:
#   bench_arg "$@"     one of the shared options (--systems, --json, --out,
#                      --keep): sets what it names and BENCH_SHIFT (how many
#                      words it took); returns 1 for any other word
#   bench_setup PREFIX the prerequisites (torch, torchrun, the agent: exit 3
#                      without them), OUT (a new /tmp/PREFIX.XXXXXX unless
#                      --out), T_BEGIN, LOAD_START and the peers' versions
#   installed SYSTEM   0 if the system's packages are in $PY; if not, says so
#                      on stderr (the bench skips it)
# env: EA_BINDIR (default bin) holds elastic-agent; EA_PYTHON / EA_VENV
# (scripts/python.sh); EA_TORCHRUN_AS_SHIPPED=1 (below).
set -u
export LC_ALL=C

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
AGENT=${EA_BINDIR:-$ROOT/bin}/elastic-agent
. "$ROOT/scripts/python.sh"
PY=$EA_PYTHON
TORCHRUN=$EA_TORCHRUN
HELPER=$HERE/recovery_pytorch.py
SCRIPT=$HERE/recovery_pytorch_ddp.py
LIBSCRIPT=$HERE/recovery_pytorch_lib.py
TFTSCRIPT=$HERE/recovery_torchft.py
NVRXSCRIPT=$HERE/recovery_nvrx.py
LIGHTHOUSE=$(dirname "$PY")/torchft_lighthouse
FT_LAUNCHER=$(dirname "$PY")/ft_launcher
ORIG_ARGS="$*"
STEP_SLEEP=0.05
OUT=
KEEP=0

bench_arg() {
    BENCH_SHIFT=2
    case "$1" in
        --systems|--json|--out) [ $# -ge 2 ] || { echo "$BENCH: $1 needs a value" >&2; exit 2; } ;;
    esac
    case "$1" in
        --systems) SYSTEMS=$2 ;;
        --json) JSON=$2 ;;
        --out) OUT=$2; KEEP=1 ;;
        --keep) KEEP=1; BENCH_SHIFT=1 ;;
        *) return 1 ;;
    esac
}

bench_setup() {
    if [ ! -x "$TORCHRUN" ] || ! "$PY" -c 'import torch.distributed' 2>/dev/null; then
        echo "$BENCH: needs $TORCHRUN and torch in $PY (scripts/deps.sh installs requirements.txt)" >&2
        exit 3
    fi
    [ -x "$AGENT" ] || { echo "$BENCH: $AGENT is not built (make)" >&2; exit 3; }
    if [ -z "$OUT" ]; then OUT=$(mktemp -d "/tmp/$1.XXXXXX"); else mkdir -p "$OUT"; fi
    T_BEGIN=$EPOCHREALTIME
    LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
    TORCH_VERSION=$("$PY" -c 'import torch; print(torch.__version__)')
    TORCHFT_VERSION=$(pkg_version torchft)
    NVRX_VERSION=$(pkg_version nvidia-resiliency-ext)
}
pkg_version() { "$PY" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$1" 2>/dev/null || echo none; }

installed() {
    case $1 in
        torchft*)
            "$PY" -c 'import torchft' 2>/dev/null && [ -x "$LIGHTHOUSE" ] && return 0
            log "$1: skipped: torchft is not installed in $PY (requirements.txt pins it: scripts/deps.sh)" ;;
        nvrx*)
            "$PY" -c 'import nvidia_resiliency_ext.inprocess, nvidia_resiliency_ext.fault_tolerance' 2>/dev/null &&
                [ -x "$FT_LAUNCHER" ] && return 0
            log "$1: skipped: nvidia-resiliency-ext (NVRx) is not installed in $PY (requirements.txt pins it: scripts/deps.sh)" ;;
        *) return 0 ;;
    esac
    return 1
}

log() { printf '[%s %s] %s\n' "$BENCH" "$(date +%T)" "$*" >&2; }

# torch 2.x's c10d rendezvous shares its TCPStore with the workers and caches
# the store's address after the first round: a node that joins later waits
# for a MASTER_ADDR the rank-0 agent never publishes again, and the round
# fails on every agent: the job is gone (torch 2.15.0, measured:
# docs/compare.md).  torch's own opt-out, TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1,
# is set for torchrun unless EA_TORCHRUN_AS_SHIPPED=1.
TR_NOSHARE=1
[ "${EA_TORCHRUN_AS_SHIPPED:-0}" = 1 ] && TR_NOSHARE=0

# ------------------------------------------------------------ process groups
declare -A PG=()     # key -> process group id (a setsid leader's pid)
WORKER_PIDS=()       # every worker pid seen (torchrun 2.x: each in a session of its own)
GROUP_ENV=()         # NAME=VALUE words start_group puts in every group's environment
group_alive() { kill -0 -- "-$1" 2>/dev/null; }
kill_group() { # KEY: SIGKILL the group (a stopped one too) and forget it
    [ -n "${PG[$1]:-}" ] || return 0
    kill -KILL -- "-${PG[$1]}" 2>/dev/null
    local i
    for i in $(seq 50); do group_alive "${PG[$1]}" || break; sleep 0.1; done
    unset "PG[$1]"
}
# start_group KEY LOG CMD…: CMD in its own session, stdout+stderr stamped
# line by line with $EPOCHREALTIME (torchrun's lines carry no time).
start_group() {
    local key=$1 lg=$2
    shift 2
    setsid bash -c '"$@" 2>&1 | while IFS= read -r l; do printf "%s %s\n" "$EPOCHREALTIME" "$l"; done' _ \
        env ${GROUP_ENV[@]+"${GROUP_ENV[@]}"} "$@" >> "$lg" 2>&1 < /dev/null &
    PG[$key]=$!
    disown "$!"
}
# signal_marked SIG TEXT: every process but this one whose environment holds
# TEXT (the workers torchrun 2.x starts in sessions of their own, NVRx's
# monitor processes, which daemonize)
signal_marked() {
    local e p
    for e in /proc/[0-9]*/environ; do
        grep -qsa -- "$2" "$e" 2>/dev/null || continue
        p=${e#/proc/}; p=${p%/environ}
        [ "$p" != $$ ] && kill -"$1" "$p" 2>/dev/null
    done
    return 0
}

kill_workers() { # only pids still running a bench script (a pid may be reused)
    local p
    for p in ${WORKER_PIDS[@]+"${WORKER_PIDS[@]}"}; do
        grep -qsE 'recovery_(pytorch_(ddp|lib)|torchft|nvrx)' "/proc/$p/cmdline" && kill -KILL -- "-$p" "$p" 2>/dev/null
    done
    WORKER_PIDS=()
}
# bench_cleanup MARK: every group, every worker seen, and every process
# whose environment holds EA_BENCH_RUN=MARK (GROUP_ENV puts it there): torch
# 2.x's torchrun starts each worker in a session of its own, NVRx's wrapper
# daemonizes a monitor process, both outlive their groups
bench_cleanup() {
    local k
    for k in "${!PG[@]}"; do kill -KILL -- "-${PG[$k]}" 2>/dev/null; done
    for k in "${!PG[@]}"; do kill_group "$k"; done
    kill_workers
    signal_marked KILL "EA_BENCH_RUN=$1"
}

# wait_world LOGS WORLD AFTER TIMEOUT [--any-process] → prints the time it held
wait_world() { "$PY" "$HELPER" wait --logs "$1" --world "$2" --after "$3" --timeout "$4" ${5:+"$5"}; }
newest_pid() { "$PY" "$HELPER" pid "$1"; }
join_by() { local IFS=,; echo "$*"; }
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# ------------------------------------------------------------------- NVRx
# nvrx_start KEY LOG NODE PORT RUNID VARIANT CKPT: one node as NVRx's
# in-job + in-process example starts one (examples/fault_tolerance/
# run_inprocess_injob_example.sh, v0.4.1): ft_launcher (c10d rendezvous,
# --ft-restart-policy=min-healthy, which its docs require with in-process
# restart; the example's workaround --ft-enable-nic-monitor=False) running
# bench/recovery_nvrx.py (inprocess.Wrapper).  min 3 of 4 nodes, as
# torchrun's --nnodes=3:4.  VARIANT default: the example's
# --monitor-interval=5, the rendezvous and FT heartbeat timeouts as shipped;
# tuned: the knobs tuned torchrun gets (--monitor-interval=1,
# last_call_timeout=1) and the script's --tuned; injob: NVRx's in-job restart
# alone — ft_launcher's default policy (any-failed: every worker restarted at
# any failure, a joining node admitted), the wrapper disabled
# (--no-inprocess), the knobs of tuned and the gloo timeout of torchrun's
# script (10 s).  Every process of the node (ft_launcher, its rank
# monitor server, the worker, the wrapper's monitor process, which
# daemonizes out of the group) carries EA_NVRX_NODE=NVRX_MARK[KEY].
declare -A NVRX_MARK=()
nvrx_start() {
    local host=0 mon=5 conf= policy=min-healthy args=()
    [ "$3" = 0 ] && host=1
    case $6 in
        tuned) mon=1 conf=,last_call_timeout=1 args=(--tuned) ;;
        injob) mon=1 conf=,last_call_timeout=1 policy=any-failed args=(--no-inprocess) ;;
    esac
    NVRX_MARK[$1]="$2@$EPOCHREALTIME"
    start_group "$1" "$2" EA_NVRX_NODE="${NVRX_MARK[$1]}" OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 \
        "$FT_LAUNCHER" --nnodes=3:4 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:"$4" \
        --rdzv_id="$5" --rdzv-conf="is_host=$host$conf" --max-restarts=100 --monitor-interval=$mon \
        --ft-restart-policy=$policy --ft-enable-nic-monitor=False \
        --log-dir="$(dirname "$2")/ft-logs/node$3-$EPOCHREALTIME" \
        "$NVRXSCRIPT" --steps 100000000 --step-sleep "$STEP_SLEEP" --ckpt "$7" ${args[@]+"${args[@]}"}
}
# nvrx_signal KEY SIG: the node as a host crash or freeze hits it — its
# group, its worker's session and the wrapper's monitor process
nvrx_signal() {
    local w
    w=$(newest_pid "$(nvrx_log "$1")") && WORKER_PIDS+=("$w")
    [ -n "${PG[$1]:-}" ] && kill -"$2" -- "-${PG[$1]}" 2>/dev/null
    [ -n "${NVRX_MARK[$1]:-}" ] && signal_marked "$2" "EA_NVRX_NODE=${NVRX_MARK[$1]}"
    return 0
}
nvrx_log() { echo "${NVRX_MARK[$1]%@*}"; }
