#!/usr/bin/env bash
# End-to-end: cluster identity (issue 11, item 3) — a stranger agent with
# another key, --join pointing at the cluster and the same checkpoint.dir,
# on 127.0.0.1.
#
#  1. a 2-node keyed cluster trains and commits checkpoints into a shared
#     checkpoint.dir: the first controller creates the cluster's identity
#     (logged, in <data-dir>/cluster-id of both members, the same),
#     DIR/CLUSTER records it at the first commit, and `status` shows it;
#  2. a stranger with another key, --join at the cluster and the same
#     checkpoint.dir cannot join (the seals do not open): it starts no job
#     — no generation, nothing loaded — and says that it waits to join
#     through the seeds it names; status says "waiting to join";
#  3. a stranger like it with --bootstrap, its data dir holding a copy of
#     c1's cluster-id (the same id string, under its other key: disowned,
#     with a warning), forms a cluster of its own (a new identity) and
#     refuses the checkpoint directory, naming both
#     identities and the directory (an alert, counted in status): it loads
#     nothing from it and commits nothing into it;
#  4. meanwhile and afterwards the cluster keeps committing (LATEST moves
#     on, no commit refused by the generation fence), every checkpoint it
#     had committed before the strangers came is still there and verifies
#     (the cluster keeps them all: keep_last 1000; the strangers' own
#     keep_last is 1, whose retention used to delete the cluster's);
#  5. an agent with the cluster's key but a data dir of another cluster
#     (its cluster-id names another identity, bound to the same key) joins
#     the gossip and is refused: both sides log a line naming both
#     identities, it is taken into no generation (the cluster stays at
#     world 2) and it waits, starting no job of its own;
#  6. every member is lost and the cluster comes back on fresh data dirs
#     with its key (new spot instances): the first controller takes the
#     identity DIR/CLUSTER names, since it is bound to the same key, and
#     the new agents resume from the cluster's checkpoints and commit on.
#  7. an agent whose only seed is itself (pod 0 of the StatefulSet in
#     deploy/k8s: every pod joins pod 0) and that remembers no peer starts
#     the cluster, as without --join: the gate is for agents with someone
#     to wait for.
#
# On main before this change part 2 fails: the stranger trains alone (and
# resumes the cluster's newest checkpoint).
source "$(dirname "$0")/lib.sh"
t_start=$(now_ms)

TINY=(--set train.steps=1000000000 --set train.context=8 --set train.embed_dim=16
  --set train.hidden=64 --set train.layers=1 --set distributed.global_batch=32
  --set distributed.micro_batch=16 --set distributed.scale_up_delay_ms=300)
CK=$EA_TMP/shared-ckpt
mkdir -p "$CK"
JOB=("${TINY[@]}" --set checkpoint.save_interval_steps=100 --set checkpoint.keep_last=1000
  --set "checkpoint.dir=$CK")
# The strangers' own job: the defaults of the issue (min_nodes 1) and a
# short retention.
SJOB=("${TINY[@]}" --set checkpoint.save_interval_steps=100 --set checkpoint.keep_last=1
  --set "checkpoint.dir=$CK")

js() {
  ea_status "$1" --json 2>/dev/null |
    "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))' "$2" 2>/dev/null
}
trains() {
  [ "$(js "$1" '"%s %d" % (d["generation"]["phase"], d["generation"]["world"])')" = "running $2" ]
}
latest() { cat "$CK/LATEST" 2>/dev/null; }
latest_moved_from() {
  local l
  l=$(latest)
  [ -n "$l" ] && [ "$l" != "$1" ]
}
complete_ckpts() { for d in "$CK"/step-*; do [ -f "$d/MANIFEST" ] && basename "$d"; done | sort; }
id_of() { sed -n 's/^id //p' "$1" 2>/dev/null; }
refusals() { js "$1" 'd["cluster"]["checkpoint_dir_refusals"]'; }
ge1() {
  local v
  v=$("$@")
  [ -n "$v" ] && ((v >= 1))
}

"$EA_BIN" keygen "$EA_TMP/good.key" >/dev/null || fail "keygen"
"$EA_BIN" keygen "$EA_TMP/other.key" >/dev/null || fail "keygen"

say "1. a 2-node keyed cluster trains and commits into $CK"
start_agent c1 --key-file "$EA_TMP/good.key" --set compute.min_nodes=2 "${JOB[@]}"
start_agent c2 --key-file "$EA_TMP/good.key" --join "${AGENT_ADDR[c1]}" --set compute.min_nodes=2 \
  "${JOB[@]}"
wait_for 60 trains c1 2 || fail "the cluster does not train at world 2: $(tail -5 "$(agent_log c1)")"
wait_for 60 test -s "$CK/LATEST" ||
  fail "no checkpoint committed: $(grep -h ckpt "$(agent_log c1)" | tail -5)"
wait_for 10 test -s "$CK/CLUSTER" || fail "no $CK/CLUSTER after the first commit"
CID=$(id_of "$CK/CLUSTER")
[ -n "$CID" ] || fail "$CK/CLUSTER has no id: $(cat "$CK/CLUSTER")"
assert_eq "$(id_of "${AGENT_DIR[c1]}/data/cluster-id")" "$CID" "c1's cluster-id"
assert_eq "$(id_of "${AGENT_DIR[c2]}/data/cluster-id")" "$CID" "c2's cluster-id"
grep -q "cluster identity $CID created" "$(agent_log c1)" ||
  fail "c1 (the first controller) logged no 'cluster identity … created': $(grep -h cluster "$(agent_log c1)" | head -5)"
grep -q "cluster identity $CID adopted from c1" "$(agent_log c2)" ||
  fail "c2 logged no 'cluster identity … adopted from c1': $(grep -h cluster "$(agent_log c2)" | head -5)"
assert_eq "$(js c2 'd["cluster"]["id"]')" "$CID" "c2's status cluster.id"
ea_status c1 | grep -q "^cluster: $CID" || fail "status text lacks 'cluster: $CID'"
pass "cluster $CID: created by the first controller, adopted by c2, recorded in $CK/CLUSTER"

# A few checkpoints, then what the cluster has before the strangers come.
l0=$(latest)
wait_for 60 latest_moved_from "$l0" || fail "LATEST does not move"
BEFORE=$(complete_ckpts)
stale0=$(js c1 'd["checkpoint"]["stale"]')
say "   the cluster has $(wc -l <<<"$BEFORE") checkpoints, LATEST $(latest)"

say "2. a stranger (another key, --join the cluster, same checkpoint.dir) does not train alone"
seeds="${AGENT_ADDR[c1]},${AGENT_ADDR[c2]}"
# (a short rendezvous timeout: waiting to join must not fail the job as
# "min_nodes not reached" either)
start_agent s1 --key-file "$EA_TMP/other.key" --join "$seeds" "${SJOB[@]}" \
  --set runtime.rendezvous_timeout_seconds=1
log_s=$(agent_log s1)
grep -q "waiting to join the cluster through $seeds" "$log_s" ||
  fail "the stranger does not say it waits to join through its seeds: $(tail -5 "$log_s")"
wait_for 20 grep -q "still waiting to join the cluster: no seed of $seeds answered" "$log_s" ||
  fail "the stranger does not say its seeds do not answer: $(tail -5 "$log_s")"
# Before this change it formed a generation alone within a second of its
# start; give it three.
if wait_for 3 grep -q "committed gen=" "$log_s"; then
  fail "the stranger formed a generation alone: $(grep 'committed gen=' "$log_s")"
fi
agent_alive s1 || fail "the waiting stranger exited: $(tail -3 "$log_s")"
assert_eq "$(js s1 'd["cluster"]["state"]')" "waiting to join" "the stranger's status cluster.state"
assert_eq "$(js s1 'd["generation"]["phase"]')" "idle" "the stranger's generation phase"
ea_status s1 | grep -q "^cluster: waiting to join through $seeds" ||
  fail "the stranger's status text lacks the waiting line: $(ea_status s1 | head -20)"
if grep -q " loaded step-" "$log_s"; then
  fail "the stranger loaded a checkpoint: $(grep ' loaded step-' "$log_s")"
fi
stop_agent s1 KILL
wait_exit s1 10 || fail "the stranger did not die"
pass "the stranger waits to join through $seeds: no generation, no job"

say "3. a stranger with --bootstrap (and a copy of c1's cluster-id) refuses the cluster's checkpoint.dir"
# The same id string under another key is another cluster: s2's data dir
# holds a copy of c1's cluster-id, which s2 (with other.key) no longer claims.
mkdir -p "$EA_TMP/s2/data"
chmod 700 "$EA_TMP/s2/data"
cp "${AGENT_DIR[c1]}/data/cluster-id" "$EA_TMP/s2/data/cluster-id"
start_agent s2 --key-file "$EA_TMP/other.key" --join "$seeds" --bootstrap "${SJOB[@]}"
log_s=$(agent_log s2)
grep -q "cluster-id names cluster $CID, made under a cluster key, and this node's key is another one" "$log_s" ||
  fail "s2 does not disown the copied cluster-id: $(grep -h cluster "$log_s" | head -3)"
wait_for 30 grep -q "cluster identity .* created" "$log_s" ||
  fail "the bootstrapped stranger made no identity of its own: $(tail -5 "$log_s")"
SID=$(id_of "${AGENT_DIR[s2]}/data/cluster-id")
{ [ -n "$SID" ] && [ "$SID" != "$CID" ]; } || fail "the stranger's identity '$SID' is not a new one"
wait_for 30 grep -q "refusing to resume from checkpoint.dir $CK: it belongs to cluster $CID .*not to this cluster $SID" "$log_s" ||
  fail "the stranger does not refuse the directory naming both identities: $(grep -i 'refus\|cluster' "$log_s" | tail -5)"
grep -q " alert .*refusing to resume from checkpoint.dir" "$log_s" ||
  fail "no alert line for the refusal: $(grep -i refus "$log_s" | head -3)"
wait_for 10 ge1 refusals s2 || fail "the stranger's status does not count the refusal"
wait_for 30 trains s2 1 || fail "the bootstrapped stranger does not run its own job"
G_S=$(js s2 'd["generation"]["gen"]')
[ -n "$G_S" ] || fail "no generation number in s2's status"
if grep -q " loaded step-" "$log_s"; then
  fail "the stranger loaded a checkpoint: $(grep ' loaded step-' "$log_s")"
fi
if grep -q "committed step-" "$log_s"; then
  fail "the stranger committed a checkpoint: $(grep 'committed step-' "$log_s")"
fi
assert_eq "$(id_of "$CK/CLUSTER")" "$CID" "$CK/CLUSTER after the stranger"
# Past three checkpoint intervals of its own: nothing of its generation is
# in the directory (no shard was staged there).
past() {
  local v
  v=$(js "$1" 'd["generation"]["last_step"]')
  [ -n "$v" ] && ((v > $2))
}
wait_for 30 past s2 300 || fail "the stranger does not train past step 300"
if compgen -G "$CK/step-*.gen-$G_S" >/dev/null; then
  fail "the stranger wrote into $CK: $(ls -d "$CK"/step-*.gen-"$G_S" | head -3)"
fi
pass "the bootstrapped stranger ($SID) refuses $CK of cluster $CID"

say "4. the cluster keeps committing; its checkpoints are all there and verify"
for _ in 1 2 3; do
  l=$(latest)
  wait_for 60 latest_moved_from "$l" || fail "the cluster stopped committing (LATEST $l)"
done
assert_eq "$(js c1 'd["checkpoint"]["stale"]')" "$stale0" "commits the generation fence refused"
if grep -q "is older than" "$(agent_log c1)" "$(agent_log c2)"; then
  fail "a commit of the cluster was fenced: $(grep -h 'is older than' "$(agent_log c1)" "$(agent_log c2)" | head -2)"
fi
NOW=$(complete_ckpts)
missing=$(comm -23 <(echo "$BEFORE") <(echo "$NOW"))
[ -z "$missing" ] || fail "checkpoints of the cluster were deleted: $missing"
for d in $BEFORE; do
  "$EA_BIN" ckpt verify "$CK" "$d" >/dev/null 2>&1 ||
    fail "ckpt verify $CK $d: $("$EA_BIN" ckpt verify "$CK" "$d" 2>&1 | tail -2)"
done
"$EA_BIN" ckpt verify "$CK" >/dev/null 2>&1 || fail "ckpt verify $CK (the newest) fails"
pass "the cluster commits on (LATEST $(latest)); its $(wc -l <<<"$BEFORE") earlier checkpoints are there and verify"
stop_agent s2 KILL
wait_exit s2 10 || true

say "5. an agent of another cluster under the cluster's key is refused by the cluster"
# x1's data dir names a random identity bound to the cluster's key (the
# binding: BLAKE2b-256 keyed with the key, of the context string and the id).
mkdir -p "$EA_TMP/x1/data"
chmod 700 "$EA_TMP/x1/data"
XID=$("$PY" - "$EA_TMP/good.key" "$EA_TMP/x1/data/cluster-id" <<'PYEOF'
import hashlib, os, sys
key = bytes.fromhex(open(sys.argv[1]).read().strip())
cid = os.urandom(16)
bind = hashlib.blake2b(b"elastic-agent cluster-id v1\0" + cid, digest_size=32, key=key).hexdigest()
h = cid.hex()
s = "-".join([h[0:8], h[8:12], h[12:16], h[16:20], h[20:32]])
open(sys.argv[2], "w").write("elastic-agent cluster 1\nid %s\nbind keyed %s\n" % (s, bind))
print(s)
PYEOF
) || fail "cannot write x1's cluster-id"
start_agent x1 --key-file "$EA_TMP/good.key" --join "${AGENT_ADDR[c1]}" "${JOB[@]}"
grep -q "cluster identity $XID (" "$(agent_log x1)" ||
  fail "x1 does not take its persisted identity: $(grep -h cluster "$(agent_log x1)" | head -3)"
wait_for 20 grep -q "member c1 .* belongs to cluster $CID, this node to cluster $XID" "$(agent_log x1)" ||
  fail "x1 does not refuse the cluster naming both: $(grep -h cluster "$(agent_log x1)" | tail -3)"
wait_for 20 grep -q "member x1 .* belongs to cluster $XID, this node to cluster $CID" "$(agent_log c1)" ||
  fail "c1 does not refuse x1 naming both: $(grep -h 'x1' "$(agent_log c1)" | tail -3)"
if wait_for 3 grep -q "committed gen=" "$(agent_log x1)"; then
  fail "x1 runs a generation: $(grep 'committed gen=' "$(agent_log x1)")"
fi
assert_eq "$(js x1 'd["cluster"]["state"]')" "waiting to join" "x1's status cluster.state"
trains c1 2 || fail "the cluster is not at world 2 any more: $(js c1 'd["generation"]')"
l=$(latest)
wait_for 60 latest_moved_from "$l" || fail "the cluster stopped committing after x1"
pass "x1 ($XID) and the cluster ($CID) refuse each other; the cluster trains on at world 2"

say "6. the whole cluster lost; fresh agents with the cluster's key take its identity and resume"
for n in c1 c2 x1; do stop_agent "$n" KILL; done
for n in c1 c2 x1; do wait_exit "$n" 10 || fail "$n did not die"; done
last=$(latest)
start_agent f1 --key-file "$EA_TMP/good.key" --set compute.min_nodes=2 "${JOB[@]}"
start_agent f2 --key-file "$EA_TMP/good.key" --join "${AGENT_ADDR[f1]}" --set compute.min_nodes=2 \
  "${JOB[@]}"
wait_for 30 grep -q "cluster identity $CID adopted from $CK/CLUSTER (bound to this cluster's key)" "$(agent_log f1)" ||
  fail "f1 does not take the identity of $CK/CLUSTER: $(grep -h cluster "$(agent_log f1)" | head -5)"
wait_for 60 grep -q " loaded step-" "$(agent_log f1)" "$(agent_log f2)" ||
  fail "the new agents loaded no checkpoint: $(grep -h 'refus\|loaded' "$(agent_log f1)" "$(agent_log f2)" | head -3)"
wait_for 60 latest_moved_from "$last" || fail "the new agents do not commit into $CK"
assert_eq "$(id_of "$CK/CLUSTER")" "$CID" "$CK/CLUSTER after the new agents"
pass "f1, f2 (fresh data dirs, the cluster's key) are cluster $CID again: resumed and committing"

say "7. a node whose only seed is itself (pod 0 of a StatefulSet whose pods all --join pod 0) starts the cluster"
for n in f1 f2; do stop_agent "$n" KILL; done
P0=127.0.0.1:$(free_port)
AGENT_BIND[p0]=$P0
start_agent p0 --join "$P0" --set compute.min_nodes=1 "${TINY[@]}" --set checkpoint.save_interval_steps=0
wait_for 20 grep -q "every seed of --join $P0 is this node" "$(agent_log p0)" ||
  fail "p0 does not see that its only seed is itself: $(grep -h 'cluster\|join' "$(agent_log p0)" | head -5)"
wait_for 30 trains p0 1 || fail "p0 (its own seed) does not train: $(js p0 'd["cluster"]')"
pass "p0, --join naming only itself, starts the cluster and trains at world 1"

say "WALL $((($(now_ms) - t_start) / 1000)) s"
