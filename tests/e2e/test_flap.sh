#!/usr/bin/env bash
# End-to-end: a flapping node is held out, then taken back after its
# cooldown (Horovod Elastic's blacklist with cooldown).
#
# Three built-in trainers, runtime.flap_threshold 2 within 60 s, cooldown
# 6 s; f1 is the controller (node ids written before start: the lowest
# wins).  f3 fails three times, each time once it is back in training:
#   1. its worker is SIGKILLed (the agent restarts it: "its workers
#      crashed", told to the controller as JOB_EXIT);
#   2. and 3. its agent is SIGKILLed and started again at once with the
#      same data directory (a node killed and brought back by systemd).
# The first two failures are taken back as before; the third holds it out:
# the controller's status lists it (flapping, why, until when, 6 s at
# most), f1 and f2 train at world 2 while f3 runs and waits idle, it is not
# taken back before the hold ends and is back at world 3 after it.
#
# Prints: FLAP held_ms=… back_ms=…
source "$(dirname "$0")/lib.sh"
t_start=$(now_ms)

COOL=6
JOB=(--set train.steps=1000000000 --set train.context=8 --set train.embed_dim=16
  --set train.hidden=64 --set train.layers=1 --set distributed.global_batch=32
  --set distributed.micro_batch=16 --set distributed.scale_up_delay_ms=300
  --set compute.min_nodes=2 --set checkpoint.save_interval_steps=0
  --set distributed.communication_timeout_seconds=30
  --set runtime.flap_threshold=2 --set runtime.flap_window_seconds=60
  --set "runtime.flap_cooldown_seconds=$COOL")

js() {
  ea_status "$1" --json 2>/dev/null |
    "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))' "$2" 2>/dev/null
}
trains() {
  [ "$(js "$1" '"%s %d" % (d["generation"]["phase"], d["generation"]["world"])')" = "running $2" ]
}
# steps_past NAME N — NAME's worker 0 has completed more than N steps.
steps_past() { [ "$(js "$1" 'd["workers"][0]["step"] > '"$2")" = True ]; }
with_id() {
  mkdir -p "$EA_TMP/$1/data"
  printf '%s\n' "$(printf "$2%.0s" $(seq 16))" >"$EA_TMP/$1/data/node-id"
}
failures() { js f1 'd["counters"]["rdzv"]["node_failures"]'; }
failures_are() { [ "$(failures)" = "$1" ]; }
held_out() { js f1 '",".join("%s:%s" % (h["node"], h["why"]) for h in d["held_out"])'; }
is_held() { [ "$(held_out)" = "f3:flapping" ]; }
not_held() { [ -z "$(held_out)" ]; }
back_in() { trains f1 3 && trains f3 3; }

say "three agents, flap_threshold 2 in 60 s, cooldown ${COOL} s"
with_id f1 01
with_id f2 02
with_id f3 03
start_agent f1 "${JOB[@]}" --set experiment.name=flap-e2e --set observability.metrics_listen=127.0.0.1:0
start_agent f2 --join "${AGENT_ADDR[f1]}" "${JOB[@]}"
start_agent f3 --join "${AGENT_ADDR[f1]}" "${JOB[@]}"
for n in f1 f2 f3; do wait_for 30 trains "$n" 3 || fail "$n does not train at world 3"; done
assert_eq "$(js f1 'd["controller"]["name"]')" f1 "the controller"

say "1. f3's worker is SIGKILLed"
wait_for 10 steps_past f3 20 || fail "f3 does not step"
wpid=$(js f3 'd["workers"][0]["pid"]')
{ [ -n "$wpid" ] && [ "$wpid" != 0 ]; } || fail "no worker pid on f3"
kill -KILL "$wpid"
wait_for 10 failures_are 1 || fail "f1 counted $(failures) failures after f3's worker crashed"
wait_for 30 back_in || fail "f3 not back at world 3 after its worker crash"
not_held || fail "held after 1 failure: $(held_out)"
pass "failure 1 (a worker crash) counted; f3 taken back"

for k in 2 3; do
  say "$k. f3's agent is SIGKILLed and started again"
  wait_for 10 steps_past f3 $((k * 20)) || wait_for 10 steps_past f3 5 || fail "f3 does not step"
  stop_agent f3 KILL
  wait_for 10 agent_gone f3 || fail "f3 survived SIGKILL"
  wait "${AGENT_PID[f3]}" 2>/dev/null
  t_kill=$(now_ms)
  start_agent f3 --join "${AGENT_ADDR[f1]}" "${JOB[@]}"
  wait_for 15 failures_are "$k" || fail "f1 counted $(failures) failures after f3's restart $k"
  [ "$k" = 3 ] && break
  wait_for 30 back_in || fail "f3 not back at world 3 after restart $k"
  not_held || fail "held after $k failures: $(held_out)"
  pass "failure $k (killed and restarted) counted; f3 taken back"
done

wait_for 5 is_held || fail "f3 not held out after 3 failures: $(js f1 'd["held_out"]')"
t_held=$(now_ms)
held_ms=$((t_held - t_kill))
"$PY" - "$(ea_status f1 --json)" "$COOL" <<'EOF' || fail "held_out: $(js f1 'd["held_out"]')"
import json, re, sys
d = json.loads(sys.argv[1])
h = d["held_out"][0]
assert h["node"] == "f3" and h["why"] == "flapping" and h["holds"] == 1, h
assert re.match(r"3 failures in 60 s \(last: .+\)$", h["reason"]), h
assert 0 < h["remaining_s"] <= float(sys.argv[2]), h
assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", h["until"]), h
assert d["counters"]["rdzv"]["holds"] == 1, d["counters"]["rdzv"]
EOF
ea_status f1 | grep -q '^ *held out: f3 (flapping: 3 failures in 60 s (last: ' ||
  fail "text status: $(ea_status f1)"
for n in f1 f2; do wait_for 15 trains "$n" 2 || fail "$n does not train at world 2 while f3 is held out"; done
reason_held() { js f1 'd["generation"]["reason"]' | grep -q 'running with 2 nodes; 1 held out (f3: flapping for [0-9]* s)'; }
wait_for 5 reason_held || fail "f1's reason: $(js f1 'd["generation"]["reason"]')"
assert_eq "$(js f2 'd["held_out"]')" "[]" "f2's held_out (the controller's record only)"
held_gauge() { curl -sf "http://$(metrics_addr f1)/metrics" | grep -q "^elastic_agent_held_out_nodes{job=\"flap-e2e\",node=\"f1\"} $1\$"; }
if command -v curl >/dev/null 2>&1; then
  wait_for 3 held_gauge 1 || fail "metrics: $(curl -s "http://$(metrics_addr f1)/metrics" | grep held_out)"
fi
pass "f3 held out ${held_ms} ms after its third failure: $(js f1 'd["held_out"][0]["reason"]'), until $(js f1 'd["held_out"][0]["until"]')"

# Not taken back while held: every sample until the hold ends shows world 2.
until not_held; do
  (($(now_ms) - t_held < COOL * 1000 + 2000)) || fail "still held $((($(now_ms) - t_held) / 1000)) s later"
  trains f1 3 && fail "f3 taken back while held out: $(js f1 'd["held_out"]')"
  sleep 0.2
done
wait_for 15 back_in || fail "f3 not back at world 3 after the cooldown: $(js f1 'd["generation"]')"
back_ms=$(($(now_ms) - t_held))
if command -v curl >/dev/null 2>&1; then
  wait_for 3 held_gauge 0 || fail "metrics after the hold: $(curl -s "http://$(metrics_addr f1)/metrics" | grep held_out)"
fi
pass "f3 stayed out for the cooldown and was back at world 3 $back_ms ms after it was held"

echo "FLAP held_ms=$held_ms back_ms=$back_ms total_ms=$(($(now_ms) - t_start))"
pass "flapping node held out and taken back in $(($(now_ms) - t_start)) ms"
