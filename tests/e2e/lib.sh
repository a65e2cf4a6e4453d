# tests/e2e/lib.sh — helpers for end-to-end scripts; source it, don't run it.
#
# Every agent a script starts runs in its own process group (setsid) with its
# own data dir under one mktemp dir; an EXIT trap kills every group that is
# still there and removes the dir, whatever way the script ends.  Waiting is
# always `wait_for TIMEOUT_S CMD…`, which polls every 50 ms until CMD succeeds
# or the deadline passes — never a bare sleep standing in for a condition.
#
# Agents bind 127.0.0.1:0 (a free port chosen by the kernel, so parallel runs
# cannot collide) and we read the real address from their "listen" log line.
#
#   EA_BIN   the binary (tests/run.sh sets it; default bin/elastic-agent)

set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
EA_BIN=${EA_BIN:-bin/elastic-agent}
[[ $EA_BIN == /* ]] || EA_BIN=$PWD/$EA_BIN
if [ ! -x "$EA_BIN" ]; then
  echo "FAIL: $EA_BIN is not built (run make)"
  exit 1
fi
# The project's interpreter (scripts/python.sh: the virtualenv with the pinned
# torch) for JSON checks and Python programs alike.
. scripts/python.sh
PY=$EA_PYTHON
# Short path: the admin socket path must fit sun_path (108 bytes).
EA_TMP=$(mktemp -d /tmp/ea-e2e.XXXXXX)
declare -gA AGENT_PID=() AGENT_DIR=() AGENT_ADDR=()
# Set before start_agent NAME to run it in network namespace AGENT_NS[NAME]
# (`ip netns exec`, root) bound to AGENT_BIND[NAME] (default 127.0.0.1:0).
declare -gA AGENT_NS=() AGENT_BIND=()
EA_PGIDS=()
EA_FAILED=0

ea_cleanup() {
  local p
  for p in "${EA_PGIDS[@]}"; do kill -KILL -- "-$p" 2>/dev/null; done
  for p in "${EA_PGIDS[@]}"; do wait "$p" 2>/dev/null; done
  if [ "$EA_FAILED" -ne 0 ] && [ -z "${EA_KEEP:-}" ]; then
    local f
    for f in "$EA_TMP"/*/log; do
      [ -f "$f" ] || continue
      echo "---- last lines of $f"
      tail -n 15 "$f"
    done
  fi
  if [ -n "${EA_KEEP:-}" ]; then echo "kept $EA_TMP"; else rm -rf "$EA_TMP"; fi
}
trap ea_cleanup EXIT
trap 'exit 130' INT TERM

now_ms() { date +%s%3N; }
say() { echo "[$(date +%H:%M:%S.%3N)] $*"; }
fail() {
  EA_FAILED=1
  echo "FAIL: $*"
  exit 1
}
pass() { echo "ok: $*"; }

# wait_for TIMEOUT_S CMD… — poll CMD every 50 ms until it succeeds; 1 if the
# deadline passes first.  TIMEOUT_S may be fractional.
wait_for() {
  local timeout_ms deadline
  timeout_ms=$(awk -v s="$1" 'BEGIN { printf "%d", s * 1000 }')
  shift
  deadline=$(($(now_ms) + timeout_ms))
  until "$@" >/dev/null 2>&1; do
    (($(now_ms) >= deadline)) && return 1
    sleep 0.05
  done
  return 0
}

# output_is WANT CMD ARGS… — CMD's output is WANT.  For wait_for, which runs
# it again each try: `wait_for 10 test "$(CMD)" = WANT` would expand CMD once,
# before the first try, and wait on that one value.
output_is() {
  local want=$1
  shift
  [ "$("$@" 2>/dev/null)" = "$want" ]
}
# output_is_not NOT CMD ARGS… — CMD succeeds and its output is not NOT.
output_is_not() {
  local not=$1 out
  shift
  out=$("$@" 2>/dev/null) && [ "$out" != "$not" ]
}

# start_agent NAME [run flags…] — start an agent named NAME on 127.0.0.1:0
# with data dir $EA_TMP/NAME/data and log $EA_TMP/NAME/log; wait until it
# listens and record AGENT_PID[NAME], AGENT_DIR[NAME], AGENT_ADDR[NAME].
start_agent() {
  local name=$1 dir
  shift
  dir=$EA_TMP/$name
  mkdir -p "$dir"
  # Metrics off unless the script asks (a --set in "$@" comes later and
  # wins): many agents on one host cannot all have the default port.
  local -a in_ns=()
  [ -n "${AGENT_NS[$name]:-}" ] && in_ns=(ip netns exec "${AGENT_NS[$name]}")
  setsid "${in_ns[@]}" "$EA_BIN" run --name "$name" --bind "${AGENT_BIND[$name]:-127.0.0.1:0}" \
    --data-dir "$dir/data" --set observability.metrics_listen= "$@" >"$dir/log" 2>&1 </dev/null &
  local pid=$!
  EA_PGIDS+=("$pid")
  AGENT_PID[$name]=$pid
  AGENT_DIR[$name]=$dir
  wait_for 10 grep -q ' listen .*gossip=' "$dir/log" ||
    fail "agent $name did not start listening: $(tail -n 5 "$dir/log")"
  AGENT_ADDR[$name]=$(grep -o 'gossip=[0-9.]*:[0-9]*' "$dir/log" | head -n1 | cut -d= -f2)
}

agent_log() { echo "${AGENT_DIR[$1]}/log"; }
# pid_running PID — true while PID exists and is not a zombie (an exited
# child stays a zombie until `wait` reaps it, and kill -0 still succeeds).
pid_running() {
  [ -e "/proc/$1" ] && ! grep -q '^[0-9]* (.*) Z' "/proc/$1/stat" 2>/dev/null
}
agent_alive() { pid_running "${AGENT_PID[$1]}"; }
agent_gone() { ! pid_running "${AGENT_PID[$1]}"; }

# ea_status NAME [--json] — `elastic-agent status` against NAME's data dir.
ea_status() {
  local name=$1
  shift
  "$EA_BIN" status --data-dir "${AGENT_DIR[$name]}/data" "$@"
}

# member_state OBSERVER MEMBER — MEMBER's state in OBSERVER's status table
# (empty if absent).
member_state() {
  ea_status "$1" 2>/dev/null | awk -v m="$2" '$1 == m && NF >= 7 { print $3; exit }'
}

# sees_state OBSERVER MEMBER STATE — succeeds when OBSERVER shows MEMBER as STATE.
sees_state() { [ "$(member_state "$1" "$2")" = "$3" ]; }

# sees_alive OBSERVER N — OBSERVER's status says exactly N alive.
sees_alive() { ea_status "$1" 2>/dev/null | grep -q "^members: $2 alive,"; }

# controller_of NAME — "NAME (id …)" of NAME's controller line, or empty.
controller_of() {
  ea_status "$1" 2>/dev/null | sed -n 's/^controller: \(.* (id [0-9a-f]*)\).*/\1/p'
}

# counter NAME FIELD — a numeric field of NAME's status JSON (first match).
counter() {
  ea_status "$1" --json 2>/dev/null | grep -o "\"$2\":[0-9.]*" | head -n1 | cut -d: -f2
}

# log_ts_ms LINE — the epoch milliseconds of a text log line's timestamp.
log_ts_ms() { date -d "$(echo "$1" | awk '{print $1}')" +%s%3N; }

# stop_agent NAME SIGNAL — send SIGNAL to NAME's process group.
stop_agent() { kill -"$2" -- "-${AGENT_PID[$1]}" 2>/dev/null; }

# wait_exit NAME TIMEOUT_S — wait for NAME to exit and set EXIT_RC to its
# exit status (not in a $(…) subshell: only this shell can reap it).
wait_exit() {
  EXIT_RC=
  wait_for "$2" agent_gone "$1" || return 1
  EXIT_RC=0
  wait "${AGENT_PID[$1]}" 2>/dev/null || EXIT_RC=$?
}

assert_eq() { [ "$1" = "$2" ] || fail "$3: expected '$2', got '$1'"; }
assert_le() { [ "$1" -le "$2" ] || fail "$3: $1 > $2"; }
assert_contains() { grep -q -- "$2" <<<"$1" || fail "$3: output lacks '$2': $1"; }

# ensure_cmd CMD PACKAGE — succeed when CMD is on PATH, installing the Debian
# PACKAGE through scripts/deps.sh first when it is not (apt, ~15 s); fail
# when that cannot be done (no root, no mirror).
ensure_cmd() {
  command -v "$1" >/dev/null 2>&1 && return 0
  EA_DEPS_EXTRA="$2" scripts/deps.sh >&2 || return 1
  command -v "$1" >/dev/null 2>&1
}

# start_receiver DIR — http_receiver.py on a free port of 127.0.0.1 (the
# alert webhook receiver and the fake metadata services); sets RECV_DIR and
# RECV_URL (http://127.0.0.1:PORT).  Stopped with the test.
# need_curl — skip the script (exit 77) when curl is missing and cannot be installed.
need_curl() {
  command -v curl >/dev/null 2>&1 || ensure_cmd curl curl || {
    echo "skip: curl is not installed and cannot be"
    exit 77
  }
}
start_receiver() {
  RECV_DIR=$1
  mkdir -p "$RECV_DIR"
  setsid "$PY" "$(dirname "${BASH_SOURCE[0]}")/http_receiver.py" "$RECV_DIR" >"$RECV_DIR/log" 2>&1 </dev/null &
  EA_PGIDS+=($!)
  wait_for 10 test -s "$RECV_DIR/port" || fail "the HTTP receiver did not start: $(cat "$RECV_DIR/log")"
  RECV_URL=http://127.0.0.1:$(cat "$RECV_DIR/port")
}
# posts KIND [STATUS] — the webhook bodies (POSTs to /hook) of that alert
# kind and status (default firing) the receiver got, one JSON per line.
posts() {
  "$PY" - "$RECV_DIR/posts.jsonl" "$1" "${2:-firing}" <<'EOF'
import json, sys
try:
    lines = open(sys.argv[1]).read().splitlines()
except FileNotFoundError:
    lines = []
for l in lines:
    p = json.loads(l)
    b = p["body"]
    if p["path"] == "/hook" and b["kind"] == sys.argv[2] and b["status"] == sys.argv[3]:
        print(json.dumps(b))
EOF
}
have_post() { [ -n "$(posts "$@")" ]; }

# free_port — a TCP port on 127.0.0.1 nobody listens on right now (for
# programs that cannot take port 0 and report the one they got).
free_port() {
  "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# metrics_addr NAME — HOST:PORT of NAME's /metrics listener, from its
# `listen metrics=http://…/metrics` log line (agents started with
# --set observability.metrics_listen=127.0.0.1:0 pick a free port).
metrics_addr() {
  grep -o 'listen metrics=http://[^/ ]*' "$(agent_log "$1")" | head -n1 | sed 's,.*http://,,'
}

# netns_bridge PREFIX N — N network namespaces PREFIX<pid>s1..N, each with
# eth0 on one bridge (namespace PREFIX<pid>b) and the address ip_of I in
# 198.18.NET.0/24 (a /24 of its own per run), lo up; removed at exit.  Skips
# the script (77) without root, iproute2 or nftables (the callers drop
# traffic with it), or when a namespace cannot be made.  Defines RUN, NET,
# NS_ALL; ip_of I and ns_of I below.
ip_of() { echo "198.18.$NET.$((10 + $1))"; }
ns_of() { echo "${RUN}s$1"; }
netns_down() {
  local ns
  for ns in "${NS_ALL[@]}"; do ip netns del "$ns" 2>/dev/null; done
}
netns_bridge() {
  local skipmsg="" s ns
  [ "$(id -u)" = 0 ] || skipmsg="network namespaces need root"
  [ -z "$skipmsg" ] && ! command -v ip >/dev/null 2>&1 && skipmsg="iproute2 (ip) is not installed"
  [ -z "$skipmsg" ] && ! ensure_cmd nft nftables && skipmsg="nftables is not installed and cannot be"
  if [ -n "$skipmsg" ]; then
    echo "skip: $skipmsg"
    exit 77
  fi
  RUN=$1$$
  NET=$((RANDOM % 200 + 20))
  NS_ALL=("${RUN}b")
  trap 'ea_cleanup; netns_down' EXIT
  if ! ip netns add "${RUN}b"; then
    echo "skip: cannot create a network namespace (ip netns add)"
    exit 77
  fi
  ip -n "${RUN}b" link add br0 type bridge && ip -n "${RUN}b" link set br0 up ||
    fail "bridge in ${RUN}b"
  for s in $(seq "$2"); do
    ns=$(ns_of "$s")
    NS_ALL+=("$ns")
    ip netns add "$ns" &&
      ip -n "${RUN}b" link add "p$s" type veth peer name eth0 netns "$ns" &&
      ip -n "${RUN}b" link set "p$s" master br0 up &&
      ip -n "$ns" addr add "$(ip_of "$s")/24" dev eth0 &&
      ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up ||
      fail "namespace $ns"
  done
}
