/* The admin socket: a Unix stream socket in the data directory through
 * which `elastic-agent status` and `elastic-agent drain NAME` talk to a
 * running agent (the command table is in agent.c).  One line in, one JSON document out, then the
 * server closes: the simplest protocol that a shell (`socat`, `nc -U`), a
 * monitoring script and our own CLI can all speak, and that grows by adding
 * a row to a command table.
 *
 * The server side runs on the agent's libuv loop and never blocks it; each
 * connection has a deadline and a bounded request size, so a stuck client
 * cannot pin memory or a handle.  The socket is mode 0600 inside a 0700 data
 * directory: only the agent's user may ask it things; and should an operator
 * loosen that, commands that change state (drain) still ask the kernel who
 * is calling (SO_PEERCRED) and answer only the agent's own user or root.
 *
 * Bounded, and never a reset.  At most ADMIN_MAX_CONNS connections are
 * served at once.  Clients that hold connections open without a request
 * (issue 11: 40 held connections made every `status` fail with "Connection
 * reset by peer") cannot lock the operator out: a new connection over the
 * limit evicts the oldest one that has not sent its request line (one whose
 * line already waits unread in the kernel's buffer is about to be served
 * and stays), which is answered "busy".  Only when every served connection
 * is busy with an answer is the newcomer itself answered "busy" — after its
 * request was read, since closing a Unix socket with unread input resets it
 * and loses the answer; for the same reason an evicted connection is read
 * until its EOF (1 s at most) after its answer.  Past 16 answered busy a
 * newcomer is closed at once, and past ADMIN_MAX_DRAINING draining an
 * evicted one.  A client that sent more than its line (or whose bytes still
 * wait unread when its answer is out) is read until its EOF the same way.
 *
 * The request side is pure: the framing of the line (ea__admin_rx_*) and
 * its dispatch to the command table (ea__admin_dispatch) read no socket,
 * so tests/unit/test_admin.c and tests/fuzz/fuzz_admin.c run them as the
 * server does.
 *
 * Both ends speak JSON through json.c (jansson): a command builds its
 * answer as a jansson document, which is sent as one line of compact JSON;
 * the CLI parses it into json.c's small DOM.
 */
#include "agent_int.h"

#include "ea_log.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* A command line is a word and a member name or two; 1 KiB is generous. */
#define ADMIN_LINE_MAX EA__ADMIN_LINE_MAX
/* Clients are local tools answered in microseconds; 5 s only expires for a
 * client that connected and went away without sending a line. */
#define ADMIN_CONN_TIMEOUT_MS 5000
/* Connections served at once; as many more are answered "busy"; past that
 * they are closed at once. */
#define ADMIN_MAX_CONNS 16
/* A connection answered "busy" waits this long for its request line, and
 * one that may still send after its answer (answered before its request
 * was read, or one that sent more than its line) this long for its EOF (it
 * is read so that the close does not reset the connection).  At most
 * ADMIN_MAX_DRAINING of the latter; past that they are closed at once. */
#define ADMIN_BUSY_TIMEOUT_MS 1000
#define ADMIN_MAX_DRAINING (4 * ADMIN_MAX_CONNS)
/* Status of a 5000-member cluster is ~1.5 MB of JSON; refuse absurd answers. */
#define ADMIN_RESP_MAX (64u << 20)

/* ---- the request, pure ----------------------------------------------------- */

void ea__admin_rx_init(ea__admin_rx *rx) {
  rx->len = 0;
  rx->overlong = rx->extra = false;
  rx->line[0] = 0;
}

char *ea__admin_rx_buf(ea__admin_rx *rx, size_t *room) {
  *room = ADMIN_LINE_MAX - rx->len; /* ≥ 1: a full buffer without "\n" is emptied */
  return rx->line + rx->len;
}

ea__admin_rx_ev ea__admin_rx_got(ea__admin_rx *rx, ssize_t nread) {
  if (nread < 0) {
    /* EOF without a newline: what came is the line (nc -U sends no
     * newline with echo -n). */
    if (nread != UV_EOF) return EA__ADMIN_RX_CLOSE;
    if (rx->overlong) return EA__ADMIN_RX_TOO_LONG;
    if (rx->len == 0) return EA__ADMIN_RX_CLOSE;
    rx->line[rx->len] = 0;
    return EA__ADMIN_RX_LINE;
  }
  size_t n = (size_t)nread;
  if (n > ADMIN_LINE_MAX - rx->len) n = ADMIN_LINE_MAX - rx->len; /* never past rx_buf's room */
  char *start = rx->line + rx->len;
  char *nl = memchr(start, '\n', n);
  rx->len += n;
  rx->line[rx->len] = 0;
  if (nl) {
    rx->extra = nl + 1 < rx->line + rx->len;
    if (rx->overlong) return EA__ADMIN_RX_TOO_LONG; /* the end of the long line */
    *nl = 0;
    if (nl > rx->line && nl[-1] == '\r') nl[-1] = 0;
    rx->len = (size_t)(nl - rx->line);
    return EA__ADMIN_RX_LINE;
  }
  if (rx->overlong || rx->len >= ADMIN_LINE_MAX) {
    /* Read the rest of the line before answering: closing with unread
     * input would reset the connection and lose the answer. */
    rx->overlong = true;
    rx->len = 0;
    rx->line[0] = 0;
  }
  return EA__ADMIN_RX_MORE;
}

static json_t *help_answer(const ea__admin_cmd *cmds, size_t ncmds) {
  ea_jb b = {0};
  json_t *doc = json_object();
  json_t *arr = ea_jb_arr(&b, doc, "commands");
  for (size_t i = 0; i <= ncmds; i++) {
    json_t *c = ea_jb_obj(&b, arr, NULL);
    ea_jb_str(&b, c, "name", i < ncmds ? cmds[i].name : "help");
    ea_jb_str(&b, c, "help", i < ncmds ? cmds[i].help : "list the commands");
  }
  if (b.oom) {
    json_decref(doc);
    return NULL;
  }
  return doc;
}

void ea__admin_dispatch(const ea__admin_cmd *cmds, size_t ncmds, void *ctx, char *line,
                        bool have_peer, uid_t peer_uid, json_t **out) {
  *out = NULL;
  while (*line == ' ') line++;
  char *end = line + strcspn(line, " ");
  char *args = *end ? end + 1 : end;
  *end = 0;
  while (*args == ' ') args++;
  if (strcmp(line, "help") == 0) {
    *out = help_answer(cmds, ncmds);
    return;
  }
  for (size_t i = 0; i < ncmds; i++) {
    if (strcmp(cmds[i].name, line) != 0) continue;
    /* A command that changes state: the agent's own user and root only. */
    if (cmds[i].owner_only && !(have_peer && (peer_uid == 0 || peer_uid == geteuid()))) {
      char msg[200];
      snprintf(msg, sizeof msg,
               "permission denied: '%s' is allowed only to the agent's user (uid %u) or root; "
               "the caller is uid %ld",
               cmds[i].name, (unsigned)geteuid(), have_peer ? (long)peer_uid : -1L);
      ea_log(EA_LOG_WARN, "admin", "refused '%s' from uid %ld: not the agent's user or root",
             cmds[i].name, have_peer ? (long)peer_uid : -1L);
      *out = ea_json_error(msg);
      return;
    }
    cmds[i].fn(ctx, args, out);
    return;
  }
  char msg[160];
  snprintf(msg, sizeof msg, "unknown command '%.64s' (try 'help')", line);
  *out = ea_json_error(msg);
}

/* ---- server ------------------------------------------------------------------ */

typedef struct aconn aconn;

struct ea__admin {
  uv_loop_t *loop;
  uv_pipe_t pipe;
  char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
  const ea__admin_cmd *cmds;
  size_t ncmds;
  void *ctx;
  aconn *conns;
  int nconns;
  bool closing, listening;
  void (*closed)(void *ctx);
  void *closed_ctx;
};

struct aconn {
  aconn *prev, *next;
  ea__admin *a;
  uv_pipe_t pipe;
  uv_timer_t timer;
  uv_write_t wreq;
  uv_shutdown_t sreq;
  int handles;
  bool answered;
  bool busy;     /* over the limit: its request is read and answered "busy" */
  bool draining; /* read until EOF after the answer, then close */
  bool finished; /* the answer is out (or none is coming): waiting for EOF */
  bool eof;      /* the client's EOF (or a read error) was read */
  bool more;     /* bytes came after the request was complete */
  bool have_peer;
  uid_t peer_uid; /* SO_PEERCRED, at accept */
  ea__admin_rx rx;
  char *out; /* the answer being written: compact JSON and "\n" */
};

static void admin_maybe_free(ea__admin *a) {
  if (!a->closing || a->listening || a->conns) return;
  void (*cb)(void *) = a->closed;
  void *ctx = a->closed_ctx;
  free(a);
  if (cb) cb(ctx);
}

static void aconn_closed(uv_handle_t *h) {
  aconn *c = h->data;
  if (--c->handles > 0) return;
  ea__admin *a = c->a;
  if (c->prev)
    c->prev->next = c->next;
  else
    a->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  a->nconns--;
  free(c->out);
  free(c);
  admin_maybe_free(a);
}

static void aconn_close(aconn *c) {
  if (uv_is_closing((uv_handle_t *)&c->pipe)) return;
  uv_timer_stop(&c->timer);
  uv_close((uv_handle_t *)&c->timer, aconn_closed);
  uv_close((uv_handle_t *)&c->pipe, aconn_closed);
}

static void aconn_drain_timeout(uv_timer_t *h) {
  aconn_close(h->data);
}

/* Does input wait unread in the kernel's buffer? */
static bool input_waits(aconn *c) {
  uv_os_fd_t fd;
  char b;
  if (uv_fileno((uv_handle_t *)&c->pipe, &fd) != 0) return false;
  return recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
}

static int count_draining(ea__admin *a) {
  int n = 0;
  for (aconn *c = a->conns; c; c = c->next)
    n += c->draining && !uv_is_closing((uv_handle_t *)&c->pipe);
  return n;
}

/* The answer is out, or none is coming: end the connection.  Closing a
 * Unix socket with unread input resets it, and the client loses the answer
 * it has not read yet ("Connection reset by peer" instead of its EOF: a
 * client that sent more than its line, issue 11 item 8, found by
 * fuzz_admin's model).  So unless the client's EOF was read, or nothing
 * was sent after the request and nothing waits, signal our end and read
 * what it still sends; close at its EOF or after ADMIN_BUSY_TIMEOUT_MS
 * (past ADMIN_MAX_DRAINING such connections, at once). */
static void aconn_finish(aconn *c) {
  if (uv_is_closing((uv_handle_t *)&c->pipe) || c->finished) return;
  c->finished = true;
  uv_timer_stop(&c->timer);
  bool drain = !c->eof && (c->draining || c->rx.extra || c->more || input_waits(c)) &&
               (c->draining || count_draining(c->a) < ADMIN_MAX_DRAINING);
  if (!drain || uv_shutdown(&c->sreq, (uv_stream_t *)&c->pipe, NULL) != 0) {
    aconn_close(c);
    return;
  }
  c->draining = true;
  uv_timer_start(&c->timer, aconn_drain_timeout, ADMIN_BUSY_TIMEOUT_MS, 0);
}

static void aconn_written(uv_write_t *w, int status) {
  aconn *c = w->data;
  if (status < 0) {
    aconn_close(c); /* the client went away, nothing to tell it */
    return;
  }
  aconn_finish(c);
}

/* Send doc (released here) as the answer, then finish.  No document, or
 * one that cannot be written out (out of memory): finish without one. */
static void aconn_reply(aconn *c, json_t *doc) {
  if (c->answered) {
    json_decref(doc);
    return;
  }
  c->answered = true;
  uv_timer_stop(&c->timer);
  char *text = doc ? ea_json_dump(doc) : NULL;
  json_decref(doc);
  size_t n = text ? strlen(text) : 0;
  char *line = n ? realloc(text, n + 2) : NULL;
  if (!line) {
    free(text);
    aconn_finish(c);
    return;
  }
  memcpy(line + n, "\n", 2);
  c->out = line;
  uv_buf_t b = uv_buf_init(c->out, (unsigned)(n + 1));
  if (uv_write(&c->wreq, (uv_stream_t *)&c->pipe, &b, 1, aconn_written) < 0) aconn_close(c);
}

static void aconn_error(aconn *c, const char *msg) {
  aconn_reply(c, ea_json_error(msg));
}

static const char busy_msg[] = "busy: the agent is already serving 16 admin connections; try again";

static void aconn_dispatch(aconn *c) {
  ea__admin *a = c->a;
  if (c->busy) {
    aconn_error(c, busy_msg);
    return;
  }
  json_t *doc = NULL;
  ea__admin_dispatch(a->cmds, a->ncmds, a->ctx, c->rx.line, c->have_peer, c->peer_uid, &doc);
  aconn_reply(c, doc);
}

static void aconn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  aconn *c = h->data;
  if (c->answered) { /* what it still sends is read and discarded */
    *buf = uv_buf_init(c->rx.line, ADMIN_LINE_MAX);
    return;
  }
  size_t room;
  char *p = ea__admin_rx_buf(&c->rx, &room);
  *buf = uv_buf_init(p, (unsigned)room);
}

static void aconn_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  (void)buf;
  aconn *c = s->data;
  if (nread < 0) {
    c->eof = true; /* libuv stops reading at EOF; an error ends it too */
    uv_read_stop(s);
  }
  if (c->answered) {
    if (nread > 0) c->more = true;
    if (nread < 0 && c->finished) aconn_close(c); /* its EOF: everything was read */
    return;
  }
  if (nread == 0) return;
  switch (ea__admin_rx_got(&c->rx, nread)) {
    case EA__ADMIN_RX_MORE:
      return;
    case EA__ADMIN_RX_LINE:
      aconn_dispatch(c);
      return;
    case EA__ADMIN_RX_TOO_LONG:
      aconn_error(c, "request line too long");
      return;
    case EA__ADMIN_RX_CLOSE:
      aconn_close(c);
      return;
  }
}

static void aconn_timeout(uv_timer_t *h) {
  aconn *c = h->data;
  c->draining = true; /* part of a line may still arrive */
  aconn_error(c, c->busy ? busy_msg : "no request line within 5 s");
}

/* May c be evicted for a newcomer?  Not once answered, and not when its
 * whole request line is waiting, unread, in the kernel's buffer
 * (connections accepted in one loop turn are read after it): that is a
 * client about to be served, not one holding a slot. */
static bool aconn_evictable(aconn *c) {
  if (c->answered) return false;
  uv_os_fd_t fd;
  char peek[ADMIN_LINE_MAX];
  if (uv_fileno((uv_handle_t *)&c->pipe, &fd) != 0) return true;
  size_t room = ADMIN_LINE_MAX - c->rx.len;
  ssize_t n = recv(fd, peek, room, MSG_PEEK | MSG_DONTWAIT);
  return !(n > 0 && memchr(peek, '\n', (size_t)n));
}

/* Room for a newcomer: the number of connections being served, and the
 * oldest served one that may be evicted (conns is newest first); *busy and
 * *draining: how many are answered busy, or draining after an answer. */
static int served(ea__admin *a, aconn *self, aconn **oldest_idle, int *busy, int *draining) {
  int n = 0;
  *oldest_idle = NULL;
  *busy = *draining = 0;
  for (aconn *c = a->conns; c; c = c->next) {
    if (uv_is_closing((uv_handle_t *)&c->pipe)) continue;
    if (c->draining) {
      (*draining)++;
      continue;
    }
    if (c->busy) {
      (*busy)++;
      continue;
    }
    n++;
    if (c != self && aconn_evictable(c)) *oldest_idle = c;
  }
  return n;
}

static void admin_accept(uv_stream_t *server, int status) {
  ea__admin *a = server->data;
  if (status < 0 || a->closing) return;
  aconn *c = calloc(1, sizeof *c);
  if (!c) return;
  c->a = a;
  uv_pipe_init(a->loop, &c->pipe, 0);
  uv_timer_init(a->loop, &c->timer);
  c->pipe.data = c->timer.data = c->wreq.data = c;
  c->handles = 2;
  ea__admin_rx_init(&c->rx);
  c->next = a->conns;
  if (a->conns) a->conns->prev = c;
  a->conns = c;
  a->nconns++;
  if (uv_accept(server, (uv_stream_t *)&c->pipe) < 0) {
    aconn_close(c);
    return;
  }
  uv_os_fd_t fd;
  struct ucred cred;
  socklen_t cl = sizeof cred;
  if (uv_fileno((uv_handle_t *)&c->pipe, &fd) == 0 &&
      getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0 && cl == sizeof cred) {
    c->have_peer = true;
    c->peer_uid = cred.uid;
  }
  aconn *idle;
  int nbusy, ndraining;
  if (served(a, c, &idle, &nbusy, &ndraining) > ADMIN_MAX_CONNS) { /* c itself is counted */
    if (idle) {
      idle->draining = ndraining < ADMIN_MAX_DRAINING;
      aconn_error(idle, "busy: evicted, the oldest of 16 admin connections without a request");
    } else if (nbusy < ADMIN_MAX_CONNS) {
      c->busy = true;
    } else {
      aconn_close(c); /* 16 served, 16 answered busy: no more */
      return;
    }
  }
  uv_timer_start(&c->timer, aconn_timeout, c->busy ? ADMIN_BUSY_TIMEOUT_MS : ADMIN_CONN_TIMEOUT_MS,
                 0);
  if (uv_read_start((uv_stream_t *)&c->pipe, aconn_alloc, aconn_read) < 0) aconn_close(c);
}

/* Is anyone answering on path?  A plain non-blocking-free connect: a Unix
 * socket connect succeeds or fails at once. */
static bool someone_listens(const char *path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
  bool yes = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
  close(fd);
  return yes;
}

static void admin_pipe_closed(uv_handle_t *h) {
  ea__admin *a = h->data;
  a->listening = false;
  admin_maybe_free(a);
}

int ea__admin_start(uv_loop_t *loop, const char *path, const ea__admin_cmd *cmds, size_t ncmds,
                    void *ctx, ea__admin **out, char *err, size_t errlen) {
  struct sockaddr_un probe;
  if (strlen(path) >= sizeof probe.sun_path) {
    snprintf(err, errlen,
             "admin socket path too long (%zu bytes, limit %zu): %s; use a shorter --data-dir",
             strlen(path), sizeof probe.sun_path - 1, path);
    return -ENAMETOOLONG;
  }
  struct stat st;
  if (lstat(path, &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      snprintf(err, errlen, "%s exists and is not a socket; refusing to replace it", path);
      return -EEXIST;
    }
    if (someone_listens(path)) {
      snprintf(err, errlen, "another agent is answering on %s", path);
      return -EADDRINUSE;
    }
    unlink(path); /* stale: left by an agent that was killed */
  }
  ea__admin *a = calloc(1, sizeof *a);
  if (!a) return -ENOMEM;
  a->loop = loop;
  a->cmds = cmds;
  a->ncmds = ncmds;
  a->ctx = ctx;
  snprintf(a->path, sizeof a->path, "%s", path);
  uv_pipe_init(loop, &a->pipe, 0);
  a->pipe.data = a;
  a->listening = true;
  int rc = uv_pipe_bind(&a->pipe, path);
  if (rc == 0 && chmod(path, 0600) < 0) rc = -errno;
  if (rc == 0) rc = uv_listen((uv_stream_t *)&a->pipe, 16, admin_accept);
  if (rc < 0) {
    snprintf(err, errlen, "admin socket %s: %s", path, uv_strerror(rc));
    unlink(path);
    a->closing = true;
    uv_close((uv_handle_t *)&a->pipe, admin_pipe_closed);
    return rc;
  }
  *out = a;
  return 0;
}

void ea__admin_close(ea__admin *a, void (*closed)(void *ctx), void *ctx) {
  if (a->closing) return;
  a->closing = true;
  a->closed = closed;
  a->closed_ctx = ctx;
  unlink(a->path);
  for (aconn *c = a->conns; c; c = c->next) aconn_close(c);
  uv_close((uv_handle_t *)&a->pipe, admin_pipe_closed);
}

/* ---- client --------------------------------------------------------------- */

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int ea__admin_request(const char *path, const char *line, int timeout_ms, char **resp, size_t *len,
                      char *err, size_t errlen) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof sa.sun_path) {
    snprintf(err, errlen, "socket path too long: %s", path);
    return -ENAMETOOLONG;
  }
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    snprintf(err, errlen, "socket: %s", strerror(errno));
    return -errno;
  }
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
    int e = errno;
    close(fd);
    if (e == ENOENT || e == ECONNREFUSED)
      snprintf(err, errlen, "no agent is running here: cannot connect to %s (%s)", path,
               strerror(e));
    else
      snprintf(err, errlen, "cannot connect to %s: %s", path, strerror(e));
    return -e;
  }
  int64_t deadline = mono_ms() + timeout_ms;
  char req[ADMIN_LINE_MAX + 2];
  int rl = snprintf(req, sizeof req, "%s\n", line);
  if (rl < 0 || (size_t)rl >= sizeof req) {
    close(fd);
    snprintf(err, errlen, "request too long");
    return -EINVAL;
  }
  if (send(fd, req, (size_t)rl, MSG_NOSIGNAL) != rl) {
    int e = errno;
    close(fd);
    snprintf(err, errlen, "cannot send to %s: %s", path, strerror(e));
    return -e;
  }
  size_t cap = 65536, n = 0;
  char *buf = malloc(cap);
  int rc = buf ? 0 : -ENOMEM;
  while (rc == 0) {
    int64_t left = deadline - mono_ms();
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    if (left <= 0 || poll(&pfd, 1, (int)left) == 0) {
      snprintf(err, errlen, "the agent at %s did not answer within %d ms", path, timeout_ms);
      rc = -ETIMEDOUT;
      break;
    }
    if (n + 1 >= cap) {
      char *nb = cap * 2 <= ADMIN_RESP_MAX ? realloc(buf, cap * 2) : NULL;
      if (!nb) {
        snprintf(err, errlen, "answer too large");
        rc = -EMSGSIZE;
        break;
      }
      buf = nb;
      cap *= 2;
    }
    ssize_t r = recv(fd, buf + n, cap - n - 1, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      rc = -errno;
      snprintf(err, errlen, "reading from %s: %s", path, strerror(errno));
      break;
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  close(fd);
  if (rc < 0) {
    free(buf);
    return rc;
  }
  buf[n] = 0;
  *resp = buf;
  *len = n;
  return 0;
}
