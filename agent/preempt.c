/* The last moment: one checkpoint of the current step before a mass
 * preemption (issue 30, docs/operations.md "A checkpoint before a mass
 * preemption").
 *
 * When drains — preemption notices, SIGTERMs, `drain` — would leave fewer
 * than compute.min_nodes members, no generation can form without the
 * drainers, and the job stops until nodes come back: a cold start from the
 * last periodic checkpoint would lose every step since.  The rendezvous
 * core decides *when* (ea_rdzv.h, "a checkpoint before a mass preemption"):
 * as controller it holds the running generation together, the drainers
 * training on, for at most runtime.preemption_grace_seconds, and says so in
 * its status.  This file takes the checkpoint meanwhile and tells the core
 * when it is done:
 *
 *   built-in and library modes: the controller picks a step S a little
 *   ahead of the one its own ranks have reached (far enough that no rank
 *   has completed it when the order arrives: ~300 ms of steps, at least
 *   2) and sends SAVE_NOW(gen, S) to every member (ckpt_wire.c), whose
 *   agent sends its workers CKPT_AT(gen, S) (ea_ipc.h).  Every rank stages
 *   its shard right after step S as for a periodic checkpoint, the agents
 *   write and report as always, and the controller's commit of (S, gen)
 *   ends the hold (ea_rdzv_last_ckpt_done).  A rank that had completed S
 *   already says so (ckpt_skipped): the commit fails and a later step is
 *   asked for, with twice the margin, up to ATTEMPTS_MAX times.
 *   restart mode: the programs save their own checkpoint.  Each member's
 *   agent sends its programs SIGUSR1 — only to a process that handles it
 *   (SigCgt in /proc/PID/status): its default action would kill an
 *   unmodified script — and the programs have the whole grace to save;
 *   the agent cannot see when they are done.  When the controller's own
 *   program does not handle SIGUSR1 (every node runs the same one) there
 *   is nothing to wait for and the drained nodes go at once.
 *
 * Then the core stops the generation as before (the drainers leave, the
 * rest pause), and a cold start resumes from the newest checkpoint, which
 * is this one.  A checkpoint not committed in time is said (alert
 * preempted_checkpoint, critical) and the last good one stays LATEST.
 *
 * A controller that runs no part of the generation (an elected spare) has
 * no ranks to pick S from: it sends SAVE_NOW(gen, 0) to the generation's
 * first node, which picks S from its own ranks and sends SAVE_NOW(gen, S)
 * to every member and to the controller (which then knows which commit
 * ends the hold); asked again after a failed try, the picker doubles its
 * margin.  In restart mode it sends SAVE_NOW to every member itself.
 * Checkpoints must be on (checkpoint.save_interval_steps > 0) in
 * built-in and library modes (start_rdzv in agent.c leaves the hold off
 * otherwise).
 *
 * The checkpoint flow's callbacks (ckpt_glue.c) may run inside the commit
 * core, so they only record here; a zero timer acts on the next loop turn.
 */
#include "agent_int.h"

#include "ea_log.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

/* A CKPT_AT must reach every rank before it completes step S: control
 * frame + IPC are milliseconds, but a loaded machine's loop or a worker's
 * reader thread can lag a few hundred (seen: 2-core CI).  300 ms of steps,
 * and never fewer than 2 (ranks differ by one step at most). */
#define AHEAD_S 0.3
#define AHEAD_MIN 2u
/* Asked again after a rank had passed S (each time with twice the margin):
 * 4 tries cover 300 ms × 15 of lag. */
#define ATTEMPTS_MAX 4u

struct ea__agent_preempt {
  ea__agent *a;
  uv_timer_t kick; /* acts on what the checkpoint callbacks recorded */
  uint64_t gen;    /* the generation held (u64), 0: none yet */
  uint64_t since_ms;
  uint64_t target; /* the step asked for (0: none; restart mode) */
  uint32_t attempt;
  bool committed, failed, said;
  bool release; /* tell the core it may let them go (from the kick, never inside it) */
  bool relay;   /* this controller runs no part of gen: a member picks S */
  bool spares;  /* held because spares alone would form the next generation */
  /* as a member asked to pick S for a controller outside the generation */
  uint64_t pick_gen;
  uint32_t pick_attempt;
  char name[EA_CKPT_NAME_MAX];
  double write_s, commit_s;
};

static bool can_stage(const ea__agent *a) {
  return a->mode == EA__MODE_TORCHRUN || a->o->cfg.checkpoint.save_interval_steps > 0;
}

uint32_t ea__agent_preempt_grace_ms(const ea__agent *a) {
  return can_stage(a) ? a->o->cfg.runtime.preemption_grace_seconds * 1000u : 0;
}

/* ---- members: SAVE_NOW ------------------------------------------------------------ */

/* Whether pid has a handler for sig (SigCgt of /proc/PID/status). */
static bool catches(int pid, int sig) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", pid);
  FILE *f = fopen(path, "r");
  if (!f) return false;
  bool yes = false;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, "SigCgt:", 7) == 0) {
      unsigned long long m = strtoull(line + 7, NULL, 16);
      yes = (m >> (sig - 1)) & 1u;
      break;
    }
  fclose(f);
  return yes;
}

static void save_now(ea__agent *a, uint64_t gen, uint64_t step) {
  const ea_rdzv_plan *p = ea_rdzv_running(a->rdzv);
  if (!p || ea_rdzv_gen_u64(&p->gen) != gen || !a->sup) {
    ea_log(EA_LOG_INFO, "preempt", "SAVE_NOW for generation %" PRIu64 " ignored: not running it",
           ea_rdzv_gen64_term(gen));
    return;
  }
  if (a->mode == EA__MODE_TORCHRUN) {
    for (uint32_t k = 0; k < a->wpn; k++) {
      int pid = ea__sup_pid(a->sup, k);
      if (pid <= 0) continue;
      if (!catches(pid, SIGUSR1)) {
        ea_log(EA_LOG_WARN, "preempt",
               "worker %u (pid %d) does not handle SIGUSR1: not sent (its default action would "
               "kill it); the program saves nothing before the preemption",
               k, pid);
        continue;
      }
      kill(pid, SIGUSR1);
      ea_log(EA_LOG_INFO, "preempt",
             "SIGUSR1 to worker %u (pid %d): save your checkpoint now, %u s before the nodes go "
             "(runtime.preemption_grace_seconds)",
             k, pid, a->o->cfg.runtime.preemption_grace_seconds);
    }
    return;
  }
  ea_ipc_msg *m = a->ipc;
  for (uint32_t k = 0; k < a->wpn; k++) {
    ea_ipc_msg_init(m, EA_IPC_CKPT_AT);
    m->gen = gen;
    m->step = step;
    int rc = ea__sup_send(a->sup, k, m);
    if (rc)
      ea_log(EA_LOG_WARN, "preempt", "worker %u: cannot send ckpt_at step %" PRIu64 ": %s", k, step,
             strerror(-rc));
  }
  ea_log(EA_LOG_INFO, "preempt", "staging step %" PRIu64 " of generation %" PRIu64 " (ckpt_at)",
         step, ea_rdzv_gen64_term(gen));
}

/* ---- the controller ------------------------------------------------------------- */

/* The step to ask for: AHEAD of the most any local rank completed. */
static uint64_t pick(ea__agent *a, uint32_t attempt) {
  uint64_t top = 0;
  double step_s = 0;
  for (uint32_t k = 0; k < a->wpn; k++) {
    if (a->w[k].next_step > top) top = a->w[k].next_step;
    if (a->w[k].step_s > step_s) step_s = a->w[k].step_s;
  }
  uint64_t ahead = step_s > 0 ? (uint64_t)ceil(AHEAD_S / step_s) : AHEAD_MIN;
  if (ahead < AHEAD_MIN) ahead = AHEAD_MIN;
  return top + (ahead << attempt);
}

static void send_all(ea__agent *a, const ea_rdzv_plan *p, uint64_t gen, uint64_t step) {
  ea__ckpt_msg m = {.type = EA__CKPT_SAVE_NOW, .src = a->id, .gen = gen, .step = step};
  uint8_t buf[EA__CKPT_WIRE_MAX];
  size_t len = 0;
  if (ea__ckpt_encode(&m, buf, sizeof buf, &len) != 0) return;
  for (uint32_t i = 0; i < p->nnodes; i++) {
    if (ea_node_id_cmp(&p->nodes[i].id, &a->id) == 0)
      save_now(a, gen, step);
    else if (a->ctl)
      ea__ctl_send_bytes(a->ctl, &p->nodes[i].id, &p->nodes[i].control, buf, len);
  }
}

/* SAVE_NOW(gen, step) to one node by id, through its gossiped control
 * address; false when it is not in the member table. */
static bool send_one(ea__agent *a, const ea_node_id *to, uint64_t gen, uint64_t step) {
  const ea_member *c = a->tr ? ea__agent_find_member(a, to) : NULL;
  ea__ckpt_msg m = {.type = EA__CKPT_SAVE_NOW, .src = a->id, .gen = gen, .step = step};
  uint8_t buf[EA__CKPT_WIRE_MAX];
  size_t len = 0;
  if (!c || !a->ctl || ea__ckpt_encode(&m, buf, sizeof buf, &len) != 0) return false;
  ea__ctl_send_bytes(a->ctl, &c->id, &c->meta.control, buf, len);
  return true;
}

void ea__agent_preempt_msg(ea__agent *a, const ea__ckpt_msg *m) {
  struct ea__agent_preempt *P = a->preempt;
  if (a->phase >= EA__PHASE_STOPPING || !P) return;
  /* The picker's answer to a controller outside the generation. */
  if (P->relay && P->gen == m->gen && m->step && !P->said && m->step != P->target) {
    P->target = m->step;
    ea_log(EA_LOG_INFO, "preempt", "the members stage step %" PRIu64 " of generation %" PRIu64,
           m->step, ea_rdzv_gen64_term(m->gen));
  }
  const ea_rdzv_plan *p = ea_rdzv_running(a->rdzv);
  if (m->step || a->mode == EA__MODE_TORCHRUN || !p || ea_rdzv_gen_u64(&p->gen) != m->gen) {
    save_now(a, m->gen, m->step);
    return;
  }
  /* Asked to pick the step (the controller runs no part of the
   * generation): for every member, the controller included. */
  P->pick_attempt = P->pick_gen == m->gen ? P->pick_attempt + 1 : 0;
  P->pick_gen = m->gen;
  uint64_t s = pick(a, P->pick_attempt < ATTEMPTS_MAX ? P->pick_attempt : ATTEMPTS_MAX);
  ea_log(EA_LOG_INFO, "preempt",
         "picking step %" PRIu64
         " for the checkpoint before the drained nodes leave (the controller "
         "runs no part of generation %" PRIu64 ")",
         s, ea_rdzv_gen64_term(m->gen));
  send_all(a, p, m->gen, s);
  const ea_election *el = ea_rdzv_election(a->rdzv);
  if (el && el->have && ea_node_id_cmp(&el->controller, &a->id) != 0)
    send_one(a, &el->controller, m->gen, s);
}

static void on_kick(uv_timer_t *h);

static void ask(ea__agent *a, struct ea__agent_preempt *P) {
  const ea_rdzv_plan *p = ea_rdzv_running(a->rdzv);
  P->committed = P->failed = false;
  if (p && ea_rdzv_gen_u64(&p->gen) == P->gen) {
    P->relay = false;
    P->target = a->mode == EA__MODE_TORCHRUN ? 0 : pick(a, P->attempt);
    send_all(a, p, P->gen, P->target);
    /* Restart mode: every node runs the same program; when ours does not
     * handle SIGUSR1, nobody saves anything and the grace would only
     * delay the drained nodes. */
    bool any = false;
    for (uint32_t k = 0; a->mode == EA__MODE_TORCHRUN && a->sup && k < a->wpn && !any; k++) {
      int pid = ea__sup_pid(a->sup, k);
      any = pid > 0 && catches(pid, SIGUSR1);
    }
    if (a->mode == EA__MODE_TORCHRUN && !any) {
      ea_log(EA_LOG_INFO, "preempt",
             "this node's program does not handle SIGUSR1: nothing to wait for, letting the "
             "drained nodes go");
      P->said = P->release = true;
      if (a->handles_open) uv_timer_start(&P->kick, on_kick, 0, 0);
    }
    return;
  }
  /* An elected spare: the members, from the formed generation. */
  ea_rdzv_gen g;
  size_t n = ea_rdzv_formed_ids(a->rdzv, &g, NULL, 0);
  ea_node_id *ids = n ? malloc(n * sizeof *ids) : NULL;
  if (ids) n = ea_rdzv_formed_ids(a->rdzv, &g, ids, n);
  size_t sent = 0;
  if (ids && ea_rdzv_gen_u64(&g) == P->gen) {
    P->relay = true;
    P->target = 0;
    for (size_t i = 0; i < n; i++)
      if (a->mode == EA__MODE_TORCHRUN || sent == 0) sent += send_one(a, &ids[i], P->gen, 0);
  }
  free(ids);
  if (!sent) {
    ea_log(EA_LOG_WARN, "preempt",
           "no member of generation %" PRIu64
           " can be reached: no checkpoint before the drained nodes leave",
           ea_rdzv_gen64_term(P->gen));
    P->said = P->release = true;
    if (a->handles_open) uv_timer_start(&P->kick, on_kick, 0, 0);
    return;
  }
  if (a->mode != EA__MODE_TORCHRUN)
    ea_log(EA_LOG_INFO, "preempt",
           "this controller runs no part of generation %" PRIu64
           ": a member picks the step to stage",
           ea_rdzv_gen64_term(P->gen));
}

static void on_kick(uv_timer_t *h) {
  struct ea__agent_preempt *P = h->data;
  ea__agent *a = P->a;
  if (a->phase >= EA__PHASE_LEAVING || !a->rdzv) return;
  if (P->release) {
    P->release = false;
    ea__agent_do1(a, (ea__intent){.kind = EA__DO_LAST_CKPT_DONE, .u64 = P->gen});
    return;
  }
  if (P->committed && !P->said) {
    P->said = true;
    double s = (double)(ea__agent_mono_ms() - P->since_ms) / 1000.0;
    ea_logkv(
        EA_LOG_INFO, "preempt", (ea_log_kv[]){EA_KV_U("step", P->target), EA_KV_F("seconds", s)}, 2,
        "checkpoint %s committed %.2f s after the drains began (slowest shard write %.2f s, "
        "commit %.2f s): letting the drained nodes go; %s resumes from it",
        P->name, s, P->write_s, P->commit_s, P->spares ? "the next generation" : "a cold start");
    /* A drain handed to spares is routine: no alert. */
    if (!P->spares)
      ea__agent_alert(a, EA__ALERT_PREEMPTED_CHECKPOINT, EA__SEV_WARNING, "",
                      "checkpoint before a mass preemption: %s committed %.2f s after the drains "
                      "began; the job stops until min_nodes are back and resumes from it",
                      P->name, s);
    ea__agent_do1(a, (ea__intent){.kind = EA__DO_LAST_CKPT_DONE, .u64 = P->gen});
    return;
  }
  if (P->failed && !P->said) {
    if (++P->attempt >= ATTEMPTS_MAX) {
      ea_log(EA_LOG_WARN, "preempt",
             "step %" PRIu64 " could not be staged by every rank, %u tries: giving up", P->target,
             ATTEMPTS_MAX);
      P->failed = false;
      return; /* the core lets them go when the grace is out */
    }
    uint64_t old = P->target;
    ask(a, P);
    if (P->relay)
      ea_log(EA_LOG_INFO, "preempt",
             "a rank had completed step %" PRIu64 " already: asking the picker for a later one",
             old);
    else
      ea_log(EA_LOG_INFO, "preempt",
             "a rank had completed step %" PRIu64 " already: asking for step %" PRIu64 " instead",
             old, P->target);
  }
}

/* After every core call (ea__agent_core_done). */
void ea__agent_preempt_sync(ea__agent *a) {
  struct ea__agent_preempt *P = a->preempt;
  if (!P || a->phase >= EA__PHASE_LEAVING) return;
  ea_rdzv_status st;
  ea_rdzv_status_get(a->rdzv, &st);
  if (!st.controller || st.last_ckpt == EA_RDZV_LASTCK_NONE) return;
  if (st.last_ckpt == EA_RDZV_LASTCK_WAITING && P->gen != st.last_ckpt_gen) {
    P->gen = st.last_ckpt_gen;
    P->target = 0;
    P->attempt = 0;
    P->committed = P->failed = P->said = P->release = P->relay = false;
    P->name[0] = 0;
    P->since_ms = ea__agent_mono_ms();
    P->spares = st.last_ckpt_spares;
    uint32_t grace = a->o->cfg.runtime.preemption_grace_seconds;
    char cause[96];
    if (P->spares)
      snprintf(cause, sizeof cause,
               "every member drains and only spares would form the next generation");
    else
      snprintf(cause, sizeof cause, "the drains would leave fewer than min_nodes %u",
               a->o->cfg.compute.min_nodes);
    /* A drain to spares is routine: said at info level, no alert. */
    const ea_log_level lvl = P->spares ? EA_LOG_INFO : EA_LOG_WARN;
    if (a->mode == EA__MODE_TORCHRUN)
      ea_log(lvl, "preempt",
             "%s: the programs of generation %" PRIu64
             " get SIGUSR1 and %u s to save their checkpoint before the drained nodes leave "
             "(runtime.preemption_grace_seconds)",
             cause, ea_rdzv_gen64_term(P->gen), grace);
    ask(a, P);
    if (a->mode != EA__MODE_TORCHRUN && !P->said && !P->relay)
      ea_log(lvl, "preempt",
             "%s: checkpoint of step %" PRIu64 " (generation %" PRIu64
             ") first, within %u s (runtime.preemption_grace_seconds)",
             cause, P->target, ea_rdzv_gen64_term(P->gen), grace);
    else if (a->mode != EA__MODE_TORCHRUN && !P->said)
      ea_log(lvl, "preempt",
             "%s: checkpoint of the current step "
             "(generation %" PRIu64 ") first, within %u s (runtime.preemption_grace_seconds)",
             cause, ea_rdzv_gen64_term(P->gen), grace);
    if (a->mode == EA__MODE_TORCHRUN && !P->release && !P->spares)
      ea__agent_alert(a, EA__ALERT_PREEMPTED_CHECKPOINT, EA__SEV_WARNING, "",
                      "checkpoint before a mass preemption: the programs of generation %" PRIu64
                      " were sent SIGUSR1 and have %u s to save their own",
                      ea_rdzv_gen64_term(P->gen), grace);
    return;
  }
  if (st.last_ckpt == EA_RDZV_LASTCK_TIMED_OUT && P->gen == st.last_ckpt_gen && !P->said) {
    P->said = true;
    uint32_t grace = a->o->cfg.runtime.preemption_grace_seconds;
    if (a->mode == EA__MODE_TORCHRUN) {
      ea_log(EA_LOG_INFO, "preempt",
             "the programs had their %u s to save (runtime.preemption_grace_seconds): letting "
             "the drained nodes go",
             grace);
      return;
    }
    char latest[EA_CKPT_NAME_MAX + 8];
    snprintf(latest, sizeof latest, "%s", a->ck.latest[0] ? a->ck.latest : "none");
    ea__agent_alert(a, EA__ALERT_PREEMPTED_CHECKPOINT, EA__SEV_CRITICAL, "",
                    "checkpoint before a mass preemption: step %" PRIu64
                    " was not committed within %u s (runtime.preemption_grace_seconds); the "
                    "drained nodes leave now and the last good checkpoint (%s) stays the newest",
                    P->target, grace, latest);
  }
}

/* The commit core's events (ckpt_glue.c, maybe from inside it): record. */
void ea__agent_preempt_ckpt_event(ea__agent *a, const ea__ckpt_event *e) {
  struct ea__agent_preempt *P = a->preempt;
  if (!P || !P->gen || P->said || !P->target || e->gen != P->gen || e->step != P->target) return;
  if (e->kind == EA__CKPT_EV_COMMITTED) {
    P->committed = true;
    snprintf(P->name, sizeof P->name, "%s", e->name);
    P->write_s = e->write_seconds;
    P->commit_s = e->commit_seconds;
  } else if (e->kind == EA__CKPT_EV_FAILED) {
    P->failed = true;
  } else {
    return;
  }
  if (a->handles_open) uv_timer_start(&P->kick, on_kick, 0, 0);
}

int ea__agent_preempt_start(ea__agent *a, char *err, size_t errlen) {
  struct ea__agent_preempt *P = calloc(1, sizeof *P);
  if (!P) {
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  P->a = a;
  uv_timer_init(&a->loop, &P->kick);
  P->kick.data = P;
  a->preempt = P;
  return 0;
}

static void closed(uv_handle_t *h) {
  free(h->data);
}

void ea__agent_preempt_close(ea__agent *a) {
  struct ea__agent_preempt *P = a->preempt;
  if (!P) return;
  a->preempt = NULL;
  uv_close((uv_handle_t *)&P->kick, closed);
}

/* ---- the spot/preemption notice: obs/notice.c polls, this acts ---- */

static void on_notice(void *ctx, const char *what) {
  ea__agent *a = ctx;
  if (a->phase >= EA__PHASE_CLOSING) return;
  ea_log(EA_LOG_WARN, "notice", "preemption notice: %s; draining this node now", what);
  ea__agent_alert(a, EA__ALERT_PREEMPTED, EA__SEV_WARNING, "",
                  "preemption notice: %s; this node drains", what);
  ea__agent_begin_drain(a, "preemption notice", false);
}

int ea__agent_notice_start(ea__agent *a, char *err, size_t errlen) {
  const ea_config *c = &a->o->cfg;
  return ea__notice_start(&a->loop, c->runtime.preemption_notice,
                          c->runtime.preemption_metadata_url, on_notice, a, &a->notice, err,
                          errlen);
}

void ea__agent_notice_close(ea__agent *a) {
  ea__notice *n = a->notice;
  a->notice = NULL;
  ea__notice_close(n);
}
