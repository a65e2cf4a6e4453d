/* The running agent, its start-up and its loop: one libuv loop that owns
 * the gossip transport (and through it the SWIM core), the control channel
 * and the rendezvous core (generations), the worker supervisor, the admin
 * socket and the signal handlers.  This file starts them in order, wires
 * their callbacks, drives the rendezvous core and turns membership events
 * into the election, the view the core sees and the remembered-peers file.
 * The rest of the running agent lives beside it, behind agent_int.h, one
 * concern per file: workers.c (orders to the workers and what they say),
 * ckpt_glue.c (the live checkpoint flow), drain.c (drain, stop, leave,
 * close) and status.c (the `status` document).
 *
 * How the pieces are wired.  The rendezvous core (rdzv/rdzv.c) is pure: it
 * is told about membership (ea_rdzv_view, from the settle handler below),
 * control messages (ea_rdzv_recv, from control.c), the local workers'
 * reports (ea_rdzv_worker_*, posted by the supervisor's callbacks in
 * workers.c)
 * and time (ea_rdzv_tick, from one timer re-armed to ea_rdzv_next_deadline
 * after every call).  What it wants done comes back through ea_rdzv_io
 * while it runs: messages go straight to the control channel, persists to
 * the libuv thread pool, and orders to the workers as IPC messages
 * (PREPARE, COMMIT, PAUSE).  Its rule is that io callbacks never call back
 * into it, so anything that must be reported back (a worker that cannot be
 * told, the DRAINED order, a drain that began remotely) is flagged and
 * handled by ea__agent_core_done(), which runs right after every call into
 * the core.  Only this file calls the core's functions that change it: the
 * rest of agent/ posts what it wants done as intents (a worker ready,
 * failed or stepping, a member's failure, a link down, a hold-out, a drain,
 * a re-formation: ea__agent_do), applied here in order and followed by the
 * core-done step once, with the phase rule in one place
 * (scripts/check-layout.sh checks that nobody else calls the core).  The
 * core also computes the controller election; the agent asks it
 * (ea_rdzv_election) rather than electing again.
 *
 * Checkpoints ride along (docs/checkpoints.md, "The live flow"): the
 * workers' staged shards go to an ea__ckpt_svc that writes them on the
 * thread pool and reports each to the controller over the control channel;
 * the elected controller alone owns an ea__ckpt_ctl that commits MANIFESTs.
 * Both only record and log from their callbacks (ckpt_glue.c).
 *
 * Membership changes arrive from inside the SWIM core (on_change) where
 * nothing may call back into it, so they are only logged and flagged there;
 * an idle handle started by the first change of a loop turn then feeds the
 * view to the rendezvous (which re-elects), acts on the election and
 * schedules the peers file, once, before the loop sleeps (the Redis cluster
 * bus's "do side effects once per loop turn" habit: a burst of fifty
 * updates in one push-pull costs one election and at most one file write
 * per second).
 *
 * Shutdown is a drain, then a graceful leave (drain.c): SIGTERM/SIGINT or
 * `elastic-agent drain` asks the controller to re-form the group without
 * this node, then the workers stop, LEFT goes out, every handle closes and
 * uv_run returns because nothing is left — the loop is then closed here and
 * must report no leaked handle.
 */
#include "agent_int.h"

#include "ea_ckpt.h"
#include "ea_log.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

/* Peers file rewrites are rate-limited: membership can change many times a
 * second during a mass join, and the file only matters across restarts. */
#define PEERS_WRITE_INTERVAL_MS 1000
/* Remembered peers: enough to find a live one after losing many, few
 * enough that a rejoin does not open hundreds of connections at once. */
#define PEERS_MAX 64
/* Core calls that flagged work for ea__agent_core_done() are re-run at most
 * this many rounds per call: each round reports failures of workers that
 * could not be told something, and a report cannot make another worker
 * untellable more than once per worker (EA_RDZV_MAX_WPN). */
#define CORE_ROUNDS (EA_RDZV_MAX_WPN + 2)

typedef struct {
  uv_work_t w;
  ea__agent *a;
  char *buf;
  size_t len;
  int rc;
} peers_job;

typedef struct {
  uv_work_t w;
  ea__agent *a;
  ea_rdzv_gen g;
  char buf[256];
  size_t len;
  int rc;
} gen_job;

static void on_rdzv_timer(uv_timer_t *h);
static void on_settle(uv_idle_t *h);
static void peers_schedule(ea__agent *a);

/* ---- stalls ----------------------------------------------------------------- */

void ea__agent_stall(ea__agent *a, const char *why) {
  if (a->stall_ms) return;
  a->stall_ms = ea__agent_mono_ms();
  snprintf(a->stall_why, sizeof a->stall_why, "%s", why);
}

/* ---- driving the rendezvous core ---------------------------------------------- */

static void rdzv_rearm(ea__agent *a) {
  if (!a->handles_open) return;
  uint64_t d = ea_rdzv_next_deadline(a->rdzv), now = ea__agent_now_ms(a);
  if (d == UINT64_MAX) {
    uv_timer_stop(&a->rdzv_timer);
    return;
  }
  uv_timer_start(&a->rdzv_timer, on_rdzv_timer, d > now ? d - now : 0, 0);
}

/* Run after every call into the core: report what its io callbacks could
 * not (workers that could not be told something), act on orders that must
 * not run inside it, advertise the generation we run, re-arm the timer. */
void ea__agent_core_done(ea__agent *a) {
  if (a->phase == EA__PHASE_CLOSING) return;
  for (int round = 0; round < CORE_ROUNDS; round++) {
    bool any = false;
    if (a->persist_failed) {
      a->persist_failed = false;
      any = true;
      ea_rdzv_persisted(a->rdzv, ea__agent_now_ms(a), &a->persist_failed_gen, a->persist_failed_rc);
    }
    for (uint32_t k = 0; k < a->wpn; k++) {
      if (!a->w[k].fail_pending) continue;
      a->w[k].fail_pending = false;
      any = true;
      ea_rdzv_worker_failed(a->rdzv, ea__agent_now_ms(a), k);
    }
    if (!any) break;
  }
  /* Advertise the generation we run (never after LEFT went out: a new
   * incarnation would announce us alive again). */
  uint64_t lg = ea_rdzv_last_gen(a->rdzv);
  if (lg != a->meta.last_gen && a->tr && a->phase < EA__PHASE_LEAVING) {
    a->meta.last_gen = lg;
    ea_transport_set_meta(a->tr, &a->meta);
  }
  ea__agent_alerts_members(a); /* node_lost: the plan and the members as the core left them */
  ea_rdzv_status st;
  ea_rdzv_status_get(a->rdzv, &st);
  if (st.draining && !a->draining_seen) {
    a->draining_seen = true;
    if (a->phase == EA__PHASE_RUNNING)
      ea__agent_begin_drain(a, "asked to drain by another agent", true);
  }
  if (a->drained_order) {
    a->drained_order = false;
    if (a->phase == EA__PHASE_RUNNING || a->phase == EA__PHASE_DRAINING) {
      ea_log(EA_LOG_INFO, "drain", "drained: %s; stopping the workers and leaving", a->drained_why);
      ea__agent_stop_and_leave(a, false, "drained");
    }
  }
  rdzv_rearm(a);
  ea__agent_preempt_sync(a);
  ea__agent_job_sync(a);
}

/* One intent into the core; its return code (0 for calls that have none). */
static int apply(ea__agent *a, uint64_t now, const ea__intent *in) {
  switch (in->kind) {
    case EA__DO_WORKER_STARTING:
      ea_rdzv_worker_starting(a->rdzv, now, in->worker, in->on);
      return 0;
    case EA__DO_WORKER_READY:
      return ea_rdzv_worker_ready(a->rdzv, now, in->worker, in->gen, in->listen, in->u64,
                                  in->state_gen, in->nccl_id);
    case EA__DO_WORKER_STEP:
      ea_rdzv_worker_step(a->rdzv, now, in->worker, in->u64);
      return 0;
    case EA__DO_WORKER_FAILED:
      ea_rdzv_worker_failed(a->rdzv, now, in->worker);
      return 0;
    case EA__DO_WORKER_FAILED_PEER:
      ea_rdzv_worker_failed_peer(a->rdzv, now, in->worker, in->peer);
      return 0;
    case EA__DO_NODE_FAILED:
      ea_rdzv_node_failed(a->rdzv, now, in->node, in->text);
      return 0;
    case EA__DO_LINK_DOWN:
      return ea_rdzv_link_down(a->rdzv, now, in->node, in->peer);
    case EA__DO_HOLD_OUT:
      return ea_rdzv_hold_out(a->rdzv, now, in->node, in->hold, in->text);
    case EA__DO_DRAIN:
      return ea_rdzv_drain(a->rdzv, now, in->text);
    case EA__DO_REFORM:
      return ea_rdzv_reform(a->rdzv, now, in->text);
    case EA__DO_LAST_CKPT_DONE:
      ea_rdzv_last_ckpt_done(a->rdzv, now, in->u64);
      return 0;
    case EA__DO_LATEST_CKPT:
      ea_rdzv_set_latest_ckpt(a->rdzv, in->u64);
      return 0;
    case EA__DO_SETTLE:
      return 0;
  }
  return -EINVAL;
}

int ea__agent_do(ea__agent *a, const ea__intent *in, size_t n) {
  if (!a->rdzv || a->phase == EA__PHASE_CLOSING) return -ECANCELED;
  uint64_t now = ea__agent_now_ms(a);
  int first = 0;
  bool work = false;
  for (size_t i = 0; i < n; i++) {
    int rc = apply(a, now, &in[i]);
    if (rc < 0 && first == 0) first = rc;
    work = work || in[i].kind != EA__DO_LATEST_CKPT;
  }
  if (work) ea__agent_core_done(a);
  return first;
}

static void on_rdzv_timer(uv_timer_t *h) {
  ea__agent *a = h->data;
  if (a->phase == EA__PHASE_CLOSING) return;
  ea_rdzv_tick(a->rdzv, ea__agent_now_ms(a));
  ea__agent_core_done(a);
}

/* io.send */
static void io_send(void *ctx, const ea_node_id *to, const ea_addr *control, const ea_rdzv_msg *m) {
  ea__agent *a = ctx;
  if (a->ctl) ea__ctl_send(a->ctl, to, control, m);
}

static void gen_work(uv_work_t *w) {
  gen_job *j = (gen_job *)w;
  j->rc = ea__write_file_atomic(j->a->gen_path, j->buf, j->len, 0600);
}

static void gen_after(uv_work_t *w, int status) {
  gen_job *j = (gen_job *)w;
  ea__agent *a = j->a;
  int rc = status < 0 ? status : j->rc;
  ea_rdzv_gen g = j->g;
  free(j);
  if (a->phase == EA__PHASE_CLOSING) return;
  if (rc < 0)
    ea_log(EA_LOG_ERROR, "generation", "cannot persist generation %" PRIu64 " to %s: %s", g.term,
           a->gen_path, strerror(-rc));
  ea_rdzv_persisted(a->rdzv, ea__agent_now_ms(a), &g, rc);
  ea__agent_core_done(a);
}

/* io.persist: data_dir/generation on the thread pool; the core is told
 * when it is durable (never from inside this callback). */
static void io_persist(void *ctx, const ea_rdzv_gen *g) {
  ea__agent *a = ctx;
  gen_job *j = calloc(1, sizeof *j);
  int rc = j ? ea__gen_format(g, j->buf, sizeof j->buf) : -ENOMEM;
  if (rc >= 0) {
    j->a = a;
    j->g = *g;
    j->len = (size_t)rc;
    rc = uv_queue_work(&a->loop, &j->w, gen_work, gen_after);
  }
  if (rc < 0) {
    /* Cannot even queue it: ea__agent_core_done() reports the failure (the core
     * retries after its back-off). */
    ea_log(EA_LOG_ERROR, "generation", "cannot schedule the write of %s: %s", a->gen_path,
           strerror(-rc));
    free(j);
    a->persist_failed = true;
    a->persist_failed_gen = *g;
    a->persist_failed_rc = rc;
  }
}

/* Log the core's "why things are as they are" at info when its wording
 * changes, at debug when only a number in it moved (countdowns). */
static void io_reason(void *ctx, const char *text) {
  ea__agent *a = ctx;
  char shape[EA_RDZV_REASON_MAX];
  size_t k = 0;
  for (const char *p = text; *p && k + 1 < sizeof shape; p++)
    if (!isdigit((unsigned char)*p)) shape[k++] = *p;
  shape[k] = 0;
  bool same = strcmp(shape, a->reason_shape) == 0;
  memcpy(a->reason_shape, shape, k + 1);
  ea_log(same ? EA_LOG_DEBUG : EA_LOG_INFO, "rdzv", "%s", text);
}

/* ---- membership events ---------------------------------------------------------- */

/* Called from inside the core: log and flag only. */
static void on_change(void *ctx, const ea_member *m, uint8_t old_state) {
  ea__agent *a = ctx;
  char hex[33], addr[64];
  ea_node_id_hex(&m->id, hex);
  ea_addr_str(&m->meta.gossip, addr, sizeof addr);
  bool self = ea_node_id_cmp(&m->id, &a->id) == 0;
  /* A member re-announced alive with new metadata (every agent does when
   * it runs a new generation): not news for the log. */
  bool quiet = old_state == m->state && m->state == EA_STATE_ALIVE;
  ea_log(quiet                       ? EA_LOG_DEBUG
         : m->state == EA_STATE_DEAD ? EA_LOG_WARN
                                     : EA_LOG_INFO,
         "member", "name=%s id=%.8s addr=%s state=%s->%s incarnation=%" PRIu32 "%s",
         ea__agent_member_name(m), hex, addr,
         old_state == 0xff ? "new" : ea_member_state_str(old_state), ea_member_state_str(m->state),
         m->incarnation, self ? " (self)" : "");
  /* Into or out of DEAD: whatever the control connection to it held is
   * stale (ea__ctl_reset_peer).  Closing a handle is all it does: safe
   * inside the core. */
  if (!self && old_state != m->state && (m->state == EA_STATE_DEAD || old_state == EA_STATE_DEAD))
    ea__ctl_reset_peer(a->ctl, &m->id);
  a->members_dirty = true;
  /* An active idle handle makes the next poll non-blocking, so the
   * election and the peers file follow within this loop turn. */
  if (a->handles_open) uv_idle_start(&a->settle, on_settle);
}

static void on_join(void *ctx, int ok, const char *via) {
  ea__agent *a = ctx;
  if (ok == 2) {
    ea__ident_seed_is_self(a); /* the first node: nobody to wait for */
  } else if (ok) {
    a->joined = true;
  } else {
    a->join_failures++;
    ea__ident_join_failed(a, via); /* the gate says why no job starts */
  }
}

/* The controller changed?  Own the checkpoint committer accordingly and
 * log the change.  Run after ea_rdzv_view() has taken the new view.
 *
 * One election, computed by the rendezvous core (ea_rdzv_election), answers
 * every "who is the controller" question here: where shard reports go, who
 * owns the ea__ckpt_ctl that commits MANIFESTs, what `status` and the log
 * name.  The agent used to elect a second time itself, without the quorum
 * rule; it used only have/controller/eligible/reason, and ea_elect() picks
 * have/controller/eligible from the view alone (the quorum argument only
 * sets has_quorum and the reason's wording), so the core's answer names the
 * same member at the same moments: the agent hands the core the view in
 * the same on_settle turn it used to elect in, and the core re-elects
 * before returning.  Three cases to keep in mind:
 *   - before the first view the core has no answer (NULL): "no election
 *     yet", no controller, reports dropped — as before the first election;
 *   - without a quorum the core still names the controller (have is true,
 *     has_quorum false): it stays the checkpoint controller and the target
 *     of reports exactly as before; a minority side's workers are paused,
 *     so there are few reports, and the generation fence of ea_ckpt_commit
 *     refuses a stale commit anyway;
 *   - under quorum: none, or before any generation formed, has_quorum is
 *     true and the reason carries no count, as before.
 * The one visible difference: the reason (status controller.reason and
 * this log line) now carries the quorum count once a generation has
 * formed ("…; quorum 2 of 3", "no quorum: 1 of 3; …"). */
static void elect_update(ea__agent *a) {
  const ea_election *e = ea_rdzv_election(a->rdzv);
  if (!e) return;
  bool changed = !a->ctrl_logged || e->have != a->ctrl_logged_have ||
                 (e->have && ea_node_id_cmp(&e->controller, &a->ctrl_logged_id) != 0);
  a->ctrl_logged = true;
  a->ctrl_logged_have = e->have;
  a->ctrl_logged_id = e->controller;
  ea__agent_ckpt_ctl_update(a);
  if (!changed) return;
  if (e->have) {
    char hex[33];
    ea_node_id_hex(&e->controller, hex);
    const ea_member *c = ea__agent_find_member(a, &e->controller);
    ea_log(EA_LOG_INFO, "election", "controller=%s id=%s%s reason=\"%s\"", ea__agent_member_name(c),
           hex, ea_node_id_cmp(&e->controller, &a->id) == 0 ? " (self)" : "", e->reason);
  } else {
    ea_log(EA_LOG_WARN, "election", "no controller reason=\"%s\"", e->reason);
  }
}

/* A control message from another agent. */
/* A DRAIN applies only to the member it names precisely: our id, and an
 * incarnation of this run (from its first, the boot epoch, to the current
 * one).  A DRAIN of an earlier run of this node — captured and replayed
 * after a restart — names an older incarnation and is refused, loudly. */
static bool drain_is_for_us(ea__agent *a, const ea_rdzv_msg *m) {
  const ea_member *me = a->tr ? ea_swim_self(ea_transport_swim(a->tr)) : NULL;
  uint32_t now_inc = me ? me->incarnation : a->first_inc;
  bool id_ok = ea_node_id_cmp(&m->target, &a->id) == 0;
  if (id_ok && m->target_inc >= a->first_inc && m->target_inc <= now_inc) return true;
  char want[33], got[33], src[33];
  ea_node_id_hex(&a->id, want);
  ea_node_id_hex(&m->target, got);
  ea_node_id_hex(&m->src, src);
  a->drains_refused++;
  ea_log(EA_LOG_WARN, "drain",
         "refused a DRAIN from %.12s for '%s' id %.12s incarnation %u: this node is id %.12s "
         "incarnation %u (this run: %u..%u)%s",
         src, m->name, got, m->target_inc, want, now_inc, a->first_inc, now_inc,
         id_ok ? " — an old command (an earlier run of this node), replayed or late"
               : " — meant for another member");
  return false;
}

static void on_control(void *ctx, const ea_rdzv_msg *m) {
  ea__agent *a = ctx;
  if (a->phase >= EA__PHASE_LEAVING || !a->rdzv) return;
  if (m->type == EA_RDZV_DRAIN && !drain_is_for_us(a, m)) return;
  /* A member of another cluster (ident.c said so once) plans nothing here. */
  const ea_member *src = ea__agent_find_member(a, &m->src);
  if (src && ea__ident_foreign(a, src)) return;
  ea_rdzv_recv(a->rdzv, ea__agent_now_ms(a), m);
  ea__agent_core_done(a);
}

/* ---- remembered peers ------------------------------------------------------------- */

static void peers_work(uv_work_t *w) {
  peers_job *j = (peers_job *)w;
  j->rc = ea__write_file_atomic(j->a->peers_path, j->buf, j->len, 0600);
}

static void peers_after(uv_work_t *w, int status) {
  peers_job *j = (peers_job *)w;
  ea__agent *a = j->a;
  if (status == 0 && j->rc < 0)
    ea_log(EA_LOG_WARN, "peers", "cannot write %s: %s", a->peers_path, strerror(-j->rc));
  free(j->buf);
  free(j);
  a->peers_busy = false;
  a->peers_last_ms = uv_now(&a->loop);
  if (a->peers_dirty && a->phase <= EA__PHASE_DRAINING) peers_schedule(a);
}

static void peers_write_now(ea__agent *a) {
  a->peers_dirty = false;
  const ea_member *ms;
  size_t n = ea_swim_members(ea_transport_swim(a->tr), &ms);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len); /* in memory: written off the loop */
  if (!f) return;
  fputs(
      "# elastic-agent: peers last seen alive (gossip address, name); rewritten "
      "on membership changes\n",
      f);
  size_t k = 0;
  for (size_t i = 0; i < n && k < PEERS_MAX; i++) {
    if (ea_node_id_cmp(&ms[i].id, &a->id) == 0) continue;
    if (ms[i].state != EA_STATE_ALIVE && ms[i].state != EA_STATE_SUSPECT) continue;
    char addr[64];
    ea_addr_str(&ms[i].meta.gossip, addr, sizeof addr);
    fprintf(f, "%s %s\n", addr, ea__agent_member_name(&ms[i]));
    k++;
  }
  bool failed = ferror(f) != 0;
  failed |= fclose(f) != 0;
  /* With nobody else alive, keep the previous list: after a partition or a
   * cluster-wide outage, the last known peers are still the best guess. */
  if (k == 0 || failed) {
    free(buf);
    return;
  }
  peers_job *j = calloc(1, sizeof *j);
  if (!j) {
    free(buf);
    return;
  }
  j->a = a;
  j->buf = buf;
  j->len = len;
  if (uv_queue_work(&a->loop, &j->w, peers_work, peers_after) < 0) {
    free(j->buf);
    free(j);
    return;
  }
  a->peers_busy = true;
}

/* The main tick, every EA__MX_PERIOD_MS.  Progress and stalls are sampled
 * first, then the checkpoint and identity work, and the metrics snapshot
 * is published last (it shows what this tick did). */
static void main_tick(ea__agent *a) {
  if (a->phase == EA__PHASE_CLOSING || !a->tr || !a->rdzv) return;
  uint64_t now = ea__agent_mono_ms();
  ea__agent_metrics_sample(a, now);
  ea__agent_ckpt_tick(a);
  ea__ident_tick(a);
  ea__agent_spare_tick(a);
  ea__agent_metrics_publish(a, now);
}

/* The loop's tickers, all on one timer every EA__TICK_MS: the link probe
 * (job_glue.c) every tick, the ranks' pace (job_pace.c) every EA__PACE_MS,
 * the main tick every EA__MX_PERIOD_MS.  One timer, as memberlist's one
 * scheduler: a periodic job of the floor is a line here, not a handle of
 * its own to open and close. */
_Static_assert(EA__MX_PERIOD_MS % EA__TICK_MS == 0, "main tick period");
_Static_assert(EA__PACE_MS % EA__TICK_MS == 0, "pace period");
static void on_tick(uv_timer_t *h) {
  ea__agent *a = h->data;
  if (a->phase == EA__PHASE_CLOSING) return;
  uint64_t n = ++a->ticks;
  ea__agent_link_tick(a);
  if (n % (EA__PACE_MS / EA__TICK_MS) == 0) ea__agent_pace_tick(a);
  /* Last: the snapshot it publishes shows what this tick did (a straggler
   * alert the pace tick just raised, say). */
  if (n % (EA__MX_PERIOD_MS / EA__TICK_MS) == 0) main_tick(a);
}

static void peers_timer_cb(uv_timer_t *h) {
  ea__agent *a = h->data;
  if (a->phase <= EA__PHASE_DRAINING && a->peers_dirty && !a->peers_busy) peers_write_now(a);
}

static void peers_schedule(ea__agent *a) {
  a->peers_dirty = true;
  if (a->peers_busy) return; /* peers_after re-schedules */
  uint64_t now = uv_now(&a->loop);
  if (a->peers_last_ms == 0 || now - a->peers_last_ms >= PEERS_WRITE_INTERVAL_MS) {
    peers_write_now(a);
  } else if (!uv_is_active((uv_handle_t *)&a->peers_timer)) {
    uv_timer_start(&a->peers_timer, peers_timer_cb,
                   PEERS_WRITE_INTERVAL_MS - (now - a->peers_last_ms), 0);
  }
}

static void on_settle(uv_idle_t *h) {
  ea__agent *a = h->data;
  uv_idle_stop(h);
  if (!a->members_dirty || !a->tr || a->phase >= EA__PHASE_LEAVING) return;
  a->members_dirty = false;
  const ea_member *ms;
  size_t n = ea_swim_members(ea_transport_swim(a->tr), &ms);
  /* The cluster's own members only, and nothing while the --join gate is
   * closed (ident.c): no view, no election, no generation. */
  ea_member *mine = NULL;
  size_t nmine = n;
  if (ea__ident_settle(a, ms, n, &mine, &nmine)) {
    ea_rdzv_view(a->rdzv, ea__agent_now_ms(a), mine ? mine : ms, nmine);
    elect_update(a);
    ea__ident_after_elect(a, ms, n);
    ea__agent_core_done(a);
  }
  free(mine);
  if (a->phase <= EA__PHASE_DRAINING) peers_schedule(a);
}

void ea__agent_settle_soon(ea__agent *a) {
  a->members_dirty = true;
  if (a->handles_open) uv_idle_start(&a->settle, on_settle);
}

/* ---- run ------------------------------------------------------------------------------ */

static const ea__admin_cmd admin_cmds[] = {
    {"status", "members, controller, generation, workers, counters and configuration as JSON",
     ea__agent_cmd_status},
    {"drain", "drain NAME: re-form the group without that member, which then leaves and exits",
     ea__agent_cmd_drain, .owner_only = true},
};

void ea__agent_handles_init(ea__agent *a) {
  uv_signal_init(&a->loop, &a->sigterm);
  uv_signal_init(&a->loop, &a->sigint);
  uv_idle_init(&a->loop, &a->settle);
  uv_timer_init(&a->loop, &a->peers_timer);
  uv_timer_init(&a->loop, &a->rdzv_timer);
  uv_timer_init(&a->loop, &a->drain_timer);
  uv_timer_init(&a->loop, &a->tick);
  a->sigterm.data = a->sigint.data = a->settle.data = a->peers_timer.data = a;
  a->rdzv_timer.data = a->drain_timer.data = a->tick.data = a;
  a->handles_open = true;
}

void ea__agent_opts_default(ea__agent_opts *o) {
  memset(o, 0, sizeof *o);
  ea_config_default(&o->cfg);
  snprintf(o->bind, sizeof o->bind, "%s", EA__DEFAULT_BIND);
  snprintf(o->data_dir, sizeof o->data_dir, "%s", EA__DEFAULT_DATA_DIR);
  snprintf(o->role, sizeof o->role, "worker");
  char host[256];
  if (gethostname(host, sizeof host) < 0) snprintf(host, sizeof host, "node");
  host[sizeof host - 1] = 0;
  snprintf(o->name, sizeof o->name, "%.*s", EA_NAME_MAX - 1, host);
}

/* A listener that could not bind: name the address and the flag that
 * moves it (the usual cause is a second agent on the host, or a port
 * below 1024 without the privilege). */
static void bind_hint(int rc, const char *what, const char *addr, const char *flag, char *err,
                      size_t errlen) {
  if (rc != -EADDRINUSE && rc != -EACCES && rc != -EADDRNOTAVAIL && rc != -EPERM) return;
  char was[512];
  snprintf(was, sizeof was, "%.500s", err);
  snprintf(err, errlen,
           "cannot listen for %s on %s: %s; %s another address with %s HOST:PORT (port 0: any "
           "free one)",
           what, addr, was, rc == -EADDRINUSE ? "is another agent running here? choose" : "choose",
           flag);
}

/* The control listener's address: --control-bind, or the gossip bind
 * address with the next port (an ephemeral gossip port gets an ephemeral
 * control port). */
static int control_bind_addr(const ea__agent_opts *o, ea_addr *out, char *err, size_t errlen) {
  if (o->control_bind[0]) {
    if (ea_addr_parse(o->control_bind, 0, out) < 0) {
      snprintf(err, errlen, "--control-bind: cannot parse '%s'", o->control_bind);
      return -EINVAL;
    }
    return 0;
  }
  if (ea_addr_parse(o->bind, 7000, out) < 0) {
    snprintf(err, errlen, "--bind: cannot parse '%s'", o->bind);
    return -EINVAL;
  }
  out->port = out->port && out->port < 65535 ? (uint16_t)(out->port + 1) : 0;
  return 0;
}

/* The communicator backend the workers use.  auto: the built-in trainer
 * computes on the CPU, so its buffers are host memory and the tcp ring is
 * the right fit; a user's program (worker_command) gets nccl when it is
 * built in and this node has an NVIDIA device. */
static int pick_backend(const ea__agent_opts *o, ea_comm_backend *b, char *err, size_t errlen) {
  const char *s = o->cfg.distributed.backend;
  if (strcmp(s, "auto") == 0) {
    bool gpu = access("/dev/nvidiactl", F_OK) == 0;
    bool prog = o->cfg.compute.worker_command[0] || o->worker_argc > 0;
    *b = prog && gpu && ea_comm_nccl_available() ? EA_COMM_NCCL : EA_COMM_TCP;
    return 0;
  }
  if (ea_comm_backend_parse(s, b) < 0) {
    snprintf(err, errlen, "distributed.backend: unknown backend '%s'", s);
    return -EINVAL;
  }
  if (*b == EA_COMM_NCCL && !ea_comm_nccl_available()) {
    snprintf(err, errlen, "distributed.backend: nccl is not built into this binary");
    return -EOPNOTSUPP;
  }
  return 0;
}

/* What every worker inherits: its node's name for its log lines; and the
 * built-in trainer's: one BLAS thread unless the operator chose (several
 * workers share a node's cores, and the built-in model's matrices are
 * small), and the OpenBLAS kernel choice when Debian's 0.3.21 misdetects
 * this CPU (~6× slower otherwise).  A user's program (restart and library
 * mode) gets neither, as under torchrun: its torch and numpy bring their own
 * BLAS, and OMP_NUM_THREADS=1 with several workers a node already bounds
 * their threads (tests/e2e/test_torchrun_env.sh compares the two). */
static void worker_environment(const ea__agent *a) {
  const ea__agent_opts *o = a->o;
  setenv("EA_NODE_NAME", o->name, 1);
  if (a->mode == EA__MODE_LIBRARY) {
    /* `import elastic_agent` works on any node that has the agent: its
     * package is put first on the program's path (EA_PYTHONPATH overrides
     * where it is looked for; see ea__launch_python_dir). */
    char dir[EA_PATH_MAX];
    int rc = ea__launch_python_home(dir, sizeof dir);
    if (rc == 0) {
      const char *old = getenv("PYTHONPATH");
      char *pp = NULL;
      if (asprintf(&pp, "%s%s%s", dir, old && *old ? ":" : "", old && *old ? old : "") >= 0) {
        setenv("PYTHONPATH", pp, 1);
        free(pp);
      }
      ea_log(EA_LOG_INFO, "start", "library mode: workers get PYTHONPATH=%s%s", dir,
             old && *old ? ":$PYTHONPATH" : "");
    } else {
      ea_log(EA_LOG_WARN, "start",
             "library mode: python/elastic_agent not found next to this binary (%s); the "
             "program must find it itself (pip install ./python, or set EA_PYTHONPATH)",
             strerror(-rc));
    }
    if (o->cfg.compute.workers_per_node > 1) setenv("OMP_NUM_THREADS", "1", 0);
  }
  if (a->mode != EA__MODE_BUILTIN) return;
  setenv("OPENBLAS_NUM_THREADS", "1", 0);
  const char *core = ea_train_blas_coretype_hint();
  if (core && !getenv("OPENBLAS_CORETYPE")) {
    setenv("OPENBLAS_CORETYPE", core, 1);
    ea_log(EA_LOG_INFO, "start",
           "OpenBLAS fell back to generic kernels on this CPU: workers get OPENBLAS_CORETYPE=%s",
           core);
  }
}

/* The effective job configuration (defaults < --config < --set), written
 * for the workers, which load it with --config: they then run exactly the
 * job the agent was given, flags included. */
static int write_job_file(ea__agent *a, char *err, size_t errlen) {
  int n = ea_config_dump(&a->o->cfg, NULL, 0);
  char *buf = n > 0 ? malloc((size_t)n + 1) : NULL;
  if (!buf || ea_config_dump(&a->o->cfg, buf, (size_t)n + 1) != n) {
    free(buf);
    snprintf(err, errlen, "cannot render the job configuration");
    return -ENOMEM;
  }
  int rc = ea__write_file_atomic(a->job_path, buf, (size_t)n, 0600);
  free(buf);
  if (rc < 0) snprintf(err, errlen, "cannot write %s: %s", a->job_path, strerror(-rc));
  return rc;
}

/* The rendezvous keys of the job file (the job file is config/'s, the
 * rendezvous core knows nothing of it).  restart_mode and max_restarts
 * depend on the launch mode: start_rdzv sets them. */
static void rdzv_config_from(ea_rdzv_config *c, const ea_config *job) {
  c->min_nodes = job->compute.min_nodes;
  c->max_nodes = job->compute.max_nodes;
  c->workers_per_node = job->compute.workers_per_node;
  c->scale_up_delay_ms = job->distributed.scale_up_delay_ms;
  c->rendezvous_timeout_ms = job->runtime.rendezvous_timeout_seconds * 1000u;
  c->quorum_none = strcmp(job->distributed.quorum, "none") == 0;
  c->min_nodes_timeout_ms = c->rendezvous_timeout_ms;
  c->flap_threshold = job->runtime.flap_threshold;
  c->flap_window_ms = job->runtime.flap_window_seconds * 1000u;
  c->flap_cooldown_ms = job->runtime.flap_cooldown_seconds * 1000u;
}

void ea__agent_rdzv_config(const ea__agent *a, ea_rdzv_config *rc) {
  ea_rdzv_config_default(rc);
  rdzv_config_from(rc, &a->o->cfg);
  /* Restart mode: every generation restarts the programs (no step
   * boundaries to wait for) and the job's restarts are counted; builtin and
   * library: a node restarts its own workers (runtime.max_restarts per
   * worker, then it drains). */
  rc->restart_mode = a->mode == EA__MODE_TORCHRUN;
  rc->max_restarts = a->mode == EA__MODE_TORCHRUN ? a->o->cfg.runtime.max_restarts : UINT32_MAX;
  rc->last_ckpt_ms = ea__agent_preempt_grace_ms(a);
}

static int start_rdzv(ea__agent *a, const ea_rdzv_gen *persisted, uint64_t seed, char *err,
                      size_t errlen) {
  ea_rdzv_config rc;
  ea__agent_rdzv_config(a, &rc);
  ea_rdzv_io io = {.ctx = a,
                   .send = io_send,
                   .order = ea__agent_io_order,
                   .persist = io_persist,
                   .reason = io_reason};
  a->rdzv = ea_rdzv_new(&rc, &a->id, persisted, &io, seed, ea__agent_now_ms(a));
  if (!a->rdzv) {
    snprintf(err, errlen,
             "cannot create the rendezvous (compute.max_nodes x workers_per_node over %u, or out "
             "of memory)",
             EA_RDZV_MAX_WORLD);
    return -EINVAL;
  }
  return 0;
}

int ea__agent_run(const ea__agent_opts *o) {
  char err[EA_PATH_MAX + 256];
  ea_log_set_job(o->cfg.experiment.name); /* a field of every JSON line from here on */
  int rc = ea__data_dir_prepare(o->data_dir, err, sizeof err);
  int lock_fd = -1;
  if (rc == 0) rc = ea__data_dir_lock(o->data_dir, &lock_fd, err, sizeof err);
  ea__agent *a = calloc(1, sizeof *a);
  if (rc == 0 && !a) rc = -ENOMEM, snprintf(err, sizeof err, "out of memory");
  bool created = false;
  if (rc == 0) rc = ea__node_id_load(o->data_dir, &a->id, &created, err, sizeof err);
  if (rc == 0) rc = ea__boot_epoch_next(o->data_dir, &a->sender.epoch, err, sizeof err);
  if (rc == 0) a->sender.id = a->id;
  ea_rdzv_gen persisted = {0};
  if (rc == 0) rc = ea__gen_load(o->data_dir, &persisted, err, sizeof err);
  if (rc == 0) rc = ea__agent_ckpt_dir_resolve(o, a->ckpt_dir, sizeof a->ckpt_dir, err, sizeof err);
  uint8_t key[EA_KEY_BYTES];
  bool have_key = false, usage = false;
  if (rc == 0 && o->key_file[0]) {
    const char *kerr = "key file";
    rc = ea_wire_load_key(o->key_file, key, &kerr);
    if (rc < 0) snprintf(err, sizeof err, "--key-file %.300s: %s", o->key_file, kerr);
    if (rc == -EPERM)
      usage = true; /* a key others can read: the operator's to fix, exit 2 */
    else
      have_key = true;
  }
  ea_addr cbind;
  if (rc == 0) rc = control_bind_addr(o, &cbind, err, sizeof err);
  if (rc == 0 && a) {
    a->o = o;
    rc = ea__agent_job_preflight(a, &usage, err, sizeof err);
  }
  if (rc == 0) rc = ea__ident_load(a, have_key ? key : NULL, &usage, err, sizeof err);
  if (rc == 0 && a) {
    a->wpn = o->cfg.compute.workers_per_node;
    if (a->mode == EA__MODE_BUILTIN) {
      a->dims = (ea_model_dims){.context = o->cfg.train.context,
                                .embed_dim = o->cfg.train.embed_dim,
                                .hidden = o->cfg.train.hidden,
                                .layers = o->cfg.train.layers};
      a->have_dims = ea_state_layout(&a->dims, NULL, NULL) == 0;
    }
    if (a->mode == EA__MODE_LIBRARY) {
      /* A library program forms its own torch group; the agent's wire
       * backend is tcp (peers = the workers' stores), and distributed.backend
       * reaches the program as commit.torch_backend (docs/pytorch.md). */
      ea_comm_backend b;
      a->backend = EA_COMM_TCP;
      if (strcmp(o->cfg.distributed.backend, "auto") != 0 &&
          ea_comm_backend_parse(o->cfg.distributed.backend, &b) < 0) {
        snprintf(err, sizeof err, "distributed.backend: unknown backend '%s'",
                 o->cfg.distributed.backend);
        rc = -EINVAL;
      }
    } else {
      rc = pick_backend(o, &a->backend, err, sizeof err);
    }
  }
  if (rc == 0) {
    snprintf(a->job_path, sizeof a->job_path, "%s/job.yaml", o->data_dir);
    rc = write_job_file(a, err, sizeof err);
  }
  if (rc < 0) {
    ea_log(EA_LOG_ERROR, "start", "%s", err);
    if (lock_fd >= 0) close(lock_fd);
    free(a);
    return usage ? EA__EXIT_USAGE : EA__EXIT_START;
  }
  ea_node_id_hex(&a->id, a->idhex);
  snprintf(a->sock_path, sizeof a->sock_path, "%s/%s", o->data_dir, EA__ADMIN_SOCK);
  snprintf(a->peers_path, sizeof a->peers_path, "%s/%s", o->data_dir, EA__PEERS_FILE);
  snprintf(a->gen_path, sizeof a->gen_path, "%s/%s", o->data_dir, EA__GEN_FILE);
  if (created)
    ea_log(EA_LOG_INFO, "start", "new node id %s written to %s/%s", a->idhex, o->data_dir,
           EA__NODE_ID_FILE);
  if (persisted.term) {
    char g[48];
    ea_rdzv_gen_str(&persisted, g, sizeof g);
    ea_log(EA_LOG_INFO, "start", "last generation accepted here: %s (%s)", g, a->gen_path);
  }
  ea__agent_ckpt_gen_floor(a->ckpt_dir, &persisted);
  worker_environment(a);

  uv_loop_init(&a->loop);
  a->start_ms = uv_now(&a->loop);
  uint64_t seed = 0;
  if (getrandom(&seed, sizeof seed, 0) != sizeof seed) seed = a->start_ms ^ (uint64_t)getpid();

  rc = ea__agent_alerts_start(a, err, sizeof err);
  if (rc == 0)
    rc = ea__ctl_start(&a->loop, &cbind, have_key ? key : NULL, &a->sender, on_control, a, &a->ctl,
                       err, sizeof err);
  /* (its message already names the address and --control-bind) */
  if (rc == 0) { /* the codecs that share the channel, by family; the rest is the rendezvous's */
    ea__ctl_on_family(a->ctl, EA__JOB_FAMILY, ea__agent_job_frame);
    ea__ctl_on_family(a->ctl, EA__PROBE_FAMILY, ea__agent_probe_frame);
    ea__ctl_on_family(a->ctl, EA__CKPT_FAMILY, ea__agent_ckpt_frame);
  }
  ea_transport_opts to = {
      .bind = o->bind,
      .advertise = o->advertise[0] ? o->advertise : NULL,
      .key = have_key ? key : NULL,
      .swim = o->cfg.membership,
      .self = a->id,
      .sender = &a->sender,
      /* This run's first incarnation is its boot epoch: above every
       * incarnation of an earlier run unless one refuted more times than
       * seconds passed between the runs. */
      .incarnation = a->sender.epoch < UINT32_MAX ? (uint32_t)a->sender.epoch : UINT32_MAX,
      .seed = seed,
      .join_retry_max_ms = o->cfg.runtime.join_retry_max_ms,
      .control_port = a->ctl ? ea__ctl_bound(a->ctl)->port : 0,
      .ctx = a,
      .on_change = on_change,
      .on_join = on_join,
  };
  snprintf(to.meta.name, sizeof to.meta.name, "%s", o->name);
  snprintf(to.meta.role, sizeof to.meta.role, "%s", o->role);
  snprintf(to.meta.tags, sizeof to.meta.tags, "%s", o->tags);
  ea__ident_start_tags(a, to.meta.tags, sizeof to.meta.tags); /* identity, or "starting" */
  /* A library program is taken in only after its hello (workers.c); the
   * workers start after the transport, so the first gossip says it. */
  if (a->mode == EA__MODE_LIBRARY && strcmp(o->role, "observer") != 0 && a->wpn > 0)
    (void)ea_rdzv_tags_set(to.meta.tags, sizeof to.meta.tags, EA_RDZV_TAG_STARTING, true);
  snprintf(to.meta.version, sizeof to.meta.version, "%s", EA_VERSION);
  a->meta = to.meta;
  if (rc == 0) {
    rc = ea_transport_start(&a->loop, &to, &a->tr, err, sizeof err);
    if (rc < 0) bind_hint(rc, "gossip", o->bind, "--bind", err, sizeof err);
  }
  if (have_key) {
    ea__ring_key(key, a->ring_key);
    a->have_ring_key = true;
  }
  memset(key, 0, sizeof key);
  a->first_inc = to.incarnation;
  if (rc == 0)
    rc = ea__admin_start(&a->loop, a->sock_path, admin_cmds,
                         sizeof admin_cmds / sizeof admin_cmds[0], a, &a->admin, err, sizeof err);
  if (rc == 0) rc = start_rdzv(a, &persisted, seed, err, sizeof err);
  if (rc == 0) rc = ea__agent_job_start(a, err, sizeof err);
  if (rc == 0) {
    ea__agent_handles_init(a);
    rc = ea__agent_workers_start(a, err, sizeof err);
  }
  if (rc == 0) rc = ea__agent_metrics_start(a, err, sizeof err);
  if (rc == 0) {
    main_tick(a); /* a first snapshot before the first request */
    uv_timer_start(&a->tick, on_tick, EA__TICK_MS, EA__TICK_MS);
  }
  if (rc == 0) rc = ea__agent_notice_start(a, err, sizeof err);
  if (rc == 0) rc = ea__agent_preempt_start(a, err, sizeof err);
  if (rc == 0 && o->smoke) ea__smoke_start(a);
  if (rc < 0) {
    ea_log(EA_LOG_ERROR, "start", "%s", err); /* ea__agent_shutdown closes what started */
  } else {
    uv_signal_start(&a->sigterm, ea__agent_on_signal, SIGTERM);
    uv_signal_start(&a->sigint, ea__agent_on_signal, SIGINT);
    a->meta = ea_swim_self(ea_transport_swim(a->tr))->meta;

    char gaddr[64], caddr[64];
    ea_addr_str(ea_transport_addr(a->tr), gaddr, sizeof gaddr);
    ea_addr_str(ea_transport_control(a->tr), caddr, sizeof caddr);
    ea_log(EA_LOG_INFO, "listen",
           "name=%s id=%s gossip=%s (udp) push-pull=%s (tcp) control=%s (tcp) admin=%s "
           "version=%s role=%s job=%s",
           o->name, a->idhex, gaddr, gaddr, caddr, a->sock_path, EA_VERSION, o->role,
           o->cfg.experiment.name);
    ea_log(EA_LOG_INFO, "start",
           "job: %u worker%s per node (%s, protocol %s), min_nodes %u, max_nodes %u, backend %s, "
           "%" PRIu64 " steps, global batch %u; workers load %s",
           a->wpn, a->wpn == 1 ? "" : "s",
           a->mode == EA__MODE_BUILTIN        ? "built-in trainer"
           : o->cfg.compute.worker_command[0] ? o->cfg.compute.worker_command
                                              : o->worker_argv[0],
           ea__mode_name(a->mode), o->cfg.compute.min_nodes, o->cfg.compute.max_nodes,
           ea_comm_backend_name(a->backend), o->cfg.train.steps, o->cfg.distributed.global_batch,
           a->job_path);
    if (!have_key)
      ea_log(EA_LOG_WARN, "security",
             "gossip is not authenticated: anyone who can reach UDP/TCP port %u can join this "
             "cluster and read its membership; create a key with `elastic-agent keygen FILE` "
             "and give every agent --key-file FILE",
             ea_transport_addr(a->tr)->port);
    ea_addr *peers = NULL;
    size_t npeers = 0;
    if (ea__peers_load(o->data_dir, &peers, &npeers) == 0 && npeers > 0)
      ea_log(EA_LOG_INFO, "join", "%zu remembered peer%s in %s will be tried too", npeers,
             npeers == 1 ? "" : "s", a->peers_path);
    a->members_dirty = true; /* first election and view: ourselves */
    uv_idle_start(&a->settle, on_settle);
    rc = ea_transport_join(a->tr, o->join, peers, npeers, err, sizeof err);
    free(peers);
    if (rc < 0) ea_log(EA_LOG_ERROR, "join", "%s", err);
  }
  if (rc < 0) ea__agent_shutdown(a);

  uv_run(&a->loop, UV_RUN_DEFAULT);
  ea__agent_alerts_free(a); /* flushes what is queued, bounded */
  ea__agent_spare_free(a);
  int lrc = uv_loop_close(&a->loop);
  if (lrc < 0) {
    ea_log(EA_LOG_ERROR, "exit", "event loop still has open handles at exit: %s", uv_strerror(lrc));
    if (rc == 0) rc = lrc;
  } else if (rc == 0) {
    ea_log(EA_LOG_INFO, "exit", "stopped cleanly");
  }
  ea_rdzv_free(a->rdzv);
  int status = rc < 0 ? EA__EXIT_START : a->exit_status;
  if (rc == 0 && status)
    ea_log(EA_LOG_ERROR, "exit", "exit status %d: %s", status,
           status == EA__EXIT_USAGE ? "refused (see the error above)"
                                    : "the job failed (see the alert above)");
  explicit_bzero(a->ring_key, sizeof a->ring_key);
  free(a->w);
  free(a->ipc);
  free(a->run_ids);
  close(lock_fd);
  free(a);
  return status;
}
