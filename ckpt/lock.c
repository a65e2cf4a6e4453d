/* lock.c — the directory lock: commit and retention serialise on
 * flock(DIR/.lock), with a bounded wait.
 *
 * The wait is bounded: a holder frozen inside a commit (SIGSTOP, a hung NFS
 * client, a debugger) would otherwise block every other controller's commit
 * and retention for as long as it stays frozen — observed: thousands of step
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
#include "ckpt_int.h"

#include "ea_ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

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
  int rc = ea__ck_lock_path(p, sizeof p, dir);
  if (rc < 0) {
    ea_seterr(err, cap, "lock %s: path too long", dir);
    return rc;
  }
  int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    rc = -errno;
    ea_seterr(err, cap, "open %s: %s", p, ea__ck_strerror(rc));
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
      ea_seterr(err, cap, "flock %s: %s", p, ea__ck_strerror(rc));
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
      ea_seterr(err, cap, "lock %s: still held by %s after waiting %.1f s", p, who, waited);
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
