/* The checkpoint directory: names, LATEST, listing, retention, resume.
 *
 * The directory is the database.  There is no index file to keep in sync:
 * a checkpoint is a step-<s>.gen-<g> directory holding a MANIFEST, and
 * everything else (LATEST, the listing, the resume choice) is derived from
 * scanning it.  LATEST is a convenience for operators and tools and a
 * second witness of the newest generation; resume does not trust it over
 * the manifests, because a crash between the MANIFEST rename and the LATEST
 * rename leaves LATEST one checkpoint behind, correctly.
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
#include "ea_ckpt.h"
#include "faults.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

/* ---- names -------------------------------------------------------------- */

int ea_ckpt_dir_name(char *out, size_t cap, uint64_t step, uint64_t generation) {
  int n = snprintf(out, cap, "step-%" PRIu64 ".gen-%" PRIu64, step, generation);
  return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

static bool dec(const char **p, uint64_t *v) {
  const char *s = *p;
  if (*s < '0' || *s > '9' || (s[0] == '0' && s[1] >= '0' && s[1] <= '9')) return false;
  uint64_t x = 0;
  while (*s >= '0' && *s <= '9') {
    unsigned d = (unsigned)(*s - '0');
    if (x > (UINT64_MAX - d) / 10) return false;
    x = x * 10 + d;
    s++;
  }
  *v = x;
  *p = s;
  return true;
}

int ea_ckpt_parse_dir_name(const char *name, uint64_t *step, uint64_t *generation) {
  uint64_t s, g;
  if (!name || strncmp(name, "step-", 5) != 0) return -EINVAL;
  const char *p = name + 5;
  if (!dec(&p, &s) || strncmp(p, ".gen-", 5) != 0) return -EINVAL;
  p += 5;
  if (!dec(&p, &g) || *p) return -EINVAL;
  *step = s;
  *generation = g;
  return 0;
}

int ea_ckpt_shard_name(char *out, size_t cap, uint32_t rank, uint32_t world) {
  int n = snprintf(out, cap, "shard-%u-of-%u.bin", rank, world);
  return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

int ea_ckpt_shard_path(char *out, size_t cap, const char *dir, uint64_t step, uint64_t generation,
                       uint32_t rank, uint32_t world) {
  char name[EA_CKPT_NAME_MAX], shard[EA_CKPT_NAME_MAX], ck[EA_CKPT_PATH_MAX];
  int rc;
  if ((rc = ea_ckpt_dir_name(name, sizeof name, step, generation)) < 0 ||
      (rc = ea_ckpt_shard_name(shard, sizeof shard, rank, world)) < 0 ||
      (rc = ea__ck_join(ck, sizeof ck, dir, name)) < 0)
    return rc;
  return ea__ck_join(out, cap, ck, shard);
}

void ea_ckpt_shard_range(uint64_t total, uint32_t world, uint32_t rank, uint64_t *offset,
                         uint64_t *length) {
  if (world == 0 || rank >= world) {
    *offset = total;
    *length = 0;
    return;
  }
  /* ⌊r·T/W⌋ without overflowing r·T: T = q·W + m */
  uint64_t q = total / world, m = total % world;
  uint64_t lo = q * rank + m * rank / world;
  uint64_t hi = q * (rank + 1) + m * (rank + 1) / world;
  *offset = lo;
  *length = hi - lo;
}

/* ---- the directory lock --------------------------------------------------- */

/* Commit and retention serialise on flock(DIR/.lock).  The wait for it is
 * bounded: a holder frozen inside a commit (SIGSTOP, a hung NFS client, a
 * debugger) would otherwise block every other controller's commit and
 * retention for as long as it stays frozen — observed: thousands of step
 * directories piling up uncommitted behind one stopped process.  A caller
 * that gives up has written nothing (nothing is written before the lock is
 * held), so the only cost of a timeout is that one commit (or one retention
 * pass) does nothing, with an error that names the holder.
 *
 * Why giving up is safe, and why the frozen holder may still finish its
 * commit when it wakes: see ea_ckpt_commit in manifest.c and "Commit" in
 * docs/checkpoints.md.
 *
 * flock has no timed form, so the wait polls LOCK_NB with an exponential
 * backoff.  The holder writes "pid P host H" into the lock file once it has
 * the lock, so a waiter that times out can name it even when the holder is
 * on another node of a shared file system; a holder on this host is named
 * from /proc/locks, which is right even for holders that do not record
 * themselves (`flock DIR/.lock elastic-agent ckpt verify`). */

static _Atomic uint32_t lock_timeout_ms = EA_CKPT_LOCK_TIMEOUT_MS;

/* Backoff between tries: from 1 ms (an uncontended hand-over between two
 * commits is noticed at once) doubling to 64 ms, so a released lock is
 * taken at most 64 ms late (about 1 % of the 5 s bound) and a full wait costs
 * about 80 wake-ups. */
#define LOCK_NAP_MIN_S 0.001
#define LOCK_NAP_MAX_S 0.064

uint32_t ea_ckpt_set_lock_timeout_ms(uint32_t ms) {
  return atomic_exchange(&lock_timeout_ms, ms ? ms : EA_CKPT_LOCK_TIMEOUT_MS);
}

/* The record is advisory (it only names the holder in a waiter's error), so
 * it does not go through the fault layer (it is no checkpoint data and must
 * not shift the fault points' counts) and a failure to write it is ignored.
 * Written over the old one, then trimmed: a waiter reading it never sees an
 * empty file. */
static void record_holder(int fd) {
  char host[256], line[320];
  if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "?");
  host[sizeof host - 1] = 0;
  int n = snprintf(line, sizeof line, "pid %ld host %s\n", (long)getpid(), host);
  if (n <= 0 || (size_t)n >= sizeof line) return;
  if (pwrite(fd, line, (size_t)n, 0) != n) return;
  /* if this fails, a longer old record keeps its tail: harmless, the parser
   * stops after the host */
  if (ftruncate(fd, n) != 0) return;
}

/* The pid of a process of this host holding an exclusive flock on fd's file,
 * from /proc/locks ("1: FLOCK  ADVISORY  WRITE 1234 fe:00:10953034 0 EOF";
 * a waiter's line has "->" after the number and is skipped).  0 if none. */
static long local_holder(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) return 0;
  FILE *f = fopen("/proc/locks", "re");
  if (!f) return 0;
  char line[256];
  long who = 0;
  while (!who && fgets(line, sizeof line, f)) {
    char kind[16], mode[16];
    long pid;
    unsigned maj, min;
    unsigned long long ino;
    int got = sscanf(line, "%*d: %15s %*s %15s %ld %x:%x:%llu", kind, mode, &pid, &maj, &min, &ino);
    if (got == 6 && strcmp(kind, "FLOCK") == 0 && strcmp(mode, "WRITE") == 0 &&
        maj == major(st.st_dev) && min == minor(st.st_dev) && ino == (unsigned long long)st.st_ino)
      who = pid;
  }
  fclose(f);
  return who;
}

static void describe_holder(int fd, char *out, size_t cap) {
  char buf[320], rhost[256] = "", host[256] = "";
  long rpid = 0;
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  if (n > 0) {
    buf[n] = 0;
    if (sscanf(buf, "pid %ld host %255s", &rpid, rhost) != 2) rpid = 0;
  }
  if (gethostname(host, sizeof host) != 0) host[0] = 0;
  host[sizeof host - 1] = 0;
  long lp = local_holder(fd);
  if (lp > 0 && lp == rpid)
    snprintf(out, cap, "pid %ld (host %s)", lp, host);
  else if (lp > 0)
    snprintf(out, cap, "pid %ld of this host (%s)", lp, host);
  else if (rpid > 0 && strcmp(rhost, host) != 0)
    snprintf(out, cap, "pid %ld on host %s (as it recorded itself)", rpid, rhost);
  else if (rpid > 0)
    snprintf(out, cap, "a process not visible from here (last recorded holder: pid %ld on %s)",
             rpid, rhost);
  else
    snprintf(out, cap, "a process that did not record itself");
}

int ea__ck_lock_dir(const char *dir, char *err, size_t cap) {
  char p[EA_CKPT_PATH_MAX];
  int rc = ea__ck_join(p, sizeof p, dir, ".lock");
  if (rc < 0) {
    ea__ck_seterr(err, cap, "lock %s: path too long", dir);
    return rc;
  }
  int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    rc = -errno;
    ea__ck_seterr(err, cap, "open %s: %s", p, ea__ck_strerror(rc));
    return rc;
  }
  const double limit = (double)atomic_load(&lock_timeout_ms) / 1e3;
  const double t0 = ea__ck_now();
  double nap = LOCK_NAP_MIN_S;
  for (;;) {
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) break;
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) {
      rc = -errno;
      close(fd);
      ea__ck_seterr(err, cap, "flock %s: %s", p, ea__ck_strerror(rc));
      return rc;
    }
    /* the deadline is checked after a failed try, so the last try is made
     * at the deadline itself, and a caller that was itself frozen past its
     * deadline still gets one try when it wakes */
    const double waited = ea__ck_now() - t0;
    if (waited >= limit) {
      char who[400];
      describe_holder(fd, who, sizeof who);
      close(fd);
      ea__ck_seterr(err, cap, "lock %s: still held by %s after waiting %.1f s", p, who, waited);
      return -ETIMEDOUT;
    }
    double d = nap < limit - waited ? nap : limit - waited;
    struct timespec ts = {.tv_sec = (time_t)d, .tv_nsec = (long)((d - (double)(time_t)d) * 1e9)};
    nanosleep(&ts, NULL); /* EINTR: the loop re-checks the clock */
    nap = nap * 2 < LOCK_NAP_MAX_S ? nap * 2 : LOCK_NAP_MAX_S;
  }
  record_holder(fd);
  return fd;
}

/* ---- prepare, LATEST ----------------------------------------------------- */

int ea_ckpt_prepare(const char *dir, uint64_t step, uint64_t generation, char *path_out,
                    size_t path_cap, char *err, size_t errlen) {
  char name[EA_CKPT_NAME_MAX], ck[EA_CKPT_PATH_MAX];
  int rc;
  if ((rc = ea_ckpt_dir_name(name, sizeof name, step, generation)) < 0 ||
      (rc = ea__ck_join(ck, sizeof ck, dir, name)) < 0) {
    ea__ck_seterr(err, errlen, "prepare %s: path too long", dir);
    return rc;
  }
  rc = ea__fs_mkdir(dir, 0755);
  if (rc == 0) {
    /* DIR is new: its own entry must survive a crash too */
    char parent[EA_CKPT_PATH_MAX];
    snprintf(parent, sizeof parent, "%s", dir);
    size_t l = strlen(parent);
    while (l > 1 && parent[l - 1] == '/') parent[--l] = 0;
    char *s = strrchr(parent, '/');
    if (!s)
      snprintf(parent, sizeof parent, ".");
    else if (s == parent)
      parent[1] = 0;
    else
      *s = 0;
    if ((rc = ea__fs_fsync_dir(parent, err, errlen)) < 0) return rc;
  } else if (rc != -EEXIST) {
    ea__ck_seterr(err, errlen, "mkdir %s: %s", dir, ea__ck_strerror(rc));
    return rc;
  }
  rc = ea__fs_mkdir(ck, 0755);
  if (rc < 0 && rc != -EEXIST) {
    ea__ck_seterr(err, errlen, "mkdir %s: %s", ck, ea__ck_strerror(rc));
    return rc;
  }
  if ((rc = ea__fs_fsync_dir(dir, err, errlen)) < 0) return rc;
  if (path_out && snprintf(path_out, path_cap, "%s", ck) >= (int)path_cap) return -ENAMETOOLONG;
  return 0;
}

int ea_ckpt_read_latest(const char *dir, char *name, size_t cap) {
  char p[EA_CKPT_PATH_MAX], buf[EA_CKPT_NAME_MAX + 2];
  int rc = ea__ck_join(p, sizeof p, dir, "LATEST");
  if (rc < 0) return rc;
  int fd = open(p, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n < 0) return -EIO;
  buf[n] = 0;
  if (n > 0 && buf[n - 1] == '\n') buf[--n] = 0;
  uint64_t s, g;
  if (ea_ckpt_parse_dir_name(buf, &s, &g) < 0) return -EBADMSG;
  if ((size_t)n >= cap) return -ENAMETOOLONG;
  memcpy(name, buf, (size_t)n + 1);
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
      ea__ck_join(mp, sizeof mp, ck, "MANIFEST") < 0)
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
    if (cnt == cap) {
      size_t nc = cap ? cap * 2 : 16;
      ea_ckpt_entry *nv = realloc(v, nc * sizeof *nv);
      if (!nv) {
        rc = -ENOMEM;
        break;
      }
      v = nv;
      cap = nc;
    }
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
    ea__ck_seterr(err, errlen, "opendir %s: %s", ck, ea__ck_strerror(rc));
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
      ea__ck_seterr(err, errlen, "unlink %s: %s", p, ea__ck_strerror(u));
    }
  }
  closedir(d);
  if (rc < 0) return rc;
  rc = ea__fs_rmdir(ck);
  if (rc < 0 && rc != -ENOENT) {
    ea__ck_seterr(err, errlen, "rmdir %s: %s", ck, ea__ck_strerror(rc));
    return rc;
  }
  return 0;
}

/* A complete checkpoint: un-commit it durably, then remove the rest. */
static int remove_complete(const char *ck, char *err, size_t errlen) {
  char mp[EA_CKPT_PATH_MAX];
  int rc = ea__ck_join(mp, sizeof mp, ck, "MANIFEST");
  if (rc < 0) return rc;
  rc = ea__fs_unlink(mp);
  if (rc < 0 && rc != -ENOENT) {
    ea__ck_seterr(err, errlen, "unlink %s: %s", mp, ea__ck_strerror(rc));
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
  ea_ckpt_retain_stats dummy;
  if (!st) st = &dummy;
  memset(st, 0, sizeof *st);
  if (keep_last == 0) keep_last = 1;
  char lerr[EA_CKPT_PATH_MAX + 600];
  int lk = ea__ck_lock_dir(dir, lerr, sizeof lerr);
  if (lk < 0) {
    ea__ck_seterr(err, errlen, "retain %s: nothing removed: %s", dir, lerr);
    return lk;
  }
  ea_ckpt_entry *e = NULL;
  size_t n = 0;
  int rc = ea_ckpt_list(dir, &e, &n);
  if (rc < 0) {
    ea__ck_seterr(err, errlen, "list %s: %s", dir, ea__ck_strerror(rc));
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
  for (size_t i = 0; i < n && rc == 0 && newest; i++) {
    if (e[i].complete || e[i].latest || in_set(e[i].name, in_progress, n_in_progress)) continue;
    bool older = e[i].step < newest->step ||
                 (e[i].step == newest->step && e[i].generation < newest->generation) ||
                 e[i].generation < newest->generation;
    if (!older) continue;
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
    if (ea__ck_join(lt, sizeof lt, dir, "LATEST.tmp") == 0 && ea__fs_unlink(lt) == 0) {
      st->removed_partial++;
      removed = true;
    }
  }
  if (rc == 0 && removed) rc = ea__fs_fsync_dir(dir, err, errlen);
  free(e);
  close(lk);
  return rc;
}

/* ---- resume ------------------------------------------------------------- */

static void skip(ea_ckpt_resume *out, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void skip(ea_ckpt_resume *out, const char *name, const char *fmt, ...) {
  if (out->n_skipped >= EA_CKPT_RESUME_MAX_SKIPPED) return;
  snprintf(out->skipped[out->n_skipped].name, sizeof out->skipped[0].name, "%s", name);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out->skipped[out->n_skipped].reason, sizeof out->skipped[0].reason, fmt, ap);
  va_end(ap);
  out->n_skipped++;
}

/* Loads and verifies the checkpoint at path; on success fills out. */
static int try_one(ea_ckpt_resume *out, const char *path, const char *name,
                   ea_ckpt_verify_mode mode) {
  ea_ckpt_manifest m;
  char err[1024];
  int rc = ea_ckpt_manifest_load(path, &m, err, sizeof err);
  if (rc < 0) {
    skip(out, name, "%s", err);
    return rc;
  }
  ea_ckpt_verify_report rep;
  rc = ea_ckpt_verify(path, &m, mode, 0, &rep);
  if (rc < 0) {
    skip(out, name, "%s", rep.msg);
    ea_ckpt_manifest_close(&m);
    return rc;
  }
  snprintf(out->path, sizeof out->path, "%s", path);
  snprintf(out->name, sizeof out->name, "%s", name);
  out->manifest = m;
  return 0;
}

int ea_ckpt_find_resume(const char *dir, ea_ckpt_verify_mode mode, ea_ckpt_resume *out) {
  memset(out, 0, sizeof *out);
  ea_ckpt_entry *e = NULL;
  size_t n = 0;
  int rc = ea_ckpt_list(dir, &e, &n);
  if (rc < 0) return rc;
  rc = -ENOENT;
  for (size_t i = 0; i < n; i++) {
    if (!e[i].has_manifest) continue; /* not a checkpoint */
    if (!e[i].complete) {
      skip(out, e[i].name, "%s", e[i].error);
      continue;
    }
    if (e[i].superseded) {
      skip(out, e[i].name, "superseded: a newer generation resumed from an earlier step");
      continue;
    }
    char ck[EA_CKPT_PATH_MAX];
    if (ea__ck_join(ck, sizeof ck, dir, e[i].name) < 0) continue;
    if (try_one(out, ck, e[i].name, mode) == 0) {
      rc = 0;
      break;
    }
  }
  free(e);
  return rc;
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
    const char *p = spec;
    uint64_t step;
    if (!dec(&p, &step) || *p) return -EINVAL;
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
  if (ea__ck_join(mp, sizeof mp, path, "MANIFEST") < 0) return -ENAMETOOLONG;
  if (stat(mp, &st) != 0) {
    int rc = -errno;
    skip(out, name, "%s: %s (not a complete checkpoint)", mp, ea__ck_strerror(rc));
    return rc == -ENOENT ? -ENOENT : rc;
  }
  return try_one(out, path, name, mode) < 0 ? -EBADMSG : 0;
}

void ea_ckpt_resume_close(ea_ckpt_resume *r) {
  ea_ckpt_manifest_close(&r->manifest);
}
