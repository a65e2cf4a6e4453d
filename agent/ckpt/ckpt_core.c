/* ckpt_core.c — the controller's pure checkpoint commit core
 * (ea__ckpt_core) and the events the live flow reports (both sides use
 * them).  Pure: no loop, no clock, no disk.  Shard reports come in with the
 * time as an argument; when all W shards of a (step, generation) are
 * durable, a commit goes out as an ea__ckpt_commit_job through io.commit
 * and its result comes back through ea__ckpt_core_committed.  ckpt_ctl.c
 * runs the job on libuv's thread pool; the tests drive this file directly
 * (tests/unit/test_ckpt_flow.c).  Why a checkpoint is dropped rather than
 * completed is in ckpt_svc.c's opening comment.
 */
#include "ckpt_svc.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

void ea__ckpt_event_name(ea__ckpt_event *e) {
  if (ea_ckpt_dir_name(e->name, sizeof e->name, e->step, e->gen)) e->name[0] = 0;
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
  ea__ckpt_event_name(e);
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
