/* Checkpoint glue: the live flow of docs/checkpoints.md wired to the
 * running agent.  Every agent runs an ea__ckpt_svc that turns its workers'
 * staged shards into files off the loop and reports each to the
 * controller; the controller (only while elected: ea_rdzv_election names
 * it) runs an ea__ckpt_ctl that commits a MANIFEST once all W shards of a
 * step are durable.  Reports travel on the control channel next to the
 * rendezvous messages (ckpt_wire.c's codec, told apart by its type byte).
 * This file owns what `status` shows about checkpoints (a->ck), the log
 * lines and alerts of the flow, DIR/LATEST as last read, and the two
 * start-up decisions about the checkpoint directory (where it is; the
 * generation floor it implies).
 *
 * The service's and the committer's callbacks only record and log (the
 * committer's may run from inside ea__ckpt_ctl_recv); LATEST is read on
 * the thread pool, one read at a time.
 */
#include "agent_int.h"

#include "ea_ckpt.h"
#include "ea_log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
  uv_work_t w;
  ea__agent *a;
  char name[EA_CKPT_NAME_MAX];
  int rc;
  int cluster_rc; /* DIR/CLUSTER, read with LATEST (ident.c compares it) */
  ea_ckpt_cluster cluster;
} latest_job;

static void ckpt_read_latest(ea__agent *a);

/* One log line per event.  Alerts — a shard that could not be written, a
 * checkpoint given up for a reason operators must hear about, a commit the
 * generation fence refused — go out at error level under the event name
 * "alert", which is what log-based alerting keys on.  Per-shard lines are
 * debug: a job of W ranks would otherwise log W lines per checkpoint. */
static void ckpt_log_event(ea__agent *a, const ea__ckpt_event *e) {
  char line[1024];
  ea__ckpt_event_format(e, line, sizeof line);
  /* A shard another node reported durable is not in our view of
   * checkpoint.dir: the directory is per node (the default
   * DATA_DIR/checkpoints) or not the same share.  Every commit of the job
   * will fail the same way, so it is said once, plainly, and each alert
   * names the cause instead of the bare `stat …: No such file`. */
  if (e->kind == EA__CKPT_EV_FAILED && e->shard_unseen && a->run.nnodes > 1) {
    if (!a->ck.unshared_said) {
      a->ck.unshared_said = true;
      ea_log(
          EA_LOG_ERROR, "ckpt",
          "checkpoint.dir %s is not shared between the nodes: shards that other nodes wrote "
          "and reported durable are not in it here, so no checkpoint of this %u-node job can "
          "be committed. Give every node the same directory on shared storage (NFS, a "
          "ReadWriteMany volume) as checkpoint.dir%s; `elastic-agent preflight --join SEEDS` "
          "checks it",
          a->ckpt_dir, a->run.nnodes,
          a->o->cfg.checkpoint.dir[0] ? "" : " (the default, DATA_DIR/checkpoints, is per node)");
    }
    char why[EA_PATH_MAX + 600];
    snprintf(why, sizeof why,
             "%s not committed: checkpoint.dir %s is not shared between the nodes (%.400s)",
             e->name, a->ckpt_dir, e->why + (strncmp(e->why, "commit: ", 8) == 0 ? 8 : 0));
    if (a->o->cfg.observability.alert_on_checkpoint_failure)
      ea__agent_alert(a, EA__ALERT_CHECKPOINT_FAILED, EA__SEV_CRITICAL, "", "checkpoint %s", why);
    else
      ea_log(EA_LOG_WARN, "ckpt", "%s", why);
    return;
  }
  if (e->alert && a->o->cfg.observability.alert_on_checkpoint_failure) {
    ea__agent_alert(a, EA__ALERT_CHECKPOINT_FAILED, EA__SEV_CRITICAL, "", "checkpoint %s", line);
    return;
  }
  if (e->alert) { /* observability.alert_on_checkpoint_failure: false */
    ea_log(EA_LOG_WARN, "ckpt", "%s", line);
    return;
  }
  ea_log_level lv = EA_LOG_INFO;
  if (e->kind == EA__CKPT_EV_SHARD_WRITTEN || e->kind == EA__CKPT_EV_SHARD_DURABLE)
    lv = EA_LOG_DEBUG;
  else if (e->kind == EA__CKPT_EV_FAILED)
    lv = EA_LOG_WARN; /* given up without an alert: a rank skipped it (busy policy) */
  ea_log(lv, "ckpt", "%s", line);
}

/* The rendezvous plans with the newest committed checkpoint known (a live
 * state older than it is not a sync source: ea_rdzv_set_latest_ckpt) —
 * only when generations without a sync load the newest checkpoint. */
static void latest_to_rdzv(ea__agent *a) {
  uint64_t step, gen;
  if (!a->rdzv || !a->o->cfg.checkpoint.resume_from_last || !ea__agent_ckpt_newest(a, &step, &gen))
    return;
  ea__agent_do1(a, (ea__intent){.kind = EA__DO_LATEST_CKPT, .u64 = gen});
}

static void latest_work(uv_work_t *w) {
  latest_job *j = (latest_job *)w;
  j->rc = ea_ckpt_read_latest(j->a->ckpt_dir, j->name, sizeof j->name);
  char path[EA_PATH_MAX + 16], err[EA_PATH_MAX + 200];
  snprintf(path, sizeof path, "%s/%s", j->a->ckpt_dir, EA_CKPT_CLUSTER_FILE);
  j->cluster_rc = ea_ckpt_cluster_load(path, &j->cluster, err, sizeof err);
}

static void latest_after(uv_work_t *w, int status) {
  latest_job *j = (latest_job *)w;
  ea__agent *a = j->a;
  a->ck.latest_busy = false;
  if (status == 0 && j->rc == 0) memcpy(a->ck.latest, j->name, sizeof a->ck.latest);
  if (status == 0) ea__ident_dir_seen(a, j->cluster_rc, &j->cluster);
  free(j);
  latest_to_rdzv(a);
  ea__agent_job_sync(a); /* the job may have ended while we were cut off */
  if (a->ck.latest_again && a->phase < EA__PHASE_CLOSING) ckpt_read_latest(a);
}

/* Re-read DIR/LATEST on the thread pool (a shared file system can take
 * milliseconds to answer; the loop carries gossip).  At most one read is
 * out; a request meanwhile runs one more afterwards. */
static void ckpt_read_latest(ea__agent *a) {
  if (a->ck.latest_busy) {
    a->ck.latest_again = true;
    return;
  }
  a->ck.latest_again = false;
  latest_job *j = calloc(1, sizeof *j);
  if (!j) return;
  j->a = a;
  if (uv_queue_work(&a->loop, &j->w, latest_work, latest_after) < 0) {
    free(j);
    return;
  }
  a->ck.latest_busy = true;
}

void ea__agent_ckpt_tick(ea__agent *a) {
  if (!a->ckpt_svc || !a->rdzv) return;
  /* Also while every local worker is done and the job waits for its final
   * checkpoint: one that resumed a checkpoint already at train.steps has
   * nothing to stage, and that checkpoint is the final one. */
  bool done = a->wpn > 0;
  for (uint32_t k = 0; k < a->wpn; k++) done = done && a->w[k].state == EA__W_DONE;
  if (ea_rdzv_running(a->rdzv) && !done) return;
  uint64_t now = ea__agent_mono_ms();
  if (now - a->ck.latest_read_ms < 1000) return;
  a->ck.latest_read_ms = now;
  ckpt_read_latest(a);
}

/* svc.reply: CKPT_DONE to the worker (a restarted worker ignores one for
 * a shard it never staged). */
static void ckpt_reply(void *ctx, uint32_t local, const ea_ipc_msg *m) {
  ea__agent *a = ctx;
  if (!a->sup) return;
  int rc = ea__sup_send(a->sup, local, m);
  if (rc && rc != -ESRCH)
    ea_log(EA_LOG_WARN, "ckpt", "worker %u: cannot send ckpt_done for step %" PRIu64 ": %s", local,
           m->step, strerror(-rc));
}

static void ckpt_report_dropped(ea__agent *a, const ea__ckpt_msg *m, const char *why) {
  a->ck.reports_dropped++;
  ea_log(EA_LOG_WARN, "ckpt",
         "report of shard %u of step-%" PRIu64 ".gen-%" PRIu64
         " dropped: %s (that checkpoint "
         "cannot complete; a newer one supersedes it)",
         m->rank, m->step, m->gen, why);
}

/* svc.report: to the controller — ours directly, another over the control
 * channel.  Best effort like every control message: a lost report leaves
 * its checkpoint incomplete until a newer one commits. */
static void ckpt_report(void *ctx, const ea__ckpt_msg *m) {
  ea__agent *a = ctx;
  if (a->phase >= EA__PHASE_LEAVING || !a->tr) return;
  const ea_election *el = ea_rdzv_election(a->rdzv);
  if (!el || !el->have) {
    ckpt_report_dropped(a, m, "no controller");
    return;
  }
  if (ea_node_id_cmp(&el->controller, &a->id) == 0) {
    if (!a->ckpt_ctl) {
      ckpt_report_dropped(a, m, "this node is controller but cannot commit");
      return;
    }
    a->ck.reports_local++;
    ea__ckpt_ctl_recv(a->ckpt_ctl, m);
    return;
  }
  const ea_member *c = ea__agent_find_member(a, &el->controller);
  uint8_t buf[EA__CKPT_WIRE_MAX];
  size_t len = 0;
  int rc = c && a->ctl ? ea__ckpt_encode(m, buf, sizeof buf, &len) : -ENOENT;
  if (rc) {
    ckpt_report_dropped(
        a, m, rc == -ENOENT ? "the controller is not in the member table" : "it does not encode");
    return;
  }
  ea__ctl_send_bytes(a->ctl, &c->id, &c->meta.control, buf, len);
  a->ck.reports_sent++;
}

/* storage_timeout: a shard write (subject "shard") or a commit (subject
 * "commit") slower than checkpoint.timeout_seconds fires; the next one of
 * the same kind within it resolves. */
static void storage_check(ea__agent *a, const char *what, const char *name, double seconds) {
  uint32_t limit = a->o->cfg.checkpoint.timeout_seconds;
  if (seconds > (double)limit)
    ea__agent_alert(a, EA__ALERT_STORAGE_TIMEOUT, EA__SEV_WARNING, what,
                    "storage timeout: %s of %s took %.1f s (checkpoint.timeout_seconds %u) in %s",
                    what, name, seconds, limit, a->ckpt_dir);
  else
    ea__agent_alert_resolve(a, EA__ALERT_STORAGE_TIMEOUT, what,
                            "storage timeout resolved: %s of %s took %.1f s", what, name, seconds);
}

/* svc.event: this node's shards. */
static void ckpt_svc_event(void *ctx, const ea__ckpt_event *e) {
  ea__agent *a = ctx;
  if (e->kind == EA__CKPT_EV_SHARD_WRITTEN) {
    a->ck.shard_write_s = e->seconds;
    a->ck.shard_stall_s = e->stall_seconds;
    storage_check(a, "shard write", e->name, e->seconds);
    ckpt_read_latest(a);
  }
  ckpt_log_event(a, e);
}

/* Whether trying a failed checkpoint again can succeed: storage that is
 * full, slow, busy or briefly gone can recover; a directory that cannot be
 * created or written for want of permission, or is not what it should be,
 * will not without an operator (the final checkpoint is retried only for
 * the first kind: ea__job_ckpt_failed). */
static bool retry_can_mend(int error) {
  switch (-error) {
    case ENOSPC:
    case EDQUOT:
    case EIO:
    case ETIMEDOUT:
    case EAGAIN:
    case EBUSY:
    case EINTR:
    case ENOMEM:
    case ENOBUFS:
    case ESTALE:
    case ECONNRESET:
    case EHOSTUNREACH:
    case ENOLCK:
      return true;
    default:
      return false;
  }
}

/* ctl.event: checkpoints of the job, while we are controller.  May run
 * from inside ea__ckpt_ctl_recv: records and logs only. */
static void ckpt_ctl_event(void *ctx, const ea__ckpt_event *e) {
  ea__agent *a = ctx;
  ea__agent_ck *k = &a->ck;
  switch (e->kind) {
    case EA__CKPT_EV_STARTED:
      k->started++;
      break;
    case EA__CKPT_EV_COMMITTED:
      if (e->cluster_claimed) {
        ea__ident_dir_seen(a, 0, &a->ident.c);
        if (e->cluster_adopted)
          ea_log(EA_LOG_WARN, "cluster",
                 "checkpoint.dir %s held checkpoints but no cluster identity (written before "
                 "identities existed): adopted by this cluster %s (%s/%s written)",
                 a->ckpt_dir, a->ident.str, a->ckpt_dir, EA_CKPT_CLUSTER_FILE);
        else
          ea_log(EA_LOG_INFO, "cluster", "checkpoint.dir %s now belongs to cluster %s (%s/%s)",
                 a->ckpt_dir, a->ident.str, a->ckpt_dir, EA_CKPT_CLUSTER_FILE);
      }
      k->committed++;
      k->bytes += e->bytes;
      k->have_last = true;
      k->last_step = e->step;
      k->last_gen = e->gen;
      k->last_persist_s = e->seconds;
      ea__agent_metrics_persist(a, e->seconds);
      k->last_write_s = e->write_seconds;
      k->last_commit_s = e->commit_seconds;
      k->last_stall_s = e->stall_seconds;
      k->last_wait_s = e->wait_seconds;
      storage_check(a, "commit", e->name, e->commit_seconds);
      if (a->o->smoke) ea__smoke_committed(a->o->smoke, e->name, e->bytes, e->seconds);
      if (e->latest_moved) memcpy(k->latest, e->name, sizeof k->latest);
      latest_to_rdzv(a);
      /* The built-in job may be over now (its final checkpoint): the job
       * module judges and, as controller, tells the others (no call back
       * into the checkpoint code). */
      ea__agent_job_sync(a);
      break;
    case EA__CKPT_EV_FAILED:
    case EA__CKPT_EV_STALE:
      /* A rank that skipped (busy policy) reports EAGAIN, with no alert. */
      if (e->kind == EA__CKPT_EV_STALE)
        k->stale++;
      else if (!e->alert && e->error == -EAGAIN)
        k->skipped++;
      else
        k->failed++;
      if (e->alert) snprintf(k->last_error, sizeof k->last_error, "%s: %.440s", e->name, e->why);
      if (e->error == -EXDEV) { /* another cluster's directory: counted and alerted once there */
        ea__ident_refusal(a, e->why);
        ea__agent_job_ckpt_failed(a, e->step, e->why, false);
        return;
      }
      if (e->kind == EA__CKPT_EV_FAILED)
        ea__agent_job_ckpt_failed(a, e->step, e->why,
                                  !e->shard_unseen && !a->o->smoke && retry_can_mend(e->error));
      break;
    default:
      break;
  }
  ea__agent_preempt_ckpt_event(a, e); /* the checkpoint before a mass preemption */
  ckpt_log_event(a, e);
}

/* Own an ea__ckpt_ctl exactly while the election names us.  A new
 * controller starts with nothing collected: checkpoints whose reports went
 * to the old one are given up (a newer one supersedes them, retention
 * removes their files). */
void ea__agent_ckpt_ctl_update(ea__agent *a) {
  const ea_election *el = ea_rdzv_election(a->rdzv);
  bool want = a->phase < EA__PHASE_LEAVING && el && el->have &&
              ea_node_id_cmp(&el->controller, &a->id) == 0;
  if (want && !a->ckpt_ctl) {
    ea__ckpt_ctl_opts o = {.dir = a->ckpt_dir,
                           .cluster = a->ident.have ? &a->ident.c : NULL,
                           .keep_last = a->o->cfg.checkpoint.keep_last,
                           .config_hash = ea_config_hash(&a->o->cfg),
                           .dims = a->have_dims ? &a->dims : NULL};
    ea__ckpt_ctl_cbs cb = {.event = ckpt_ctl_event};
    int rc = ea__ckpt_ctl_new(&a->loop, &o, &cb, a, &a->ckpt_ctl);
    if (rc)
      ea_log(EA_LOG_ERROR, "ckpt", "cannot start committing checkpoints in %s: %s", a->ckpt_dir,
             strerror(-rc));
    else
      ea_log(EA_LOG_INFO, "ckpt", "controller: this node commits checkpoints in %s (keep_last %u)",
             a->ckpt_dir, a->o->cfg.checkpoint.keep_last);
  } else if (!want && a->ckpt_ctl) {
    ea__ckpt_ctl_close(a->ckpt_ctl, NULL, NULL);
    a->ckpt_ctl = NULL;
    if (a->phase < EA__PHASE_LEAVING)
      ea_log(EA_LOG_INFO, "ckpt", "no longer the controller: no longer committing checkpoints");
  }
}

/* Control-channel frames of the checkpoint codec (the frame hook of
 * ea__ctl): a report for the controller. */
bool ea__agent_ckpt_frame(void *ctx, const uint8_t *plain, size_t len) {
  ea__agent *a = ctx;
  if (!ea__ckpt_wire_is(plain, len)) return false;
  ea__ckpt_msg m;
  const char *why = "?";
  if (ea__ckpt_decode(plain, len, &m, &why) != 0) {
    a->ck.reports_bad++;
    ea_log(EA_LOG_WARN, "ckpt", "malformed checkpoint report dropped: %s", why);
    return true;
  }
  if (a->phase >= EA__PHASE_LEAVING) return true;
  if (m.type == EA__CKPT_SAVE_NOW) { /* controller → member (preempt.c) */
    ea__agent_preempt_msg(a, &m);
    return true;
  }
  if (!a->ckpt_ctl) {
    /* Sent to us as controller, and we are not (any more). */
    a->ck.reports_dropped++;
    ea_log(EA_LOG_DEBUG, "ckpt",
           "report of shard %u of step-%" PRIu64 ".gen-%" PRIu64 " ignored: not the controller",
           m.rank, m.step, m.gen);
    return true;
  }
  a->ck.reports_in++;
  ea__ckpt_ctl_recv(a->ckpt_ctl, &m);
  return true;
}

/* A worker staged or skipped a checkpoint.  One the service cannot take is
 * still answered, so the worker's staging buffer is free again. */
void ea__agent_ckpt_from_worker(ea__agent *a, uint32_t k, const ea_ipc_msg *m) {
  int rc = a->ckpt_svc ? ea__ckpt_svc_on_worker(a->ckpt_svc, k, m) : -ESHUTDOWN;
  if (rc == 0) return;
  ea_log(EA_LOG_WARN, "ckpt", "worker %u: checkpoint of step %" PRIu64 " not taken: %s", k, m->step,
         strerror(-rc));
  if ((int)m->type != EA_IPC_CKPT_STAGED || !a->sup) return;
  ea_ipc_msg *d = a->ipc;
  ea_ipc_msg_init(d, EA_IPC_CKPT_DONE);
  d->gen = m->gen;
  d->step = m->step;
  d->status = rc;
  snprintf(d->message, sizeof d->message, "the agent cannot write it: %s", strerror(-rc));
  ea__sup_send(a->sup, k, d);
}

/* The sync root's worker loaded a checkpoint (a cold start). */
void ea__agent_ckpt_loaded(ea__agent *a, uint32_t k, const ea_ipc_msg *m) {
  ea__agent_ck *c = &a->ck;
  c->loaded = true;
  c->resume_done = true;
  snprintf(c->loaded_name, sizeof c->loaded_name, "%.*s", (int)sizeof c->loaded_name - 1, m->name);
  c->loaded_step = m->step;
  c->loaded_digest = m->digest;
  c->loaded_fallbacks = m->fallbacks;
  c->loaded_s = m->seconds;
  snprintf(c->loaded_why, sizeof c->loaded_why, "%s", m->message);
  if (a->o->smoke) ea__smoke_loaded(a->o->smoke, c->loaded_name, m->digest);
  ea_log(EA_LOG_INFO, "ckpt",
         "loaded %s worker=%u gen=%" PRIu64 " step=%" PRIu64 " digest=%016" PRIx64
         " fallbacks=%u seconds=%.3f",
         c->loaded_name, k, m->gen, m->step, m->digest, m->fallbacks, m->seconds);
  if (m->fallbacks)
    ea__agent_alert(
        a, EA__ALERT_RESUME_FALLBACK, EA__SEV_WARNING, "",
        "checkpoint resume passed over %u newer checkpoint%s that did not verify and loaded "
        "%s; first reason: %s",
        m->fallbacks, m->fallbacks == 1 ? "" : "s", c->loaded_name, m->message);
}

int ea__agent_ckpt_start(ea__agent *a, char *err, size_t errlen) {
  ea__ckpt_svc_opts o = {.dir = a->ckpt_dir, .io_flags = 0, .self = a->id};
  ea__ckpt_svc_cbs cb = {.reply = ckpt_reply, .report = ckpt_report, .event = ckpt_svc_event};
  int rc = ea__ckpt_svc_new(&a->loop, &o, &cb, a, &a->ckpt_svc);
  if (rc) snprintf(err, errlen, "checkpoint service for %s: %s", a->ckpt_dir, strerror(-rc));
  return rc;
}

/* checkpoint.dir ("" = <data-dir>/checkpoints), made absolute: workers
 * get it in their COMMIT, and the manifest names files relative to it. */
int ea__agent_ckpt_dir_resolve(const ea__agent_opts *o, char *out, size_t cap, char *err,
                               size_t errlen) {
  const char *d = o->cfg.checkpoint.dir;
  char cwd[EA_PATH_MAX] = "";
  bool rel = d[0] ? d[0] != '/' : o->data_dir[0] != '/';
  if (rel && !getcwd(cwd, sizeof cwd)) {
    int e = errno;
    snprintf(err, errlen, "checkpoint.dir: cannot resolve a relative path: getcwd: %s",
             strerror(e));
    return -e;
  }
  int n = d[0] ? snprintf(out, cap, "%s%s%s", cwd, rel ? "/" : "", d)
               : snprintf(out, cap, "%s%s%s/checkpoints", cwd, rel ? "/" : "", o->data_dir);
  if (n < 0 || (size_t)n >= cap || (size_t)n >= EA_IPC_PATH_MAX) {
    snprintf(err, errlen, "checkpoint.dir: the path is longer than %u bytes", EA_IPC_PATH_MAX - 1);
    return -ENAMETOOLONG;
  }
  return 0;
}

/* Generations start above every checkpoint already in the directory.  A
 * cluster started with fresh data directories numbers its generations from
 * 1, and the generation fence of ea_ckpt_commit would refuse every commit
 * below the newest generation on disk: so the newest generation found there
 * (complete or not; its number is in the directory name) becomes the floor
 * of what this agent has seen, as if it had persisted it.  Runs before the
 * loop starts (one directory listing). */
void ea__agent_ckpt_gen_floor(const char *dir, ea_rdzv_gen *g) {
  ea_ckpt_entry *e = NULL;
  size_t n = 0;
  if (ea_ckpt_list(dir, &e, &n) < 0) return;
  uint64_t top = 0;
  for (size_t i = 0; i < n; i++)
    if (e[i].generation > top) top = e[i].generation;
  free(e);
  uint64_t term = ea_rdzv_gen64_term(top);
  if (term <= g->term) return;
  ea_rdzv_gen64_unpack(top, g);
  ea_log(EA_LOG_INFO, "generation",
         "checkpoints in %s were written up to generation term %" PRIu64
         ": generations formed here start above it",
         dir, term);
}
