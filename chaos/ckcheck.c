/* ckcheck.c — checkpoints, checked while the cluster runs and after.
 *
 * Retention deletes old checkpoints while the job runs, so the harness
 * looks at the checkpoint directory every second: each complete checkpoint
 * it has not seen is verified in full (ea_ckpt_verify re-hashes every
 * shard), its state is read back (any world size can read any checkpoint)
 * and parsed with its payload digest checked, and the XXH3 of its params —
 * the same digest the workers log after each step — is kept.  LATEST must
 * only move forward.  After the run, each of those digests must equal the
 * one the live generation logged after the checkpoint's step (a checkpoint
 * is the live state of its step, not something close to it), and the
 * newest checkpoint is resumed into an in-process trainer the way a cold
 * start would (ea_trainer_resume) and must reproduce that state too.
 */
#include "chaos.h"

#include "ea_rdzv.h"

#include "ea_ckpt.h"
#include "ea_train.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

static ea__chaos_ckpt *find(ea__chaos_run *r, const char *name) {
  for (size_t i = 0; i < r->nckpts; i++)
    if (strcmp(r->ckpts[i].name, name) == 0) return &r->ckpts[i];
  return NULL;
}

static bool gone(const char *ckpt_path) {
  char m[CH_PATH_MAX + 128];
  snprintf(m, sizeof m, "%s/MANIFEST", ckpt_path);
  struct stat st;
  return stat(m, &st) < 0 && errno == ENOENT;
}

static void inspect(ea__chaos_run *r, ea__chaos_ckpt *c) {
  char path[CH_PATH_MAX + 80];
  snprintf(path, sizeof path, "%s/%s", r->ckpt_dir, c->name);
  ea_ckpt_verify_report rep;
  memset(&rep, 0, sizeof rep);
  int rc = ea_ckpt_verify(path, NULL, EA_CKPT_VERIFY_FULL, 0, &rep);
  if (rc < 0 && gone(path)) {
    /* Retention deleted it meanwhile (MANIFEST first): it no longer
     * exists as a checkpoint, so there is nothing to hold against it. */
    snprintf(c->err, sizeof c->err, "removed by retention before it could be verified");
    return;
  }
  if (rc < 0) {
    snprintf(c->err, sizeof c->err, "verify: %.280s", rep.msg[0] ? rep.msg : strerror(-rc));
    ea__chaos_violate(r, EA__I_CKPT, "committed checkpoint %s does not verify: %s", c->name,
                      c->err);
    return;
  }
  c->verified = true;
  char err[512];
  ea_ckpt_reader *rd;
  rc = ea_ckpt_reader_open(&rd, path, 0, err, sizeof err);
  if (rc < 0 && gone(path)) {
    snprintf(c->err, sizeof c->err, "removed by retention before it was read back");
    return;
  }
  if (rc < 0) {
    snprintf(c->err, sizeof c->err, "open: %.280s", err);
    return;
  }
  const ea_ckpt_manifest *m = ea_ckpt_reader_manifest(rd);
  c->world = m->world_size;
  uint64_t total = m->total_bytes;
  void *buf = total ? malloc(total) : NULL;
  if (!buf) {
    ea_ckpt_reader_free(rd);
    snprintf(c->err, sizeof c->err, "state of %" PRIu64 " bytes: out of memory", total);
    return;
  }
  rc = ea_ckpt_reader_read(rd, 0, buf, total, err, sizeof err);
  ea_ckpt_reader_free(rd);
  if (rc < 0 && gone(path)) {
    free(buf);
    c->verified = false;
    snprintf(c->err, sizeof c->err, "removed by retention while it was read back");
    return;
  }
  if (rc < 0) {
    snprintf(c->err, sizeof c->err, "read: %.280s", err);
    ea__chaos_violate(r, EA__I_CKPT, "checkpoint %s verified but could not be read back: %s",
                      c->name, err);
    return;
  }
  ea_state_info info;
  rc = ea_state_parse(buf, total, true, &info, err, sizeof err);
  if (rc < 0) {
    /* A user's worker_command stores its own format: only the built-in
     * trainer's state can be checked further. */
    if (r->cfg.compute.worker_command[0] == 0)
      ea__chaos_violate(r, EA__I_CKPT, "checkpoint %s: its state does not parse: %s", c->name, err);
    snprintf(c->err, sizeof c->err, "state: %.280s", err);
    free(buf);
    return;
  }
  if (info.step != c->step)
    ea__chaos_violate(r, EA__I_CKPT, "checkpoint %s holds the state of step %" PRIu64, c->name,
                      info.step);
  c->digest =
      XXH3_64bits((const char *)buf + EA_STATE_HEADER_BYTES, (size_t)info.nparams * sizeof(float));
  c->state_ok = true;
  free(buf);
}

void ea__chaos_ckpt_scan(ea__chaos_run *r) {
  ea_ckpt_entry *ents = NULL;
  size_t n = 0;
  if (ea_ckpt_list(r->ckpt_dir, &ents, &n) < 0) return;
  for (size_t i = 0; i < n; i++) {
    ea_ckpt_entry *e = &ents[i];
    if (!e->complete || find(r, e->name)) continue;
    if (EA_ARRAY_RESERVE(r->ckpts, r->capckpts, r->nckpts + 1) != 0) break;
    ea__chaos_ckpt *c = &r->ckpts[r->nckpts++];
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", e->name);
    c->step = e->step;
    c->gen = e->generation;
    c->t_seen = ea__chaos_now_ms();
    inspect(r, c);
  }
  free(ents);
  char latest[EA_CKPT_NAME_MAX];
  if (ea_ckpt_read_latest(r->ckpt_dir, latest, sizeof latest) == 0 &&
      strcmp(latest, r->latest_seen) != 0) {
    uint64_t s, g;
    if (ea_ckpt_parse_dir_name(latest, &s, &g) == 0) {
      if (r->latest_seen[0] && (g < r->latest_gen || (g == r->latest_gen && s < r->latest_step)))
        ea__chaos_violate(r, EA__I_CKPT, "LATEST moved back from %s to %s", r->latest_seen, latest);
      r->latest_step = s;
      r->latest_gen = g;
    }
    snprintf(r->latest_seen, sizeof r->latest_seen, "%s", latest);
  }
}

void ea__chaos_ckpt_final(ea__chaos_run *r) {
  if (!r->ckpt_available) return;
  for (size_t i = 0; i < r->nckpts; i++) {
    ea__chaos_ckpt *c = &r->ckpts[i];
    if (!c->state_ok || c->step == 0) continue;
    uint64_t live;
    if (!ea__chaos_gen_digest(r, c->gen, c->step - 1, &live)) continue;
    c->live_known = true;
    c->live_match = live == c->digest;
    if (!c->live_match)
      ea__chaos_violate(r, EA__I_CKPT,
                        "checkpoint %s holds params digest %016" PRIx64 ", but generation %" PRIu64
                        " logged %016" PRIx64 " after step %" PRIu64,
                        c->name, c->digest, ea_rdzv_gen64_term(c->gen), live, c->step - 1);
  }
  if (r->cfg.compute.worker_command[0]) return;
  /* Resume the newest, as a cold start would. */
  ea_train_config tc;
  ea_data *data = NULL;
  ea_trainer *t = NULL;
  char err[512];
  if (ea_train_config_from(&tc, &r->cfg, err, sizeof err) < 0 ||
      ea_data_open(r->cfg.train.data, &data, err, sizeof err) < 0 ||
      ea_trainer_new(&tc, data, &t, err, sizeof err) < 0) {
    snprintf(r->resume_msg, sizeof r->resume_msg, "cannot build a trainer: %.250s", err);
    if (data) ea_data_close(data);
    return;
  }
  ea_trainer_resume_info info;
  int rc = ea_trainer_resume(t, r->ckpt_dir, "latest", true, &info, err, sizeof err);
  r->resume_checked = true;
  if (rc == -ENOENT) {
    snprintf(r->resume_msg, sizeof r->resume_msg, "no checkpoint to resume from");
    r->resume_ok = r->nckpts == 0;
    if (r->nckpts)
      ea__chaos_violate(r, EA__I_CKPT,
                        "checkpoints were committed, but none is left to resume from");
  } else if (rc < 0) {
    snprintf(r->resume_msg, sizeof r->resume_msg, "resume failed: %.250s", err);
    ea__chaos_violate(r, EA__I_CKPT, "resuming the newest checkpoint failed: %s", err);
  } else {
    uint64_t dig = ea_trainer_params_digest(t), live = 0;
    bool known = info.step > 0 && ea__chaos_gen_digest(r, info.generation, info.step - 1, &live);
    r->resume_ok = known && live == dig;
    snprintf(r->resume_msg, sizeof r->resume_msg,
             "resumed %s (step %" PRIu64
             ", world %u, %u newer passed over): params digest %016" PRIx64 "%s%016" PRIx64,
             info.name, info.step, info.world_size, info.fallbacks, dig,
             known ? (live == dig ? " = live " : " != live ") : ", live digest unknown ", live);
    if (info.fallbacks)
      ea__chaos_violate(r, EA__I_CKPT, "resume passed over %u newer checkpoint(s): %s",
                        info.fallbacks, info.why);
    if (known && live != dig) ea__chaos_violate(r, EA__I_CKPT, "%s", r->resume_msg);
  }
  ea_trainer_free(t);
  ea_data_close(data);
}
