/* smoke.c — `elastic-agent run --smoke N`: a short trial of the job as
 * configured, then a report of PASS/FAIL rows (smoke.h says what a smoke
 * run is and checks).
 *
 * Nothing is re-implemented here: the job is the agent's own (its
 * formation, training, checkpoint and job end), the checkpoint is found
 * with ea_ckpt_resolve and verified with ea_ckpt_verify (what `ckpt
 * verify` runs), the restore is a generation of the job itself formed
 * with no live state (the cold-start path, through the rendezvous:
 * ea_rdzv_reform and JOB_RESTORE), and the reload is ea_trainer_resume
 * into a fresh trainer.  The agent only records what it saw through a few
 * hooks on its loop (agent/smoke.c); this file is the command line's side:
 * the job's keys before the run, then the checks, in main's thread after
 * the loop is gone, so they may block, and the report.
 */
#include "smoke.h"

#include "agent_int.h"

#include "ea_ckpt.h"
#include "ea_log.h"
#include "ea_train.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int ea__smoke_prepare(ea__smoke *s, ea_config *cfg, const char *data_dir, int argc,
                      char *const *argv, char *err, size_t errlen) {
  ea__mode mode;
  int rc = ea__launch_mode(cfg, argc, argv, &mode, err, errlen);
  if (rc < 0) return rc;
  s->builtin = mode == EA__MODE_BUILTIN;
  if (!s->builtin) return 0; /* N seconds of the program as configured */
  char v[32], e2[512];
  snprintf(v, sizeof v, "%" PRIu64, s->n);
  if (ea_config_set(cfg, "train.steps", v, e2, sizeof e2) < 0 ||
      ea_config_set(cfg, "checkpoint.save_interval_steps", v, e2, sizeof e2) < 0 ||
      ea_config_set(cfg, "checkpoint.resume_from_last", "false", e2, sizeof e2) < 0) {
    snprintf(err, errlen, "--smoke %" PRIu64 ": %s", s->n, e2);
    return -EINVAL;
  }
  /* A warmup longer than the run would not validate: shorten it. */
  if (cfg->train.warmup_steps > s->n) cfg->train.warmup_steps = (uint32_t)s->n;
  if (ea_config_validate(cfg, e2, sizeof e2) < 0) {
    snprintf(err, errlen, "--smoke %" PRIu64 ": %s", s->n, e2);
    return -EINVAL;
  }
  /* Its own directory: a smoke run neither resumes from the real
   * checkpoints nor lets retention remove them. */
  char dir[EA_PATH_MAX];
  int n = cfg->checkpoint.dir[0]
              ? snprintf(dir, sizeof dir, "%s/%s", cfg->checkpoint.dir, EA__SMOKE_DIR)
              : snprintf(dir, sizeof dir, "%s/checkpoints/%s", data_dir, EA__SMOKE_DIR);
  if (n < 0 || (size_t)n >= sizeof cfg->checkpoint.dir) {
    snprintf(err, errlen, "--smoke: checkpoint.dir is too long");
    return -ENAMETOOLONG;
  }
  memcpy(cfg->checkpoint.dir, dir, (size_t)n + 1);
  /* The writer makes the step directories, not their parents.  A failure
   * here is left for the run to show (the checkpoint then fails, and the
   * report says so). */
  for (char *p = dir + 1;; p++) {
    char c = *p;
    if (c && c != '/') continue;
    *p = 0;
    (void)mkdir(dir, 0755);
    *p = c;
    if (!c) break;
  }
  return 0;
}

/* ---- the report --------------------------------------------------------------------- */

static int nfail, npass;

static void row(bool ok, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void row(bool ok, const char *name, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("%s  %-11s ", ok ? "PASS" : "FAIL", name);
  vprintf(fmt, ap);
  putchar('\n');
  va_end(ap);
  if (ok)
    npass++;
  else
    nfail++;
}

static const char *human(double b, char *buf, size_t cap) {
  static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, u++;
  snprintf(buf, cap, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
  return buf;
}

static const char *exit_meaning(int rc) {
  switch (rc) {
    case EA__EXIT_OK:
      return "the job ended";
    case EA__EXIT_START:
      return "the agent could not start (its log says why)";
    case EA__EXIT_RESTARTS:
      return "a worker failed with runtime.max_restarts used up";
    case EA__EXIT_MIN_NODES:
      return "fewer than compute.min_nodes nodes for runtime.rendezvous_timeout_seconds";
    case EA__EXIT_FINAL_CKPT:
      return "the final checkpoint could not be committed (see the checkpoint alerts)";
    default:
      return "the job failed";
  }
}

static void report_training(const ea__smoke *s) {
  if (!s->have_first) {
    row(false, "trained", "no step was completed here");
    return;
  }
  uint64_t steps = s->last_step - s->first_step;
  double secs = (double)(s->last_ms - s->first_ms) / 1e3;
  if (steps > 0 && secs > 0)
    row(true, "trained",
        "steps %" PRIu64 "..%" PRIu64 " at world %u: %.1f steps/s; loss %.4f -> %.4f",
        s->first_step, s->last_step, s->world, (double)steps / secs, s->first_loss, s->last_loss);
  else
    row(true, "trained", "step %" PRIu64 " at world %u; loss %.4f", s->last_step, s->world,
        s->last_loss);
}

/* The restore into a fresh generation: formed after the checkpoint was
 * committed, with no live state offered, so it loaded the checkpoint; the
 * digests here after it are the ones before. */
static void report_restore(const ea__smoke *s) {
  if (!s->restore_asked) {
    row(false, "restore", "no fresh generation was asked for (no JOB_RESTORE reached this node)");
    return;
  }
  if (!s->restore_gen) {
    row(false, "restore", "no generation was committed here after the checkpoint");
    return;
  }
  if (s->restore_synced_live) {
    row(false, "restore",
        "generation %" PRIu64 " synced a live state instead of loading the checkpoint",
        s->restore_gen >> 16);
    return;
  }
  bool ok = s->before_agree && s->digests_agree && s->digest == s->before_digest &&
            s->next_step == s->n && (!s->loaded_here || s->loaded_digest == s->before_digest);
  char loaded[160] = "";
  if (s->loaded_here)
    snprintf(loaded, sizeof loaded, "; %s read here (digest %016" PRIx64 ")", s->loaded_name,
             s->loaded_digest);
  row(ok, "restore",
      "generation %" PRIu64 " (fresh, world %u) loaded the checkpoint%s: params digest %016" PRIx64
      " at step %" PRIu64 " %s the workers' %016" PRIx64 " before it",
      s->restore_gen >> 16, s->restore_world, loaded, s->digest, s->next_step,
      ok ? "=" : "!=", s->before_digest);
}

static void report_builtin(ea__smoke *s, const ea_config *cfg, int rc) {
  printf("smoke run: %" PRIu64 " steps of the built-in trainer, checkpoints in %s\n", s->n,
         s->ckpt_dir);
  row(s->gens > 0, "formed", "%" PRIu64 " generation%s ran here", s->gens, s->gens == 1 ? "" : "s");
  report_training(s);
  row(s->next_step == s->n && s->digests_agree, "steps",
      "%u local worker%s at step %" PRIu64 " of %" PRIu64 "%s", s->wpn, s->wpn == 1 ? "" : "s",
      s->next_step, s->n, s->digests_agree ? ", params digests equal" : ", digests differ");
  row(rc == 0, "job_end", "exit status %d: %s", rc, exit_meaning(rc));
  if (rc != 0) {
    row(false, "checkpoint", "not checked: the job did not end well");
    return;
  }
  report_restore(s);
  /* The checkpoint of step N, found as --resume-from N would find it. */
  char spec[32];
  snprintf(spec, sizeof spec, "%" PRIu64, s->n);
  static ea_ckpt_resume res;
  memset(&res, 0, sizeof res);
  int r = ea_ckpt_resolve(s->ckpt_dir, spec, EA_CKPT_VERIFY_SIZE, &res);
  if (r < 0) {
    row(false, "checkpoint", "no checkpoint of step %s in %s: %s", spec, s->ckpt_dir,
        res.n_skipped ? res.skipped[0].reason : strerror(-r));
    ea_ckpt_resume_close(&res);
    return;
  }
  char b1[32];
  if (s->committed)
    row(true, "checkpoint",
        "%s committed here: %s, %u shard%s, %.3f s from first shard to MANIFEST", res.name,
        human((double)res.manifest.total_bytes, b1, sizeof b1), res.manifest.world_size,
        res.manifest.world_size == 1 ? "" : "s", s->ck_seconds);
  else
    row(true, "checkpoint", "%s (committed by the controller): %s, %u shard%s", res.name,
        human((double)res.manifest.total_bytes, b1, sizeof b1), res.manifest.world_size,
        res.manifest.world_size == 1 ? "" : "s");
  ea_ckpt_verify_report rep;
  memset(&rep, 0, sizeof rep);
  double t0 = mono_s();
  r = ea_ckpt_verify(res.path, &res.manifest, EA_CKPT_VERIFY_FULL, 0, &rep);
  double tv = mono_s() - t0;
  if (r < 0)
    row(false, "verify", "%s: %s", res.name, rep.msg[0] ? rep.msg : strerror(-r));
  else
    row(true, "verify", "every shard re-read and hashed (as `ckpt verify`): %.1f ms", tv * 1e3);
  char name[EA_CKPT_NAME_MAX];
  snprintf(name, sizeof name, "%s", res.name);
  ea_ckpt_resume_close(&res);
  if (r < 0) return;

  /* Once more in this process: a fresh trainer, the cold-start path. */
  char err[1024];
  ea_train_config tc;
  ea_data *data = NULL;
  ea_trainer *t = NULL;
  if (ea_train_config_from(&tc, cfg, err, sizeof err) < 0 ||
      ea_data_open(cfg->train.data, &data, err, sizeof err) < 0 ||
      ea_trainer_new(&tc, data, &t, err, sizeof err) < 0) {
    row(false, "reload", "cannot build a trainer: %s", err);
    ea_data_close(data);
    return;
  }
  ea_trainer_resume_info info;
  memset(&info, 0, sizeof info);
  t0 = mono_s();
  r = ea_trainer_resume(t, s->ckpt_dir, name, true, &info, err, sizeof err);
  double tr = mono_s() - t0;
  if (r < 0) {
    row(false, "reload", "%s", err);
  } else {
    uint64_t d = ea_trainer_params_digest(t), st = ea_trainer_step(t);
    bool ok = st == s->next_step && d == s->digest;
    row(ok, "reload",
        "%s loaded into a fresh trainer in %.1f ms: step %" PRIu64 ", params digest %016" PRIx64
        " %s the workers' %016" PRIx64 " at step %" PRIu64,
        name, tr * 1e3, st, d, ok ? "=" : "!=", s->digest, s->next_step);
  }
  ea_trainer_free(t);
  ea_data_close(data);
}

static void report_program(ea__smoke *s, int rc) {
  printf("smoke run: the program for up to %" PRIu64 " s\n", s->n);
  row(s->gens > 0, "formed", "%" PRIu64 " generation%s ran here", s->gens, s->gens == 1 ? "" : "s");
  if (s->have_first) report_training(s); /* a library program reports steps */
  row(s->failures_at_deadline == 0, "no_failure",
      "%" PRIu64 " worker failure%s%s, %" PRIu64 " restart%s", s->failures_at_deadline,
      s->failures_at_deadline == 1 ? "" : "s", s->deadline_hit ? " in the smoke window" : "",
      s->restarts, s->restarts == 1 ? "" : "s");
  if (s->failure[0]) printf("      %-11s last failure: %s\n", "", s->failure);
  if (s->deadline_hit)
    row(rc == 0, "ran", "still running after %" PRIu64 " s, then drained: exit status %d", s->n,
        rc);
  else
    row(rc == 0, "ended", "the program ended before %" PRIu64 " s: exit status %d: %s", s->n, rc,
        exit_meaning(rc));
  if (s->have_out)
    row(s->out_lines > 0, "output", "%" PRIu64 " line%s of the program's output captured",
        s->out_lines, s->out_lines == 1 ? "" : "s");
}

int ea__smoke_report(ea__smoke *s, const ea_config *cfg, int rc) {
  if (rc == EA__EXIT_USAGE) return rc;
  fflush(stderr);
  nfail = npass = 0;
  if (s->builtin)
    report_builtin(s, cfg, rc);
  else
    report_program(s, rc);
  printf("smoke: %s (%d passed, %d failed)\n", nfail ? "FAIL" : "PASS", npass, nfail);
  fflush(stdout);
  return nfail ? 1 : 0;
}
