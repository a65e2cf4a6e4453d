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
# usage: bench/recovery.sh [--quick] [--trials N] [--keep] [--ours-only]
#   --quick   2 trials per fault instead of 5 (the CPU here is shared: noisy)
#   --keep    keep the node logs (their directory is printed)
#   --ours-only  skip the torchrun half (its columns show -; its last figures
#             are in bench/results/recovery-torchrun.json)
# env: EA_BINDIR (default bin) holds elastic-agent.
set -u
export LC_ALL=C

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
. "$ROOT/scripts/python.sh"
AGENT=${EA_BINDIR:-$ROOT/bin}/elastic-agent
ARGS=()
OURS_ONLY=0
while [ $# -gt 0 ]; do
    case "$1" in
        --quick|--keep) ARGS+=("$1") ;;
        --ours-only) OURS_ONLY=1 ;;
        --trials) ARGS+=("$1" "$2"); shift ;;
        -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
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

# run_ours: 4 elastic-agents on loopback (the default job, a small model so
# four workers fit two cores), per trial on a fresh cluster:
#   node-kill    SIGKILL a node that is not the controller (agent and worker
#                process groups, as a machine crash), timed from the kill to
#                (a) the controller logs it dead, (b) the controller logs the
#                world-3 generation committed, (c) the first step at world 3;
#   worker-kill  SIGKILL one survivor's worker only: its agent sees the exit
#                (a: SIGCHLD), restarts it, and the group re-forms (b, c);
#   node-join    a fresh agent starts (b: committed at world 4, c: its first
#                step), timed from its start;
# and once, after the first trial, the controller itself is killed
# (reported as "storehost-kill" for the table's last line).  Times come from
# the agents' log timestamps (ms).  Writes $TMP/ours.tsv in the torchrun
# half's format with variant "ours".
# Returns 0 when measured, 3 when skipped, anything else on failure.
run_ours() {
    echo "== elastic-agent =="
    if ! has_worker_mode; then
        echo "ours: not built yet (needs the generations/trainer milestone)"
        return 3
    fi
    local trials=5 keep=0 i
    for ((i = 0; i < ${#ARGS[@]}; i++)); do
        case ${ARGS[$i]} in
            --quick) trials=3 ;;
            --trials) trials=${ARGS[$((i + 1))]} ;;
            --keep) keep=1 ;;
        esac
    done
    local py=$EA_PYTHON
    local dir=$TMP/ours
    mkdir -p "$dir"
    local -a job=(--set train.steps=1000000000 --set train.context=8 --set train.embed_dim=16
        --set train.hidden=64 --set train.layers=1 --set distributed.global_batch=32
        --set distributed.micro_batch=16)
    declare -gA OURS_PID=() OURS_WPID=()
    ours_now() { date +%s%3N; }
    ours_cleanup() {
        local p
        for p in "${OURS_PID[@]}" "${OURS_WPID[@]}"; do kill -KILL -- "-$p" 2>/dev/null; done
        for p in "${OURS_PID[@]}"; do wait "$p" 2>/dev/null; done
        OURS_PID=() OURS_WPID=()
    }
    trap 'ours_cleanup; rm -rf "$TMP"' EXIT
    trap 'exit 130' INT TERM
    ours_wait() { # TIMEOUT_S CMD…
        local deadline=$(($(ours_now) + $1 * 1000))
        shift
        until "$@" > /dev/null 2>&1; do
            (($(ours_now) >= deadline)) && return 1
            sleep 0.05
        done
    }
    ours_js() { # NAME EXPR over its status JSON (d)
        "$AGENT" status --data-dir "$dir/$1/data" --json 2> /dev/null |
            "$py" -c 'import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))' "$2" 2> /dev/null
    }
    ours_trains() { [ "$(ours_js "$1" '"%s %d" % (d["generation"]["phase"], d["generation"]["world"])')" = "running $2" ]; }
    ours_past() { local s; s=$(ours_js "$1" 'd["generation"]["last_step"]'); [ -n "$s" ] && ((s > $2)); }
    ours_start() { # NAME [flags…]
        local n=$1
        shift
        mkdir -p "$dir/$n"
        setsid "$AGENT" run --name "$n" --bind 127.0.0.1:0 --data-dir "$dir/$n/data" "${job[@]}" "$@" \
            > "$dir/$n.log" 2>&1 < /dev/null &
        OURS_PID[$n]=$!
        ours_wait 10 grep -q ' listen .*gossip=' "$dir/$n.log"
    }
    ours_addr() { grep -o 'gossip=[0-9.]*:[0-9]*' "$dir/$1.log" | head -n1 | cut -d= -f2; }
    ours_ts() { # LOG REGEX AFTER_MS: epoch ms of the first matching line at/after AFTER_MS
        local line ts
        while IFS= read -r line; do
            ts=$(date -d "${line%% *}" +%s%3N)
            ((ts >= $3)) && { echo "$ts"; return 0; }
        done < <(grep -E "$2" "$1")
        return 1
    }
    ours_sec() { [ -n "$1" ] && awk -v ms="$1" 'BEGIN { printf "%.3f", ms / 1000 }' || echo -; }
    ours_kill_node() { # NAME: the agent and its worker, as a machine crash
        kill -KILL -- "-${OURS_PID[$1]}" "-${OURS_WPID[$1]}" 2> /dev/null
        wait "${OURS_PID[$1]}" 2> /dev/null
        unset "OURS_PID[$1]" "OURS_WPID[$1]"
    }
    ours_recovered() { # LOG WORLD AFTER_MS: the first step at WORLD after AFTER_MS
        ours_ts "$1" "recovery training (again|started) .* world=$2 " "$3"
    }
    local raw=$dir/raw.tsv
    : > "$raw"
    local t trial names ctl victim n t0 a b c s ok
    for ((trial = 1; trial <= trials; trial++)); do
        rm -rf "${dir:?}"/n*
        names=(n1 n2 n3 n4)
        ours_start n1 || { echo "ours: n1 did not start" >&2; ours_cleanup; return 1; }
        for n in n2 n3 n4; do ours_start "$n" --join "$(ours_addr n1)" || { ours_cleanup; return 1; }; done
        ok=1
        for n in "${names[@]}"; do ours_wait 60 ours_trains "$n" 4 || ok=0; done
        if [ $ok = 0 ]; then
            echo "ours: trial $trial: no generation of 4 formed" >&2
            ours_cleanup
            return 1
        fi
        for n in "${names[@]}"; do OURS_WPID[$n]=$(ours_js "$n" 'd["workers"][0]["pid"]'); done
        s=$(ours_js n1 'd["generation"]["last_step"]')
        ours_wait 30 ours_past n1 $((s + 50))
        ctl=$(ours_js n1 'd["controller"]["name"]')

        # node-kill: a node that is not the controller
        victim=n4
        [ "$ctl" = n4 ] && victim=n3
        local rest=()
        for n in "${names[@]}"; do [ "$n" != "$victim" ] && rest+=("$n"); done
        t=$(ours_now)
        ours_kill_node "$victim"
        ok=1
        for n in "${rest[@]}"; do ours_wait 60 ours_trains "$n" 3 || ok=0; done
        a=$(ours_ts "$dir/$ctl.log" "member name=$victim .*->dead" "$t")
        b=$(ours_ts "$dir/$ctl.log" 'generation committed .* world=3 ' "$t")
        c=$(ours_recovered "$dir/$ctl.log" 3 "$t")
        printf 'node-kill\t%s\t%s\t%s\t%s\n' "$ok" "$(ours_sec ${a:+$((a - t))})" \
            "$(ours_sec ${b:+$((b - t))})" "$(ours_sec ${c:+$((c - t))})" >> "$raw"
        [ $ok = 1 ] || { echo "ours: trial $trial: no recovery after the node kill" >&2; ours_cleanup; continue; }

        # worker-kill: one survivor's worker only
        n=${rest[1]}
        s=$(ours_js "$ctl" 'd["generation"]["last_step"]')
        ours_wait 30 ours_past "$ctl" $((s + 30))
        t=$(ours_now)
        kill -KILL -- "-${OURS_WPID[$n]}" 2> /dev/null
        ok=0
        ours_wait 60 ours_recovered "$dir/$ctl.log" 3 "$((t + 1))" && ok=1
        OURS_WPID[$n]=$(ours_js "$n" 'd["workers"][0]["pid"]')
        a=$(ours_ts "$dir/$n.log" 'worker 0 failure: exited' "$t")
        b=$(ours_ts "$dir/$ctl.log" 'generation committed .* world=3 ' "$((t + 1))")
        c=$(ours_recovered "$dir/$ctl.log" 3 "$((t + 1))")
        printf 'worker-kill\t%s\t%s\t%s\t%s\n' "$ok" "$(ours_sec ${a:+$((a - t))})" \
            "$(ours_sec ${b:+$((b - t))})" "$(ours_sec ${c:+$((c - t))})" >> "$raw"

        # node-join: a fresh agent, timed from its start
        t=$(ours_now)
        ours_start n5 --join "$(ours_addr "$ctl")"
        ok=0
        ours_wait 60 ours_trains n5 4 && ok=1
        OURS_WPID[n5]=$(ours_js n5 'd["workers"][0]["pid"]')
        b=$(ours_ts "$dir/n5.log" 'generation committed .* world=4 ' "$t")
        c=$(ours_recovered "$dir/n5.log" 4 "$t")
        printf 'node-join\t%s\t-\t%s\t%s\n' "$ok" "$(ours_sec ${b:+$((b - t))})" \
            "$(ours_sec ${c:+$((c - t))})" >> "$raw"

        # once: the controller itself
        if [ "$trial" = 1 ]; then
            local left=()
            for n in "${rest[@]}" n5; do [ "$n" != "$ctl" ] && left+=("$n"); done
            s=$(ours_js "${left[0]}" 'd["generation"]["last_step"]')
            ours_wait 30 ours_past "${left[0]}" $((s + 30))
            t=$(ours_now)
            ours_kill_node "$ctl"
            ok=0
            ours_wait 60 ours_trains "${left[0]}" 3 && ok=1
            a=$(ours_ts "$dir/${left[0]}.log" "member name=$ctl .*->dead" "$t")
            b=$(ours_ts "$dir/${left[0]}.log" 'generation committed .* world=3 ' "$t")
            c=$(ours_recovered "$dir/${left[0]}.log" 3 "$t")
            printf 'storehost-kill\t%s\t%s\t%s\t%s\n' "$ok" "$(ours_sec ${a:+$((a - t))})" \
                "$(ours_sec ${b:+$((b - t))})" "$(ours_sec ${c:+$((c - t))})" >> "$raw"
        fi
        if [ $keep = 1 ]; then
            mkdir -p "$dir/logs/trial$trial"
            cp "$dir"/n*.log "$dir/logs/trial$trial/"
        fi
        ours_cleanup
        echo "ours: trial $trial of $trials done"
    done
    trap 'rm -rf "$TMP"' EXIT
    if [ $keep = 1 ]; then
        local kept
        kept=$(mktemp -d /tmp/ea-recovery-ours.XXXXXX) && cp -r "$dir/logs" "$kept/" &&
            echo "ours: logs kept in $kept/logs"
    fi
    "$py" - "$raw" "$TMP/ours.tsv" << 'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    ev, ok, a, b, c = line.rstrip("\n").split("\t")
    r = rows.setdefault(ev, {"n": 0, "ok": 0, "a": [], "b": [], "c": []})
    r["n"] += 1
    r["ok"] += ok == "1"
    for k, v in (("a", a), ("b", b), ("c", c)):
        if v != "-":
            r[k].append(float(v))
def cell(xs):
    return "-" if not xs else "%.3f/%.3f" % (statistics.median(xs), max(xs))
with open(sys.argv[2], "w") as f:
    for ev, r in rows.items():
        f.write("\t".join(["ours", ev, str(r["n"]), str(r["ok"]), cell(r["a"]), cell(r["b"]), cell(r["c"])]) + "\n")
        print("ours %-14s recovered %d/%d  (a) known %s  (b) committed %s  (c) first step %s" %
              (ev, r["ok"], r["n"], cell(r["a"]), cell(r["b"]), cell(r["c"])))
PY
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
if [ "$OURS_ONLY" = 0 ]; then
    run_torchrun || status=1
    echo
fi
run_ours; rc=$?
case $rc in
    0|3) ;;
    *) status=1 ;;
esac
print_table
exit $status
