#!/usr/bin/env bash
# The deployment files of deploy/, checked as far as this machine allows
# (deploy/README.md lists what cannot be: the image is not built, nothing is
# applied to a cluster):
#
#  1. Prometheus: `promtool check config` on prometheus.yml, `check rules`
#     and `test rules` (every alert fires when it should, and only then);
#     the Grafana dashboard is JSON with a job variable and the panels the
#     job needs (world size, steps/s, loss, generations, checkpoint age and
#     duration, alerts).  (test_metrics.sh checks their metric names against
#     a live scrape.)
#  2. systemd: `systemd-analyze verify` on the unit (ExecStart pointed at the
#     built binary: verify wants the program to exist), and its key
#     settings: Restart=on-failure, SIGTERM to the agent alone, a stop
#     timeout that covers a drain, NoNewPrivileges, ProtectSystem=strict
#     with the data and checkpoint directories writable, a dedicated user;
#  3. Kubernetes: every manifest parses; the StatefulSet's headless Service
#     (publishing not-ready addresses) makes --join's name resolve; probes on
#     /readyz and /healthz at the metrics port; a grace period longer than a
#     drain; the key Secret mounted 0600 and given to --key-file; the shared
#     checkpoint claim is ReadWriteMany; the PDB selects the pods; the job
#     file of the ConfigMap loads (`elastic-agent config`) with metrics on
#     0.0.0.0:9400 and checkpoints on the shared volume;
#  4. the Dockerfile: Debian 12 in both stages, no -dev package at run
#     time, every library the binary links (readelf NEEDED) installed, a
#     non-root USER, HEALTHCHECK on /healthz;
#  5. shellcheck on deploy's scripts.
source "$(dirname "$0")/lib.sh"
D=deploy
skips=()

say "1. Prometheus rules, config and dashboard"
if ensure_cmd promtool prometheus; then
  out=$(promtool check config "$D/prometheus/prometheus.yml" 2>&1) || fail "promtool check config: $out"
  assert_contains "$out" "SUCCESS: 1 rule files found" "promtool check config"
  out=$(promtool check rules "$D/prometheus/rules.yml" 2>&1) || fail "promtool check rules: $out"
  assert_contains "$out" "SUCCESS: 6 rules found" "promtool check rules"
  out=$(promtool test rules "$D/prometheus/rules_test.yml" 2>&1) || fail "promtool test rules: $out"
  assert_contains "$out" "SUCCESS" "promtool test rules"
  pass "promtool: config valid, 6 rules, rules_test.yml passes"
else
  skips+=("promtool (Debian's prometheus package cannot be installed here)")
fi
"$PY" - "$D/prometheus/grafana-dashboard.json" "$D/prometheus/rules.yml" <<'PY' || fail "dashboard or rules"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["uid"] and d["title"], "title and uid"
names = [v["name"] for v in d["templating"]["list"]]
assert "job" in names and "datasource" in names, names
titles = [p["title"] for p in d["panels"]]
for want in ("World size", "Steps per second", "Loss", "Generations and formations",
             "Checkpoint age", "Checkpoint persist duration", "Alerts"):
    assert want in titles, (want, titles)
ids = [p["id"] for p in d["panels"]]
assert len(ids) == len(set(ids)), "duplicate panel ids"
for p in d["panels"]:
    for t in p["targets"]:
        assert 'job="$job"' in t["expr"], (p["title"], t["expr"])
import yaml
r = yaml.safe_load(open(sys.argv[2]))
alerts = [x["alert"] for g in r["groups"] for x in g["rules"]]
for want in ("ElasticAgentStalled", "ElasticAgentCheckpointTooOld", "ElasticAgentWorkerRestartsRising",
             "ElasticAgentMembersLost"):
    assert want in alerts, (want, alerts)
print(len(titles), "panels,", len(alerts), "alerts")
PY
pass "dashboard: job variable, the job's panels, every query filtered by job; rules: the four required alerts"

say "2. systemd unit"
U=$D/systemd/elastic-agent.service
unit() { awk -F= -v k="$1" '$1 == k { sub(/^[^=]*=/, ""); print; exit }' "$U"; }
assert_eq "$(unit Restart)" on-failure "Restart"
assert_eq "$(unit KillSignal)" SIGTERM "KillSignal"
assert_eq "$(unit KillMode)" mixed "KillMode (SIGTERM to the agent only)"
(($(unit TimeoutStopSec) >= 45)) || fail "TimeoutStopSec $(unit TimeoutStopSec) < a drain (30 s + 11 s)"
assert_eq "$(unit NoNewPrivileges)" yes "NoNewPrivileges"
assert_eq "$(unit ProtectSystem)" strict "ProtectSystem"
assert_eq "$(unit User)" elastic-agent "User"
assert_contains "$(unit ReadWritePaths)" "/var/lib/elastic-agent" "ReadWritePaths (data dir)"
assert_contains "$(unit ReadWritePaths)" "checkpoints" "ReadWritePaths (checkpoint dir)"
assert_contains "$(unit ExecStart)" "--data-dir /var/lib/elastic-agent" "ExecStart data dir"
grep -q '^u elastic-agent ' "$D/systemd/elastic-agent.sysusers" || fail "sysusers entry"
if command -v systemd-analyze >/dev/null 2>&1; then
  mkdir -p "$EA_TMP/unit"
  sed "s#/usr/local/bin/elastic-agent#$EA_BIN#" "$U" >"$EA_TMP/unit/elastic-agent.service"
  out=$(systemd-analyze verify "$EA_TMP/unit/elastic-agent.service" 2>&1)
  rc=$?
  # Without systemd as PID 1 verify still parses and checks the unit
  # offline; only its complaints about this unit count.
  bad=$(grep -F 'elastic-agent.service' <<<"$out" || true)
  if [ $rc -ne 0 ] || [ -n "$bad" ]; then fail "systemd-analyze verify (rc=$rc): $out"; fi
  pass "systemd-analyze verify: clean; Restart, KillMode=mixed, TimeoutStopSec, hardening, user"
else
  skips+=("systemd-analyze (not installed)")
fi

say "3. Kubernetes manifests"
"$PY" -c 'import yaml' 2>/dev/null || EA_DEPS_EXTRA=python3-yaml scripts/deps.sh >&2
"$PY" -c 'import yaml' || fail "python3-yaml is needed to parse the manifests"
"$PY" - "$D/k8s" "$EA_TMP/k8s-job.yaml" <<'PY' || fail "Kubernetes manifests"
import os, sys, yaml
d, job_out = sys.argv[1], sys.argv[2]
docs = {}
for f in sorted(os.listdir(d)):
    if f.endswith(".yaml"):
        for doc in yaml.safe_load_all(open(os.path.join(d, f))):
            docs.setdefault(doc["kind"], []).append(doc)
kust = docs["Kustomization"][0]
for r in kust["resources"]:
    assert os.path.exists(os.path.join(d, r)), r
assert "secret.yaml" not in kust["resources"], "the key Secret is not applied from the repository"
sts, = docs["StatefulSet"]
svc, = docs["Service"]
pdb, = docs["PodDisruptionBudget"]
pvc, = docs["PersistentVolumeClaim"]
cm, = docs["ConfigMap"]
sec, = docs["Secret"]
spec, pod = sts["spec"], sts["spec"]["template"]["spec"]
labels = sts["spec"]["template"]["metadata"]["labels"]
assert spec["selector"]["matchLabels"].items() <= labels.items()
# the headless Service behind --join elastic-agent-0.elastic-agent:7000
assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
assert spec["serviceName"] == svc["metadata"]["name"]
assert svc["spec"]["selector"].items() <= labels.items()
c, = pod["containers"]
args = c["args"]
join = args[args.index("--join") + 1]
assert join == "%s-0.%s:7000" % (sts["metadata"]["name"], svc["metadata"]["name"]), join
svc_ports = {(p["port"], p["protocol"]) for p in svc["spec"]["ports"]}
assert {(7000, "UDP"), (7000, "TCP"), (7001, "TCP"), (9400, "TCP")} <= svc_ports, svc_ports
ports = {p["name"]: p["containerPort"] for p in c["ports"]}
assert ports["metrics"] == 9400, ports
# probes
assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}, c["readinessProbe"]
assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}, c["livenessProbe"]
# a drain: rendezvous_timeout_seconds (30) + worker stop (10) + leave (1)
assert pod["terminationGracePeriodSeconds"] >= 41, pod["terminationGracePeriodSeconds"]
# non-root
assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
assert c["securityContext"]["allowPrivilegeEscalation"] is False
# the key: a Secret, mounted 0600, given to --key-file
vols = {v["name"]: v for v in pod["volumes"]}
mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
kv = next(v for v in vols.values() if "secret" in v)
assert kv["secret"]["secretName"] == sec["metadata"]["name"]
assert kv["secret"]["defaultMode"] == 0o600, oct(kv["secret"]["defaultMode"])
key = args[args.index("--key-file") + 1]
assert key.startswith(mounts[kv["name"]] + "/") and key.rsplit("/", 1)[1] in sec["stringData"], key
# the shared checkpoint volume
cv = next(v for v in vols.values() if "persistentVolumeClaim" in v)
assert cv["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
assert pvc["spec"]["accessModes"] == ["ReadWriteMany"], pvc["spec"]["accessModes"]
ckpt_mount = mounts[cv["name"]]
# the per-pod data dir
data = args[args.index("--data-dir") + 1]
assert any(t["metadata"]["name"] in mounts and mounts[t["metadata"]["name"]] == data
           for t in spec["volumeClaimTemplates"]), data
# the NetworkPolicy (issue 27): the agents' pods, metrics only from Prometheus,
# gossip and control only from the agents; no rule admits 9400 from anywhere
np, = docs["NetworkPolicy"]
assert np["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
assert np["spec"]["policyTypes"] == ["Ingress"]
by_port = {}
for rule in np["spec"]["ingress"]:
    assert rule.get("from"), "an ingress rule without `from` admits every source"
    for p in rule["ports"]:
        by_port.setdefault((p["port"], p["protocol"]), []).append(rule["from"])
assert set(by_port) == {(7000, "UDP"), (7000, "TCP"), (7001, "TCP"), (9400, "TCP")}, by_port
for k in ((7000, "UDP"), (7000, "TCP"), (7001, "TCP")):
    assert by_port[k] == [[{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "elastic-agent"}}}]], by_port[k]
(m,), = by_port[(9400, "TCP")]
assert "namespaceSelector" in m and "podSelector" in m, m
# the PDB
assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
assert pdb["spec"]["maxUnavailable"] == 1
# the job file
cfg = yaml.safe_load(cm["data"]["job.yaml"])
assert cfg["observability"]["metrics_listen"] == "0.0.0.0:9400", cfg["observability"]
assert cfg["checkpoint"]["dir"].startswith(ckpt_mount + "/"), (cfg["checkpoint"]["dir"], ckpt_mount)
jm = next(m for m in c["volumeMounts"] if m["name"] == next(n for n, v in vols.items() if "configMap" in v))
assert args[args.index("--config") + 1] == jm["mountPath"], jm
open(job_out, "w").write(cm["data"]["job.yaml"])
print("ok:", ", ".join(sorted(docs)))
PY
out=$("$EA_BIN" config --config "$EA_TMP/k8s-job.yaml" 2>&1) || fail "the ConfigMap's job.yaml does not load: $out"
assert_contains "$out" 'metrics_listen: "0.0.0.0:9400"' "effective metrics_listen of the ConfigMap's job file"
pass "StatefulSet + headless Service + probes + grace period + Secret 0600 + RWX claim + PDB; the job file loads"

say "4. Dockerfile"
F=$D/Dockerfile
# shellcheck disable=SC2016 # the Dockerfile's own ${DEBIAN}, literally
froms=$(grep -c '^FROM ${DEBIAN}' "$F")
assert_eq "$froms" 2 "FROM lines (two stages)"
grep -q '^ARG DEBIAN=debian:12$' "$F" || fail "Debian 12 base"
# the runtime stage, continuation lines joined
rt=$(sed -n '/^FROM .* AS runtime/,$p' "$F" | sed -e ':a' -e '/\\$/N; s/\\\n//; ta')
grep -q -- '-dev' <<<"$rt" && fail "a -dev package in the runtime stage"
grep -q '^USER 10001' <<<"$rt" || fail "no non-root USER in the runtime stage"
grep -q 'HEALTHCHECK.*/healthz' <<<"$rt" || fail "no HEALTHCHECK on /healthz"
# Every shared library the binary needs comes from a package the runtime
# stage installs (libc's and CUDA's aside).
for so in $(readelf -d "$EA_BIN" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
  # (libasan/libubsan: the sanitizer build of make asan, not a release binary)
  case $so in libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | libnccl* | libcudart* | ld-linux* | libasan* | libubsan*) continue ;; esac
  path=$(ldconfig -p | awk -v s="$so" '$1 == s { print $NF; exit }')
  pkg=$(dpkg -S "$(readlink -f "$path")" 2>/dev/null | head -n1 | cut -d: -f1)
  [ -n "$pkg" ] || fail "cannot tell which package has $so"
  grep -qw -- "$pkg" <<<"$rt" || fail "the runtime stage does not install $pkg (for $so)"
done
pass "two Debian 12 stages, no -dev at run time, every NEEDED library's package installed, USER 10001, HEALTHCHECK"

say "5. shellcheck"
if command -v shellcheck >/dev/null 2>&1; then
  mapfile -t scripts < <(find "$D" -name '*.sh' | sort)
  ((${#scripts[@]} > 0)) || fail "no scripts in $D"
  shellcheck "${scripts[@]}" || fail "shellcheck"
  pass "shellcheck: ${scripts[*]}"
else
  skips+=("shellcheck (not installed)")
fi

echo "not checkable here: the image is not built (no container registry is reachable), the manifests are not applied (no cluster)"
if ((${#skips[@]})); then
  echo "skip: ${skips[*]}"
  exit 77
fi
