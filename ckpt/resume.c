/* resume.c — which checkpoint a job resumes from: the one resume-candidate
 * search, and --resume-from.
 *
 * Resume does not trust LATEST: it lists the directory, takes the
 * checkpoints newest first (step, then generation) and falls back past
 * every one that is incomplete, superseded (store.c explains the word) or
 * damaged, recording why, until one verifies.  Callers with a say of their
 * own — the trainer, for which a checkpoint must also *load* (its header
 * and payload digests check out, its model fits) — pass an accept hook and
 * get the same walk, with their refusals recorded among the damage, rather
 * than a second copy of the loop that could drift from this one.
 *
 * An explicitly named checkpoint (ea_ckpt_resolve: a step, a directory
 * name, a path) gets no fallback: it verifies, or it is an error. */
#include "ckpt_int.h"

#include "ea_ckpt.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Records a checkpoint passed over: in out->skipped while there is room,
 * and to the caller's hook always. */
static void pass_over(ea_ckpt_resume *out, const ea_ckpt_resume_hooks *h, const char *name,
                      bool superseded, const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void pass_over(ea_ckpt_resume *out, const ea_ckpt_resume_hooks *h, const char *name,
                      bool superseded, const char *fmt, ...) {
  char why[sizeof out->skipped[0].reason];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  if (out->n_skipped < EA_CKPT_RESUME_MAX_SKIPPED) {
    snprintf(out->skipped[out->n_skipped].name, sizeof out->skipped[0].name, "%s", name);
    memcpy(out->skipped[out->n_skipped].reason, why, sizeof why);
    out->n_skipped++;
  }
  if (h && h->skipped) h->skipped(h->arg, name, why, superseded);
}

/* Loads and verifies the checkpoint at path and offers it to accept.
 * 0: taken (out filled); 1: passed over (recorded); < 0: accept's error. */
static int try_one(ea_ckpt_resume *out, const ea_ckpt_resume_hooks *h, const char *path,
                   const char *name, ea_ckpt_verify_mode mode) {
  ea_ckpt_manifest m;
  char err[1024];
  int rc = ea_ckpt_manifest_load(path, &m, err, sizeof err);
  if (rc < 0) {
    pass_over(out, h, name, false, "%s", err);
    return 1;
  }
  ea_ckpt_verify_report rep;
  rc = ea_ckpt_verify(path, &m, mode, 0, &rep);
  if (rc < 0) {
    pass_over(out, h, name, false, "%s", rep.msg);
    ea_ckpt_manifest_close(&m);
    return 1;
  }
  if (h && h->accept) {
    ea_ckpt_candidate c = {.name = name, .path = path, .manifest = &m};
    err[0] = 0;
    rc = h->accept(h->arg, &c, err, sizeof err);
    if (rc != 0) {
      if (rc > 0) pass_over(out, h, name, false, "%s", err);
      ea_ckpt_manifest_close(&m);
      return rc > 0 ? 1 : rc;
    }
  }
  snprintf(out->path, sizeof out->path, "%s", path);
  snprintf(out->name, sizeof out->name, "%s", name);
  out->manifest = m;
  return 0;
}

int ea_ckpt_search_resume(const char *dir, ea_ckpt_verify_mode mode,
                          const ea_ckpt_resume_hooks *hooks, ea_ckpt_resume *out) {
  memset(out, 0, sizeof *out);
  ea_ckpt_entry *e = NULL;
  size_t n = 0;
  int rc = ea_ckpt_list(dir, &e, &n);
  if (rc < 0) return rc;
  out->listed = true;
  rc = -ENOENT;
  for (size_t i = 0; i < n; i++) {
    if (!e[i].has_manifest) continue; /* a save in progress or a leftover: not a checkpoint */
    if (!e[i].complete) {
      pass_over(out, hooks, e[i].name, false, "%s", e[i].error);
      continue;
    }
    if (e[i].superseded) {
      pass_over(out, hooks, e[i].name, true,
                "superseded: a newer generation resumed from an earlier step");
      continue;
    }
    char ck[EA_CKPT_PATH_MAX];
    if (ea__ck_join(ck, sizeof ck, dir, e[i].name) < 0) continue;
    int r = try_one(out, hooks, ck, e[i].name, mode);
    if (r <= 0) {
      rc = r;
      break;
    }
  }
  free(e);
  return rc;
}

int ea_ckpt_find_resume(const char *dir, ea_ckpt_verify_mode mode, ea_ckpt_resume *out) {
  return ea_ckpt_search_resume(dir, mode, NULL, out);
}

static bool all_digits(const char *s) {
  if (!*s) return false;
  for (; *s; s++)
    if (*s < '0' || *s > '9') return false;
  return true;
}

int ea_ckpt_resolve(const char *dir, const char *spec, ea_ckpt_verify_mode mode,
                    ea_ckpt_resume *out) {
  if (!spec || !*spec || strcmp(spec, "latest") == 0) return ea_ckpt_find_resume(dir, mode, out);
  memset(out, 0, sizeof *out);
  char path[EA_CKPT_PATH_MAX], name[EA_CKPT_NAME_MAX];
  uint64_t s, g;
  if (all_digits(spec)) {
    uint64_t step;
    if (ea__ck_parse_u64(spec, &step) < 0) return -EINVAL;
    ea_ckpt_entry *e = NULL;
    size_t n = 0;
    int rc = ea_ckpt_list(dir, &e, &n);
    if (rc < 0) return rc;
    rc = -ENOENT;
    for (size_t i = 0; i < n; i++) /* newest generation of that step first */
      if (e[i].step == step && e[i].complete) {
        snprintf(name, sizeof name, "%s", e[i].name);
        rc = 0;
        break;
      }
    free(e);
    if (rc < 0) return rc;
    if (ea__ck_join(path, sizeof path, dir, name) < 0) return -ENAMETOOLONG;
  } else if (!strchr(spec, '/') && ea_ckpt_parse_dir_name(spec, &s, &g) == 0) {
    snprintf(name, sizeof name, "%s", spec);
    if (ea__ck_join(path, sizeof path, dir, spec) < 0) return -ENAMETOOLONG;
  } else {
    if (snprintf(path, sizeof path, "%s", spec) >= (int)sizeof path) return -ENAMETOOLONG;
    size_t l = strlen(path);
    while (l > 1 && path[l - 1] == '/') path[--l] = 0;
    const char *b = strrchr(path, '/');
    snprintf(name, sizeof name, "%.*s", (int)sizeof name - 1, b ? b + 1 : path);
  }
  char mp[EA_CKPT_PATH_MAX];
  struct stat st;
  if (ea__ck_manifest_path(mp, sizeof mp, path, false) < 0) return -ENAMETOOLONG;
  if (stat(mp, &st) != 0) {
    int rc = -errno;
    pass_over(out, NULL, name, false, "%s: %s (not a complete checkpoint)", mp,
              ea__ck_strerror(rc));
    return rc == -ENOENT ? -ENOENT : rc;
  }
  return try_one(out, NULL, path, name, mode) != 0 ? -EBADMSG : 0;
}

void ea_ckpt_resume_close(ea_ckpt_resume *r) {
  ea_ckpt_manifest_close(&r->manifest);
}
