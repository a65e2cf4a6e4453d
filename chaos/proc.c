/* proc.c — the agent processes the harness owns: start, find their
 * workers, reap.
 *
 * Every agent starts in its own session (so a signal to it never reaches
 * the harness) with PR_SET_PDEATHSIG = SIGKILL (so it cannot outlive a
 * harness that is killed; its workers then exit by themselves when their
 * IPC socket closes, docs/operations.md).  The harness is a child
 * subreaper: a worker whose agent was SIGKILLed is re-parented to us rather
 * than to init, so it is reaped here and can be ended by its pid at
 * teardown.  Workers are found as the agent's children in /proc, which
 * works even while the agent is SIGSTOPped (its admin socket does not).
 */
#include "chaos.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

int ea__chaos_spawn(char *const argv[], const char *ns, const char *log, char *const env[],
                    pid_t *pid) {
  pid_t parent = getpid();
  /* Resolve the namespace before forking so a missing one is an error
   * here, not an agent that silently shares our network. */
  int nsfd = -1;
  if (ns) {
    char p[128];
    snprintf(p, sizeof p, "/run/netns/%s", ns);
    nsfd = open(p, O_RDONLY | O_CLOEXEC);
    if (nsfd < 0) return -errno;
  }
  pid_t c = fork();
  if (c < 0) {
    int e = errno;
    if (nsfd >= 0) close(nsfd);
    return -e;
  }
  if (c == 0) {
    setsid();
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(125); /* the harness died before prctl */
    /* Signals the harness blocks or ignores must not be inherited. */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    signal(SIGCHLD, SIG_DFL);
    int devnull = open("/dev/null", O_RDONLY);
    int lfd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (devnull >= 0) dup2(devnull, 0);
    if (lfd >= 0) {
      dup2(lfd, 1);
      dup2(lfd, 2);
    }
    if (nsfd >= 0 && setns(nsfd, CLONE_NEWNET) < 0) {
      dprintf(2, "elastic-chaos: setns %s: %s\n", ns, strerror(errno));
      _exit(126);
    }
    for (size_t i = 0; env && env[i]; i++) putenv(env[i]);
    execv(argv[0], argv);
    dprintf(2, "elastic-chaos: exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  if (nsfd >= 0) close(nsfd);
  *pid = c;
  return 0;
}

int ea__chaos_children(pid_t pid, pid_t *out, int cap) {
  char p[96];
  snprintf(p, sizeof p, "/proc/%d/task/%d/children", (int)pid, (int)pid);
  char *buf;
  size_t len;
  if (ea__chaos_read_file(p, &buf, &len) < 0) return 0;
  int n = 0;
  char *s = buf, *end;
  while (n < cap) {
    long v = strtol(s, &end, 10);
    if (end == s) break;
    if (v > 0) out[n++] = (pid_t)v;
    s = end;
  }
  free(buf);
  return n;
}

void ea__chaos_reap(ea__chaos_reap_cb cb, void *ctx) {
  for (;;) {
    int status;
    pid_t p = waitpid(-1, &status, WNOHANG);
    if (p <= 0) break;
    if (cb) cb(ctx, p, status);
  }
}

bool ea__chaos_pid_alive(pid_t pid) {
  if (pid <= 0) return false;
  char p[64];
  snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
  char *buf;
  size_t len;
  if (ea__chaos_read_file(p, &buf, &len) < 0) return false;
  /* "pid (comm) S ..." — comm may hold spaces and parentheses: the state
   * follows the last ')'. */
  char *rp = strrchr(buf, ')');
  bool alive = rp && rp[1] == ' ' && rp[2] != 'Z' && rp[2] != 'X';
  free(buf);
  return alive;
}
