/* The job file's keys: the table `ea__cfg_keys[]`, what each key accepts,
 * how one value is parsed and checked, and the defaults.
 *
 * Everything about the job file is driven by this one table: one row per
 * key with its section, name, type, offset into ea_config, allowed range or
 * values, unit and a one-line description.  The loader, ea_config_set, the
 * per-key half of ea_config_validate, ea_config_dump (and so
 * examples/job.yaml and the reference in docs/config.md, which
 * tests/unit/test_config.c checks against the dump) and ea_config_hash, all
 * in config.c, walk that table, so a key is declared once and cannot be
 * settable in one place and unknown in another.
 *
 * Some keys have a second documented name (F_SYNONYM): the deployment
 * guide's job file says compute.worker_nodes, checkpoint.storage_uri, …
 * for what we call compute.max_nodes, checkpoint.dir, …; it loads as
 * written.  tests/e2e/test_config_keys.sh checks that every key is read
 * by code outside this file and config.c.
 *
 * What config.c uses from here (the row type, the table, find_key,
 * canonical, parse_into, the *_expect descriptions, …) is declared in
 * config_int.h. */
#include "config_int.h"

#include "ea_base.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Offset and size of c.SECTION.KEY; the _Generic term makes the build fail
 * when a row's declared type does not match the struct member. */
#define KEY(sec, k, ctype)                                                    \
  .section = #sec, .key = #k,                                                 \
  .off = offsetof(ea_config, sec.k) +                                         \
         0 * sizeof(char[_Generic(((ea_config *)0)->sec.k, ctype : 1, default \
                                  : -1)]),                                    \
  .size = sizeof(((ea_config *)0)->sec.k)
#define U32(sec, k) KEY(sec, k, uint32_t), .type = T_U32
#define U64(sec, k) KEY(sec, k, uint64_t), .type = T_U64
#define BOOL(sec, k) KEY(sec, k, bool), .type = T_BOOL
#define DBL(sec, k) KEY(sec, k, double), .type = T_DOUBLE
#define STR(sec, k) KEY(sec, k, char *), .type = T_STR
#define ENUM(sec, k, ...)                                                 \
  KEY(sec, k, char *), .type = T_ENUM, .choices = (const char *const[]) { \
    __VA_ARGS__, NULL                                                     \
  }

static const char *check_listen(const char *s);
static const char *check_preload(const char *s);
static const char *check_http_url(const char *s);
static const char *check_notice(const char *s);

/* Another documented name of c.SEC.TARGET (same section): the loader and
 * --set parse it by TARGET's row; offsetof makes a misspelt TARGET a build
 * error. */
#define SYN(sec, name, target)                                           \
  .section = #sec, .key = #name, .off = offsetof(ea_config, sec.target), \
  .size = sizeof(((ea_config *)0)->sec.target), .flags = F_SYNONYM, .alias = #target

/* The ranges are sanity bounds, not tuning: they reject typos (a missing or
 * extra zero, a unit mix-up) while leaving every setting an operator might
 * plausibly want.  Where a bound has a harder reason it says so. */
const cfg_key ea__cfg_keys[] = {
    {STR(experiment, name), .flags = F_NONEMPTY,
     .doc = "Name of the run, shown in log lines, status and checkpoint manifests."},
    {U64(experiment, seed), .min = 0, .max = UINT64_MAX,
     .doc = "Seed for weight initialisation and the per-epoch data permutation."},

    {U32(compute, min_nodes), .min = 1, .max = 65536, .unit = "nodes",
     .doc = "Training starts, and continues, only while at least this many nodes are alive."},
    {U32(compute, max_nodes), .min = 1, .max = 65536, .unit = "nodes",
     .doc = "At most this many nodes train; further alive nodes wait as spares."},
    /* The deployment guide's "the nodes the job wants": the target size.  An
     * elastic job still starts with min_nodes and grows to it. */
    {SYN(compute, worker_nodes, max_nodes)},
    /* 64: more local ranks than any current accelerator host carries (8–16). */
    {U32(compute, workers_per_node), .min = 1, .max = 64, .unit = "processes",
     .doc = "Worker processes per node, one per accelerator (like torchrun's nproc_per_node)."},
    {SYN(compute, accelerators_per_worker, workers_per_node)},
    {STR(compute, worker_command),
     .doc = "Program each worker runs (a shell command); empty runs the built-in trainer."},
    {ENUM(compute, protocol, "auto", "builtin", "torchrun", "library"),
     .doc = "How the agent drives the program: torchrun env and restarts (auto with a command), "
            "the built-in trainer (auto without), or library (the worker protocol on fd 3)."},
    {ENUM(compute, warm_start, "auto", "on", "off"),
     .doc = "Keep a warm Python interpreter per local rank, with compute.preload imported, and "
            "start each worker from it (auto: when the program is a Python script; on: refuse "
            "one that is not)."},
    {STR(compute, preload), .check = check_preload,
     .doc = "Modules a warm interpreter imports before it is needed (commas or blanks between "
            "names)."},

    {ENUM(distributed, backend, "auto", "tcp", "nccl"),
     .doc = "Communicator: tcp ring, nccl, or auto (nccl when GPUs and NCCL are present)."},
    /* One choice on purpose: it is what the agent does, and a job file
     * asking for another strategy must fail by name, not train differently. */
    {ENUM(distributed, strategy, "collective_data_parallel"),
     .doc = "Parallelism: collective_data_parallel (every rank holds the whole model; gradients "
            "are all-reduced each step) is the only one."},
    {U32(distributed, global_batch), .min = 1, .max = 1u << 24, .unit = "samples",
     .doc = "Samples per step over all ranks together; fixed whatever the world size."},
    {U32(distributed, micro_batch), .min = 1, .max = 1u << 24, .unit = "samples",
     .doc = "Samples per forward/backward pass; gradients accumulate up to the rank's share."},
    {U32(distributed, gradient_accumulation_steps), .min = 1, .max = 1u << 20, .flags = F_ZERO_OFF,
     .unit = "micro-batches",
     .doc = "Forward/backward passes per step on each rank (its share of global_batch split "
            "evenly); 0: passes of micro_batch samples."},
    {U32(distributed, communication_timeout_seconds), .min = 1, .max = 3600, .unit = "seconds",
     .doc = "A collective that takes longer fails and triggers a new generation."},
    {ENUM(distributed, quorum, "majority", "none"),
     .doc = "majority: only a side seeing most of the last generation trains; none: any side."},
    {U32(distributed, scale_up_delay_ms), .min = 0, .max = 600000, .unit = "milliseconds",
     .doc = "Joining nodes are batched for this long before a new generation takes them in."},

    {STR(checkpoint, dir), .flags = F_URI,
     .doc = "Checkpoint directory, a path or a file:// URI; empty means <data_dir>/checkpoints."},
    {SYN(checkpoint, storage_uri, dir)},
    {U32(checkpoint, save_interval_steps), .min = 0, .max = 1000000000, .unit = "steps",
     .doc = "Checkpoint every this many steps; 0 turns periodic checkpoints off."},
    {BOOL(checkpoint, resume_from_last),
     .doc = "On a cold start, load the newest complete checkpoint."},
    {U32(checkpoint, keep_last), .min = 1, .max = 100000, .unit = "checkpoints",
     .doc = "Complete checkpoints kept; older ones are deleted (the newest never is)."},
    {SYN(checkpoint, keep_last_checkpoints, keep_last)},
    {ENUM(checkpoint, verify_on_resume, "full", "size"),
     .doc = "full: check every shard's hash before resuming; size: check lengths only."},
    {ENUM(checkpoint, busy_policy, "wait", "skip"),
     .doc = "When the previous checkpoint is still being written: wait for it, or skip this one."},
    /* 300 s: a shard of a few GiB on a healthy shared file system is
     * written in well under a minute; five minutes is a store in trouble. */
    {U32(checkpoint, timeout_seconds), .min = 1, .max = 86400, .unit = "seconds",
     .doc = "A shard write or a commit slower than this raises a storage_timeout alert; a "
            "failed final checkpoint is retried this long before the job fails (exit 5)."},

    {ENUM(logging, level, "debug", "info", "warn", "error"), .doc = "Least severe level written."},
    {ENUM(logging, format, "text", "json"), .doc = "text for people, json for log shippers."},
    {STR(logging, file), .doc = "Log file, opened for appending; empty means stderr."},
    {STR(logging, dir), .flags = F_URI,
     .doc = "Log directory, a path or a file:// URI (created): each agent and its workers append "
            "to DIR/NAME.log; logging.file, when given, wins."},
    {SYN(logging, logs_uri, dir)},
    {U32(logging, metrics_interval_steps), .min = 1, .max = 1000000000, .flags = F_ZERO_OFF,
     .unit = "steps",
     .doc = "A progress line (step, loss, steps/s) every this many steps; 0: one every 10 s."},

    {U32(runtime, max_restarts), .min = 0, .max = 1000, .unit = "restarts",
     .doc = "torchrun: restarts of the job after a worker failed, then the job fails; builtin: "
            "restarts of a node's worker, then the node drains (old name failure_retry_times)."},
    /* The old name keeps working (chaos/run.c and older job files use it);
     * a warning at start says it is deprecated. */
    {.section = "runtime",
     .key = "failure_retry_times",
     .off = offsetof(ea_config, runtime.max_restarts),
     .size = sizeof(((ea_config *)0)->runtime.max_restarts),
     .type = T_U32,
     .min = 0,
     .max = 1000,
     .flags = F_ALIAS,
     .alias = "max_restarts",
     .unit = "restarts",
     .doc = "Old name of runtime.max_restarts."},
    {U32(runtime, rendezvous_timeout_seconds), .min = 1, .max = 3600, .unit = "seconds",
     .doc = "A generation that has not committed after this long is abandoned and retried."},
    {SYN(runtime, request_timeout_seconds, rendezvous_timeout_seconds)},
    {U32(runtime, stall_timeout_seconds), .min = 1, .max = 86400, .unit = "seconds",
     .doc = "No step for this long while this node takes part in the job (a generation running, "
            "failed or forming; re-formations do not reset the clock) is a stall: an alert, and "
            "/readyz fails.  Not in restart mode, whose program reports no steps."},
    {U32(runtime, health_check_interval_seconds), .min = 1, .max = 3600, .flags = F_ZERO_OFF,
     .unit = "seconds",
     .doc = "How often a running generation is checked for a stall (alert, /readyz); 0: every "
            "0.5 s sample."},
    {U32(runtime, join_retry_max_ms), .min = 100, .max = 3600000, .unit = "milliseconds",
     .doc = "Ceiling of the exponential backoff between attempts to reach a seed."},
    {U32(runtime, stop_grace_seconds), .min = 1, .max = 3600, .unit = "seconds",
     .doc = "A worker being stopped gets SIGTERM (builtin: STOP first), then SIGKILL this long "
            "after."},
    /* A collective blocked on a dead or frozen peer never returns (gloo's
     * default timeout is 30 min): the SIGTERM's grace must not hold the
     * whole recovery hostage.  500 ms lets a handler flush a log line. */
    {U32(runtime, lost_peer_grace_ms), .min = 0, .max = 600000, .unit = "milliseconds",
     .doc = "torchrun: the grace before SIGKILL when the restart is because a peer died or "
            "froze."},
    {STR(runtime, preemption_notice), .flags = F_NONEMPTY, .check = check_notice,
     .doc = "Poll for a spot/preemption notice and drain at once: none, aws, gcp, azure, or an "
            "http:// URL that answers 200 when the machine is going."},
    {STR(runtime, preemption_metadata_url), .check = check_http_url,
     .doc = "Base address of the metadata service (http://HOST:PORT); empty: the provider's."},
    /* GKE gives about 30 s between notice and reclaim, AWS 2 min: 20 s leaves
     * the drained nodes 10 s to stop and leave on the shortest. */
    {U32(runtime, preemption_grace_seconds), .min = 1, .max = 3600, .flags = F_ZERO_OFF,
     .unit = "seconds",
     .doc = "When drains would leave fewer than min_nodes, or only spares to form the next "
            "generation, the controller first commits a checkpoint of the current step "
            "(restart mode: SIGUSR1 to the programs, this long to save theirs) and waits this "
            "long at most; 0: off."},
    /* 64: the failure times the controller keeps per node (rdzv/rdzv.c). */
    {U32(runtime, flap_threshold), .min = 1, .max = 64, .flags = F_ZERO_OFF, .unit = "failures",
     .doc = "A node that fails (dies, restarts, a worker crashes) more than this many times "
            "within flap_window_seconds is held out of generations; 0: never."},
    {U32(runtime, flap_window_seconds), .min = 1, .max = 86400, .unit = "seconds",
     .doc = "The window in which a node's failures are counted against flap_threshold."},
    {U32(runtime, flap_cooldown_seconds), .min = 1, .max = 86400, .unit = "seconds",
     .doc = "How long a flapping node (or an evicted straggler) is held out the first time; "
            "doubled on each repeat, up to an hour (or this, when longer)."},

    /* Membership: the names are ea_swim_config's fields; defaults come from
     * ea_swim_config_default (membership/swim_config.c). */
    {U32(membership, probe_interval_ms), .min = 10, .max = 60000, .unit = "milliseconds",
     .doc = "SWIM protocol period: one member is probed per interval."},
    {U32(membership, probe_timeout_ms), .min = 1, .max = 60000, .unit = "milliseconds",
     .doc = "Wait for a direct ack before asking others to probe; below probe_interval_ms."},
    {U32(membership, indirect_checks), .min = 0, .max = 16, .unit = "members",
     .doc = "Members asked to probe indirectly after a missed ack (SWIM's k)."},
    {U32(membership, suspicion_mult), .min = 1, .max = 64,
     .doc = "Minimum suspicion timeout = mult x log10(max(N,10)) x probe interval."},
    {U32(membership, suspicion_max_mult), .min = 1, .max = 64,
     .doc = "Maximum suspicion timeout = max_mult x minimum; shrinks with confirmations."},
    {U32(membership, retransmit_mult), .min = 1, .max = 64,
     .doc = "Each update is piggybacked about mult x log10(N+1) times."},
    {U32(membership, awareness_max), .min = 1, .max = 64,
     .doc = "Ceiling of the Lifeguard local-health multiplier on probe timeouts."},
    {U32(membership, gossip_interval_ms), .min = 5, .max = 60000, .unit = "milliseconds",
     .doc = "Period of the extra gossip rounds that spread pending updates."},
    {U32(membership, gossip_nodes), .min = 1, .max = 64, .unit = "members",
     .doc = "Members sent pending updates per gossip round."},
    /* Below a second, full-state exchanges would cost more than the UDP
     * gossip they back up. */
    {U32(membership, push_pull_interval_ms), .min = 1000, .max = 86400000, .flags = F_ZERO_OFF,
     .unit = "milliseconds",
     .doc = "Period of the TCP full-state exchange (anti-entropy); 0 turns it off."},
    {U32(membership, dead_reclaim_ms), .min = 1000, .max = 86400000, .unit = "milliseconds",
     .doc = "Dead and left members are forgotten after this long."},
    /* Serf's reconnect_interval / reconnect_timeout (30 s / 24 h). */
    {U32(membership, reconnect_interval_ms), .min = 100, .max = 86400000, .flags = F_ZERO_OFF,
     .unit = "milliseconds",
     .doc = "Period of a push-pull with one forgotten dead member, so a partition longer than "
            "dead_reclaim_ms heals; 0 turns it off."},
    {U32(membership, reconnect_timeout_ms), .min = 1000, .max = 604800000, .flags = F_ZERO_OFF,
     .unit = "milliseconds",
     .doc = "A forgotten dead member is tried for this long; 0: never tried."},
    /* 512: room for a ping and a few piggybacked updates; the top is the
     * largest plaintext that still seals into one EA_WIRE_MAX_PACKET. */
    {U32(membership, max_packet), .min = 512, .max = EA_WIRE_MAX_PACKET - EA_WIRE_SEAL_RP_OVERHEAD,
     .unit = "bytes", .doc = "Plaintext budget of one gossip packet (before sealing)."},

    {STR(observability, metrics_listen), .check = check_listen,
     .doc = "HOST:PORT serving /metrics, /healthz and /readyz (port 0: any free one); empty: off."},
    {BOOL(observability, alert_on_nan), .doc = "Raise an alert when the loss is NaN or infinite."},
    {SYN(observability, alert_on_loss_nan, alert_on_nan)},
    {BOOL(observability, alert_on_checkpoint_failure),
     .doc = "A checkpoint that fails is an alert (error line, alert counter); false: a warning."},
    {U32(observability, metrics_export_interval_seconds), .min = 1, .max = 86400,
     .flags = F_ZERO_OFF, .unit = "seconds",
     .doc = "A `metrics` log line (step, loss, steps/s, world, generation as fields) this often; "
            "0: none."},
    {DBL(observability, straggler_factor), .dmin = 1.0, .dmax = 100.0, .flags = F_MIN_OPEN,
     .unit = "x median",
     .doc = "A rank whose step compute time is over this many times the median of the ranks' "
            "for straggler_window_seconds is a straggler: an alert, and in status."},
    {U32(observability, straggler_window_seconds), .min = 1, .max = 86400, .unit = "seconds",
     .doc = "How long a rank must stay over straggler_factor x the median to be a straggler."},
    {BOOL(observability, straggler_evict),
     .doc = "A straggler's node is also held out of generations (runtime.flap_cooldown_seconds, "
            "doubled on each repeat) and the job re-forms without it."},
    {STR(observability, alertmanager_url), .check = check_http_url,
     .doc = "Prometheus Alertmanager (http://HOST:PORT) that alerts are pushed to; empty: off."},
    /* Prometheus' --rules.alert.resend-delay (1m). */
    {U32(observability, alert_resend_seconds), .min = 1, .max = 3600, .unit = "seconds",
     .doc = "A firing condition is re-sent to Alertmanager this often, with endsAt four re-sends "
            "ahead, so Alertmanager resolves it by itself if this agent goes away."},
    {STR(observability, alert_webhook), .check = check_http_url,
     .doc = "URL each alert is POSTed to as one JSON document; empty: off."},
    {STR(observability, alert_command),
     .doc = "Shell command run for each alert, with EA_ALERT_KIND, EA_ALERT_SUMMARY, … set; "
            "empty: off."},

    {STR(train, model), .flags = F_NONEMPTY, .doc = "Built-in trainer's model."},
    {STR(train, data), .flags = F_NONEMPTY,
     .doc = "File or directory of training text for the built-in trainer."},
    {U32(train, context), .min = 1, .max = 4096, .unit = "bytes",
     .doc = "Bytes of context the model sees to predict the next byte."},
    {U32(train, embed_dim), .min = 1, .max = 4096, .doc = "Width of each byte's embedding."},
    {U32(train, hidden), .min = 1, .max = 65536, .doc = "Width of each hidden layer."},
    {U32(train, layers), .min = 1, .max = 64, .doc = "Number of hidden layers."},
    {U64(train, steps), .min = 1, .max = UINT64_C(1000000000000), .unit = "steps",
     .doc = "Optimizer steps to train for (the built-in trainer; a library-mode program is given "
            "it as EA_TRAIN_STEPS)."},
    {DBL(train, lr), .dmin = 0.0, .dmax = 10.0, .flags = F_MIN_OPEN,
     .doc = "Peak learning rate (AdamW), reached after warmup."},
    {DBL(train, weight_decay), .dmin = 0.0, .dmax = 1.0, .doc = "AdamW decoupled weight decay."},
    {U32(train, warmup_steps), .min = 0, .max = 1000000000, .unit = "steps",
     .doc = "Linear learning-rate warmup; at most train.steps."},
};
const size_t ea__cfg_nkeys = sizeof ea__cfg_keys / sizeof ea__cfg_keys[0];
_Static_assert(sizeof ea__cfg_keys / sizeof ea__cfg_keys[0] <= EA__CFG_NKEYS_MAX,
               "EA__CFG_NKEYS_MAX (config_int.h) is below the number of keys");

/* ---- small helpers ------------------------------------------------------ */

/* Levenshtein distance, for "did you mean" on unknown names (short words). */
static size_t edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 63 || lb > 63) return 64;
  size_t row[64];
  for (size_t j = 0; j <= lb; j++) row[j] = j;
  for (size_t i = 1; i <= la; i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t up = row[j];
      size_t best = diag + (a[i - 1] != b[j - 1]);
      if (row[j] + 1 < best) best = row[j] + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[lb];
}

/* The closest name within two edits, or one the word begins (a unit
 * suffix left off: probe_interval → probe_interval_ms), or NULL.  section
 * NULL: compare against section names, else against that section's keys. */
static const char *suggest(const char *section, const char *word) {
  const char *best = NULL;
  size_t bestd = 3;
  const size_t lw = strlen(word);
  for (size_t i = 0; i < ea__cfg_nkeys; i++) {
    const char *cand = section ? ea__cfg_keys[i].key : ea__cfg_keys[i].section;
    if (section && strcmp(ea__cfg_keys[i].section, section) != 0) continue;
    if (!section && i > 0 && strcmp(ea__cfg_keys[i - 1].section, cand) == 0) continue; /* seen */
    size_t d;
    if (lw >= 4 && strncmp(cand, word, lw) == 0) {
      d = 1;
    } else {
      /* the distance is at least the difference in length: skip the table */
      size_t lc = strlen(cand);
      if ((lc > lw ? lc - lw : lw - lc) >= bestd) continue;
      d = edit_distance(word, cand);
    }
    if (d < bestd) bestd = d, best = cand;
  }
  return best;
}

bool ea__cfg_section_known(const char *s, size_t len) {
  for (size_t i = 0; i < ea__cfg_nkeys; i++)
    if (strlen(ea__cfg_keys[i].section) == len && memcmp(ea__cfg_keys[i].section, s, len) == 0)
      return true;
  return false;
}

const cfg_key *ea__cfg_find_key(const char *section, const char *key) {
  for (size_t i = 0; i < ea__cfg_nkeys; i++)
    if (strcmp(ea__cfg_keys[i].section, section) == 0 && strcmp(ea__cfg_keys[i].key, key) == 0)
      return &ea__cfg_keys[i];
  return NULL;
}

/* The row a name stands for: itself, or the key an alias names. */
const cfg_key *ea__cfg_canonical(const cfg_key *k) {
  if (!(k->flags & OTHER_NAME)) return k;
  const cfg_key *c = ea__cfg_find_key(k->section, k->alias);
  return c ? c : k;
}

/* Bit of an alias row in ea_config.aliases_used: its rank among the aliases. */
uint32_t ea__cfg_alias_bit(const cfg_key *k) {
  uint32_t n = 0;
  for (const cfg_key *p = ea__cfg_keys; p < k; p++)
    if (p->flags & F_ALIAS) n++;
  return n < 32 ? 1u << n : 0;
}

void ea__cfg_note_alias(ea_config *c, const cfg_key *k) {
  if (k->flags & F_ALIAS) c->aliases_used |= ea__cfg_alias_bit(k);
}

/* "unknown section (expected experiment, compute, …)" or a suggestion. */
void ea__cfg_unknown_section_msg(const char *name, char *why, size_t len) {
  const char *s = suggest(NULL, name);
  if (s) {
    snprintf(why, len, "unknown section (did you mean %s?)", s);
    return;
  }
  size_t n = (size_t)snprintf(why, len, "unknown section (expected one of");
  const char *prev = NULL;
  for (size_t i = 0; i < ea__cfg_nkeys && n < len; i++) {
    if (prev && strcmp(prev, ea__cfg_keys[i].section) == 0) continue;
    n += (size_t)snprintf(why + n, len - n, "%s %s", prev ? "," : "", ea__cfg_keys[i].section);
    prev = ea__cfg_keys[i].section;
  }
  if (n < len) snprintf(why + n, len - n, ")");
}

void ea__cfg_unknown_key_msg(const char *section, const char *key, char *why, size_t len) {
  const char *s = suggest(section, key);
  if (s)
    snprintf(why, len, "unknown key (did you mean %s?)", s);
  else
    snprintf(why, len, "unknown key");
}

/* How a scalar appears in a message: plain as written, quoted marked as
 * such, shortened so the message stays one readable line. */
static void show_value(const char *s, size_t len, bool quoted, bool is_null, char *out,
                       size_t cap) {
  if (is_null || (len == 0 && !quoted)) {
    snprintf(out, cap, "nothing");
    return;
  }
  char tmp[48];
  size_t n = 0;
  for (size_t i = 0; i < len && n + 5 < sizeof tmp; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (ch < 0x20 || ch == 0x7f) {
      n += (size_t)snprintf(tmp + n, sizeof tmp - n, "\\x%02x", ch);
    } else {
      tmp[n++] = (char)ch;
    }
  }
  tmp[n] = 0;
  const char *more = n < len ? "..." : "";
  if (quoted)
    snprintf(out, cap, "the quoted string \"%s%s\"", tmp, more);
  else
    snprintf(out, cap, "%s%s", tmp, more);
}

/* ---- per-key rules: one description, one check ---------------------------*/

/* "an integer in 10..60000", "0 (off) or an integer in 1000..86400000". */
void ea__cfg_int_expect(const cfg_key *k, char *out, size_t cap) {
  if (k->flags & F_ZERO_OFF)
    snprintf(out, cap, "0 (off) or an integer in %llu..%llu", (unsigned long long)k->min,
             (unsigned long long)k->max);
  else
    snprintf(out, cap, "an integer in %llu..%llu", (unsigned long long)k->min,
             (unsigned long long)k->max);
}

void ea__cfg_dbl_expect(const cfg_key *k, char *out, size_t cap) {
  snprintf(out, cap, "a number in %c%g, %g]", (k->flags & F_MIN_OPEN) ? '(' : '[', k->dmin,
           k->dmax);
}

void ea__cfg_enum_expect(const cfg_key *k, char *out, size_t cap) {
  size_t n = (size_t)snprintf(out, cap, "one of");
  for (size_t i = 0; k->choices[i] && n < cap; i++)
    n += (size_t)snprintf(out + n, cap - n, "%s %s", i ? "," : "", k->choices[i]);
}

bool ea__cfg_int_ok(const cfg_key *k, uint64_t v) {
  return (v >= k->min && v <= k->max) || (v == 0 && (k->flags & F_ZERO_OFF));
}

bool ea__cfg_dbl_ok(const cfg_key *k, double v) {
  if (!isfinite(v)) return false;
  if ((k->flags & F_MIN_OPEN) ? v <= k->dmin : v < k->dmin) return false;
  return v <= k->dmax;
}

/* A string value's rules (length, emptiness, choices, syntax): NULL when
 * fine, else what is wrong.  *expectation is set when the text is an
 * "expected …" phrase, to which the caller adds how the value was written.
 * s is NUL-terminated at len (libyaml terminates its scalars). */
const char *ea__cfg_str_problem(const cfg_key *k, const char *s, size_t len, char *why, size_t cap,
                                bool *expectation) {
  *expectation = false;
  if (len >= k->size) {
    snprintf(why, cap, "too long: %zu bytes, at most %zu", len, k->size - 1);
    return why;
  }
  if (memchr(s, 0, len)) return "contains a NUL byte";
  if (len == 0 && (k->flags & F_NONEMPTY)) return "must not be empty";
  if (k->type == T_ENUM) {
    for (size_t i = 0; k->choices[i]; i++)
      if (strlen(k->choices[i]) == len && memcmp(k->choices[i], s, len) == 0) return NULL;
    char expect[160];
    ea__cfg_enum_expect(k, expect, sizeof expect);
    snprintf(why, cap, "expected %s", expect);
    *expectation = true;
    return why;
  }
  const char *p = k->check && len ? k->check(s) : NULL;
  *expectation = p != NULL;
  return p;
}

static const char *check_http_url(const char *s) {
  if (!s[0] || strncmp(s, "http://", 7) == 0 || strncmp(s, "https://", 8) == 0) return NULL;
  return "expected an http:// or https:// URL, or \"\" for off";
}

static const char *check_notice(const char *s) {
  if (!strcmp(s, "none") || !strcmp(s, "aws") || !strcmp(s, "gcp") || !strcmp(s, "azure"))
    return NULL;
  if (strncmp(s, "http://", 7) == 0 || strncmp(s, "https://", 8) == 0) return NULL;
  return "expected none, aws, gcp, azure or an http:// URL";
}

/* HOST:PORT, HOST an address or name (IPv6 in brackets), PORT 0..65535
 * (0: a free port, logged at start; for tests and many agents per host). */
/* compute.preload: module names (the agent's warm.c owns the rule; the
 * same rule is repeated here because config sits below the agent). */
static const char *check_preload(const char *s) {
  for (const char *p = s; *p;) {
    p += strspn(p, ", \t");
    size_t k = strcspn(p, ", \t");
    if (!k) break;
    for (size_t i = 0; i < k; i++) {
      char c = p[i];
      bool alpha = c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
      bool digit = c >= '0' && c <= '9';
      bool first = i == 0 || p[i - 1] == '.';
      if (alpha || (digit && !first) || (c == '.' && !first && i + 1 < k)) continue;
      return "module names (dotted Python identifiers) separated by commas or blanks";
    }
    p += k;
  }
  return NULL;
}

static const char *check_listen(const char *s) {
  const char *colon = strrchr(s, ':');
  const char *bad = "expected HOST:PORT with PORT in 0..65535 (IPv6 as [::1]:9400)";
  if (!colon || colon == s || !colon[1]) return bad;
  size_t hostlen = (size_t)(colon - s);
  if (s[0] == '[' ? hostlen < 3 || s[hostlen - 1] != ']' : memchr(s, ':', hostlen) != NULL)
    return bad;
  unsigned long port = 0;
  for (const char *p = colon + 1; *p; p++) {
    if (*p < '0' || *p > '9' || port > 65535) return bad;
    port = port * 10 + (unsigned long)(*p - '0');
  }
  return port <= 65535 ? NULL : bad;
}

/* A F_URI value as the path to store: a plain path as written, or the path
 * of a file:// URI (file:///abs, file://localhost/abs; %XX decoded).  Any
 * other scheme is refused by name: the agent writes through the file
 * system, so an object store has to be mounted (s3fs, gcsfuse, NFS) and
 * given as its mount point.  NULL when fine, else what is wrong. */
static const char *uri_to_path(const char *s, size_t len, char *out, size_t cap, char *why,
                               size_t whycap) {
  size_t n = 0;
  while (n < len &&
         ((s[n] >= 'a' && s[n] <= 'z') || (s[n] >= 'A' && s[n] <= 'Z') ||
          (n > 0 && ((s[n] >= '0' && s[n] <= '9') || s[n] == '+' || s[n] == '-' || s[n] == '.'))))
    n++;
  bool is_uri = n > 0 && len - n >= 3 && memcmp(s + n, "://", 3) == 0;
  if (!is_uri) {
    if (len >= cap) return "too long";
    memcpy(out, s, len);
    out[len] = 0;
    return NULL;
  }
  if (n != 4 || strncasecmp(s, "file", 4) != 0) {
    snprintf(why, whycap,
             "scheme %.*s:// is not supported: use a file:// URI or a plain path (an object "
             "store must be mounted and given as its mount point)",
             (int)(n < 16 ? n : 16), s);
    return why;
  }
  const char *p = s + 7, *end = s + len;
  if ((size_t)(end - p) >= 10 && strncasecmp(p, "localhost/", 10) == 0) p += 9;
  if (p == end || *p != '/') {
    const char *slash = memchr(p, '/', (size_t)(end - p));
    size_t hl = (size_t)((slash ? slash : end) - p);
    snprintf(why, whycap,
             "file:// URI names the host '%.*s': write file:///ABSOLUTE/PATH or a plain path",
             (int)(hl > 40 ? 40 : hl), p);
    return why;
  }
  size_t o = 0;
  for (; p < end; p++) {
    int c = (unsigned char)*p;
    if (c == '%') {
      if (end - p < 3 || !isxdigit((unsigned char)p[1]) || !isxdigit((unsigned char)p[2]))
        return "file:// URI has a '%' not followed by two hex digits";
      char hex[3] = {p[1], p[2], 0};
      c = (int)strtol(hex, NULL, 16);
      if (c == 0) return "file:// URI encodes a NUL byte";
      p += 2;
    }
    if (o + 1 >= cap) return "too long";
    out[o++] = (char)c;
  }
  out[o] = 0;
  /* The job file is UTF-8 text, and so is every value the dump writes back:
   * a %XX that decodes to a byte sequence that is not UTF-8 could not be
   * written back as the same path (found by fuzz_config). */
  for (size_t i = 0; i < o;) {
    size_t k = ea_utf8_len((const unsigned char *)out + i);
    if (!k) return "file:// URI decodes to bytes that are not UTF-8";
    i += k;
  }
  return NULL;
}

/* Decimal digits only: YAML 1.1 reads a leading 0 as octal and accepts
 * 0x…, 1_000 and sexagesimal 1:30, none of which an operator means here. */
static bool parse_u64(const char *s, size_t len, uint64_t *out) {
  if (len == 0 || len > 20) return false;
  uint64_t v = 0;
  for (size_t i = 0; i < len; i++) {
    if (s[i] < '0' || s[i] > '9') return false;
    unsigned d = (unsigned)(s[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

/* A decimal number: [+-]digits[.digits][e[+-]digits] (or .5).  strtod alone
 * would also take "inf", "nan" and hex floats. */
static bool parse_double(const char *s, size_t len, double *out) {
  char buf[64];
  if (len == 0 || len >= sizeof buf) return false;
  memcpy(buf, s, len);
  buf[len] = 0;
  size_t i = 0, digits = 0;
  if (buf[i] == '+' || buf[i] == '-') i++;
  while (buf[i] >= '0' && buf[i] <= '9') i++, digits++;
  if (buf[i] == '.') {
    i++;
    while (buf[i] >= '0' && buf[i] <= '9') i++, digits++;
  }
  if (digits == 0) return false;
  if (buf[i] == 'e' || buf[i] == 'E') {
    i++;
    if (buf[i] == '+' || buf[i] == '-') i++;
    size_t ed = 0;
    while (buf[i] >= '0' && buf[i] <= '9') i++, ed++;
    if (ed == 0) return false;
  }
  if (buf[i]) return false;
  *out = strtod(buf, NULL); /* underflow gives 0 or a denormal: the range check decides */
  return isfinite(*out);
}

static int parse_bool(const char *s, size_t len, bool *out) {
  static const char *const yes[] = {"true", "yes", "on"}, *const no[] = {"false", "no", "off"};
  for (size_t i = 0; i < 3; i++) {
    if (strlen(yes[i]) == len && strncasecmp(s, yes[i], len) == 0) return *out = true, 1;
    if (strlen(no[i]) == len && strncasecmp(s, no[i], len) == 0) return *out = false, 1;
  }
  return 0;
}

/* Parse one scalar for key k and store it into c.  `quoted`: the YAML
 * scalar was quoted or a block scalar, i.e. a string whatever it looks
 * like; `is_null`: plain empty, ~ or null.  On error writes what is wrong
 * into why and returns -EINVAL; c is untouched. */
int ea__cfg_parse_into(ea_config *c, const cfg_key *k, const char *s, size_t len, bool quoted,
                       bool is_null, char *why, size_t cap) {
  char shown[80], expect[160];
  show_value(s, len, quoted, is_null, shown, sizeof shown);
  switch (k->type) {
    case T_U32:
    case T_U64: {
      uint64_t v = 0;
      ea__cfg_int_expect(k, expect, sizeof expect);
      if (quoted || is_null || !parse_u64(s, len, &v) || !ea__cfg_int_ok(k, v)) {
        snprintf(why, cap, "expected %s, found %s", expect, shown);
        return -EINVAL;
      }
      if (k->type == T_U32)
        *(uint32_t *)ea__cfg_field(c, k) = (uint32_t)v;
      else
        *(uint64_t *)ea__cfg_field(c, k) = v;
      return 0;
    }
    case T_DOUBLE: {
      double v = 0;
      ea__cfg_dbl_expect(k, expect, sizeof expect);
      if (quoted || is_null || !parse_double(s, len, &v) || !ea__cfg_dbl_ok(k, v)) {
        snprintf(why, cap, "expected %s, found %s", expect, shown);
        return -EINVAL;
      }
      *(double *)ea__cfg_field(c, k) = v;
      return 0;
    }
    case T_BOOL: {
      bool v = false;
      if (quoted || is_null || !parse_bool(s, len, &v)) {
        snprintf(why, cap, "expected true or false (or yes/no, on/off), found %s", shown);
        return -EINVAL;
      }
      *(bool *)ea__cfg_field(c, k) = v;
      return 0;
    }
    case T_STR:
    case T_ENUM: {
      if (is_null) len = 0;
      char path[EA_PATH_MAX];
      if (k->flags & F_URI) {
        const char *p = uri_to_path(s, len, path, sizeof path, expect, sizeof expect);
        if (p) {
          snprintf(why, cap, "%s", p);
          return -EINVAL;
        }
        s = path, len = strlen(path);
      }
      bool expectation;
      const char *p = ea__cfg_str_problem(k, s, len, expect, sizeof expect, &expectation);
      if (p) {
        snprintf(why, cap, expectation ? "%s, found %s" : "%s", p, shown);
        return -EINVAL;
      }
      char *dst = ea__cfg_field(c, k);
      memset(dst, 0, k->size); /* zero tail: equal configs are equal bytes */
      memcpy(dst, s, len);
      return 0;
    }
  }
  snprintf(why, cap, "internal error: unknown type");
  return -EINVAL;
}

/* ---- defaults ------------------------------------------------------------*/

void ea_config_default(ea_config *c) {
  memset(c, 0, sizeof *c);
  snprintf(c->experiment.name, sizeof c->experiment.name, "default");
  c->experiment.seed = 1234;
  c->compute.min_nodes = 1;
  c->compute.max_nodes = 64;
  c->compute.workers_per_node = 1;
  snprintf(c->compute.protocol, sizeof c->compute.protocol, "auto");
  snprintf(c->compute.warm_start, sizeof c->compute.warm_start, "auto");
  /* torch._dynamo too: torch 2.x imports it when the first optimizer is
   * built (a second on this machine's 2.15.0), so every training script
   * pays for it before its first step. */
  snprintf(c->compute.preload, sizeof c->compute.preload,
           "torch, torch.distributed, torch._dynamo");
  snprintf(c->distributed.backend, sizeof c->distributed.backend, "auto");
  snprintf(c->distributed.strategy, sizeof c->distributed.strategy, "collective_data_parallel");
  c->distributed.global_batch = 64;
  c->distributed.micro_batch = 16;
  /* 10 s: a healthy ring allreduce of the built-in model takes milliseconds;
   * NCCL's own default (30 min) is far too long to notice a dead peer. */
  c->distributed.communication_timeout_seconds = 10;
  snprintf(c->distributed.quorum, sizeof c->distributed.quorum, "majority");
  c->distributed.scale_up_delay_ms = 2000; /* batches a rack powering on together */
  c->checkpoint.save_interval_steps = 100;
  c->checkpoint.resume_from_last = true;
  c->checkpoint.keep_last = 3;
  snprintf(c->checkpoint.verify_on_resume, sizeof c->checkpoint.verify_on_resume, "full");
  snprintf(c->checkpoint.busy_policy, sizeof c->checkpoint.busy_policy, "wait");
  c->checkpoint.timeout_seconds = 300;
  snprintf(c->logging.level, sizeof c->logging.level, "info");
  snprintf(c->logging.format, sizeof c->logging.format, "text");
  /* torchrun restarts 0 times by default and waits 900 s for a rendezvous
   * (pods being scheduled); agents here are already running, so a few
   * restarts absorb a flaky worker and 30 s is ample for a generation. */
  c->runtime.max_restarts = 3;
  c->runtime.rendezvous_timeout_seconds = 30;
  /* 300 s: well past a first step that waits for a checkpoint load or an
   * NCCL init (tens of seconds), well short of the hours a hung job would
   * otherwise burn before anyone looks. */
  c->runtime.stall_timeout_seconds = 300;
  c->runtime.join_retry_max_ms = 5000;
  /* torchrun's agent waits 30 s after SIGTERM; 5 s keeps a drain (and a
   * restart after a clean failure) quick and is the supervisor's old STOP
   * grace. */
  c->runtime.stop_grace_seconds = 5;
  c->runtime.lost_peer_grace_ms = 500;
  snprintf(c->runtime.preemption_notice, sizeof c->runtime.preemption_notice, "none");
  c->runtime.preemption_grace_seconds = 20;
  /* Four failures in five minutes is no longer bad luck; a minute out
   * (then 2, 4, …) lets the others train while someone looks. */
  c->runtime.flap_threshold = 3;
  c->runtime.flap_window_seconds = 300;
  c->runtime.flap_cooldown_seconds = 60;
  ea_swim_config_default(&c->membership);
  snprintf(c->observability.metrics_listen, sizeof c->observability.metrics_listen,
           "127.0.0.1:9400");
  c->observability.alert_on_nan = true;
  c->observability.alert_on_checkpoint_failure = true;
  c->observability.straggler_factor = 2.0;
  /* Half a minute: a checkpoint or a GC pause is seconds; a slow GPU or a
   * noisy neighbour lasts. */
  c->observability.straggler_window_seconds = 30;
  c->observability.straggler_evict = false;
  c->observability.alert_resend_seconds = 60;
  snprintf(c->train.model, sizeof c->train.model, "byte-mlp");
  snprintf(c->train.data, sizeof c->train.data, "/usr/share/common-licenses");
  c->train.context = 16;
  c->train.embed_dim = 24;
  c->train.hidden = 256;
  c->train.layers = 2;
  c->train.steps = 2000;
  c->train.lr = 3e-3;
  c->train.weight_decay = 0.01;
  c->train.warmup_steps = 50;
}
