/* supervisor.c — the agent's worker processes, on the agent's libuv loop.
 *
 * Each running worker is one record holding three libuv handles: the
 * process (its exit callback is the SIGCHLD the design counts on as the
 * fastest failure signal), a poll handle on the agent's end of the
 * SOCK_SEQPACKET socketpair (one packet = one message, read with
 * non-blocking recvmsg: a CKPT_STAGED brings its staging memfd along, lent
 * to on_message in m->fd and closed once the callback returns), and a timer for the STOP → SIGTERM
 * → SIGKILL ladder. A record is created per spawn and freed only when all three handles have
 * closed, so a slot can be restarted from inside on_exit while the old
 * record is still closing — libuv's rule that handle memory lives until its
 * close callback is kept by construction, not by care at each call site.
 *
 * Exit and messages are ordered: a worker's last packets (EXITING, a final
 * FAILED) may still sit in the socket when the exit callback runs, so the
 * exit callback drains the socket before it reports the exit.  Reads are
 * capped per loop turn so a worker that reports thousands of steps a
 * second cannot starve the gossip on the same loop; the poll is
 * level-triggered, so what is left is read on the next turn.
 */
#include "supervisor.h"

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

extern char **environ;

/* Packets read per poll wake-up: a STEP packet costs a few microseconds to
 * decode and deliver, so 64 bound one worker's share of a loop turn to well
 * under a millisecond while emptying a normal backlog in one turn. */
#define MAX_READS_PER_WAKE 64
/* Spares lost in a row (each died while it waited) before a slot's spares
 * are turned off: a machine that kills them (memory) would otherwise keep
 * paying their imports. */
#define SPARE_LOST_MAX 3
/* The handover must fit one SEQPACKET datagram (the kernel's default socket
 * buffer is 208 KiB); a larger environment starts cold. */
#define HANDOVER_MAX (192u << 10)

typedef struct wk wk;

/* A slot's spares. */
typedef struct {
  wk *w;       /* the spare now, or NULL */
  char **env;  /* its environment; NULL: the usual one */
  bool off;    /* starts are cold from now on */
  bool due;    /* a spare is to start at due_ms */
  bool notify; /* on_spare is owed (from a loop turn of its own) */
  uint64_t due_ms;
  char why[320];
  uint32_t lost_row; /* lost in a row */
  uint64_t warm, cold, lost;
} warm_slot;

struct ea__sup {
  uv_loop_t *loop;
  ea__sup_cbs cb;
  void *ctx;
  uint32_t n;
  wk **slot; /* running (or exited, not yet reported) records */
  char *command, *exe, *config, *bind;
  char **argv; /* exec form, NULL-terminated copy; NULL: none */
  bool no_ipc;
  uint32_t stop_grace_ms, term_grace_ms;
  uint64_t bad_packets;
  size_t live; /* records not yet freed, + 1 for `guard` */
  bool closing;
  uv_timer_t guard; /* closed last-but-one: makes `closed` asynchronous */
  void (*closed)(void *ctx);
  void *closed_ctx;
  uint8_t rx[EA_IPC_MAX_MSG];
  uint8_t tx[EA_IPC_MAX_MSG];
  ea_ipc_msg msg;  /* the one being delivered */
  ea_ipc_msg stop; /* STOP, kept apart: ea__sup_stop may run inside on_message */
  /* spares (warm interpreters): NULL when off */
  warm_slot *warm;
  char *launcher, *preload_text;
  char **preload;
  uint32_t spare_delay_ms;
  uv_timer_t warm_timer;
  uint64_t warm_starts, cold_starts;
};

struct wk {
  ea__sup *s;
  uint32_t idx;
  uv_process_t proc;
  uv_poll_t poll;
  uv_timer_t timer;
  int fd;   /* agent's end; closed after the poll handle */
  int open; /* handles initialised and not yet closed */
  bool poll_on, exited, stopping;
  bool detached; /* out of its slot: exit reported already, or never (start failed) */
  int stage;     /* 0 STOP sent, 1 SIGTERM sent, 2 SIGKILL sent */
  int pid;
  /* a spare (warm interpreter) until it is taken */
  bool spare, ready;
  int ctl;         /* our end of its control socket */
  int out[2];      /* restart mode: our ends of its first stdout, stderr */
  uv_poll_t cpoll; /* on ctl */
  uint64_t born_ms;
  char **env;    /* the environment it started with */
  char **interp; /* its interpreter words */
  uint32_t ninterp;
};

static void words_free(char **w);
static void spare_exited(ea__sup *s, wk *w, int64_t status, int sig);

static void sup_destroy(ea__sup *s);

static void maybe_free_sup(ea__sup *s) {
  if (!s->closing || s->live) return;
  void (*closed)(void *) = s->closed;
  void *ctx = s->closed_ctx;
  sup_destroy(s);
  if (closed) closed(ctx);
}

static void wk_handle_closed(uv_handle_t *h) {
  wk *w = h->data;
  if (--w->open > 0) return;
  if (w->fd >= 0) close(w->fd);
  if (w->ctl >= 0) close(w->ctl);
  for (int i = 0; i < 2; i++)
    if (w->out[i] >= 0) close(w->out[i]);
  words_free(w->env);
  words_free(w->interp);
  ea__sup *s = w->s;
  if (!w->detached && s->slot[w->idx] == w) s->slot[w->idx] = NULL;
  free(w);
  s->live--;
  maybe_free_sup(s);
}

static void close_if_open(wk *w, uv_handle_t *h) {
  if (h->data == w && !uv_is_closing(h)) uv_close(h, wk_handle_closed);
}

static void wk_close(wk *w) {
  close_if_open(w, (uv_handle_t *)&w->timer);
  close_if_open(w, (uv_handle_t *)&w->poll);
  close_if_open(w, (uv_handle_t *)&w->cpoll);
  close_if_open(w, (uv_handle_t *)&w->proc);
}

static void signal_group(wk *w, int sig) {
  if (w->exited || w->pid <= 0) return;
  /* The whole group (a user's shell and its children); the worker leads
   * it.  Fall back to the pid alone if the group is already gone. */
  if (uv_kill(-w->pid, sig) != 0) uv_kill(w->pid, sig);
}

/* ---- reading ------------------------------------------------------------ */

/* Read up to max packets; returns false when the stream ended.  A packet
 * may carry one fd (a CKPT_STAGED's staging memfd): it is lent to
 * on_message in msg.fd and closed here afterwards, on every path, so the
 * callback dups what it keeps (ea__ckpt_svc_on_worker does). */
static bool read_packets(wk *w, int max) {
  ea__sup *s = w->s;
  for (int i = 0; i < max; i++) {
    int pfd = -1;
    ssize_t n = ea_ipc_recv_packet(w->fd, s->rx, sizeof s->rx, &pfd);
    if (n < 0) {
      if (n == -EAGAIN || n == -EWOULDBLOCK) return true;
      return false;
    }
    if (n == 0) {
      if (pfd >= 0) close(pfd);
      return false;
    }
    if ((size_t)n > sizeof s->rx) {
      if (pfd >= 0) close(pfd);
      s->bad_packets++;
      ea_log(EA_LOG_WARN, "worker", "worker %u: %zd-byte packet over the %u-byte limit dropped",
             w->idx, n, EA_IPC_MAX_MSG);
      continue;
    }
    char err[160];
    if (ea_ipc_decode(s->rx, (size_t)n, &s->msg, err, sizeof err) != 0) {
      if (pfd >= 0) close(pfd);
      s->bad_packets++;
      ea_log(EA_LOG_WARN, "worker", "worker %u: bad packet dropped: %s", w->idx, err);
      continue;
    }
    s->msg.fd = pfd;
    if (!s->closing && s->cb.on_message) s->cb.on_message(s->ctx, w->idx, &s->msg);
    if (pfd >= 0) close(pfd); /* the local copy: s->msg may be reused by now */
    /* The callback may have freed the supervisor (it is then closing and
     * this record is on its way out) or stopped reading. */
    if (s->closing || !w->poll_on) return true;
  }
  return true;
}

static void stop_polling(wk *w) {
  if (!w->poll_on) return;
  w->poll_on = false;
  uv_poll_stop(&w->poll);
}

static void on_readable(uv_poll_t *h, int status, int events) {
  (void)events;
  wk *w = h->data;
  if (status < 0 || !read_packets(w, MAX_READS_PER_WAKE)) stop_polling(w);
}

/* ---- exit ----------------------------------------------------------------- */

static void on_proc_exit(uv_process_t *p, int64_t exit_status, int term_signal) {
  wk *w = p->data;
  ea__sup *s = w->s;
  w->exited = true;
  uv_timer_stop(&w->timer);
  if (w->spare) { /* never taken: not a worker's exit */
    ea_log(w->stopping || s->closing ? EA_LOG_DEBUG : EA_LOG_WARN, "warm",
           "local rank %u: warm interpreter pid=%d exited status=%" PRId64 " signal=%d", w->idx,
           w->pid, exit_status, term_signal);
    w->detached = true;
    spare_exited(s, w, exit_status, term_signal);
    wk_close(w);
    return;
  }
  /* Deliver what it said before it died; the socket holds at most what its
   * send buffer did, so this ends. */
  if (w->poll_on) {
    while (read_packets(w, MAX_READS_PER_WAKE) && !s->closing) {
      char c;
      ssize_t r = recv(w->fd, &c, 1, MSG_DONTWAIT | MSG_PEEK);
      if (r <= 0) break;
    }
    stop_polling(w);
  }
  ea_log(term_signal ? EA_LOG_WARN : EA_LOG_INFO, "worker",
         "worker %u pid=%d exited status=%" PRId64 " signal=%d", w->idx, w->pid, exit_status,
         term_signal);
  /* Free the slot before telling the agent, so on_exit may restart it. */
  bool report = !s->closing && s->cb.on_exit && !w->detached;
  if (s->slot[w->idx] == w) s->slot[w->idx] = NULL;
  w->detached = true;
  wk_close(w);
  if (report) s->cb.on_exit(s->ctx, w->idx, exit_status, term_signal);
}

/* ---- stopping --------------------------------------------------------------- */

static void on_stop_timer(uv_timer_t *t) {
  wk *w = t->data;
  if (w->exited) return;
  if (w->stage == 0) {
    ea_log(EA_LOG_WARN, "worker", "worker %u pid=%d still running %u ms after STOP: SIGTERM",
           w->idx, w->pid, w->s->stop_grace_ms);
    w->stage = 1;
    signal_group(w, SIGTERM);
    uv_timer_start(&w->timer, on_stop_timer, w->s->term_grace_ms, 0);
  } else if (w->stage == 1) {
    ea_log(EA_LOG_WARN, "worker", "worker %u pid=%d ignored SIGTERM for %u ms: SIGKILL", w->idx,
           w->pid, w->s->term_grace_ms);
    w->stage = 2;
    signal_group(w, SIGKILL);
  }
}

void ea__sup_stop(ea__sup *s, uint32_t idx) {
  if (idx >= s->n || !s->slot[idx]) return;
  wk *w = s->slot[idx];
  if (w->exited || w->stopping) return;
  if (s->no_ipc) { /* no socket to say STOP on: the signal is the request */
    ea__sup_terminate(s, idx, s->term_grace_ms);
    return;
  }
  w->stopping = true;
  ea_ipc_msg *m = &s->stop;
  ea_ipc_msg_init(m, EA_IPC_STOP);
  if (ea__sup_send(s, idx, m) == 0) {
    w->stage = 0;
    uv_timer_start(&w->timer, on_stop_timer, s->stop_grace_ms, 0);
  } else {
    /* It cannot hear us: go straight to the signal. */
    w->stage = 1;
    signal_group(w, SIGTERM);
    uv_timer_start(&w->timer, on_stop_timer, s->term_grace_ms, 0);
  }
}

void ea__sup_stop_all(ea__sup *s) {
  for (uint32_t i = 0; i < s->n; i++) ea__sup_stop(s, i);
}

void ea__sup_terminate(ea__sup *s, uint32_t idx, uint32_t grace_ms) {
  if (idx >= s->n || !s->slot[idx]) return;
  wk *w = s->slot[idx];
  if (w->exited) return;
  if (grace_ms == 0) {
    ea__sup_kill(s, idx);
    return;
  }
  if (w->stopping && w->stage >= 1) {
    /* Already signalled: only bring the SIGKILL forward. */
    if (w->stage == 1 && uv_timer_get_due_in(&w->timer) > grace_ms)
      uv_timer_start(&w->timer, on_stop_timer, grace_ms, 0);
    return;
  }
  w->stopping = true;
  w->stage = 1;
  uv_timer_stop(&w->timer);
  signal_group(w, SIGTERM);
  uv_timer_start(&w->timer, on_stop_timer, grace_ms, 0);
}

void ea__sup_kill(ea__sup *s, uint32_t idx) {
  if (idx >= s->n || !s->slot[idx]) return;
  wk *w = s->slot[idx];
  w->stopping = true;
  w->stage = 2;
  uv_timer_stop(&w->timer);
  signal_group(w, SIGKILL);
}

/* ---- starting ------------------------------------------------------------- */

static char *dupstr(const char *s) {
  return s && *s ? strdup(s) : NULL;
}

static void sup_destroy(ea__sup *s) {
  free(s->command);
  free(s->exe);
  free(s->config);
  free(s->bind);
  words_free(s->argv);
  free(s->slot);
  for (uint32_t i = 0; s->warm && i < s->n; i++) words_free(s->warm[i].env);
  free(s->warm);
  free(s->launcher);
  free(s->preload_text);
  words_free(s->preload);
  free(s);
}

static char **words_dup(char *const *w, size_t n, size_t more);

int ea__sup_new(uv_loop_t *loop, const ea__sup_opts *o, const ea__sup_cbs *cb, void *ctx,
                ea__sup **out) {
  *out = NULL;
  if (!o || o->workers == 0) return -EINVAL;
  ea__sup *s = calloc(1, sizeof *s);
  if (!s) return -ENOMEM;
  s->loop = loop;
  if (cb) s->cb = *cb;
  s->ctx = ctx;
  s->n = o->workers;
  s->slot = calloc(o->workers, sizeof *s->slot);
  s->command = dupstr(o->worker_command);
  s->exe = strdup(o->exe && *o->exe ? o->exe : "/proc/self/exe");
  s->config = dupstr(o->config_path);
  s->bind = dupstr(o->comm_bind);
  s->no_ipc = o->no_ipc;
  bool ok = s->slot && s->exe && (!o->worker_command || !*o->worker_command || s->command) &&
            (!o->config_path || !*o->config_path || s->config) &&
            (!o->comm_bind || !*o->comm_bind || s->bind);
  if (ok && o->argv && o->argv[0]) ok = (s->argv = words_dup(o->argv, SIZE_MAX, 0)) != NULL;
  if (ok && o->warm_launcher && *o->warm_launcher) {
    s->warm = calloc(o->workers, sizeof *s->warm);
    s->launcher = strdup(o->warm_launcher);
    s->preload_text = strdup(o->preload ? o->preload : "");
    ok = s->warm && s->launcher && s->preload_text &&
         ea__warm_preload_words(s->preload_text, &s->preload) == 0;
    s->spare_delay_ms = o->spare_delay_ms;
  }
  if (!ok) {
    sup_destroy(s);
    return -ENOMEM;
  }
  s->stop_grace_ms = o->stop_grace_ms ? o->stop_grace_ms : EA__SUP_STOP_GRACE_MS;
  s->term_grace_ms = o->term_grace_ms ? o->term_grace_ms : EA__SUP_TERM_GRACE_MS;
  uv_timer_init(loop, &s->guard);
  s->guard.data = s;
  s->live = 1;
  if (s->warm) {
    uv_timer_init(loop, &s->warm_timer);
    s->warm_timer.data = s;
    s->live++;
  }
  *out = s;
  return 0;
}

/* Names the supervisor sets; copies of them in the agent's own environment
 * are dropped so a worker never sees two values. */
static bool ours(const char *kv) {
  static const char *const names[] = {
      "EA_IPC_FD=", "EA_LOCAL_RANK=", "EA_CONFIG=", "EA_COMM_BIND=", "EA_WARM_FD="};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strncmp(kv, names[i], strlen(names[i])) == 0) return true;
  return false;
}

int ea__sup_start(ea__sup *s, uint32_t idx) {
  return ea__sup_start_ex(s, idx, NULL);
}

/* torchrun's macro: string.Template(arg).safe_substitute(local_rank=N), to
 * the letter — "$local_rank" and "${local_rank}" become N, "$$" becomes "$",
 * any other '$' stays as it is.  A shell command (shell: true) keeps "$$"
 * (the shell's own) and has only the two local_rank forms replaced, which
 * the shell would otherwise expand to an empty string. */
static bool id_start(char c) {
  return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
static bool id_char(char c) {
  return id_start(c) || (c >= '0' && c <= '9');
}

char *ea__sup_subst_local_rank(const char *arg, uint32_t local_rank, bool shell) {
  static const char key[] = "local_rank";
  const size_t klen = sizeof key - 1;
  char num[16];
  int nl = snprintf(num, sizeof num, "%" PRIu32, local_rank);
  size_t len = strlen(arg);
  /* never longer than arg: a number (≤ 10 digits) is shorter than the
   * macro it replaces (≥ 11 characters) */
  char *out = malloc(len + 1);
  if (!out) return NULL;
  size_t o = 0;
  for (size_t i = 0; i < len;) {
    if (arg[i] != '$') {
      out[o++] = arg[i++];
      continue;
    }
    const char *p = arg + i + 1;
    if (*p == '$') { /* "$$" → "$" (the shell's own: kept whole) */
      out[o++] = '$';
      if (shell) out[o++] = '$';
      i += 2;
      continue;
    }
    bool braced = *p == '{';
    const char *id = braced ? p + 1 : p;
    size_t n = 0;
    if (id_start(id[0]))
      while (id_char(id[n])) n++;
    if (n == klen && memcmp(id, key, klen) == 0 && (!braced || id[n] == '}')) {
      memcpy(out + o, num, (size_t)nl);
      o += (size_t)nl;
      i += 1 + (braced ? 2 : 0) + n;
      continue;
    }
    out[o++] = arg[i++];
  }
  out[o] = 0;
  return out;
}

/* ---- words and environments (malloc'd, NULL-terminated, deep) -------------- */

static void words_free(char **w) {
  for (size_t i = 0; w && w[i]; i++) free(w[i]);
  free(w);
}

/* A deep copy of w (n words; n = SIZE_MAX: up to its NULL) with room for
 * `more` further entries; NULL when out of memory. */
static char **words_dup(char *const *w, size_t n, size_t more) {
  if (n == SIZE_MAX)
    for (n = 0; w && w[n];) n++;
  char **c = calloc(n + more + 1, sizeof *c);
  for (size_t i = 0; c && i < n; i++)
    if (!(c[i] = strdup(w[i]))) {
      words_free(c);
      return NULL;
    }
  return c;
}

/* Append a formatted entry to c, which has room (words_dup's `more`). */
static bool words_add(char **c, const char *fmt, const char *v) {
  size_t n = 0;
  while (c[n]) n++;
  return asprintf(&c[n], fmt, v) >= 0 || (c[n] = NULL, false);
}

/* The usual environment of slot idx: the agent's without our names, then
 * ours, then `extra` ("NAME=value" or NULL). */
static char **usual_env(ea__sup *s, uint32_t idx, const char *extra) {
  size_t n = 0;
  while (environ[n]) n++;
  char **e = calloc(n + 6, sizeof *e);
  if (!e) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (!ours(environ[i]) && !(e[k++] = strdup(environ[i]))) goto fail;
  char num[16];
  snprintf(num, sizeof num, "%d", EA_IPC_WORKER_FD);
  if (!s->no_ipc && !words_add(e, "EA_IPC_FD=%s", num)) goto fail;
  snprintf(num, sizeof num, "%u", idx);
  if (!words_add(e, "EA_LOCAL_RANK=%s", num)) goto fail;
  if (s->config && !words_add(e, "EA_CONFIG=%s", s->config)) goto fail;
  if (s->bind && !words_add(e, "EA_COMM_BIND=%s", s->bind)) goto fail;
  if (extra && !words_add(e, "%s", extra)) goto fail;
  return e;
fail:
  words_free(e);
  return NULL;
}

/* Slot idx's command line as spawned cold: the program's words with
 * ${local_rank} replaced, /bin/sh -c COMMAND, or the built-in worker. */
static char **cold_args(ea__sup *s, uint32_t idx) {
  char **a = NULL;
  if (s->argv) {
    a = words_dup(s->argv, SIZE_MAX, 0);
    for (size_t i = 0; a && a[i]; i++) {
      char *t = ea__sup_subst_local_rank(a[i], idx, false);
      if (!t) {
        words_free(a);
        return NULL;
      }
      free(a[i]);
      a[i] = t;
    }
    return a;
  }
  char fdstr[16];
  snprintf(fdstr, sizeof fdstr, "%d", EA_IPC_WORKER_FD);
  char *builtin[] = {s->exe, "worker", "--ipc-fd", fdstr, "--config", s->config, NULL};
  char *shell[] = {"/bin/sh", "-c", s->command, NULL};
  if (s->command) {
    a = words_dup(shell, SIZE_MAX, 0);
    char *t = a ? ea__sup_subst_local_rank(s->command, idx, true) : NULL;
    if (!t) {
      words_free(a);
      return NULL;
    }
    free(a[2]);
    a[2] = t;
    return a;
  }
  if (!s->config) builtin[4] = NULL;
  return words_dup(builtin, SIZE_MAX, 0);
}

/* The words a spare of slot idx would run: the exec form's, or a plain
 * shell command's (warm.h).  NULL with why when there are none. */
static char **program_words(ea__sup *s, char *const *cold, char *why, size_t cap) {
  if (s->argv) {
    char **w = words_dup(cold, SIZE_MAX, 0);
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

/* ---- spawning ---------------------------------------------------------------- */

static uint64_t now_ms(ea__sup *s) {
  uv_update_time(s->loop);
  return uv_now(s->loop);
}

/* A new record for slot idx (not in the slot yet), its timer initialised. */
static wk *wk_new(ea__sup *s, uint32_t idx) {
  wk *w = calloc(1, sizeof *w);
  if (!w) return NULL;
  w->s = s;
  w->idx = idx;
  w->fd = w->ctl = w->out[0] = w->out[1] = -1;
  s->live++;
  uv_timer_init(s->loop, &w->timer);
  w->timer.data = w;
  w->open = 1;
  return w;
}

/* uv_spawn w: args, env; stdio 1 and 2 from out/err (pipes to create, or
 * the agent's own when NULL) or from fds (≥ 0), fd 3 (and 4) from extra.
 * The process handle counts as open whether the spawn worked or not. */
static int wk_spawn(wk *w, char **args, char **env, uv_pipe_t *out, uv_pipe_t *err,
                    const int fds[2], const int *extra, int nextra) {
  uv_stdio_container_t stdio[5];
  stdio[0].flags = UV_IGNORE;
  for (int i = 1; i <= 2; i++) {
    uv_pipe_t *p = i == 1 ? out : err;
    stdio[i].flags = UV_INHERIT_FD;
    stdio[i].data.fd = fds && fds[i - 1] >= 0 ? fds[i - 1] : i;
    if (p) {
      stdio[i].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
      stdio[i].data.stream = (uv_stream_t *)p;
    }
  }
  for (int i = 0; i < nextra; i++) {
    stdio[3 + i].flags = UV_INHERIT_FD;
    stdio[3 + i].data.fd = extra[i];
  }
  uv_process_options_t po;
  memset(&po, 0, sizeof po);
  po.exit_cb = on_proc_exit;
  po.file = args[0];
  po.args = args;
  po.env = env;
  po.flags = UV_PROCESS_DETACHED; /* own session and process group */
  po.stdio_count = 3 + nextra;
  po.stdio = stdio;
  w->proc.data = w;
  int rc = uv_spawn(w->s->loop, &w->proc, &po);
  w->open++;
  if (rc == 0) w->pid = w->proc.pid;
  return rc;
}

/* Watch w's IPC socket (library and built-in workers); start reading it
 * now or at the take (a spare). */
static int wk_watch(wk *w, bool start) {
  int rc = uv_poll_init(w->s->loop, &w->poll, w->fd);
  if (rc) return rc;
  w->poll.data = w;
  w->open++;
  if (!start) return 0;
  rc = uv_poll_start(&w->poll, UV_READABLE, on_readable);
  w->poll_on = rc == 0;
  return rc;
}

static const char *prog_name(const ea__sup *s) {
  return s->argv ? s->argv[0] : s->command ? s->command : "built-in";
}

static void spare_schedule(ea__sup *s, uint32_t idx, uint32_t delay_ms);
static int spare_take(ea__sup *s, uint32_t idx, char **cold, char **env, const ea__sup_spawn *sp);

int ea__sup_start_ex(ea__sup *s, uint32_t idx, const ea__sup_spawn *sp) {
  if (s->closing) return -ESHUTDOWN;
  if (idx >= s->n) return -ERANGE;
  if (s->slot[idx]) return -EBUSY;

  char **own_env = sp && sp->env ? NULL : usual_env(s, idx, NULL);
  char **env = own_env ? own_env : sp && sp->env ? sp->env : NULL;
  char **args = cold_args(s, idx);
  int rc = 0;
  if (!env || !args) {
    rc = -ENOMEM;
    goto out;
  }
  if (s->warm && spare_take(s, idx, args, env, sp) == 0) goto out;

  int sv[2] = {-1, -1};
  wk *w = NULL;
  if (!s->no_ipc) rc = ea_ipc_socketpair(sv);
  if (rc == 0 && !s->no_ipc && fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK) < 0)
    rc = -errno;
  if (rc == 0 && !(w = wk_new(s, idx))) rc = -ENOMEM;
  if (rc) {
    if (sv[0] >= 0) close(sv[0]);
    if (sv[1] >= 0) close(sv[1]);
    goto out;
  }
  w->fd = sv[0];
  rc = wk_spawn(w, args, env, sp ? sp->out : NULL, sp ? sp->err : NULL, NULL, &sv[1],
                s->no_ipc ? 0 : 1);
  if (sv[1] >= 0) close(sv[1]);
  if (rc == 0 && !s->no_ipc) rc = wk_watch(w, true);
  if (rc == 0) {
    s->slot[idx] = w;
    s->cold_starts++;
    if (s->warm) s->warm[idx].cold++;
    ea_log(EA_LOG_INFO, "worker", "worker %u started pid=%d (%s)", idx, w->pid, prog_name(s));
  } else if (w->pid > 0) {
    /* Spawned but unreadable: it cannot be supervised, so end it.  The
     * caller gets the error now, so its exit is not reported; the record
     * closes itself when the exit arrives, outside the slot. */
    ea_log(EA_LOG_ERROR, "worker", "worker %u: watching its socket: %s", idx, uv_strerror(rc));
    w->detached = true;
    w->stopping = true;
    signal_group(w, SIGKILL);
  } else {
    ea_log(EA_LOG_ERROR, "worker", "worker %u: spawn %s: %s", idx, args[0], uv_strerror(rc));
    w->detached = true;
    wk_close(w);
  }
out:
  words_free(args);
  words_free(own_env);
  return rc;
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
    signal_group(w, SIGKILL);
  }
}

/* Start slot idx's spare now. */
static void spare_spawn(ea__sup *s, uint32_t idx) {
  warm_slot *ws = &s->warm[idx];
  if (s->closing || ws->off || ws->w) return;
  char why[256] = "";
  ea__warm_form f;
  char **cold = cold_args(s, idx);
  char **words = cold ? program_words(s, cold, why, sizeof why) : NULL;
  words_free(cold);
  if (!words || ea__warm_form_of(words, &f, why, sizeof why) != 0) {
    words_free(words);
    spare_off(s, idx, why[0] ? why : "out of memory");
    return;
  }
  /* PYTHON OPTIONS launcher MODULE… */
  size_t np = 0;
  while (s->preload[np]) np++;
  char **args = words_dup(words, f.ninterp, 1 + np);
  bool ok = args && words_add(args, "%s", s->launcher);
  for (size_t i = 0; ok && i < np; i++) ok = words_add(args, "%s", s->preload[i]);
  int fdn = s->no_ipc ? EA_IPC_WORKER_FD : EA_IPC_WORKER_FD + 1;
  char fdv[32];
  snprintf(fdv, sizeof fdv, "EA_WARM_FD=%d", fdn);
  char **env = NULL;
  if (ok) {
    env = ws->env ? words_dup(ws->env, SIZE_MAX, 1) : usual_env(s, idx, NULL);
    ok = env && words_add(env, "%s", fdv);
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
  wk *w = rc == 0 ? wk_new(s, idx) : NULL;
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
    w->interp = words_dup(words, f.ninterp, 0);
    w->born_ms = now_ms(s);
    int extra[2] = {ctl[1], -1}, ne = 1;
    if (!s->no_ipc) extra[0] = ipc[1], extra[1] = ctl[1], ne = 2;
    int outs[2] = {o1[1], o2[1]};
    rc = w->interp ? wk_spawn(w, args, w->env, NULL, NULL, outs, extra, ne) : -ENOMEM;
    if (rc == 0) {
      rc = uv_poll_init(s->loop, &w->cpoll, w->ctl);
      if (rc == 0) {
        w->cpoll.data = w;
        w->open++;
        rc = uv_poll_start(&w->cpoll, UV_READABLE, on_spare_ctl);
      }
      if (rc == 0 && w->fd >= 0) rc = wk_watch(w, false);
    }
    if (rc == 0) {
      ws->w = w;
      ea_log(EA_LOG_INFO, "warm", "local rank %u: warm interpreter pid=%d started (%s, preload %s)",
             idx, w->pid, args[0], np ? s->preload_text : "nothing");
    } else if (w->pid > 0) {
      w->detached = true;
      w->stopping = true;
      signal_group(w, SIGKILL);
    } else {
      w->detached = true;
      wk_close(w);
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
  words_free(words);
  words_free(args);
  words_free(env);
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
static void spare_exited(ea__sup *s, wk *w, int64_t status, int sig) {
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
    uv_close((uv_handle_t *)&w->cpoll, wk_handle_closed);
  /* the fd itself is closed when the record is (wk_handle_closed) */
}

/* Hand slot idx's start to its spare: 0 when the spare became the worker;
 * otherwise the caller starts it cold. */
static int spare_take(ea__sup *s, uint32_t idx, char **cold, char **env, const ea__sup_spawn *sp) {
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
  words_free(words);
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
    signal_group(w, SIGKILL);
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
    int r = uv_poll_start(&w->poll, UV_READABLE, on_readable);
    w->poll_on = r == 0;
  }
  s->slot[idx] = w;
  ea_log(EA_LOG_INFO, "worker", "worker %u started pid=%d (%s, warm%s)", idx, w->pid, prog_name(s),
         w->ready ? "" : ": still importing");
  spare_schedule(s, idx, s->spare_delay_ms);
  return 0;
}

int ea__sup_spare_env(ea__sup *s, uint32_t idx, char *const *env) {
  if (!s->warm || idx >= s->n) return 0;
  char **c = words_dup(env, SIZE_MAX, 0);
  if (!c) return -ENOMEM;
  words_free(s->warm[idx].env);
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

int ea__sup_start_all(ea__sup *s) {
  int first = 0;
  for (uint32_t i = 0; i < s->n; i++) {
    if (s->slot[i]) continue;
    int rc = ea__sup_start(s, i);
    if (rc && !first) first = rc;
  }
  return first;
}

void ea__sup_starts(const ea__sup *s, uint64_t *warm, uint64_t *cold) {
  *warm = s->warm_starts;
  *cold = s->cold_starts;
}

int ea__sup_send(ea__sup *s, uint32_t idx, const ea_ipc_msg *m) {
  if (idx >= s->n || !s->slot[idx] || s->slot[idx]->exited) return -ESRCH;
  size_t len;
  char err[160];
  int rc = ea_ipc_encode(m, s->tx, sizeof s->tx, &len, err, sizeof err);
  if (rc) {
    ea_log(EA_LOG_ERROR, "worker", "worker %u: cannot encode %s: %s", idx,
           ea_ipc_type_name(m->type), err);
    return rc;
  }
  for (;;) {
    ssize_t n = send(s->slot[idx]->fd, s->tx, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n >= 0) return 0;
    if (errno != EINTR) return errno == EWOULDBLOCK ? -EAGAIN : -errno;
  }
}

bool ea__sup_running(const ea__sup *s, uint32_t idx) {
  return idx < s->n && s->slot[idx] && !s->slot[idx]->exited;
}

int ea__sup_pid(const ea__sup *s, uint32_t idx) {
  return ea__sup_running(s, idx) ? s->slot[idx]->pid : 0;
}

uint32_t ea__sup_count(const ea__sup *s) {
  return s->n;
}

uint64_t ea__sup_bad_packets(const ea__sup *s) {
  return s->bad_packets;
}

static void guard_closed(uv_handle_t *h) {
  ea__sup *s = h->data;
  s->live--;
  maybe_free_sup(s);
}

void ea__sup_free(ea__sup *s, void (*closed)(void *ctx), void *ctx) {
  if (!s || s->closing) return;
  s->closing = true;
  s->closed = closed;
  s->closed_ctx = ctx;
  for (uint32_t i = 0; i < s->n; i++) {
    wk *w = s->slot[i];
    if (!w) continue;
    /* Still running: kill it and let its exit close the record (closing a
     * live process handle would leave a zombie nobody reaps). */
    w->stopping = true;
    stop_polling(w);
    uv_timer_stop(&w->timer);
    signal_group(w, SIGKILL);
  }
  for (uint32_t i = 0; s->warm && i < s->n; i++) {
    wk *w = s->warm[i].w;
    if (!w) continue;
    w->stopping = true;
    signal_group(w, SIGKILL);
  }
  if (s->warm) uv_close((uv_handle_t *)&s->warm_timer, guard_closed);
  uv_close((uv_handle_t *)&s->guard, guard_closed);
}
