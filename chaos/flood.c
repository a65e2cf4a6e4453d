/* flood.c — hostile load (issue 27): the http-flood and join-flood
 * episodes, and the two helper modes of the binary they start.
 *
 *   elastic-chaos --flood HOST PORT NSRC CONNS SECONDS idle|slow
 *       keeps CONNS TCP connections open to HOST:PORT for SECONDS and
 *       reopens each one the moment the other side closes it, as fast as
 *       it can; idle sends nothing, slow trickles an HTTP request line a
 *       byte every 500 ms and never finishes it.  NSRC > 0 spreads them
 *       over source addresses 127.0.0.2 … 127.0.0.(NSRC+1) (every 127/8
 *       address is local on Linux); 0 uses the namespace's own address.
 *       Prints "connects N per_s R" at the end.
 *   elastic-chaos --http-probe HOST PORT SECONDS
 *       asks GET /healthz back to back (one every 200 ms) for SECONDS,
 *       each given 1 s, the kubelet's way; any HTTP answer counts (200 or
 *       503).  Prints "probes N answered M max_ms X" and the first failure.
 *
 * Both run as child processes so that with --netns they run inside a
 * slot's namespace (ea__chaos_spawn enters it): the flood from the
 * newcomer slot N+1's address, the probe from the victim's own namespace,
 * as the kubelet probes its pod.  The harness keeps polling status (and
 * so checking every continuous invariant) while they run.
 *
 *   http-flood  CONNS = 1000 idle or slow connections to one agent's
 *               metrics listener; /healthz must answer within 1 s all the
 *               while (probes_answered) and the cluster trains on without
 *               re-forming (recovery_bound if it stood still).
 *   join-flood  200 idle connections to one agent's gossip port, reopened
 *               as fast as the seed closes them; meanwhile a fresh node
 *               joins with --join naming that agent only: it must train
 *               at world N + 1 within the recovery bound; then it leaves
 *               and the flood stops.
 * With loopback the seed's coin picks 1 or 25 source addresses; with
 * --netns the flood comes from one (the namespace's).
 */
#include "chaos.h"

#include "ea_rdzv.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <poll.h>
#include <unistd.h>

#define HTTP_CONNS 1000
#define JOIN_CONNS 200
#define PROBE_TIMEOUT_MS 1000
#define PROBE_EVERY_MS 200
#define TRICKLE_MS 500

/* ---- elastic-chaos --flood ----------------------------------------------------- */

typedef struct {
  int fd;
  uint32_t sent; /* bytes of the request trickled */
} fconn;

static volatile sig_atomic_t flood_stop;

static void on_stop(int sig) {
  (void)sig;
  flood_stop = 1;
}

static const char TRICKLE[] = "GET /healthz HTTP/1.1\r\nHost: flood\r\nX-Slow: ";

static int fopen_conn(int ep, const struct sockaddr_in *dst, int nsrc, int i, fconn *c) {
  c->fd = -1;
  c->sent = 0;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  if (nsrc > 0) {
    struct sockaddr_in src = {.sin_family = AF_INET};
    src.sin_addr.s_addr = htonl(0x7f000002u + (uint32_t)(i % nsrc));
    if (bind(fd, (struct sockaddr *)&src, sizeof src) < 0) {
      int e = errno;
      close(fd);
      return -e;
    }
  }
  if (connect(fd, (const struct sockaddr *)dst, sizeof *dst) < 0 && errno != EINPROGRESS) {
    int e = errno;
    close(fd);
    return -e;
  }
  struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.u32 = (uint32_t)i};
  if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
    int e = errno;
    close(fd);
    return -e;
  }
  c->fd = fd;
  return 0;
}

static void fclose_conn(int ep, fconn *c) {
  if (c->fd < 0) return;
  epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
  close(c->fd);
  c->fd = -1;
}

static int parse_dst(const char *host, const char *port, struct sockaddr_in *dst) {
  memset(dst, 0, sizeof *dst);
  dst->sin_family = AF_INET;
  long p = strtol(port, NULL, 10);
  if (inet_pton(AF_INET, host, &dst->sin_addr) != 1 || p <= 0 || p > 65535) return -EINVAL;
  dst->sin_port = htons((uint16_t)p);
  return 0;
}

int ea__chaos_flood_main(int argc, char **argv) {
  struct sockaddr_in dst;
  if (argc != 8 || parse_dst(argv[2], argv[3], &dst) < 0) {
    fprintf(stderr, "usage: elastic-chaos --flood HOST PORT NSRC CONNS SECONDS idle|slow\n");
    return 2;
  }
  int nsrc = atoi(argv[4]), nconn = atoi(argv[5]);
  double secs = atof(argv[6]);
  bool slow = strcmp(argv[7], "slow") == 0;
  if (nsrc < 0 || nsrc > 250 || nconn < 1 || nconn > 20000 || secs <= 0) {
    fprintf(stderr, "elastic-chaos --flood: NSRC 0..250, CONNS 1..20000, SECONDS > 0\n");
    return 2;
  }
  /* A thousand sockets need more than the usual soft limit of 1024. */
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  signal(SIGINT, on_stop);
  signal(SIGTERM, on_stop);
  signal(SIGPIPE, SIG_IGN);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  fconn *c = calloc((size_t)nconn, sizeof *c);
  if (ep < 0 || !c) {
    fprintf(stderr, "elastic-chaos --flood: %s\n", strerror(errno));
    return 1;
  }
  for (int i = 0; i < nconn; i++) c[i].fd = -1;
  uint64_t connects = 0, failed = 0;
  int first_err = 0;
  const int64_t t0 = ea__chaos_mono_ms(), end = t0 + (int64_t)(secs * 1000);
  int64_t next_trickle = t0 + TRICKLE_MS;
  struct epoll_event evs[256];
  for (int64_t now = t0; now < end && !flood_stop; now = ea__chaos_mono_ms()) {
    /* (re)open every closed slot: the flood is as fast as the other side
     * closes; a refused connect is retried on the next turn (10 ms) */
    for (int i = 0; i < nconn; i++) {
      if (c[i].fd >= 0) continue;
      int rc = fopen_conn(ep, &dst, nsrc, i, &c[i]);
      if (rc == 0) {
        connects++;
      } else {
        failed++;
        if (!first_err) first_err = -rc;
      }
    }
    if (slow && now >= next_trickle) {
      next_trickle = now + TRICKLE_MS;
      for (int i = 0; i < nconn; i++) {
        if (c[i].fd < 0) continue;
        const char *b = &TRICKLE[c[i].sent % (sizeof TRICKLE - 1)];
        if (write(c[i].fd, b, 1) == 1) c[i].sent++;
      }
    }
    int n = epoll_wait(ep, evs, 256, 10);
    for (int k = 0; k < n; k++) {
      fconn *x = &c[evs[k].data.u32];
      char buf[512];
      ssize_t got = 0;
      if (!(evs[k].events & (EPOLLERR | EPOLLHUP | EPOLLRDHUP))) got = read(x->fd, buf, sizeof buf);
      if (got <= 0 && !(got < 0 && (errno == EAGAIN || errno == EINTR))) fclose_conn(ep, x);
    }
  }
  for (int i = 0; i < nconn; i++) fclose_conn(ep, &c[i]);
  double took = (double)(ea__chaos_mono_ms() - t0) / 1000.0;
  printf("connects %" PRIu64 " per_s %.0f failed %" PRIu64 "%s%s\n", connects,
         took > 0 ? (double)connects / took : 0.0, failed, first_err ? " first_error " : "",
         first_err ? strerror(first_err) : "");
  free(c);
  close(ep);
  return 0;
}

/* ---- elastic-chaos --http-probe ------------------------------------------------ */

/* One GET /healthz: the ms it took to get a status line, or -1 (why says). */
static int64_t probe_once(const struct sockaddr_in *dst, char *why, size_t cap) {
  const int64_t t0 = ea__chaos_mono_ms(), deadline = t0 + PROBE_TIMEOUT_MS;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    snprintf(why, cap, "socket: %s", strerror(errno));
    return -1;
  }
  int64_t rc = -1;
  if (connect(fd, (const struct sockaddr *)dst, sizeof *dst) < 0 && errno != EINPROGRESS) {
    snprintf(why, cap, "connect: %s", strerror(errno));
    goto out;
  }
  static const char req[] = "GET /healthz HTTP/1.0\r\nHost: probe\r\n\r\n";
  size_t sent = 0;
  char buf[256];
  size_t got = 0;
  for (;;) {
    int64_t left = deadline - ea__chaos_mono_ms();
    if (left <= 0) {
      snprintf(why, cap, "%s within %d ms", sent < sizeof req - 1 ? "not connected" : "no answer",
               PROBE_TIMEOUT_MS);
      goto out;
    }
    struct pollfd p = {.fd = fd, .events = sent < sizeof req - 1 ? POLLOUT : POLLIN};
    if (poll(&p, 1, (int)left) <= 0) continue;
    if (sent < sizeof req - 1) {
      ssize_t w = write(fd, req + sent, sizeof req - 1 - sent);
      if (w < 0 && errno != EAGAIN) {
        snprintf(why, cap, "write: %s", strerror(errno));
        goto out;
      }
      if (w > 0) sent += (size_t)w;
      continue;
    }
    ssize_t n = read(fd, buf + got, sizeof buf - 1 - got);
    if (n < 0 && errno == EAGAIN) continue;
    if (n <= 0) {
      snprintf(why, cap, "%s", n == 0 ? "closed without an answer" : strerror(errno));
      goto out;
    }
    got += (size_t)n;
    buf[got] = 0;
    if (strncmp(buf, "HTTP/1.", 7) == 0 && strchr(buf, ' ') && got >= 12) {
      rc = ea__chaos_mono_ms() - t0;
      goto out;
    }
    if (got >= sizeof buf - 1) {
      snprintf(why, cap, "not an HTTP answer");
      goto out;
    }
  }
out:
  close(fd);
  return rc;
}

int ea__chaos_http_probe_main(int argc, char **argv) {
  struct sockaddr_in dst;
  if (argc != 5 || parse_dst(argv[2], argv[3], &dst) < 0 || atof(argv[4]) <= 0) {
    fprintf(stderr, "usage: elastic-chaos --http-probe HOST PORT SECONDS\n");
    return 2;
  }
  const int64_t end = ea__chaos_mono_ms() + (int64_t)(atof(argv[4]) * 1000);
  uint64_t n = 0, ok = 0;
  int64_t max_ms = 0;
  char first[160] = "";
  while (ea__chaos_mono_ms() < end) {
    const int64_t t = ea__chaos_mono_ms();
    char why[128];
    int64_t ms = probe_once(&dst, why, sizeof why);
    n++;
    if (ms >= 0) {
      ok++;
      if (ms > max_ms) max_ms = ms;
    } else if (!first[0]) {
      snprintf(first, sizeof first, "probe %" PRIu64 ": %s", n, why);
    }
    int64_t wait = t + PROBE_EVERY_MS - ea__chaos_mono_ms();
    if (wait > 0) poll(NULL, 0, (int)wait); /* the probe's own pace */
  }
  printf("probes %" PRIu64 " answered %" PRIu64 " max_ms %" PRId64 "%s%s\n", n, ok, max_ms,
         first[0] ? " first_failure " : "", first);
  return 0;
}

/* ---- the episodes --------------------------------------------------------------- */

/* Starts `elastic-chaos MODE args…` in namespace ns (NULL: ours), its
 * stdout to out; 0 or -errno. */
static int spawn_self(ea__chaos_run *r, const char *ns, const char *out, char *const args[],
                      pid_t *pid) {
  char self[CH_PATH_MAX];
  int rc = ea__chaos_self_exe(self, sizeof self);
  if (rc < 0) return rc;
  char *argv[12] = {self};
  for (int i = 0; args[i] && i < 10; i++) argv[i + 1] = args[i];
  unlink(out);
  rc = ea__chaos_spawn(argv, ns, out, NULL, pid);
  if (rc < 0) ea__chaos_logf(r, "cannot start %s %s: %s", self, args[0], strerror(-rc));
  return rc;
}

static bool cond_exited(ea__chaos_run *r, void *ctx) {
  (void)r;
  return !ea__chaos_pid_alive(*(pid_t *)ctx);
}

/* Waits (polling the cluster) until pid exits, at most ms; SIGKILL after. */
static void reap_helper(ea__chaos_run *r, pid_t pid, int ms) {
  if (pid <= 0) return;
  if (!ea__chaos_wait_until(r, ea__chaos_mono_ms() + ms, cond_exited, &pid)) {
    kill(pid, SIGKILL);
    ea__chaos_wait_until(r, ea__chaos_mono_ms() + 2000, cond_exited, &pid);
  }
}

/* The first line of a helper's output, "" when none. */
static void first_line(const char *path, char *out, size_t cap) {
  char *buf = NULL;
  size_t len = 0;
  out[0] = 0;
  if (ea__chaos_read_file(path, &buf, &len) < 0) return;
  buf[strcspn(buf, "\n")] = 0;
  snprintf(out, cap, "%s", buf);
  free(buf);
}

/* "HOST:PORT" → host, port; false when malformed. */
static bool split_addr(const char *a, char *host, size_t hcap, char *port, size_t pcap) {
  const char *c = strrchr(a, ':');
  if (!c || c == a || !c[1] || (size_t)(c - a) >= hcap) return false;
  snprintf(host, hcap, "%.*s", (int)(c - a), a);
  snprintf(port, pcap, "%s", c + 1);
  return true;
}

static int nsrc_of(const ea__chaos_run *r, const ea__chaos_fault *f) {
  return r->o.netns ? 0 : (f->fresh ? 25 : 1);
}

void ea__chaos_run_http_flood(ea__chaos_run *r, ea__chaos_episode *e, ea__chaos_node *v) {
  const ea__chaos_fault *f = &e->f;
  char host[64], port[16];
  if (!split_addr(v->st.metrics, host, sizeof host, port, sizeof port)) {
    e->state = EA__EP_SKIPPED;
    snprintf(e->skip_reason, sizeof e->skip_reason,
             "%s serves no metrics listener (status self.metrics is empty)", v->name);
    return;
  }
  const int nsrc = nsrc_of(r, f), k = (int)(e - r->eps) + 1;
  const char *mode = f->whole_node ? "slow" : "idle";
  char conns[16], nsrcs[16], secs[16], psecs[16], fout[CH_PATH_MAX + 32], pout[CH_PATH_MAX + 32];
  snprintf(conns, sizeof conns, "%d", HTTP_CONNS);
  snprintf(nsrcs, sizeof nsrcs, "%d", nsrc);
  snprintf(secs, sizeof secs, "%.1f", f->dur_ms / 1000.0);
  /* the probe starts once the flood holds its connections, ends before it */
  snprintf(psecs, sizeof psecs, "%.1f", (f->dur_ms - 1500) / 1000.0);
  snprintf(fout, sizeof fout, "%s/flood.%d.out", r->o.work, k);
  snprintf(pout, sizeof pout, "%s/probe.%d.out", r->o.work, k);
  char *fargs[] = {"--flood", host, port, nsrcs, conns, secs, (char *)mode, NULL};
  char *pargs[] = {"--http-probe", host, port, psecs, NULL};
  pid_t fpid = 0, ppid = 0;
  e->t_inject = ea__chaos_now_ms();
  uint64_t step0 = ea__chaos_cluster_step(r);
  if (spawn_self(r, r->o.netns ? r->ns[r->o.nagents + 1] : NULL, fout, fargs, &fpid) < 0) {
    e->state = EA__EP_SKIPPED;
    snprintf(e->skip_reason, sizeof e->skip_reason, "the flood could not start (harness.log)");
    return;
  }
  ea__chaos_wait_until(r, ea__chaos_mono_ms() + 1000, ea__chaos_never, NULL);
  if (spawn_self(r, r->o.netns ? r->ns[v->slot] : NULL, pout, pargs, &ppid) < 0) ppid = 0;
  reap_helper(r, ppid, f->dur_ms + 5000);
  reap_helper(r, fpid, 5000);
  e->t_heal = ea__chaos_now_ms();
  char fl[200], pl[300];
  first_line(fout, fl, sizeof fl);
  first_line(pout, pl, sizeof pl);
  unsigned long long np = 0, na = 0;
  long long max_ms = 0;
  bool parsed = sscanf(pl, "probes %llu answered %llu max_ms %lld", &np, &na, &max_ms) == 3;
  r->probes_checked = true;
  if (!parsed || np == 0 || na < np)
    ea__chaos_violate(r, EA__I_PROBES,
                      "fault #%d: GET /healthz of %s (%s:%s) while %d %s connections from %d "
                      "source%s held its metrics listener: %s",
                      k, v->name, host, port, HTTP_CONNS, mode, nsrc ? nsrc : 1,
                      nsrc > 1 ? "s" : "", pl[0] ? pl : "the probe printed nothing");
  uint64_t step1 = ea__chaos_cluster_step(r);
  if (step1 <= step0)
    ea__chaos_violate(r, EA__I_RECOVERY,
                      "fault #%d: training stood still at step %llu while %s's metrics listener "
                      "was flooded",
                      k, (unsigned long long)step0, v->name);
  snprintf(e->note, sizeof e->note,
           "%d %s connections from %d source%s to %s's metrics listener for %.1f s (%.150s); "
           "/healthz: %.200s",
           HTTP_CONNS, mode, nsrc ? nsrc : 1, nsrc > 1 ? "s" : "", v->name, f->dur_ms / 1000.0,
           fl[0] ? fl : "no count", pl);
  ea__chaos_say(r, "  flood: %s; /healthz: %s", fl, pl);
  /* nothing had to re-form: the cluster trains on as it was */
  ea__chaos_want w;
  ea__chaos_want_set(&w, r, NULL, NULL);
  w.gen_after = e->gen_at_inject;
  w.step_after = step1;
  if (!ea__chaos_phase_wait(r, &e->res, &w, e->t_heal, true, "restored"))
    ea__chaos_hang(r, e, "restored (after the flood)", &w);
}

void ea__chaos_run_join_flood(ea__chaos_run *r, ea__chaos_episode *e, ea__chaos_node *v) {
  const ea__chaos_fault *f = &e->f;
  char host[64], port[16], via[96];
  if (r->o.netns)
    snprintf(via, sizeof via, "%s:7000", r->ip[v->slot]);
  else
    snprintf(via, sizeof via, "%s", v->gossip);
  if (!split_addr(via, host, sizeof host, port, sizeof port)) {
    e->state = EA__EP_SKIPPED;
    snprintf(e->skip_reason, sizeof e->skip_reason, "%s's gossip address is not known", v->name);
    return;
  }
  const int nsrc = nsrc_of(r, f), k = (int)(e - r->eps) + 1;
  char conns[16], nsrcs[16], fout[CH_PATH_MAX + 32];
  snprintf(conns, sizeof conns, "%d", JOIN_CONNS);
  snprintf(nsrcs, sizeof nsrcs, "%d", nsrc);
  snprintf(fout, sizeof fout, "%s/flood.%d.out", r->o.work, k);
  /* long enough for the whole join episode; ended when it is over */
  char *fargs[] = {"--flood", host, port, nsrcs, conns, "3600", "idle", NULL};
  pid_t fpid = 0;
  const char *seed = v->name;
  if (spawn_self(r, r->o.netns ? r->ns[r->o.nagents + 2] : NULL, fout, fargs, &fpid) < 0) {
    e->state = EA__EP_SKIPPED;
    snprintf(e->skip_reason, sizeof e->skip_reason, "the flood could not start (harness.log)");
    return;
  }
  ea__chaos_say(r, "  flooding %s's gossip port %s (%d connections from %d source%s)", seed, via,
                JOIN_CONNS, nsrc ? nsrc : 1, nsrc > 1 ? "s" : "");
  ea__chaos_wait_until(r, ea__chaos_mono_ms() + 1000, ea__chaos_never, NULL);
  char seedname[CH_NAME_MAX];
  snprintf(seedname, sizeof seedname, "%s", seed);
  ea__chaos_run_join(r, e, via);
  /* SIGINT: the flood prints its count and exits */
  kill(fpid, SIGINT);
  reap_helper(r, fpid, 3000);
  char fl[200];
  first_line(fout, fl, sizeof fl);
  snprintf(e->note, sizeof e->note, "joined through %s (%s) while it was flooded: %s", seedname,
           via, fl[0] ? fl : "the flood printed nothing");
}
