#!/usr/bin/env bash
# End-to-end: alerts are delivered, and a spot notice drains a node.
#
# One local HTTP server (Python's http.server, started here) plays three
# parts: the webhook receiver (every POST body kept, one JSON per line), the
# AWS metadata service (IMDSv2 token, then spot/instance-action: 404 until
# the test raises the notice) and the GCP one (instance/preempted, FALSE
# until raised).  A real Alertmanager (Debian's prometheus-alertmanager)
# gets the pushed alerts; without it that part is skipped with a message.
# Three agents train: n1 polls the fake AWS service, n2 the fake GCP one,
# n3 starts with a failing disk (EA_CKPT_FAULT=write:2:ENOSPC, the
# checkpoint layer's own fault injection).  Asserted:
#   1. checkpoint_failed: n3's webhook POST, its JSON body field by field;
#   2. worker_exit: a SIGKILLed worker of n2 is one POST from n2, subject
#      "worker 0", the signal in the summary;
#   3. node_lost: n3 SIGKILLed is exactly one POST, from the controller,
#      subject n3, critical — not one per survivor; Alertmanager's API shows
#      node_lost{subject="n3"} active;
#   4. n3 restarted: the controller resolves node_lost (a "resolved" POST
#      with endsAt) and Alertmanager no longer lists it as active;
#   5. alert_command ran for each with EA_ALERT_* in its environment (a
#      file it appended to);
#   6. the AWS notice: n1 logs it, POSTs `preempted`, drains and exits 0;
#      the GCP notice: the same for n2;
#   7. status shows the recent alerts and the delivery counters.
#   8. loss_nan: the built-in trainer cannot be made to diverge by its
#      configuration (gradient clipping at 1.0 and AdamW keep the loss finite
#      for any lr; lr × weight_decay ≥ 1 is refused), so a one-node job of its
#      own runs a library-mode program (python/elastic_agent) that reports
#      NaN from step 20: exactly one loss_nan POST (a condition: not
#      repeated while it stays NaN), the step in its summary;
#   9. an Azure scheduled event of type Preempt (after a Freeze, which is
#      not one) drains that one-node job's agent, exit 0;
#  10. storage_timeout: a second one-node job on a slow disk (its first
#      fsync in a checkpoint takes 2.5 s: EA_CKPT_FAULT=fsync:3:slow=2500) with
#      checkpoint.timeout_seconds 1 fires it (the POSTed summary names the
#      operation, the time and the limit) and resolves it at the next fast
#      one of the same operation; its checkpoints still verify;
#  11. the same agent polls a plain URL (runtime.preemption_notice=URL):
#      404 is no notice; once it answers 200 the node drains, exit 0;
#   and, in 3, node_lost stays firing in Alertmanager because the
#   controller re-sends it every observability.alert_resend_seconds (2 s
#   here, 60 by default): its endsAt moves forward with no new fire.
source "$(dirname "$0")/lib.sh"
t_start=$(now_ms)

need_curl

start_receiver "$EA_TMP/srv"
SRV=$RECV_DIR
URL=$RECV_URL

# A real Alertmanager, when it can be had.
AM=
if command -v prometheus-alertmanager >/dev/null 2>&1 || ensure_cmd prometheus-alertmanager prometheus-alertmanager; then
  AMP=$(free_port)
  mkdir -p "$EA_TMP/am"
  cat >"$EA_TMP/am/am.yml" <<EOF
route:
  receiver: none
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: none
EOF
  setsid prometheus-alertmanager --config.file="$EA_TMP/am/am.yml" --storage.path="$EA_TMP/am" \
    --web.listen-address=127.0.0.1:"$AMP" --cluster.listen-address= >"$EA_TMP/am/log" 2>&1 </dev/null &
  EA_PGIDS+=($!)
  AM=http://127.0.0.1:$AMP
  wait_for 15 curl -sf "$AM/-/ready" || fail "alertmanager did not get ready: $(tail -n 5 "$EA_TMP/am/log")"
else
  echo "note: prometheus-alertmanager is not installed and cannot be: the Alertmanager part is skipped"
fi

JOB=(--set train.steps=1000000000 --set train.context=8 --set train.embed_dim=16
  --set train.hidden=64 --set train.layers=1 --set distributed.global_batch=32
  --set distributed.micro_batch=16 --set distributed.scale_up_delay_ms=300
  --set compute.min_nodes=2 --set experiment.name=alerts-e2e
  --set distributed.communication_timeout_seconds=60
  --set checkpoint.save_interval_steps=500
  --set observability.alert_webhook="$URL/hook"
  --set observability.alert_command="printf '%s %s %s %s\\n' \"\$EA_ALERT_KIND\" \"\$EA_ALERT_STATUS\" \"\$EA_ALERT_NODE\" \"\$EA_ALERT_SUBJECT\" >>$EA_TMP/cmd.out"
  --set runtime.preemption_metadata_url="$URL")
[ -n "$AM" ] && JOB+=(--set observability.alertmanager_url="$AM" --set observability.alert_resend_seconds=2)

js() {
  ea_status "$1" --json 2>/dev/null |
    "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))' "$2" 2>/dev/null
}
trains() {
  [ "$(js "$1" '"%s %d" % (d["generation"]["phase"], d["generation"]["world"])')" = "running $2" ]
}
# am_active KIND — Alertmanager lists an active alert of that alertname.
am_active() {
  curl -s -m 5 "$AM/api/v2/alerts?active=true&silenced=false&inhibited=false" |
    "$PY" -c 'import json,sys; a=json.load(sys.stdin); sys.exit(0 if any(x["labels"]["alertname"]==sys.argv[1] and x["status"]["state"]=="active" for x in a) else 1)' "$1"
}
am_gone() { ! am_active "$1"; }

CK=$EA_TMP/ckpt
mkdir -p "$CK"
JOB+=(--set checkpoint.dir="$CK")

# A one-node job of its own whose program reports a NaN loss from step 20.
"$PY" -c 'import msgpack' || fail "$PY lacks msgpack (scripts/deps.sh installs requirements.txt)"
cat >"$EA_TMP/nan.py" <<'EOF'
import time
import elastic_agent
state = elastic_agent.ObjectState(x=0)

@elastic_agent.run(state)
def train(gen):
    while True:
        gen.report(loss=float("nan") if state.step >= 20 else 1.0)
        time.sleep(0.01)

train()
EOF
PYTHONPATH=$PWD/python start_agent z1 --set compute.min_nodes=1 --set compute.protocol=library \
  --set experiment.name=alerts-nan --set checkpoint.save_interval_steps=0 --set train.steps=1000000 \
  --set observability.alert_webhook="$URL/hook" --set runtime.preemption_notice=azure \
  --set runtime.preemption_metadata_url="$URL" -- "$PY" "$EA_TMP/nan.py"

# A one-node job on a slow disk: its third fsync (the first two come before
# the first checkpoint) takes 2.5 s, over checkpoint.timeout_seconds 1; it
# polls a plain URL for a notice.
EA_CKPT_FAULT=fsync:3:slow=2500 start_agent z2 --set compute.min_nodes=1 --set experiment.name=alerts-slow \
  --set train.steps=1000000000 --set train.context=8 --set train.embed_dim=16 --set train.hidden=64 \
  --set train.layers=1 --set distributed.global_batch=32 --set distributed.micro_batch=16 \
  --set checkpoint.dir="$EA_TMP/ckpt-z2" --set checkpoint.save_interval_steps=2000 \
  --set checkpoint.timeout_seconds=1 --set observability.alert_webhook="$URL/hook" \
  --set runtime.preemption_notice="$URL/going"

say "1. three agents train; n3's disk fails its second write"
declare -A EXTRA=([n1]=aws [n2]=gcp [n3]=none)
start_agent n1 "${JOB[@]}" --set runtime.preemption_notice=aws
start_agent n2 --join "${AGENT_ADDR[n1]}" "${JOB[@]}" --set runtime.preemption_notice=gcp
EA_CKPT_FAULT=write:2:ENOSPC start_agent n3 --join "${AGENT_ADDR[n1]}" "${JOB[@]}"
for n in n1 n2 n3; do wait_for 30 trains "$n" 3 || fail "$n does not train at world 3: $(js "$n" 'd["generation"]')"; done
grep -q ' notice polling http://127.0.0.1:[0-9]* for a preemption notice every 2000 ms (aws)' "$(agent_log n1)" ||
  fail "n1 does not poll: $(grep notice "$(agent_log n1)")"
grep -q 'alert delivery: alertmanager=.* webhook=http://127.0.0.1:[0-9]*/hook command=on' "$(agent_log n1)" ||
  fail "n1 names no delivery: $(grep 'alert delivery' "$(agent_log n1)")"
# n3's own (shard_failed); the controller's (failed … shard 2) may come first.
n3_ck() { posts checkpoint_failed | grep '"node": "n3"' | head -n1; }
n3_ck_ok() { [ -n "$(n3_ck)" ]; }
wait_for 20 n3_ck_ok || fail "no checkpoint_failed POST from n3: $(grep ' alert ' "$(agent_log n3)" | head -3)"
"$PY" - "$(n3_ck)" <<'EOF' || fail "checkpoint_failed body: $(n3_ck)"
import json, re, sys
b = json.loads(sys.argv[1])
assert list(b) == ["version", "status", "kind", "severity", "job", "node", "subject", "summary",
                   "startsAt", "endsAt", "suppressed"], list(b)
assert b["version"] == 1 and b["status"] == "firing" and b["severity"] == "critical", b
assert b["job"] == "alerts-e2e" and b["node"] == "n3" and b["endsAt"] is None, b
# its shard (shard_failed), or the commit when n3 is the controller (failed)
assert re.match(r"checkpoint (shard_failed|failed) .*No space left on device", b["summary"]), b
assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", b["startsAt"]), b
EOF
grep -q ' alert checkpoint .*No space left on device.* kind=checkpoint_failed severity=critical' "$(agent_log n3)" ||
  fail "n3's alert line: $(grep ' alert ' "$(agent_log n3)" | head -2)"
pass "checkpoint_failed from n3's failing disk: log line, webhook JSON"

say "2. a worker of n2 is SIGKILLed"
wpid=$(js n2 'd["workers"][0]["pid"]')
[ -n "$wpid" ] && [ "$wpid" != 0 ] || fail "no worker pid on n2"
kill -KILL "$wpid"
wait_for 15 have_post worker_exit || fail "no worker_exit POST: $(grep ' alert ' "$(agent_log n2)" | tail -3)"
b=$(posts worker_exit | head -n1)
"$PY" - "$b" <<'EOF' || fail "worker_exit body: $b"
import json, sys
b = json.loads(sys.argv[1])
assert b["node"] == "n2" and b["subject"] == "worker 0" and b["severity"] == "warning", b
assert "was killed by signal 9" in b["summary"], b
EOF
pass "worker_exit from n2: $(cut -c1-160 <<<"$b")"

say "3. a node other than the controller is SIGKILLed: node_lost, once, from the controller"
for n in n1 n2 n3; do wait_for 30 trains "$n" 3 || fail "$n does not train at world 3 again"; done
ctrl=$(controller_of n1 | awk '{print $1}')
V=n3
[ "$ctrl" = n3 ] && V=n2
[ -n "$ctrl" ] || fail "no controller"
stop_agent "$V" KILL
wait_for 10 agent_gone "$V" || fail "$V survived SIGKILL"
wait "${AGENT_PID[$V]}" 2>/dev/null
wait_for 20 have_post node_lost || fail "no node_lost POST: $(grep ' alert ' "$(agent_log "$ctrl")" | tail -3)"
for n in n1 n2 n3; do [ "$n" = "$V" ] || wait_for 30 trains "$n" 2 || fail "$n does not train at world 2"; done
n_lost=$(posts node_lost | wc -l)
assert_eq "$n_lost" 1 "node_lost POSTs"
b=$(posts node_lost)
"$PY" - "$b" "$ctrl" "$V" <<'EOF' || fail "node_lost body: $b"
import json, re, sys
b = json.loads(sys.argv[1])
assert b["node"] == sys.argv[2] and b["subject"] == sys.argv[3] and b["severity"] == "critical", b
assert re.match(r"node lost: %s \(ranks (\d)-\1 of generation \d+, world 3\) is dead$" % sys.argv[3],
                b["summary"]), b
EOF
if [ -n "$AM" ]; then
  wait_for 10 am_active node_lost || fail "alertmanager does not show node_lost: $(curl -s "$AM/api/v2/alerts")"
  curl -s "$AM/api/v2/alerts" | "$PY" -c '
import json, sys
a = [x for x in json.load(sys.stdin) if x["labels"]["alertname"] == "node_lost"]
assert len(a) == 1, a
l = a[0]["labels"]
assert l == {"alertname": "node_lost", "job": "alerts-e2e", "node": sys.argv[1], "severity": "critical",
             "subject": sys.argv[2]}, l
assert a[0]["annotations"]["summary"].startswith("node lost: " + sys.argv[2]), a[0]
' "$ctrl" "$V" || fail "alertmanager's node_lost: $(curl -s "$AM/api/v2/alerts")"
  # Re-sent every 2 s (observability.alert_resend_seconds) with endsAt four
  # re-sends ahead: endsAt moves on while nothing new fires.
  am_ends() {
    curl -s -m 5 "$AM/api/v2/alerts" |
      "$PY" -c 'import json,sys; print([x["endsAt"] for x in json.load(sys.stdin) if x["labels"]["alertname"]=="node_lost"][0])'
  }
  e0=$(am_ends)
  s0=$(js "$ctrl" 'd["alerts"]["delivery"]["sent"]')
  resent() { [[ "$(am_ends)" > "$e0" ]] && [ "$(js "$ctrl" 'd["alerts"]["delivery"]["sent"]')" -ge $((s0 + 2)) ]; }
  wait_for 10 resent || fail "node_lost not re-sent: endsAt $e0 -> $(am_ends), sent $s0 -> $(js "$ctrl" 'd["alerts"]["delivery"]["sent"]')"
  assert_eq "$(posts node_lost | wc -l)" 1 "node_lost webhook POSTs after the re-sends"
fi
pass "node_lost of $V: one POST from the controller $ctrl${AM:+, firing in Alertmanager, re-sent (endsAt $e0 -> $(am_ends))}"

say "4. $V comes back: node_lost resolved"
seed=n1
[ "$V" = n1 ] && seed=n2
start_agent "$V" --join "${AGENT_ADDR[$seed]}" "${JOB[@]}" --set runtime.preemption_notice="${EXTRA[$V]}"
wait_for 20 have_post node_lost resolved || fail "no resolved node_lost: $(grep ' alert ' "$(agent_log "$ctrl")" | tail -3)"
b=$(posts node_lost resolved)
"$PY" - "$b" "$V" <<'EOF' || fail "resolved body: $b"
import json, sys
b = json.loads(sys.argv[1])
assert b["status"] == "resolved" and b["subject"] == sys.argv[2] and b["endsAt"] >= b["startsAt"], b
assert b["summary"] == "node %s is alive again" % sys.argv[2], b
EOF
if [ -n "$AM" ]; then
  wait_for 10 am_gone node_lost || fail "alertmanager still shows node_lost active: $(curl -s "$AM/api/v2/alerts")"
fi
pass "node_lost resolved${AM:+; Alertmanager no longer lists it}"

say "5. alert_command ran with the alert in its environment"
grep -q '^checkpoint_failed firing n3 $' "$EA_TMP/cmd.out" || fail "cmd.out: $(cat "$EA_TMP/cmd.out")"
grep -q '^worker_exit firing n2 worker 0$' "$EA_TMP/cmd.out" || fail "cmd.out: $(cat "$EA_TMP/cmd.out")"
grep -q "^node_lost firing $ctrl $V\$" "$EA_TMP/cmd.out" || fail "cmd.out: $(cat "$EA_TMP/cmd.out")"
grep -q "^node_lost resolved $ctrl $V\$" "$EA_TMP/cmd.out" || fail "cmd.out: $(cat "$EA_TMP/cmd.out")"
pass "alert_command: $(wc -l <"$EA_TMP/cmd.out") runs"

say "6. status: recent alerts and delivery counters"
assert_eq "$(js "$ctrl" '[r["kind"] for r in d["alerts"]["recent"]].count("node_lost")')" 2 "node_lost entries in $ctrl's status"
assert_eq "$(js "$ctrl" 'd["alerts"]["delivery"]["failed"]')" 0 "failed deliveries on $ctrl"
assert_eq "$(js "$ctrl" 'd["counters"]["alerts"]["node_lost"]')" 1 "counters.alerts.node_lost on $ctrl"
pass "status: $(js "$ctrl" 'd["alerts"]["delivery"]')"

say "7. spot notices: AWS drains n1, GCP drains n2"
wait_for 30 trains n1 3 || fail "n1 does not train at world 3 with $V back"
touch "$SRV/aws"
wait_for 10 grep -q ' notice preemption notice: aws spot/instance-action: {"action": "terminate"' "$(agent_log n1)" ||
  fail "n1 saw no notice: $(grep notice "$(agent_log n1)")"
wait_exit n1 30 || fail "n1 did not exit after the notice"
assert_eq "$EXIT_RC" 0 "n1's exit status after a drain"
grep -q ' drain' "$(agent_log n1)" || fail "n1 did not drain: $(tail -n 5 "$(agent_log n1)")"
have_post preempted || fail "no preempted POST"
touch "$SRV/gcp"
wait_for 10 grep -q ' notice preemption notice: gcp instance/preempted: TRUE' "$(agent_log n2)" ||
  fail "n2 saw no notice: $(grep notice "$(agent_log n2)")"
wait_exit n2 30 || fail "n2 did not exit after the notice"
assert_eq "$EXIT_RC" 0 "n2's exit status after a drain"
assert_eq "$(posts preempted | "$PY" -c 'import json,sys; print(" ".join(sorted(json.loads(l)["node"] for l in sys.stdin)))')" "n1 n2" "preempted POSTs"
pass "aws and gcp notices drained n1 and n2 (exit 0), each POSTed preempted"

say "8. loss_nan from a library-mode program"
wait_for 20 have_post loss_nan || fail "no loss_nan POST: $(grep ' alert ' "$(agent_log z1)" | tail -3)"
past40() { [ "$(js z1 'd["workers"][0]["step"] > 40')" = True ]; }
wait_for 10 past40 || fail "z1 stopped stepping"
assert_eq "$(posts loss_nan | wc -l)" 1 "loss_nan POSTs"
b=$(posts loss_nan)
"$PY" - "$b" <<'EOF' || fail "loss_nan body: $b"
import json, re, sys
b = json.loads(sys.argv[1])
assert b["node"] == "z1" and b["job"] == "alerts-nan" and b["severity"] == "critical", b
assert re.match(r"loss_nan gen=\d+ step=20 rank=0 loss=-?nan: training diverged$", b["summary"]), b
EOF
assert_eq "$(grep -c ' alert loss_nan gen=' "$(agent_log z1)")" 1 "loss_nan log lines"
pass "loss_nan: one POST, one line: $(cut -c1-160 <<<"$b")"
say "9. an Azure Preempt event drains z1"
touch "$SRV/azure"
wait_for 10 grep -q ' notice preemption notice: azure scheduled event Preempt, NotBefore Mon, 01 Dec 2026 22:00:00 GMT' "$(agent_log z1)" ||
  fail "z1 saw no notice: $(grep notice "$(agent_log z1)")"
wait_exit z1 30 || fail "z1 did not exit after the notice"
assert_eq "$EXIT_RC" 0 "z1's exit status after the notice"
pass "azure notice: z1 drained and exited 0"

say "10. storage_timeout from z2's slow disk, then resolved"
# z2's own webhook bodies of that kind and status.
z2_st() { posts storage_timeout "$1" | grep '"node": "z2"' | head -n1; }
z2_st_has() { [ -n "$(z2_st "$1")" ]; }
wait_for 30 z2_st_has firing || fail "no storage_timeout POST from z2: $(grep -E ' alert |checkpoint' "$(agent_log z2)" | head -5)"
b=$(z2_st firing)
"$PY" - "$b" "$EA_TMP/ckpt-z2" <<'EOF' || fail "storage_timeout body: $b"
import json, re, sys
b = json.loads(sys.argv[1])
assert b["job"] == "alerts-slow" and b["severity"] == "warning" and b["subject"] in ("shard write", "commit"), b
m = re.match(r"storage timeout: (shard write|commit) of step-\d+\.gen-\d+ took (\d+\.\d) s "
             r"\(checkpoint\.timeout_seconds 1\) in (.*)$", b["summary"])
assert m and m.group(1) == b["subject"] and float(m.group(2)) >= 2.4 and m.group(3) == sys.argv[2], b
EOF
subj=$("$PY" -c 'import json,sys; print(json.loads(sys.argv[1])["subject"])' "$b")
wait_for 30 z2_st_has resolved || fail "storage_timeout not resolved: $(grep -E ' alert |storage' "$(agent_log z2)" | tail -3)"
b2=$(z2_st resolved)
"$PY" - "$b2" "$subj" <<'EOF' || fail "resolved storage_timeout body: $b2"
import json, re, sys
b = json.loads(sys.argv[1])
assert b["subject"] == sys.argv[2] and b["endsAt"] >= b["startsAt"], b
assert re.match(r"storage timeout resolved: %s of step-\d+\.gen-\d+ took \d+\.\d s$" % sys.argv[2], b["summary"]), b
EOF
grep -q " alert storage timeout: $subj of step-.* kind=storage_timeout severity=warning" "$(agent_log z2)" ||
  fail "z2's storage_timeout line: $(grep storage "$(agent_log z2)" | head -2)"
"$EA_BIN" ckpt verify "$EA_TMP/ckpt-z2" >"$EA_TMP/z2-verify" 2>&1 || fail "z2's checkpoints: $(cat "$EA_TMP/z2-verify")"
pass "storage_timeout ($subj: 2.5 s over 1 s) fired and resolved; z2's checkpoints verify"

say "11. a plain-URL notice drains z2"
grep -q " notice polling $URL/going for a preemption notice every [0-9]* ms (url)" "$(agent_log z2)" ||
  fail "z2 does not poll the URL: $(grep notice "$(agent_log z2)")"
agent_alive z2 || fail "z2 exited before the notice (404 is none): $(tail -n 3 "$(agent_log z2)")"
touch "$SRV/going"
wait_for 10 grep -q " notice preemption notice: $URL/going answered 200: terminate at 22:00; draining this node now" "$(agent_log z2)" ||
  fail "z2 saw no notice: $(grep notice "$(agent_log z2)")"
wait_exit z2 30 || fail "z2 did not exit after the notice"
assert_eq "$EXIT_RC" 0 "z2's exit status after the notice"
pass "plain-URL notice: z2 drained and exited 0"

stop_agent n3 TERM
wait_exit n3 20 || fail "n3 did not stop"
echo "ALERTS posts=$(wc -l <"$SRV/posts.jsonl") total_ms=$(($(now_ms) - t_start))"
pass "alerts end to end in $(($(now_ms) - t_start)) ms"
