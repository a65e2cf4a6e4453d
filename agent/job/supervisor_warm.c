/* supervisor_warm.c — the supervisor's spares: a warm interpreter per slot,
 * started ahead of need, watched while it imports the preload, and handed a
 * start (its argv, environment, working directory and output) so it becomes
 * that slot's worker (supervisor.h says what a spare is; warm.h decides which
 * programs may start warm and builds the handover packet).  Its timer
 * (on_warm_timer) starts the next spare and delivers on_spare.  The records
 * and the supervisor are supervisor_int.h; spawning, reading and stopping are
 * supervisor.c's.
 */
#include "supervisor_int.h"

#include "ea_log.h"
#include "warm.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Spares lost in a row (each died while it waited) before a slot's spares
 * are turned off: a machine that kills them (memory) would otherwise keep
 * paying their imports. */
#define SPARE_LOST_MAX 3
/* The handover must fit one SEQPACKET datagram (the kernel's default socket
 * buffer is 208 KiB); a larger environment starts cold. */
#define HANDOVER_MAX (192u << 10)

static uint64_t now_ms(ea__sup *s) {
  uv_update_time(s->loop);
  return uv_now(s->loop);
}

/* The words a spare of slot idx would run: the exec form's, or a plain
 * shell command's (warm.h).  NULL with why when there are none. */
static char **program_words(ea__sup *s, char *const *cold, char *why, size_t cap) {
  if (s->argv) {
    char **w = ea__sup_words_dup(cold, SIZE_MAX, 0);
    if (!w) snprintf(why, cap, "out of memory");
    return w;
  }
  if (!s->command) {
    snprintf(why, cap, "the built-in worker is not Python");
    return NULL;
  }
  char **w = NULL;
  int rc = ea__warm_split(cold[2], &w, why, cap);
  if (rc == -ENOMEM) snprintf(why, cap, "out of memory");
  return rc ? NULL : w;
}

/* ---- spares: warm interpreters ------------------------------------------------ */

/* Slot idx starts cold from now on; the first reason is kept and logged. */
static void on_warm_timer(uv_timer_t *t);

/* on_spare(idx), from the warm timer's next turn: never from inside the
 * call that caused it. */
static void spare_notify(ea__sup *s, uint32_t idx) {
  if (!s->cb.on_spare || s->closing) return;
  s->warm[idx].notify = true;
  uv_timer_start(&s->warm_timer, on_warm_timer, 0, 0);
}

static void spare_off(ea__sup *s, uint32_t idx, const char *why) {
  warm_slot *ws = &s->warm[idx];
  if (ws->off) return;
  ws->off = true;
  ws->due = false;
  spare_notify(s, idx);
  snprintf(ws->why, sizeof ws->why, "%s", why);
  ea_log(EA_LOG_WARN, "warm", "local rank %u: no warm interpreter: %s; its workers start cold", idx,
         why);
}

/* Log what a spare wrote before it was taken (its preload's warnings):
 * a non-blocking drain of our ends of its first stdout and stderr. */
static void spare_drain_output(wk *w) {
  for (int i = 0; i < 2; i++) {
    if (w->out[i] < 0) continue;
    char buf[4096];
    ssize_t n;
    while ((n = recv(w->out[i], buf, sizeof buf - 1, MSG_DONTWAIT)) > 0) {
      buf[n] = 0;
      for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n"))
        ea_log(EA_LOG_INFO, "warm", "local rank %u pid=%d: %s", w->idx, w->pid, line);
    }
    close(w->out[i]);
    w->out[i] = -1;
  }
}

static void on_spare_ctl(uv_poll_t *h, int status, int events) {
  (void)events;
  wk *w = h->data;
  ea__sup *s = w->s;
  char buf[4001];
  ssize_t n = status < 0 ? -1 : recv(w->ctl, buf, sizeof buf - 1, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR) && status >= 0) return;
  if (n <= 0) { /* it exited, or is exiting: on_proc_exit says more */
    uv_poll_stop(&w->cpoll);
    return;
  }
  buf[n] = 0;
  if (strcmp(buf, "ready") == 0) {
    w->ready = true;
    spare_notify(s, w->idx);
    s->warm[w->idx].lost_row = 0;
    ea_log(EA_LOG_INFO, "warm", "local rank %u: warm interpreter pid=%d ready in %" PRIu64 " ms",
           w->idx, w->pid, now_ms(s) - w->born_ms);
  } else {
    char why[300];
    snprintf(why, sizeof why, "its preload failed (%.250s)",
             strncmp(buf, "fail ", 5) == 0 ? buf + 5 : buf);
    spare_drain_output(w);
    spare_off(s, w->idx, why);
    w->stopping = true;
    ea__sup_signal_group(w, SIGKILL);
  }
}

/* Start slot idx's spare now. */
static void spare_spawn(ea__sup *s, uint32_t idx) {
  warm_slot *ws = &s->warm[idx];
  if (s->closing || ws->off || ws->w) return;
  char why[256] = "";
  ea__warm_form f;
  char **cold = ea__sup_cold_args(s, idx);
  char **words = cold ? program_words(s, cold, why, sizeof why) : NULL;
  ea__sup_words_free(cold);
  if (!words || ea__warm_form_of(words, &f, why, sizeof why) != 0) {
    ea__sup_words_free(words);
    spare_off(s, idx, why[0] ? why : "out of memory");
    return;
  }
  /* PYTHON OPTIONS launcher MODULE… */
  size_t np = 0;
  while (s->preload[np]) np++;
  char **args = ea__sup_words_dup(words, f.ninterp, 1 + np);
  bool ok = args && ea__sup_words_add(args, "%s", s->launcher);
  for (size_t i = 0; ok && i < np; i++) ok = ea__sup_words_add(args, "%s", s->preload[i]);
  int fdn = s->no_ipc ? EA_IPC_WORKER_FD : EA_IPC_WORKER_FD + 1;
  char fdv[32];
  snprintf(fdv, sizeof fdv, "EA_WARM_FD=%d", fdn);
  char **env = NULL;
  if (ok) {
    env = ws->env ? ea__sup_words_dup(ws->env, SIZE_MAX, 1) : ea__sup_usual_env(s, idx, NULL);
    ok = env && ea__sup_words_add(env, "%s", fdv);
  }
  int ctl[2] = {-1, -1}, ipc[2] = {-1, -1}, o1[2] = {-1, -1}, o2[2] = {-1, -1};
  int rc = ok ? 0 : -ENOMEM;
  if (rc == 0 && socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl) < 0) rc = -errno;
  if (rc == 0 && !s->no_ipc) rc = ea_ipc_socketpair(ipc);
  if (rc == 0 && s->no_ipc &&
      (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, o1) < 0 ||
       socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, o2) < 0))
    rc = -errno;
  int big = 1 << 20;
  if (rc == 0) {
    setsockopt(ctl[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    if (fcntl(ctl[0], F_SETFL, fcntl(ctl[0], F_GETFL) | O_NONBLOCK) < 0) rc = -errno;
  }
  if (rc == 0 && ipc[0] >= 0 && fcntl(ipc[0], F_SETFL, fcntl(ipc[0], F_GETFL) | O_NONBLOCK) < 0)
    rc = -errno;
  wk *w = rc == 0 ? ea__sup_wk_new(s, idx) : NULL;
  if (rc == 0 && !w) rc = -ENOMEM;
  if (w) {
    w->spare = true;
    w->ctl = ctl[0];
    w->fd = ipc[0];
    w->out[0] = o1[0];
    w->out[1] = o2[0];
    ctl[0] = ipc[0] = o1[0] = o2[0] = -1; /* the record's now */
    w->env = env;
    env = NULL;
    w->ninterp = f.ninterp;
    w->interp = ea__sup_words_dup(words, f.ninterp, 0);
    w->born_ms = now_ms(s);
    int extra[2] = {ctl[1], -1}, ne = 1;
    if (!s->no_ipc) extra[0] = ipc[1], extra[1] = ctl[1], ne = 2;
    int outs[2] = {o1[1], o2[1]};
    rc = w->interp ? ea__sup_wk_spawn(w, args, w->env, NULL, NULL, outs, extra, ne) : -ENOMEM;
    if (rc == 0) {
      rc = uv_poll_init(s->loop, &w->cpoll, w->ctl);
      if (rc == 0) {
        w->cpoll.data = w;
        w->open++;
        rc = uv_poll_start(&w->cpoll, UV_READABLE, on_spare_ctl);
      }
      if (rc == 0 && w->fd >= 0) rc = ea__sup_wk_watch(w, false);
    }
    if (rc == 0) {
      ws->w = w;
      ea_log(EA_LOG_INFO, "warm", "local rank %u: warm interpreter pid=%d started (%s, preload %s)",
             idx, w->pid, args[0], np ? s->preload_text : "nothing");
    } else if (w->pid > 0) {
      w->detached = true;
      w->stopping = true;
      ea__sup_signal_group(w, SIGKILL);
    } else {
      w->detached = true;
      ea__sup_wk_close(w);
    }
  }
  for (int i = 0; i < 2; i++) {
    int *p[] = {&ctl[i], &ipc[i], &o1[i], &o2[i]};
    for (size_t j = 0; j < 4; j++)
      if (*p[j] >= 0) close(*p[j]);
  }
  if (rc) {
    snprintf(why, sizeof why, "starting one: %s", rc < 0 ? uv_strerror(rc) : "?");
    spare_off(s, idx, why);
  }
  ea__sup_words_free(words);
  ea__sup_words_free(args);
  ea__sup_words_free(env);
}

static void on_warm_timer(uv_timer_t *t) {
  ea__sup *s = t->data;
  for (uint32_t i = 0; i < s->n && !s->closing; i++)
    if (s->warm[i].notify) {
      s->warm[i].notify = false;
      s->cb.on_spare(s->ctx, i); /* may call any ea__sup_* */
    }
  if (s->closing) return;
  uint64_t now = now_ms(s), next = UINT64_MAX;
  for (uint32_t i = 0; i < s->n; i++) {
    warm_slot *ws = &s->warm[i];
    if (!ws->due) continue;
    if (ws->due_ms <= now) {
      ws->due = false;
      spare_spawn(s, i);
    } else if (ws->due_ms < next) {
      next = ws->due_ms;
    }
  }
  if (next != UINT64_MAX) uv_timer_start(&s->warm_timer, on_warm_timer, next - now, 0);
}

static void spare_schedule(ea__sup *s, uint32_t idx, uint32_t delay_ms) {
  warm_slot *ws = &s->warm[idx];
  if (s->closing || ws->off || ws->w) return;
  uint64_t due = now_ms(s) + delay_ms;
  if (ws->due && ws->due_ms <= due) return;
  ws->due = true;
  ws->due_ms = due;
  uint64_t in = uv_timer_get_due_in(&s->warm_timer);
  if (!uv_is_active((uv_handle_t *)&s->warm_timer) || in > delay_ms)
    uv_timer_start(&s->warm_timer, on_warm_timer, delay_ms, 0);
}

/* A spare exited before it was taken. */
void ea__sup_spare_exited(ea__sup *s, wk *w, int64_t status, int sig) {
  warm_slot *ws = &s->warm[w->idx];
  if (ws->w == w) ws->w = NULL;
  spare_drain_output(w);
  if (s->closing || w->stopping) return; /* we ended it */
  ws->lost++;
  char why[160];
  snprintf(why, sizeof why, "the warm interpreter pid=%d %s %d %s", w->pid,
           sig ? "was killed by signal" : "exited with status", sig ? sig : (int)status,
           w->ready ? "while it waited" : "during its preload");
  if (!w->ready || ++ws->lost_row >= SPARE_LOST_MAX) {
    spare_off(s, w->idx, why);
    return;
  }
  ea_log(EA_LOG_WARN, "warm", "local rank %u: %s: another is started", w->idx, why);
  spare_schedule(s, w->idx, 1000);
}

/* sendmsg the handover with fds (n of them) on a SEQPACKET socket. */
static int send_handover(int sock, const char *p, size_t len, const int *fds, int n) {
  struct iovec iov = {.iov_base = (void *)p, .iov_len = len};
  union {
    struct cmsghdr h;
    char b[CMSG_SPACE(2 * sizeof(int))];
  } cm;
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
  if (n > 0) {
    memset(&cm, 0, sizeof cm);
    mh.msg_control = cm.b;
    mh.msg_controllen = CMSG_SPACE((size_t)n * sizeof(int));
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN((size_t)n * sizeof(int));
    memcpy(CMSG_DATA(c), fds, (size_t)n * sizeof(int));
  }
  for (;;) {
    ssize_t r = sendmsg(sock, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (r == (ssize_t)len) return 0;
    if (r >= 0) return -EMSGSIZE;
    if (errno != EINTR) return -errno;
  }
}

/* Close a spare's control socket (its poll handle first) after the take. */
static void close_ctl(wk *w) {
  if (w->cpoll.data == w && !uv_is_closing((uv_handle_t *)&w->cpoll))
    uv_close((uv_handle_t *)&w->cpoll, ea__sup_wk_handle_closed);
  /* the fd itself is closed when the record is (ea__sup_wk_handle_closed) */
}

/* Hand slot idx's start to its spare: 0 when the spare became the worker;
 * otherwise the caller starts it cold. */
int ea__sup_spare_take(ea__sup *s, uint32_t idx, char **cold, char **env, const ea__sup_spawn *sp) {
  warm_slot *ws = &s->warm[idx];
  wk *w = ws->w;
  if (ws->off || !w || w->exited || w->stopping) {
    if (!ws->off) spare_schedule(s, idx, 0); /* none yet: the next one */
    return -ENOENT;
  }
  char why[256] = "", name[128] = "";
  ea__warm_form f;
  char **words = program_words(s, cold, why, sizeof why);
  int rc = words ? ea__warm_form_of(words, &f, why, sizeof why) : -ENOTSUP;
  if (rc == 0 && f.ninterp != w->ninterp) rc = -ENOTSUP;
  for (uint32_t i = 0; rc == 0 && i < f.ninterp; i++)
    if (strcmp(words[i], w->interp[i]) != 0) rc = -ENOTSUP;
  if (rc && !why[0]) snprintf(why, sizeof why, "the interpreter's words changed");
  if (rc == 0 && !ea__warm_env_compatible(w->env, env, name, sizeof name)) {
    snprintf(why, sizeof why, "%s differs from the warm interpreter's", name);
    rc = -ENOTSUP;
  }
  char cwd[PATH_MAX];
  if (rc == 0 && !getcwd(cwd, sizeof cwd)) rc = -errno;
  char *pkt = NULL;
  size_t len = 0;
  if (rc == 0) rc = ea__warm_handover(words, &f, env, cwd, HANDOVER_MAX, &pkt, &len);
  /* The worker's output: two stream pairs, our ends into the caller's
   * pipes (as uv_spawn's UV_CREATE_PIPE would have made them). */
  int a[2] = {-1, -1}, b[2] = {-1, -1}, nf = 0, fds[2];
  bool outs = sp && sp->out && sp->err;
  if (rc == 0 && outs) {
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, a) < 0 ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, b) < 0)
      rc = -errno;
    fds[0] = a[1];
    fds[1] = b[1];
    nf = 2;
  }
  if (rc == 0) rc = send_handover(w->ctl, pkt, len, fds, nf);
  if (rc == 0 && outs) {
    rc = uv_pipe_open(sp->out, a[0]);
    if (rc == 0) a[0] = -1;
    int r2 = uv_pipe_open(sp->err, b[0]);
    if (r2 == 0) b[0] = -1;
    if (!rc) rc = r2;
  }
  free(pkt);
  ea__sup_words_free(words);
  for (int i = 0; i < 2; i++) {
    if (a[i] >= 0) close(a[i]);
    if (b[i] >= 0) close(b[i]);
  }
  if (rc == -ENOTSUP || rc == -E2BIG) {
    ea_log(EA_LOG_INFO, "warm", "local rank %u: started cold: %s", idx,
           rc == -E2BIG ? "its arguments and environment are over 192 KiB" : why);
    return rc; /* the spare stays for a start it can serve */
  }
  if (rc) {
    ea_log(EA_LOG_WARN, "warm", "local rank %u: handing over to pid=%d: %s: started cold", idx,
           w->pid, strerror(-rc));
    w->stopping = true;
    ea__sup_signal_group(w, SIGKILL);
    ws->w = NULL;
    spare_schedule(s, idx, s->spare_delay_ms);
    return rc;
  }
  /* It is the worker now. */
  ws->w = NULL;
  ws->warm++;
  s->warm_starts++;
  ws->lost_row = 0;
  spare_drain_output(w);
  close_ctl(w);
  w->spare = false;
  if (w->fd >= 0) {
    int r = uv_poll_start(&w->poll, UV_READABLE, ea__sup_on_readable);
    w->poll_on = r == 0;
  }
  s->slot[idx] = w;
  ea_log(EA_LOG_INFO, "worker", "worker %u started pid=%d (%s, warm%s)", idx, w->pid,
         ea__sup_prog_name(s), w->ready ? "" : ": still importing");
  spare_schedule(s, idx, s->spare_delay_ms);
  return 0;
}

int ea__sup_spare_env(ea__sup *s, uint32_t idx, char *const *env) {
  if (!s->warm || idx >= s->n) return 0;
  char **c = ea__sup_words_dup(env, SIZE_MAX, 0);
  if (!c) return -ENOMEM;
  ea__sup_words_free(s->warm[idx].env);
  s->warm[idx].env = c;
  return 0;
}

void ea__sup_spares_start(ea__sup *s) {
  for (uint32_t i = 0; s->warm && i < s->n; i++) spare_spawn(s, i);
}

void ea__sup_spare_get(const ea__sup *s, uint32_t idx, ea__sup_spare *out) {
  memset(out, 0, sizeof *out);
  if (idx >= s->n || !s->warm) {
    out->off = true;
    out->why = "compute.warm_start is off";
    return;
  }
  const warm_slot *ws = &s->warm[idx];
  out->kept = true;
  if (ws->w && !ws->w->exited) {
    out->pid = ws->w->pid;
    out->ready = ws->w->ready;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/statm", out->pid);
    FILE *f = fopen(path, "re");
    unsigned long long size, res;
    if (f && fscanf(f, "%llu %llu", &size, &res) == 2)
      out->rss = (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
    if (f) fclose(f);
  }
  out->off = ws->off;
  out->why = ws->off ? ws->why : NULL;
  out->warm = ws->warm;
  out->cold = ws->cold;
  out->lost = ws->lost;
}
