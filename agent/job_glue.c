/* job_glue.c — the agent's wiring of the launch mode, restart mode's
 * processes and the job's end (launch.c, output.c, job.c hold the logic).
 *
 * In restart mode (torchrun) the rendezvous' PREPARE and COMMIT go to the
 * launcher instead of IPC messages: it stops the generation's processes,
 * READY follows once they are gone (rank 0's node with the MASTER_PORT it
 * picked), and the COMMIT starts them with the plan's torchrun
 * environment, their output captured.  A process that ends by itself is
 * either done (exit 0) or a failure: its TORCHELASTIC_ERROR_FILE (or its
 * last stderr lines) goes to the job module, then the failure to the
 * rendezvous, which re-forms (a restart) or gives the job up.
 *
 * The job module sees, after every call into the core, what this agent
 * knows (election, the rendezvous' verdicts, members, checkpoints); when it
 * says the job is over, the agent leaves and exits with its code.
 */
#include "agent_int.h"

#include "ea_ckpt.h"
#include "ea_log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static bool link_found_down(ea__agent *a);

/* Is a node of the running plan dead, suspect or gone, or unreachable from
 * here by the link probe (its survivors then sit in a collective that will
 * not return)? */
static bool peer_lost(ea__agent *a) {
  for (uint32_t i = 0; i < a->nrun_ids; i++) {
    if (ea_node_id_cmp(&a->run_ids[i], &a->id) == 0) continue;
    const ea_member *m = ea__agent_find_member(a, &a->run_ids[i]);
    if (!m || m->state != EA_STATE_ALIVE) return true;
  }
  return link_found_down(a);
}

void ea__agent_restart_prepare(ea__agent *a, const ea_rdzv_order *o) {
  for (uint32_t k = 0; k < a->wpn; k++) {
    a->w[k].gen = a->prep.g64;
    if (a->w[k].state != EA__W_EXITED) a->w[k].state = EA__W_PREPARING;
  }
  ea__launch_prepare(a->launch, a->prep.g64, o->gen.term, o->rank_base, peer_lost(a));
}

/* launch.ready: every local process is gone; READY with rank 0's store. */
static void restart_ready(void *ctx, uint64_t gen, const ea_addr *listen, uint32_t n) {
  ea__agent *a = ctx;
  if (a->phase == EA__PHASE_CLOSING || !a->prep.active || gen != a->prep.g64) return;
  ea__intent in[EA_RDZV_MAX_WPN + 1];
  size_t m = 0;
  for (uint32_t k = 0; k < n && k < a->wpn && k < EA_RDZV_MAX_WPN; k++) {
    a->w[k].state = EA__W_READY;
    ea_addr_str(&listen[k], a->w[k].comm, sizeof a->w[k].comm);
    in[m++] = (ea__intent){
        .kind = EA__DO_WORKER_READY, .worker = k, .gen = &a->prep.gen, .listen = &listen[k]};
  }
  in[m++] = (ea__intent){.kind = EA__DO_SETTLE};
  ea__agent_do(a, in, m);
}

void ea__agent_restart_commit(ea__agent *a, const ea_rdzv_plan *p, uint32_t node, const char *g) {
  ea_node_id *ids = realloc(a->run_ids, (p->nnodes ? p->nnodes : 1) * sizeof *ids);
  if (ids) {
    a->run_ids = ids;
    for (uint32_t i = 0; i < p->nnodes; i++) ids[i] = p->nodes[i].id;
    a->nrun_ids = p->nnodes;
  }
  for (uint32_t k = 0; k < a->wpn; k++) {
    a->w[k].gen = a->run.g64;
    a->w[k].state = EA__W_TRAINING;
    a->w[k].done_gen = 0;
  }
  ea_log(EA_LOG_INFO, "generation",
         "committed gen=%s world=%u ranks=%u-%u restarts=%" PRIu64 " formation_ms=%" PRIu64
         " stalled_ms=%" PRIu64 "%s%s",
         g, p->world, a->run.rank_base, a->run.rank_base + a->wpn - 1, p->restarts,
         a->last_formation_ms, a->last_stall_ms, a->stall_ms ? " after=" : "",
         a->stall_ms ? a->stall_why : "");
  if (ea__launch_commit(a->launch, p, node, a->run.g64) < 0)
    for (uint32_t k = 0; k < a->wpn; k++)
      if (!ea__sup_running(a->sup, k)) a->w[k].fail_pending = true;
  a->stall_ms = 0;
  ea__agent_update_starting(a); /* in a generation now: no longer "starting" */
}

/* launch.spawning / spawned: the program's output goes to output.c. */
static int restart_spawning(void *ctx, uint32_t k, uint32_t rank, uint64_t term,
                            ea__sup_spawn *sp) {
  ea__agent *a = ctx;
  if (a->out) ea__out_begin(a->out, k, rank, term, &sp->out, &sp->err);
  return 0;
}

static void restart_spawned(void *ctx, uint32_t k, int rc) {
  ea__agent *a = ctx;
  if (!a->out) return;
  if (rc == 0)
    ea__out_started(a->out, k);
  else
    ea__out_abort(a->out, k);
}

/* The message a failed program left: its TORCHELASTIC_ERROR_FILE (a small
 * file in our own data dir, just written: read here, bounded), else the
 * last lines of its stderr. */
static void failure_message(ea__agent *a, uint32_t k, ea__job_failure *f) {
  f->source = EA__JOB_SRC_NONE;
  const char *path = a->launch ? ea__launch_error_file(a->launch, k) : "";
  FILE *fp = path[0] ? fopen(path, "re") : NULL;
  if (fp) {
    char *buf = malloc(EA__JOB_ERRFILE_MAX);
    size_t n = buf ? fread(buf, 1, EA__JOB_ERRFILE_MAX, fp) : 0;
    fclose(fp);
    if (n) {
      ea__job_parse_error_file(buf, n, f->message, sizeof f->message);
      f->source = EA__JOB_SRC_ERROR_FILE;
    }
    free(buf);
  }
  if (f->source == EA__JOB_SRC_NONE && a->out &&
      ea__out_tail(a->out, k, f->message, sizeof f->message) > 0)
    f->source = EA__JOB_SRC_STDERR;
}

/* launch.exited: a worker of the running generation ended by itself. */
static void restart_exited(void *ctx, const ea__launch_exit *x) {
  ea__agent *a = ctx;
  uint32_t k = x->local;
  if (a->out) ea__out_drain(a->out, k);
  if (!a->run.active || x->gen != a->run.g64 || k >= a->wpn) {
    ea_log(EA_LOG_INFO, "worker",
           "rank %u of an older generation exited status=%" PRId64 " signal=%d", x->rank, x->status,
           x->signal);
    return;
  }
  ea__agent_wk *w = &a->w[k];
  if (x->status == 0 && x->signal == 0) {
    w->state = EA__W_DONE;
    w->done_gen = x->gen;
    ea_log(EA_LOG_INFO, "worker", "rank %u finished (exit status 0)", x->rank);
    ea__agent_local_done_check(a, 0);
    return;
  }
  w->state = EA__W_FAILED;
  ea__job_failure f = {.gen = x->gen, .rank = x->rank};
  snprintf(f.node, sizeof f.node, "%s", a->o->name);
  f.has_code = x->signal == 0;
  f.code = (uint8_t)x->status;
  f.signal = (uint32_t)x->signal;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  f.at_ms = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
  failure_message(a, k, &f);
  a->worker_failures++;
  ea__agent_stall(a, "a worker failed");
  ea__job_local_failure(a->job, &f); /* before the rendezvous hears it: the details first */
  ea__agent_do1(a, (ea__intent){.kind = EA__DO_WORKER_FAILED, .worker = k});
}

/* Every local worker finished in the running generation: tell the job. */
void ea__agent_local_done_check(ea__agent *a, uint64_t step) {
  if (!a->job || !a->run.active) return;
  for (uint32_t k = 0; k < a->wpn; k++)
    if (a->w[k].done_gen != a->run.g64) return;
  ea__job_local_done(a->job, a->run.g64, step);
}

/* After every call into the core: the job module sees what the agent sees. */
void ea__agent_job_sync(ea__agent *a) {
  if (!a->job || !a->tr || !a->rdzv || a->phase == EA__PHASE_CLOSING) return;
  ea_rdzv_status st;
  ea_rdzv_status_get(a->rdzv, &st);
  const ea_member *ms;
  size_t n = ea_swim_members(ea_transport_swim(a->tr), &ms);
  const ea_election *e = ea_rdzv_election(a->rdzv);
  ea__job_view v = {.have_controller = e && e->have,
                    .controller = e && e->have && ea_node_id_cmp(&e->controller, &a->id) == 0,
                    .controller_id = e ? e->controller : (ea_node_id){{0}},
                    .st = &st,
                    .members = ms,
                    .nmembers = n};
  uint64_t gen;
  v.ckpt_known = ea__agent_ckpt_newest(a, &v.ckpt_step, &gen);
  ea__job_update(a->job, &v);
}

/* job.send */
static void job_send(void *ctx, const ea_node_id *to, const uint8_t *buf, size_t len) {
  ea__agent *a = ctx;
  const ea_member *m = a->tr ? ea__agent_find_member(a, to) : NULL;
  if (m && a->ctl && a->phase < EA__PHASE_CLOSING)
    ea__ctl_send_bytes(a->ctl, to, &m->meta.control, buf, len);
}

/* job.worker_failed, as controller: a member's worker crashed (builtin,
 * library: only the node whose worker died says so) — a failure toward
 * its flapping (runtime.flap_threshold). */
static void job_worker_failed(void *ctx, const ea_node_id *src, const ea__job_failure *f) {
  ea__agent *a = ctx;
  if (!a->rdzv || a->phase >= EA__PHASE_CLOSING) return;
  char what[64];
  snprintf(what, sizeof what, "worker of rank %u %s %u", f->rank,
           f->has_code ? "exited with" : "killed by signal", f->has_code ? f->code : f->signal);
  ea__agent_do1(a, (ea__intent){.kind = EA__DO_NODE_FAILED, .node = src, .text = what});
}

void ea__agent_job_worker_crashed(ea__agent *a, uint32_t k, int64_t status, int sig) {
  if (!a->job || a->launch) return; /* restart mode: restart_exited says it */
  ea__agent_wk *w = &a->w[k];
  ea__job_failure f = {.gen = a->run.active ? a->run.g64 : 0, .rank = a->run.rank_base + k};
  snprintf(f.node, sizeof f.node, "%s", a->o->name);
  f.has_code = sig == 0;
  f.code = (uint8_t)status;
  f.signal = (uint32_t)sig;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  f.at_ms = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
  if (w->exit_reason[0] && sig == 0 && w->exit_code == status) {
    snprintf(f.message, sizeof f.message, "%s", w->exit_reason);
    f.source = EA__JOB_SRC_NONE;
  }
  ea__job_local_failure(a->job, &f);
}

/* job.end: the job is over; this agent leaves and exits with its code. */
static void job_end(void *ctx, uint8_t kind, int code) {
  ea__agent *a = ctx;
  a->exit_status = code;
  if (a->phase >= EA__PHASE_STOPPING) return;
  if (a->launch) ea__launch_stop_all(a->launch, a->o->cfg.runtime.stop_grace_seconds * 1000u);
  ea__agent_stop_and_leave(a, false,
                           kind == EA__JOB_SUCCESS ? "the job finished" : "the job failed");
}

/* job.alert: through the agent's registry. */
static void job_alert(void *ctx, int what, const char *text) {
  ea__agent_alert(ctx,
                  what == EA__JOB_ALERT_CHURN ? EA__ALERT_GENERATION_CHURN : EA__ALERT_JOB_FAILED,
                  EA__SEV_CRITICAL, "", "%s", text);
}

/* job.ckpt_again: the final checkpoint is tried again.  As controller,
 * the committer forgets the failed attempt; every local worker that
 * finished in gen is asked to stage its shard once more. */
static void job_ckpt_again(void *ctx, uint64_t gen, uint64_t step) {
  ea__agent *a = ctx;
  if (a->ckpt_ctl) ea__ckpt_ctl_retry(a->ckpt_ctl, step, gen);
  if (!a->sup) return;
  ea_ipc_msg *m = malloc(sizeof *m);
  if (!m) return;
  ea_ipc_msg_init(m, EA_IPC_CKPT_AGAIN);
  m->gen = gen;
  m->step = step;
  for (uint32_t k = 0; k < a->wpn; k++) {
    if (a->w[k].done_gen != gen) continue;
    int rc = ea__sup_send(a->sup, k, m);
    if (rc && rc != -ESRCH)
      ea_log(EA_LOG_WARN, "ckpt", "worker %u: cannot send ckpt_again: %s", k, strerror(-rc));
  }
  free(m);
}

/* job.restore (a smoke run): restore the checkpoint into a fresh
 * generation (smoke.c). */
static void job_restore(void *ctx, uint64_t gen, uint64_t step) {
  ea__smoke_restore(ctx, gen, step);
}

/* ---- the link probe (link.c): the timer, the frames, the controller's part ---- */

struct ea__agent_link {
  ea__agent *a;
  bool probe; /* this node probes (else it only answers pings) */
  ea__link *L;
  uint64_t held; /* as controller: ends held out on a probe's word */
};

static bool link_controls(ea__agent *a) {
  const ea_election *el = a->rdzv ? ea_rdzv_election(a->rdzv) : NULL;
  return el && el->have && ea_node_id_cmp(&el->controller, &a->id) == 0;
}

static void link_send(void *ctx, const ea_node_id *to, const uint8_t *buf, size_t len) {
  job_send(ctx, to, buf, len);
}

static bool link_alive(void *ctx, const ea_node_id *id) {
  ea__agent *a = ctx;
  const ea_member *m = a->tr ? ea__agent_find_member(a, id) : NULL;
  return m && m->state == EA_STATE_ALIVE;
}

static void link_reset(void *ctx, const ea_node_id *to) {
  ea__agent *a = ctx;
  if (a->ctl) ea__ctl_reset_peer(a->ctl, to);
}

/* As controller: member `by` found `peer` unreachable (ours or a LINK_DOWN). */
static void link_verdict(ea__agent *a, const ea_node_id *by, const ea_node_id *peer) {
  if (!a->rdzv || a->phase >= EA__PHASE_CLOSING) return;
  uint64_t now = ea__agent_now_ms(a);
  int rc = ea__agent_do1(a, (ea__intent){.kind = EA__DO_LINK_DOWN, .node = by, .peer = peer});
  if (rc == 0) {
    a->link->held++;
    ea_rdzv_held h[16];
    size_t n = ea_rdzv_held_out(a->rdzv, h, 16);
    for (size_t i = 0; i < n && i < 16; i++)
      if (h[i].why == EA_RDZV_HOLD_LINK && h[i].until_ms > now &&
          (ea_node_id_cmp(&h[i].id, by) == 0 || ea_node_id_cmp(&h[i].id, peer) == 0))
        ea_log(EA_LOG_WARN, "rdzv",
               "link probe: %s cannot reach %s over the control channel: %s held out for %" PRIu64
               " s (hold-out %u%s); the job re-forms without it",
               ea__agent_member_name(ea__agent_find_member(a, by)),
               ea__agent_member_name(ea__agent_find_member(a, peer)), h[i].name,
               (h[i].until_ms - now + 999) / 1000, h[i].holds,
               h[i].waived ? ", waived: too few nodes without it" : "");
  } else if (rc != -EALREADY && rc != -EPERM) {
    ea_log(EA_LOG_DEBUG, "rdzv", "link probe verdict from %s on %s not acted on: %s",
           ea__agent_member_name(ea__agent_find_member(a, by)),
           ea__agent_member_name(ea__agent_find_member(a, peer)), strerror(-rc));
  }
}

static void link_down(void *ctx, const ea_node_id *peer, uint64_t gen) {
  ea__agent *a = ctx;
  if (link_controls(a)) {
    link_verdict(a, &a->id, peer);
    return;
  }
  const ea_election *el = a->rdzv ? ea_rdzv_election(a->rdzv) : NULL;
  if (!el || !el->have) return;
  ea__job_msg m = {.type = EA__JOB_LINK_DOWN, .src = a->id, .gen = gen, .peer = *peer};
  uint8_t buf[EA__JOB_WIRE_MAX];
  size_t len;
  if (ea__job_encode(&m, buf, sizeof buf, &len) == 0) job_send(a, &el->controller, buf, len);
}

/* job.link: a frame of the probe. */
static void job_link(void *ctx, const ea__job_msg *m) {
  ea__agent *a = ctx;
  if (!a->link || a->phase >= EA__PHASE_CLOSING) return;
  if (m->type == EA__JOB_LINK_DOWN) {
    if (link_controls(a)) link_verdict(a, &m->src, &m->peer);
    return;
  }
  ea__link_on_msg(a->link->L, ea__agent_now_ms(a), m);
}

void ea__agent_link_tick(ea__agent *a) {
  struct ea__agent_link *l = a->link;
  if (!l || !l->probe || a->phase == EA__PHASE_CLOSING || !a->rdzv) return;
  const ea_rdzv_plan *p =
      a->run.active && a->phase == EA__PHASE_RUNNING ? ea_rdzv_running(a->rdzv) : NULL;
  ea_rdzv_status st;
  ea_rdzv_status_get(a->rdzv, &st);
  ea__link_tick(l->L, ea__agent_now_ms(a), p, st.last_step);
}

/* Library mode probes (its program's collective names no peer), and so
 * does the built-in trainer: its ring names the peer, but only after a
 * communication timeout, and the BLAME holds an end out only after two
 * generations failed on the link (issue 27: about 10 s in make chaos's
 * oneway fault); the probe's verdict comes after two quiet seconds and two
 * rounds.  Restart mode's programs report no steps, so no quiet to go by:
 * it probes for as long as a generation runs (link.h says why and what it
 * costs).  Every mode answers pings. */
static int link_start(ea__agent *a, char *err, size_t errlen) {
  struct ea__agent_link *l = calloc(1, sizeof *l);
  ea__link_cbs cb = {
      .send = link_send, .reset = link_reset, .down = link_down, .alive = link_alive};
  ea__link_mode mode = a->wpn == 0                    ? EA__LINK_OFF
                       : a->mode == EA__MODE_TORCHRUN ? EA__LINK_ALWAYS
                                                      : EA__LINK_QUIET;
  bool probe = mode != EA__LINK_OFF;
  if (l) l->L = ea__link_new(&a->id, a->o->name, mode, &cb, a);
  if (!l || !l->L) {
    free(l);
    snprintf(err, errlen, "link probe: out of memory");
    return -ENOMEM;
  }
  l->a = a;
  l->probe = probe; /* ticked by the loop (agent.c) every EA__TICK_MS */
  a->link = l;
  return 0;
}

static void link_close(ea__agent *a) {
  struct ea__agent_link *l = a->link;
  if (!l) return;
  a->link = NULL;
  ea__link_free(l->L);
  free(l);
}

/* Restart mode's PREPARE: a member the probe finds unreachable is as good
 * as lost to the collective the programs sit in (SIGKILL after
 * runtime.lost_peer_grace_ms, not stop_grace_seconds). */
static bool link_found_down(ea__agent *a) {
  ea_node_id one;
  return a->link && ea__link_down_now(a->link->L, &one, 1) > 0;
}

void ea__agent_link_comm_failed(ea__agent *a) {
  if (a->link) ea__link_comm_failed(a->link->L, ea__agent_now_ms(a));
}

void ea__agent_link_status(ea__agent *a, ea_jb *b, json_t *gen) {
  if (!a->link) return;
  json_t *o = ea__link_status(a->link->L, ea__agent_now_ms(a));
  if (o && link_controls(a))
    json_object_set_new(o, "held_out_here", json_integer((json_int_t)a->link->held));
  ea_jb_set(b, gen, "link_probe", o);
  ea_jb_bool(b, gen, "degraded", ea__link_degraded(a->link->L));
}

int ea__agent_job_start(ea__agent *a, char *err, size_t errlen) {
  char cmd[1024] = "";
  if (a->o->worker_argc > 0) {
    size_t off = 0;
    for (int i = 0; i < a->o->worker_argc && off + 2 < sizeof cmd; i++) {
      int w = snprintf(cmd + off, sizeof cmd - off, "%s%s", i ? " " : "", a->o->worker_argv[i]);
      if (w < 0) break;
      off += (size_t)w < sizeof cmd - off ? (size_t)w : sizeof cmd - off - 1;
    }
  } else {
    snprintf(cmd, sizeof cmd, "%.1000s", a->o->cfg.compute.worker_command);
  }
  ea__job_opts jo = {.mode = a->mode,
                     .command = cmd,
                     .wpn = a->wpn ? a->wpn : a->o->cfg.compute.workers_per_node,
                     .train_steps = a->o->cfg.train.steps,
                     .ckpt_on = a->o->cfg.checkpoint.save_interval_steps > 0,
                     .max_restarts = a->o->cfg.runtime.max_restarts,
                     .churn_cap_ms = a->o->cfg.runtime.rendezvous_timeout_seconds * 1000u,
                     .final_ckpt_timeout_ms = a->o->cfg.checkpoint.timeout_seconds * 1000u,
                     .smoke_restore = a->o->smoke && a->o->smoke->builtin,
                     .self = a->id,
                     .name = a->o->name};
  ea__job_cbs jc = {.send = job_send,
                    .end = job_end,
                    .alert = job_alert,
                    .worker_failed = job_worker_failed,
                    .ckpt_again = job_ckpt_again,
                    .restore = job_restore};
  ea__agent_pace_wire(&jc);
  jc.link = job_link;
  int rc = ea__job_new(&a->loop, &jo, &jc, a, &a->job);
  if (rc) snprintf(err, errlen, "job: %s", strerror(-rc));
  if (rc == 0) rc = ea__agent_pace_start(a, err, errlen);
  if (rc == 0) rc = link_start(a, err, errlen);
  return rc;
}

/* Before anything starts: the launch mode, keys that do nothing in it,
 * old key names, and a --resume-from that cannot resolve.  *usage: the
 * failure is a value that cannot work (exit status 2). */
int ea__agent_job_preflight(ea__agent *a, bool *usage, char *err, size_t errlen) {
  const ea__agent_opts *o = a->o;
  int rc = ea__launch_mode(&o->cfg, o->worker_argc, o->worker_argv, &a->mode, err, errlen);
  char warn[2048];
  if (rc == 0)
    rc = ea__launch_check_keys(&o->cfg, a->mode, o->resume_from[0] != 0, warn, sizeof warn, err,
                               errlen);
  char why[600];
  if (rc == 0 && strcmp(o->cfg.compute.warm_start, "on") == 0 &&
      ea__launch_warm(&o->cfg, a->mode, o->worker_argc, o->worker_argv, why, sizeof why) != 0) {
    snprintf(err, errlen, "compute.warm_start on: %s (set it to auto or off)", why);
    rc = -EINVAL;
  }
  if (rc) {
    *usage = true;
    return rc;
  }
  if (warn[0]) ea_log(EA_LOG_WARN, "start", "%s", warn);
  if (ea_config_deprecations(&o->cfg, warn, sizeof warn) > 0)
    ea_log(EA_LOG_WARN, "start", "deprecated key: %s (it still works)", warn);
  if (a->mode != EA__MODE_BUILTIN || !o->resume_from[0]) return 0;
  /* The spec names a checkpoint now, or never will: a word, a step not in
   * the directory.  Lengths only (the cold start verifies every byte). */
  ea_ckpt_resume res;
  memset(&res, 0, sizeof res);
  rc = ea_ckpt_resolve(a->ckpt_dir, o->resume_from, EA_CKPT_VERIFY_SIZE, &res);
  if (rc == 0) {
    ea_log(EA_LOG_INFO, "start", "--resume-from %s: %s (checked at start)", o->resume_from,
           res.path);
    ea_ckpt_resume_close(&res);
    return 0;
  }
  if (rc == -ENOENT && strcmp(o->resume_from, "latest") == 0) {
    ea_log(EA_LOG_INFO, "start", "--resume-from latest: no checkpoint in %s yet: a fresh start",
           a->ckpt_dir);
    return 0;
  }
  snprintf(err, errlen, "--resume-from %.200s: no such checkpoint in %.300s (%s%s%.400s)",
           o->resume_from, a->ckpt_dir, strerror(-rc), res.n_skipped ? ": " : "",
           res.n_skipped ? res.skipped[0].reason : "");
  ea_ckpt_resume_close(&res);
  *usage = true;
  return rc;
}

/* Restart mode: the supervisor starts nothing until a generation commits. */
int ea__agent_restart_start(ea__agent *a, char *err, size_t errlen) {
  snprintf(a->workers_dir, sizeof a->workers_dir, "%s/workers", a->o->data_dir);
  if (mkdir(a->workers_dir, 0700) < 0 && errno != EEXIST) {
    int e = errno;
    snprintf(err, errlen, "cannot create %s: %s", a->workers_dir, strerror(e));
    return -e;
  }
  char abs_dir[EA_PATH_MAX];
  if (!realpath(a->o->data_dir, abs_dir)) snprintf(abs_dir, sizeof abs_dir, "%s", a->o->data_dir);
  ea__launch_opts lo = {.wpn = a->wpn,
                        .node_name = a->o->name,
                        .data_dir = abs_dir,
                        .run_id = a->o->cfg.experiment.name,
                        .max_restarts = a->o->cfg.runtime.max_restarts,
                        .stop_grace_ms = a->o->cfg.runtime.stop_grace_seconds * 1000u,
                        .lost_peer_grace_ms = a->o->cfg.runtime.lost_peer_grace_ms,
                        .advertise = *ea_transport_addr(a->tr)};
  ea__launch_cbs lc = {.ready = restart_ready,
                       .exited = restart_exited,
                       .spawning = restart_spawning,
                       .spawned = restart_spawned};
  int rc = ea__launch_new(&a->loop, a->sup, &lo, &lc, a, &a->launch);
  if (rc == 0) rc = ea__out_new(&a->loop, a->workers_dir, a->wpn, &a->out);
  if (rc == 0) rc = ea__launch_spares_start(a->launch);
  if (rc == 0) ea__agent_update_starting(a); /* importing: admitted once ready */
  if (rc) snprintf(err, errlen, "restart mode: %s", strerror(-rc));
  if (rc == 0 && a->wpn > 1 && !getenv("OMP_NUM_THREADS"))
    ea_log(EA_LOG_INFO, "start",
           "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to "
           "avoid your system being overloaded, please further tune the variable for optimal "
           "performance in your application as needed.");
  return rc;
}

bool ea__agent_job_frame(void *ctx, const uint8_t *plain, size_t len) {
  ea__agent *a = ctx;
  return a->job && ea__job_on_frame(a->job, plain, len);
}

void ea__agent_job_ckpt_failed(ea__agent *a, uint64_t step, const char *why, bool retry) {
  if (a->job) ea__job_ckpt_failed(a->job, step, why, retry);
}

void ea__agent_job_status(ea__agent *a, ea_jb *b, json_t *doc) {
  if (a->job) ea_jb_set(b, doc, "job", ea__job_status(a->job));
}

void ea__agent_job_close(ea__agent *a) {
  ea__agent_pace_close(a);
  link_close(a);
  if (a->launch) ea__launch_free(a->launch);
  a->launch = NULL;
  if (a->out) ea__out_free(a->out, NULL, NULL);
  a->out = NULL;
  if (a->job) ea__job_free(a->job);
  a->job = NULL;
}
