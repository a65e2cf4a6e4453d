/* preempt.c — the `preempt` fault: spot notices through a fake metadata
 * service (issue 30, item 3).
 *
 * The service answers `GET /going/NAME` with 200 once
 * WORK/notices/going-NAME exists (404 before), which is what an agent polls
 * with runtime.preemption_notice=http://127.0.0.1:PORT/going/NAME (run.c
 * adds the flag to every agent it starts while the service runs).  On
 * loopback it is a thread of the harness on a free port; with --netns every
 * slot's namespace has its own loopback, so the harness starts one server
 * process per namespace (itself, `elastic-chaos --notice-serve DIR PORT`,
 * on NOTICE_NS_PORT), all reading the same flag files.  The agents poll
 * every 2 s, so a notice lands within one poll.
 *
 * The episode sends notices to k of the n nodes at once:
 *   k = 1 (when n − 1 ≥ min_nodes): a drain — the cluster re-forms without
 *     the node, which exits 0; then a fresh node takes its slot;
 *   k = n − min_nodes + 1 (fault.whole_node; the coin is reused so the
 *     schedule's other numbers do not move): a mass preemption — the
 *     survivors alone would be fewer than min_nodes, so the controller
 *     commits a checkpoint of the current step before it lets the k go
 *     (agent/preempt.c).  Every noticed agent must exit 0; the invariant
 *     `preempt_checkpoint`: LATEST must then name a checkpoint at a step at
 *     least the one the cluster had reached when the notices went out — a
 *     cold start from it resumes at the step reached, not at the last
 *     periodic checkpoint.  (The survivors pause with their live state; the
 *     k come back as fresh nodes and the job goes on from that state, so
 *     the run's history stays one lineage.)
 *
 * Without checkpoints (or runtime.preemption_grace_seconds 0) a mass
 * preemption is skipped with its reason.
 */
#include "chaos.h"

#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* Every noticed node gone within: the grace the controller may hold them
 * (runtime.preemption_grace_seconds) plus the degraded bound. */
#define GONE_SLACK_MS 5000
/* The servers' port inside the slots' namespaces (free there: the agents
 * use 7000 and 7001). */
#define NOTICE_NS_PORT 7099

/* Serve on fd until *quit (checked every 200 ms): flags in dir. */
static void serve_loop(int fd, const char *work, volatile bool *quit) {
  for (;;) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int pr = poll(&p, 1, 200);
    if (*quit) break;
    if (pr <= 0) continue;
    int c = accept(fd, NULL, NULL);
    if (c < 0) continue;
    struct timeval tv = {.tv_sec = 1};
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char req[1024];
    ssize_t n = recv(c, req, sizeof req - 1, 0);
    int code = 404;
    if (n > 0) {
      req[n] = 0;
      char name[CH_NAME_MAX + 1];
      if (sscanf(req, "GET /going/%64[A-Za-z0-9._-] ", name) == 1) {
        char path[CH_PATH_MAX + 96];
        snprintf(path, sizeof path, "%s/notices/going-%s", work, name);
        struct stat st;
        if (stat(path, &st) == 0) code = 200;
      }
    }
    char out[160];
    int len = snprintf(out, sizeof out,
                       "HTTP/1.1 %d %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", code,
                       code == 200 ? "OK" : "Not Found", code == 200 ? 9 : 4,
                       code == 200 ? "terminate" : "none");
    ssize_t w = send(c, out, (size_t)len, MSG_NOSIGNAL);
    (void)w;
    close(c);
  }
}

static void *serve(void *arg) {
  ea__chaos_run *r = arg;
  serve_loop(r->notice_fd, r->o.work, &r->notice_quit);
  return NULL;
}

/* A listening socket on 127.0.0.1:port (0: any); the port in *port. */
static int listen_lo(int *port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                          .sin_port = htons((uint16_t)*port)};
  socklen_t al = sizeof a;
  int one = 1;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 64) < 0 ||
      getsockname(fd, (struct sockaddr *)&a, &al) < 0) {
    int rc = -errno;
    if (fd >= 0) close(fd);
    return rc;
  }
  *port = ntohs(a.sin_port);
  return fd;
}

int ea__chaos_notice_serve_main(const char *work, int port) {
  int fd = listen_lo(&port);
  if (fd < 0) {
    fprintf(stderr, "elastic-chaos --notice-serve: 127.0.0.1:%d: %s\n", port, strerror(-fd));
    return 3;
  }
  static volatile bool never;
  serve_loop(fd, work, &never);
  return 0;
}

int ea__chaos_notice_start(ea__chaos_run *r, char *err, size_t errlen) {
  char dir[CH_PATH_MAX + 16];
  snprintf(dir, sizeof dir, "%s/notices", r->o.work);
  int rc = ea__chaos_mkdirs(dir, 0755);
  if (rc < 0) {
    snprintf(err, errlen, "cannot create %s: %s", dir, strerror(-rc));
    return rc;
  }
  if (r->o.netns) {
    /* One server per slot namespace (ea__chaos_spawn enters it); the
     * harness ends them with its other children at teardown. */
    char self[CH_PATH_MAX], port[16], log[CH_PATH_MAX + 32];
    if ((rc = ea__chaos_self_exe(self, sizeof self)) < 0) {
      snprintf(err, errlen, "readlink /proc/self/exe: %s", strerror(-rc));
      return rc;
    }
    snprintf(port, sizeof port, "%d", NOTICE_NS_PORT);
    snprintf(log, sizeof log, "%s/notices/servers.log", r->o.work);
    for (int s = 1; s <= r->nslots; s++) {
      char *argv[] = {self, "--notice-serve", r->o.work, port, NULL};
      pid_t pid;
      if ((rc = ea__chaos_spawn(argv, r->ns[s], log, NULL, &pid)) < 0) {
        snprintf(err, errlen, "the fake metadata service in %s: %s", r->ns[s], strerror(-rc));
        return rc;
      }
    }
    r->notice_port = NOTICE_NS_PORT;
    r->notice_fd = -1;
    ea__chaos_logf(r, "fake metadata service in every slot namespace on 127.0.0.1:%d",
                   NOTICE_NS_PORT);
    return 0;
  }
  int p0 = 0, fd = listen_lo(&p0);
  if (fd < 0) {
    snprintf(err, errlen, "the fake metadata service: %s", strerror(-fd));
    return fd;
  }
  r->notice_fd = fd;
  r->notice_port = p0;
  r->notice_quit = false;
  if ((rc = pthread_create(&r->notice_thread, NULL, serve, r)) != 0) {
    close(fd);
    r->notice_port = 0;
    snprintf(err, errlen, "the fake metadata service: %s", strerror(rc));
    return -rc;
  }
  ea__chaos_logf(r, "fake metadata service on 127.0.0.1:%d (GET /going/NAME)", r->notice_port);
  return 0;
}

void ea__chaos_notice_stop(ea__chaos_run *r) {
  if (!r->notice_port) return;
  if (r->notice_fd < 0) { /* the namespaces' servers: ended with the other children */
    r->notice_port = 0;
    return;
  }
  r->notice_quit = true;
  pthread_join(r->notice_thread, NULL);
  close(r->notice_fd);
  r->notice_port = 0;
}

static int flag(ea__chaos_run *r, const char *name, bool on) {
  char path[CH_PATH_MAX + 96];
  snprintf(path, sizeof path, "%s/notices/going-%s", r->o.work, name);
  if (!on) return unlink(path) == 0 || errno == ENOENT ? 0 : -errno;
  return ea__chaos_write_file(path, "terminate\n", 10);
}

typedef struct {
  ea__chaos_node **v;
  int k;
} victims;

static bool all_gone(ea__chaos_run *r, void *ctx) {
  (void)r;
  const victims *x = ctx;
  for (int i = 0; i < x->k; i++)
    if (ea__chaos_node_running(x->v[i])) return false;
  return true;
}

/* LATEST's step, 0 when none. */
static uint64_t latest_step(ea__chaos_run *r, char *name, size_t cap) {
  char path[CH_PATH_MAX + 16], buf[128] = "";
  snprintf(path, sizeof path, "%s/LATEST", r->ckpt_dir);
  FILE *f = fopen(path, "re");
  if (f) {
    if (!fgets(buf, sizeof buf, f)) buf[0] = 0;
    fclose(f);
  }
  buf[strcspn(buf, "\r\n")] = 0;
  snprintf(name, cap, "%s", buf[0] ? buf : "none");
  unsigned long long s = 0;
  return sscanf(buf, "step-%llu.gen-", &s) == 1 ? (uint64_t)s : 0;
}

void ea__chaos_run_preempt(ea__chaos_run *r, ea__chaos_episode *e, ea__chaos_node *v) {
  int n = r->o.nagents, minn = (int)r->cfg.compute.min_nodes;
  int k = e->f.whole_node ? n - minn + 1 : 1;
  if (k == 1 && n - 1 < minn) k = n - minn + 1; /* one is already a mass preemption */
  ea__chaos_node *vict[CH_MAX_SLOTS];
  int nv = 0;
  for (int i = 0; i < n && nv < k; i++) {
    ea__chaos_node *x = ea__chaos_slot_node(r, 1 + (v->slot - 1 + i) % n);
    if (ea__chaos_node_running(x)) vict[nv++] = x;
  }
  bool mass = n - nv < minn;
  char names[sizeof e->minority] = "";
  size_t off = 0;
  for (int i = 0; i < nv && off < sizeof names - 2; i++)
    off += (size_t)snprintf(names + off, sizeof names - off, "%s%s", i ? "," : "", vict[i]->name);
  snprintf(e->victim, sizeof e->victim, "%s", vict[0]->name);
  snprintf(e->minority, sizeof e->minority, "%s", names);
  char before[64];
  uint64_t s_before = latest_step(r, before, sizeof before);
  ea__chaos_say(r, "  notices to %d of %d (%s)%s", nv, n, names,
                mass ? ": a mass preemption (the rest fewer than min_nodes)" : ": a drain");
  e->t_inject = ea__chaos_now_ms();
  for (int i = 0; i < nv; i++) {
    vict[i]->expect_death = vict[i]->expect_exit0 = true;
    flag(r, vict[i]->name, true);
  }
  if (!mass) {
    ea__chaos_want w;
    ea__chaos_want_set(&w, r, vict[0]->name, NULL);
    w.gen_after = e->gen_at_inject;
    w.strictly = true;
    w.step_after = e->step_at_inject;
    w.gone = vict[0]->name;
    if (!ea__chaos_phase_wait(r, &e->deg, &w, e->t_inject, true, "degraded"))
      ea__chaos_hang(r, e, "degraded", &w);
  } else {
    int64_t bound =
        (int64_t)r->cfg.runtime.preemption_grace_seconds * 1000 + r->bound_ms + GONE_SLACK_MS;
    victims x = {.v = vict, .k = nv};
    if (!ea__chaos_wait_until(r, ea__chaos_mono_ms() + bound, all_gone, &x)) {
      ea__chaos_violate(r, EA__I_RECOVERY,
                        "after notices to %s, not every one left within %" PRId64 " ms", names,
                        bound);
    } else {
      e->deg.observed = true;
      e->deg.t_seen = ea__chaos_now_ms();
    }
    char now[64];
    uint64_t s_now = latest_step(r, now, sizeof now);
    r->preempt_checked = true;
    if (s_now < e->step_at_inject || !strcmp(now, before))
      ea__chaos_violate(r, EA__I_PREEMPT,
                        "notices to %s at step %" PRIu64
                        " (survivors fewer than min_nodes %d): "
                        "LATEST is %s, not a checkpoint of the step reached (before: %s)",
                        names, e->step_at_inject, minn, now, before);
    else
      snprintf(e->note, sizeof e->note,
               "mass preemption at step %" PRIu64
               ": checkpoint %s committed before %s left "
               "(previous newest %s, step %" PRIu64 ")",
               e->step_at_inject, now, names, before, s_before);
    ea__chaos_say(r, "  LATEST after the preemption: %s (step reached at the notices: %" PRIu64 ")",
                  now, e->step_at_inject);
  }
  for (int i = 0; i < nv; i++) {
    if (ea__chaos_node_running(vict[i])) { /* it never left: end it for a clean restore */
      vict[i]->expect_exit0 = false;
      ea__chaos_node_signal(r, vict[i], SIGKILL, true);
      ea__chaos_wait_gone(r, vict[i], 5000);
    }
    flag(r, vict[i]->name, false);
  }
  /* Back: fresh nodes (a preempted machine's disk is gone with it). */
  e->t_restore = ea__chaos_now_ms();
  for (int i = 0; i < nv; i++) {
    ea__chaos_node *back = ea__chaos_replace_fresh(r, vict[i]);
    if (!back) {
      snprintf(e->note, sizeof e->note, "could not create a fresh node");
      return;
    }
    if (i == 0) snprintf(e->newcomer, sizeof e->newcomer, "%s", back->name);
    ea__chaos_say(r, "  restore: %s (fresh node: new disk, new id)", back->name);
    ea__chaos_node_start(r, back);
  }
  ea__chaos_want w;
  ea__chaos_want_set(&w, r, NULL, NULL);
  w.gen_after = e->gen_at_inject;
  w.strictly = true;
  w.step_after = mass ? 0 : e->step_at_inject;
  if (!ea__chaos_phase_wait(r, &e->res, &w, e->t_restore, true, "restored"))
    ea__chaos_hang(r, e, "restored", &w);
}
