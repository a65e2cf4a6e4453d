/* ea_config.h — the job file (YAML, libyaml) and its defaults.
 *
 * Every key has a default (ea_config_default).  ea_config_load() overlays a
 * YAML file; command-line flags are applied after it by agent/cli/main.c.
 * Unknown keys and bad values are errors of the form
 *     job.yaml:12: membership.probe_interval_ms: expected an integer ≥ 10
 * written into the caller's err buffer, one line per problem: a file's every
 * problem is reported at once.  Some keys have a second documented name,
 * the deployment guide's (compute.worker_nodes = compute.max_nodes, …).
 *
 * Sections follow an operator's training job file: experiment, compute,
 * distributed, checkpoint, logging, runtime, membership, observability,
 * train.  Durations in YAML are milliseconds (keys ending in _ms) or seconds
 * (keys ending in _seconds); sizes are bytes.
 */
#ifndef EA_CONFIG_H
#define EA_CONFIG_H

#include "ea_membership.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EA_PATH_MAX 4096

typedef struct {
  struct {
    char name[64]; /* experiment.name: "default" */
    uint64_t seed; /* experiment.seed: 1234 */
  } experiment;
  struct {
    uint32_t min_nodes;               /* 1 */
    uint32_t max_nodes;               /* 64 (also named worker_nodes) */
    uint32_t workers_per_node;        /* 1 (also named accelerators_per_worker) */
    char worker_command[EA_PATH_MAX]; /* "" = built-in trainer */
    char protocol[16];                /* "auto" | "builtin" | "torchrun" | "library" */
    char warm_start[8];               /* "auto" | "on" | "off" */
    char preload[512];                /* modules a warm interpreter imports */
  } compute;
  struct {
    char backend[16];                       /* "auto" | "tcp" | "nccl" */
    char strategy[32];                      /* "collective_data_parallel", the only one */
    uint32_t global_batch;                  /* samples per step, all ranks together: 64 */
    uint32_t micro_batch;                   /* samples per forward/backward: 16 */
    uint32_t gradient_accumulation_steps;   /* passes per step per rank; 0 = by micro_batch */
    uint32_t communication_timeout_seconds; /* 10 */
    char quorum[16];                        /* "majority" | "none" */
    uint32_t scale_up_delay_ms;             /* batch joiners: 2000 */
  } distributed;
  struct {
    char dir[EA_PATH_MAX];        /* "" = <data_dir>/checkpoints (also storage_uri) */
    uint32_t save_interval_steps; /* 0 = off; default 100 */
    bool resume_from_last;        /* true */
    uint32_t keep_last;           /* 3 (also keep_last_checkpoints) */
    char verify_on_resume[8];     /* "full" | "size" */
    char busy_policy[8];          /* "wait" | "skip" */
    uint32_t timeout_seconds;     /* a shard write or commit slower: storage_timeout alert; 300 */
  } checkpoint;
  struct {
    char level[8];                   /* "debug" | "info" | "warn" | "error" */
    char format[8];                  /* "text" | "json" */
    char file[EA_PATH_MAX];          /* "" = stderr (or dir) */
    char dir[EA_PATH_MAX];           /* "" = none; else DIR/NAME.log (also logs_uri) */
    uint32_t metrics_interval_steps; /* progress line every N steps; 0 = every 10 s */
  } logging;
  struct {
    uint32_t max_restarts;                  /* 3 (old name: failure_retry_times) */
    uint32_t rendezvous_timeout_seconds;    /* 30 (also request_timeout_seconds) */
    uint32_t stall_timeout_seconds;         /* a running generation with no step this long: 300 */
    uint32_t health_check_interval_seconds; /* stall check cadence; 0 = every sample */
    uint32_t join_retry_max_ms;             /* backoff ceiling for --join: 5000 */
    uint32_t stop_grace_seconds;            /* SIGTERM (STOP) → SIGKILL: 5 */
    uint32_t lost_peer_grace_ms;            /* the same when a peer died or froze: 500 */
    char preemption_notice[256];            /* "none" | "aws" | "gcp" | "azure" | an http(s) URL */
    char preemption_metadata_url[256];      /* "" = the provider's metadata address */
    uint32_t preemption_grace_seconds;      /* the last checkpoint's budget: 20 (0 off) */
    /* flapping nodes held out (rdzv, "Hold-outs" in ea_rdzv.h) */
    uint32_t flap_threshold;        /* more failures than this in the window: held out; 3 (0 off) */
    uint32_t flap_window_seconds;   /* 300 */
    uint32_t flap_cooldown_seconds; /* the first hold-out: 60, doubled on each repeat */
  } runtime;
  ea_swim_config membership; /* see ea_swim_config_default */
  struct {
    char metrics_listen[64];                  /* "127.0.0.1:9400"; "" = off */
    bool alert_on_nan;                        /* true (also alert_on_loss_nan) */
    bool alert_on_checkpoint_failure;         /* true */
    uint32_t metrics_export_interval_seconds; /* a `metrics` log line; 0 = off */
    double straggler_factor;           /* 2.0: a rank this many × the median is a straggler */
    uint32_t straggler_window_seconds; /* ... for this long: 30 */
    bool straggler_evict;              /* false: alert only; true: also hold it out */
    char alertmanager_url[256];        /* "" = off; "http://127.0.0.1:9093" */
    char alert_webhook[256];           /* "" = off; POST one JSON document per alert */
    char alert_command[512];           /* "" = off; /bin/sh -c with EA_ALERT_* in its environment */
    uint32_t alert_resend_seconds;     /* 60: a firing condition re-sent to Alertmanager */
  } observability;
  struct {
    char model[32];         /* "byte-mlp" */
    char data[EA_PATH_MAX]; /* "/usr/share/common-licenses" */
    uint32_t context;       /* bytes of context: 16 */
    uint32_t embed_dim;     /* 24 */
    uint32_t hidden;        /* 256 */
    uint32_t layers;        /* hidden layers: 2 */
    uint64_t steps;         /* 2000 */
    double lr;              /* 3e-3 */
    double weight_decay;    /* 0.01 */
    uint32_t warmup_steps;  /* 50 */
  } train;
  /* Not a key: which deprecated key names the file or --set used (bit i:
   * the i-th alias of the key table), for one warning at start
   * (ea_config_deprecations). */
  uint32_t aliases_used;
} ea_config;

void ea_config_default(ea_config *c);
/* Load path over *c (which should hold defaults).  Returns 0, or a negative
 * errno with "file:line: key: problem" in err: one line per problem found,
 * separated by '\n' (no trailing one); lines that do not fit are left out. */
int ea_config_load(ea_config *c, const char *path, char *err, size_t errlen);
/* Set one key from a string, as a flag would ("membership.probe_interval_ms",
 * "200").  Same error convention, with "--set" in place of file:line. */
int ea_config_set(ea_config *c, const char *key, const char *value, char *err, size_t errlen);
/* Cross-field checks (min_nodes ≤ max_nodes, …), after load and flags. */
int ea_config_validate(const ea_config *c, char *err, size_t errlen);
/* A stable 64-bit hash of the effective configuration (for manifests). */
uint64_t ea_config_hash(const ea_config *c);
/* The deprecated key names c was given ("runtime.failure_retry_times is the
 * old name of runtime.max_restarts; …"), as one line in out; returns how
 * many (0: none, out is ""). */
int ea_config_deprecations(const ea_config *c, char *out, size_t cap);
/* The keys of `section` whose value differs from the default, as
 * "train.steps, train.lr" in out; returns how many. */
int ea_config_changed_keys(const ea_config *c, const char *section, char *out, size_t cap);
/* Write the effective configuration as YAML (for `elastic-agent config`).
 * Like snprintf: returns the length of the whole dump (without the NUL),
 * writes at most cap bytes including a NUL, buf may be NULL when cap is 0;
 * or a negative errno. */
int ea_config_dump(const ea_config *c, char *buf, size_t cap);

#endif
