/* ckpt_ctl.c — the controller's checkpoint commit on a libuv loop: the
 * commit job itself (ea__ckpt_commit_run: CLUSTER check and claim, the
 * manifest commit, retention — blocking, so it runs on libuv's thread pool)
 * and ea__ckpt_ctl, which owns an ea__ckpt_core (ckpt_core.c, pure) and
 * feeds it the clock and the job's results, one job at a time.
 */
#include "ckpt_svc.h"

#include "ea_log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double mono_s(void) {
  return (double)uv_hrtime() * 1e-9;
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
