/* The checkpoint directory: preparing a step directory, listing, retention.
 *
 * The directory is the database.  There is no index file to keep in sync:
 * a checkpoint is a step-<s>.gen-<g> directory holding a MANIFEST, and
 * everything else (LATEST, the listing, the resume choice) is derived from
 * scanning it.  LATEST is a convenience for operators and tools and a
 * second witness of the newest generation; resume does not trust it over
 * the manifests, because a crash between the MANIFEST rename and the LATEST
 * rename leaves LATEST one checkpoint behind, correctly.  (Names and paths:
 * layout.c; the resume search: resume.c; the lock: lock.c.)
 *
 * Ordering.  Checkpoints are ordered by step, then generation.  One
 * exception makes generation fencing hold across a split brain: a complete
 * checkpoint is *superseded* when a complete checkpoint of a newer
 * generation has a lower step — the newer generation restarted from an
 * earlier state, so the higher step belongs to an abandoned timeline (a stale
 * controller that committed before it learnt it was replaced).  Superseded
 * checkpoints are listed, never resumed from, and deleted first.
 *
 * Retention deletes a complete checkpoint MANIFEST first and makes that
 * durable before removing its shards, so a crash in the middle leaves a
 * leftover without a MANIFEST (removed by the next pass), never a MANIFEST
 * that names missing shards.  It runs under the same flock as commit, whose
 * wait is bounded (ea_ckpt_set_lock_timeout_ms): a holder frozen inside a
 * commit makes the others fail fast, having written nothing, instead of
 * queueing behind it forever. */
#include "ckpt_int.h"

#include "ea_base.h"
#include "ea_ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- prepare ------------------------------------------------------------ */

int ea_ckpt_prepare(const char *dir, uint64_t step, uint64_t generation, char *path_out,
                    size_t path_cap, char *err, size_t errlen) {
  char ck[EA_CKPT_PATH_MAX];
  int rc;
  if ((rc = ea__ck_step_path(ck, sizeof ck, dir, step, generation)) < 0) {
    ea_seterr(err, errlen, "prepare %s: path too long", dir);
    return rc;
  }
  rc = ea__fs_mkdir(dir, 0755);
  if (rc == 0) {
    /* DIR is new: its own entry must survive a crash too */
    char parent[EA_CKPT_PATH_MAX];
    if ((rc = ea__ck_parent(parent, sizeof parent, dir)) < 0) {
      ea_seterr(err, errlen, "prepare %s: path too long", dir);
      return rc;
    }
    if ((rc = ea__fs_fsync_dir(parent, err, errlen)) < 0) return rc;
  } else if (rc != -EEXIST) {
    ea_seterr(err, errlen, "mkdir %s: %s", dir, ea__ck_strerror(rc));
    return rc;
  }
  rc = ea__fs_mkdir(ck, 0755);
  if (rc < 0 && rc != -EEXIST) {
    ea_seterr(err, errlen, "mkdir %s: %s", ck, ea__ck_strerror(rc));
    return rc;
  }
  if ((rc = ea__fs_fsync_dir(dir, err, errlen)) < 0) return rc;
  if (path_out && snprintf(path_out, path_cap, "%s", ck) >= (int)path_cap) return -ENAMETOOLONG;
  return 0;
}

/* ---- listing ------------------------------------------------------------ */

static int cmp_newest_first(const void *a, const void *b) {
  const ea_ckpt_entry *x = a, *y = b;
  if (x->step != y->step) return x->step > y->step ? -1 : 1;
  if (x->generation != y->generation) return x->generation > y->generation ? -1 : 1;
  return 0;
}

static uint64_t dir_bytes(const char *path) {
  DIR *d = opendir(path);
  if (!d) return 0;
  uint64_t sum = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    struct stat st;
    if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
      sum += (uint64_t)st.st_size;
  }
  closedir(d);
  return sum;
}

static void fill_entry(const char *dir, ea_ckpt_entry *e) {
  char ck[EA_CKPT_PATH_MAX], mp[EA_CKPT_PATH_MAX];
  struct stat st;
  if (ea__ck_join(ck, sizeof ck, dir, e->name) < 0 ||
      ea__ck_manifest_path(mp, sizeof mp, ck, false) < 0)
    return;
  if (stat(ck, &st) == 0) e->created = (int64_t)st.st_mtime;
  e->has_manifest = stat(mp, &st) == 0;
  if (e->has_manifest) {
    ea_ckpt_manifest m;
    char err[sizeof e->error];
    if (ea_ckpt_manifest_load(ck, &m, err, sizeof err) < 0) {
      snprintf(e->error, sizeof e->error, "%s", err);
    } else if (m.step != e->step || m.generation != e->generation) {
      snprintf(e->error, sizeof e->error,
               "MANIFEST is for step %" PRIu64 " generation %" PRIu64 ", not this directory",
               m.step, m.generation);
      ea_ckpt_manifest_close(&m);
    } else {
      e->complete = true;
      e->world_size = m.world_size;
      e->bytes = m.total_bytes;
      e->created = m.created;
      ea_ckpt_manifest_close(&m);
      return;
    }
  }
  e->bytes = dir_bytes(ck);
}

int ea_ckpt_list(const char *dir, ea_ckpt_entry **out, size_t *n) {
  *out = NULL;
  *n = 0;
  DIR *d = opendir(dir);
  if (!d) return -errno;
  char latest[EA_CKPT_NAME_MAX] = "";
  if (ea_ckpt_read_latest(dir, latest, sizeof latest) < 0) latest[0] = 0;
  ea_ckpt_entry *v = NULL;
  size_t cnt = 0, cap = 0;
  struct dirent *de;
  int rc = 0;
  while ((de = readdir(d))) {
    uint64_t s, g;
    if (strlen(de->d_name) >= EA_CKPT_NAME_MAX || ea_ckpt_parse_dir_name(de->d_name, &s, &g) < 0)
      continue;
    struct stat st;
    if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode))
      continue;
    if ((rc = EA_ARRAY_RESERVE(v, cap, cnt + 1)) != 0) break;
    ea_ckpt_entry *e = &v[cnt++];
    memset(e, 0, sizeof *e);
    memcpy(e->name, de->d_name, strlen(de->d_name) + 1);
    e->step = s;
    e->generation = g;
    e->latest = strcmp(latest, de->d_name) == 0;
  }
  closedir(d);
  if (rc < 0) {
    free(v);
    return rc;
  }
  for (size_t i = 0; i < cnt; i++) fill_entry(dir, &v[i]);
  for (size_t i = 0; i < cnt; i++) {
    if (!v[i].complete) continue;
    for (size_t j = 0; j < cnt; j++)
      if (v[j].complete && v[j].generation > v[i].generation && v[j].step < v[i].step) {
        v[i].superseded = true;
        break;
      }
  }
  if (cnt > 1) qsort(v, cnt, sizeof *v, cmp_newest_first);
  *out = v;
  *n = cnt;
  return 0;
}

/* ---- retention ---------------------------------------------------------- */

/* Removes the regular files of ck and ck itself (only what ckpt/ puts
 * there: anything else makes rmdir fail, which is reported). */
static int remove_tree(const char *ck, char *err, size_t errlen) {
  DIR *d = opendir(ck);
  if (!d) {
    int rc = -errno;
    if (rc == -ENOENT) return 0;
    ea_seterr(err, errlen, "opendir %s: %s", ck, ea__ck_strerror(rc));
    return rc;
  }
  struct dirent *de;
  int rc = 0;
  while ((de = readdir(d))) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    char p[EA_CKPT_PATH_MAX];
    if (ea__ck_join(p, sizeof p, ck, de->d_name) < 0) continue;
    struct stat st;
    if (lstat(p, &st) != 0 || S_ISDIR(st.st_mode)) continue;
    int u = ea__fs_unlink(p);
    if (u < 0 && u != -ENOENT && rc == 0) {
      rc = u;
      ea_seterr(err, errlen, "unlink %s: %s", p, ea__ck_strerror(u));
    }
  }
  closedir(d);
  if (rc < 0) return rc;
  rc = ea__fs_rmdir(ck);
  if (rc < 0 && rc != -ENOENT) {
    ea_seterr(err, errlen, "rmdir %s: %s", ck, ea__ck_strerror(rc));
    return rc;
  }
  return 0;
}

/* A complete checkpoint: un-commit it durably, then remove the rest. */
static int remove_complete(const char *ck, char *err, size_t errlen) {
  char mp[EA_CKPT_PATH_MAX];
  int rc = ea__ck_manifest_path(mp, sizeof mp, ck, false);
  if (rc < 0) return rc;
  rc = ea__fs_unlink(mp);
  if (rc < 0 && rc != -ENOENT) {
    ea_seterr(err, errlen, "unlink %s: %s", mp, ea__ck_strerror(rc));
    return rc;
  }
  if ((rc = ea__fs_fsync_dir(ck, err, errlen)) < 0) return rc;
  return remove_tree(ck, err, errlen);
}

static bool in_set(const char *name, const char *const *set, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (!set[i]) continue;
    const char *b = strrchr(set[i], '/');
    b = b ? b + 1 : set[i];
    if (strcmp(b, name) == 0) return true;
  }
  return false;
}

int ea_ckpt_retain(const char *dir, uint32_t keep_last, const char *const *in_progress,
                   size_t n_in_progress, ea_ckpt_retain_stats *st, char *err, size_t errlen) {
  return ea_ckpt_retain_after(dir, keep_last, EA_CKPT_NO_STEP, 0, in_progress, n_in_progress, st,
                              err, errlen);
}

int ea_ckpt_retain_after(const char *dir, uint32_t keep_last, uint64_t after_step,
                         uint64_t after_gen, const char *const *in_progress, size_t n_in_progress,
                         ea_ckpt_retain_stats *st, char *err, size_t errlen) {
  ea_ckpt_retain_stats dummy;
  if (!st) st = &dummy;
  memset(st, 0, sizeof *st);
  if (keep_last == 0) keep_last = 1;
  char lerr[EA_CKPT_PATH_MAX + 600];
  int lk = ea__ck_lock_dir(dir, lerr, sizeof lerr);
  if (lk < 0) {
    ea_seterr(err, errlen, "retain %s: nothing removed: %s", dir, lerr);
    return lk;
  }
  ea_ckpt_entry *e = NULL;
  size_t n = 0;
  int rc = ea_ckpt_list(dir, &e, &n);
  if (rc < 0) {
    ea_seterr(err, errlen, "list %s: %s", dir, ea__ck_strerror(rc));
    close(lk);
    return rc;
  }
  /* the newest complete checkpoint: the first non-superseded one, or, if
   * every complete one is superseded (cannot happen: the superseding one is
   * not), the first complete one */
  const ea_ckpt_entry *newest = NULL;
  for (size_t i = 0; i < n && !newest; i++)
    if (e[i].complete && !e[i].superseded) newest = &e[i];
  for (size_t i = 0; i < n && !newest; i++)
    if (e[i].complete) newest = &e[i];

  bool removed = false;
  uint32_t kept = 0;
  /* two passes: current timeline first, then superseded ones */
  for (int pass = 0; pass < 2 && rc == 0; pass++) {
    for (size_t i = 0; i < n && rc == 0; i++) {
      if (!e[i].complete || e[i].superseded != (pass == 1)) continue;
      if (&e[i] == newest || e[i].latest || kept < keep_last ||
          in_set(e[i].name, in_progress, n_in_progress)) {
        kept++;
        continue;
      }
      char ck[EA_CKPT_PATH_MAX];
      if ((rc = ea__ck_join(ck, sizeof ck, dir, e[i].name)) < 0) break;
      if ((rc = remove_complete(ck, err, errlen)) < 0) break;
      st->removed_complete++;
      removed = true;
    }
  }
  st->kept = kept;
  /* Leftovers.  Older than the newest complete checkpoint: abandoned, gone.
   * Newer ones (or any, when nothing is complete yet) may be saves another
   * controller is still writing, so they stay — but only the
   * EA_CKPT_PARTIAL_KEEP newest of them beyond the caller's in-progress
   * set: commits that keep failing (a full disk, a missing shard, a fence
   * that refuses them) must not fill the disk with step directories one
   * per save interval.  LATEST protects complete checkpoints only: one
   * naming a leftover is not evidence that it is a checkpoint. */
  uint32_t newer_kept = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    if (e[i].complete || in_set(e[i].name, in_progress, n_in_progress)) continue;
    bool older = newest && (e[i].step < newest->step ||
                            (e[i].step == newest->step && e[i].generation < newest->generation) ||
                            e[i].generation < newest->generation);
    /* A save that began after the commit running this retention: every
     * rank stages in step order, so its reports may still be on their way
     * (the in-progress set was taken when this commit was queued, and the
     * ranks trained on meanwhile); a later commit's retention judges it. */
    const bool later =
        after_step != EA_CKPT_NO_STEP && e[i].step > after_step && e[i].generation >= after_gen;
    if (!older && later) continue;
    if (!older && newer_kept < EA_CKPT_PARTIAL_KEEP) {
      newer_kept++;
      continue;
    }
    char ck[EA_CKPT_PATH_MAX];
    if ((rc = ea__ck_join(ck, sizeof ck, dir, e[i].name)) < 0) break;
    if ((rc = remove_tree(ck, err, errlen)) < 0) break;
    st->removed_partial++;
    removed = true;
  }
  if (rc == 0) {
    /* a LATEST.tmp is a commit that died before its rename (no commit runs
     * now: we hold the lock) */
    char lt[EA_CKPT_PATH_MAX];
    if (ea__ck_latest_path(lt, sizeof lt, dir, true) == 0 && ea__fs_unlink(lt) == 0) {
      st->removed_partial++;
      removed = true;
    }
  }
  if (rc == 0 && removed) rc = ea__fs_fsync_dir(dir, err, errlen);
  free(e);
  close(lk);
  return rc;
}
