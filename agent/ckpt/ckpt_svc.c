/* ckpt_svc.c — the agent side of the live checkpoint flow: a worker's
 * staged shard becomes a file (ea__ckpt_svc, on every agent).  The
 * controller's side is two files: ckpt_core.c (the pure commit core) and
 * ckpt_ctl.c (the commit job and the core's libuv glue).  ckpt_svc.h draws
 * the path and says where the agent hooks in; docs/checkpoints.md ("The
 * live flow") explains the choices.
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
#include <unistd.h>

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
  ea__ckpt_event_name(&ev);
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
