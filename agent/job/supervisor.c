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
 *
 * The spares (warm interpreters) and their handover are supervisor_warm.c;
 * the records and the supervisor itself, which both files use, are
 * supervisor_int.h.
 */
#include "supervisor_int.h"

#include "ea_log.h"
#include "warm.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
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

static void sup_destroy(ea__sup *s);

static void maybe_free_sup(ea__sup *s) {
  if (!s->closing || s->live) return;
  void (*closed)(void *) = s->closed;
  void *ctx = s->closed_ctx;
  sup_destroy(s);
  if (closed) closed(ctx);
}

void ea__sup_wk_handle_closed(uv_handle_t *h) {
  wk *w = h->data;
  if (--w->open > 0) return;
  if (w->fd >= 0) close(w->fd);
  if (w->ctl >= 0) close(w->ctl);
  for (int i = 0; i < 2; i++)
    if (w->out[i] >= 0) close(w->out[i]);
  ea__sup_words_free(w->env);
  ea__sup_words_free(w->interp);
  ea__sup *s = w->s;
  if (!w->detached && s->slot[w->idx] == w) s->slot[w->idx] = NULL;
  free(w);
  s->live--;
  maybe_free_sup(s);
}

static void close_if_open(wk *w, uv_handle_t *h) {
  if (h->data == w && !uv_is_closing(h)) uv_close(h, ea__sup_wk_handle_closed);
}

void ea__sup_wk_close(wk *w) {
  close_if_open(w, (uv_handle_t *)&w->timer);
  close_if_open(w, (uv_handle_t *)&w->poll);
  close_if_open(w, (uv_handle_t *)&w->cpoll);
  close_if_open(w, (uv_handle_t *)&w->proc);
}

void ea__sup_signal_group(wk *w, int sig) {
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

void ea__sup_on_readable(uv_poll_t *h, int status, int events) {
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
    ea__sup_spare_exited(s, w, exit_status, term_signal);
    ea__sup_wk_close(w);
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
  ea__sup_wk_close(w);
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
    ea__sup_signal_group(w, SIGTERM);
    uv_timer_start(&w->timer, on_stop_timer, w->s->term_grace_ms, 0);
  } else if (w->stage == 1) {
    ea_log(EA_LOG_WARN, "worker", "worker %u pid=%d ignored SIGTERM for %u ms: SIGKILL", w->idx,
           w->pid, w->s->term_grace_ms);
    w->stage = 2;
    ea__sup_signal_group(w, SIGKILL);
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
    ea__sup_signal_group(w, SIGTERM);
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
  ea__sup_signal_group(w, SIGTERM);
  uv_timer_start(&w->timer, on_stop_timer, grace_ms, 0);
}

void ea__sup_kill(ea__sup *s, uint32_t idx) {
  if (idx >= s->n || !s->slot[idx]) return;
  wk *w = s->slot[idx];
  w->stopping = true;
  w->stage = 2;
  uv_timer_stop(&w->timer);
  ea__sup_signal_group(w, SIGKILL);
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
  ea__sup_words_free(s->argv);
  free(s->slot);
  for (uint32_t i = 0; s->warm && i < s->n; i++) ea__sup_words_free(s->warm[i].env);
  free(s->warm);
  free(s->launcher);
  free(s->preload_text);
  ea__sup_words_free(s->preload);
  free(s);
}

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
  s->train_steps = o->train_steps;
  bool ok = s->slot && s->exe && (!o->worker_command || !*o->worker_command || s->command) &&
            (!o->config_path || !*o->config_path || s->config) &&
            (!o->comm_bind || !*o->comm_bind || s->bind);
  if (ok && o->argv && o->argv[0]) ok = (s->argv = ea__sup_words_dup(o->argv, SIZE_MAX, 0)) != NULL;
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
  static const char *const names[] = {"EA_IPC_FD=",    "EA_LOCAL_RANK=", "EA_CONFIG=",
                                      "EA_COMM_BIND=", "EA_WARM_FD=",    "EA_TRAIN_STEPS="};
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

void ea__sup_words_free(char **w) {
  for (size_t i = 0; w && w[i]; i++) free(w[i]);
  free(w);
}

/* A deep copy of w (n words; n = SIZE_MAX: up to its NULL) with room for
 * `more` further entries; NULL when out of memory. */
char **ea__sup_words_dup(char *const *w, size_t n, size_t more) {
  if (n == SIZE_MAX)
    for (n = 0; w && w[n];) n++;
  char **c = calloc(n + more + 1, sizeof *c);
  for (size_t i = 0; c && i < n; i++)
    if (!(c[i] = strdup(w[i]))) {
      ea__sup_words_free(c);
      return NULL;
    }
  return c;
}

/* Append a formatted entry to c, which has room (ea__sup_words_dup's `more`). */
bool ea__sup_words_add(char **c, const char *fmt, const char *v) {
  size_t n = 0;
  while (c[n]) n++;
  return asprintf(&c[n], fmt, v) >= 0 || (c[n] = NULL, false);
}

/* The usual environment of slot idx: the agent's without our names, then
 * ours, then `extra` ("NAME=value" or NULL). */
char **ea__sup_usual_env(ea__sup *s, uint32_t idx, const char *extra) {
  size_t n = 0;
  while (environ[n]) n++;
  char **e = calloc(n + 7, sizeof *e);
  if (!e) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (!ours(environ[i]) && !(e[k++] = strdup(environ[i]))) goto fail;
  char num[16];
  snprintf(num, sizeof num, "%d", EA_IPC_WORKER_FD);
  if (!s->no_ipc && !ea__sup_words_add(e, "EA_IPC_FD=%s", num)) goto fail;
  snprintf(num, sizeof num, "%u", idx);
  if (!ea__sup_words_add(e, "EA_LOCAL_RANK=%s", num)) goto fail;
  if (s->config && !ea__sup_words_add(e, "EA_CONFIG=%s", s->config)) goto fail;
  if (s->bind && !ea__sup_words_add(e, "EA_COMM_BIND=%s", s->bind)) goto fail;
  if (s->train_steps) {
    char steps[24];
    snprintf(steps, sizeof steps, "%" PRIu64, s->train_steps);
    if (!ea__sup_words_add(e, "EA_TRAIN_STEPS=%s", steps)) goto fail;
  }
  if (extra && !ea__sup_words_add(e, "%s", extra)) goto fail;
  return e;
fail:
  ea__sup_words_free(e);
  return NULL;
}

/* Slot idx's command line as spawned cold: the program's words with
 * ${local_rank} replaced, /bin/sh -c COMMAND, or the built-in worker. */
char **ea__sup_cold_args(ea__sup *s, uint32_t idx) {
  char **a = NULL;
  if (s->argv) {
    a = ea__sup_words_dup(s->argv, SIZE_MAX, 0);
    for (size_t i = 0; a && a[i]; i++) {
      char *t = ea__sup_subst_local_rank(a[i], idx, false);
      if (!t) {
        ea__sup_words_free(a);
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
    a = ea__sup_words_dup(shell, SIZE_MAX, 0);
    char *t = a ? ea__sup_subst_local_rank(s->command, idx, true) : NULL;
    if (!t) {
      ea__sup_words_free(a);
      return NULL;
    }
    free(a[2]);
    a[2] = t;
    return a;
  }
  if (!s->config) builtin[4] = NULL;
  return ea__sup_words_dup(builtin, SIZE_MAX, 0);
}

/* ---- spawning ---------------------------------------------------------------- */

/* A new record for slot idx (not in the slot yet), its timer initialised. */
wk *ea__sup_wk_new(ea__sup *s, uint32_t idx) {
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
int ea__sup_wk_spawn(wk *w, char **args, char **env, uv_pipe_t *out, uv_pipe_t *err,
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
int ea__sup_wk_watch(wk *w, bool start) {
  int rc = uv_poll_init(w->s->loop, &w->poll, w->fd);
  if (rc) return rc;
  w->poll.data = w;
  w->open++;
  if (!start) return 0;
  rc = uv_poll_start(&w->poll, UV_READABLE, ea__sup_on_readable);
  w->poll_on = rc == 0;
  return rc;
}

const char *ea__sup_prog_name(const ea__sup *s) {
  return s->argv ? s->argv[0] : s->command ? s->command : "built-in";
}

int ea__sup_start_ex(ea__sup *s, uint32_t idx, const ea__sup_spawn *sp) {
  if (s->closing) return -ESHUTDOWN;
  if (idx >= s->n) return -ERANGE;
  if (s->slot[idx]) return -EBUSY;

  char **own_env = sp && sp->env ? NULL : ea__sup_usual_env(s, idx, NULL);
  char **env = own_env ? own_env : sp && sp->env ? sp->env : NULL;
  char **args = ea__sup_cold_args(s, idx);
  int rc = 0;
  if (!env || !args) {
    rc = -ENOMEM;
    goto out;
  }
  if (s->warm && ea__sup_spare_take(s, idx, args, env, sp) == 0) goto out;

  int sv[2] = {-1, -1};
  wk *w = NULL;
  if (!s->no_ipc) rc = ea_ipc_socketpair(sv);
  if (rc == 0 && !s->no_ipc && fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK) < 0)
    rc = -errno;
  if (rc == 0 && !(w = ea__sup_wk_new(s, idx))) rc = -ENOMEM;
  if (rc) {
    if (sv[0] >= 0) close(sv[0]);
    if (sv[1] >= 0) close(sv[1]);
    goto out;
  }
  w->fd = sv[0];
  rc = ea__sup_wk_spawn(w, args, env, sp ? sp->out : NULL, sp ? sp->err : NULL, NULL, &sv[1],
                        s->no_ipc ? 0 : 1);
  if (sv[1] >= 0) close(sv[1]);
  if (rc == 0 && !s->no_ipc) rc = ea__sup_wk_watch(w, true);
  if (rc == 0) {
    s->slot[idx] = w;
    s->cold_starts++;
    if (s->warm) s->warm[idx].cold++;
    ea_log(EA_LOG_INFO, "worker", "worker %u started pid=%d (%s)", idx, w->pid,
           ea__sup_prog_name(s));
  } else if (w->pid > 0) {
    /* Spawned but unreadable: it cannot be supervised, so end it.  The
     * caller gets the error now, so its exit is not reported; the record
     * closes itself when the exit arrives, outside the slot. */
    ea_log(EA_LOG_ERROR, "worker", "worker %u: watching its socket: %s", idx, uv_strerror(rc));
    w->detached = true;
    w->stopping = true;
    ea__sup_signal_group(w, SIGKILL);
  } else {
    ea_log(EA_LOG_ERROR, "worker", "worker %u: spawn %s: %s", idx, args[0], uv_strerror(rc));
    w->detached = true;
    ea__sup_wk_close(w);
  }
out:
  ea__sup_words_free(args);
  ea__sup_words_free(own_env);
  return rc;
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
    ea__sup_signal_group(w, SIGKILL);
  }
  for (uint32_t i = 0; s->warm && i < s->n; i++) {
    wk *w = s->warm[i].w;
    if (!w) continue;
    w->stopping = true;
    ea__sup_signal_group(w, SIGKILL);
  }
  if (s->warm) uv_close((uv_handle_t *)&s->warm_timer, guard_closed);
  uv_close((uv_handle_t *)&s->guard, guard_closed);
}
