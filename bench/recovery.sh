#!/usr/bin/env bash
# bench/recovery.sh — recovery after a crash: elastic-agent against torchrun,
# both measured in the same run on the same machine, one table with ratios.
#
# Each side starts 4 nodes on loopback, trains, SIGKILLs one node (not the
# one the job depends on: torchrun's c10d store host) and times, from the
# kill: (a) the failure is known (torchrun: a surviving agent logs its worker
# group FAILED; ours: the controller marks the member), (b) the new
# generation is committed (torchrun: rendezvous complete at world 3), (c) the
# first training step completed at the new world size.  Also a killed worker
# only, and a node joining a running job.  The torchrun half is
# bench/recovery_torchrun.sh; ours is run_ours below.
#
# Each half writes one tab-separated line per (variant, event):
#   variant  event  trials  recovered  detect  rdzv  step
# where detect/rdzv/step are "median/max" seconds or "-"; event is one of
# node-kill, worker-kill, node-join, storehost-kill.  This script only joins
# those lines into the table, so neither half can leak numbers into the other.
#
# usage: bench/recovery.sh [--quick] [--trials N] [--keep]
#   --quick   2 trials per fault instead of 5 (the CPU here is shared: noisy)
#   --keep    keep the node logs (their directory is printed)
# env: EA_BINDIR (default bin) holds elastic-agent.
set -u
export LC_ALL=C

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
AGENT=${EA_BINDIR:-$ROOT/bin}/elastic-agent
ARGS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --quick|--keep) ARGS+=("$1") ;;
        --trials) ARGS+=("$1" "$2"); shift ;;
        -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
        *) echo "recovery: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done

TMP=$(mktemp -d /tmp/ea-recovery.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

# ------------------------------------------------------------------ torchrun
run_torchrun() {
    echo "== torchrun (c10d rendezvous, --nnodes=3:4, gloo) =="
    "$HERE/recovery_torchrun.sh" "${ARGS[@]}" --tsv "$TMP/torchrun.tsv"
}

# ---------------------------------------------------------------------- ours
# Our half needs agents that run training workers: the agent's `worker`
# subcommand.  Until the binary has it there is nothing to measure, and
# nothing is printed in its place.
has_worker_mode() {
    [ -x "$AGENT" ] && "$AGENT" worker --help > /dev/null 2>&1
}

# run_ours: 4 elastic-agents on loopback, SIGKILL one agent's process group,
# times kill -> controller knows (a) -> new generation committed (b) ->
# first completed step (c); the same for a killed worker and a node joining.
# The scenario itself lives in bench/recovery_ours.sh (written with the
# trainer), which takes the same arguments as recovery_torchrun.sh and
# writes the same TSV lines with variant "ours".
# Returns 0 when measured, 3 when skipped, anything else on failure.
run_ours() {
    echo "== elastic-agent =="
    if ! has_worker_mode; then
        echo "ours: not built yet (needs the generations/trainer milestone)"
        return 3
    fi
    if [ ! -x "$HERE/recovery_ours.sh" ]; then
        echo "ours: $AGENT has a worker subcommand, but bench/recovery_ours.sh (the scenario) is missing" >&2
        return 1
    fi
    "$HERE/recovery_ours.sh" "${ARGS[@]}" --tsv "$TMP/ours.tsv"
}

# ---------------------------------------------------------------- the table
print_table() {
    echo
    echo "== recovery: seconds from SIGKILL (node-join: from the node's start), median (max) =="
    echo "ratio = torchrun / elastic-agent on the median: above 1 means elastic-agent is faster"
    cat "$TMP"/*.tsv 2>/dev/null | awk -F'\t' '
        function med(c) { split(c, p, "/"); return p[1] }
        function cell(c) { if (c == "" || c == "-") return "-"; split(c, p, "/"); return p[1] " (" p[2] ")" }
        function ratio(a, b) { if (a == "" || a == "-" || b == "" || b == "-" || b + 0 <= 0) return "-";
                               return sprintf("%.1fx", a / b) }
        {
            v = $1; e = $2; key = v SUBSEP e
            ok[key] = $4 "/" $3; m[key, "a"] = $5; m[key, "b"] = $6; m[key, "c"] = $7
            if (!(e in seen)) { seen[e] = 1; events[++ne] = e }
        }
        END {
            name["a"] = "(a) known"; name["b"] = "(b) committed"; name["c"] = "(c) first step"
            printf "%-15s %-15s %-16s %-16s %-16s %8s %8s\n", "event", "metric", "torchrun", "torchrun-tuned", "elastic-agent", "ratio", "r-tuned"
            for (i = 1; i <= ne; i++) {
                e = events[i]
                if (e == "storehost-kill") continue
                split("a b c", ms, " ")
                for (j = 1; j <= 3; j++) {
                    k = ms[j]
                    d = m["default", e, k]; t = m["tuned", e, k]; o = m["ours", e, k]
                    printf "%-15s %-15s %-16s %-16s %-16s %8s %8s\n", (j == 1 ? e : ""), name[k], cell(d), cell(t), cell(o),
                           ratio(med(d), med(o)), ratio(med(t), med(o))
                }
                printf "%-15s %-15s %-16s %-16s %-16s\n", "", "recovered", \
                    (("default", e) in ok ? ok["default", e] : "-"), (("tuned", e) in ok ? ok["tuned", e] : "-"), (("ours", e) in ok ? ok["ours", e] : "-")
            }
            if (("storehost", "storehost-kill") in ok)
                printf "torchrun, c10d store host killed: recovered %s (c10d cannot survive losing its store)\n", ok["storehost", "storehost-kill"]
            if (("ours", "storehost-kill") in ok)
                printf "elastic-agent, controller killed: recovered %s\n", ok["ours", "storehost-kill"]
        }'
}

status=0
run_torchrun || status=1
echo
run_ours; rc=$?
case $rc in
    0|3) ;;
    *) status=1 ;;
esac
print_table
exit $status
