#!/bin/bash
# user-data.sh — boot script for an autoscaling group of training nodes
# (AWS EC2 Auto Scaling; the same shape works for GCP managed instance
# groups and Azure scale sets).  Every instance runs it once at first boot:
# it writes the job file, fetches the cluster key, mounts the shared
# checkpoint directory and starts elastic-agent as a systemd service that
# joins the others through one DNS name.
#
# Seeds by DNS: EA_SEEDS is a name whose A records are the group's
# instances (a Route 53 / Cloud Map service kept up to date by the group's
# lifecycle hook, or an internal load-balancer-less DNS record).  An agent
# tries every address the name resolves to and retries with backoff, so it
# does not matter which instances are up, or that the record lists this
# instance too.
#
# The image is expected to carry /usr/local/bin/elastic-agent and
# deploy/systemd/ under /usr/local/share/elastic-agent/ (bake them into
# the AMI), or EA_BINARY_URL to fetch the binary from.
#
# Fill in the variables below (or pass them through the launch template).
set -euo pipefail

EA_JOB_NAME=${EA_JOB_NAME:-training-baseline-v1}
EA_SEEDS=${EA_SEEDS:-elastic-agent.training.internal:7000}
EA_MIN_NODES=${EA_MIN_NODES:-2}
EA_MAX_NODES=${EA_MAX_NODES:-16}
EA_WORKERS_PER_NODE=${EA_WORKERS_PER_NODE:-8}
# The shared checkpoint file system, "HOST:/PATH" for NFS (EFS: the mount
# target's DNS name); empty: /srv/elastic-agent/checkpoints is assumed
# mounted already.
EA_CKPT_NFS=${EA_CKPT_NFS:-}
# The cluster key, 64 hex characters, from AWS SSM Parameter Store
# (SecureString) when the aws CLI and an instance role allow it.
EA_KEY_SSM_PARAM=${EA_KEY_SSM_PARAM:-/elastic-agent/cluster-key}
EA_BINARY_URL=${EA_BINARY_URL:-}
EA_SHARE=${EA_SHARE:-/usr/local/share/elastic-agent}
IMDS=${IMDS:-http://169.254.169.254}

log() { echo "user-data: $*" >&2; }

# IMDSv2: a session token, then the instance's id for the node's name.
imds() {
  local token
  token=$(curl -fsS -m 5 -X PUT "$IMDS/latest/api/token" \
    -H 'X-aws-ec2-metadata-token-ttl-seconds: 300') || return 1
  curl -fsS -m 5 -H "X-aws-ec2-metadata-token: $token" "$IMDS/latest/meta-data/$1"
}
NODE_NAME=$(imds instance-id 2>/dev/null || hostname)

if [ -n "$EA_BINARY_URL" ]; then
  log "fetching $EA_BINARY_URL"
  curl -fsSL -m 120 -o /usr/local/bin/elastic-agent.new "$EA_BINARY_URL"
  install -m 0755 /usr/local/bin/elastic-agent.new /usr/local/bin/elastic-agent
  rm -f /usr/local/bin/elastic-agent.new
fi
[ -x /usr/local/bin/elastic-agent ] || { log "no /usr/local/bin/elastic-agent"; exit 1; }

install -m 0644 "$EA_SHARE/systemd/elastic-agent.service" /etc/systemd/system/elastic-agent.service
install -m 0644 "$EA_SHARE/systemd/elastic-agent.sysusers" /etc/sysusers.d/elastic-agent.conf
systemd-sysusers

# The shared checkpoint directory.
install -d -m 0755 /srv/elastic-agent
install -d -m 0750 -o elastic-agent -g elastic-agent /srv/elastic-agent/checkpoints
if [ -n "$EA_CKPT_NFS" ]; then
  grep -qs " /srv/elastic-agent/checkpoints " /proc/mounts ||
    mount -t nfs4 -o nfsvers=4.1,hard,timeo=600,retrans=2,noresvport \
      "$EA_CKPT_NFS" /srv/elastic-agent/checkpoints
  echo "$EA_CKPT_NFS /srv/elastic-agent/checkpoints nfs4 nfsvers=4.1,hard,timeo=600,retrans=2,noresvport,_netdev 0 0" >>/etc/fstab
  chown elastic-agent:elastic-agent /srv/elastic-agent/checkpoints
fi
install -d -m 0750 -o elastic-agent -g elastic-agent "/srv/elastic-agent/checkpoints/$EA_JOB_NAME"

# The cluster key: root-owned, readable by the service's group only.
install -d -m 0755 /etc/elastic-agent
umask 027
if command -v aws >/dev/null 2>&1 &&
  aws ssm get-parameter --with-decryption --name "$EA_KEY_SSM_PARAM" \
    --query Parameter.Value --output text >/etc/elastic-agent/cluster.key.new 2>/dev/null; then
  mv /etc/elastic-agent/cluster.key.new /etc/elastic-agent/cluster.key
else
  rm -f /etc/elastic-agent/cluster.key.new
  log "cannot read $EA_KEY_SSM_PARAM from SSM: the cluster key must be in /etc/elastic-agent/cluster.key"
  [ -s /etc/elastic-agent/cluster.key ] || exit 1
fi
chown root:elastic-agent /etc/elastic-agent/cluster.key
chmod 0640 /etc/elastic-agent/cluster.key

# The job file: what differs from the defaults (docs/config.md).
cat >/etc/elastic-agent/job.yaml <<YAML
experiment:
  name: "$EA_JOB_NAME"
compute:
  min_nodes: $EA_MIN_NODES
  max_nodes: $EA_MAX_NODES
  workers_per_node: $EA_WORKERS_PER_NODE
checkpoint:
  dir: "/srv/elastic-agent/checkpoints/$EA_JOB_NAME"
  save_interval_steps: 500
  keep_last: 3
logging:
  format: "json"
observability:
  metrics_listen: "0.0.0.0:9400"
YAML
chmod 0644 /etc/elastic-agent/job.yaml

# Spot instances: drain as soon as the reclaim notice is posted, when this
# build of the agent has the key (runtime.preemption_notice); a SIGTERM at
# shutdown drains too, later.
SPOT=()
if /usr/local/bin/elastic-agent config --config /etc/elastic-agent/job.yaml \
  --set runtime.preemption_notice=aws >/dev/null 2>&1; then
  SPOT=(--set runtime.preemption_notice=aws)
else
  log "this elastic-agent has no runtime.preemption_notice: spot notices drain at SIGTERM only"
fi
/usr/local/bin/elastic-agent config --config /etc/elastic-agent/job.yaml >/dev/null

echo "ELASTIC_AGENT_ARGS=--name $NODE_NAME --join $EA_SEEDS ${SPOT[*]}" >/etc/default/elastic-agent

systemctl daemon-reload
systemctl enable --now elastic-agent.service
log "elastic-agent started as $NODE_NAME, joining $EA_SEEDS"
