/* rdzv_harness.h — a whole cluster of rendezvous cores in one process, in
 * virtual time: a fake control network, fake membership views, fake
 * workers and a fake disk, with faults, and the protocol's invariants
 * checked on every step.
 *
 * The network delivers every message through the real codec (encode at
 * send, decode at delivery), with a per-link delay, FIFO order per link (TCP
 * semantics), random loss, and partitions (a blocked link drops what is
 * sent and what was in flight).  Views are what SWIM would show: a peer
 * that crashed, left or is cut off turns dead (left) and a healed or
 * restarted one alive again, each agent noticing after its own detection
 * lag, so views disagree for a while after every change — which is how two
 * controllers happen.  meta.last_gen is gossiped with the same lag.
 *
 * Workers: a PREPARE order aborts them, and each reports ready a little
 * later (or, on an agent marked fail_ready, fails instead); a COMMIT starts
 * them training; a generation makes progress (one step per step_ms, all its
 * ranks in lockstep) only while every member runs it and they can all
 * reach each other, otherwise its workers fail after comm_timeout_ms, as a
 * real communicator would.  The disk holds the last persisted generation; a
 * crash loses a persist still in flight.
 *
 * Invariants checked as things happen (the first violation is kept in
 * h->violation with the time):
 *   - per agent, generations ordered to PREPARE strictly increase, across
 *     restarts too (the persisted number comes back);
 *   - COMMIT is ordered only for the generation last prepared, and only when
 *     no local worker is still running another one;
 *   - one generation number means one plan, whoever receives it, and its
 *     state-sync source holds the highest step of the plan;
 *   - every PREPARE/COMMIT an agent issues and every READY it answers
 *     carries a generation no newer than what its disk holds, and so does
 *     the last_gen it gossips;
 *   - with quorum: majority, at most one generation makes progress at any
 *     moment.
 */
#ifndef RDZV_HARNESS_H
#define RDZV_HARNESS_H

#include "ea_rdzv.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define H_MAX 12
#define H_WPN_MAX 4

enum { HW_IDLE = 0, HW_PREPARING, HW_READY, HW_TRAINING, HW_FAILED, HW_DEAD };

typedef struct h_sim h_sim;

typedef struct {
  int st;
  ea_rdzv_gen gen; /* PREPARING/READY: the one prepared; TRAINING: the one run */
  uint64_t step;
  uint64_t state_gen;   /* u64 generation of its last step (the agent's ea__agent_wk.state_gen) */
  uint64_t stall_since; /* TRAINING but unable to progress since (0: not) */
  /* restarted (h_restart_worker): no READY before its hello at this time
   * (a library program importing torch); 0: up */
  uint64_t hello_at;
} h_worker;

typedef struct {
  int idx;
  ea_node_id id;
  char name[16];
  /* its gossip tags (EA_RDZV_TAG_STARTING), seen at once */
  char tags[EA_TAGS_MAX];
  bool started; /* ever started (so it appears in views) */
  bool up;      /* process running */
  bool left;    /* drained and gone */
  bool drained;
  uint32_t inc; /* process incarnation: bumps on every restart */
  ea_rdzv *r;
  ea_rdzv_gen disk;      /* durable */
  ea_rdzv_gen last_prep; /* newest PREPARE order ever (survives restarts) */
  ea_rdzv_gen last_commit;
  ea_rdzv_gen last_accepted; /* status.accepted last seen, for monotonicity */
  h_worker w[H_WPN_MAX];
  /* view bookkeeping: what i shows about j, and the change it waits to show */
  uint8_t shown[H_MAX], pending[H_MAX];
  uint64_t pending_since[H_MAX];
  uint64_t gossip_gen[H_MAX];                            /* last_gen of j as i knows it */
  uint64_t gossip_next[H_MAX], gossip_next_since[H_MAX]; /* on its way */
  ea_member view[H_MAX];
  size_t nview;
  uint32_t lag_ms;
  bool fresh;      /* booted, has not looked at the cluster yet */
  bool fail_ready; /* its workers fail instead of getting ready (a bad GPU) */
  uint64_t deadline;
  uint64_t boot_at, down_at; /* when it last started, and last crashed */
  /* observations for tests */
  uint64_t commits, pauses, prepares;
  uint64_t last_commit_at, last_step_at;
  char last_reason[EA_RDZV_REASON_MAX];
} h_agent;

typedef enum { H_DELIVER = 0, H_DROP = 1 } h_verdict;

enum { EV_MSG = 1, EV_PERSIST, EV_WREADY, EV_CRASH, EV_LEAVE, EV_HELLO };

typedef struct {
  uint64_t t, seq;
  int kind;
  int a, b;     /* from, to / agent, worker */
  uint32_t inc; /* incarnation of the agent the event belongs to */
  ea_rdzv_gen gen;
  uint8_t *buf;
  size_t len;
} h_event;

struct h_sim {
  uint64_t seed, rng;
  uint64_t now;
  int n;
  ea_rdzv_config cfg;
  h_agent a[H_MAX];
  int group[H_MAX];       /* partition: links between different groups are cut */
  bool cut[H_MAX][H_MAX]; /* single links cut (both directions set by h_cut) */
  /* Gray links (h_gray): the workers' data from i to j is lost while the
   * control network and the views still work.  A generation with such a
   * pair cannot step, and i's workers, failing, name j as the peer they
   * could not exchange with (as the tcp ring's sender sees its bytes go
   * unacknowledged); every other worker fails without naming anyone. */
  bool gray[H_MAX][H_MAX];
  double loss;
  uint32_t delay_min_ms, delay_max_ms;
  uint32_t lag_min_ms, lag_max_ms;
  uint32_t step_ms, comm_timeout_ms, persist_ms, ready_min_ms, ready_max_ms;
  double persist_fail; /* probability that a persist reports -EIO */
  uint64_t link_last[H_MAX][H_MAX];
  uint64_t next_step_at;
  /* the newest committed checkpoint every agent knows (h_set_latest) */
  uint64_t latest_gen, latest_step;
  h_event *ev;
  size_t nev, capev;
  uint64_t seq;
  /* a test's filter on every message sent (after encoding) */
  h_verdict (*filter)(h_sim *h, int from, int to, const ea_rdzv_msg *m, void *ctx);
  void *filter_ctx;
  /* plans by generation, to check one number = one plan */
  struct {
    ea_rdzv_gen gen;
    uint64_t hash;
  } plans[512];
  size_t nplans;
  /* progress bookkeeping for the one-progressing-generation invariant */
  ea_rdzv_gen progressed_gen;
  uint64_t progressed_at;
  uint64_t msgs_sent, msgs_dropped, msgs_delivered, decode_errors;
  uint64_t worker_failures;
  uint64_t max_progress_gens; /* most distinct generations progressing at once */
  char violation[512];
  bool trace;
  /* as SWIM does: an agent never learns of a death that happened before
   * it started (a stranger's DEAD record teaches nothing); off, a booted
   * agent sees every agent ever started, the dead ones as DEAD */
  bool strangers_unseen;
};

/* ---- small utilities ---------------------------------------------------- */

static uint64_t h_rand(h_sim *h) { /* splitmix64: every run replays from its seed */
  uint64_t z = (h->rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint32_t h_between(h_sim *h, uint32_t lo, uint32_t hi) {
  return hi <= lo ? lo : lo + (uint32_t)(h_rand(h) % (hi - lo + 1));
}

static double h_unit(h_sim *h) {
  return (double)(h_rand(h) >> 11) / (double)(1ull << 53);
}

static void h_violate(h_sim *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void h_violate(h_sim *h, const char *fmt, ...) {
  if (h->violation[0]) return; /* keep the first */
  int off = snprintf(h->violation, sizeof h->violation, "t=%" PRIu64 " ms: ", h->now);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(h->violation + off, sizeof h->violation - (size_t)off, fmt, ap);
  va_end(ap);
}

static int h_index(const h_sim *h, const ea_node_id *id) {
  for (int i = 0; i < h->n; i++)
    if (memcmp(h->a[i].id.b, id->b, 16) == 0) return i;
  return -1;
}

static bool h_linked(const h_sim *h, int i, int j) {
  return h->group[i] == h->group[j] && !h->cut[i][j];
}

static int h_gcmp(const ea_rdzv_gen *a, const ea_rdzv_gen *b) {
  return ea_rdzv_gen_cmp(a, b);
}

/* ---- the event heap ----------------------------------------------------- */

static bool h_before(const h_event *x, const h_event *y) {
  return x->t != y->t ? x->t < y->t : x->seq < y->seq;
}

static void h_push(h_sim *h, h_event e) {
  if (h->nev == h->capev) {
    h->capev = h->capev ? 2 * h->capev : 256;
    h->ev = realloc(h->ev, h->capev * sizeof *h->ev);
    if (!h->ev) abort();
  }
  e.seq = h->seq++;
  size_t i = h->nev++;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (!h_before(&e, &h->ev[p])) break;
    h->ev[i] = h->ev[p];
    i = p;
  }
  h->ev[i] = e;
}

static h_event h_pop(h_sim *h) {
  h_event top = h->ev[0], last = h->ev[--h->nev];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= h->nev) break;
    if (c + 1 < h->nev && h_before(&h->ev[c + 1], &h->ev[c])) c++;
    if (!h_before(&h->ev[c], &last)) break;
    h->ev[i] = h->ev[c];
    i = c;
  }
  if (h->nev) h->ev[i] = last;
  return top;
}

/* ---- io seam ------------------------------------------------------------ */

typedef struct {
  h_sim *h;
  int i;
} h_ctx;
static h_ctx h_ctxs[H_MAX]; /* one per agent slot; a test runs one sim at a time */

static void h_check_advertised(h_sim *h, int i, const ea_rdzv_msg *m) {
  h_agent *a = &h->a[i];
  bool ours = false;
  switch (m->type) {
    case EA_RDZV_PREPARE:
    case EA_RDZV_COMMIT:
      ours = memcmp(m->gen.ctrl.b, a->id.b, 16) == 0;
      break;
    case EA_RDZV_READY:
      ours = true;
      break;
    default:
      break;
  }
  if (ours && h_gcmp(&m->gen, &a->disk) > 0)
    h_violate(h, "%s sent %s for generation %" PRIu64 " with only %" PRIu64 " persisted", a->name,
              ea_rdzv_msg_type_str(m->type), m->gen.term, a->disk.term);
}

static void h_io_send(void *ctx, const ea_node_id *to, const ea_addr *control,
                      const ea_rdzv_msg *m) {
  h_ctx *c = ctx;
  h_sim *h = c->h;
  int i = c->i, j = h_index(h, to);
  (void)control;
  h->msgs_sent++;
  h_check_advertised(h, i, m);
  if (j < 0) return;
  if (j == i)
    h_violate(h, "%s sent %s to itself over the network", h->a[i].name,
              ea_rdzv_msg_type_str(m->type));
  if (h->trace) {
    char g[40];
    ea_rdzv_gen_str(&m->gen, g, sizeof g);
    fprintf(stderr, "%8" PRIu64 " %s -> %s %s %s\n", h->now, h->a[i].name, h->a[j].name,
            ea_rdzv_msg_type_str(m->type), g);
  }
  uint8_t *buf = NULL;
  size_t len = 0;
  if (ea_rdzv_encode(m, &buf, &len) != 0) {
    h_violate(h, "%s could not encode its %s", h->a[i].name, ea_rdzv_msg_type_str(m->type));
    return;
  }
  if ((h->filter && h->filter(h, i, j, m, h->filter_ctx) == H_DROP) || !h_linked(h, i, j) ||
      (h->loss > 0 && h_unit(h) < h->loss)) {
    h->msgs_dropped++;
    free(buf);
    return;
  }
  uint64_t t = h->now + h_between(h, h->delay_min_ms, h->delay_max_ms);
  if (t < h->link_last[i][j]) t = h->link_last[i][j]; /* FIFO per link, like TCP */
  h->link_last[i][j] = t;
  h_push(h,
         (h_event){
             .t = t, .kind = EV_MSG, .a = i, .b = j, .inc = h->a[j].inc, .buf = buf, .len = len});
}

static uint64_t h_plan_hash(const ea_rdzv_plan *p) {
  uint64_t x = 1469598103934665603ull;
#define H_MIX(v) (x = (x ^ (uint64_t)(v)) * 1099511628211ull)
  H_MIX(p->nnodes);
  H_MIX(p->wpn);
  H_MIX(p->world);
  H_MIX(p->has_sync);
  H_MIX(p->sync_rank);
  H_MIX(p->sync_step);
  for (uint32_t i = 0; i < p->nnodes; i++)
    for (int k = 0; k < 16; k++) H_MIX(p->nodes[i].id.b[k]);
  for (uint32_t i = 0; i < p->world; i++) {
    H_MIX(p->ranks[i].step);
    H_MIX(p->ranks[i].listen.port);
  }
#undef H_MIX
  return x;
}

static void h_check_plan(h_sim *h, int i, const ea_rdzv_plan *p) {
  uint64_t hash = h_plan_hash(p);
  for (size_t k = 0; k < h->nplans; k++)
    if (h_gcmp(&h->plans[k].gen, &p->gen) == 0) {
      if (h->plans[k].hash != hash)
        h_violate(h, "%s got a different plan for generation %" PRIu64, h->a[i].name, p->gen.term);
      return;
    }
  if (h->nplans < sizeof h->plans / sizeof h->plans[0])
    h->plans[h->nplans++] = (typeof(h->plans[0])){p->gen, hash};
  uint64_t max = 0; /* among states not older than the newest checkpoint */
  for (uint32_t k = 0; k < p->world; k++)
    if (p->ranks[k].step > max && (!h->latest_gen || p->ranks[k].state_gen >= h->latest_gen))
      max = p->ranks[k].step;
  if (p->has_sync ? p->ranks[p->sync_rank].step != max || p->sync_step != max : max != 0)
    h_violate(h, "generation %" PRIu64 ": state-sync source does not hold the highest step",
              p->gen.term);
  if (p->world != p->nnodes * p->wpn) h_violate(h, "plan world != nnodes * wpn");
}

static void h_io_order(void *ctx, const ea_rdzv_order *o) {
  h_ctx *c = ctx;
  h_sim *h = c->h;
  h_agent *a = &h->a[c->i];
  uint32_t wpn = h->cfg.workers_per_node;
  switch (o->kind) {
    case EA_RDZV_DO_PREPARE:
      if (h_gcmp(&o->gen, &a->last_prep) <= 0)
        h_violate(h, "%s prepared generation %" PRIu64 " after %" PRIu64, a->name, o->gen.term,
                  a->last_prep.term);
      if (h_gcmp(&o->gen, &a->disk) > 0)
        h_violate(h, "%s acted on generation %" PRIu64 " before it was durable", a->name,
                  o->gen.term);
      a->last_prep = o->gen;
      a->prepares++;
      for (uint32_t k = 0; k < wpn; k++) {
        h_worker *w = &a->w[k];
        if (w->st == HW_DEAD) continue;
        w->st = HW_PREPARING;
        w->gen = o->gen;
        w->stall_since = 0;
        h_push(h, (h_event){.t = h->now + h_between(h, h->ready_min_ms, h->ready_max_ms),
                            .kind = EV_WREADY,
                            .a = c->i,
                            .b = (int)k,
                            .inc = a->inc,
                            .gen = o->gen});
      }
      break;
    case EA_RDZV_DO_COMMIT: {
      const ea_rdzv_plan *p = o->plan;
      if (h_gcmp(&p->gen, &a->last_prep) != 0)
        h_violate(h, "%s committed generation %" PRIu64 " but last prepared %" PRIu64, a->name,
                  p->gen.term, a->last_prep.term);
      if (h_gcmp(&p->gen, &a->last_commit) <= 0)
        h_violate(h, "%s committed generation %" PRIu64 " again or out of order", a->name,
                  p->gen.term);
      for (uint32_t k = 0; k < wpn; k++)
        if (a->w[k].st == HW_TRAINING)
          h_violate(h, "%s worker %u still runs generation %" PRIu64 " when %" PRIu64 " commits",
                    a->name, k, a->w[k].gen.term, p->gen.term);
      h_check_plan(h, c->i, p);
      a->last_commit = p->gen;
      a->commits++;
      a->last_commit_at = h->now;
      for (uint32_t k = 0; k < wpn; k++) {
        h_worker *w = &a->w[k];
        if (w->st == HW_DEAD) continue;
        if (w->st != HW_READY || h_gcmp(&w->gen, &p->gen) != 0) {
          /* its agent said ready for it, so the worker is (it cannot have
           * moved on without a newer PREPARE, which would have stopped this
           * COMMIT); a restarted worker that never reported would be a bug */
          h_violate(h, "%s worker %u not ready for generation %" PRIu64 " at COMMIT", a->name, k,
                    p->gen.term);
        }
        w->st = HW_TRAINING;
        w->gen = p->gen;
        w->step = p->has_sync ? p->sync_step : h->latest_step; /* state sync, or the checkpoint */
        w->stall_since = 0;
      }
      break;
    }
    case EA_RDZV_DO_PAUSE:
      a->pauses++;
      for (uint32_t k = 0; k < wpn; k++)
        if (a->w[k].st != HW_DEAD) a->w[k].st = HW_IDLE;
      break;
    case EA_RDZV_DO_DRAINED:
      a->drained = true;
      for (uint32_t k = 0; k < wpn; k++)
        if (a->w[k].st != HW_DEAD) a->w[k].st = HW_IDLE;
      /* the agent leaves gracefully and exits, a moment later */
      h_push(h, (h_event){.t = h->now + 5, .kind = EV_LEAVE, .a = c->i, .inc = a->inc});
      break;
  }
}

static void h_io_persist(void *ctx, const ea_rdzv_gen *g) {
  h_ctx *c = ctx;
  h_sim *h = c->h;
  h_push(h, (h_event){.t = h->now + h->persist_ms,
                      .kind = EV_PERSIST,
                      .a = c->i,
                      .inc = h->a[c->i].inc,
                      .gen = *g});
}

static void h_io_reason(void *ctx, const char *text) {
  h_ctx *c = ctx;
  h_agent *a = &c->h->a[c->i];
  snprintf(a->last_reason, sizeof a->last_reason, "%s", text);
  if (c->h->trace) fprintf(stderr, "%8" PRIu64 " %s: %s\n", c->h->now, a->name, text);
}

/* ---- lifecycle ---------------------------------------------------------- */

/* ordered_ids: agent i gets the i-th smallest id (so n0 is the controller
 * while it is alive); otherwise ids are random. */
static h_sim *h_new(uint64_t seed, int n, const ea_rdzv_config *cfg, bool ordered_ids) {
  h_sim *h = calloc(1, sizeof *h);
  if (!h) abort();
  h->seed = h->rng = seed;
  h->n = n;
  h->cfg = *cfg;
  h->delay_min_ms = 1;
  h->delay_max_ms = 5;
  h->lag_min_ms = 200;
  h->lag_max_ms = 800;
  h->step_ms = 100;
  h->comm_timeout_ms = 500;
  h->persist_ms = 3;
  h->ready_min_ms = 10;
  h->ready_max_ms = 40;
  h->next_step_at = h->step_ms;
  h->trace = getenv("EA_RDZV_TRACE") != NULL; /* every message and reason to stderr */
  for (int i = 0; i < n; i++) {
    h_agent *a = &h->a[i];
    a->idx = i;
    snprintf(a->name, sizeof a->name, "n%d", i);
    for (int k = 0; k < 16; k++) a->id.b[k] = (uint8_t)h_rand(h);
    if (ordered_ids) a->id.b[0] = (uint8_t)(i + 1);
    a->lag_ms = h_between(h, h->lag_min_ms, h->lag_max_ms);
    for (int j = 0; j < H_MAX; j++) a->shown[j] = a->pending[j] = 0xff; /* not in view */
  }
  return h;
}

static void h_boot(h_sim *h, int i) {
  h_agent *a = &h->a[i];
  h_ctxs[i] = (h_ctx){h, i};
  ea_rdzv_io io = {.ctx = &h_ctxs[i],
                   .send = h_io_send,
                   .order = h_io_order,
                   .persist = h_io_persist,
                   .reason = h_io_reason};
  a->r = ea_rdzv_new(&h->cfg, &a->id, &a->disk, &io, h->seed ^ (uint64_t)(i + 1) * 7919, h->now);
  if (!a->r) abort();
  ea_rdzv_set_latest_ckpt(a->r, h->latest_gen);
  a->up = true;
  a->started = true;
  a->boot_at = h->now;
  a->inc++;
  a->nview = 0;
  a->fresh = true;
  a->last_accepted = a->disk; /* what was accepted but not durable is gone */
  a->deadline = 0;
  for (uint32_t k = 0; k < h->cfg.workers_per_node; k++) a->w[k] = (h_worker){.st = HW_IDLE};
  /* it knows nobody until its view says so (a fresh SWIM node joining) */
  for (int j = 0; j < H_MAX; j++) a->shown[j] = a->pending[j] = 0xff;
}

/* A checkpoint of gen64 at step committed: every agent (and every later
 * boot) knows it as LATEST, and a generation without a sync loads it. */
static void h_set_latest(h_sim *h, uint64_t gen64, uint64_t step) {
  h->latest_gen = gen64;
  h->latest_step = step;
  for (int i = 0; i < h->n; i++)
    if (h->a[i].up) ea_rdzv_set_latest_ckpt(h->a[i].r, gen64);
}

static void h_start(h_sim *h, int i) {
  if (!h->a[i].up && !h->a[i].left) h_boot(h, i);
}

static void h_crash(h_sim *h, int i) {
  h_agent *a = &h->a[i];
  if (!a->up) return;
  ea_rdzv_free(a->r);
  a->r = NULL;
  a->up = false;
  a->down_at = h->now;
  for (int k = 0; k < H_WPN_MAX; k++) a->w[k].st = HW_DEAD;
}

static void h_crash_later(h_sim *h, int i, uint64_t delay) {
  h_push(h, (h_event){.t = h->now + delay, .kind = EV_CRASH, .a = i, .inc = h->a[i].inc});
}

static void h_free(h_sim *h) {
  for (int i = 0; i < h->n; i++)
    if (h->a[i].r) ea_rdzv_free(h->a[i].r);
  for (size_t k = 0; k < h->nev; k++) free(h->ev[k].buf);
  free(h->ev);
  free(h);
}

/* group[i] for every agent; agents in different groups cannot talk. */
static void h_partition(h_sim *h, const int *group) {
  for (int i = 0; i < h->n; i++) h->group[i] = group[i];
}

static void h_heal(h_sim *h) {
  memset(h->group, 0, sizeof h->group);
  memset(h->cut, 0, sizeof h->cut);
}

static void h_cut(h_sim *h, int i, int j, bool cut) {
  h->cut[i][j] = h->cut[j][i] = cut;
}

/* One-way data loss from i to j (see h_sim.gray). */
static void h_gray(h_sim *h, int i, int j, bool on) {
  h->gray[i][j] = on;
}

static int h_drain(h_sim *h, int i, const char *name) {
  if (!h->a[i].up) return -1;
  return ea_rdzv_drain(h->a[i].r, h->now, name);
}

/* ---- views -------------------------------------------------------------- */

static uint8_t h_truth(const h_sim *h, int i, int j) {
  const h_agent *b = &h->a[j];
  if (!b->started) return 0xff;
  if (h->strangers_unseen && !b->up && b->down_at <= h->a[i].boot_at && h->a[i].shown[j] == 0xff)
    return 0xff;
  if (b->left) return EA_STATE_LEFT;
  if (!b->up || !h_linked(h, i, j)) return EA_STATE_DEAD;
  return EA_STATE_ALIVE;
}

static void h_fill_member(h_sim *h, int i, int j, ea_member *m) {
  const h_agent *b = &h->a[j];
  memset(m, 0, sizeof *m);
  m->id = b->id;
  m->state = h->a[i].shown[j];
  m->incarnation = b->inc;
  snprintf(m->meta.name, sizeof m->meta.name, "%s", b->name);
  snprintf(m->meta.role, sizeof m->meta.role, "worker");
  snprintf(m->meta.tags, sizeof m->meta.tags, "%s", b->tags);
  m->meta.control.family = 4;
  m->meta.control.ip[0] = 10;
  m->meta.control.ip[3] = (uint8_t)(j + 1);
  m->meta.control.port = 7001;
  m->meta.last_gen = h->a[i].gossip_gen[j];
}

/* Recompute what agent i sees; hand it to its core if it changed. */
static void h_refresh_view(h_sim *h, int i) {
  h_agent *a = &h->a[i];
  if (!a->up) return;
  ea_member v[H_MAX];
  size_t n = 0;
  for (int j = 0; j < h->n; j++) {
    uint8_t t = j == i ? EA_STATE_ALIVE : h_truth(h, i, j);
    if (t != a->shown[j]) {
      if (t != a->pending[j]) {
        a->pending[j] = t;
        a->pending_since[j] = h->now;
      }
      /* ourselves, and a newly booted agent's first look, show at once */
      if (j == i || a->fresh || h->now - a->pending_since[j] >= a->lag_ms) a->shown[j] = t;
    } else {
      a->pending[j] = t;
    }
    /* last_gen travels by gossip: only from peers we can hear, and a
     * change shows after the same detection lag */
    if (h->a[j].up && h_linked(h, i, j) && h->a[j].r) {
      uint64_t g = ea_rdzv_last_gen(h->a[j].r);
      if (g != a->gossip_next[j]) {
        a->gossip_next[j] = g;
        a->gossip_next_since[j] = h->now;
      }
      if (j == i || a->fresh || h->now - a->gossip_next_since[j] >= a->lag_ms) a->gossip_gen[j] = g;
    }
    if (j == i && (a->gossip_gen[j] >> 16) > a->disk.term)
      h_violate(h, "%s gossips last_gen term %" PRIu64 " with only %" PRIu64 " persisted", a->name,
                a->gossip_gen[j] >> 16, a->disk.term);
    if (a->shown[j] == 0xff) continue;
    h_fill_member(h, i, j, &v[n++]);
  }
  a->fresh = false;
  if (n == a->nview && memcmp(v, a->view, n * sizeof v[0]) == 0) return;
  memcpy(a->view, v, n * sizeof v[0]);
  a->nview = n;
  ea_rdzv_view(a->r, h->now, a->view, a->nview);
}

/* ---- training ----------------------------------------------------------- */

static const ea_rdzv_plan *h_plan_of(const h_sim *h, int i) {
  return h->a[i].up ? ea_rdzv_running(h->a[i].r) : NULL;
}

/* Can generation g (run by agent i, whose plan is p) take a step now? */
static bool h_group_ok(const h_sim *h, const ea_rdzv_plan *p) {
  uint32_t wpn = h->cfg.workers_per_node;
  for (uint32_t x = 0; x < p->nnodes; x++) {
    int j = h_index(h, &p->nodes[x].id);
    if (j < 0 || !h->a[j].up) return false;
    for (uint32_t k = 0; k < wpn; k++)
      if (h->a[j].w[k].st != HW_TRAINING || h_gcmp(&h->a[j].w[k].gen, &p->gen) != 0) return false;
    for (uint32_t y = 0; y < p->nnodes; y++) {
      int l = h_index(h, &p->nodes[y].id);
      if (l < 0 || !h_linked(h, j, l) || h->gray[j][l]) return false;
    }
  }
  return true;
}

static void h_train(h_sim *h) {
  uint32_t wpn = h->cfg.workers_per_node;
  ea_rdzv_gen moved[H_MAX];
  int nmoved = 0;
  bool ok[H_MAX];
  /* decide first, then move, so that all ranks of a group step together */
  for (int i = 0; i < h->n; i++) {
    ok[i] = false;
    h_agent *a = &h->a[i];
    if (!a->up || a->w[0].st != HW_TRAINING) continue;
    const ea_rdzv_plan *p = h_plan_of(h, i);
    /* the workers train the generation they were committed; the agent's
     * notion of "running" may already have moved on (paused) */
    ok[i] = p && h_gcmp(&p->gen, &a->w[0].gen) == 0 && h_group_ok(h, p);
  }
  for (int i = 0; i < h->n; i++) {
    h_agent *a = &h->a[i];
    if (!a->up) continue;
    for (uint32_t k = 0; k < wpn; k++) {
      h_worker *w = &a->w[k];
      if (w->st != HW_TRAINING) continue;
      if (ok[i]) {
        w->step++;
        w->state_gen = ea_rdzv_gen_u64(&w->gen);
        w->stall_since = 0;
        a->last_step_at = h->now;
        bool seen = false;
        for (int q = 0; q < nmoved; q++) seen = seen || h_gcmp(&moved[q], &w->gen) == 0;
        if (!seen) moved[nmoved++] = w->gen;
        ea_rdzv_worker_step(a->r, h->now, k, w->step);
      } else {
        if (w->stall_since == 0) w->stall_since = h->now;
        if (h->now - w->stall_since >= h->comm_timeout_ms) {
          w->st = HW_FAILED;
          h->worker_failures++;
          const ea_rdzv_plan *p = h_plan_of(h, i);
          const ea_node_id *peer = NULL;
          for (uint32_t y = 0; p && y < p->nnodes && !peer; y++) {
            int l = h_index(h, &p->nodes[y].id);
            if (l >= 0 && h->gray[i][l]) peer = &p->nodes[y].id;
          }
          ea_rdzv_worker_failed_peer(a->r, h->now, k, peer);
        }
      }
      if (!a->up) break;
    }
  }
  if ((uint64_t)nmoved > h->max_progress_gens) h->max_progress_gens = (uint64_t)nmoved;
  if (nmoved > 1 && !h->cfg.quorum_none)
    h_violate(h, "%d generations made progress at once (%" PRIu64 " and %" PRIu64 ")", nmoved,
              moved[0].term, moved[1].term);
}

/* Fail local worker k of agent i, as a crash of that process would. */
static void h_fail_worker(h_sim *h, int i, uint32_t k) {
  h_agent *a = &h->a[i];
  if (!a->up) return;
  a->w[k].st = HW_FAILED;
  ea_rdzv_worker_failed(a->r, h->now, k);
}

/* Kill local worker k of agent i and restart it, as a library-mode agent
 * does: it reports the failure and that the worker is starting, and the new
 * process (no state: step 0) says hello `hello_ms` later. */
static void h_restart_worker(h_sim *h, int i, uint32_t k, uint64_t hello_ms) {
  h_agent *a = &h->a[i];
  if (!a->up) return;
  h_worker *w = &a->w[k];
  w->st = HW_IDLE;
  w->step = 0;
  w->state_gen = 0;
  w->hello_at = h->now + hello_ms;
  ea_rdzv_worker_starting(a->r, h->now, k, true);
  ea_rdzv_worker_failed(a->r, h->now, k);
  h_push(h, (h_event){.t = w->hello_at, .kind = EV_HELLO, .a = i, .b = (int)k, .inc = a->inc});
}

/* ---- the loop ----------------------------------------------------------- */

static void h_event_run(h_sim *h, h_event *e) {
  h_agent *a = &h->a[e->kind == EV_MSG ? e->b : e->a];
  bool live = a->up && a->inc == e->inc;
  switch (e->kind) {
    case EV_MSG: {
      if (!live || !h_linked(h, e->a, e->b)) { /* the connection broke */
        h->msgs_dropped++;
        break;
      }
      ea_rdzv_msg m;
      const char *err = NULL;
      if (ea_rdzv_decode(e->buf, e->len, &m, &err) != 0) {
        h->decode_errors++;
        h_violate(h, "a message did not decode: %s", err ? err : "?");
        break;
      }
      h->msgs_delivered++;
      ea_rdzv_recv(a->r, h->now, &m);
      ea_rdzv_msg_release(&m);
      break;
    }
    case EV_PERSIST:
      if (!live) break; /* crashed first: the write never became durable */
      {
        int rc = 0;
        if (h->persist_fail > 0 && h_unit(h) < h->persist_fail) rc = -5; /* -EIO */
        if (rc == 0 && h_gcmp(&e->gen, &a->disk) > 0) a->disk = e->gen;
        ea_rdzv_persisted(a->r, h->now, &e->gen, rc);
      }
      break;
    case EV_WREADY: {
      if (!live) break;
      h_worker *w = &a->w[e->b];
      if (w->st != HW_PREPARING || h_gcmp(&w->gen, &e->gen) != 0) break; /* superseded */
      if (w->hello_at > h->now) { /* still starting: ready after its hello */
        h_push(h, (h_event){.t = w->hello_at + h_between(h, h->ready_min_ms, h->ready_max_ms),
                            .kind = EV_WREADY,
                            .a = e->a,
                            .b = e->b,
                            .inc = e->inc,
                            .gen = e->gen});
        break;
      }
      if (a->fail_ready) {
        w->st = HW_FAILED;
        h->worker_failures++;
        ea_rdzv_worker_failed(a->r, h->now, (uint32_t)e->b);
        break;
      }
      w->st = HW_READY;
      ea_addr listen = {.family = 4, .port = (uint16_t)(20000 + a->idx * 16 + e->b)};
      listen.ip[0] = 10;
      listen.ip[3] = (uint8_t)(a->idx + 1);
      uint8_t nccl[EA_RDZV_NCCL_ID_BYTES];
      memset(nccl, 0xA0 + a->idx, sizeof nccl);
      ea_rdzv_worker_ready(a->r, h->now, (uint32_t)e->b, &e->gen, &listen, w->step, w->state_gen,
                           e->b == 0 ? nccl : NULL);
      break;
    }
    case EV_HELLO:
      if (!live || a->w[e->b].hello_at != e->t) break; /* restarted again since */
      a->w[e->b].hello_at = 0;
      ea_rdzv_worker_starting(a->r, h->now, (uint32_t)e->b, false);
      break;
    case EV_CRASH:
      if (live) h_crash(h, e->a);
      break;
    case EV_LEAVE:
      if (live) {
        h_crash(h, e->a);
        a->left = true;
      }
      break;
  }
  free(e->buf);
}

static void h_check_monotonic(h_sim *h, int i) {
  h_agent *a = &h->a[i];
  if (!a->up) return;
  ea_rdzv_status st;
  ea_rdzv_status_get(a->r, &st);
  if (h_gcmp(&st.accepted, &a->last_accepted) < 0)
    h_violate(h, "%s accepted generation went back from %" PRIu64 " to %" PRIu64, a->name,
              a->last_accepted.term, st.accepted.term);
  a->last_accepted = st.accepted;
}

/* Heartbeat: every 10 ms of virtual time views are refreshed, training
 * advances on its own period, and cores whose deadline passed are ticked. */
#define H_BEAT_MS 10

static void h_beat(h_sim *h) {
  for (int i = 0; i < h->n; i++) h_refresh_view(h, i);
  if (h->now >= h->next_step_at) {
    h_train(h);
    h->next_step_at = h->now + h->step_ms;
  }
  for (int i = 0; i < h->n; i++) {
    h_agent *a = &h->a[i];
    if (!a->up) continue;
    uint64_t d = ea_rdzv_next_deadline(a->r);
    if (d <= h->now) ea_rdzv_tick(a->r, h->now);
    h_check_monotonic(h, i);
  }
}

static void h_run_until(h_sim *h, uint64_t until) {
  uint64_t next_beat = (h->now / H_BEAT_MS + 1) * H_BEAT_MS;
  while (h->now < until) {
    if (h->nev && h->ev[0].t <= next_beat && h->ev[0].t <= until) {
      h_event e = h_pop(h);
      if (e.t > h->now) h->now = e.t;
      h_event_run(h, &e);
      continue;
    }
    if (next_beat > until) {
      h->now = until;
      break;
    }
    h->now = next_beat;
    h_beat(h);
    next_beat += H_BEAT_MS;
  }
}

/* Run until cond holds (checked every beat) or until deadline.  Returns
 * whether it held. */
static bool h_run_cond(h_sim *h, uint64_t deadline, bool (*cond)(h_sim *h, void *arg), void *arg) {
  while (h->now < deadline) {
    if (cond(h, arg)) return true;
    h_run_until(h, h->now + H_BEAT_MS);
  }
  return cond(h, arg);
}

/* ---- queries ------------------------------------------------------------ */

static ea_rdzv_gen h_running(const h_sim *h, int i) {
  const ea_rdzv_plan *p = h_plan_of(h, i);
  return p ? p->gen : (ea_rdzv_gen){0};
}

static bool h_training(const h_sim *h, int i) {
  const h_agent *a = &h->a[i];
  const ea_rdzv_plan *p = h_plan_of(h, i);
  if (!p) return false;
  for (uint32_t k = 0; k < h->cfg.workers_per_node; k++)
    if (a->w[k].st != HW_TRAINING || h_gcmp(&a->w[k].gen, &p->gen) != 0) return false;
  return true;
}

/* The rank-order list of agent indexes of agent i's running plan. */
static int h_members(const h_sim *h, int i, int *out) {
  const ea_rdzv_plan *p = h_plan_of(h, i);
  if (!p) return 0;
  for (uint32_t x = 0; x < p->nnodes; x++) out[x] = h_index(h, &p->nodes[x].id);
  return (int)p->nnodes;
}

/* Settled: every up, undrained agent is in one generation or a spare; the
 * generation holds min(#eligible, max_nodes) of them, all training, with
 * recent progress.  *g gets the generation. */
static bool h_settled(h_sim *h, ea_rdzv_gen *g) {
  ea_rdzv_gen common = {0};
  int nup = 0, nin = 0;
  for (int i = 0; i < h->n; i++) {
    const h_agent *a = &h->a[i];
    if (!a->up || a->drained) continue;
    nup++;
    ea_rdzv_gen r = h_running(h, i);
    if (r.term == 0) continue;
    if (common.term == 0) common = r;
    if (h_gcmp(&common, &r) != 0) return false;
    if (!h_training(h, i) || h->now - a->last_step_at > 3 * h->step_ms) return false;
    nin++;
  }
  if (nup < (int)h->cfg.min_nodes) return nin == 0;
  uint32_t want = (uint32_t)nup < h->cfg.max_nodes ? (uint32_t)nup : h->cfg.max_nodes;
  if ((uint32_t)nin != want || common.term == 0) return false;
  /* the plan names exactly the agents running it */
  for (int i = 0; i < h->n; i++) {
    ea_rdzv_gen ri = h_running(h, i);
    if (h_gcmp(&ri, &common) != 0) continue;
    int m[H_MAX];
    int k = h_members(h, i, m);
    if (k != nin) return false;
    break;
  }
  if (g) *g = common;
  return true;
}

static bool h_cond_settled(h_sim *h, void *arg) {
  return h_settled(h, (ea_rdzv_gen *)arg);
}

/* Seed: EA_SEED if set, else the time; printed so a failure replays. */
static uint64_t h_seed(const char *test) {
  const char *s = getenv("EA_SEED");
  uint64_t seed = s && *s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL);
  fprintf(stderr, "%s: seed=%" PRIu64 " (replay with EA_SEED=%" PRIu64 ")\n", test, seed, seed);
  return seed;
}

#endif
