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
 * directory: only the agent's user may ask it things.
 *
 * Both ends need a little JSON: the server writes it with a growable string
 * builder (ea__sb), the CLI reads it with a small bounded DOM parser
 * (ea__json) — no dependency for two hundred lines of well-known grammar.
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
#define ADMIN_LINE_MAX 1024
/* Clients are local tools answered in microseconds; 5 s only expires for a
 * client that connected and went away without sending a line. */
#define ADMIN_CONN_TIMEOUT_MS 5000
/* Concurrent admin connections; more are refused (closed at once). */
#define ADMIN_MAX_CONNS 16
/* Status of a 5000-member cluster is ~1.5 MB of JSON; refuse absurd answers. */
#define ADMIN_RESP_MAX (64u << 20)
/* JSON nesting the parser accepts: our documents nest 3 deep. */
#define JSON_MAX_DEPTH 64

/* ---- string builder ------------------------------------------------------- */

static bool sb_reserve(ea__sb *b, size_t extra) {
  if (b->oom) return false;
  if (b->len + extra + 1 <= b->cap) return true;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + extra + 1) cap *= 2;
  char *nb = realloc(b->buf, cap);
  if (!nb) {
    b->oom = true;
    return false;
  }
  b->buf = nb;
  b->cap = cap;
  return true;
}

void ea__sb_printf(ea__sb *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char tmp[256];
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if (!sb_reserve(b, (size_t)n)) return;
  if ((size_t)n < sizeof tmp) {
    memcpy(b->buf + b->len, tmp, (size_t)n + 1);
  } else {
    va_start(ap, fmt);
    vsnprintf(b->buf + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
  }
  b->len += (size_t)n;
}

void ea__sb_puts(ea__sb *b, const char *s) {
  size_t n = strlen(s);
  if (!sb_reserve(b, n)) return;
  memcpy(b->buf + b->len, s, n + 1);
  b->len += n;
}

/* Length of the valid UTF-8 sequence at p (1..4), or 0 if it is not one.
 * Member names arrive from the network; a status document must stay valid
 * JSON (UTF-8) for strict parsers whatever a peer put in its name. */
static size_t utf8_len(const unsigned char *p) {
  size_t n = p[0] >= 0xF0 ? 4 : p[0] >= 0xE0 ? 3 : p[0] >= 0xC2 ? 2 : 0;
  if (p[0] > 0xF4) return 0;
  for (size_t i = 1; i < n; i++)
    if ((p[i] & 0xC0) != 0x80) return 0;
  if (n == 3 && ((p[0] == 0xE0 && p[1] < 0xA0) || (p[0] == 0xED && p[1] >= 0xA0))) return 0;
  if (n == 4 && ((p[0] == 0xF0 && p[1] < 0x90) || (p[0] == 0xF4 && p[1] >= 0x90))) return 0;
  return n;
}

void ea__sb_json_str(ea__sb *b, const char *s) {
  if (!sb_reserve(b, strlen(s) * 6 + 2)) return;
  char *o = b->buf + b->len;
  *o++ = '"';
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') {
      *o++ = '\\';
      *o++ = (char)*p;
    } else if (*p < 0x20 || *p == 0x7f) {
      o += sprintf(o, "\\u%04x", *p);
    } else if (*p < 0x80) {
      *o++ = (char)*p;
    } else {
      size_t n = utf8_len(p);
      if (n == 0) {
        o += sprintf(o, "\\ufffd");
      } else {
        memcpy(o, p, n);
        o += n;
        p += n - 1;
      }
    }
  }
  *o++ = '"';
  *o = 0;
  b->len = (size_t)(o - b->buf);
}

void ea__sb_free(ea__sb *b) {
  free(b->buf);
  memset(b, 0, sizeof *b);
}

/* ---- JSON parser ------------------------------------------------------------ */

typedef struct {
  const char *s, *p, *end;
  char *err;
  size_t errlen;
  bool failed;
} jp;

static int jfail(jp *j, const char *what) {
  if (!j->failed) snprintf(j->err, j->errlen, "JSON offset %zu: %s", (size_t)(j->p - j->s), what);
  j->failed = true;
  return -EINVAL;
}

static void jws(jp *j) {
  while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static int hex4(const char *p, unsigned *v) {
  *v = 0;
  for (int i = 0; i < 4; i++) {
    char c = p[i];
    unsigned d = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
                 : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                 : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
                                        : 16u;
    if (d > 15) return -1;
    *v = *v << 4 | d;
  }
  return 0;
}

static size_t utf8_put(char *o, unsigned cp) {
  if (cp < 0x80) return o[0] = (char)cp, 1;
  if (cp < 0x800) return o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 63)), 2;
  if (cp < 0x10000)
    return o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | (cp >> 6 & 63)),
           o[2] = (char)(0x80 | (cp & 63)), 3;
  return o[0] = (char)(0xF0 | cp >> 18), o[1] = (char)(0x80 | (cp >> 12 & 63)),
         o[2] = (char)(0x80 | (cp >> 6 & 63)), o[3] = (char)(0x80 | (cp & 63)), 4;
}

/* Parse a string literal at j->p (which is at '"') into a malloc'd copy. */
static int jstring(jp *j, char **out) {
  j->p++;
  const char *start = j->p;
  size_t cap = 1;
  for (const char *q = start; q < j->end && *q != '"'; q++) {
    cap++;
    if (*q == '\\') q++;
  }
  char *buf = malloc(cap * 4 + 1); /* an escape never grows past 4 bytes per input byte */
  if (!buf) return jfail(j, "out of memory");
  size_t n = 0;
  while (j->p < j->end && *j->p != '"') {
    unsigned char c = (unsigned char)*j->p;
    if (c < 0x20) {
      free(buf);
      return jfail(j, "control character in string");
    }
    if (c != '\\') {
      buf[n++] = (char)c;
      j->p++;
      continue;
    }
    if (j->end - j->p < 2) break;
    char e = j->p[1];
    j->p += 2;
    switch (e) {
      case '"':
        buf[n++] = '"';
        break;
      case '\\':
        buf[n++] = '\\';
        break;
      case '/':
        buf[n++] = '/';
        break;
      case 'b':
        buf[n++] = '\b';
        break;
      case 'f':
        buf[n++] = '\f';
        break;
      case 'n':
        buf[n++] = '\n';
        break;
      case 'r':
        buf[n++] = '\r';
        break;
      case 't':
        buf[n++] = '\t';
        break;
      case 'u': {
        unsigned cp, lo;
        if (j->end - j->p < 4 || hex4(j->p, &cp)) {
          free(buf);
          return jfail(j, "bad \\u escape");
        }
        j->p += 4;
        if (cp >= 0xD800 && cp < 0xDC00 && j->end - j->p >= 6 && j->p[0] == '\\' &&
            j->p[1] == 'u' && hex4(j->p + 2, &lo) == 0 && lo >= 0xDC00 && lo < 0xE000) {
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          j->p += 6;
        }
        n += utf8_put(buf + n, cp);
        break;
      }
      default:
        free(buf);
        return jfail(j, "bad escape");
    }
  }
  if (j->p >= j->end) {
    free(buf);
    return jfail(j, "unterminated string");
  }
  j->p++;
  buf[n] = 0;
  *out = buf;
  return 0;
}

static int jvalue(jp *j, ea__json *v, int depth);

static int jcontainer(jp *j, ea__json *v, int depth, bool obj) {
  char close = obj ? '}' : ']';
  j->p++;
  jws(j);
  ea__json **tail = &v->child;
  if (j->p < j->end && *j->p == close) {
    j->p++;
    return 0;
  }
  for (;;) {
    ea__json *c = calloc(1, sizeof *c);
    if (!c) return jfail(j, "out of memory");
    *tail = c;
    tail = &c->next;
    v->n++;
    jws(j);
    if (obj) {
      if (j->p >= j->end || *j->p != '"') return jfail(j, "expected a member name");
      if (jstring(j, &c->key)) return -EINVAL;
      jws(j);
      if (j->p >= j->end || *j->p != ':') return jfail(j, "expected ':'");
      j->p++;
    }
    if (jvalue(j, c, depth + 1)) return -EINVAL;
    jws(j);
    if (j->p < j->end && *j->p == ',') {
      j->p++;
      continue;
    }
    if (j->p < j->end && *j->p == close) {
      j->p++;
      return 0;
    }
    return jfail(j, obj ? "expected ',' or '}'" : "expected ',' or ']'");
  }
}

static int jvalue(jp *j, ea__json *v, int depth) {
  if (depth > JSON_MAX_DEPTH) return jfail(j, "nested too deep");
  jws(j);
  if (j->p >= j->end) return jfail(j, "unexpected end");
  char c = *j->p;
  if (c == '{') return v->type = EA__J_OBJ, jcontainer(j, v, depth, true);
  if (c == '[') return v->type = EA__J_ARR, jcontainer(j, v, depth, false);
  if (c == '"') return v->type = EA__J_STR, jstring(j, &v->text);
  static const struct {
    const char *lit;
    ea__jtype t;
    bool b;
  } lits[] = {{"true", EA__J_BOOL, true}, {"false", EA__J_BOOL, false}, {"null", EA__J_NULL, 0}};
  for (size_t i = 0; i < 3; i++) {
    size_t l = strlen(lits[i].lit);
    if ((size_t)(j->end - j->p) >= l && memcmp(j->p, lits[i].lit, l) == 0) {
      v->type = lits[i].t;
      v->b = lits[i].b;
      v->text = strdup(lits[i].lit);
      j->p += l;
      return v->text ? 0 : jfail(j, "out of memory");
    }
  }
  const char *s = j->p;
  while (j->p < j->end && strchr("+-0123456789.eE", *j->p)) j->p++;
  if (j->p == s) return jfail(j, "unexpected character");
  v->type = EA__J_NUM;
  v->text = strndup(s, (size_t)(j->p - s));
  if (!v->text) return jfail(j, "out of memory");
  char *end;
  v->num = strtod(v->text, &end);
  if (*end) return jfail(j, "bad number");
  return 0;
}

void ea__json_free(ea__json *j) {
  while (j) {
    ea__json *next = j->next;
    ea__json_free(j->child);
    free(j->key);
    free(j->text);
    free(j);
    j = next;
  }
}

int ea__json_parse(const char *s, size_t len, ea__json **out, char *err, size_t errlen) {
  jp j = {.s = s, .p = s, .end = s + len, .err = err, .errlen = errlen};
  ea__json *root = calloc(1, sizeof *root);
  if (!root) return -ENOMEM;
  int rc = jvalue(&j, root, 0);
  if (rc == 0) {
    jws(&j);
    if (j.p != j.end) rc = jfail(&j, "trailing characters");
  }
  if (rc) {
    ea__json_free(root);
    return rc;
  }
  *out = root;
  return 0;
}

const ea__json *ea__json_get(const ea__json *j, const char *path) {
  while (j && *path) {
    const char *dot = strchr(path, '.');
    size_t l = dot ? (size_t)(dot - path) : strlen(path);
    const ea__json *c = NULL;
    if (j->type == EA__J_OBJ)
      for (c = j->child; c; c = c->next)
        if (strlen(c->key) == l && memcmp(c->key, path, l) == 0) break;
    j = c;
    path += l + (dot != NULL);
  }
  return j;
}

const char *ea__json_str(const ea__json *j, const char *path, const char *dflt) {
  const ea__json *v = ea__json_get(j, path);
  return v && v->text ? v->text : dflt;
}

double ea__json_num(const ea__json *j, const char *path, double dflt) {
  const ea__json *v = ea__json_get(j, path);
  if (v && v->type == EA__J_NUM) return v->num;
  if (v && v->type == EA__J_BOOL) return v->b;
  return dflt;
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
  int handles;
  bool answered;
  bool overlong; /* line exceeded ADMIN_LINE_MAX: discard up to its end */
  size_t len;
  char line[ADMIN_LINE_MAX + 1];
  ea__sb out;
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
  ea__sb_free(&c->out);
  free(c);
  admin_maybe_free(a);
}

static void aconn_close(aconn *c) {
  if (uv_is_closing((uv_handle_t *)&c->pipe)) return;
  uv_timer_stop(&c->timer);
  uv_close((uv_handle_t *)&c->timer, aconn_closed);
  uv_close((uv_handle_t *)&c->pipe, aconn_closed);
}

static void aconn_written(uv_write_t *w, int status) {
  (void)status; /* the client went away: nothing to tell it */
  aconn_close(w->data);
}

static void aconn_reply(aconn *c) {
  if (c->answered) return;
  c->answered = true;
  uv_read_stop((uv_stream_t *)&c->pipe);
  uv_timer_stop(&c->timer);
  if (c->out.oom || c->out.len == 0) {
    aconn_close(c);
    return;
  }
  ea__sb_puts(&c->out, "\n");
  uv_buf_t b = uv_buf_init(c->out.buf, (unsigned)c->out.len);
  if (uv_write(&c->wreq, (uv_stream_t *)&c->pipe, &b, 1, aconn_written) < 0) aconn_close(c);
}

static void aconn_error(aconn *c, const char *msg) {
  ea__sb_free(&c->out);
  ea__sb_puts(&c->out, "{\"error\":");
  ea__sb_json_str(&c->out, msg);
  ea__sb_puts(&c->out, "}");
  aconn_reply(c);
}

static void help_answer(ea__admin *a, ea__sb *out) {
  ea__sb_puts(out, "{\"commands\":[");
  for (size_t i = 0; i < a->ncmds; i++) {
    ea__sb_printf(out, "%s{\"name\":", i ? "," : "");
    ea__sb_json_str(out, a->cmds[i].name);
    ea__sb_puts(out, ",\"help\":");
    ea__sb_json_str(out, a->cmds[i].help);
    ea__sb_puts(out, "}");
  }
  ea__sb_puts(out, ",{\"name\":\"help\",\"help\":\"list the commands\"}]}");
}

static void aconn_dispatch(aconn *c) {
  ea__admin *a = c->a;
  char *line = c->line;
  while (*line == ' ') line++;
  char *end = line + strcspn(line, " ");
  char *args = *end ? end + 1 : end;
  *end = 0;
  while (*args == ' ') args++;
  if (strcmp(line, "help") == 0) {
    help_answer(a, &c->out);
    aconn_reply(c);
    return;
  }
  for (size_t i = 0; i < a->ncmds; i++) {
    if (strcmp(a->cmds[i].name, line) != 0) continue;
    a->cmds[i].fn(a->ctx, args, &c->out);
    aconn_reply(c);
    return;
  }
  char msg[160];
  snprintf(msg, sizeof msg, "unknown command '%.64s' (try 'help')", line);
  aconn_error(c, msg);
}

static void aconn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  aconn *c = h->data;
  *buf = uv_buf_init(c->line + c->len, (unsigned)(ADMIN_LINE_MAX - c->len));
}

static void aconn_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  (void)buf;
  aconn *c = s->data;
  if (c->answered || nread == 0) return;
  if (nread < 0) {
    /* EOF without a newline: treat what came as the line (nc -U sends no
     * newline with echo -n). */
    if (nread == UV_EOF && c->overlong) {
      aconn_error(c, "request line too long");
    } else if (nread == UV_EOF && c->len > 0) {
      c->line[c->len] = 0;
      aconn_dispatch(c);
    } else {
      aconn_close(c);
    }
    return;
  }
  c->len += (size_t)nread;
  c->line[c->len] = 0;
  char *nl = memchr(c->line, '\n', c->len);
  if (c->overlong) {
    /* Read the rest of the line before answering: closing with unread
     * input would reset the connection and lose the answer. */
    if (nl)
      aconn_error(c, "request line too long");
    else
      c->len = 0;
    return;
  }
  if (nl) {
    *nl = 0;
    if (nl > c->line && nl[-1] == '\r') nl[-1] = 0;
    aconn_dispatch(c);
  } else if (c->len >= ADMIN_LINE_MAX) {
    c->overlong = true;
    c->len = 0;
  }
}

static void aconn_timeout(uv_timer_t *h) {
  aconn *c = h->data;
  aconn_error(c, "no request line within 5 s");
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
  c->next = a->conns;
  if (a->conns) a->conns->prev = c;
  a->conns = c;
  a->nconns++;
  if (uv_accept(server, (uv_stream_t *)&c->pipe) < 0 || a->nconns > ADMIN_MAX_CONNS) {
    aconn_close(c);
    return;
  }
  uv_timer_start(&c->timer, aconn_timeout, ADMIN_CONN_TIMEOUT_MS, 0);
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
