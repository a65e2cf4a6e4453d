/* The job file: defaults, the YAML loader, `--set` overrides, cross-field
 * validation, the dump and the configuration hash.
 *
 * Everything here is driven by one table, `keys[]`: one row per key with its
 * section, name, type, offset into ea_config, allowed range or values, unit
 * and a one-line description.  The loader, ea_config_set, the per-key half of
 * ea_config_validate, ea_config_dump (and so examples/job.yaml and the
 * reference in docs/config.md, which tests/unit/test_config.c checks against
 * the dump) and ea_config_hash all walk that table, so a key is declared
 * once and cannot be settable in one place and unknown in another.
 *
 * The loader uses libyaml's document API: a job file is a few kilobytes, and
 * a node tree with start marks makes "FILE:LINE: section.key: problem"
 * messages and duplicate-key detection simple.  The schema is strict on
 * purpose — an operator who mistypes a key or a value in a file that drives
 * hundreds of GPUs wants to hear about it before the job starts, not find a
 * default silently in force — so unknown sections and keys, duplicates, and
 * values of the wrong type or out of range are errors, and a file's every
 * problem is reported at once, a line each.  Loading and setting work on a
 * copy, so on error the caller's configuration is unchanged.
 *
 * Some keys have a second documented name (F_SYNONYM): the deployment
 * guide's job file says compute.worker_nodes, checkpoint.storage_uri, …
 * for what we call compute.max_nodes, checkpoint.dir, …; it loads as
 * written.  tests/e2e/test_config_keys.sh checks that every key is read
 * by code outside this file.
 *
 * Why one file of over 1000 lines: the loader, --set, validate and the dump
 * are each a short walk over keys[] sharing the table's row type and its
 * per-key helpers (find_key, canonical, parse_into, the *_expect
 * descriptions, errf); the loader alone uses a dozen of these names and
 * --set ten.  Splitting would turn the row type, the table and those
 * helpers into an internal interface of its own, for files of 150-250
 * lines each. */
#include "ea_config.h"

#include "ea_base.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <yaml.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack: hashing never allocates */
#include <xxh_x86dispatch.h>

/* A job file is a few kilobytes; 1 MiB leaves room for generous comments
 * while refusing to slurp a wrong path such as a dataset or /dev/zero. */
#define CFG_FILE_MAX (1u << 20)

typedef enum { T_U32, T_U64, T_BOOL, T_DOUBLE, T_STR, T_ENUM } cfg_type;

enum {
  F_ZERO_OFF = 1u << 0, /* integer: 0 (= off) is allowed besides min..max */
  F_NONEMPTY = 1u << 1, /* string: "" is not allowed */
  F_MIN_OPEN = 1u << 2, /* double: the lower bound is exclusive */
  F_ALIAS = 1u << 3,    /* an old name of the key `alias`: loads and sets the
                           same field, not dumped, hashed or documented */
  F_SYNONYM = 1u << 4,  /* another documented name of the key `alias` (the
                           deployment guide's vocabulary): like F_ALIAS, but
                           named in that key's description and never warned
                           about */
  F_URI = 1u << 5,      /* string: a plain path or a file:// URI, stored as a
                           path; any other scheme is refused by name */
};

typedef struct {
  const char *section, *key;
  cfg_type type;
  size_t off, size;
  uint64_t min, max; /* T_U32, T_U64 */
  double dmin, dmax; /* T_DOUBLE */
  unsigned flags;
  const char *const *choices; /* T_ENUM: NULL-terminated */
  /* T_STR: extra syntax check; returns NULL or what is wrong. */
  const char *(*check)(const char *s);
  const char *unit;  /* "milliseconds", "bytes", … or NULL */
  const char *doc;   /* one sentence, shown in the dump and the reference */
  const char *alias; /* F_ALIAS, F_SYNONYM: the key (same section) this name stands for */
} cfg_key;

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
static const cfg_key keys[] = {
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
     .doc = "When drains (notices, SIGTERM) would leave fewer than min_nodes, the controller "
            "first commits a checkpoint of the current step (restart mode: SIGUSR1 to the "
            "programs, this long to save their own) and waits this long at most; 0: off."},
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
     .doc = "Optimizer steps to train for."},
    {DBL(train, lr), .dmin = 0.0, .dmax = 10.0, .flags = F_MIN_OPEN,
     .doc = "Peak learning rate (AdamW), reached after warmup."},
    {DBL(train, weight_decay), .dmin = 0.0, .dmax = 1.0, .doc = "AdamW decoupled weight decay."},
    {U32(train, warmup_steps), .min = 0, .max = 1000000000, .unit = "steps",
     .doc = "Linear learning-rate warmup; at most train.steps."},
};
#define NKEYS (sizeof keys / sizeof keys[0])

/* ---- small helpers ------------------------------------------------------ */

static void *field(ea_config *c, const cfg_key *k) {
  return (char *)c + k->off;
}
static const void *cfield(const ea_config *c, const cfg_key *k) {
  return (const char *)c + k->off;
}

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
  for (size_t i = 0; i < NKEYS; i++) {
    const char *cand = section ? keys[i].key : keys[i].section;
    if (section && strcmp(keys[i].section, section) != 0) continue;
    if (!section && i > 0 && strcmp(keys[i - 1].section, cand) == 0) continue; /* seen */
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

static bool section_known(const char *s, size_t len) {
  for (size_t i = 0; i < NKEYS; i++)
    if (strlen(keys[i].section) == len && memcmp(keys[i].section, s, len) == 0) return true;
  return false;
}

static const cfg_key *find_key(const char *section, const char *key) {
  for (size_t i = 0; i < NKEYS; i++)
    if (strcmp(keys[i].section, section) == 0 && strcmp(keys[i].key, key) == 0) return &keys[i];
  return NULL;
}

#define OTHER_NAME (F_ALIAS | F_SYNONYM)

/* The row a name stands for: itself, or the key an alias names. */
static const cfg_key *canonical(const cfg_key *k) {
  if (!(k->flags & OTHER_NAME)) return k;
  const cfg_key *c = find_key(k->section, k->alias);
  return c ? c : k;
}

/* Bit of an alias row in ea_config.aliases_used: its rank among the aliases. */
static uint32_t alias_bit(const cfg_key *k) {
  uint32_t n = 0;
  for (const cfg_key *p = keys; p < k; p++)
    if (p->flags & F_ALIAS) n++;
  return n < 32 ? 1u << n : 0;
}

static void note_alias(ea_config *c, const cfg_key *k) {
  if (k->flags & F_ALIAS) c->aliases_used |= alias_bit(k);
}

/* "unknown section (expected experiment, compute, …)" or a suggestion. */
static void unknown_section_msg(const char *name, char *why, size_t len) {
  const char *s = suggest(NULL, name);
  if (s) {
    snprintf(why, len, "unknown section (did you mean %s?)", s);
    return;
  }
  size_t n = (size_t)snprintf(why, len, "unknown section (expected one of");
  const char *prev = NULL;
  for (size_t i = 0; i < NKEYS && n < len; i++) {
    if (prev && strcmp(prev, keys[i].section) == 0) continue;
    n += (size_t)snprintf(why + n, len - n, "%s %s", prev ? "," : "", keys[i].section);
    prev = keys[i].section;
  }
  if (n < len) snprintf(why + n, len - n, ")");
}

static void unknown_key_msg(const char *section, const char *key, char *why, size_t len) {
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

/* Decode one UTF-8 sequence at s[0..n): its length, or 0 when malformed
 * (overlong, surrogate, beyond U+10FFFF, truncated) — libyaml's reader
 * refuses the same. */
static size_t utf8_next(const unsigned char *s, size_t n, uint32_t *cp) {
  size_t len = s[0] < 0x80             ? 1
               : (s[0] & 0xe0) == 0xc0 ? 2
               : (s[0] & 0xf0) == 0xe0 ? 3
               : (s[0] & 0xf8) == 0xf0 ? 4
                                       : 0;
  if (len == 0 || len > n) return 0;
  static const uint32_t lead_mask[] = {0, 0x7f, 0x1f, 0x0f, 0x07};
  static const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
  uint32_t v = s[0] & lead_mask[len];
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    v = v << 6 | (s[i] & 0x3f);
  }
  if (v < least[len] || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
  *cp = v;
  return len;
}

/* Byte offset of the first malformed sequence, or SIZE_MAX. */
static size_t utf8_invalid_at(const char *s, size_t n) {
  uint32_t cp;
  for (size_t i = 0; i < n;) {
    size_t l = utf8_next((const unsigned char *)s + i, n - i, &cp);
    if (!l) return i;
    i += l;
  }
  return SIZE_MAX;
}

/* ---- per-key rules: one description, one check ---------------------------*/

/* "an integer in 10..60000", "0 (off) or an integer in 1000..86400000". */
static void int_expect(const cfg_key *k, char *out, size_t cap) {
  if (k->flags & F_ZERO_OFF)
    snprintf(out, cap, "0 (off) or an integer in %llu..%llu", (unsigned long long)k->min,
             (unsigned long long)k->max);
  else
    snprintf(out, cap, "an integer in %llu..%llu", (unsigned long long)k->min,
             (unsigned long long)k->max);
}

static void dbl_expect(const cfg_key *k, char *out, size_t cap) {
  snprintf(out, cap, "a number in %c%g, %g]", (k->flags & F_MIN_OPEN) ? '(' : '[', k->dmin,
           k->dmax);
}

static void enum_expect(const cfg_key *k, char *out, size_t cap) {
  size_t n = (size_t)snprintf(out, cap, "one of");
  for (size_t i = 0; k->choices[i] && n < cap; i++)
    n += (size_t)snprintf(out + n, cap - n, "%s %s", i ? "," : "", k->choices[i]);
}

static bool int_ok(const cfg_key *k, uint64_t v) {
  return (v >= k->min && v <= k->max) || (v == 0 && (k->flags & F_ZERO_OFF));
}

static bool dbl_ok(const cfg_key *k, double v) {
  if (!isfinite(v)) return false;
  if ((k->flags & F_MIN_OPEN) ? v <= k->dmin : v < k->dmin) return false;
  return v <= k->dmax;
}

/* A string value's rules (length, emptiness, choices, syntax): NULL when
 * fine, else what is wrong.  *expectation is set when the text is an
 * "expected …" phrase, to which the caller adds how the value was written.
 * s is NUL-terminated at len (libyaml terminates its scalars). */
static const char *str_problem(const cfg_key *k, const char *s, size_t len, char *why, size_t cap,
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
    enum_expect(k, expect, sizeof expect);
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
static int parse_into(ea_config *c, const cfg_key *k, const char *s, size_t len, bool quoted,
                      bool is_null, char *why, size_t cap) {
  char shown[80], expect[160];
  show_value(s, len, quoted, is_null, shown, sizeof shown);
  switch (k->type) {
    case T_U32:
    case T_U64: {
      uint64_t v = 0;
      int_expect(k, expect, sizeof expect);
      if (quoted || is_null || !parse_u64(s, len, &v) || !int_ok(k, v)) {
        snprintf(why, cap, "expected %s, found %s", expect, shown);
        return -EINVAL;
      }
      if (k->type == T_U32)
        *(uint32_t *)field(c, k) = (uint32_t)v;
      else
        *(uint64_t *)field(c, k) = v;
      return 0;
    }
    case T_DOUBLE: {
      double v = 0;
      dbl_expect(k, expect, sizeof expect);
      if (quoted || is_null || !parse_double(s, len, &v) || !dbl_ok(k, v)) {
        snprintf(why, cap, "expected %s, found %s", expect, shown);
        return -EINVAL;
      }
      *(double *)field(c, k) = v;
      return 0;
    }
    case T_BOOL: {
      bool v = false;
      if (quoted || is_null || !parse_bool(s, len, &v)) {
        snprintf(why, cap, "expected true or false (or yes/no, on/off), found %s", shown);
        return -EINVAL;
      }
      *(bool *)field(c, k) = v;
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
      const char *p = str_problem(k, s, len, expect, sizeof expect, &expectation);
      if (p) {
        snprintf(why, cap, expectation ? "%s, found %s" : "%s", p, shown);
        return -EINVAL;
      }
      char *dst = field(c, k);
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

/* ---- the YAML loader ---------------------------------------------------- */

/* The loader goes on past a problem and reports every one, a line each
 * ("FILE:LINE: key: problem\n…"), so an operator fixes a file in one pass
 * instead of one run per typo.  Only a YAML syntax error stops it: libyaml
 * builds no document after one. */
typedef struct {
  const char *path;
  char *err;
  size_t errlen, used;
  unsigned nerr;
  yaml_document_t *doc;
} loader;

static void lerr(loader *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void lerr(loader *L, const char *fmt, ...) {
  L->nerr++;
  if (!L->err || L->errlen == 0 || L->used + 1 >= L->errlen) return;
  size_t at = L->used;
  if (at) L->err[at++] = '\n';
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(L->err + at, L->errlen - at, fmt, ap);
  va_end(ap);
  /* One line per problem: a value quoted in it may hold line breaks (a
   * double-quoted YAML scalar folds them in) or other control bytes. */
  for (char *c = L->err + at; *c; c++)
    if ((unsigned char)*c < 0x20) *c = '?';
  if (n < 0 || at + (size_t)n >= L->errlen) {
    /* Keep whole lines only (a cut one would not read as FILE:LINE: …),
     * except the first: better cut than nothing. */
    if (L->used) L->err[L->used] = 0;
    L->used = L->errlen; /* full: later problems are counted, not shown */
    return;
  }
  L->used = at + (size_t)n;
}

static const char *node_kind(const yaml_node_t *n) {
  switch (n->type) {
    case YAML_MAPPING_NODE:
      return "a mapping";
    case YAML_SEQUENCE_NODE:
      return "a sequence";
    default:
      return "a scalar";
  }
}

static size_t node_line(const yaml_node_t *n) {
  return n->start_mark.line + 1;
}

static bool scalar_is_null(const yaml_node_t *n) {
  if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return false;
  const char *v = (const char *)n->data.scalar.value;
  size_t len = n->data.scalar.length;
  return len == 0 || (len == 1 && v[0] == '~') ||
         (len == 4 && (!memcmp(v, "null", 4) || !memcmp(v, "Null", 4) || !memcmp(v, "NULL", 4)));
}

/* A mapping key as a C string (bounded), or NULL when not a scalar. */
static const char *key_name(const yaml_node_t *n, char *buf, size_t cap) {
  if (n->type != YAML_SCALAR_NODE) return NULL;
  size_t len = n->data.scalar.length < cap - 1 ? n->data.scalar.length : cap - 1;
  memcpy(buf, n->data.scalar.value, len);
  buf[len] = 0;
  for (size_t i = 0; i < len; i++)
    if ((unsigned char)buf[i] < 0x20) buf[i] = '?'; /* keep the message on one line */
  return buf;
}

static int load_section(loader *L, ea_config *c, const char *section, const yaml_node_t *map,
                        size_t *seen_line) {
  if (scalar_is_null(map)) return 0; /* "compute:" with every key commented out */
  if (map->type != YAML_MAPPING_NODE) {
    lerr(L, "%s:%zu: %s: expected a mapping of keys, found %s", L->path, node_line(map), section,
         node_kind(map));
    return 0;
  }
  for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
    yaml_node_t *kn = yaml_document_get_node(L->doc, p->key);
    yaml_node_t *vn = yaml_document_get_node(L->doc, p->value);
    char name[64], why[384];
    if (!key_name(kn, name, sizeof name)) {
      lerr(L, "%s:%zu: %s: expected a key name, found %s", L->path, node_line(kn), section,
           node_kind(kn));
      continue;
    }
    const cfg_key *k = find_key(section, name);
    if (!k || strlen(name) != kn->data.scalar.length) {
      unknown_key_msg(section, name, why, sizeof why);
      lerr(L, "%s:%zu: %s.%s: %s", L->path, node_line(kn), section, name, why);
      continue;
    }
    /* An old name and the new one set the same field: giving both is a
     * duplicate too. */
    size_t idx = (size_t)(canonical(k) - keys);
    if (seen_line[idx]) {
      lerr(L, "%s:%zu: %s.%s: duplicate key (first given on line %zu%s)", L->path, node_line(kn),
           section, name, seen_line[idx],
           k != canonical(k) || seen_line[NKEYS + idx] ? " under another name" : "");
      continue;
    }
    seen_line[idx] = node_line(kn);
    if (k != canonical(k)) seen_line[NKEYS + idx] = 1;
    note_alias(c, k);
    if (vn->type != YAML_SCALAR_NODE) {
      lerr(L, "%s:%zu: %s.%s: expected a single value, found %s", L->path, node_line(vn), section,
           name, node_kind(vn));
      continue;
    }
    bool quoted = vn->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
    int rc = parse_into(c, canonical(k), (const char *)vn->data.scalar.value,
                        vn->data.scalar.length, quoted, scalar_is_null(vn), why, sizeof why);
    if (rc) lerr(L, "%s:%zu: %s.%s: %s", L->path, node_line(vn), section, name, why);
  }
  return 0;
}

static int load_root(loader *L, ea_config *c, const yaml_node_t *root) {
  if (!root || scalar_is_null(root)) return 0; /* empty file, comments, or a bare "---" */
  if (root->type != YAML_MAPPING_NODE) {
    lerr(L, "%s:%zu: expected a mapping of sections, found %s", L->path, node_line(root),
         node_kind(root));
    return -EINVAL;
  }
  size_t seen_key[2 * NKEYS] = {0}; /* line of each key; [NKEYS + i]: given by an old name */
  struct {
    const char *name;
    size_t line;
  } seen_sec[16];
  size_t nsec = 0;
  for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
       p++) {
    yaml_node_t *kn = yaml_document_get_node(L->doc, p->key);
    yaml_node_t *vn = yaml_document_get_node(L->doc, p->value);
    char name[64], why[384];
    if (!key_name(kn, name, sizeof name)) {
      lerr(L, "%s:%zu: expected a section name, found %s", L->path, node_line(kn), node_kind(kn));
      continue;
    }
    if (!section_known(name, kn->data.scalar.length)) {
      unknown_section_msg(name, why, sizeof why);
      lerr(L, "%s:%zu: %s: %s", L->path, node_line(kn), name, why);
      continue;
    }
    const char *canon = NULL; /* the table's own string: lives as long as the loop */
    for (size_t i = 0; i < NKEYS && !canon; i++)
      if (strcmp(keys[i].section, name) == 0) canon = keys[i].section;
    bool dup = false;
    for (size_t i = 0; i < nsec && !dup; i++) {
      if (strcmp(seen_sec[i].name, canon) == 0) {
        lerr(L, "%s:%zu: %s: duplicate section (first given on line %zu)", L->path, node_line(kn),
             name, seen_sec[i].line);
        dup = true;
      }
    }
    if (dup) continue;
    if (nsec < sizeof seen_sec / sizeof seen_sec[0])
      seen_sec[nsec].name = canon, seen_sec[nsec++].line = node_line(kn);
    load_section(L, c, canon, vn, seen_key);
  }
  return L->nerr ? -EINVAL : 0;
}

static int read_file(const char *path, char **out, size_t *outlen, char *err, size_t errlen) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    ea_seterr(err, errlen, "%s: cannot open: %s", path, strerror(e));
    return -e;
  }
  char *buf = malloc(CFG_FILE_MAX + 1);
  if (!buf) {
    close(fd);
    ea_seterr(err, errlen, "%s: cannot read: %s", path, strerror(ENOMEM));
    return -ENOMEM;
  }
  size_t len = 0;
  for (;;) {
    ssize_t r = read(fd, buf + len, CFG_FILE_MAX + 1 - len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      free(buf);
      close(fd);
      ea_seterr(err, errlen, "%s: cannot read: %s", path, strerror(e));
      return -e;
    }
    if (r == 0) break;
    len += (size_t)r;
    if (len > CFG_FILE_MAX) {
      free(buf);
      close(fd);
      ea_seterr(err, errlen, "%s: file too large (more than %u bytes)", path, CFG_FILE_MAX);
      return -EFBIG;
    }
  }
  close(fd);
  *out = buf;
  *outlen = len;
  return 0;
}

/* The line of byte `off` as YAML counts them (libyaml's marks): a line
 * ends at \n, at \r\n, and at a lone \r. */
static size_t line_of_offset(const char *buf, size_t len, size_t off) {
  size_t line = 1;
  for (size_t i = 0; i < off && i < len; i++)
    line += buf[i] == '\n' || (buf[i] == '\r' && (i + 1 >= len || buf[i + 1] != '\n'));
  return line;
}

static int syntax_error(const yaml_parser_t *p, const char *path, const char *buf, size_t len,
                        char *err, size_t errlen) {
  if (p->error == YAML_MEMORY_ERROR) {
    ea_seterr(err, errlen, "%s: out of memory while parsing", path);
    return -ENOMEM;
  }
  const char *problem = p->problem ? p->problem : "malformed YAML";
  /* libyaml can put the mark of an error at the end of the input one line
   * past the last (a file that does not end with a newline): name the last
   * line instead of one that is not there (found by fuzz_config). */
  size_t last = line_of_offset(buf, len, len);
  size_t pl = p->problem_mark.line + 1, cl = p->context_mark.line + 1;
  if (pl > last) pl = last;
  if (cl > last) cl = last;
  if (p->error == YAML_READER_ERROR) {
    /* The reader reports a byte offset, not a mark. */
    ea_seterr(err, errlen, "%s:%zu: syntax error: %s (byte %zu)", path,
              line_of_offset(buf, len, p->problem_offset), problem, p->problem_offset);
  } else if (p->context) {
    ea_seterr(err, errlen, "%s:%zu: syntax error: %s (%s at line %zu)", path, pl, problem,
              p->context, cl);
  } else {
    ea_seterr(err, errlen, "%s:%zu: syntax error: %s", path, pl, problem);
  }
  return -EINVAL;
}

/* Bounds checked before libyaml builds a document, because building one
 * costs more than linear time in two shapes a 1 MiB file can take:
 *
 *  - nesting: libyaml 0.2.5 (Debian 12's) has no depth limit, and its scanner
 *    walks the stack of open flow levels for every token it reads, so a file
 *    of D `[` costs D^2: 40,000 levels took 7 s, 200,000 (400 KiB) over
 *    60 s (issue 27; over 300 s on a loaded 2-core machine).  A job file
 *    nests 2 deep (the mapping of sections, each section's mapping of keys;
 *    values are scalars); 64 leaves room for any YAML an operator writes by
 *    hand, and is checked after reading at most 64 levels, with libyaml's
 *    own scanner reading ahead at most 1024 characters (its simple-key
 *    window) past them.
 *  - anchors: its composer checks each new anchor against every earlier one
 *    and resolves each alias by a walk of all anchors, so 60,000 anchors took
 *    25 s.  Values are scalars, so an anchor saves little in a job file; 64
 *    is many times what a hand-written file uses, and 64 anchors times the
 *    most aliases 1 MiB holds (~350,000) is a few million string compares.
 *
 * This pass reads the stream as events (no tree, constant memory) and stops
 * at the first bound crossed; a syntax error it meets is left to the loader,
 * which reports it the usual way at the same place. */
#define CFG_DEPTH_MAX 64
#define CFG_ANCHORS_MAX 64

static int check_bounds(const char *path, const char *buf, size_t len, char *err, size_t errlen) {
  yaml_parser_t p;
  if (!yaml_parser_initialize(&p)) {
    ea_seterr(err, errlen, "%s: out of memory", path);
    return -ENOMEM;
  }
  yaml_parser_set_input_string(&p, (const unsigned char *)buf, len);
  int rc = 0;
  unsigned depth = 0, anchors = 0;
  for (bool done = false; !done && rc == 0;) {
    yaml_event_t ev;
    if (!yaml_parser_parse(&p, &ev)) break; /* the loader reports it */
    const unsigned char *anchor = NULL;
    switch (ev.type) {
      case YAML_SEQUENCE_START_EVENT:
      case YAML_MAPPING_START_EVENT:
        anchor = ev.type == YAML_SEQUENCE_START_EVENT ? ev.data.sequence_start.anchor
                                                      : ev.data.mapping_start.anchor;
        if (++depth > CFG_DEPTH_MAX) {
          ea_seterr(err, errlen,
                    "%s:%zu: nested more than %d levels deep (the limit; a job file needs 2)", path,
                    ev.start_mark.line + 1, CFG_DEPTH_MAX);
          rc = -EINVAL;
        }
        break;
      case YAML_SEQUENCE_END_EVENT:
      case YAML_MAPPING_END_EVENT:
        depth--;
        break;
      case YAML_SCALAR_EVENT:
        anchor = ev.data.scalar.anchor;
        break;
      case YAML_STREAM_END_EVENT:
        done = true;
        break;
      default:
        break;
    }
    if (anchor && rc == 0 && ++anchors > CFG_ANCHORS_MAX) {
      ea_seterr(err, errlen, "%s:%zu: more than %d anchors (&name) in one file (the limit)", path,
                ev.start_mark.line + 1, CFG_ANCHORS_MAX);
      rc = -EINVAL;
    }
    yaml_event_delete(&ev);
  }
  yaml_parser_delete(&p);
  return rc;
}

int ea_config_load(ea_config *c, const char *path, char *err, size_t errlen) {
  char *buf = NULL;
  size_t len = 0;
  int rc = read_file(path, &buf, &len, err, errlen);
  if (rc) return rc;
  rc = check_bounds(path, buf, len, err, errlen);
  if (rc) {
    free(buf);
    return rc;
  }

  ea_config *tmp = malloc(sizeof *tmp);
  yaml_parser_t parser;
  if (!tmp || !yaml_parser_initialize(&parser)) {
    free(tmp);
    free(buf);
    ea_seterr(err, errlen, "%s: out of memory", path);
    return -ENOMEM;
  }
  memcpy(tmp, c, sizeof *tmp);
  yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);
  yaml_document_t doc;
  if (!yaml_parser_load(&parser, &doc)) {
    rc = syntax_error(&parser, path, buf, len, err, errlen);
    goto out;
  }
  loader L = {.path = path, .err = err, .errlen = errlen, .doc = &doc};
  rc = load_root(&L, tmp, yaml_document_get_root_node(&doc));
  yaml_document_delete(&doc);
  if (rc) goto out;

  /* A second document would be silently ignored by a reader that takes the
   * first: refuse it instead. */
  if (!yaml_parser_load(&parser, &doc)) {
    rc = syntax_error(&parser, path, buf, len, err, errlen);
    goto out;
  }
  yaml_node_t *extra = yaml_document_get_root_node(&doc);
  if (extra) {
    ea_seterr(err, errlen, "%s:%zu: expected one YAML document, found another", path,
              doc.start_mark.line + 1);
    rc = -EINVAL;
  }
  yaml_document_delete(&doc);
  if (rc == 0) memcpy(c, tmp, sizeof *c);
out:
  yaml_parser_delete(&parser);
  free(tmp);
  free(buf);
  return rc;
}

/* ---- --set -------------------------------------------------------------- */

int ea_config_set(ea_config *c, const char *key, const char *value, char *err, size_t errlen) {
  char section[64], why[384];
  const char *dot = key ? strchr(key, '.') : NULL;
  if (!dot || dot == key || (size_t)(dot - key) >= sizeof section) {
    ea_seterr(err, errlen, "--set: %s: expected SECTION.KEY=VALUE", key ? key : "");
    return -EINVAL;
  }
  memcpy(section, key, (size_t)(dot - key));
  section[dot - key] = 0;
  if (!section_known(section, strlen(section))) {
    unknown_section_msg(section, why, sizeof why);
    ea_seterr(err, errlen, "--set: %s: %s", key, why);
    return -EINVAL;
  }
  const cfg_key *k = find_key(section, dot + 1);
  if (!k) {
    unknown_key_msg(section, dot + 1, why, sizeof why);
    ea_seterr(err, errlen, "--set: %s: %s", key, why);
    return -EINVAL;
  }
  if (!value) {
    ea_seterr(err, errlen, "--set: %s: missing value", key);
    return -EINVAL;
  }
  /* A flag value is taken as written: for strings it is the string itself
   * (no YAML quoting), for the rest it reads like a plain YAML scalar.
   * Strings must be UTF-8, or the dump of this configuration would not
   * load again. */
  ea_config *tmp = malloc(sizeof *tmp);
  if (!tmp) {
    ea_seterr(err, errlen, "--set: %s: out of memory", key);
    return -ENOMEM;
  }
  memcpy(tmp, c, sizeof *tmp);
  size_t bad = utf8_invalid_at(value, strlen(value));
  int rc;
  if ((k->type == T_STR || k->type == T_ENUM) && bad != SIZE_MAX) {
    snprintf(why, sizeof why, "not valid UTF-8 (byte %zu)", bad);
    rc = -EINVAL;
  } else {
    rc = parse_into(tmp, canonical(k), value, strlen(value), false, false, why, sizeof why);
  }
  if (rc) {
    ea_seterr(err, errlen, "--set: %s: %s", key, why);
  } else {
    memcpy(field(c, k), field(tmp, k), canonical(k)->size);
    note_alias(c, k);
  }
  free(tmp);
  return rc;
}

/* ---- validate ----------------------------------------------------------- */

int ea_config_validate(const ea_config *c, char *err, size_t errlen) {
  char expect[160], why[384];
  /* Per key: the same rules the loader applies, for configurations built
   * or changed in code. */
  for (size_t i = 0; i < NKEYS; i++) {
    const cfg_key *k = &keys[i];
    const void *f = cfield(c, k);
    if (k->flags & OTHER_NAME) continue;
    switch (k->type) {
      case T_U32:
      case T_U64: {
        uint64_t v = k->type == T_U32 ? *(const uint32_t *)f : *(const uint64_t *)f;
        if (!int_ok(k, v)) {
          int_expect(k, expect, sizeof expect);
          ea_seterr(err, errlen, "%s.%s: expected %s, found %llu", k->section, k->key, expect,
                    (unsigned long long)v);
          return -EINVAL;
        }
        break;
      }
      case T_DOUBLE: {
        double v = *(const double *)f;
        if (!dbl_ok(k, v)) {
          dbl_expect(k, expect, sizeof expect);
          ea_seterr(err, errlen, "%s.%s: expected %s, found %g", k->section, k->key, expect, v);
          return -EINVAL;
        }
        break;
      }
      case T_BOOL:
        break;
      case T_STR:
      case T_ENUM: {
        const char *s = f;
        const char *end = memchr(s, 0, k->size);
        if (!end) {
          ea_seterr(err, errlen, "%s.%s: not NUL-terminated", k->section, k->key);
          return -EINVAL;
        }
        bool expectation;
        const char *p = str_problem(k, s, (size_t)(end - s), why, sizeof why, &expectation);
        if (p) {
          ea_seterr(err, errlen, expectation ? "%s.%s: %s, found \"%s\"" : "%s.%s: %s", k->section,
                    k->key, p, s);
          return -EINVAL;
        }
        break;
      }
    }
  }

  /* Across keys. */
  if (c->compute.min_nodes > c->compute.max_nodes) {
    ea_seterr(err, errlen, "compute.min_nodes: %u is greater than compute.max_nodes (%u)",
              c->compute.min_nodes, c->compute.max_nodes);
    return -EINVAL;
  }
  if (c->distributed.micro_batch > c->distributed.global_batch) {
    ea_seterr(err, errlen,
              "distributed.micro_batch: %u is greater than distributed.global_batch (%u)",
              c->distributed.micro_batch, c->distributed.global_batch);
    return -EINVAL;
  }
  if (c->membership.probe_timeout_ms >= c->membership.probe_interval_ms) {
    ea_seterr(err, errlen,
              "membership.probe_timeout_ms: %u must be less than membership.probe_interval_ms (%u)",
              c->membership.probe_timeout_ms, c->membership.probe_interval_ms);
    return -EINVAL;
  }
  if (c->train.warmup_steps > c->train.steps) {
    ea_seterr(err, errlen, "train.warmup_steps: %u is greater than train.steps (%llu)",
              c->train.warmup_steps, (unsigned long long)c->train.steps);
    return -EINVAL;
  }
#ifndef EA_HAVE_NCCL
  if (strcmp(c->distributed.backend, "nccl") == 0) {
    ea_seterr(err, errlen,
              "distributed.backend: nccl was not built in (no CUDA/NCCL at build time)");
    return -ENOTSUP;
  }
#endif
  return 0;
}

/* ---- dump and hash ------------------------------------------------------ */

/* Output goes to a bounded buffer (snprintf-style: the length is counted
 * even past cap) and/or into a running XXH3. */
typedef struct {
  char *buf;
  size_t cap, len;
  XXH3_state_t *h;
} sink;

static void put(sink *o, const char *s, size_t n) {
  if (o->h) XXH3_64bits_update(o->h, s, n);
  if (o->buf && o->len < o->cap) {
    size_t room = o->cap - o->len;
    memcpy(o->buf + o->len, s, n < room ? n : room);
  }
  o->len += n;
}

static void putf(sink *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(sink *o, const char *fmt, ...) {
  char tmp[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n > 0) put(o, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* The shortest %g that reads back as the same double. */
static void fmt_double(double v, char *out, size_t cap) {
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(out, cap, "%.*g", prec, v);
    if (strtod(out, NULL) == v) return;
  }
}

/* One value as a YAML scalar that reloads to the same bytes.  Strings are
 * always double-quoted ("", "yes", "12" and "a: b" stay strings). */
static void put_value(sink *o, const cfg_key *k, const ea_config *c) {
  const void *f = cfield(c, k);
  char tmp[64];
  switch (k->type) {
    case T_U32:
      putf(o, "%u", *(const uint32_t *)f);
      return;
    case T_U64:
      putf(o, "%llu", (unsigned long long)*(const uint64_t *)f);
      return;
    case T_BOOL:
      putf(o, "%s", *(const bool *)f ? "true" : "false");
      return;
    case T_DOUBLE:
      fmt_double(*(const double *)f, tmp, sizeof tmp);
      putf(o, "%s", tmp);
      return;
    case T_ENUM:
      putf(o, "%.*s", (int)strnlen(f, k->size), (const char *)f);
      return;
    case T_STR: {
      /* Characters YAML does not allow in a stream (C0/C1 controls, DEL,
       * U+FFFE/U+FFFF) are escaped, and so are the ones YAML 1.1 reads as
       * line breaks (U+2028/U+2029: raw, a quoted scalar folds them into a
       * space); so are bytes that are not UTF-8, which only code can put
       * here (load and set refuse them). */
      const unsigned char *s = f;
      size_t n = strnlen(f, k->size), run = 0;
      put(o, "\"", 1);
      for (size_t i = 0; i < n;) {
        uint32_t cp = 0;
        size_t l = utf8_next(s + i, n - i, &cp);
        char esc[16] = "";
        if (l == 0)
          snprintf(esc, sizeof esc, "\\x%02x", s[i]), l = 1;
        else if (cp == '"')
          snprintf(esc, sizeof esc, "\\\"");
        else if (cp == '\\')
          snprintf(esc, sizeof esc, "\\\\");
        else if (cp == '\n')
          snprintf(esc, sizeof esc, "\\n");
        else if (cp == '\t')
          snprintf(esc, sizeof esc, "\\t");
        else if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0x2028 || cp == 0x2029 ||
                 cp == 0xfffe || cp == 0xffff)
          snprintf(esc, sizeof esc, "\\u%04x", (unsigned)cp);
        if (!esc[0]) {
          run += l, i += l;
          continue;
        }
        put(o, (const char *)s + i - run, run);
        run = 0;
        put(o, esc, strlen(esc));
        i += l;
      }
      put(o, (const char *)s + n - run, run);
      put(o, "\"", 1);
      return;
    }
  }
}

/* "milliseconds, 10..60000", "one of auto, tcp, nccl", "true or false", … */
static void put_rule(sink *o, const cfg_key *k) {
  char expect[160];
  switch (k->type) {
    case T_U32:
    case T_U64:
      if (k->min == 0 && k->max == UINT64_MAX) {
        putf(o, "any 64-bit unsigned integer");
        return;
      }
      if (k->flags & F_ZERO_OFF)
        snprintf(expect, sizeof expect, "0 (off) or %llu..%llu", (unsigned long long)k->min,
                 (unsigned long long)k->max);
      else
        snprintf(expect, sizeof expect, "%llu..%llu", (unsigned long long)k->min,
                 (unsigned long long)k->max);
      putf(o, "%s, %s", k->unit ? k->unit : "integer", expect);
      return;
    case T_DOUBLE:
      putf(o, "%s, %c%g, %g]", k->unit ? k->unit : "number", (k->flags & F_MIN_OPEN) ? '(' : '[',
           k->dmin, k->dmax);
      return;
    case T_BOOL:
      putf(o, "true or false");
      return;
    case T_ENUM:
      enum_expect(k, expect, sizeof expect);
      putf(o, "%s", expect);
      return;
    case T_STR:
      putf(o, "string, %s%zu bytes at most", (k->flags & F_NONEMPTY) ? "not empty, " : "",
           k->size - 1);
      return;
  }
}

int ea_config_dump(const ea_config *c, char *buf, size_t cap) {
  ea_config *def = malloc(sizeof *def);
  if (!def) return -ENOMEM;
  ea_config_default(def);
  sink o = {.buf = buf, .cap = cap};
  putf(&o,
       "# elastic-agent job configuration: every key, grouped by section.\n"
       "# Above each key: what it does, then its unit and range, and its default.\n");
  for (size_t i = 0; i < NKEYS; i++) {
    const cfg_key *k = &keys[i];
    if (k->flags & OTHER_NAME) continue;
    if (i == 0 || strcmp(keys[i - 1].section, k->section) != 0)
      putf(&o, "\n%s:\n", k->section);
    else
      put(&o, "\n", 1);
    putf(&o, "  # %s", k->doc);
    for (size_t j = 0; j < NKEYS; j++)
      if ((keys[j].flags & F_SYNONYM) && strcmp(keys[j].section, k->section) == 0 &&
          strcmp(keys[j].alias, k->key) == 0)
        putf(&o, " Also named %s.", keys[j].key);
    put(&o, "\n  # ", 5);
    put_rule(&o, k);
    put(&o, "; default ", 10);
    put_value(&o, k, def);
    putf(&o, "\n  %s: ", k->key);
    put_value(&o, k, c);
    put(&o, "\n", 1);
  }
  free(def);
  if (buf && cap) buf[o.len < cap ? o.len : cap - 1] = 0;
  return o.len > INT32_MAX ? -EOVERFLOW : (int)o.len;
}

/* XXH3-64 of the canonical form: "section.key=value\n" for every key in
 * table order, values written as in the dump.  Comments, defaults and
 * layout are left out, so rewording a doc string does not change the hash
 * of a configuration. */
uint64_t ea_config_hash(const ea_config *c) {
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  sink o = {.h = &st};
  for (size_t i = 0; i < NKEYS; i++) {
    if (keys[i].flags & OTHER_NAME) continue;
    putf(&o, "%s.%s=", keys[i].section, keys[i].key);
    put_value(&o, &keys[i], c);
    put(&o, "\n", 1);
  }
  return XXH3_64bits_digest(&st);
}

/* ---- what a mode does not use, and old names ----------------------------- */

int ea_config_deprecations(const ea_config *c, char *out, size_t cap) {
  int n = 0;
  size_t len = 0;
  if (cap) out[0] = 0;
  for (size_t i = 0; i < NKEYS; i++) {
    const cfg_key *k = &keys[i];
    if (!(k->flags & F_ALIAS) || !(c->aliases_used & alias_bit(k))) continue;
    int w = snprintf(out + len, cap > len ? cap - len : 0, "%s%s.%s is the old name of %s.%s",
                     n ? "; " : "", k->section, k->key, k->section, k->alias);
    if (w > 0) len += (size_t)w < (cap > len ? cap - len : 0) ? (size_t)w : 0;
    n++;
  }
  return n;
}

int ea_config_changed_keys(const ea_config *c, const char *section, char *out, size_t cap) {
  ea_config *def = malloc(sizeof *def);
  if (!def) return -ENOMEM;
  ea_config_default(def);
  int n = 0;
  size_t len = 0;
  if (cap) out[0] = 0;
  for (size_t i = 0; i < NKEYS; i++) {
    const cfg_key *k = &keys[i];
    if ((k->flags & OTHER_NAME) || strcmp(k->section, section) != 0) continue;
    if (memcmp(cfield(c, k), cfield(def, k), k->size) == 0) continue;
    int w = snprintf(out + len, cap > len ? cap - len : 0, "%s%s.%s", n ? ", " : "", k->section,
                     k->key);
    if (w > 0 && (size_t)w < (cap > len ? cap - len : 0)) len += (size_t)w;
    n++;
  }
  free(def);
  return n;
}
