#!/usr/bin/env bash
# End-to-end: /metrics, /healthz and /readyz of a 3-agent training cluster
# on 127.0.0.1, scraped by curl and by a real Prometheus.
#
#  1. n1 alone (min_nodes 2): /healthz 200, /readyz 503 naming the wait for
#     min_nodes; then n2 and n3 join, world 3, and /readyz is 200 on all;
#  2. /metrics: job and node labels, world size 3 everywhere, exactly one
#     controller, one generation number, the step moves between scrapes,
#     the formation histogram counted; `promtool check metrics` accepts the
#     page of every node (no lint warning either); the scrape latency of
#     each node is measured (SCRAPE line);
#  3. a Prometheus (Debian's package, installed when missing) scrapes the
#     three with honor_labels and loads deploy/prometheus/rules.yml; its HTTP
#     API (/api/v1/query) shows the step of each node rising and the
#     generation the agents export;
#  4. a stall: n3's worker is SIGSTOPped, so every allreduce waits (the
#     communication timeout is 60 s here); after runtime.stall_timeout_seconds
#     (4 s) n1's /readyz is 503 "stalled…", elastic_agent_training_stalled is
#     1 (in Prometheus too), status says generation.stalled, an `alert
#     stalled` line is logged and alerts_total{kind="stalled"} counts it;
#     SIGCONT: training moves, /readyz is 200 again, "stalled resolved";
#  5. SIGKILL n3 (agent and worker): n1 and n2 re-form at world 2; the
#     generation on /metrics and in Prometheus is higher than before,
#     ElasticAgentMembersLost fires in Prometheus (ALERTS), and committed
#     checkpoints show in the controller's counter;
#  6. every elastic_agent_* name used by deploy/prometheus/rules.yml and the
#     Grafana dashboard is one the agents export.
# Every process started here (agents, workers, Prometheus) is killed at the
# end by lib.sh's trap.
source "$(dirname "$0")/lib.sh"
t_start=$(now_ms)

need_curl

JOB=(--set train.steps=1000000000 --set train.context=8 --set train.embed_dim=16
  --set train.hidden=64 --set train.layers=1 --set distributed.global_batch=32
  --set distributed.micro_batch=16 --set distributed.scale_up_delay_ms=300
  --set compute.min_nodes=2 --set experiment.name=metrics-e2e
  --set observability.metrics_listen=127.0.0.1:0 --set runtime.stall_timeout_seconds=4
  --set distributed.communication_timeout_seconds=60
  --set checkpoint.dir="$EA_TMP/ckpt" --set checkpoint.save_interval_steps=200)
"$EA_BIN" keygen "$EA_TMP/cluster.key" 2>/dev/null || fail "keygen"
JOB+=(--key-file "$EA_TMP/cluster.key")
start_receiver "$EA_TMP/recv"
JOB+=(--set observability.alert_webhook="$RECV_URL/hook")

declare -A MADDR=()
# http NAME PATH — the body; HTTP_CODE gets the status (not in a subshell:
# use http_code for conditions).
http_body() { curl -s -m 5 "http://${MADDR[$1]}$2"; }
http_code() { curl -s -m 5 -o /dev/null -w '%{http_code}' "http://${MADDR[$1]}$2"; }
code_is() { [ "$(http_code "$1" "$2")" = "$3" ]; }
# mval NAME METRIC [LABEL_SUBSTRING] — the value of the first sample of
# METRIC on NAME's /metrics whose labels contain the substring.
mval() {
  http_body "$1" /metrics | awk -v m="$2" -v l="${3:-}" \
    'index($1, m "{") == 1 && index($1, l) { print $2; exit }'
}
mval_gt() { local v; v=$(mval "$1" "$2" "${4:-}"); [ -n "$v" ] && awk -v a="$v" -v b="$3" 'BEGIN { exit !(a > b) }'; }
mval_eq() { [ "$(mval "$1" "$2" "${4:-}")" = "$3" ]; }
js() {
  ea_status "$1" --json 2>/dev/null |
    "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))' "$2" 2>/dev/null
}
trains() {
  [ "$(js "$1" '"%s %d" % (d["generation"]["phase"], d["generation"]["world"])')" = "running $2" ]
}
readyz_says() { http_body "$1" /readyz | grep -q -- "$2"; }

say "1. n1 alone: alive, not ready; n2 and n3 join: ready"
start_agent n1 "${JOB[@]}"
MADDR[n1]=$(metrics_addr n1)
[ -n "${MADDR[n1]}" ] || fail "n1 logged no metrics address: $(grep listen "$(agent_log n1)")"
wait_for 10 code_is n1 /healthz 200 || fail "n1 /healthz: $(http_code n1 /healthz)"
assert_eq "$(http_body n1 /healthz)" "ok" "n1 /healthz body"
wait_for 10 readyz_says n1 "min_nodes" || fail "n1 /readyz does not name min_nodes: $(http_body n1 /readyz)"
assert_eq "$(http_code n1 /readyz)" 503 "n1 /readyz alone"
not_ready_why=$(http_body n1 /readyz)
assert_eq "$(js n1 'd["self"]["ready"]')" False "n1 status self.ready alone"
seed=${AGENT_ADDR[n1]}
start_agent n2 --join "$seed" "${JOB[@]}"
start_agent n3 --join "$seed" "${JOB[@]}"
for n in n2 n3; do MADDR[$n]=$(metrics_addr "$n"); done
for n in n1 n2 n3; do
  wait_for 30 trains "$n" 3 || fail "$n does not train at world 3: $(ea_status "$n")"
done
for n in n1 n2 n3; do
  wait_for 20 code_is "$n" /readyz 200 || fail "$n /readyz: $(http_body "$n" /readyz)"
done
pass "/readyz 503 alone ($not_ready_why), then 200 on n1 n2 n3 at world 3 ($(($(now_ms) - t_start)) ms)"

say "2. /metrics on each node"
ctrl=0 gens=()
for n in n1 n2 n3; do
  page=$(http_body "$n" /metrics)
  grep -q "^elastic_agent_world_size{job=\"metrics-e2e\",node=\"$n\"} 3$" <<<"$page" ||
    fail "$n: world size 3 with job and node labels: $(grep world_size <<<"$page")"
  grep -q "^elastic_agent_members{job=\"metrics-e2e\",node=\"$n\",state=\"alive\"} 3$" <<<"$page" ||
    fail "$n: 3 alive members: $(grep members <<<"$page")"
  c=$(awk '$1 ~ /^elastic_agent_is_controller\{/ { print $2 }' <<<"$page")
  ctrl=$((ctrl + c))
  gens+=("$(awk '$1 ~ /^elastic_agent_generation\{/ { print $2 }' <<<"$page")")
  echo "$page" >"$EA_TMP/$n.metrics"
done
for n in n1 n2 n3; do
  wait_for 20 mval_eq "$n" elastic_agent_ready 1 || fail "$n: elastic_agent_ready $(mval "$n" elastic_agent_ready)"
done
assert_eq "$ctrl" 1 "controllers among n1 n2 n3"
assert_eq "${gens[1]} ${gens[2]}" "${gens[0]} ${gens[0]}" "generation on n1 n2 n3"
gen1=${gens[0]}
((gen1 > 0)) || fail "generation $gen1"
s0=$(mval n1 elastic_agent_training_step)
wait_for 20 mval_gt n1 elastic_agent_training_step $((s0 + 20)) ||
  fail "n1's step does not move: $s0 -> $(mval n1 elastic_agent_training_step)"
wait_for 20 mval_gt n1 elastic_agent_training_steps_per_second 0 || fail "n1 steps/s stays 0"
wait_for 10 mval_gt n1 elastic_agent_formation_duration_seconds_count 0 || fail "no formation observed"
for n in n1 n2 n3; do
  if ensure_cmd promtool prometheus; then
    out=$(promtool check metrics <"$EA_TMP/$n.metrics" 2>&1) || fail "promtool check metrics on $n: $out"
    [ -z "$out" ] || fail "promtool check metrics on $n warns: $out"
  fi
done
# Scrape latency of a 3-node cluster, from outside: 30 GETs per node.
lat=()
for n in n1 n2 n3; do
  for _ in $(seq 30); do
    lat+=("$(curl -s -o /dev/null -w '%{time_total}' "http://${MADDR[$n]}/metrics")")
  done
done
bytes=$(wc -c <"$EA_TMP/n1.metrics")
stats=$(printf '%s\n' "${lat[@]}" | sort -n |
  awk '{ v[NR] = $1 * 1000 } END { printf "curl_median_ms=%.2f curl_p95_ms=%.2f curl_max_ms=%.2f", v[int(NR/2)+1], v[int(NR*0.95)], v[NR] }')
echo "SCRAPE nodes=3 requests=${#lat[@]} $stats page_bytes=$bytes"
pass "labels, one controller, generation $gen1 everywhere, step $s0 -> $(mval n1 elastic_agent_training_step), promtool accepts the pages"

say "3. Prometheus scrapes the cluster"
have_prom=1
if ! ensure_cmd prometheus prometheus || ! command -v promtool >/dev/null; then
  have_prom=0
  echo "skip: Debian's prometheus package is not installed and cannot be; the Prometheus checks (3, and the Prometheus halves of 4 and 5) are skipped"
fi
PROM=
query() { # query PROMQL — the first result's value, or empty
  curl -s -m 5 --data-urlencode "query=$1" "http://$PROM/api/v1/query" |
    "$PY" -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")' 2>/dev/null
}
q_gt() { local v; v=$(query "$1"); [ -n "$v" ] && awk -v a="$v" -v b="$2" 'BEGIN { exit !(a > b) }'; }
q_eq() { [ "$(query "$1")" = "$2" ]; }
if ((have_prom)); then
  PROM=127.0.0.1:$(free_port)
  mkdir -p "$EA_TMP/prom"
  cat >"$EA_TMP/prom/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $PWD/deploy/prometheus/rules.yml
scrape_configs:
  - job_name: elastic-agent
    honor_labels: true
    static_configs:
      - targets: ["${MADDR[n1]}", "${MADDR[n2]}", "${MADDR[n3]}"]
EOF
  setsid prometheus --config.file="$EA_TMP/prom/prometheus.yml" --storage.tsdb.path="$EA_TMP/prom/data" \
    --web.listen-address="$PROM" >"$EA_TMP/prom/log" 2>&1 </dev/null &
  EA_PGIDS+=("$!")
  wait_for 30 curl -sf "http://$PROM/-/ready" || fail "Prometheus not ready: $(tail -5 "$EA_TMP/prom/log")"
  wait_for 20 q_eq 'count(up{job="elastic-agent"} == 1)' 3 || fail "Prometheus does not scrape 3 targets: $(query 'count(up)')"
  wait_for 20 q_gt 'elastic_agent_training_step{job="metrics-e2e",node="n1"}' 0 || fail "no step in Prometheus"
  p0=$(query 'elastic_agent_training_step{job="metrics-e2e",node="n2"}')
  wait_for 20 q_gt 'elastic_agent_training_step{job="metrics-e2e",node="n2"}' "$p0" || fail "n2's step does not rise in Prometheus"
  pg1=$(query 'max(elastic_agent_generation{job="metrics-e2e"})')
  assert_eq "$pg1" "$gen1" "generation in Prometheus"
  sd=$(query 'max(scrape_duration_seconds{job="elastic-agent"}) * 1000')
  echo "SCRAPE prometheus_max_scrape_duration_ms=$(awk -v v="$sd" 'BEGIN { printf "%.2f", v }')"
  pass "Prometheus scrapes 3 targets; step $p0 -> $(query 'elastic_agent_training_step{job="metrics-e2e",node="n2"}') on n2; generation $pg1"
fi

say "4. stall: SIGSTOP n3's worker"
wpid=$(js n3 'd["workers"][0]["pid"]')
{ [ -n "$wpid" ] && [ "$wpid" != 0 ]; } || fail "no worker pid for n3"
EA_PGIDS+=("$wpid")
t_stop=$(now_ms)
kill -STOP "$wpid"
wait_for 30 code_is n1 /readyz 503 || { kill -CONT "$wpid"; fail "n1 /readyz stays $(http_code n1 /readyz) with a stopped rank"; }
why=$(http_body n1 /readyz)
assert_contains "$why" "stalled: generation" "n1 /readyz while stalled"
t_503=$(now_ms)
wait_for 5 mval_eq n1 elastic_agent_training_stalled 1 || fail "n1 stalled metric: $(mval n1 elastic_agent_training_stalled)"
wait_for 5 mval_eq n1 elastic_agent_ready 0 || fail "n1 ready metric while stalled"
mval_gt n1 elastic_agent_alerts_total 0 'kind="stalled"' || fail "alerts_total{kind=stalled} on n1: $(mval n1 elastic_agent_alerts_total 'kind="stalled"')"
# status is read after the metrics: under a loaded or sanitized build give it
# the same few seconds the metric got
status_stalled() { [ "$(js n1 'd["generation"]["stalled"]')" = True ]; }
wait_for 5 status_stalled || fail "n1 status generation.stalled: $(js n1 'd["generation"]')"
assert_eq "$(js n1 'd["counters"]["alerts"]["stalled"] >= 1')" True "n1 status counters.alerts.stalled"
grep -q ' alert stalled gen=.*no step for' "$(agent_log n1)" || fail "n1 logged no stalled alert"
if ((have_prom)); then
  wait_for 10 q_eq 'elastic_agent_training_stalled{job="metrics-e2e",node="n1"}' 1 ||
    fail "Prometheus does not see n1 stalled"
fi
kill -CONT "$wpid"
t_cont=$(now_ms)
for n in n1 n2 n3; do
  wait_for 30 code_is "$n" /readyz 200 || fail "$n /readyz after SIGCONT: $(http_body "$n" /readyz)"
done
grep -q ' alert stalled resolved after' "$(agent_log n1)" || fail "n1 logged no stalled resolved"
# ... and both reached the webhook receiver
n1_stalled() { posts stalled "$1" | grep '"node": "n1"' | head -n1; }
n1_has_stalled() { [ -n "$(n1_stalled "$1")" ]; }
wait_for 10 n1_has_stalled resolved || fail "no resolved stalled POST from n1: $(cat "$RECV_DIR/posts.jsonl" 2>/dev/null | tail -3)"
"$PY" - "$(n1_stalled firing)" "$(n1_stalled resolved)" <<'EOF' || fail "stalled bodies: $(n1_stalled firing) / $(n1_stalled resolved)"
import json, re, sys
f, r = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert f["job"] == "metrics-e2e" and f["severity"] == "critical" and f["endsAt"] is None, f
assert re.match(r"stalled gen=\S+ world=3 step=\d+: no step for [\d.]+ s \(runtime\.stall_timeout_seconds 4\)", f["summary"]), f
assert r["status"] == "resolved" and r["summary"].startswith("stalled resolved after "), r
assert r["endsAt"] >= r["startsAt"] == f["startsAt"], (f, r)
EOF
echo "STALL stop_to_503_ms=$((t_503 - t_stop)) cont_to_200_ms=$(($(now_ms) - t_cont)) stall_timeout_ms=4000"
pass "/readyz 200 -> 503 ($why) -> 200; stalled metric, status, alert line and counter"

say "5. SIGKILL n3: the generation rises, world 2"
wpid=$(js n3 'd["workers"][0]["pid"]')
kill -KILL -- "-${AGENT_PID[n3]}" "-$wpid" 2>/dev/null
for n in n1 n2; do
  wait_for 30 mval_eq "$n" elastic_agent_world_size 2 || fail "$n world size after the kill: $(mval "$n" elastic_agent_world_size)"
  wait_for 20 code_is "$n" /readyz 200 || fail "$n /readyz at world 2: $(http_body "$n" /readyz)"
done
gen2=$(mval n1 elastic_agent_generation)
((gen2 > gen1)) || fail "generation did not rise: $gen1 -> $gen2"
s2=$(mval n1 elastic_agent_training_step)
wait_for 20 mval_gt n1 elastic_agent_training_step $((s2 + 20)) || fail "n1 does not train after the kill"
if ((have_prom)); then
  wait_for 20 q_gt 'max(elastic_agent_generation{job="metrics-e2e",node="n1"})' "$gen1" ||
    fail "Prometheus: generation of n1 stays $(query 'max(elastic_agent_generation{node="n1"})')"
  wait_for 20 q_eq 'elastic_agent_world_size{job="metrics-e2e",node="n1"}' 2 || fail "Prometheus: world size"
  wait_for 30 q_eq 'count(ALERTS{alertname="ElasticAgentMembersLost",alertstate="firing",job="metrics-e2e"})' 1 ||
    fail "ElasticAgentMembersLost does not fire: $(query 'max(elastic_agent_members{state="dead"})')"
  wait_for 30 q_gt 'sum(elastic_agent_checkpoints_committed_total{job="metrics-e2e"})' 0 ||
    fail "no committed checkpoint in Prometheus"
  ck=$(query 'sum(elastic_agent_checkpoints_committed_total{job="metrics-e2e"})')
  pass "Prometheus: generation $gen1 -> $(query 'max(elastic_agent_generation{node="n1"})'), world 2, ElasticAgentMembersLost firing, $ck checkpoints committed"
fi
pass "generation $gen1 -> $gen2 on /metrics, world 2, training on"

say "6. the rules and the dashboard use exported names only"
http_body n1 /metrics >"$EA_TMP/n1.final.metrics"
"$PY" - "$EA_TMP/n1.metrics" "$EA_TMP/n1.final.metrics" deploy/prometheus/rules.yml \
  deploy/prometheus/grafana-dashboard.json <<'PY' || fail "unknown metric names in deploy/prometheus"
import re, sys
names = set()
for path in sys.argv[1:3]:
    for line in open(path):
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split()
            names.add(name)
            if typ == "histogram":
                names.update(name + s for s in ("_bucket", "_sum", "_count"))
bad = {}
for path in sys.argv[3:]:
    used = set(re.findall(r"elastic_agent_[a-z_]+", open(path).read()))
    missing = used - names
    if missing:
        bad[path] = sorted(missing)
    print(path, len(used), "names")
if bad:
    print("not exported:", bad)
    sys.exit(1)
PY
pass "every elastic_agent_* name in rules.yml and grafana-dashboard.json is exported"
echo "total $(($(now_ms) - t_start)) ms"
