/* ckpt_svc.c — the live checkpoint flow on the agent: staged shards become
 * files (ea__ckpt_svc, every agent), and shard reports become a committed
 * MANIFEST (ea__ckpt_core, pure, and ea__ckpt_ctl, its libuv glue, on the
 * controller).  ckpt_svc.h draws the path and says where the agent hooks
 * in; docs/checkpoints.md ("The live flow") explains the choices.
 *
 * Why the split.  The expensive, blocking parts — writing a shard with
 * io_uring and fsync, committing a manifest and running retention under
 * flock — run on libuv's thread pool, never on the loop that also carries
 * gossip.  Everything else is bookkeeping that must be right under
 * duplicates, reordering, failures and generation changes, so it is a pure
 * core (no loop, clock or disk: time comes in as an argument, a commit goes
 * out as a job) that the tests drive directly.
 *
 * Nothing coordinates the trigger: every rank stages its shard of step s
 * on its own (they hold identical state), so the controller learns that a
 * checkpoint exists from its first shard report, and decides only whether
 * all W arrived.  A checkpoint that cannot complete — a shard failed or
 * was skipped, a rank died before reporting, a newer checkpoint committed
 * first — is dropped with a reason (an event), and retention removes its
 * files later as a leftover; the previous checkpoint is never touched.
 */
#include "ckpt_svc.h"

#include "ea_log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double mono_s(void) {
  return (double)uv_hrtime() * 1e-9;
}

/* ---- events ----------------------------------------------------------------- */

const char *ea__ckpt_ev_name(uint8_t kind) {
  switch (kind) {
    case EA__CKPT_EV_SHARD_WRITTEN:
      return "shard_written";
    case EA__CKPT_EV_SHARD_FAILED:
      return "shard_failed";
    case EA__CKPT_EV_STARTED:
      return "started";
    case EA__CKPT_EV_SHARD_DURABLE:
      return "shard_durable";
    case EA__CKPT_EV_COMMITTED:
      return "committed";
    case EA__CKPT_EV_FAILED:
      return "failed";
    case EA__CKPT_EV_STALE:
      return "stale";
    default:
      return "?";
  }
}

void ea__ckpt_event_format(const ea__ckpt_event *e, char *buf, size_t cap) {
  const char *k = ea__ckpt_ev_name(e->kind);
  switch (e->kind) {
    case EA__CKPT_EV_SHARD_WRITTEN:
    case EA__CKPT_EV_SHARD_DURABLE:
      snprintf(buf, cap,
               "%s %s shard=%u/%u bytes=%" PRIu64 " write_ms=%.2f stall_ms=%.3f wait_ms=%.2f", k,
               e->name, e->rank, e->world, e->bytes, e->seconds * 1e3, e->stall_seconds * 1e3,
               e->wait_seconds * 1e3);
      break;
    case EA__CKPT_EV_STARTED:
      snprintf(buf, cap, "%s %s shards=%u", k, e->name, e->shards);
      break;
    case EA__CKPT_EV_COMMITTED:
      snprintf(buf, cap,
               "%s %s bytes=%" PRIu64
               " shards=%u/%u seconds=%.3f write_ms=%.2f commit_ms=%.2f "
               "stall_ms=%.3f wait_ms=%.2f latest=%s kept=%u removed=%u partial_removed=%u%s%s",
               k, e->name, e->bytes, e->shards_in, e->shards, e->seconds, e->write_seconds * 1e3,
               e->commit_seconds * 1e3, e->stall_seconds * 1e3, e->wait_seconds * 1e3,
               e->latest_moved ? "moved" : "kept", e->retained.kept, e->retained.removed_complete,
               e->retained.removed_partial, e->retain_error ? " retention_error=" : "",
               e->retain_error ? strerror(-e->retain_error) : "");
      break;
    case EA__CKPT_EV_FAILED:
    case EA__CKPT_EV_STALE:
      snprintf(buf, cap, "%s %s shards=%u/%u error=%s: %s partial_removed=%u%s%s", k, e->name,
               e->shards_in, e->shards, e->error ? strerror(-e->error) : "-", e->why,
               e->retained.removed_partial, e->retain_error ? " retention_error=" : "",
               e->retain_error ? strerror(-e->retain_error) : "");
      break;
    default: /* shard_failed */
      snprintf(buf, cap, "%s %s shards=%u/%u error=%s: %s", k, e->name, e->shards_in, e->shards,
               e->error ? strerror(-e->error) : "-", e->why);
      break;
  }
}

static void ev_name(ea__ckpt_event *e) {
  if (ea_ckpt_dir_name(e->name, sizeof e->name, e->step, e->gen)) e->name[0] = 0;
}

/* ============================================================================
 * The agent side: ea__ckpt_svc
 * ========================================================================== */

typedef struct job {
  uv_work_t req;
  struct ea__ckpt_svc *svc;
  struct job *next;
  uint32_t local;
  bool write;  /* a shard to write; else a report only (skipped, invalid) */
  bool answer; /* a CKPT_STAGED: the worker gets a CKPT_DONE */
  int fd;      /* our dup of the memfd, closed by the work */
  uint64_t gen, step, offset, length, total, hash, stall_us, wait_us;
  uint32_t rank, world;
  uint8_t fail_kind;
  ea_ckpt_progress progress;
  ea_ckpt_write_result res;
  int rc;
  char err[512];
} job;

struct ea__ckpt_svc {
  uv_loop_t *loop;
  char dir[EA_CKPT_PATH_MAX];
  unsigned io_flags;
  ea_node_id self;
  ea__ckpt_svc_cbs cb;
  void *ctx;
  job *jobs; /* queued or running */
  ea__ckpt_svc_stats st;
  uv_timer_t handle; /* only so that close completes asynchronously */
  bool closing, handle_closed;
  void (*closed)(void *);
  void *closed_ctx;
};

static void svc_seterr(job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void svc_seterr(job *j, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(j->err, sizeof j->err, fmt, ap);
  va_end(ap);
}

/* On a pool thread: map the memfd, write the shard file, check that what
 * was written is what the worker staged. */
static void svc_work(uv_work_t *req) {
  job *j = req->data;
  ea__ckpt_svc *s = j->svc;
  if (!j->write) return;
  void *map = NULL;
  struct stat sb;
  if (fstat(j->fd, &sb) < 0) {
    j->rc = -errno;
    svc_seterr(j, "fstat of the staging memfd: %s", strerror(errno));
    goto out;
  }
  if ((uint64_t)sb.st_size < j->length) {
    j->rc = -EBADMSG;
    svc_seterr(j, "the staging memfd holds %lld bytes, the shard is %" PRIu64,
               (long long)sb.st_size, j->length);
    goto out;
  }
  static const uint8_t none[1];
  const void *data = none;
  if (j->length) {
    map = mmap(NULL, j->length, PROT_READ, MAP_SHARED, j->fd, 0);
    if (map == MAP_FAILED) {
      map = NULL;
      j->rc = -errno;
      svc_seterr(j, "mmap of the staging memfd: %s", strerror(errno));
      goto out;
    }
    data = map;
  }
  char path[EA_CKPT_PATH_MAX];
  j->rc = ea_ckpt_prepare(s->dir, j->step, j->gen, NULL, 0, j->err, sizeof j->err);
  if (j->rc) goto out;
  j->rc = ea_ckpt_shard_path(path, sizeof path, s->dir, j->step, j->gen, j->rank, j->world);
  if (j->rc) {
    svc_seterr(j, "shard path under %s: %s", s->dir, strerror(-j->rc));
    goto out;
  }
  ea_ckpt_write_req wr = {.path = path,
                          .data = data,
                          .length = j->length,
                          .flags = s->io_flags,
                          .progress = &j->progress};
  j->rc = ea_ckpt_write_shard(&wr, &j->res);
  if (j->rc) {
    svc_seterr(j, "%s", j->res.err);
    goto out;
  }
  if (j->res.hash != j->hash) {
    /* The bytes changed between the worker's copy and our write (a worker
     * that broke the one-in-flight rule, or memory damage): not a shard. */
    unlink(path);
    j->rc = -EBADMSG;
    svc_seterr(j, "%s: written XXH3 %016" PRIx64 " differs from the staged %016" PRIx64, path,
               j->res.hash, j->hash);
  }
out:
  if (map) munmap(map, j->length);
  if (j->fd >= 0) close(j->fd);
  j->fd = -1;
}

static void svc_maybe_closed(ea__ckpt_svc *s) {
  if (!s->closing || s->jobs || !s->handle_closed) return;
  void (*closed)(void *) = s->closed;
  void *ctx = s->closed_ctx;
  free(s);
  if (closed) closed(ctx);
}

static void svc_unlink_job(ea__ckpt_svc *s, job *j) {
  for (job **p = &s->jobs; *p; p = &(*p)->next)
    if (*p == j) {
      *p = j->next;
      break;
    }
  s->st.in_flight--;
}

static void svc_after(uv_work_t *req, int status) {
  job *j = req->data;
  ea__ckpt_svc *s = j->svc;
  svc_unlink_job(s, j);
  if (status == UV_ECANCELED) {
    j->rc = -ECANCELED;
    if (j->fd >= 0) close(j->fd);
  }
  if (s->closing) {
    free(j);
    svc_maybe_closed(s);
    return;
  }
  ea__ckpt_event ev = {.step = j->step,
                       .gen = j->gen,
                       .rank = j->rank,
                       .world = j->world,
                       .local = j->local,
                       .bytes = j->length,
                       .stall_seconds = j->stall_us * 1e-6,
                       .wait_seconds = j->wait_us * 1e-6};
  ev_name(&ev);
  ea__ckpt_msg *m = calloc(1, sizeof *m);
  if (j->answer) {
    /* The memfd is the worker's again whatever happened. */
    ea_ipc_msg *done = malloc(sizeof *done);
    if (done) {
      ea_ipc_msg_init(done, EA_IPC_CKPT_DONE);
      done->gen = j->gen;
      done->step = j->step;
      done->status = j->rc;
      snprintf(done->message, sizeof done->message, "%.*s", (int)sizeof done->message - 1,
               j->rc ? j->err : "");
      s->cb.reply(s->ctx, j->local, done);
      free(done);
    }
  }
  if (j->rc == 0) {
    s->st.written++;
    s->st.bytes += j->length;
    ev.kind = EA__CKPT_EV_SHARD_WRITTEN;
    ev.seconds = j->res.seconds;
    if (m) {
      m->type = EA__CKPT_SHARD_DURABLE;
      m->total = j->total;
      m->offset = j->offset;
      m->length = j->length;
      m->hash = j->res.hash;
      m->block_size = j->res.block_size;
      m->n_blocks = j->res.n_blocks;
      memcpy(m->block_hash, j->res.block_hash, sizeof m->block_hash);
      m->write_us = (uint64_t)(j->res.seconds * 1e6);
      m->stall_us = j->stall_us;
      m->wait_us = j->wait_us;
      m->direct = j->res.direct;
    }
  } else {
    if (j->fail_kind == EA__CKPT_FAIL_SKIPPED)
      s->st.skipped++;
    else
      s->st.failed++;
    ev.kind = EA__CKPT_EV_SHARD_FAILED;
    ev.alert = j->fail_kind != EA__CKPT_FAIL_SKIPPED;
    ev.error = j->rc;
    snprintf(ev.why, sizeof ev.why, "%s", j->err);
    if (m) {
      m->type = EA__CKPT_SHARD_FAILED;
      m->kind = j->fail_kind ? j->fail_kind : EA__CKPT_FAIL_WRITE;
      m->error = (uint32_t)(j->rc < 0 && j->rc > -4096 ? -j->rc : EIO);
      snprintf(m->message, sizeof m->message, "%.*s", (int)sizeof m->message - 1, j->err);
    }
  }
  if (m) {
    m->src = s->self;
    m->gen = j->gen;
    m->step = j->step;
    m->rank = j->rank;
    m->world = j->world;
    s->cb.report(s->ctx, m);
    free(m);
  } else {
    ea_log(EA_LOG_ERROR, "ckpt", "out of memory: report of %s shard %u lost", ev.name, j->rank);
  }
  if (s->cb.event) s->cb.event(s->ctx, &ev);
  free(j);
}

int ea__ckpt_svc_new(uv_loop_t *loop, const ea__ckpt_svc_opts *o, const ea__ckpt_svc_cbs *cb,
                     void *ctx, ea__ckpt_svc **out) {
  *out = NULL;
  if (!o->dir || !*o->dir || !cb->reply || !cb->report) return -EINVAL;
  if (strlen(o->dir) >= EA_CKPT_PATH_MAX) return -ENAMETOOLONG;
  ea__ckpt_svc *s = calloc(1, sizeof *s);
  if (!s) return -ENOMEM;
  s->loop = loop;
  snprintf(s->dir, sizeof s->dir, "%s", o->dir);
  s->io_flags = o->io_flags;
  s->self = o->self;
  s->cb = *cb;
  s->ctx = ctx;
  int rc = uv_timer_init(loop, &s->handle);
  if (rc) {
    free(s);
    return rc;
  }
  s->handle.data = s;
  *out = s;
  return 0;
}

int ea__ckpt_svc_on_worker(ea__ckpt_svc *s, uint32_t local, const ea_ipc_msg *m) {
  if (s->closing) return -ESHUTDOWN;
  if (m->type != EA_IPC_CKPT_STAGED && m->type != EA_IPC_CKPT_SKIPPED) return -EINVAL;
  job *j = calloc(1, sizeof *j);
  if (!j) return -ENOMEM;
  j->svc = s;
  j->local = local;
  j->fd = -1;
  j->gen = m->gen;
  j->step = m->step;
  j->rank = m->rank;
  j->world = m->world;
  if (m->type == EA_IPC_CKPT_SKIPPED) {
    j->rc = -EAGAIN;
    j->fail_kind = EA__CKPT_FAIL_SKIPPED;
    svc_seterr(j, "rank %u skipped it: %s", m->rank, m->reason);
  } else {
    s->st.staged++;
    j->offset = m->offset;
    j->length = m->length;
    j->total = m->total;
    j->hash = m->hash;
    j->stall_us = m->stall_us;
    j->wait_us = m->wait_us;
    j->answer = true;
    uint64_t off, len;
    ea_ckpt_shard_range(m->total, m->world, m->rank, &off, &len);
    if (m->world < 1 || m->world > EA_CKPT_MAX_WORLD || m->rank >= m->world || off != m->offset ||
        len != m->length) {
      j->rc = -EINVAL;
      svc_seterr(j,
                 "rank %u/%u staged [%" PRIu64 ", +%" PRIu64 ") of %" PRIu64
                 " bytes, not its shard range",
                 m->rank, m->world, m->offset, m->length, m->total);
    } else if (m->fd < 0) {
      j->rc = -EBADF;
      svc_seterr(j, "rank %u staged step %" PRIu64 " without its memfd", m->rank, m->step);
    } else if ((j->fd = fcntl(m->fd, F_DUPFD_CLOEXEC, 3)) < 0) {
      j->rc = -errno;
      svc_seterr(j, "dup of the staging memfd: %s", strerror(errno));
    }
    if (j->rc)
      j->fail_kind = EA__CKPT_FAIL_INVALID;
    else
      j->write = true;
  }
  /* A report-only job still goes through the pool, so that every callback
   * comes from the loop, later, never from inside this call. */
  j->req.data = j;
  int rc = uv_queue_work(s->loop, &j->req, svc_work, svc_after);
  if (rc) {
    if (j->fd >= 0) close(j->fd);
    free(j);
    return rc;
  }
  j->next = s->jobs;
  s->jobs = j;
  s->st.in_flight++;
  return 0;
}

void ea__ckpt_svc_stats_get(const ea__ckpt_svc *s, ea__ckpt_svc_stats *out) {
  *out = s->st;
}

static void svc_handle_closed(uv_handle_t *h) {
  ea__ckpt_svc *s = h->data;
  s->handle_closed = true;
  svc_maybe_closed(s);
}

void ea__ckpt_svc_close(ea__ckpt_svc *s, void (*closed)(void *ctx), void *ctx) {
  if (s->closing) return;
  s->closing = true;
  s->closed = closed;
  s->closed_ctx = ctx;
  for (job *j = s->jobs; j; j = j->next) {
    atomic_store(&j->progress.cancel, true);
    uv_cancel((uv_req_t *)&j->req); /* fails for one already running: it sees the flag */
  }
  uv_close((uv_handle_t *)&s->handle, svc_handle_closed);
}

/* ============================================================================
 * The controller side: the pure core
 * ========================================================================== */

/* Finished checkpoints remembered, so that a late or duplicate report for
 * one is recognised and ignored rather than starting it again: two per
 * pending slot is more than the reports that can still be on their way. */
#define DONE_RING (2 * EA__CKPT_PENDING_MAX)

typedef struct {
  bool used;
  bool complete;   /* all shards in: queued for commit, or committing */
  bool committing; /* its job is out */
  uint64_t seq;    /* completion order: commits go out in this order */
  uint64_t step, gen;
  uint32_t world, got;
  uint64_t total;
  ea_ckpt_manifest man;
  double t_first, max_write, max_stall, max_wait;
} pend;

struct ea__ckpt_core {
  char dir[EA_CKPT_PATH_MAX];
  uint32_t keep_last, max_pending;
  bool have_cluster;
  ea_ckpt_cluster cluster;
  uint64_t config_hash;
  bool have_dims;
  ea_model_dims dims;
  ea__ckpt_core_io io;
  pend p[EA__CKPT_PENDING_MAX];
  struct {
    uint64_t step, gen;
  } done[DONE_RING];
  uint32_t ndone, done_next;
  uint64_t seq;
  ea__ckpt_commit_job *out; /* the job io.commit has */
  ea__ckpt_core_stats st;
};

int ea__ckpt_core_new(const ea__ckpt_ctl_opts *o, const ea__ckpt_core_io *io, ea__ckpt_core **out) {
  *out = NULL;
  if (!o->dir || !*o->dir || o->keep_last < 1 || !io->commit) return -EINVAL;
  if (strlen(o->dir) >= EA_CKPT_PATH_MAX) return -ENAMETOOLONG;
  if (o->dims && ea_state_layout(o->dims, NULL, NULL)) return -EINVAL;
  ea__ckpt_core *c = calloc(1, sizeof *c);
  if (!c) return -ENOMEM;
  snprintf(c->dir, sizeof c->dir, "%s", o->dir);
  c->keep_last = o->keep_last;
  if (o->cluster) ea__ckpt_core_set_cluster(c, o->cluster);
  c->config_hash = o->config_hash;
  c->max_pending = o->max_pending ? o->max_pending : EA__CKPT_PENDING_DEFAULT;
  if (c->max_pending > EA__CKPT_PENDING_MAX) c->max_pending = EA__CKPT_PENDING_MAX;
  if (c->max_pending < 2) c->max_pending = 2; /* one committing, one collecting */
  if (o->dims) {
    c->have_dims = true;
    c->dims = *o->dims;
  }
  c->io = *io;
  *out = c;
  return 0;
}

static void emit(ea__ckpt_core *c, ea__ckpt_event *e) {
  ev_name(e);
  if (c->io.event) c->io.event(c->io.ctx, e);
}

static bool was_done(const ea__ckpt_core *c, uint64_t step, uint64_t gen) {
  for (uint32_t i = 0; i < c->ndone; i++)
    if (c->done[i].step == step && c->done[i].gen == gen) return true;
  return false;
}

static void mark_done(ea__ckpt_core *c, uint64_t step, uint64_t gen) {
  c->done[c->done_next].step = step;
  c->done[c->done_next].gen = gen;
  c->done_next = (c->done_next + 1) % DONE_RING;
  if (c->ndone < DONE_RING) c->ndone++;
}

void ea__ckpt_core_retry(ea__ckpt_core *c, uint64_t step, uint64_t gen) {
  if (c->st.have_last && c->st.last_step == step && c->st.last_gen == gen) return; /* committed */
  uint32_t n = 0;
  for (uint32_t i = 0; i < c->ndone; i++) /* compact the ring without the entry */
    if (!(c->done[i].step == step && c->done[i].gen == gen)) c->done[n++] = c->done[i];
  if (n == c->ndone) return;
  c->ndone = n;
  c->done_next = n % DONE_RING;
}

static void drop(ea__ckpt_core *c, pend *p) {
  mark_done(c, p->step, p->gen);
  ea_ckpt_manifest_close(&p->man);
  memset(p, 0, sizeof *p);
  c->st.pending--;
}

/* p will not be committed: say why, forget it. */
static void fail(ea__ckpt_core *c, pend *p, int error, bool alert, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void fail(ea__ckpt_core *c, pend *p, int error, bool alert, const char *fmt, ...) {
  ea__ckpt_event e = {.kind = EA__CKPT_EV_FAILED,
                      .alert = alert,
                      .step = p->step,
                      .gen = p->gen,
                      .shards = p->world,
                      .shards_in = p->got,
                      .error = error};
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e.why, sizeof e.why, fmt, ap);
  va_end(ap);
  c->st.failed++;
  drop(c, p);
  emit(c, &e);
}

static pend *find(ea__ckpt_core *c, uint64_t step, uint64_t gen) {
  for (uint32_t i = 0; i < c->max_pending; i++)
    if (c->p[i].used && c->p[i].step == step && c->p[i].gen == gen) return &c->p[i];
  return NULL;
}

/* A free slot, or the oldest still-collecting checkpoint given up for it. */
static pend *slot(ea__ckpt_core *c) {
  pend *oldest = NULL;
  for (uint32_t i = 0; i < c->max_pending; i++) {
    pend *p = &c->p[i];
    if (!p->used) return p;
    if (!p->complete &&
        (!oldest || p->step < oldest->step || (p->step == oldest->step && p->gen < oldest->gen)))
      oldest = p;
  }
  if (!oldest) return NULL;
  fail(c, oldest, -ENOBUFS, true,
       "given up: %u checkpoints in progress at once (%u of %u shards had arrived)", c->max_pending,
       oldest->got, oldest->world);
  return oldest;
}

static int add_tensors(const ea__ckpt_core *c, ea_ckpt_manifest *m) {
  uint64_t total = 0;
  size_t n = 0;
  if (c->have_dims && ea_state_layout(&c->dims, &total, &n) == 0 && total == m->total_bytes) {
    for (size_t i = 0; i < n; i++) {
      ea_state_tensor t;
      int rc = ea_state_layout_tensor(&c->dims, i, &t);
      if (rc) return rc;
      rc = ea_ckpt_manifest_add_tensor(m, t.name, t.dtype, t.ndim, t.shape, t.offset, t.bytes);
      if (rc) return rc;
    }
    return 0;
  }
  /* A user's worker (or a model this controller was not told about): the
   * state is one opaque byte range. */
  uint64_t shape[1] = {m->total_bytes};
  return ea_ckpt_manifest_add_tensor(m, "state", "u8", 1, shape, 0, m->total_bytes);
}

/* Hand the oldest completed checkpoint to io.commit, if none is out. */
static void start_next(ea__ckpt_core *c) {
  while (!c->out) {
    pend *next = NULL;
    for (uint32_t i = 0; i < c->max_pending; i++) {
      pend *p = &c->p[i];
      if (p->used && p->complete && !p->committing && (!next || p->seq < next->seq)) next = p;
    }
    if (!next) return;
    ea__ckpt_commit_job *j = calloc(1, sizeof *j);
    int rc = j ? add_tensors(c, &next->man) : -ENOMEM;
    if (rc) {
      free(j);
      fail(c, next, rc, true, "building the manifest: %s", strerror(-rc));
      continue;
    }
    next->man.config_hash = c->config_hash;
    j->step = next->step;
    j->gen = next->gen;
    snprintf(j->dir, sizeof j->dir, "%s", c->dir);
    j->keep_last = c->keep_last;
    j->have_cluster = c->have_cluster;
    j->cluster = c->cluster;
    j->manifest = next->man; /* moved: the job owns the arrays now */
    memset(&next->man, 0, sizeof next->man);
    for (uint32_t i = 0; i < c->max_pending; i++) {
      const pend *p = &c->p[i];
      if (!p->used || p == next) continue;
      if (ea_ckpt_dir_name(j->in_progress[j->n_in_progress], EA_CKPT_NAME_MAX, p->step, p->gen) ==
          0)
        j->n_in_progress++;
    }
    next->committing = true;
    c->out = j;
    c->io.commit(c->io.ctx, j);
  }
}

void ea__ckpt_core_recv(ea__ckpt_core *c, double now, const ea__ckpt_msg *m) {
  pend *p = find(c, m->step, m->gen);
  if (!p && was_done(c, m->step, m->gen)) {
    c->st.ignored++; /* the checkpoint is already committed or given up */
    return;
  }
  if (m->type == EA__CKPT_SHARD_FAILED) {
    c->st.reports++;
    const bool skipped = m->kind == EA__CKPT_FAIL_SKIPPED;
    if (p && p->complete) {
      c->st.ignored++; /* every shard is durable already: nothing to abandon */
      return;
    }
    if (!p) {
      /* The first word about it is a failure: it never starts. */
      ea__ckpt_event e = {.kind = EA__CKPT_EV_FAILED,
                          .alert = !skipped,
                          .step = m->step,
                          .gen = m->gen,
                          .shards = m->world,
                          .error = -(int)m->error};
      snprintf(e.why, sizeof e.why, "shard %u: %s", m->rank, m->message);
      c->st.failed++;
      mark_done(c, m->step, m->gen);
      emit(c, &e);
      return;
    }
    fail(c, p, -(int)m->error, !skipped, "shard %u: %s", m->rank, m->message);
    return;
  }
  if (m->type != EA__CKPT_SHARD_DURABLE) {
    c->st.ignored++;
    return;
  }
  c->st.reports++;
  if (!p) {
    p = slot(c);
    if (!p) {
      c->st.ignored++; /* every slot is committing: cannot happen with max_pending ≥ 2 */
      return;
    }
    if (ea_ckpt_manifest_init(&p->man, m->step, m->gen, m->world, m->total)) {
      c->st.ignored++;
      return;
    }
    p->used = true;
    p->step = m->step;
    p->gen = m->gen;
    p->world = m->world;
    p->total = m->total;
    p->t_first = now;
    c->st.pending++;
    ea__ckpt_event e = {.kind = EA__CKPT_EV_STARTED,
                        .step = m->step,
                        .gen = m->gen,
                        .shards = m->world,
                        .bytes = m->total};
    emit(c, &e);
  }
  if (p->complete) {
    c->st.ignored++; /* a duplicate of a report already counted */
    return;
  }
  if (m->world != p->world || m->total != p->total) {
    fail(c, p, -EPROTO, true,
         "shard %u reports world %u and %" PRIu64 " bytes, others world %u and %" PRIu64, m->rank,
         m->world, m->total, p->world, p->total);
    return;
  }
  ea_ckpt_shard *sh = &p->man.shards[m->rank];
  if (sh->set) {
    if (sh->hash == m->hash) {
      c->st.ignored++; /* the same report twice */
      return;
    }
    fail(c, p, -EPROTO, true, "shard %u reported twice with different hashes", m->rank);
    return;
  }
  ea_ckpt_write_result *w = calloc(1, sizeof *w);
  if (!w) {
    fail(c, p, -ENOMEM, true, "out of memory");
    return;
  }
  w->bytes = m->length;
  w->hash = m->hash;
  w->block_size = m->block_size;
  w->n_blocks = m->n_blocks;
  memcpy(w->block_hash, m->block_hash, sizeof w->block_hash);
  int rc = ea_ckpt_manifest_set_shard(&p->man, m->rank, w);
  free(w);
  if (rc) {
    fail(c, p, rc, true, "shard %u: does not fit the manifest", m->rank);
    return;
  }
  p->got++;
  if (m->write_us * 1e-6 > p->max_write) p->max_write = m->write_us * 1e-6;
  if (m->stall_us * 1e-6 > p->max_stall) p->max_stall = m->stall_us * 1e-6;
  if (m->wait_us * 1e-6 > p->max_wait) p->max_wait = m->wait_us * 1e-6;
  ea__ckpt_event e = {.kind = EA__CKPT_EV_SHARD_DURABLE,
                      .step = m->step,
                      .gen = m->gen,
                      .rank = m->rank,
                      .world = m->world,
                      .shards = p->world,
                      .shards_in = p->got,
                      .bytes = m->length,
                      .seconds = m->write_us * 1e-6,
                      .stall_seconds = m->stall_us * 1e-6,
                      .wait_seconds = m->wait_us * 1e-6};
  emit(c, &e);
  if (p->got == p->world) {
    p->complete = true;
    p->seq = ++c->seq;
    start_next(c);
  }
}

void ea__ckpt_core_committed(ea__ckpt_core *c, double now, ea__ckpt_commit_job *j) {
  if (j != c->out) return; /* not ours: a caller bug, and nothing to free safely */
  c->out = NULL;
  pend *p = find(c, j->step, j->gen);
  ea__ckpt_event e = {.step = j->step,
                      .gen = j->gen,
                      .shards = j->manifest.world_size,
                      .shards_in = j->manifest.world_size,
                      .bytes = j->manifest.total_bytes,
                      .commit_seconds = j->seconds};
  if (p) {
    e.seconds = now - p->t_first;
    e.write_seconds = p->max_write;
    e.stall_seconds = p->max_stall;
    e.wait_seconds = p->max_wait;
  }
  e.retain_error = j->retain_rc;
  e.retained = j->retained;
  if (j->rc == 0) {
    e.kind = EA__CKPT_EV_COMMITTED;
    e.latest_moved = j->latest_moved;
    e.cluster_claimed = j->cluster_claimed;
    e.cluster_adopted = j->cluster_adopted;
    if (j->retain_rc) snprintf(e.why, sizeof e.why, "retention: %.490s", j->err);
    c->st.committed++;
    c->st.have_last = true;
    c->st.last_step = j->step;
    c->st.last_gen = j->gen;
  } else if (j->rc == -ESTALE) {
    e.kind = EA__CKPT_EV_STALE;
    e.alert = true;
    e.error = j->rc;
    snprintf(e.why, sizeof e.why, "a newer generation already committed: %.460s", j->err);
    c->st.stale++;
  } else {
    e.kind = EA__CKPT_EV_FAILED;
    e.alert = true;
    e.error = j->rc;
    /* ea_ckpt_commit checks every shard file before it writes the
     * manifest; ENOENT there is a shard some rank reported durable that
     * this node cannot see. */
    e.shard_unseen = j->rc == -ENOENT;
    snprintf(e.why, sizeof e.why, "commit: %.490s", j->err);
    c->st.failed++;
  }
  if (p) drop(c, p);
  ea_ckpt_manifest_close(&j->manifest);
  const uint64_t cs = j->step, cg = j->gen;
  const bool ok = j->rc == 0;
  free(j);
  emit(c, &e);
  if (ok) {
    /* Collections older than what just committed cannot matter any more
     * (and one of an older generation would be fenced off): give them up
     * now rather than wait for reports that may never come. */
    for (uint32_t i = 0; i < c->max_pending; i++) {
      pend *q = &c->p[i];
      if (q->used && !q->complete && (q->step < cs || q->gen < cg))
        fail(c, q, -ECANCELED, q->got > 0,
             "superseded by step-%" PRIu64 ".gen-%" PRIu64 " with %u of %u shards durable", cs, cg,
             q->got, q->world);
    }
  }
  start_next(c);
}

void ea__ckpt_core_stats_get(const ea__ckpt_core *c, ea__ckpt_core_stats *out) {
  *out = c->st;
  out->committing = 0;
  for (uint32_t i = 0; i < c->max_pending; i++)
    if (c->p[i].used && c->p[i].complete) out->committing++;
}

void ea__ckpt_core_set_cluster(ea__ckpt_core *c, const ea_ckpt_cluster *cl) {
  c->have_cluster = cl != NULL;
  if (cl) c->cluster = *cl;
}

void ea__ckpt_core_free(ea__ckpt_core *c) {
  if (!c) return;
  for (uint32_t i = 0; i < EA__CKPT_PENDING_MAX; i++) ea_ckpt_manifest_close(&c->p[i].man);
  if (c->out) {
    ea_ckpt_manifest_close(&c->out->manifest);
    free(c->out);
  }
  free(c);
}

void ea__ckpt_commit_run(ea__ckpt_commit_job *j) {
  const double t0 = mono_s();
  const ea_ckpt_manifest *m = &j->manifest;
  char name[EA_CKPT_NAME_MAX], path[EA_CKPT_PATH_MAX + EA_CKPT_NAME_MAX + 2];
  if (m->n_tensors == 1 && strcmp(m->tensors[0].name, "state") == 0 &&
      strcmp(m->tensors[0].dtype, "u8") == 0 &&
      ea_ckpt_dir_name(name, sizeof name, j->step, j->gen) == 0) {
    snprintf(path, sizeof path, "%s/%s", j->dir, name);
    j->table_tried = true;
    j->table_rc = ea__ckpt_state_table(path, &j->manifest, j->table_why, sizeof j->table_why);
  }
  /* Whose directory is it?  In another cluster's nothing is committed and
   * nothing deleted (retention neither): that cluster's checkpoints are its
   * own.  An unreadable CLUSTER is refused the same way.  A directory
   * without one is claimed after the commit, so that the first commit holds
   * the lock no later than before (a read here, the write afterwards). */
  bool claim = false, legacy = false;
  if (j->have_cluster) {
    int rc = ea_ckpt_cluster_check(j->dir, &j->cluster, "commit into", j->err, sizeof j->err);
    if (rc < 0) {
      j->rc = rc;
      j->seconds = mono_s() - t0;
      return;
    }
    claim = rc == 1;
    legacy = claim && ea_ckpt_cluster_legacy(j->dir);
  }
  j->rc = ea_ckpt_commit(j->dir, &j->manifest, &j->latest_moved, j->err, sizeof j->err);
  if (claim && j->rc == 0) {
    char cerr[sizeof j->err];
    int rc = ea_ckpt_cluster_claim(j->dir, &j->cluster, &j->cluster_claimed, cerr, sizeof cerr);
    if (rc < 0) { /* lost a race for a new directory: no retention in it */
      j->rc = rc == -ENOENT ? -EAGAIN : rc; /* (CLUSTER vanished mid-claim: try again) */
      snprintf(j->err, sizeof j->err, "%s", cerr);
      j->seconds = mono_s() - t0;
      return;
    }
    j->cluster_adopted = j->cluster_claimed && legacy;
  }
  /* Retention runs after a failed commit too: commits that keep failing
   * (a full disk, a fence, a shard that never arrives) would otherwise leave
   * one step directory per save interval until the disk is full.  Not after
   * a lock timeout: retention would wait for the same frozen holder again,
   * doubling the stall, and the lock's holder cleans up itself. */
  if (j->rc != -ETIMEDOUT) {
    const char *names[EA__CKPT_PENDING_MAX];
    for (size_t i = 0; i < j->n_in_progress; i++) names[i] = j->in_progress[i];
    char rerr[sizeof j->err];
    j->retain_rc = ea_ckpt_retain_after(j->dir, j->keep_last, j->step, j->gen, names,
                                        j->n_in_progress, &j->retained, rerr, sizeof rerr);
    /* a commit's own error is the one that matters; a successful commit
     * reports retention's */
    if (j->retain_rc && j->rc == 0) snprintf(j->err, sizeof j->err, "%s", rerr);
  }
  j->seconds = mono_s() - t0;
}

/* ============================================================================
 * The controller side: on a libuv loop
 * ========================================================================== */

struct ea__ckpt_ctl {
  uv_loop_t *loop;
  ea__ckpt_core *core;
  ea__ckpt_ctl_cbs cb;
  void *ctx;
  uv_work_t req;
  ea__ckpt_commit_job *job; /* on the pool, or waiting for the deferral below */
  bool busy;                /* req is queued or running */
  uv_timer_t handle;        /* defers a failed queueing; makes close asynchronous */
  bool closing, handle_closed;
  void (*closed)(void *);
  void *closed_ctx;
};

static void ctl_maybe_closed(ea__ckpt_ctl *c) {
  if (!c->closing || c->busy || !c->handle_closed) return;
  void (*closed)(void *) = c->closed;
  void *ctx = c->closed_ctx;
  ea__ckpt_core_free(c->core);
  free(c);
  if (closed) closed(ctx);
}

static void ctl_work(uv_work_t *req) {
  ea__ckpt_ctl *c = req->data;
  ea__ckpt_commit_run(c->job);
}

static void ctl_after(uv_work_t *req, int status) {
  ea__ckpt_ctl *c = req->data;
  c->busy = false;
  ea__ckpt_commit_job *j = c->job;
  c->job = NULL;
  if (status == UV_ECANCELED) {
    j->rc = -ECANCELED;
    snprintf(j->err, sizeof j->err, "cancelled: the controller is closing");
  }
  if (c->closing) {
    ctl_maybe_closed(c); /* the core frees the job */
    return;
  }
  if (j->table_tried && j->table_rc != -ENOENT)
    ea_log(j->table_rc ? EA_LOG_WARN : EA_LOG_DEBUG, "ckpt",
           "step %" PRIu64 " gen %" PRIu64 ": %s%s", j->step, j->gen, j->table_why,
           j->table_rc ? "; the manifest lists the state as one opaque tensor" : "");
  ea__ckpt_core_committed(c->core, mono_s(), j);
}

static void ctl_deferred(uv_timer_t *t) {
  ea__ckpt_ctl *c = t->data;
  ea__ckpt_commit_job *j = c->job;
  c->job = NULL;
  if (j) ea__ckpt_core_committed(c->core, mono_s(), j);
}

static void ctl_commit(void *ctx, ea__ckpt_commit_job *j) {
  ea__ckpt_ctl *c = ctx;
  c->job = j;
  if (c->closing) return; /* the core frees it */
  c->req.data = c;
  int rc = uv_queue_work(c->loop, &c->req, ctl_work, ctl_after);
  if (rc == 0) {
    c->busy = true;
    return;
  }
  j->rc = rc;
  snprintf(j->err, sizeof j->err, "uv_queue_work: %s", uv_strerror(rc));
  uv_timer_start(&c->handle, ctl_deferred, 0, 0);
}

static void ctl_event(void *ctx, const ea__ckpt_event *e) {
  ea__ckpt_ctl *c = ctx;
  if (!c->closing && c->cb.event) c->cb.event(c->ctx, e);
}

int ea__ckpt_ctl_new(uv_loop_t *loop, const ea__ckpt_ctl_opts *o, const ea__ckpt_ctl_cbs *cb,
                     void *ctx, ea__ckpt_ctl **out) {
  *out = NULL;
  ea__ckpt_ctl *c = calloc(1, sizeof *c);
  if (!c) return -ENOMEM;
  c->loop = loop;
  if (cb) c->cb = *cb;
  c->ctx = ctx;
  ea__ckpt_core_io io = {.ctx = c, .commit = ctl_commit, .event = ctl_event};
  int rc = ea__ckpt_core_new(o, &io, &c->core);
  if (rc == 0) rc = uv_timer_init(loop, &c->handle);
  if (rc) {
    ea__ckpt_core_free(c->core);
    free(c);
    return rc;
  }
  c->handle.data = c;
  *out = c;
  return 0;
}

void ea__ckpt_ctl_recv(ea__ckpt_ctl *c, const ea__ckpt_msg *m) {
  if (c->closing) return;
  ea__ckpt_core_recv(c->core, mono_s(), m);
}

void ea__ckpt_ctl_set_cluster(ea__ckpt_ctl *c, const ea_ckpt_cluster *cl) {
  if (!c->closing) ea__ckpt_core_set_cluster(c->core, cl);
}

void ea__ckpt_ctl_retry(ea__ckpt_ctl *c, uint64_t step, uint64_t gen) {
  if (!c->closing) ea__ckpt_core_retry(c->core, step, gen);
}

void ea__ckpt_ctl_stats_get(const ea__ckpt_ctl *c, ea__ckpt_core_stats *out) {
  ea__ckpt_core_stats_get(c->core, out);
}

static void ctl_handle_closed(uv_handle_t *h) {
  ea__ckpt_ctl *c = h->data;
  c->handle_closed = true;
  ctl_maybe_closed(c);
}

void ea__ckpt_ctl_close(ea__ckpt_ctl *c, void (*closed)(void *ctx), void *ctx) {
  if (c->closing) return;
  c->closing = true;
  c->closed = closed;
  c->closed_ctx = ctx;
  if (c->busy) uv_cancel((uv_req_t *)&c->req); /* only if not started: a commit is never cut */
  uv_close((uv_handle_t *)&c->handle, ctl_handle_closed);
}
