/* The file-operation layer of ckpt/: fault injection and crash simulation.
 *
 * Checkpoints are only as good as their behaviour when the disk or the
 * process fails half way, and such failures cannot be provoked on demand on a
 * real disk.  So, as SQLite does in test_syscall.c and test6.c, every write,
 * fsync, rename and open that ckpt/ performs passes through here, where:
 *
 *  - a named point can be armed to fail its Nth call with a chosen errno,
 *    or to tear the Nth write (write a prefix, then "crash": every later
 *    operation fails and nothing is cleaned up, as if the process died), or
 *    to SIGKILL the process (the chaos harness arms that through the
 *    EA_CKPT_FAULT environment variable);
 *
 *  - the crash simulator records what a power cut could still lose: data
 *    written since a file's last fsync, and creations, renames and mkdirs
 *    since their directory's last fsync.  A simulated crash then keeps,
 *    truncates or garbles each unsynced file and loses a random subset of
 *    the unsynced directory operations (undone newest first).
 *    A commit protocol that forgot one fsync is caught by this: the tests
 *    assert that every MANIFEST left after any crash still verifies.
 *
 * The model is what POSIX promises: an fsync of a directory makes its
 * entries durable, and nothing orders the others, even within one directory
 * (ext4 and XFS journal metadata in order, which is stronger).  The only
 * order kept is per name: a rename of a file whose creation was lost is lost
 * too.
 * Unlinks are not undone: retention removes a MANIFEST and fsyncs the
 * directory before it touches the shards, and the fault-point tests cover
 * each step of that.
 *
 * One global state under one mutex: faults are a process-wide concern (the
 * environment variable arms a whole process), and contention is nil next to
 * the system calls being wrapped.
 *
 * Only the fault layer lives here.  The helpers the ckpt/ files share are
 * in files named for them: sys.c (error text, clock, O_DIRECT alignment),
 * hasher.c (the shard hash), layout.c (names and paths), lock.c (the
 * directory lock). */
#include "ckpt_int.h"

#include "ea_base.h"

#include "ea_ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- fault points -------------------------------------------------------- */

enum { FP_OPEN, FP_WRITE, FP_FSYNC, FP_RENAME, FP_TORN, FP_COUNT };
static const char *const fp_names[FP_COUNT] = {"open", "write", "fsync", "rename", "torn"};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_env_once = PTHREAD_ONCE_INIT;
static uint64_t g_count[FP_COUNT];
static int g_armed = -1; /* point index, -1 = none */
static uint64_t g_nth;
static int g_err; /* positive errno, EA_CKPT_FAULT_KILL or EA_CKPT_FAULT_SLOW */
static uint32_t g_slow_ms;
/* A slow fault that fired on this thread: the call sleeps this long once it
 * has left the lock (unlock), so other threads' operations go on. */
static __thread uint32_t tl_sleep_ms;
static bool g_fired;
static bool g_crashed;

/* ---- crash simulation state --------------------------------------------- */

typedef struct {
  int fd;
  char *path;
  bool is_dir;
} sim_fd;

typedef struct {
  char *path;
  uint64_t dlo, dhi; /* unsynced byte range [dlo, dhi) */
  bool dirty;
} sim_file;

enum { OP_CREATE, OP_MKDIR, OP_RENAME };
typedef struct {
  int kind;
  char *parent;
  char *path;  /* created path, or rename target */
  char *from;  /* rename source */
  char *saved; /* rename target's old content (it was replaced) */
  size_t saved_len;
  bool had_old;
  bool durable;
  bool undo;
} sim_op;

/* A replaced file's content is saved for undo only up to this size: the
 * files ckpt/ renames over others are LATEST (a line) and MANIFEST.tmp
 * (renamed without replacing), so 1 MiB is generous. */
#define SIM_SAVE_MAX (1u << 20)

static bool g_sim;
static sim_fd *g_fds;
static size_t g_nfds, g_capfds;
static sim_file *g_files;
static size_t g_nfiles, g_capfiles;
static sim_op *g_ops;
static size_t g_nops, g_capops;

static int errno_by_name(const char *s) {
  static const struct {
    const char *n;
    int e;
  } t[] = {{"EIO", EIO},       {"ENOSPC", ENOSPC}, {"EDQUOT", EDQUOT}, {"EROFS", EROFS},
           {"EACCES", EACCES}, {"EPERM", EPERM},   {"EAGAIN", EAGAIN}, {"EINTR", EINTR},
           {"ENOMEM", ENOMEM}, {"EBADF", EBADF},   {"EINVAL", EINVAL}, {"ENOENT", ENOENT},
           {"EEXIST", EEXIST}, {"EFBIG", EFBIG},   {"ENXIO", ENXIO},   {"ETIMEDOUT", ETIMEDOUT},
           {"EBUSY", EBUSY},   {"ENODEV", ENODEV}};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    if (strcmp(s, t[i].n) == 0) return t[i].e;
  return 0;
}

static int arm_locked(const char *point, uint64_t nth, int err) {
  int p = -1;
  for (int i = 0; i < FP_COUNT; i++)
    if (strcmp(point, fp_names[i]) == 0) p = i;
  if (p < 0 || nth == 0 || (err <= 0 && err != EA_CKPT_FAULT_KILL && err != EA_CKPT_FAULT_SLOW))
    return -EINVAL;
  g_armed = p;
  g_nth = g_count[p] + nth;
  g_err = err;
  g_fired = false;
  return 0;
}

/* "point:N[:errno|kill|slow=MS]" */
static int parse_locked(const char *spec) {
  char buf[128];
  if (!spec || strlen(spec) >= sizeof buf) return -EINVAL;
  strcpy(buf, spec);
  char *c1 = strchr(buf, ':');
  if (!c1) return -EINVAL;
  *c1 = 0;
  char *ns = c1 + 1, *es = strchr(ns, ':');
  if (es) *es++ = 0;
  char *e;
  errno = 0;
  unsigned long long n = strtoull(ns, &e, 10);
  if (errno || e == ns || *e || n == 0) return -EINVAL;
  int err = EIO;
  if (es) {
    if (strcmp(es, "kill") == 0) {
      err = EA_CKPT_FAULT_KILL;
    } else if (strncmp(es, "slow=", 5) == 0) {
      unsigned long ms = strtoul(es + 5, &e, 10);
      if (e == es + 5 || *e || ms == 0 || ms > 600000 || strcmp(buf, "torn") == 0) return -EINVAL;
      err = EA_CKPT_FAULT_SLOW;
      g_slow_ms = (uint32_t)ms;
    } else if (es[0] >= '0' && es[0] <= '9') {
      long v = strtol(es, &e, 10);
      if (*e || v <= 0 || v > 4095) return -EINVAL;
      err = (int)v;
    } else if ((err = errno_by_name(es)) == 0) {
      return -EINVAL;
    }
  }
  return arm_locked(buf, n, err);
}

static void env_init(void) {
  const char *s = getenv("EA_CKPT_FAULT");
  if (!s || !*s) return;
  pthread_mutex_lock(&g_mu);
  int rc = parse_locked(s);
  pthread_mutex_unlock(&g_mu);
  if (rc < 0) fprintf(stderr, "elastic-agent: ignoring bad EA_CKPT_FAULT=\"%s\"\n", s);
}

static void lock(void) {
  pthread_once(&g_env_once, env_init);
  pthread_mutex_lock(&g_mu);
}
static void unlock(void) {
  pthread_mutex_unlock(&g_mu);
  if (tl_sleep_ms) {
    struct timespec ts = {tl_sleep_ms / 1000u, (long)(tl_sleep_ms % 1000u) * 1000000L};
    tl_sleep_ms = 0;
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
  }
}

/* Counts one call of point p; returns 0, a positive errno to inject, or
 * EA_CKPT_FAULT_KILL.  Called locked. */
static int hit_locked(int p) {
  g_count[p]++;
  if (g_armed == p && !g_fired && g_count[p] == g_nth) {
    g_fired = true;
    if (g_err == EA_CKPT_FAULT_SLOW) {
      tl_sleep_ms = g_slow_ms; /* the call succeeds, late */
      return 0;
    }
    return g_err;
  }
  return 0;
}

static void die_now(void) {
  /* The chaos harness asked for a real crash at this point. */
  raise(SIGKILL);
}

int ea_ckpt_fault_arm(const char *point, uint64_t nth, int err) {
  if (!point || err == EA_CKPT_FAULT_SLOW) return -EINVAL; /* slow: a spec names its time */
  lock();
  int rc = arm_locked(point, nth, err);
  unlock();
  return rc;
}

int ea_ckpt_fault_parse(const char *spec) {
  lock();
  int rc = parse_locked(spec);
  unlock();
  return rc;
}

void ea_ckpt_fault_reset(void) {
  lock();
  memset(g_count, 0, sizeof g_count);
  g_armed = -1;
  g_fired = false;
  g_crashed = false;
  unlock();
}

bool ea_ckpt_fault_fired(void) {
  lock();
  bool f = g_fired;
  unlock();
  return f;
}

bool ea_ckpt_fault_crashed(void) {
  lock();
  bool c = g_crashed;
  unlock();
  return c;
}

/* ---- simulator bookkeeping (all called locked, only while g_sim) -------- */

static char *xstrdup(const char *s) {
  char *d = strdup(s);
  if (!d) abort(); /* test-only path; running out here would mis-simulate silently */
  return d;
}

static void *grow(void *p, size_t *cap, size_t need, size_t elem) {
  if (ea_array_reserve(&p, cap, need, elem, 16) != 0) abort(); /* as xstrdup */
  return p;
}

static char *parent_of(const char *path) {
  char *p = xstrdup(path);
  size_t l = strlen(p);
  while (l > 1 && p[l - 1] == '/') p[--l] = 0;
  char *s = strrchr(p, '/');
  if (!s) {
    strcpy(p, ".");
  } else if (s == p) {
    p[1] = 0;
  } else {
    *s = 0;
  }
  return p;
}

static char *norm_dir(const char *path) {
  char *p = xstrdup(path);
  size_t l = strlen(p);
  while (l > 1 && p[l - 1] == '/') p[--l] = 0;
  return p;
}

static sim_fd *fd_rec(int fd) {
  for (size_t i = 0; i < g_nfds; i++)
    if (g_fds[i].fd == fd) return &g_fds[i];
  return NULL;
}

static sim_file *file_rec(const char *path, bool create) {
  for (size_t i = 0; i < g_nfiles; i++)
    if (strcmp(g_files[i].path, path) == 0) return &g_files[i];
  if (!create) return NULL;
  g_files = grow(g_files, &g_capfiles, g_nfiles + 1, sizeof *g_files);
  sim_file *f = &g_files[g_nfiles++];
  memset(f, 0, sizeof *f);
  f->path = xstrdup(path);
  return f;
}

static void file_drop(const char *path) {
  for (size_t i = 0; i < g_nfiles; i++)
    if (strcmp(g_files[i].path, path) == 0) {
      free(g_files[i].path);
      g_files[i] = g_files[--g_nfiles];
      return;
    }
}

static sim_op *op_add(int kind, const char *path) {
  g_ops = grow(g_ops, &g_capops, g_nops + 1, sizeof *g_ops);
  sim_op *o = &g_ops[g_nops++];
  memset(o, 0, sizeof *o);
  o->kind = kind;
  o->path = xstrdup(path);
  o->parent = parent_of(path);
  return o;
}

static void sim_clear_locked(void) {
  for (size_t i = 0; i < g_nfds; i++) free(g_fds[i].path);
  for (size_t i = 0; i < g_nfiles; i++) free(g_files[i].path);
  for (size_t i = 0; i < g_nops; i++) {
    free(g_ops[i].parent);
    free(g_ops[i].path);
    free(g_ops[i].from);
    free(g_ops[i].saved);
  }
  free(g_fds);
  free(g_files);
  free(g_ops);
  g_fds = NULL;
  g_files = NULL;
  g_ops = NULL;
  g_nfds = g_capfds = g_nfiles = g_capfiles = g_nops = g_capops = 0;
}

static void mark_dirty(const char *path, uint64_t lo, uint64_t hi) {
  sim_file *f = file_rec(path, true);
  if (!f->dirty) {
    f->dirty = true;
    f->dlo = lo;
    f->dhi = hi;
  } else {
    if (lo < f->dlo) f->dlo = lo;
    if (hi > f->dhi) f->dhi = hi;
  }
}

void ea_ckpt_sim_begin(void) {
  lock();
  sim_clear_locked();
  g_sim = true;
  unlock();
}

void ea_ckpt_sim_end(void) {
  lock();
  sim_clear_locked();
  g_sim = false;
  g_crashed = false;
  unlock();
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(p) == 0 || errno == ENOENT ? 0 : -1;
}

static int garble(const char *path, uint64_t lo, uint64_t hi, ea_rng *rs) {
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? 0 : -errno;
  struct stat st;
  int rc = 0;
  if (fstat(fd, &st) == 0) {
    if (hi > (uint64_t)st.st_size) hi = (uint64_t)st.st_size;
    for (int k = 0; k < 4 && lo < hi; k++) {
      uint64_t off = lo + ea_rng_next(rs) % (hi - lo); /* may pass 2^32 */
      unsigned char b;
      if (pread(fd, &b, 1, (off_t)off) != 1) break;
      b ^= (unsigned char)(1u << ea_rng_below(rs, 8));
      if (pwrite(fd, &b, 1, (off_t)off) != 1) rc = -EIO;
    }
  }
  close(fd);
  return rc;
}

int ea_ckpt_sim_crash(uint64_t seed) {
  lock();
  ea_rng rs;
  ea_rng_seed(&rs, seed, EA_RNG_FAULTS, 0);
  int rc = 0;
  /* 1. unsynced data: keep, drop from the first unsynced byte, or garble */
  for (size_t i = 0; i < g_nfiles; i++) {
    sim_file *f = &g_files[i];
    if (!f->dirty) continue;
    switch (ea_rng_below(&rs, 3)) {
      case 0:
        break;
      case 1: {
        struct stat st;
        if (stat(f->path, &st) == 0 && (uint64_t)st.st_size > f->dlo &&
            truncate(f->path, (off_t)f->dlo) != 0)
          rc = -errno;
        break;
      }
      default: {
        int g = garble(f->path, f->dlo, f->dhi, &rs);
        if (g < 0) rc = g;
      }
    }
  }
  /* 2. each operation not made durable by an fsync of its directory is lost
   * or kept at random, except that an operation on a name is lost when an
   * earlier lost operation touched that name (a rename of a file whose
   * creation was lost cannot survive).  No order between names is assumed:
   * POSIX promises none, so neither may the commit protocol. */
  for (size_t i = 0; i < g_nops; i++) {
    sim_op *o = &g_ops[i];
    if (o->durable) continue;
    bool lost = ea_rng_below(&rs, 2) == 0;
    for (size_t j = 0; j < i && !lost; j++) {
      const sim_op *p = &g_ops[j];
      if (!p->undo) continue;
      const char *pn[2] = {p->path, p->from}, *on[2] = {o->path, o->from};
      for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
          if (pn[a] && on[b] && strcmp(pn[a], on[b]) == 0) lost = true;
    }
    o->undo = lost;
  }
  /* 3. undo, newest first */
  for (size_t i = g_nops; i-- > 0;) {
    sim_op *o = &g_ops[i];
    if (!o->undo) continue;
    switch (o->kind) {
      case OP_CREATE:
        if (unlink(o->path) != 0 && errno != ENOENT) rc = -errno;
        break;
      case OP_MKDIR:
        if (nftw(o->path, rm_cb, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT) rc = -errno;
        break;
      case OP_RENAME:
        if (rename(o->path, o->from) != 0 && errno != ENOENT) rc = -errno;
        if (o->had_old) {
          int fd = open(o->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
          if (fd < 0) {
            rc = -errno;
          } else {
            if (o->saved_len && write(fd, o->saved, o->saved_len) != (ssize_t)o->saved_len)
              rc = -EIO;
            close(fd);
          }
        }
        break;
    }
  }
  sim_clear_locked();
  g_sim = false;
  g_crashed = false;
  unlock();
  return rc;
}

/* ---- wrapped operations ------------------------------------------------- */

int ea__fs_open(const char *path, int flags, mode_t mode) {
  lock();
  if (g_crashed) {
    unlock();
    return -EIO;
  }
  int f = hit_locked(FP_OPEN);
  if (f == EA_CKPT_FAULT_KILL) die_now();
  if (f > 0) {
    unlock();
    return -f;
  }
  bool existed = true;
  if (g_sim && (flags & O_CREAT)) existed = access(path, F_OK) == 0;
  int fd = open(path, flags | O_CLOEXEC, mode);
  int rc = fd < 0 ? -errno : fd;
  if (fd >= 0 && g_sim) {
    g_fds = grow(g_fds, &g_capfds, g_nfds + 1, sizeof *g_fds);
    g_fds[g_nfds++] = (sim_fd){fd, xstrdup(path), (flags & O_DIRECTORY) != 0};
    if (!existed) op_add(OP_CREATE, path);
    if (flags & O_TRUNC) {
      sim_file *fr = file_rec(path, true);
      fr->dirty = true; /* the old content is gone, the new one not durable */
      fr->dlo = fr->dhi = 0;
    }
  }
  unlock();
  return rc;
}

int ea__fs_open_dir(const char *path) {
  return ea__fs_open(path, O_RDONLY | O_DIRECTORY, 0);
}

int ea__fs_close(int fd) {
  if (fd < 0) return 0;
  lock();
  if (g_sim) {
    sim_fd *r = fd_rec(fd);
    if (r) {
      free(r->path);
      *r = g_fds[--g_nfds];
    }
  }
  unlock();
  return close(fd) == 0 ? 0 : -errno;
}

int ea__fs_write_check(int fd, size_t len) {
  (void)fd;
  (void)len;
  lock();
  if (g_crashed) {
    unlock();
    return -EIO;
  }
  int f = hit_locked(FP_WRITE);
  int t = hit_locked(FP_TORN);
  unlock();
  if (f == EA_CKPT_FAULT_KILL) die_now();
  if (f > 0) return -f;
  return t != 0 ? 1 : 0; /* torn: ea__fs_torn_done reads g_err (errno or KILL) */
}

void ea__fs_wrote(int fd, uint64_t off, uint64_t len) {
  if (len == 0) return;
  lock();
  if (g_sim) {
    sim_fd *r = fd_rec(fd);
    if (r) mark_dirty(r->path, off, off + len);
  }
  unlock();
}

int ea__fs_torn_done(void) {
  lock();
  int e = g_err;
  g_crashed = true;
  unlock();
  if (e == EA_CKPT_FAULT_KILL) die_now();
  return -EIO;
}

int ea__fs_fsync_check(int fd) {
  (void)fd;
  lock();
  if (g_crashed) {
    unlock();
    return -EIO;
  }
  int f = hit_locked(FP_FSYNC);
  bool sim = g_sim;
  unlock();
  if (f == EA_CKPT_FAULT_KILL) die_now();
  if (f > 0) return -f;
  return sim ? 1 : 0;
}

void ea__fs_synced(int fd) {
  lock();
  if (g_sim) {
    sim_fd *r = fd_rec(fd);
    if (r && r->is_dir) {
      char *d = norm_dir(r->path);
      for (size_t i = 0; i < g_nops; i++)
        if (strcmp(g_ops[i].parent, d) == 0) g_ops[i].durable = true;
      free(d);
    } else if (r) {
      sim_file *f = file_rec(r->path, false);
      if (f) f->dirty = false;
    }
  }
  unlock();
}

int ea__fs_fsync(int fd) {
  int c = ea__fs_fsync_check(fd);
  if (c < 0) return c;
  if (c == 0 && fsync(fd) != 0) return -errno;
  ea__fs_synced(fd);
  return 0;
}

int ea__fs_fsync_dir(const char *path, char *err, size_t cap) {
  int fd = ea__fs_open_dir(path);
  if (fd < 0) {
    ea_seterr(err, cap, "open %s: %s", path, ea__ck_strerror(fd));
    return fd;
  }
  int rc = ea__fs_fsync(fd);
  if (rc < 0) ea_seterr(err, cap, "fsync %s: %s", path, ea__ck_strerror(rc));
  ea__fs_close(fd);
  return rc;
}

int ea__fs_pwrite_all(int fd, const void *buf, size_t len, uint64_t off) {
  const char *p = buf;
  while (len > 0) {
    int c = ea__fs_write_check(fd, len);
    if (c < 0) return c;
    size_t n = c == 1 ? len / 2 : len;
    ssize_t w = n ? pwrite(fd, p, n, (off_t)off) : 0;
    if (w < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    ea__fs_wrote(fd, off, (uint64_t)w);
    if (c == 1) return ea__fs_torn_done();
    p += w;
    off += (uint64_t)w;
    len -= (size_t)w;
  }
  return 0;
}

int ea__fs_ftruncate(int fd, uint64_t len) {
  lock();
  bool crashed = g_crashed;
  unlock();
  if (crashed) return -EIO;
  if (ftruncate(fd, (off_t)len) != 0) return -errno;
  lock();
  if (g_sim) {
    sim_fd *r = fd_rec(fd);
    if (r) mark_dirty(r->path, len, len);
  }
  unlock();
  return 0;
}

int ea__fs_rename(const char *from, const char *to, unsigned flags) {
  lock();
  if (g_crashed) {
    unlock();
    return -EIO;
  }
  int f = hit_locked(FP_RENAME);
  if (f == EA_CKPT_FAULT_KILL) die_now();
  if (f > 0) {
    unlock();
    return -f;
  }
  char *saved = NULL;
  size_t saved_len = 0;
  bool had_old = false;
  if (g_sim) {
    int ofd = open(to, O_RDONLY | O_CLOEXEC);
    if (ofd >= 0) {
      had_old = true;
      saved = malloc(SIM_SAVE_MAX);
      if (!saved) abort();
      ssize_t n = read(ofd, saved, SIM_SAVE_MAX);
      saved_len = n > 0 ? (size_t)n : 0;
      close(ofd);
    }
  }
  int rc = renameat2(AT_FDCWD, from, AT_FDCWD, to, flags) == 0 ? 0 : -errno;
  if (rc == 0 && g_sim) {
    sim_op *o = op_add(OP_RENAME, to);
    o->from = xstrdup(from);
    o->had_old = had_old;
    o->saved = saved;
    o->saved_len = saved_len;
    saved = NULL;
    file_drop(to);
    sim_file *fr = file_rec(from, false);
    if (fr) {
      free(fr->path);
      fr->path = xstrdup(to);
    }
    for (size_t i = 0; i < g_nfds; i++)
      if (strcmp(g_fds[i].path, from) == 0) {
        free(g_fds[i].path);
        g_fds[i].path = xstrdup(to);
      }
  }
  free(saved);
  unlock();
  return rc;
}

int ea__fs_mkdir(const char *path, mode_t mode) {
  lock();
  if (g_crashed) {
    unlock();
    return -EIO;
  }
  int rc = mkdir(path, mode) == 0 ? 0 : -errno;
  if (rc == 0 && g_sim) op_add(OP_MKDIR, path);
  unlock();
  return rc;
}

int ea__fs_unlink(const char *path) {
  lock();
  if (g_crashed) {
    unlock();
    return -EIO;
  }
  int rc = unlink(path) == 0 ? 0 : -errno;
  if (rc == 0 && g_sim) file_drop(path);
  unlock();
  return rc;
}

int ea__fs_rmdir(const char *path) {
  lock();
  if (g_crashed) {
    unlock();
    return -EIO;
  }
  int rc = rmdir(path) == 0 ? 0 : -errno;
  unlock();
  return rc;
}

int ea__fs_write_file(const char *path, const void *buf, size_t len, char *err, size_t cap) {
  int fd = ea__fs_open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    ea_seterr(err, cap, "open %s: %s", path, ea__ck_strerror(fd));
    return fd;
  }
  int rc = ea__fs_pwrite_all(fd, buf, len, 0);
  if (rc < 0) {
    ea_seterr(err, cap, "write %s: %s", path, ea__ck_strerror(rc));
  } else if ((rc = ea__fs_fsync(fd)) < 0) {
    ea_seterr(err, cap, "fsync %s: %s", path, ea__ck_strerror(rc));
  }
  ea__fs_close(fd);
  return rc;
}
