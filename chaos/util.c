/* util.c — the small things every part of the chaos harness needs: clocks,
 * XML escaping for the reports, files, and running a helper command (ip,
 * nft, the agent's own CLI) with a deadline.  The seeded generator behind
 * the fault schedule and the string builder are base's (ea_base.h), so a
 * schedule regenerates from its seed with the documented generator.
 *
 * Helper commands are fork+exec with an explicit argv (no
 * shell): arguments are data, never parsed again, and every child is
 * waited for with a deadline and killed by its pid when it runs over.
 */
#include "chaos.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int64_t ea__chaos_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t ea__chaos_mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int ea__chaos_self_exe(char *out, size_t cap) {
  /* Not the link's target: a rebuild during a run replaces the file, and
   * "bin/elastic-chaos (deleted)" cannot be executed, while the magic link
   * still names this very binary in a fork of this process (soak seed
   * 366782123: every flood helper failed to start after a make). */
  if (access("/proc/self/exe", X_OK) < 0) return -errno;
  snprintf(out, cap, "/proc/self/exe");
  return 0;
}

void ea__chaos_sleep_ms(int ms) {
  if (ms <= 0) return;
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
  }
}

static int digits(const char *s, int n) {
  int v = 0;
  for (int i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v;
}

/* Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm): no
 * timegm and no TZ environment involved. */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = (unsigned)(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + (int64_t)doe - 719468;
}

int64_t ea__chaos_parse_ts(const char *s, size_t len) {
  /* 2026-11-30T01:45:26.978Z */
  if (len < 24 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' ||
      s[19] != '.' || s[23] != 'Z')
    return -1;
  int y = digits(s, 4), mo = digits(s + 5, 2), d = digits(s + 8, 2), h = digits(s + 11, 2),
      mi = digits(s + 14, 2), se = digits(s + 17, 2), ms = digits(s + 20, 3);
  if (y < 0 || mo < 1 || mo > 12 || d < 1 || d > 31 || h < 0 || mi < 0 || se < 0 || ms < 0)
    return -1;
  int64_t days = days_from_civil(y, (unsigned)mo, (unsigned)d);
  return ((days * 24 + h) * 60 + mi) * 60000 + (int64_t)se * 1000 + ms;
}

void ea__chaos_fmt_ts(int64_t ms, char *out, size_t cap) {
  time_t t = (time_t)(ms / 1000);
  struct tm tm;
  gmtime_r(&t, &tm);
  snprintf(out, cap, "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
}

int64_t ea__chaos_parse_duration(const char *s) {
  if (!s || !*s) return -1;
  int64_t total = 0;
  const char *p = s;
  while (*p) {
    char *end;
    errno = 0;
    double v = strtod(p, &end);
    if (end == p || errno || v < 0) return -1;
    p = end;
    double mult = 1000; /* bare number: seconds */
    if (strncmp(p, "ms", 2) == 0)
      mult = 1, p += 2;
    else if (*p == 's')
      mult = 1000, p++;
    else if (*p == 'm')
      mult = 60000, p++;
    else if (*p == 'h')
      mult = 3600000, p++;
    else if (*p)
      return -1;
    total += (int64_t)(v * mult + 0.5);
  }
  return total;
}

/* ---- files ----------------------------------------------------------------- */

int ea__chaos_mkdirs(const char *path, int mode) {
  char p[CH_PATH_MAX];
  if (strlen(path) >= sizeof p) return -ENAMETOOLONG;
  snprintf(p, sizeof p, "%s", path);
  for (char *c = p + 1; *c; c++) {
    if (*c != '/') continue;
    *c = 0;
    if (mkdir(p, 0755) < 0 && errno != EEXIST) return -errno;
    *c = '/';
  }
  if (mkdir(p, (mode_t)mode) < 0 && errno != EEXIST) return -errno;
  return 0;
}

int ea__chaos_rmrf(const char *path) {
  struct stat st;
  if (lstat(path, &st) < 0) return errno == ENOENT ? 0 : -errno;
  if (!S_ISDIR(st.st_mode)) return unlink(path) < 0 ? -errno : 0;
  DIR *d = opendir(path);
  if (!d) return -errno;
  struct dirent *e;
  int rc = 0;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char sub[CH_PATH_MAX * 2];
    snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
    int r2 = ea__chaos_rmrf(sub);
    if (r2 < 0 && rc == 0) rc = r2;
  }
  closedir(d);
  if (rmdir(path) < 0 && rc == 0) rc = -errno;
  return rc;
}

int ea__chaos_write_file(const char *path, const char *data, size_t len) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -errno;
  size_t off = 0;
  while (off < len) {
    ssize_t w = write(fd, data + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      int e = errno;
      close(fd);
      return -e;
    }
    off += (size_t)w;
  }
  return close(fd) < 0 ? -errno : 0;
}

int ea__chaos_read_file(const char *path, char **out, size_t *len) {
  *out = NULL;
  *len = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  if (!buf) {
    close(fd);
    return -ENOMEM;
  }
  for (;;) {
    if (n + 1 >= cap) {
      char *nb = realloc(buf, cap * 2);
      if (!nb) {
        free(buf);
        close(fd);
        return -ENOMEM;
      }
      buf = nb;
      cap *= 2;
    }
    ssize_t r = read(fd, buf + n, cap - n - 1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      free(buf);
      close(fd);
      return -e;
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  close(fd);
  buf[n] = 0;
  *out = buf;
  *len = n;
  return 0;
}

/* ---- commands -------------------------------------------------------------- */

int ea__chaos_cmd(const char *ns, char *const argv[], const char *log, int timeout_ms, char *out,
                  size_t cap) {
  int pipefd[2] = {-1, -1};
  if (out && cap && pipe2(pipefd, O_CLOEXEC) < 0) return -errno;
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    if (pipefd[0] >= 0) close(pipefd[0]), close(pipefd[1]);
    return -e;
  }
  if (pid == 0) {
    int devnull = open("/dev/null", O_RDWR);
    int lfd = log ? open(log, O_WRONLY | O_CREAT | O_APPEND, 0644) : -1;
    if (lfd < 0) lfd = devnull;
    dup2(devnull, 0);
    dup2(pipefd[1] >= 0 ? pipefd[1] : lfd, 1);
    dup2(lfd, 2);
    if (ns) {
      char p[128];
      snprintf(p, sizeof p, "/run/netns/%s", ns);
      int fd = open(p, O_RDONLY | O_CLOEXEC);
      if (fd < 0 || setns(fd, CLONE_NEWNET) < 0) {
        dprintf(2, "setns %s: %s\n", ns, strerror(errno));
        _exit(126);
      }
    }
    execvp(argv[0], argv);
    dprintf(2, "exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  size_t got = 0;
  if (pipefd[1] >= 0) close(pipefd[1]);
  int64_t deadline = ea__chaos_mono_ms() + timeout_ms;
  int status = 0;
  for (;;) {
    if (pipefd[0] >= 0) {
      int64_t left = deadline - ea__chaos_mono_ms();
      struct pollfd p = {.fd = pipefd[0], .events = POLLIN};
      int pr = poll(&p, 1, left > 50 ? 50 : (left > 0 ? (int)left : 0));
      if (pr > 0) {
        char tmp[4096];
        ssize_t r = read(pipefd[0], tmp, sizeof tmp);
        if (r > 0) {
          size_t take = (size_t)r;
          if (got + take > cap - 1) take = cap - 1 - got;
          memcpy(out + got, tmp, take);
          got += take;
        } else if (r == 0) {
          close(pipefd[0]);
          pipefd[0] = -1;
        }
      }
    }
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (ea__chaos_mono_ms() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      if (pipefd[0] >= 0) close(pipefd[0]);
      if (out) out[got] = 0;
      return -ETIMEDOUT;
    }
    if (pipefd[0] < 0) ea__chaos_sleep_ms(10);
  }
  if (pipefd[0] >= 0) {
    char tmp[4096];
    ssize_t r;
    while ((r = read(pipefd[0], tmp, sizeof tmp)) > 0) {
      size_t take = (size_t)r;
      if (got + take > cap - 1) take = cap - 1 - got;
      memcpy(out + got, tmp, take);
      got += take;
    }
    close(pipefd[0]);
  }
  if (out) out[got] = 0;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -EIO;
}

/* ---- strings ---------------------------------------------------------- */

void ea__chaos_xml_str(ea_sb *s, const char *t) {
  for (const unsigned char *p = (const unsigned char *)t; *p; p++) {
    switch (*p) {
      case '<':
        ea_sb_puts(s, "&lt;");
        break;
      case '>':
        ea_sb_puts(s, "&gt;");
        break;
      case '&':
        ea_sb_puts(s, "&amp;");
        break;
      case '"':
        ea_sb_puts(s, "&quot;");
        break;
      case '\'':
        ea_sb_puts(s, "&apos;");
        break;
      default:
        if (*p < 0x20 && *p != '\n' && *p != '\t') {
          ea_sb_puts(s, " "); /* not allowed in XML 1.0 */
        } else {
          char c[2] = {(char)*p, 0};
          ea_sb_puts(s, c);
        }
    }
  }
}
