#!/usr/bin/env bash
# `make demo`: three elastic-agents on this machine (127.0.0.1) form a
# cluster through one seed, one of them crashes and is declared dead by the
# other two, then the rest leave gracefully.  Everything the demo starts is
# stopped at the end, whatever happens; logs stay in demo-run/ to read.
#
#   EA_BIN=path/to/elastic-agent scripts/demo.sh     (default bin/elastic-agent)
set -u
cd "$(dirname "$0")/.."
EA_BIN=${EA_BIN:-bin/elastic-agent}
[[ $EA_BIN == /* ]] || EA_BIN=$PWD/$EA_BIN
[ -x "$EA_BIN" ] || { echo "demo: $EA_BIN is not built; run 'make' first" >&2; exit 1; }

DEMO=${EA_DEMO_DIR:-$PWD/demo-run}
# The admin socket path must fit in 108 bytes; fall back to /tmp if not.
if [ ${#DEMO} -gt 80 ]; then DEMO=$(mktemp -d /tmp/ea-demo.XXXXXX); fi
rm -rf "$DEMO"
mkdir -p "$DEMO"
declare -A PID=()

cleanup() {
  local n
  for n in "${!PID[@]}"; do kill -KILL -- "-${PID[$n]}" 2>/dev/null; done
  for n in "${!PID[@]}"; do wait "${PID[$n]}" 2>/dev/null; done
  rm -rf "$DEMO"/*/data
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -t 1 ]; then
  bold() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
else
  bold() { printf '\n== %s\n' "$*"; }
fi
now_ms() { date +%s%3N; }
# wait_for TIMEOUT_S CMD… : poll every 50 ms until CMD succeeds or time is up.
wait_for() {
  local deadline=$(($(now_ms) + $1 * 1000))
  shift
  until "$@" >/dev/null 2>&1; do
    (($(now_ms) >= deadline)) && return 1
    sleep 0.05
  done
}
status() { "$EA_BIN" status --data-dir "$DEMO/$1/data" "${@:2}"; }
sees_alive() { status "$1" 2>/dev/null | grep -q "^members: $2 alive,"; }
sees_state() { status "$1" 2>/dev/null | awk -v m="$2" -v s="$3" '$1 == m && $3 == s { f = 1 } END { exit !f }'; }
running() { [ -e "/proc/$1" ] && ! grep -q '^[0-9]* (.*) Z' "/proc/$1/stat" 2>/dev/null; }
die() { echo "demo: $*" >&2; for f in "$DEMO"/*.log; do echo "--- $f"; tail -n 5 "$f"; done; exit 1; }

start() { # start NAME [flags…]
  local name=$1
  shift
  mkdir -p "$DEMO/$name"
  echo "  \$ elastic-agent run --name $name --bind 127.0.0.1:0 --data-dir demo-run/$name/data $*"
  setsid "$EA_BIN" run --name "$name" --bind 127.0.0.1:0 --data-dir "$DEMO/$name/data" "$@" \
    >"$DEMO/$name.log" 2>&1 </dev/null &
  PID[$name]=$!
  wait_for 10 grep -q ' listen .*gossip=' "$DEMO/$name.log" || die "$name did not start"
}
addr_of() { grep -o 'gossip=[0-9.]*:[0-9]*' "$DEMO/$1.log" | head -n1 | cut -d= -f2; }

bold "elastic-agent $("$EA_BIN" version | cut -d' ' -f2): a 3-agent cluster on 127.0.0.1"
echo "Each agent gossips over UDP and exchanges full state over TCP on one port"
echo "(127.0.0.1:0 = a free port picked at start). Agent 1 is the seed; 2 and 3 join it."
echo "(No --key-file here, so each agent warns once that gossip is unauthenticated.)"
start n1
seed=$(addr_of n1)
start n2 --join "$seed"
start n3 --join "$seed"
t0=$(now_ms)
for n in n1 n2 n3; do wait_for 10 sees_alive "$n" 3 || die "$n does not see 3 alive"; done
echo "All three see 3 alive members $(($(now_ms) - t0)) ms after the last start."

bold "elastic-agent status --data-dir demo-run/n2/data"
status n2

victim=n3
bold "Crash: kill -9 $victim (no goodbye; the others must notice)"
t_kill=$(now_ms)
kill -KILL -- "-${PID[$victim]}"
wait "${PID[$victim]}" 2>/dev/null
unset "PID[$victim]"
for n in n1 n2; do wait_for 15 sees_state "$n" "$victim" dead || die "$n never saw $victim dead"; done
echo "n1 and n2 both show $victim dead $(($(now_ms) - t_kill)) ms after the kill"
echo "(probe every 200 ms, ping-req through others, then a suspicion timeout; see docs/membership.md)."
echo
grep -h "member name=$victim .*->\(suspect\|dead\)" "$DEMO/n1.log" "$DEMO/n2.log" | sed 's/^/  /'

bold "elastic-agent status --data-dir demo-run/n1/data"
status n1

bold "Graceful stop: SIGTERM n2, then n1"
kill -TERM -- "-${PID[n2]}"
wait_for 5 sees_state n1 n2 left || die "n1 does not show n2 as left"
wait_for 5 bash -c "! [ -e /proc/${PID[n2]} ] || grep -q '^[0-9]* (.*) Z' /proc/${PID[n2]}/stat" || die "n2 did not exit"
rc=0
wait "${PID[n2]}" || rc=$?
unset "PID[n2]"
echo "n2 exited with status $rc; n1 shows it as 'left' (a graceful leave, not a failure):"
status n1 | awk '$1 == "NAME" || $1 == "n2" || $1 == "n3"'
kill -TERM -- "-${PID[n1]}"
wait_for 5 bash -c "! [ -e /proc/${PID[n1]} ] || grep -q '^[0-9]* (.*) Z' /proc/${PID[n1]}/stat" || die "n1 did not exit"
rc1=0
wait "${PID[n1]}" || rc1=$?
unset "PID[n1]"
echo "n1 exited with status $rc1."

bold "Done"
echo "Logs: $DEMO/n1.log n2.log n3.log (one line per membership change, election, join, leave)."
