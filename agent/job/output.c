/* output.c — a user program's stdout and stderr into the agent's log and
 * into files, without ever blocking the loop (output.h has the contract).
 *
 * Each process gets a record of its own (two streams: a libuv pipe, a line
 * splitter, a file and its write buffer), as the supervisor gives each
 * spawn a record: a slot can start its next process while the previous
 * one's last bytes are still being written, and a record is freed only when
 * its pipes are closed, its last write has completed and its files are
 * closed.  Reading is libuv's (the pipes are non-blocking); writing is
 * uv_fs_write on the thread pool, one request in flight per file, the next
 * batch collecting meanwhile up to EA__OUT_BUF_MAX bytes.  Opening the two
 * files of a generation is done on the loop: two open() calls on the local
 * data dir, like the admin socket's bind.
 */
#include "output.h"

#include "ea_log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the line splitter ------------------------------------------------------ */

void ea__linebuf_feed(ea__linebuf *lb, const char *p, size_t n,
                      void (*emit)(void *, const char *, size_t, bool), void *ctx) {
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)p[i];
    if (ch == '\n') {
      size_t len = lb->len;
      if (len && lb->buf[len - 1] == '\r') len--;
      lb->buf[len] = 0;
      emit(ctx, lb->buf, len, false);
      lb->len = 0;
      continue;
    }
    if (lb->len == EA__OUT_LINE_MAX) {
      lb->buf[lb->len] = 0;
      emit(ctx, lb->buf, lb->len, true);
      lb->len = 0;
    }
    lb->buf[lb->len++] = (ch < 0x20 && ch != '\t' && ch != '\r') || ch == 0x7f ? '?' : (char)ch;
  }
}

void ea__linebuf_flush(ea__linebuf *lb, void (*emit)(void *, const char *, size_t, bool),
                       void *ctx) {
  if (!lb->len) return;
  size_t len = lb->len;
  if (lb->buf[len - 1] == '\r') len--;
  lb->buf[len] = 0;
  emit(ctx, lb->buf, len, false);
  lb->len = 0;
}

/* ---- capture ------------------------------------------------------------------- */

#define OUT_PATH_MAX 4200 /* DATA/workers/gen-T/rank-R.stderr, DATA ≤ EA_PATH_MAX */

typedef struct capture capture;

typedef struct {
  capture *c;
  int which; /* 1 stdout, 2 stderr */
  uv_pipe_t pipe;
  bool pipe_open; /* initialised, not closed yet */
  bool eof;
  ea__linebuf lb;
  uv_file fd; /* -1: none (open failed, or closed) */
  char path[OUT_PATH_MAX];
  char *pend, *flight;
  size_t plen, pcap, flen;
  bool writing, write_failed;
  uv_fs_t req;
  uv_fs_t close_req;
  bool closing_fd;
  uint64_t dropped;
} stream;

struct capture {
  ea__out *o;
  uint32_t slot, rank;
  uint64_t term;
  stream st[2];
  int pending; /* pipes open + writes in flight + file closes in flight */
  /* log rate limit: lines this second, and left out since the last note */
  uint64_t win_ms;
  uint32_t win_lines;
  uint64_t skipped;
  capture *next; /* every live record, for ea__out_free */
};

/* The last stderr lines of a slot's latest process: kept per slot, since
 * its record may be freed (pipes at EOF, files closed) before the exit is
 * reported. */
typedef struct {
  char line[EA__OUT_TAIL][EA__OUT_LINE_MAX + 1];
  uint32_t n, next;
} tail_ring;

struct ea__out {
  uv_loop_t *loop;
  char *root;
  uint32_t slots;
  capture **cur;   /* per slot: the latest process's record, while it lives */
  tail_ring *tail; /* per slot */
  capture *all;
  bool closing;
  void (*closed)(void *);
  void *closed_ctx;
  uint64_t lines, not_logged, dropped;
  char rbuf[64 * 1024];
};

static void maybe_free_out(ea__out *o) {
  if (!o->closing || o->all) return;
  void (*cb)(void *) = o->closed;
  void *ctx = o->closed_ctx;
  free(o->cur);
  free(o->tail);
  free(o->root);
  free(o);
  if (cb) cb(ctx);
}

static void capture_unref(capture *c) {
  if (--c->pending > 0) return;
  ea__out *o = c->o;
  for (capture **pp = &o->all; *pp; pp = &(*pp)->next)
    if (*pp == c) {
      *pp = c->next;
      break;
    }
  for (uint32_t k = 0; k < o->slots; k++)
    if (o->cur[k] == c) o->cur[k] = NULL;
  for (int i = 0; i < 2; i++) {
    free(c->st[i].pend);
    free(c->st[i].flight);
  }
  free(c);
  maybe_free_out(o);
}

static void stream_kick(stream *s);

static void on_fd_closed(uv_fs_t *req) {
  stream *s = req->data;
  uv_fs_req_cleanup(req);
  capture_unref(s->c);
}

/* Close the file once nothing more can come and nothing is in flight. */
static void stream_maybe_close_fd(stream *s) {
  if (s->fd < 0 || s->closing_fd || s->writing || !s->eof || (s->plen && !s->write_failed)) return;
  s->closing_fd = true;
  s->close_req.data = s;
  s->c->pending++;
  if (uv_fs_close(s->c->o->loop, &s->close_req, s->fd, on_fd_closed) < 0) {
    s->c->pending--;
    close(s->fd);
  }
  s->fd = -1;
}

static void on_written(uv_fs_t *req) {
  stream *s = req->data;
  ssize_t r = req->result;
  uv_fs_req_cleanup(req);
  s->writing = false;
  if (r < 0 && !s->write_failed) {
    s->write_failed = true;
    ea_log(EA_LOG_WARN, "worker", "cannot write %s: %s (its output still reaches this log)",
           s->path, uv_strerror((int)r));
  }
  stream_kick(s);
  stream_maybe_close_fd(s);
  capture_unref(s->c);
}

static void stream_kick(stream *s) {
  if (s->writing || s->fd < 0 || !s->plen || s->write_failed) return;
  char *t = s->flight;
  s->flight = s->pend;
  s->flen = s->plen;
  s->pend = t;
  s->plen = 0;
  uv_buf_t b = uv_buf_init(s->flight, (unsigned)s->flen);
  s->req.data = s;
  s->writing = true;
  s->c->pending++;
  if (uv_fs_write(s->c->o->loop, &s->req, s->fd, &b, 1, -1, on_written) < 0) {
    s->writing = false;
    s->c->pending--;
    s->write_failed = true;
  }
}

/* Buffers: pend and flight are both EA__OUT_BUF_MAX once used (allocated on
 * the first output, so a quiet program costs nothing). */
static void stream_append(stream *s, const char *p, size_t n) {
  if (s->fd < 0 || s->write_failed) return;
  if (!s->pend) {
    s->pend = malloc(EA__OUT_BUF_MAX);
    s->flight = malloc(EA__OUT_BUF_MAX);
    if (!s->pend || !s->flight) {
      free(s->pend);
      free(s->flight);
      s->pend = s->flight = NULL;
      s->dropped += n;
      s->c->o->dropped += n;
      return;
    }
    s->pcap = EA__OUT_BUF_MAX;
  }
  if (s->plen + n > s->pcap) {
    s->dropped += n;
    s->c->o->dropped += n;
    return;
  }
  memcpy(s->pend + s->plen, p, n);
  s->plen += n;
  stream_kick(s);
}

static void emit_line(void *ctx, const char *line, size_t len, bool cut) {
  stream *s = ctx;
  capture *c = s->c;
  ea__out *o = c->o;
  o->lines++;
  if (s->which == 2 && o->cur[c->slot] == c) {
    tail_ring *t = &o->tail[c->slot];
    memcpy(t->line[t->next], line, len);
    t->line[t->next][len] = 0;
    t->next = (t->next + 1) % EA__OUT_TAIL;
    if (t->n < EA__OUT_TAIL) t->n++;
  }
  uint64_t now = uv_now(o->loop);
  if (now - c->win_ms >= 1000) {
    if (c->skipped)
      ea_log(EA_LOG_INFO, "worker",
             "[rank %u] … %" PRIu64
             " line%s not copied here (more than %u a second); every line "
             "is in %s/gen-%" PRIu64 "/rank-%u.stdout and .stderr",
             c->rank, c->skipped, c->skipped == 1 ? "" : "s", EA__OUT_LOG_PER_S, o->root, c->term,
             c->rank);
    c->skipped = 0;
    c->win_ms = now;
    c->win_lines = 0;
  }
  if (c->win_lines >= EA__OUT_LOG_PER_S) {
    c->skipped++;
    o->not_logged++;
    return;
  }
  c->win_lines++;
  ea_log(EA_LOG_INFO, s->which == 1 ? "stdout" : "stderr", "[rank %u] %.*s%s", c->rank, (int)len,
         line, cut ? " …" : "");
}

static void on_pipe_closed(uv_handle_t *h) {
  stream *s = h->data;
  capture_unref(s->c);
}

static void stream_eof(stream *s) {
  if (s->eof) return;
  s->eof = true;
  ea__linebuf_flush(&s->lb, emit_line, s);
  if (s->pipe_open && !uv_is_closing((uv_handle_t *)&s->pipe)) {
    uv_read_stop((uv_stream_t *)&s->pipe);
    uv_close((uv_handle_t *)&s->pipe, on_pipe_closed);
  }
  s->pipe_open = false;
  if (s->dropped && s->fd >= 0 && !s->write_failed) {
    char note[160];
    int n = snprintf(note, sizeof note,
                     "\n[elastic-agent: %" PRIu64
                     " bytes of output were not written here: the "
                     "disk did not keep up]\n",
                     s->dropped);
    s->dropped = 0;
    if (s->plen + (size_t)n <= s->pcap) {
      memcpy(s->pend + s->plen, note, (size_t)n);
      s->plen += (size_t)n;
      stream_kick(s);
    }
  }
  stream_maybe_close_fd(s);
}

static void stream_data(stream *s, const char *p, size_t n) {
  stream_append(s, p, n);
  ea__linebuf_feed(&s->lb, p, n, emit_line, s);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  stream *s = h->data;
  ea__out *o = s->c->o;
  *buf = uv_buf_init(o->rbuf, sizeof o->rbuf);
}

static void on_read(uv_stream_t *h, ssize_t n, const uv_buf_t *buf) {
  stream *s = h->data;
  if (n > 0) {
    stream_data(s, buf->base, (size_t)n);
  } else if (n < 0) {
    stream_eof(s);
  }
}

int ea__out_new(uv_loop_t *loop, const char *root, uint32_t slots, ea__out **out) {
  *out = NULL;
  ea__out *o = calloc(1, sizeof *o);
  if (!o) return -ENOMEM;
  o->loop = loop;
  o->slots = slots;
  o->root = strdup(root);
  o->cur = calloc(slots ? slots : 1, sizeof *o->cur);
  o->tail = calloc(slots ? slots : 1, sizeof *o->tail);
  if (!o->root || !o->cur || !o->tail) {
    free(o->root);
    free(o->cur);
    free(o->tail);
    free(o);
    return -ENOMEM;
  }
  *out = o;
  return 0;
}

static int stream_open(capture *c, stream *s, int which) {
  ea__out *o = c->o;
  s->c = c;
  s->which = which;
  s->fd = -1;
  snprintf(s->path, sizeof s->path, "%s/gen-%" PRIu64 "/rank-%u.%s", o->root, c->term, c->rank,
           which == 1 ? "stdout" : "stderr");
  int fd = open(s->path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0)
    ea_log(EA_LOG_WARN, "worker", "cannot open %s: %s (output goes to this log only)", s->path,
           strerror(errno));
  s->fd = fd;
  int rc = uv_pipe_init(o->loop, &s->pipe, 0);
  if (rc) {
    if (fd >= 0) close(fd);
    s->fd = -1;
    return rc;
  }
  s->pipe.data = s;
  s->pipe_open = true;
  c->pending++;
  return 0;
}

int ea__out_begin(ea__out *o, uint32_t k, uint32_t rank, uint64_t term, uv_pipe_t **o_pipe,
                  uv_pipe_t **e_pipe) {
  *o_pipe = *e_pipe = NULL;
  if (o->closing) return -ESHUTDOWN;
  if (k >= o->slots) return -ERANGE;
  capture *c = calloc(1, sizeof *c);
  if (!c) return -ENOMEM;
  c->o = o;
  c->slot = k;
  c->rank = rank;
  c->term = term;
  c->pending = 1; /* ours until the spawn is known to have worked */
  c->next = o->all;
  o->all = c;
  for (int i = 0; i < 2; i++) c->st[i].fd = -1;
  o->cur[k] = c;
  o->tail[k].n = o->tail[k].next = 0;
  int rc = stream_open(c, &c->st[0], 1);
  if (rc == 0) rc = stream_open(c, &c->st[1], 2);
  if (rc) {
    ea__out_abort(o, k);
    return rc;
  }
  *o_pipe = &c->st[0].pipe;
  *e_pipe = &c->st[1].pipe;
  return 0;
}

/* After the spawn: libuv connects the pipes in uv_spawn; read them now. */
static void capture_start(capture *c) {
  for (int i = 0; i < 2; i++) {
    stream *s = &c->st[i];
    if (!s->pipe_open || s->eof) continue;
    if (uv_read_start((uv_stream_t *)&s->pipe, on_alloc, on_read) < 0) stream_eof(s);
  }
}

void ea__out_abort(ea__out *o, uint32_t k) {
  if (k >= o->slots || !o->cur[k]) return;
  capture *c = o->cur[k];
  o->cur[k] = NULL;
  for (int i = 0; i < 2; i++) {
    stream *s = &c->st[i];
    s->eof = true;
    if (s->pipe_open) {
      s->pipe_open = false;
      uv_close((uv_handle_t *)&s->pipe, on_pipe_closed);
    }
    if (s->fd >= 0) {
      close(s->fd);
      s->fd = -1;
    }
  }
  capture_unref(c); /* the begin reference */
}

/* The spawn worked: the pipes are connected; read them. */
void ea__out_started(ea__out *o, uint32_t k) {
  if (k >= o->slots || !o->cur[k]) return;
  capture *c = o->cur[k];
  capture_start(c);
  capture_unref(c); /* the begin reference: the streams hold their own */
}

void ea__out_drain(ea__out *o, uint32_t k) {
  if (k >= o->slots || !o->cur[k]) return;
  capture *c = o->cur[k];
  for (int i = 0; i < 2; i++) {
    stream *s = &c->st[i];
    if (!s->pipe_open || s->eof) continue;
    uv_os_fd_t fd;
    if (uv_fileno((uv_handle_t *)&s->pipe, &fd) < 0) continue;
    /* The process is gone: its writes are all in the pipe (a child it left
     * behind may still write; what it writes later is read as usual). */
    for (int rounds = 0; rounds < 64; rounds++) {
      ssize_t n = read(fd, o->rbuf, sizeof o->rbuf);
      if (n > 0) {
        stream_data(s, o->rbuf, (size_t)n);
        continue;
      }
      if (n == 0) stream_eof(s);
      break;
    }
  }
}

size_t ea__out_tail(const ea__out *o, uint32_t k, char *buf, size_t cap) {
  if (cap) buf[0] = 0;
  if (k >= o->slots || !cap) return 0;
  const tail_ring *t = &o->tail[k];
  size_t len = 0;
  uint32_t start = (t->next + EA__OUT_TAIL - t->n) % EA__OUT_TAIL;
  for (uint32_t i = 0; i < t->n; i++) {
    const char *l = t->line[(start + i) % EA__OUT_TAIL];
    int w = snprintf(buf + len, cap - len, "%s%s", len ? "\n" : "", l);
    if (w < 0 || (size_t)w >= cap - len) {
      len = strlen(buf);
      break;
    }
    len += (size_t)w;
  }
  return len;
}

void ea__out_stats(const ea__out *o, uint64_t *lines, uint64_t *not_logged, uint64_t *dropped) {
  *lines = o->lines;
  *not_logged = o->not_logged;
  *dropped = o->dropped;
}

void ea__out_free(ea__out *o, void (*closed)(void *ctx), void *ctx) {
  if (!o || o->closing) return;
  o->closing = true;
  o->closed = closed;
  o->closed_ctx = ctx;
  for (capture *c = o->all, *n; c; c = n) {
    n = c->next;
    c->pending++; /* keep it while we walk it */
    for (int i = 0; i < 2; i++) stream_eof(&c->st[i]);
    capture_unref(c);
  }
  maybe_free_out(o);
}
