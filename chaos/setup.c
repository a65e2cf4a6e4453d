/* setup.c — what a run needs before its first agent starts: the work dir,
 * the job file every agent runs (the user's, or a built-in one small enough
 * for a shared machine, plus the keys the harness must control), the
 * network namespaces, a tmpfs for the disk-full fault; and the calibration
 * cluster, a throwaway run that measures the step rate so the target step
 * count fits the requested duration.  It is apart from run.c because none
 * of it is the run itself: it happens once, before, and fails with a
 * message rather than a violation.
 */
#include "chaos.h"

#include "ea_train.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

/* ---- setup ------------------------------------------------------------------ */

int ea__chaos_set_key(ea__chaos_run *r, const char *k, const char *v, char *err, size_t errlen) {
  char e[256];
  int rc = ea_config_set(&r->cfg, k, v, e, sizeof e);
  if (rc < 0) snprintf(err, errlen, "%s=%s: %s", k, v, e);
  return rc;
}

int ea__chaos_write_job(ea__chaos_run *r, char *err, size_t errlen) {
  int need = ea_config_dump(&r->cfg, NULL, 0);
  if (need < 0) {
    snprintf(err, errlen, "cannot dump the job configuration: %s", strerror(-need));
    return need;
  }
  char *buf = malloc((size_t)need + 1);
  if (!buf) return -ENOMEM;
  ea_config_dump(&r->cfg, buf, (size_t)need + 1);
  int rc = ea__chaos_write_file(r->job_path, buf, (size_t)need);
  free(buf);
  if (rc < 0) snprintf(err, errlen, "write %s: %s", r->job_path, strerror(-rc));
  return rc;
}

int ea__chaos_setup(ea__chaos_run *r, char *err, size_t errlen) {
  int rc;
  signal(SIGPIPE, SIG_IGN);
  r->nodes = calloc(CH_MAX_NODES, sizeof *r->nodes);
  if (!r->nodes) return -ENOMEM;
  for (int s = 0; s <= CH_MAX_SLOTS; s++) r->slot_node[s] = -1;
  r->nslots = r->o.nagents + 2;
  if ((rc = ea__chaos_mkdirs(r->o.work, 0755)) < 0) {
    snprintf(err, errlen, "cannot create %s: %s", r->o.work, strerror(-rc));
    return rc;
  }
  snprintf(r->log_path, sizeof r->log_path, "%s/harness.log", r->o.work);
  r->log = fopen(r->log_path, "ae");
  snprintf(r->job_path, sizeof r->job_path, "%s/job.yaml", r->o.work);
  snprintf(r->ckpt_dir, sizeof r->ckpt_dir, "%s/ckpt", r->o.work);
  if ((rc = ea__chaos_mkdirs(r->ckpt_dir, 0755)) < 0) {
    snprintf(err, errlen, "cannot create %s: %s", r->ckpt_dir, strerror(-rc));
    return rc;
  }
  /* The job: the user's file, or the built-in small one; then what the
   * harness must control either way. */
  ea_config_default(&r->cfg);
  if (r->o.config[0]) {
    char e[512];
    if ((rc = ea_config_load(&r->cfg, r->o.config, e, sizeof e)) < 0) {
      snprintf(err, errlen, "%s", e);
      return rc;
    }
  } else {
    /* A model small enough that a step costs about a millisecond on a
     * shared 2-core machine (the e2e tests' dims), so a two-minute run
     * trains tens of thousands of steps and a fault-free replay of them
     * takes seconds. */
    static const char *const builtin[][2] = {
        {"train.context", "8"},
        {"train.embed_dim", "16"},
        {"train.hidden", "64"},
        {"train.layers", "1"},
        {"distributed.global_batch", "32"},
        {"distributed.micro_batch", "16"},
        /* joiners batched 0.5 s instead of 2 s: a restore per fault */
        {"distributed.scale_up_delay_ms", "500"},
        /* a stuck collective fails in 5 s, not 10 */
        {"distributed.communication_timeout_seconds", "5"},
        /* a worker killed a dozen times must not drain its node */
        {"runtime.failure_retry_times", "1000"},
        /* ... nor hold it out as flapping: every fault must be recovered
         * from within the restore bound (a hold-out is tested by
         * tests/e2e/test_flap.sh) */
        {"runtime.flap_threshold", "0"},
        /* a node held out for a bad link (oneway) is back 5 s after its
         * hold starts, not 60 (the restore bound allows for it) */
        {"runtime.flap_cooldown_seconds", "5"},
        /* a formation that cannot finish is abandoned after 5 s (30 by
         * default): a crashed node that rejoins first sits out one such
         * timeout (docs/chaos.md), and formations here take milliseconds */
        {"runtime.rendezvous_timeout_seconds", "5"},
        {"checkpoint.save_interval_steps", "500"},
        {"checkpoint.keep_last", "3"},
    };
    for (size_t i = 0; i < sizeof builtin / sizeof builtin[0]; i++)
      if ((rc = ea__chaos_set_key(r, builtin[i][0], builtin[i][1], err, errlen)) < 0) return rc;
    /* Cold start needs a majority of the nodes (Consul's bootstrap_expect
     * rule, docs/rendezvous.md): otherwise two sides of an early partition
     * could each form a first generation. */
    char mn[16];
    snprintf(mn, sizeof mn, "%d", r->o.nagents / 2 + 1);
    if ((rc = ea__chaos_set_key(r, "compute.min_nodes", mn, err, errlen)) < 0) return rc;
    /* A joiner makes the world N + 1, and a node beyond that waits as a
     * spare (the spare fault, spare.c). */
    snprintf(mn, sizeof mn, "%d", r->o.nagents + 1);
    if ((rc = ea__chaos_set_key(r, "compute.max_nodes", mn, err, errlen)) < 0) return rc;
  }
  if ((rc = ea__chaos_set_key(r, "checkpoint.dir", r->ckpt_dir, err, errlen)) < 0) return rc;
  if ((rc = ea__chaos_set_key(r, "logging.level", "debug", err, errlen)) < 0) return rc;
  if ((rc = ea__chaos_set_key(r, "logging.format", "text", err, errlen)) < 0) return rc;
  if ((rc = ea__chaos_set_key(r, "logging.file", "", err, errlen)) < 0) return rc;
  /* N agents on one machine cannot share one metrics port. */
  if ((rc = ea__chaos_set_key(r, "observability.metrics_listen", "", err, errlen)) < 0) return rc;
  if ((rc = ea__chaos_set_key(r, "train.steps", "1000000000", err, errlen)) < 0) return rc;
  char e[256];
  if ((rc = ea_config_validate(&r->cfg, e, sizeof e)) < 0) {
    snprintf(err, errlen, "job configuration: %s", e);
    return rc;
  }
  /* The history is the steps the workers report: the built-in trainer's,
   * or a library-mode program's (which ends at EA_TRAIN_STEPS, the
   * train.steps set above and again once calibrated).  A restart-mode
   * program reports none. */
  const char *proto = r->cfg.compute.protocol;
  r->library = strcmp(proto, "library") == 0;
  if (r->cfg.compute.worker_command[0] &&
      (strcmp(proto, "torchrun") == 0 || strcmp(proto, "auto") == 0)) {
    snprintf(err, errlen,
             "job configuration: compute.protocol %s with a worker_command runs the program in "
             "restart mode, which reports no steps to judge; use compute.protocol: library (a "
             "program using the elastic_agent library that trains EA_TRAIN_STEPS steps) or the "
             "built-in trainer (no worker_command)",
             proto);
    return -EINVAL;
  }
  if ((rc = ea__chaos_write_job(r, err, errlen)) < 0) return rc;
  r->detection_bound_ms = 0;
  if (r->o.netns) {
    r->runid = (int)(getpid() % 100000);
    r->subnet = (int)((r->o.seed * 7 + (uint64_t)getpid()) % 512);
    if ((rc = ea__chaos_net_up(r, err, errlen)) < 0) return rc;
  }
  /* The preempt fault's fake metadata service (preempt.c): a thread on the
   * harness's loopback, or one server in each slot's namespace. */
  if (r->o.kinds & (1u << EA__F_PREEMPT)) {
    char e[256];
    if (ea__chaos_notice_start(r, e, sizeof e) < 0) ea__chaos_logf(r, "%s", e);
  }
  /* A full disk needs a small file system of its own: a tmpfs big enough
   * for keep_last + 3 checkpoints of this model's state. */
  if (geteuid() == 0) {
    ea_model_dims d = {r->cfg.train.context, r->cfg.train.embed_dim, r->cfg.train.hidden,
                       r->cfg.train.layers};
    uint64_t state = 0;
    if (ea_state_layout(&d, &state, NULL) == 0) {
      uint64_t size = state * (r->cfg.checkpoint.keep_last + 3) + (1u << 20);
      char opt[64];
      snprintf(opt, sizeof opt, "size=%llu,mode=0755", (unsigned long long)size);
      if (mount("chaos-ckpt", r->ckpt_dir, "tmpfs", MS_NOSUID | MS_NODEV, opt) == 0) {
        r->tmpfs_ckpt = true;
        ea__chaos_logf(r, "tmpfs %s on %s", opt, r->ckpt_dir);
      }
    }
  }
  return 0;
}

/* ---- calibration ------------------------------------------------------------ */

int ea__chaos_calibrate(ea__chaos_run *r, double *rate, char *err, size_t errlen) {
  *rate = 0;
  for (int s = 1; s <= r->o.nagents; s++) {
    ea__chaos_node *n = ea__chaos_node_new(r, "c", s, 0);
    if (!n || ea__chaos_node_start(r, n) < 0) {
      snprintf(err, errlen, "calibration: cannot start agent %d (see %s/c%d/agent.0.log)", s,
               r->o.work, s);
      ea__chaos_stop_all(r);
      return -EIO;
    }
  }
  int rc = 0;
  if (!ea__chaos_wait_until(r, ea__chaos_mono_ms() + 60000, ea__chaos_cond_all_running, NULL)) {
    ea__chaos_want w;
    ea__chaos_want_set(&w, r, NULL, NULL);
    char st[900];
    ea__chaos_cluster_state(r, &w, st, sizeof st);
    snprintf(err, errlen, "calibration: %d agents did not form one generation within 60 s: %s",
             r->o.nagents, st);
    rc = -ETIMEDOUT;
  } else {
    /* Half a second to settle, then three seconds of steady training. */
    ea__chaos_wait_until(r, ea__chaos_mono_ms() + 500, ea__chaos_never, NULL);
    uint64_t s0 = ea__chaos_cluster_step(r);
    int64_t t0 = ea__chaos_mono_ms();
    ea__chaos_wait_until(r, t0 + 3000, ea__chaos_never, NULL);
    uint64_t s1 = ea__chaos_cluster_step(r);
    double secs = (double)(ea__chaos_mono_ms() - t0) / 1000.0;
    *rate = secs > 0 ? (double)(s1 - s0) / secs : 0;
  }
  for (int s = 1; s <= r->o.nagents; s++) {
    ea__chaos_node *n = ea__chaos_slot_node(r, s);
    if (n && n->st.has_ckpt) r->ckpt_available = true;
  }
  ea__chaos_stop_all(r);
  /* Forget the calibration nodes (their files stay in the work dir). */
  for (size_t i = 0; i < r->nnodes; i++) free(r->nodes[i].samples);
  memset(r->nodes, 0, sizeof *r->nodes * r->nnodes);
  r->nnodes = 0;
  for (int s = 0; s <= CH_MAX_SLOTS; s++) r->slot_node[s] = -1;
  r->nspans = 0;
  r->nprog = 0;
  r->max_cluster_step = 0;
  r->t0 = 0;
  r->nckpts = 0;
  r->latest_seen[0] = 0;
  r->latest_step = r->latest_gen = 0;
  ea__chaos_rmrf(r->ckpt_dir); /* tmpfs: empties it; else removes the dir */
  ea__chaos_mkdirs(r->ckpt_dir, 0755);
  return rc;
}
