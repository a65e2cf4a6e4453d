/* The rendezvous state machine: how a cluster of identical agents agrees,
 * again and again, on which nodes train together and as which ranks.
 *
 * Every agent runs both halves of the protocol.  The *agent* half obeys:
 * it accepts a PREPARE only if its generation is newer than anything it has
 * accepted or heard of, aborts the old communicator before it readies the
 * new one (so it never runs two generations), persists the number before it
 * answers READY, and starts training only on the COMMIT of the generation it
 * prepared.  The *controller* half runs on whichever agent ea_elect() names,
 * and only while that agent sees a quorum of the last formed generation: it
 * watches for triggers (a member dead, left or draining; a failure report;
 * joiners batched for scale_up_delay; no generation yet), picks members in
 * a stable rank order, numbers the generation (term, self) above every term
 * it has seen, persists it, and drives PREPARE → READY → COMMIT, re-sending
 * PREPARE (and, asked by a READY, COMMIT) since the control channel drops
 * what it cannot deliver.  Any failure during a formation starts over with
 * a higher number without the member that failed, which sits out a short
 * backoff that grows while it keeps failing and ends early once it shows
 * it is back.  A generation that cannot re-form without its draining
 * members (too few nodes, or no quorum) lets them go and pauses the rest.
 *
 * Safety does not depend on there being one controller.  Two agents that
 * both believe they control (their views differ for a moment) both issue
 * plans, but every member obeys only the newer number and refuses the older
 * with a NACK that teaches the stale controller the newer term; a formation
 * commits only when *every* chosen member answered READY to *that* number,
 * so two formations that share a member cannot both end up running.  Under
 * `quorum: majority` a controller acts only while it sees a majority of the
 * last formed generation, so the two sides of a partition never both form.
 *
 * Why the core looks the way it does: it is pure (no clock, socket or log),
 * every output goes through ea_rdzv_io, and every entry point ends in
 * settle(), which drains messages the agent addressed to itself, then
 * re-evaluates the agent half and the controller half until nothing
 * changes.  Messages to ourselves are queued rather than handled inline so
 * that the controller never re-enters itself while iterating over a draft
 * (the Redis cluster bus's "do it once per loop turn" habit).  Timers are
 * plain deadlines compared with now; ea_rdzv_next_deadline() tells the
 * driver when to call ea_rdzv_tick() next.
 *
 * Why one file of ~2400 lines: it is one state machine.  Both halves read
 * and write the same struct (the view, the generation numbers, the
 * formation in progress, the exclusions and hold-outs), and settle() iterates them
 * together to a fixpoint, so a split by half would share the whole struct
 * through a header and hide the order of evaluation that the invariants
 * above depend on.  The codec, which shares nothing with it, is
 * rdzv_wire.c; the straggler detector, which only feeds ea_rdzv_hold_out,
 * is straggler.c.
 */
#include "ea_rdzv.h"
#include "ea_base.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A REPORT (failure, drain, idle member) or QUERY is re-sent this often
 * until it has an effect.  One second is five default SWIM probe intervals:
 * a controller change is noticed by gossip within that order of time, and a
 * lost control message then costs at most this much extra recovery time. */
#define REPORT_MS 1000
/* First pause after a failed or superseded formation; doubled per further
 * failure up to the rendezvous timeout, with jitter in [½, 1) so that two
 * controllers that collided do not collide again in lockstep.  100 ms is a
 * few control round trips plus an fsync of the generation file. */
#define RETRY_BASE_MS 100
/* PREPARE (controller → members that have not answered READY) and READY
 * (member → controller, until its COMMIT comes) are re-sent this often
 * while a formation waits.  Delivery fails silently (connect refused by an
 * agent that is restarting, a reset connection), and without re-sends one
 * lost frame cost the whole rendezvous timeout (30 s by default) plus a
 * formation without the member.  A healthy member answers a PREPARE within
 * one fsync of the generation file and its workers' abort-and-listen, tens
 * of milliseconds, so after 250 ms an answer is overdue rather than in
 * flight; a restarting agent's listener is back in well under a second, so
 * it is reached within 250 ms of that.  Both messages are idempotent at the
 * receiver, and a re-send costs one small frame (a COMMIT is re-sent only
 * to a member whose READY says it is still waiting for it). */
#define RESEND_MS 250
/* A member blamed for a failed formation sits the next ones out, for a
 * backoff that starts at EXCL_BASE_MS when the failure was quick (it died,
 * its worker failed, it refused the plan) and at the rendezvous timeout
 * when it never answered (it cost the formation that long: sitting out as
 * long keeps the others training at least half the time, the old rule),
 * doubling per further failure in a row up to the rendezvous timeout.  1 s
 * is REPORT_MS, the pace at which an agent introduces itself, and five
 * default SWIM probe intervals, so a node that just died is suspect before
 * it could be chosen again.  The streak ends when a generation with the
 * member commits. */
#define EXCL_BASE_MS 1000
/* The first EXCL_EARLY_LIFTS exclusions of a streak end early when the
 * member shows it is back: a higher incarnation (it restarted, or refuted
 * its death) or a REPORT that says it is idle.  A restart after a crash is
 * the common case and is let straight back in; a member that fails a third
 * time in a row is crash-looping or broken, and from then on sits out its
 * whole backoff, however often it restarts, so it cannot stall every
 * formation. */
#define EXCL_EARLY_LIFTS 2
/* Messages to ourselves waiting for settle(): a controller addresses at most
 * one PREPARE or COMMIT, one ABORT or RELEASE, and a REPORT/READY to itself
 * per settle round; 16 is ample. */
#define SELFQ_MAX 16

enum { F_NONE = 0, F_PERSIST = 1, F_PREPARE = 2 };

/* A member that failed formations: sits out until `until`.  Kept after that
 * (strikes count the streak) until a generation with it commits or it is
 * gone from the view. */
typedef struct {
  ea_node_id id;
  uint32_t incarnation; /* as the view showed it at the last strike */
  uint32_t strikes;     /* failed formations blamed on it in a row */
  uint64_t until;
} exclusion;

/* Failure times kept per node: flap_threshold + 1 at most (the config
 * bound of runtime.flap_threshold is 64). */
#define FLAP_MAX 65

/* A node's failures and hold-outs, as controller (see "Hold-outs" in
 * ea_rdzv.h).  Kept after a hold ends: holds makes the next one longer. */
typedef struct {
  ea_node_id id;
  uint64_t fails[FLAP_MAX]; /* times of recent failures, oldest first */
  uint32_t nfails;
  uint64_t counted; /* the formed term its last failure was counted in (+1; 0: none) */
  uint32_t holds;
  uint64_t until;
  uint8_t why;
  char text[128];
} flapper;

/* A link (unordered pair of nodes, a < b) blamed for failed generations,
 * as controller (see "Link blame" in ea_rdzv.h). */
typedef struct {
  ea_node_id a, b;
  uint64_t term;    /* the formed generation its last blame was counted in */
  uint32_t gens;    /* consecutive formed generations failed with a blame on it */
  uint32_t named_a; /* blames, over those, that named a (the end that did not answer) */
  uint32_t named_b;
  uint8_t named_now; /* bit 0: a named in `term`, bit 1: b */
  ea_node_id by;     /* the last node that blamed it */
} link_blame;

/* A node known to drain, as of the incarnation it had then: a restarted node
 * comes back with another incarnation and no longer drains.  (An
 * incarnation that moved for another reason, a refuted suspicion, only
 * forgets the drain until the drainer's next REPORT, at most REPORT_MS.) */
typedef struct {
  ea_node_id id;
  uint32_t incarnation;
} drainer;

/* What a node's newest REPORT said of its workers (EA_RDZV_F_STARTING),
 * believed until `until` (EA_RDZV_STARTING_TTL_MS after it came); after
 * that its gossip tag decides. */
typedef struct {
  ea_node_id id;
  bool starting;
  uint64_t until;
} wstart;

struct ea_rdzv {
  ea_rdzv_config cfg;
  ea_node_id self;
  ea_rdzv_io io;
  ea_rng rng; /* back-off jitter */
  uint64_t now;

  /* ea_rdzv_set_latest_ckpt: the newest committed checkpoint known */
  uint64_t latest_gen;

  /* the membership view, sorted by id */
  ea_member *view;
  size_t nview, capview;
  bool viewed; /* a view has been given: el names someone's answer */
  bool el_dirty;
  ea_election el; /* the election, quorum included: ea_rdzv_election() */
  char self_name[EA_NAME_MAX];

  /* generation numbers */
  ea_rdzv_gen seen;     /* newest heard of (issued, accepted, NACKed, learned) */
  ea_rdzv_gen accepted; /* newest accepted as a member */
  ea_rdzv_gen durable;  /* newest persisted */
  ea_rdzv_gen want;     /* newest we need persisted */
  ea_rdzv_gen persisting;
  bool persist_busy;
  uint64_t persist_retry_at;

  /* the last formed generation this agent knows of: its members in rank
   * order.  It is the quorum reference and the rank order to keep. */
  ea_rdzv_gen formed;
  ea_node_id *formed_ids;
  uint32_t nformed;
  ea_rdzv_gen ran; /* last generation committed here as a member */

  /* ---- agent half ---- */
  bool prep; /* accepted a PREPARE */
  ea_rdzv_gen prep_gen;
  uint32_t prep_base, prep_world;
  bool prep_ordered;  /* workers told to prepare */
  bool prep_boundary; /* ... once the step in flight is done (a join) */
  bool ready_sent;
  uint64_t ready_at; /* re-send READY then, until the COMMIT comes */
  uint64_t prep_since;
  bool wready[EA_RDZV_MAX_WPN];
  bool wstepped[EA_RDZV_MAX_WPN];
  bool wstarting[EA_RDZV_MAX_WPN]; /* ea_rdzv_worker_starting: no hello yet */
  ea_rdzv_worker winfo[EA_RDZV_MAX_WPN];
  bool whas_nccl;
  uint8_t wnccl[EA_RDZV_NCCL_ID_BYTES];
  bool running;
  ea_rdzv_plan run;     /* owned arrays */
  ea_rdzv_gen fail_gen; /* a local worker failed in this one */
  bool fail_blame;      /* ... naming a rank of fail_peer (BLAME goes with the REPORT) */
  ea_node_id fail_peer;
  bool paused;
  char pause_why[EA_RDZV_REASON_MAX];
  /* The controller stopped this generation (ABORT of the one running,
   * stop_formed).  It knows; no need to keep reporting that we do not run
   * it. */
  ea_rdzv_gen halted;
  ea_node_id halted_by; /* the controller whose ABORT halted it */
  bool draining, drained;
  /* Introduce ourselves to the controller: after a start (a restarted
   * member lost its state and must say so) and after every controller
   * change.  Re-sent until the controller answers anything. */
  bool announce;
  bool report_to_set;
  ea_node_id report_to;
  uint64_t report_at;
  uint64_t last_step;
  /* How long a step takes here: the interval between local worker 0's step
   * reports while running (an average over the last few; 0: not known). */
  uint64_t step_at, step_iv_ms;

  /* ---- controller half ---- */
  struct {
    int phase;
    ea_rdzv_gen gen;
    bool boundary;
    uint32_t n;
    ea_node_id *ids;
    bool *ready;
    ea_rdzv_worker *w; /* n · wpn */
    bool has_nccl;
    uint8_t nccl[EA_RDZV_NCCL_ID_BYTES];
    uint64_t deadline;
    uint64_t resend_at; /* PREPARE again to whoever has not answered */
    /* It re-forms the same nodes after a worker failed: the plan counts one
     * more restart (ea_rdzv_plan.restarts), and churn becomes churn_next. */
    bool restart;
    uint32_t churn_next;
    uint64_t restarts_seen; /* the most any READY of it knew */
  } f;
  /* The last plan we committed, for a member whose COMMIT was lost: its
   * READY, re-sent while it waits, is answered with the COMMIT again.  Kept
   * until the next formation starts, or as long as a member waits for a
   * COMMIT (prep_deadline). */
  bool lc_set;
  ea_rdzv_plan lc; /* owned arrays */
  uint64_t lc_until;
  /* Per node of lc: no copy before lc_next[i]; each copy doubles the gap
   * (RESEND_MS up to 8×), so a COMMIT that is slow rather than lost (a big
   * plan queued behind the others' on a busy controller) is not copied
   * again every time the member asks. */
  uint64_t *lc_next;
  uint8_t *lc_copies;
  /* The formed generation we stopped (stop_formed); stop_all: every member,
   * not only its drainers. */
  ea_rdzv_gen stop_gen;
  bool stop_all;
  /* The last moment (ea_rdzv_lastck in ea_rdzv.h): the formed generation
   * held together for one last checkpoint, since when, and how it ended. */
  ea_rdzv_gen lm_gen;
  uint64_t lm_since;
  uint8_t lm;
  bool lm_spares;       /* the hold is spares_alone's */
  uint64_t drain_since; /* drains batched since (EA_RDZV_DRAIN_BATCH_MS; 0: none) */
  drainer *drain_set;
  size_t ndrain, capdrain;
  wstart *wst; /* nodes' REPORTs about their starting workers */
  size_t nwst, capwst;
  /* Too few nodes without the members whose workers are starting: they are
   * kept and waited for (see "Admission after hello" in ea_rdzv.h). */
  bool starting_waived;
  exclusion *excl;
  size_t nexcl, capexcl;
  flapper *flap;
  size_t nflap, capflap;
  link_blame *blame;
  size_t nblame, capblame;
  ea_rdzv_gen prev_formed; /* the formed generation before `formed` (link blame's streaks) */
  bool formed_stepped;     /* a local worker completed a step in `formed` */
  bool holds_waived;       /* too few nodes without the held-out ones: they are taken */
  bool formed_broken;
  char broken_why[96];
  /* ... by a worker's failure (a REPORT saying so), not only by a member
   * lost: a re-formation with the same nodes is then a restart. */
  bool broken_by_failure;
  uint64_t formed_at; /* when we learned the formed generation (its commit) */
  /* The restart count of the newest plan known here (ea_rdzv_plan.restarts). */
  uint64_t restarts;
  /* Churn damping (EA_RDZV_CHURN_WINDOW_MS): restarts in a row whose
   * generation failed soon after its commit (churn), the streak's number
   * and latest reason; the formed generation broke at broken_at, soon
   * (short_lived) or not, and its restart waits a delay jittered by
   * churn_jit, drawn once per break. */
  uint32_t churn;
  uint64_t churn_streak;
  char churn_why[96];
  uint64_t broken_at, churn_jit;
  bool short_lived;
  /* The job was given up (sticky: nothing more is formed). */
  uint8_t job_fail;
  char job_why[EA_RDZV_REASON_MAX];
  uint64_t minn_since; /* waiting for min_nodes since (0: not waiting) */
  uint64_t join_since, cold_since, retry_at, query_at, stray_at;
  bool strays;
  uint32_t nfail;
  bool learning;
  uint32_t nqueries;
  ea_rdzv_gen hint; /* a newer formed generation a READY or REPORT told us of */
  ea_node_id hint_from;
  uint32_t hint_tries;
  ea_node_id asked; /* the member our last QUERY went to */
  bool asked_set;
  char ctrl_reason[EA_RDZV_REASON_MAX];

  ea_rdzv_msg *selfq[SELFQ_MAX];
  size_t nselfq;

  char reason[EA_RDZV_REASON_MAX];
  ea_rdzv_status st; /* counters only */
};

/* ---- small helpers ------------------------------------------------------ */

int ea_rdzv_gen_cmp(const ea_rdzv_gen *a, const ea_rdzv_gen *b) {
  if (a->term != b->term) return a->term < b->term ? -1 : 1;
  if (a->term == 0) return 0; /* "none" is one value whatever the id says */
  return ea_node_id_cmp(&a->ctrl, &b->ctrl);
}

uint64_t ea_rdzv_gen_u64(const ea_rdzv_gen *g) {
  if (g->term == 0) return 0;
  /* The low 16 bits are the controller id's first two bytes, so the u64
   * orders like ea_rdzv_gen_cmp (term, then id by memcmp) whenever two
   * controllers of one term differ there: workers compare these numbers, and
   * a fold (XOR) here once made a worker ignore the newer of two same-term
   * generations until the rendezvous timeout.  Ids are random, so two
   * same-term controllers tie here with probability 2^-16; they then compare
   * equal, which workers treat as "not newer" and the formation retries. */
  uint16_t hi = (uint16_t)(g->ctrl.b[0] << 8 | g->ctrl.b[1]);
  return ea_rdzv_gen64_pack(g->term, hi);
}

uint64_t ea_rdzv_gen64_pack(uint64_t term, uint16_t ctrl16) {
  return term << EA_RDZV_GEN64_CTRL_BITS | ctrl16;
}

uint64_t ea_rdzv_gen64_term(uint64_t g64) {
  return g64 >> EA_RDZV_GEN64_CTRL_BITS;
}

uint16_t ea_rdzv_gen64_ctrl(uint64_t g64) {
  return (uint16_t)g64;
}

void ea_rdzv_gen64_unpack(uint64_t g64, ea_rdzv_gen *out) {
  memset(out, 0, sizeof *out);
  out->term = ea_rdzv_gen64_term(g64);
  if (out->term == 0) return; /* "none" carries no controller */
  uint16_t c = ea_rdzv_gen64_ctrl(g64);
  out->ctrl.b[0] = (uint8_t)(c >> 8);
  out->ctrl.b[1] = (uint8_t)c;
}

void ea_rdzv_gen_str(const ea_rdzv_gen *g, char *out, size_t cap) {
  if (g->term == 0) {
    snprintf(out, cap, "none");
    return;
  }
  char hex[33];
  ea_node_id_hex(&g->ctrl, hex);
  snprintf(out, cap, "%" PRIu64 "/%.8s", g->term, hex);
}

static bool gen_eq(const ea_rdzv_gen *a, const ea_rdzv_gen *b) {
  return ea_rdzv_gen_cmp(a, b) == 0;
}

static void gen_raise(ea_rdzv_gen *to, const ea_rdzv_gen *g) {
  if (ea_rdzv_gen_cmp(g, to) > 0) *to = *g;
}

static bool id_eq(const ea_node_id *a, const ea_node_id *b) {
  return memcmp(a->b, b->b, 16) == 0;
}

static int find_id(const ea_node_id *ids, uint32_t n, const ea_node_id *id) {
  for (uint32_t i = 0; i < n; i++)
    if (id_eq(&ids[i], id)) return (int)i;
  return -1;
}

static uint64_t rng_next(ea_rdzv *r) {
  return ea_rng_next(&r->rng);
}

static int cmp_member(const void *a, const void *b) {
  return ea_node_id_cmp(&((const ea_member *)a)->id, &((const ea_member *)b)->id);
}

static const ea_member *view_find(const ea_rdzv *r, const ea_node_id *id) {
  ea_member key;
  key.id = *id;
  return r->nview ? bsearch(&key, r->view, r->nview, sizeof *r->view, cmp_member) : NULL;
}

static bool is_up(const ea_member *m) {
  return m && (m->state == EA_STATE_ALIVE || m->state == EA_STATE_SUSPECT);
}

static bool observer(const ea_member *m) {
  return strcmp(m->meta.role, "observer") == 0;
}

/* A name for reason strings: the member's name, or its id's first 8 hex. */
static void name_of(const ea_rdzv *r, const ea_node_id *id, char out[EA_NAME_MAX]) {
  const ea_member *m = view_find(r, id);
  if (m && m->meta.name[0]) {
    snprintf(out, EA_NAME_MAX, "%s", m->meta.name);
    return;
  }
  char hex[33];
  ea_node_id_hex(id, hex);
  snprintf(out, EA_NAME_MAX, "%.8s", hex);
}

static int find_drainer(const ea_rdzv *r, const ea_node_id *id) {
  for (size_t i = 0; i < r->ndrain; i++)
    if (id_eq(&r->drain_set[i].id, id)) return (int)i;
  return -1;
}

static bool in_drain_set(const ea_rdzv *r, const ea_node_id *id) {
  if (id_eq(id, &r->self) && r->draining) return true;
  return find_drainer(r, id) >= 0;
}

static void drain_set_add(ea_rdzv *r, const ea_node_id *id) {
  const ea_member *v = view_find(r, id);
  uint32_t inc = v ? v->incarnation : 0;
  int k = find_drainer(r, id);
  if (k >= 0) {
    r->drain_set[k].incarnation = inc;
    return;
  }
  if (r->ndrain == r->capdrain) {
    size_t cap = r->capdrain ? 2 * r->capdrain : 8;
    drainer *p = realloc(r->drain_set, cap * sizeof *p);
    if (!p) return; /* the drainer keeps reporting; we catch it next time */
    r->drain_set = p;
    r->capdrain = cap;
  }
  r->drain_set[r->ndrain++] = (drainer){*id, inc};
}

static int find_excl(const ea_rdzv *r, const ea_node_id *id) {
  for (size_t i = 0; i < r->nexcl; i++)
    if (id_eq(&r->excl[i].id, id)) return (int)i;
  return -1;
}

static bool excluded(const ea_rdzv *r, const ea_node_id *id) {
  int k = find_excl(r, id);
  return k >= 0 && r->excl[k].until > r->now;
}

/* Blame a member for a failed formation: it sits out base_ms (EXCL_BASE_MS
 * or the rendezvous timeout, see there), doubled per earlier strike in the
 * streak, at most one rendezvous timeout. */
static void exclude(ea_rdzv *r, const ea_node_id *id, uint64_t base_ms) {
  if (id_eq(id, &r->self)) return; /* the controller never excludes itself */
  int k = find_excl(r, id);
  if (k < 0) {
    if (r->nexcl == r->capexcl) {
      size_t cap = r->capexcl ? 2 * r->capexcl : 8;
      exclusion *p = realloc(r->excl, cap * sizeof *p);
      if (!p) return; /* not excluded: at worst it fails the next formation too */
      r->excl = p;
      r->capexcl = cap;
    }
    k = (int)r->nexcl++;
    r->excl[k] = (exclusion){.id = *id};
  }
  exclusion *e = &r->excl[k];
  const ea_member *v = view_find(r, id);
  e->incarnation = v ? v->incarnation : 0;
  e->strikes++;
  uint64_t d = base_ms, cap = r->cfg.rendezvous_timeout_ms;
  for (uint32_t i = 1; i < e->strikes && d < cap; i++) d *= 2;
  e->until = r->now + (d < cap ? d : cap);
}

/* The member showed it is back (restarted, or idle and talking): end its
 * exclusion now, unless its streak is too long for that. */
static void lift(ea_rdzv *r, int k) {
  if (k >= 0 && r->excl[k].until > r->now && r->excl[k].strikes <= EXCL_EARLY_LIFTS)
    r->excl[k].until = r->now;
}

/* A generation with it committed: the streak is over. */
static void forgive(ea_rdzv *r, const ea_node_id *id) {
  int k = find_excl(r, id);
  if (k >= 0) r->excl[k] = r->excl[--r->nexcl];
}

/* ---- hold-outs (flapping nodes, evicted stragglers) -------------------- */

static void fmt(char *out, size_t cap, const char *f, ...) __attribute__((format(printf, 3, 4)));

static bool is_ctrl(const ea_rdzv *r) {
  return r->el.have && id_eq(&r->el.controller, &r->self);
}

static int find_flap(const ea_rdzv *r, const ea_node_id *id) {
  for (size_t i = 0; i < r->nflap; i++)
    if (id_eq(&r->flap[i].id, id)) return (int)i;
  return -1;
}

static flapper *flap_get(ea_rdzv *r, const ea_node_id *id) {
  int k = find_flap(r, id);
  if (k >= 0) return &r->flap[k];
  if (r->nflap == r->capflap) {
    size_t cap = r->capflap ? 2 * r->capflap : 8;
    flapper *p = realloc(r->flap, cap * sizeof *p);
    if (!p) return NULL; /* not counted: at worst it is taken back once more */
    r->flap = p;
    r->capflap = cap;
  }
  flapper *f = &r->flap[r->nflap++];
  memset(f, 0, sizeof *f);
  f->id = *id;
  return f;
}

static bool held(const ea_rdzv *r, const ea_node_id *id) {
  int k = find_flap(r, id);
  return k >= 0 && r->flap[k].until > r->now;
}

/* Held out, and the hold applies now (see waive_holds). */
static bool kept_out(const ea_rdzv *r, const ea_node_id *id) {
  return !r->holds_waived && held(r, id);
}

/* Drop failures older than the window. */
static void flap_age(const ea_rdzv *r, flapper *f) {
  uint32_t k = 0;
  for (uint32_t i = 0; i < f->nfails; i++)
    if (r->now - f->fails[i] < r->cfg.flap_window_ms) f->fails[k++] = f->fails[i];
  f->nfails = k;
}

/* Its k-th hold lasts cooldown · 2^(k−1), at most max(cooldown, the cap). */
static void hold(ea_rdzv *r, flapper *f, uint8_t why, const char *text) {
  uint64_t base = r->cfg.flap_cooldown_ms ? r->cfg.flap_cooldown_ms : 1;
  uint64_t cap = base > EA_RDZV_HOLD_CAP_MS ? base : EA_RDZV_HOLD_CAP_MS, d = base;
  for (uint32_t i = 0; i < f->holds && d < cap; i++) d *= 2;
  f->holds++;
  f->until = r->now + (d < cap ? d : cap);
  f->why = why;
  snprintf(f->text, sizeof f->text, "%s", text);
  r->st.holds++;
}

/* A failure of node id, as controller: counted once per formed generation
 * it is a member of; past the threshold within the window it is held out. */
static void flap_fail(ea_rdzv *r, const ea_node_id *id, const char *what) {
  if (!r->cfg.flap_threshold || !is_ctrl(r) || id_eq(id, &r->self)) return;
  if (r->formed.term == 0 || find_id(r->formed_ids, r->nformed, id) < 0) return;
  flapper *f = flap_get(r, id);
  if (!f || f->counted == r->formed.term + 1) return;
  f->counted = r->formed.term + 1;
  r->st.node_failures++;
  flap_age(r, f);
  if (f->nfails == FLAP_MAX) memmove(f->fails, f->fails + 1, --f->nfails * sizeof f->fails[0]);
  f->fails[f->nfails++] = r->now;
  if (f->nfails <= r->cfg.flap_threshold || f->until > r->now) return;
  char text[128];
  fmt(text, sizeof text, "%u failures in %u s (last: %s)", f->nfails, r->cfg.flap_window_ms / 1000,
      what);
  hold(r, f, EA_RDZV_HOLD_FLAP, text);
  f->nfails = 0; /* the next hold-out needs as many failures again */
}

/* What a new view says about the members of the formed generation, as
 * controller: one died, or restarted — it advertised a generation and now
 * advertises none (meta.last_gen 0: ran nothing since its start).  A
 * member of the formed generation advertises 0 for no other reason: its
 * last_gen is the generation it runs while that is the newest it knows of
 * (ea_rdzv_last_gen), and one formed without it would not be ours.  The
 * incarnation is not compared: a restart shows it at once, the new
 * metadata after gossip's lag, possibly in another view. */
typedef struct {
  bool present, up;
  uint64_t last_gen;
} flap_prev;

static flap_prev *flap_snapshot(const ea_rdzv *r) {
  if (!r->cfg.flap_threshold || !is_ctrl(r) || !r->nformed) return NULL;
  flap_prev *p = calloc(r->nformed, sizeof *p);
  if (!p) return NULL;
  for (uint32_t i = 0; i < r->nformed; i++) {
    const ea_member *m = view_find(r, &r->formed_ids[i]);
    if (!m) continue;
    p[i] = (flap_prev){true, is_up(m), m->meta.last_gen};
  }
  return p;
}

static void flap_compare(ea_rdzv *r, flap_prev *p, uint32_t n) {
  if (!p) return;
  for (uint32_t i = 0; i < n && i < r->nformed; i++) {
    const ea_member *m = view_find(r, &r->formed_ids[i]);
    if (!p[i].present || !m) continue;
    if (p[i].up && m->state == EA_STATE_DEAD)
      flap_fail(r, &r->formed_ids[i], "died");
    else if (is_up(m) && p[i].last_gen && !m->meta.last_gen)
      flap_fail(r, &r->formed_ids[i], "restarted");
  }
  free(p);
}

/* Forget records with nothing to remember: no failure in the window, not
 * held, never held. */
static void flap_prune(ea_rdzv *r) {
  size_t k = 0;
  for (size_t i = 0; i < r->nflap; i++) {
    flapper *f = &r->flap[i];
    flap_age(r, f);
    if (f->nfails || f->holds) r->flap[k++] = *f;
  }
  r->nflap = k;
}

/* ---- link blame (see ea_rdzv.h) ----------------------------------------- */

static bool id_lt(const ea_node_id *x, const ea_node_id *y) {
  return memcmp(x->b, y->b, sizeof x->b) < 0;
}

/* Keep only the links whose streak can go on: blamed in the generation just
 * replaced (now prev_formed).  Called as a new formed generation is set. */
static void blame_prune(ea_rdzv *r) {
  size_t k = 0;
  for (size_t i = 0; i < r->nblame; i++)
    if (r->blame[i].gens && r->blame[i].term == r->prev_formed.term) r->blame[k++] = r->blame[i];
  r->nblame = k;
}

static link_blame *blame_get(ea_rdzv *r, const ea_node_id *x, const ea_node_id *y) {
  const ea_node_id *a = id_lt(x, y) ? x : y, *b = id_lt(x, y) ? y : x;
  for (size_t i = 0; i < r->nblame; i++)
    if (id_eq(&r->blame[i].a, a) && id_eq(&r->blame[i].b, b)) return &r->blame[i];
  /* Out of memory: not counted, the link fails once more before it is. */
  if (EA_ARRAY_RESERVE(r->blame, r->capblame, r->nblame + 1)) return NULL;
  link_blame *l = &r->blame[r->nblame++];
  memset(l, 0, sizeof *l);
  l->a = *a;
  l->b = *b;
  return l;
}

/* Which end of l to hold out: never ourselves; the only end the blames
 * named, when they named one only; else the higher name, then the higher
 * id.  (Not "named more often": which BLAME of the deciding generation
 * arrives first would then decide.) */
static const ea_node_id *blame_pick(const ea_rdzv *r, const link_blame *l) {
  if (id_eq(&l->a, &r->self)) return &l->b;
  if (id_eq(&l->b, &r->self)) return &l->a;
  if (!l->named_a != !l->named_b) return l->named_a ? &l->a : &l->b;
  char na[EA_NAME_MAX], nb[EA_NAME_MAX];
  name_of(r, &l->a, na);
  name_of(r, &l->b, nb);
  return strcmp(na, nb) > 0 ? &l->a : &l->b; /* equal names: b, the higher id */
}

/* BLAME from src: its worker could not exchange with a rank of m->peer in
 * m->gen.  Counted once per link per formed generation, whoever says it. */
static void ctrl_blame(ea_rdzv *r, const ea_rdzv_msg *m) {
  if (!is_ctrl(r) || r->formed.term == 0 || !gen_eq(&m->gen, &r->formed)) return;
  if (id_eq(&m->src, &m->peer) || find_id(r->formed_ids, r->nformed, &m->src) < 0 ||
      find_id(r->formed_ids, r->nformed, &m->peer) < 0)
    return;
  link_blame *l = blame_get(r, &m->src, &m->peer);
  if (!l) return;
  uint8_t bit = id_eq(&m->peer, &l->a) ? 1 : 2;
  l->by = m->src;
  if (l->term == r->formed.term) {
    /* Counted for this generation already; the other end's view of it
     * still says which end did not answer. */
    if (!(l->named_now & bit)) {
      l->named_now |= bit;
      if (bit == 1)
        l->named_a++;
      else
        l->named_b++;
    }
    return;
  }
  /* The streak goes on from the generation just before, unless this one
   * made a step (synchronous training: a step done here was done by every
   * rank, so the link carried it): then the link worked for a while, and
   * this is a new first failure.  (A controller outside the generation
   * sees no steps and counts it as none.) */
  if (!(l->gens && r->prev_formed.term && l->term == r->prev_formed.term && !r->formed_stepped)) {
    l->gens = 0;
    l->named_a = l->named_b = 0;
  }
  l->gens++;
  l->term = r->formed.term;
  l->named_now = bit;
  if (bit == 1)
    l->named_a++;
  else
    l->named_b++;
  r->st.blames++;
  if (l->gens < EA_RDZV_BLAME_GENS) return;
  const ea_node_id *pick = blame_pick(r, l);
  const ea_node_id *other = id_eq(pick, &l->a) ? &l->b : &l->a;
  if (held(r, pick)) return;
  flapper *f = flap_get(r, pick);
  if (!f) return;
  char on[EA_NAME_MAX], by[EA_NAME_MAX], text[128];
  name_of(r, other, on);
  name_of(r, &l->by, by);
  fmt(text, sizeof text, "no exchange with %s in %u generations in a row (last blamed by %s)", on,
      l->gens, by);
  hold(r, f, EA_RDZV_HOLD_LINK, text);
  l->gens = 0; /* after the hold, the link starts a new count */
  l->named_a = l->named_b = 0;
}

const char *ea_rdzv_hold_why_str(uint8_t why) {
  switch (why) {
    case EA_RDZV_HOLD_FLAP:
      return "flapping";
    case EA_RDZV_HOLD_STRAGGLER:
      return "straggler";
    case EA_RDZV_HOLD_LINK:
      return "link";
    default:
      return "?";
  }
}

static void prune(ea_rdzv *r) {
  size_t k = 0;
  for (size_t i = 0; i < r->nexcl; i++) {
    const ea_member *v = view_find(r, &r->excl[i].id);
    if (!v) continue; /* reaped: if it ever comes back, it starts afresh */
    if (v->incarnation > r->excl[i].incarnation) lift(r, (int)i);
    r->excl[k++] = r->excl[i];
  }
  r->nexcl = k;
  flap_prune(r);
  /* A drained node leaves; if it comes back it is a new incarnation that
   * no longer drains, so forget it once it is gone or reincarnated. */
  k = 0;
  for (size_t i = 0; i < r->ndrain; i++) {
    const ea_member *v = view_find(r, &r->drain_set[i].id);
    if (is_up(v) && v->incarnation == r->drain_set[i].incarnation)
      r->drain_set[k++] = r->drain_set[i];
  }
  r->ndrain = k;
  k = 0;
  for (size_t i = 0; i < r->nwst; i++)
    if (r->now < r->wst[i].until && view_find(r, &r->wst[i].id)) r->wst[k++] = r->wst[i];
  r->nwst = k;
}

static void set_formed(ea_rdzv *r, const ea_rdzv_gen *g, const ea_node_id *ids, uint32_t n) {
  ea_node_id *p = NULL;
  if (n) {
    p = malloc(n * sizeof *p);
    if (!p) return; /* keep the older reference; quorum stays conservative */
    memcpy(p, ids, n * sizeof *p);
  }
  free(r->formed_ids);
  r->formed_ids = p;
  r->nformed = n;
  if (!gen_eq(g, &r->formed)) {
    r->prev_formed = r->formed;
    r->formed_stepped = false;
    blame_prune(r);
  }
  r->formed = *g;
  gen_raise(&r->seen, g);
  r->formed_broken = false;
  r->broken_by_failure = false;
  r->formed_at = r->now;
  r->el_dirty = true;
}

static void clear_formed(ea_rdzv *r) {
  free(r->formed_ids);
  r->formed_ids = NULL;
  r->nformed = 0;
  r->formed = (ea_rdzv_gen){0};
  r->formed_broken = false;
  r->broken_by_failure = false;
  r->el_dirty = true;
}

static void plan_free(ea_rdzv_plan *p) {
  free(p->nodes);
  free(p->ranks);
  memset(p, 0, sizeof *p);
}

static void lc_free(ea_rdzv *r) {
  if (r->lc_set) plan_free(&r->lc);
  free(r->lc_next);
  free(r->lc_copies);
  r->lc_next = NULL;
  r->lc_copies = NULL;
  r->lc_set = false;
}

static int plan_copy(ea_rdzv_plan *dst, const ea_rdzv_plan *src) {
  *dst = *src;
  dst->nodes = NULL;
  dst->ranks = NULL;
  if (src->nnodes) {
    dst->nodes = malloc(src->nnodes * sizeof *dst->nodes);
    if (!dst->nodes) goto fail;
    memcpy(dst->nodes, src->nodes, src->nnodes * sizeof *dst->nodes);
  }
  if (src->world && src->ranks) {
    dst->ranks = malloc(src->world * sizeof *dst->ranks);
    if (!dst->ranks) goto fail;
    memcpy(dst->ranks, src->ranks, src->world * sizeof *dst->ranks);
  }
  return 0;
fail:
  plan_free(dst);
  return -ENOMEM;
}

/* ---- outputs ------------------------------------------------------------ */

/* Send m to `to`, or queue it for ourselves.  Returns false when `to` is not
 * in the view (we do not know its control address) or memory ran out. */
static bool post(ea_rdzv *r, const ea_node_id *to, ea_rdzv_msg *m) {
  m->src = r->self;
  if (id_eq(to, &r->self)) {
    if (r->nselfq == SELFQ_MAX) return false;
    ea_rdzv_msg *c = malloc(sizeof *c);
    if (!c) return false;
    *c = *m;
    if (plan_copy(&c->plan, &m->plan) != 0) {
      free(c);
      return false;
    }
    r->selfq[r->nselfq++] = c;
    return true;
  }
  const ea_member *mm = view_find(r, to);
  if (!mm) return false;
  r->io.send(r->io.ctx, to, &mm->meta.control, m);
  return true;
}

static void order(ea_rdzv *r, uint8_t kind, const char *why) {
  ea_rdzv_order o = {.kind = kind, .why = why};
  if (kind == EA_RDZV_DO_PREPARE) {
    o.gen = r->prep_gen;
    o.rank_base = r->prep_base;
    o.world = r->prep_world;
    o.wpn = r->cfg.workers_per_node;
  } else if (kind == EA_RDZV_DO_COMMIT) {
    o.gen = r->run.gen;
    o.plan = &r->run;
  }
  r->io.order(r->io.ctx, &o);
}

/* Ask for g to be made durable; at most one persist is outstanding, and a
 * newer request while one runs is issued when it completes. */
static void want_durable(ea_rdzv *r, const ea_rdzv_gen *g) {
  gen_raise(&r->want, g);
}

static void pump_persist(ea_rdzv *r) {
  if (r->persist_busy || ea_rdzv_gen_cmp(&r->want, &r->durable) <= 0) return;
  if (r->now < r->persist_retry_at) return;
  r->persist_busy = true;
  r->persisting = r->want;
  r->io.persist(r->io.ctx, &r->persisting);
}

static bool durable_at_least(const ea_rdzv *r, const ea_rdzv_gen *g) {
  return ea_rdzv_gen_cmp(&r->durable, g) >= 0;
}

static void fmt(char *out, size_t cap, const char *f, ...) __attribute__((format(printf, 3, 4)));
static void fmt(char *out, size_t cap, const char *f, ...) {
  va_list ap;
  va_start(ap, f);
  vsnprintf(out, cap, f, ap);
  va_end(ap);
}

/* ---- agent half --------------------------------------------------------- */

static bool quorum_lost(const ea_rdzv *r) {
  return !r->cfg.quorum_none && r->nview > 0 && !r->el.has_quorum;
}

/* "no quorum: 2 of 5 members of generation 7 reachable" */
static void quorum_text(const ea_rdzv *r, char *out, size_t cap) {
  uint32_t up = 0, total = 0;
  for (uint32_t i = 0; i < r->nformed; i++) {
    const ea_member *m = view_find(r, &r->formed_ids[i]);
    if (m && m->state == EA_STATE_LEFT) continue; /* graceful leavers do not count */
    total++;
    if (is_up(m)) up++;
  }
  fmt(out, cap, "no quorum: %u of %u members of generation %" PRIu64 " reachable", up, total,
      r->formed.term);
}

static void send_nack(ea_rdzv *r, const ea_rdzv_msg *m, uint8_t why) {
  ea_rdzv_msg n = {.type = EA_RDZV_NACK, .gen = m->gen, .nack = why};
  n.seen = r->seen;
  gen_raise(&n.seen, &r->accepted);
  r->st.nacks_sent++;
  post(r, &m->src, &n);
}

static void pause_workers(ea_rdzv *r, const char *why) {
  r->paused = true;
  snprintf(r->pause_why, sizeof r->pause_why, "%s", why);
  order(r, EA_RDZV_DO_PAUSE, why);
}

/* Tell the workers to abort the old communicator and get ready: from here
 * on the old generation is no longer running on this node. */
static void order_prepare(ea_rdzv *r) {
  r->prep_ordered = true;
  r->running = false;
  r->paused = false;
  order(r, EA_RDZV_DO_PREPARE, NULL);
}

static void agent_prepare(ea_rdzv *r, const ea_rdzv_msg *m) {
  if (r->drained) return;
  if (r->draining) {
    send_nack(r, m, EA_RDZV_NACK_DRAINING);
    return;
  }
  if (m->wpn != r->cfg.workers_per_node) {
    send_nack(r, m, EA_RDZV_NACK_CONFIG);
    return;
  }
  if (r->prep && gen_eq(&m->gen, &r->prep_gen)) { /* a duplicate */
    if (r->ready_sent) r->ready_sent = false;     /* answer again */
    return;
  }
  if (ea_rdzv_gen_cmp(&m->gen, &r->accepted) <= 0 || ea_rdzv_gen_cmp(&m->gen, &r->seen) < 0) {
    send_nack(r, m, EA_RDZV_NACK_STALE);
    return;
  }
  gen_raise(&r->seen, &m->gen);
  r->accepted = m->gen;
  want_durable(r, &m->gen);
  r->prep = true;
  r->prep_gen = m->gen;
  r->prep_base = m->rank_base;
  r->prep_world = m->world;
  r->prep_since = r->now;
  r->ready_sent = false;
  r->whas_nccl = false;
  memset(r->wready, 0, sizeof r->wready);
  memset(r->wstepped, 0, sizeof r->wstepped);
  r->fail_gen = (ea_rdzv_gen){0};
  r->fail_blame = false;
  /* The workers are told once the number is durable (agent_eval): an agent
   * acts on no generation it could forget in a crash.  A join does not
   * break anything, so then the old generation also finishes the step in
   * flight (every local worker reports a boundary, or one fails) before its
   * communicator is torn down.  Anything else broke it already. */
  r->prep_ordered = false;
  r->prep_boundary = m->boundary && r->running && !r->cfg.restart_mode;
}

static void agent_commit(ea_rdzv *r, const ea_rdzv_msg *m) {
  const ea_rdzv_plan *p = &m->plan;
  if (!r->prep || !gen_eq(&r->prep_gen, &m->gen) || !r->ready_sent) {
    if (!(r->running && gen_eq(&r->run.gen, &m->gen))) r->st.stale_ignored++;
    return;
  }
  if (gen_eq(&r->fail_gen, &m->gen)) {
    /* A worker died after our READY: its address in the plan is dead.  Our
     * REPORT makes the controller re-form; running this would only stall. */
    r->st.stale_ignored++;
    return;
  }
  int me = -1;
  for (uint32_t i = 0; i < p->nnodes; i++)
    if (id_eq(&p->nodes[i].id, &r->self)) me = (int)i;
  if (me < 0 || p->wpn != r->cfg.workers_per_node || (uint32_t)me * p->wpn != r->prep_base ||
      p->world != r->prep_world || p->world != p->nnodes * p->wpn || !p->ranks) {
    r->st.stale_ignored++; /* not the plan we prepared for: wait for another */
    return;
  }
  ea_rdzv_plan copy;
  if (plan_copy(&copy, p) != 0) return; /* no memory: we time out and re-form */
  plan_free(&r->run);
  r->run = copy;
  r->run.gen = m->gen;
  if (p->restarts > r->restarts) r->restarts = p->restarts;
  r->running = true;
  r->prep = false;
  r->paused = false;
  r->ran = m->gen;
  ea_node_id *ids = malloc(p->nnodes * sizeof *ids);
  if (ids) {
    for (uint32_t i = 0; i < p->nnodes; i++) ids[i] = p->nodes[i].id;
    set_formed(r, &m->gen, ids, p->nnodes);
    free(ids);
  }
  order(r, EA_RDZV_DO_COMMIT, NULL);
}

static void agent_abort(ea_rdzv *r, const ea_rdzv_msg *m) {
  if (r->drained) return;
  if (!r->prep && gen_eq(&r->ran, &m->gen)) {
    /* ABORT of the generation we run: its controller stopped it
     * (stop_formed).  It lost members for good and too few nodes remain
     * for min_nodes, or no draft holds a quorum of it and only its drainers
     * are let go.  A drainer drains now (agent_eval); anyone else pauses,
     * its workers keeping their state for the next generation.  (A
     * prepared newer one means a controller already moved on: that is
     * obeyed instead.)  A member that already stopped running it (its
     * worker failed, a formation after it was abandoned) is paused with
     * this reason too. */
    if (gen_eq(&r->halted, &m->gen)) return; /* a copy */
    r->running = false;
    r->halted = m->gen;
    r->halted_by = m->src;
    if (!r->draining) {
      char why[EA_RDZV_REASON_MAX], c[EA_NAME_MAX];
      name_of(r, &m->src, c);
      fmt(why, sizeof why,
          "waiting for min_nodes: generation %" PRIu64 " stopped by %s, too few nodes to re-form",
          m->gen.term, c);
      pause_workers(r, why);
    }
    return;
  }
  if (!r->prep || !gen_eq(&r->prep_gen, &m->gen)) {
    r->st.stale_ignored++;
    return;
  }
  r->prep = false;
  if (!r->prep_ordered) return; /* still training the old one: carry on */
  char why[EA_RDZV_REASON_MAX];
  fmt(why, sizeof why, "generation %" PRIu64 " abandoned by its controller", m->gen.term);
  pause_workers(r, why);
}

static void agent_release(ea_rdzv *r, const ea_rdzv_msg *m) {
  gen_raise(&r->seen, &m->gen);
  bool dropped = false;
  if (r->running && ea_rdzv_gen_cmp(&r->run.gen, &m->gen) < 0) {
    r->running = false;
    dropped = true;
  }
  if (r->prep && ea_rdzv_gen_cmp(&r->prep_gen, &m->gen) < 0) {
    r->prep = false;
    dropped = dropped || r->prep_ordered;
  }
  /* We are not in the newest formed generation: forget the older one, so
   * that if we become controller we learn the newest before acting. */
  if (ea_rdzv_gen_cmp(&r->formed, &m->gen) < 0) clear_formed(r);
  if (dropped && !r->draining) {
    char why[EA_RDZV_REASON_MAX];
    fmt(why, sizeof why, "generation %" PRIu64 " formed without this node", m->gen.term);
    pause_workers(r, why);
  }
}

static void start_draining(ea_rdzv *r) {
  if (r->draining) return;
  r->draining = true;
  r->report_at = r->now; /* tell the controller at once */
}

/* Tell `to` which generation formed last, and its members in rank order
 * (term 0 and none when we know of none) — less those that left
 * gracefully, unless none would remain.  A LEFT member is no voter of the
 * generation any more (ctrl_step's quorum rule) and never comes back with
 * that incarnation; and a newcomer never learns of it (membership keeps no
 * record of a member that left before it joined), so it would count it as
 * a member it does not know: after a mass preemption whose drained nodes
 * took the controller along, a fresh node that became controller refused
 * the survivors' STATE (most of its members unknown: state_credible) and
 * learned for ever (make chaos, the preempt fault). */
static void send_state(ea_rdzv *r, const ea_node_id *to) {
  ea_rdzv_msg s = {.type = EA_RDZV_STATE, .gen = r->formed};
  ea_rdzv_node *nodes = calloc(r->nformed ? r->nformed : 1, sizeof *nodes);
  if (!nodes) return;
  uint32_t n = 0;
  for (uint32_t i = 0; i < r->nformed; i++) {
    const ea_member *v = view_find(r, &r->formed_ids[i]);
    if (!(v && v->state == EA_STATE_LEFT)) nodes[n++].id = r->formed_ids[i];
  }
  if (n == 0)
    for (; n < r->nformed; n++) nodes[n].id = r->formed_ids[n];
  s.plan.nodes = nodes;
  s.plan.nnodes = n;
  s.plan.gen = r->formed;
  post(r, to, &s);
  free(nodes);
}

/* Answered even when we know of nothing (term 0): a controller that asked
 * because of a stale hint must hear that there is nothing to learn here. */
static void agent_query(ea_rdzv *r, const ea_rdzv_msg *m) {
  send_state(r, &m->src);
}

static bool self_in_formed(const ea_rdzv *r) {
  return find_id(r->formed_ids, r->nformed, &r->self) >= 0;
}

static bool any_wstarting(const ea_rdzv *r) {
  for (uint32_t i = 0; i < r->cfg.workers_per_node; i++)
    if (r->wstarting[i]) return true;
  return false;
}

/* Something the controller must hear from us, re-sent until it has an
 * effect: a failure, our drain, or that we belong to the formed generation
 * but are not running it (restarted, paused, timed out). */
static bool need_report(const ea_rdzv *r) {
  if (r->drained) return false;
  if (r->draining || r->announce) return true;
  if (any_wstarting(r)) return true; /* EA_RDZV_F_STARTING, refreshed every REPORT_MS */
  if (r->fail_gen.term) {
    if (r->running && gen_eq(&r->fail_gen, &r->run.gen)) return true;
    if (r->prep && gen_eq(&r->fail_gen, &r->prep_gen)) return true;
  }
  /* A member of the formed generation that runs none of it reports — but
   * not to the controller that halted it (it knows).  Another controller
   * may not: elected after a partition healed, it learns the generation
   * from a member's STATE, which does not say it was stopped, and would
   * wait for ever on members that never speak again (test_rdzv
   * random_faults, seed 1796462378: n=4, min=max=3). */
  if (r->formed.term && self_in_formed(r) && !r->prep &&
      !(r->running && gen_eq(&r->run.gen, &r->formed)) &&
      !(gen_eq(&r->halted, &r->formed) && id_eq(&r->halted_by, &r->el.controller)))
    return true;
  return false;
}

static void send_report(ea_rdzv *r) {
  ea_rdzv_msg m = {.type = EA_RDZV_REPORT, .accepted = r->accepted};
  if (r->running) {
    m.gen = r->run.gen;
    m.flags |= EA_RDZV_F_RUNNING;
  } else if (r->prep) {
    m.gen = r->prep_gen;
    m.flags |= EA_RDZV_F_PREPARING;
  }
  if (r->fail_gen.term && gen_eq(&r->fail_gen, &m.gen)) {
    m.flags |= EA_RDZV_F_FAILED;
    m.flags &= (uint8_t)~EA_RDZV_F_RUNNING;
    if (r->fail_blame) {
      /* Before the REPORT, so the blame is counted before the failure
       * makes the controller re-form. */
      ea_rdzv_msg b = {.type = EA_RDZV_BLAME, .gen = m.gen, .peer = r->fail_peer};
      post(r, &r->el.controller, &b);
    }
  }
  if (r->draining) m.flags |= EA_RDZV_F_DRAINING;
  if (any_wstarting(r)) m.flags |= EA_RDZV_F_STARTING;
  post(r, &r->el.controller, &m);
}

static bool all_ready(const ea_rdzv *r) {
  for (uint32_t i = 0; i < r->cfg.workers_per_node; i++)
    if (!r->wready[i]) return false;
  return true;
}

static bool all_stepped(const ea_rdzv *r) {
  for (uint32_t i = 0; i < r->cfg.workers_per_node; i++)
    if (!r->wstepped[i]) return false;
  return true;
}

/* Step boundaries are waited for at most a third of the rendezvous timeout,
 * leaving two thirds for abort, ready and commit; a step that long is
 * aborted mid-way (state sync makes that safe, it only wastes the step).
 * When the step time is known the wait is also at most four steps: the
 * members that reached their boundary abort the old communicator at once,
 * so a step still in flight here after that can only complete if every peer
 * stepped too — otherwise it waits for its collective's timeout.  Seen in
 * bench/recovery_pytorch.sh: a join stalled the library's ranks 10 s (gloo's
 * send timeout, the boundary wait of 30 s / 3) while its steps took 57 ms. */
static uint64_t boundary_deadline(const ea_rdzv *r) {
  uint64_t wait = r->cfg.rendezvous_timeout_ms / 3;
  if (r->step_iv_ms) {
    uint64_t steps = 4 * r->step_iv_ms < 50 ? 50 : 4 * r->step_iv_ms;
    if (steps < wait) wait = steps;
  }
  return r->prep_since + wait;
}

/* An agent that prepared and heard nothing gives up after twice the
 * controller's own timeout (the controller's clock starts later, when it
 * sends, and a COMMIT may still be on its way). */
static uint64_t prep_deadline(const ea_rdzv *r) {
  return r->prep_since + 2 * (uint64_t)r->cfg.rendezvous_timeout_ms;
}

/* Let go by an ABORT of the generation we ran (stop_formed), or the group
 * went on without us. */
static const char *drained_why(const ea_rdzv *r) {
  return r->halted.term && gen_eq(&r->halted, &r->ran)
             ? "released by the controller: too few nodes to re-form without the draining ones"
             : "the group re-formed without this node";
}

static bool send_ready(ea_rdzv *r) {
  ea_rdzv_msg m = {.type = EA_RDZV_READY, .gen = r->prep_gen};
  m.nworkers = r->cfg.workers_per_node;
  memcpy(m.workers, r->winfo, m.nworkers * sizeof m.workers[0]);
  m.formed = r->formed;
  m.restarts = r->restarts;
  if (r->prep_base == 0 && r->whas_nccl) {
    m.has_nccl_id = true;
    memcpy(m.nccl_id, r->wnccl, sizeof m.nccl_id);
  }
  return post(r, &r->prep_gen.ctrl, &m);
}

/* READY went out over the network and nothing since says the plan is off:
 * keep saying it until the COMMIT (or an ABORT) comes.  A READY to
 * ourselves cannot be lost; after a local worker failed our REPORT tells
 * the controller instead. */
static bool ready_resend_due(const ea_rdzv *r) {
  return r->prep && r->ready_sent && !id_eq(&r->prep_gen.ctrl, &r->self) &&
         !gen_eq(&r->fail_gen, &r->prep_gen) && all_ready(r);
}

static void agent_eval(ea_rdzv *r) {
  if (r->drained) return;
  if (quorum_lost(r) && r->running) {
    char why[EA_RDZV_REASON_MAX];
    quorum_text(r, why, sizeof why);
    r->running = false;
    pause_workers(r, why);
  }
  if (r->prep && !r->prep_ordered && durable_at_least(r, &r->prep_gen) &&
      (!r->prep_boundary || all_stepped(r) || r->now >= boundary_deadline(r)))
    order_prepare(r);
  if (r->prep && r->now >= prep_deadline(r)) {
    r->prep = false;
    if (r->prep_ordered) {
      char why[EA_RDZV_REASON_MAX];
      fmt(why, sizeof why, "no COMMIT for generation %" PRIu64 " within %u ms", r->prep_gen.term,
          2 * r->cfg.rendezvous_timeout_ms);
      pause_workers(r, why);
    }
  }
  if (r->prep && r->prep_ordered && !r->ready_sent && all_ready(r)) {
    if (send_ready(r)) {
      r->ready_sent = true;
      r->ready_at = r->now + RESEND_MS;
    }
  } else if (ready_resend_due(r) && r->now >= r->ready_at) {
    /* Still no COMMIT: our READY or the COMMIT may have been lost.  The
     * controller ignores a READY it has, and answers one for a plan it
     * already committed with that COMMIT again. */
    send_ready(r);
    r->ready_at = r->now + RESEND_MS;
  }
  /* A newer generation formed without us: ours is dead, whatever it was. */
  if (r->running && r->formed.term && ea_rdzv_gen_cmp(&r->run.gen, &r->formed) < 0 &&
      !self_in_formed(r)) {
    char why[EA_RDZV_REASON_MAX];
    fmt(why, sizeof why, "generation %" PRIu64 " formed without this node", r->formed.term);
    r->running = false;
    if (!r->draining) pause_workers(r, why);
  }
  if (r->draining && !r->running && !r->prep) {
    r->drained = true;
    order(r, EA_RDZV_DO_DRAINED, drained_why(r));
    return;
  }
  if (r->el.have && (!r->report_to_set || !id_eq(&r->report_to, &r->el.controller)))
    r->announce = true;
  if (r->el.have && need_report(r)) {
    bool changed = !r->report_to_set || !id_eq(&r->report_to, &r->el.controller);
    if (changed || r->now >= r->report_at) {
      send_report(r);
      r->report_to = r->el.controller;
      r->report_to_set = true;
      r->report_at = r->now + REPORT_MS;
    }
  }
}

/* ---- controller half ---------------------------------------------------- */

static void f_free(ea_rdzv *r) {
  free(r->f.ids);
  free(r->f.ready);
  free(r->f.w);
  memset(&r->f, 0, sizeof r->f);
}

/* Give up the formation in progress; members that prepared it are told. */
static void abandon(ea_rdzv *r) {
  if (r->f.phase == F_PREPARE) {
    for (uint32_t i = 0; i < r->f.n; i++) {
      ea_rdzv_msg m = {.type = EA_RDZV_ABORT, .gen = r->f.gen};
      post(r, &r->f.ids[i], &m);
    }
  }
  f_free(r);
}

static uint64_t backoff(ea_rdzv *r) {
  uint64_t d = RETRY_BASE_MS;
  for (uint32_t i = 1; i < r->nfail && d < r->cfg.rendezvous_timeout_ms; i++) d *= 2;
  if (d > r->cfg.rendezvous_timeout_ms) d = r->cfg.rendezvous_timeout_ms;
  return d / 2 + ea_rng_below(&r->rng, d / 2 + 1);
}

/* The formation failed because of the given members: leave them out for
 * a while (excl_ms: the base of their backoff, see EXCL_BASE_MS; 0: they
 * are not to blame) and start over with a higher generation.  The first
 * retry is immediate (a dead member is the common case and recovery time
 * matters); further ones back off. */
static void formation_failed(ea_rdzv *r, const ea_node_id *bad, uint32_t nbad, uint64_t excl_ms) {
  if (excl_ms)
    for (uint32_t i = 0; i < nbad; i++) exclude(r, &bad[i], excl_ms);
  r->st.formations_failed++;
  r->nfail++;
  r->retry_at = r->nfail > 1 ? r->now + backoff(r) : r->now;
  abandon(r);
}

/* A chosen member started draining: start over without it, at once.  A
 * drain is nobody's fault and no sign of a collision, so it neither
 * excludes anyone nor grows the backoff: when every node drains at once
 * (the job is stopped), each drainer's REPORT abandons one formation, and
 * the last must not wait out a backoff before it lets them all go. */
static void formation_drained(ea_rdzv *r) {
  r->st.formations_failed++;
  r->retry_at = r->now;
  abandon(r);
}

/* The newest generation term any member advertises.  Members that left
 * gracefully do not count: they hold no vote in it any more, and if they
 * were its only members it binds nobody. */
static uint64_t max_advertised_term(const ea_rdzv *r) {
  uint64_t t = 0;
  for (size_t i = 0; i < r->nview; i++) {
    if (r->view[i].state == EA_STATE_LEFT) continue;
    uint64_t x = r->view[i].meta.last_gen >> 16;
    if (x > t) t = x;
  }
  return t;
}

static void start_formation(ea_rdzv *r, const ea_node_id *ids, uint32_t n, bool boundary) {
  uint64_t term = r->seen.term;
  if (r->accepted.term > term) term = r->accepted.term;
  if (r->durable.term > term) term = r->durable.term;
  if (r->want.term > term) term = r->want.term;
  if (r->formed.term > term) term = r->formed.term;
  uint64_t adv = max_advertised_term(r);
  if (adv > term) term = adv;
  uint32_t wpn = r->cfg.workers_per_node;
  f_free(r);
  lc_free(r); /* a member still waiting for the last COMMIT gets this PREPARE */
  r->f.ids = malloc(n * sizeof *r->f.ids);
  r->f.ready = calloc(n, sizeof *r->f.ready);
  r->f.w = calloc((size_t)n * wpn, sizeof *r->f.w);
  if (!r->f.ids || !r->f.ready || !r->f.w) {
    f_free(r);
    return;
  }
  memcpy(r->f.ids, ids, n * sizeof *ids);
  r->f.n = n;
  r->f.boundary = boundary;
  r->f.gen = (ea_rdzv_gen){.term = term + 1, .ctrl = r->self};
  r->f.phase = F_PERSIST;
  gen_raise(&r->seen, &r->f.gen);
  want_durable(r, &r->f.gen); /* persisted before it is advertised */
  r->st.formations_started++;
}

static bool send_prepare(ea_rdzv *r, uint32_t i) {
  uint32_t wpn = r->cfg.workers_per_node;
  ea_rdzv_msg m = {.type = EA_RDZV_PREPARE,
                   .gen = r->f.gen,
                   .world = r->f.n * wpn,
                   .wpn = wpn,
                   .rank_base = i * wpn,
                   .boundary = r->f.boundary};
  return post(r, &r->f.ids[i], &m);
}

static void send_prepares(ea_rdzv *r) {
  r->f.phase = F_PREPARE;
  r->f.deadline = r->now + r->cfg.rendezvous_timeout_ms;
  r->f.resend_at = r->now + RESEND_MS;
  for (uint32_t i = 0; i < r->f.n; i++) {
    if (!send_prepare(r, i)) {
      ea_node_id bad = r->f.ids[i];
      formation_failed(r, &bad, 1, EXCL_BASE_MS);
      return;
    }
  }
}

/* PREPARE again to the members that have not answered: the first may never
 * have arrived (see RESEND_MS).  A member that has it answers READY again
 * (or its NACK); ours go through the local queue and cannot be lost. */
static void resend_prepares(ea_rdzv *r) {
  r->f.resend_at = r->now + RESEND_MS;
  for (uint32_t i = 0; i < r->f.n; i++)
    if (!r->f.ready[i] && !id_eq(&r->f.ids[i], &r->self)) send_prepare(r, i);
}

static void job_failed(ea_rdzv *r, uint8_t why, const char *text);

static void commit(ea_rdzv *r) {
  uint32_t n = r->f.n, wpn = r->cfg.workers_per_node;
  /* The restart count: the highest any member knew (a controller that was a
   * spare knows none itself), one more when this re-forms the same nodes
   * after a worker failed.  Past max_restarts the job is given up here, when
   * every member answered READY (so none of them is dead: a node lost is a
   * membership change, not a restart, and a failure it caused on the others
   * must not use a restart up before gossip has declared it dead). */
  uint64_t restarts = r->restarts > r->f.restarts_seen ? r->restarts : r->f.restarts_seen;
  if (r->f.restart) restarts++;
  if (r->f.restart && restarts > r->cfg.max_restarts) {
    char why[EA_RDZV_REASON_MAX];
    fmt(why, sizeof why,
        "restarts exhausted: a worker failed after %" PRIu64
        " restart%s "
        "(runtime.max_restarts %u): %s",
        restarts - 1, restarts == 2 ? "" : "s", r->cfg.max_restarts, r->broken_why);
    abandon(r);
    job_failed(r, EA_RDZV_JOB_RESTARTS, why);
    return;
  }
  ea_rdzv_msg m = {.type = EA_RDZV_COMMIT, .gen = r->f.gen};
  ea_rdzv_plan *p = &m.plan;
  p->restarts = restarts;
  r->restarts = restarts;
  /* The churn streak: a restart extends it (or starts one), anything else
   * (a membership change, a join) ends it. */
  if (r->f.restart) {
    if (r->f.churn_next == 1) r->churn_streak++;
    r->churn = r->f.churn_next;
    snprintf(r->churn_why, sizeof r->churn_why, "%s", r->broken_why);
  } else {
    r->churn = 0;
  }
  p->gen = r->f.gen;
  p->nnodes = n;
  p->wpn = wpn;
  p->world = n * wpn;
  p->nodes = calloc(n, sizeof *p->nodes);
  if (!p->nodes) {
    formation_failed(r, NULL, 0, 0);
    return;
  }
  p->ranks = r->f.w;
  for (uint32_t i = 0; i < n; i++) {
    const ea_member *v = view_find(r, &r->f.ids[i]);
    p->nodes[i].id = r->f.ids[i];
    if (v) {
      snprintf(p->nodes[i].name, sizeof p->nodes[i].name, "%s", v->meta.name);
      p->nodes[i].control = v->meta.control;
    }
  }
  /* State sync source: the most completed steps, lowest rank on a tie.
   * Every rank either finished a step's allreduce or did not, so ranks with
   * equal counts hold identical state.  A state older than the newest
   * committed checkpoint's generation is left behind
   * (ea_rdzv_set_latest_ckpt); skipping it can only lead to no sync, and
   * the generation then loads that checkpoint. */
  for (uint32_t k = 0; k < p->world; k++) {
    if (p->ranks[k].step == 0) continue;
    if (r->latest_gen && p->ranks[k].state_gen < r->latest_gen) continue;
    if (!p->has_sync || p->ranks[k].step > p->sync_step) {
      p->has_sync = true;
      p->sync_rank = k;
      p->sync_step = p->ranks[k].step;
    }
  }
  p->has_nccl_id = r->f.has_nccl;
  memcpy(p->nccl_id, r->f.nccl, sizeof p->nccl_id);
  for (uint32_t i = 0; i < n; i++) post(r, &r->f.ids[i], &m);
  lc_free(r);
  r->lc_next = calloc(n, sizeof *r->lc_next); /* 0: a copy may go at once */
  r->lc_copies = calloc(n, sizeof *r->lc_copies);
  if (r->lc_next && r->lc_copies && plan_copy(&r->lc, p) == 0) {
    r->lc_set = true;
    r->lc_until = r->now + 2 * (uint64_t)r->cfg.rendezvous_timeout_ms; /* prep_deadline */
  } else {
    lc_free(r); /* no memory: a lost COMMIT costs a rendezvous timeout, as before */
  }
  /* Members of the previous generation (and drainers) left out of this one
   * are told, so that they stop waiting and a drainer can go. */
  ea_rdzv_msg rel = {.type = EA_RDZV_RELEASE, .gen = r->f.gen};
  for (uint32_t i = 0; i < r->nformed; i++)
    if (find_id(r->f.ids, n, &r->formed_ids[i]) < 0 && is_up(view_find(r, &r->formed_ids[i])))
      post(r, &r->formed_ids[i], &rel);
  for (size_t i = 0; i < r->ndrain; i++)
    if (find_id(r->f.ids, n, &r->drain_set[i].id) < 0 &&
        find_id(r->formed_ids, r->nformed, &r->drain_set[i].id) < 0)
      post(r, &r->drain_set[i].id, &rel);
  set_formed(r, &r->f.gen, r->f.ids, n);
  for (uint32_t i = 0; i < n; i++) forgive(r, &r->f.ids[i]);
  free(p->nodes);
  r->st.formations_committed++;
  r->nfail = 0;
  r->join_since = r->cold_since = 0;
  f_free(r); /* frees f.w, which p->ranks pointed at */
}

static void ctrl_ready(ea_rdzv *r, const ea_rdzv_msg *m) {
  if (r->f.phase != F_PREPARE || !gen_eq(&m->gen, &r->f.gen)) {
    if (r->lc_set && gen_eq(&m->gen, &r->lc.gen) && r->now < r->lc_until) {
      /* A member still waiting for a COMMIT we sent: it was lost.  The
       * same plan again; a member that has it ignores the copy. */
      for (uint32_t i = 0; i < r->lc.nnodes; i++)
        if (id_eq(&r->lc.nodes[i].id, &m->src)) {
          if (r->now >= r->lc_next[i]) {
            ea_rdzv_msg c = {.type = EA_RDZV_COMMIT, .gen = r->lc.gen, .plan = r->lc};
            post(r, &m->src, &c);
            r->lc_next[i] = r->now + ((uint64_t)RESEND_MS << r->lc_copies[i]);
            if (r->lc_copies[i] < 3) r->lc_copies[i]++;
          }
          return;
        }
    }
    r->st.stale_ignored++;
    return;
  }
  int i = find_id(r->f.ids, r->f.n, &m->src);
  if (i < 0 || r->f.ready[i]) return;
  if (ea_rdzv_gen_cmp(&m->formed, &r->formed) > 0) {
    /* A generation formed that we never heard of: our quorum and rank
     * order may be stale.  Stop, learn it from this member, then decide. */
    r->hint = m->formed;
    r->hint_from = m->src;
    r->hint_tries = 0;
    r->st.formations_failed++;
    abandon(r);
    return;
  }
  if (ea_rdzv_gen_cmp(&m->formed, &r->formed) < 0 &&
      find_id(r->formed_ids, r->nformed, &m->src) >= 0) {
    /* A member of the formed generation that no longer knows it: it
     * restarted (or never ran it).  A failure toward flapping; held out
     * now, it leaves this formation. */
    flap_fail(r, &m->src, "restarted");
    if (kept_out(r, &m->src)) {
      formation_drained(r);
      return;
    }
  }
  uint32_t wpn = r->cfg.workers_per_node;
  if (m->nworkers != wpn) {
    formation_failed(r, &m->src, 1, EXCL_BASE_MS);
    return;
  }
  memcpy(&r->f.w[(size_t)i * wpn], m->workers, wpn * sizeof m->workers[0]);
  if (m->restarts > r->f.restarts_seen) r->f.restarts_seen = m->restarts;
  if (i == 0 && m->has_nccl_id) {
    r->f.has_nccl = true;
    memcpy(r->f.nccl, m->nccl_id, sizeof r->f.nccl);
  }
  r->f.ready[i] = true;
  for (uint32_t k = 0; k < r->f.n; k++)
    if (!r->f.ready[k]) return;
  commit(r);
}

static void ctrl_nack(ea_rdzv *r, const ea_rdzv_msg *m) {
  r->st.nacks_received++;
  gen_raise(&r->seen, &m->seen);
  if (r->f.phase != F_PREPARE || !gen_eq(&m->gen, &r->f.gen)) return;
  switch (m->nack) {
    case EA_RDZV_NACK_DRAINING:
      drain_set_add(r, &m->src);
      formation_drained(r);
      break;
    case EA_RDZV_NACK_STALE:
      if (ea_rdzv_gen_cmp(&m->seen, &r->f.gen) > 0) {
        /* Someone issued a newer generation: another controller, or one we
         * do not know yet.  Back off and, if still in charge, outbid it. */
        r->nfail++;
        r->st.formations_failed++;
        r->retry_at = r->now + backoff(r);
        abandon(r);
        break;
      }
      /* It has accepted this very number before and lost it: it restarted
       * (a re-sent PREPARE reached its new process).  It is back and
       * answering, and will take the next, higher number: no exclusion. */
      formation_failed(r, NULL, 0, 0);
      break;
    default: /* CONFIG: its workers_per_node is not ours; it backs off */
      formation_failed(r, &m->src, 1, EXCL_BASE_MS);
      break;
  }
}

static void ctrl_report_do(ea_rdzv *r, const ea_rdzv_msg *m);

bool ea_rdzv_tags_have(const char *tags, const char *token) {
  size_t n = strlen(token);
  for (const char *p = tags; p && *p;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == n && memcmp(p, token, n) == 0) return true;
    p = e ? e + 1 : NULL;
  }
  return false;
}

int ea_rdzv_tags_set(char *tags, size_t cap, const char *token, bool on) {
  bool have = ea_rdzv_tags_have(tags, token);
  if (on == have) return 0;
  size_t n = strlen(tags), tn = strlen(token);
  if (on) {
    if (n + (n ? 1 : 0) + tn + 1 > cap) return -ENOSPC;
    snprintf(tags + n, cap - n, "%s%s", n ? "," : "", token);
    return 0;
  }
  char out[EA_TAGS_MAX];
  size_t o = 0;
  for (const char *p = tags; p && *p;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (!(len == tn && memcmp(p, token, tn) == 0) && len > 0 && o + len + 2 <= sizeof out) {
      if (o) out[o++] = ',';
      memcpy(out + o, p, len);
      o += len;
    }
    p = e ? e + 1 : NULL;
  }
  out[o] = 0;
  snprintf(tags, cap, "%s", out);
  return 0;
}

static int find_wst(const ea_rdzv *r, const ea_node_id *id) {
  for (size_t i = 0; i < r->nwst; i++)
    if (id_eq(&r->wst[i].id, id)) return (int)i;
  return -1;
}

/* A REPORT of id said whether a worker of it is starting.  "Not starting"
 * is news only from a node that said it was: one that never sets the flag
 * (builtin mode, an older agent) is judged by its gossip tag alone. */
static void wst_note(ea_rdzv *r, const ea_node_id *id, bool on) {
  int k = find_wst(r, id);
  if (k < 0 && !on) return;
  if (k < 0) {
    if (r->nwst == r->capwst) {
      size_t cap = r->capwst ? 2 * r->capwst : 8;
      wstart *p = realloc(r->wst, cap * sizeof *p);
      if (!p) return; /* the gossip tag still tells, later */
      r->wst = p;
      r->capwst = cap;
    }
    k = (int)r->nwst++;
    r->wst[k].id = *id;
  }
  r->wst[k].starting = on;
  r->wst[k].until = r->now + EA_RDZV_STARTING_TTL_MS;
}

/* Whether a worker of m has not said hello since it (re)started: its newest
 * REPORT says, while fresh; else its gossip tag. */
static bool starting(const ea_rdzv *r, const ea_member *m) {
  int k = find_wst(r, &m->id);
  if (k >= 0 && r->now < r->wst[k].until) return r->wst[k].starting;
  return ea_rdzv_tags_have(m->meta.tags, EA_RDZV_TAG_STARTING);
}

static bool unfit(const ea_member *m) {
  return ea_rdzv_tags_have(m->meta.tags, EA_RDZV_TAG_UNFIT);
}

/* A member of the formed generation left out of the next one until its
 * restarted worker says hello (unless that is waived: waive_holds). */
static bool starting_out(const ea_rdzv *r, const ea_node_id *id) {
  const ea_member *v = view_find(r, id);
  return v && !r->starting_waived && starting(r, v);
}

uint64_t ea_rdzv_churn_delay_ms(uint32_t streak, uint64_t cap_ms, uint64_t r64) {
  if (streak < 2 || cap_ms == 0) return 0;
  uint64_t d = EA_RDZV_CHURN_BASE_MS;
  for (uint32_t i = 2; i < streak && d < cap_ms; i++) d *= 2;
  if (d > cap_ms) d = cap_ms;
  return d / 2 + r64 % (d - d / 2); /* in [d/2, d) */
}

/* The formed generation broke by a worker failure: note when, and whether
 * soon after its commit (a restart of it extends the churn streak). */
static void churn_note(ea_rdzv *r) {
  r->broken_at = r->now;
  r->short_lived = r->formed_at && r->now - r->formed_at <= EA_RDZV_CHURN_WINDOW_MS;
  r->churn_jit = rng_next(r);
}

/* The streak a restart of the broken formed generation would make, and
 * when it may start (no sooner than its delay after the break). */
static uint32_t churn_next(const ea_rdzv *r) {
  return r->short_lived ? r->churn + 1 : 1;
}

static uint64_t churn_until(const ea_rdzv *r) {
  return r->broken_at +
         ea_rdzv_churn_delay_ms(churn_next(r), r->cfg.rendezvous_timeout_ms, r->churn_jit);
}

/* Give the job up: nothing more is formed; the agent tells everyone. */
static void job_failed(ea_rdzv *r, uint8_t why, const char *text) {
  if (r->job_fail) return;
  r->job_fail = why;
  snprintf(r->job_why, sizeof r->job_why, "%s", text);
}

/* Every REPORT is answered with what we know formed last: it stops the
 * sender's introductions, and a member that lost its state (restarted)
 * learns it belongs to a generation it does not run, and keeps saying so
 * until we re-form. */
static void ctrl_report(ea_rdzv *r, const ea_rdzv_msg *m) {
  ctrl_report_do(r, m);
  if (r->el.have && id_eq(&r->el.controller, &r->self)) send_state(r, &m->src);
}

/* The flags that say a member is doing something (not idle). */
#define F_BUSY (EA_RDZV_F_RUNNING | EA_RDZV_F_PREPARING | EA_RDZV_F_FAILED | EA_RDZV_F_DRAINING)

static void ctrl_report_do(ea_rdzv *r, const ea_rdzv_msg *m) {
  if (m->flags & EA_RDZV_F_DRAINING) drain_set_add(r, &m->src);
  wst_note(r, &m->src, m->flags & EA_RDZV_F_STARTING);
  /* It runs (or ran, until a worker failed) a committed generation newer
   * than the last we know: one we never heard of (formed by a controller
   * on the other side of a healed partition, possibly with our very term).
   * Learn it before deciding anything. */
  if ((m->flags & (EA_RDZV_F_RUNNING | EA_RDZV_F_FAILED)) && !(m->flags & EA_RDZV_F_PREPARING) &&
      ea_rdzv_gen_cmp(&m->gen, &r->formed) > 0 && ea_rdzv_gen_cmp(&m->gen, &r->hint) > 0) {
    r->hint = m->gen;
    r->hint_from = m->src;
    r->hint_tries = 0;
  }
  /* Idle and talking to us: if it sits out a failure, it is back (a
   * restarted agent introduces itself this way). */
  if (!(m->flags & F_BUSY)) lift(r, find_excl(r, &m->src));
  /* Idle, and the last generation it accepted is the formed one it is a
   * member of: it no longer runs it, so it restarted (its persisted number
   * came back) or lost its quorum.  A member paused by an abandoned
   * formation accepted that newer one instead, and one still preparing or
   * running says so in its flags. */
  if (!(m->flags & F_BUSY) && r->formed.term && gen_eq(&m->accepted, &r->formed) &&
      find_id(r->formed_ids, r->nformed, &m->src) >= 0)
    flap_fail(r, &m->src, "restarted");
  if (r->f.phase) {
    /* A chosen member whose worker restarts: nobody's fault, start over
     * without it (unless waived: then its READY follows its hello). */
    if (find_id(r->f.ids, r->f.n, &m->src) >= 0 && starting_out(r, &m->src))
      formation_drained(r);
    else if ((m->flags & EA_RDZV_F_FAILED) && gen_eq(&m->gen, &r->f.gen) &&
             find_id(r->f.ids, r->f.n, &m->src) >= 0)
      formation_failed(r, &m->src, 1, EXCL_BASE_MS);
    return; /* draining draft members are caught by ctrl_eval */
  }
  if (r->formed.term == 0) return;
  char who[EA_NAME_MAX];
  name_of(r, &m->src, who);
  if (find_id(r->formed_ids, r->nformed, &m->src) >= 0) {
    if (gen_eq(&r->stop_gen, &r->formed) && gen_eq(&m->gen, &r->formed) &&
        (m->flags & (EA_RDZV_F_RUNNING | EA_RDZV_F_FAILED)) &&
        (r->stop_all || (m->flags & EA_RDZV_F_DRAINING))) {
      /* We stopped this generation (stop_formed) and it still runs it: our
       * ABORT was lost.  Again; a drainer reports every REPORT_MS. */
      ea_rdzv_msg a = {.type = EA_RDZV_ABORT, .gen = r->formed};
      post(r, &m->src, &a);
    }
    if ((m->flags & EA_RDZV_F_FAILED) && gen_eq(&m->gen, &r->formed)) {
      r->formed_broken = true;
      fmt(r->broken_why, sizeof r->broken_why, "%s reported a failure", who);
      if (!r->broken_by_failure) {
        r->broken_by_failure = true;
        churn_note(r);
      }
    } else if (!((m->flags & EA_RDZV_F_RUNNING) && gen_eq(&m->gen, &r->formed)) &&
               !(m->flags & EA_RDZV_F_PREPARING) &&
               ea_rdzv_gen_cmp(&m->accepted, &r->formed) >= 0) {
      /* It accepted this generation (or later) but runs nothing: it
       * restarted, paused or timed out. */
      r->formed_broken = true;
      fmt(r->broken_why, sizeof r->broken_why, "%s is not running it", who);
    }
  } else if (ea_rdzv_gen_cmp(&m->gen, &r->formed) < 0) {
    ea_rdzv_msg rel = {.type = EA_RDZV_RELEASE, .gen = r->formed};
    post(r, &m->src, &rel);
  }
}

/* A newer formed generation is believed only from a member that may tell
 * us: the controller our view elects (it answers every REPORT with what
 * formed last) or the member our last QUERY went to — and only when most
 * of the members it names are known to our view.  Issue 11: without a key,
 * one forged 61-byte STATE naming an unknown member paused every node for
 * good ("no quorum: 0 of 1 members of generation 5 reachable"); a plan
 * never comes from anyone else, so neither does the generation a quorum is
 * judged by.  Most, not all: a newcomer's view never shows a member that
 * died before it started (SWIM passes on no stranger's death), and a
 * newcomer elected at once must still learn the generation that member
 * was in (the members it does not know count as unreachable when that
 * generation's quorum is judged). */
static bool state_credible(const ea_rdzv *r, const ea_rdzv_msg *m) {
  bool elected = r->el.have && id_eq(&m->src, &r->el.controller) && !id_eq(&m->src, &r->self);
  bool asked = r->asked_set && id_eq(&m->src, &r->asked);
  if (!(elected || asked) || !is_up(view_find(r, &m->src))) return false;
  uint32_t known = 0;
  for (uint32_t i = 0; i < m->plan.nnodes; i++) known += view_find(r, &m->plan.nodes[i].id) != NULL;
  return 2 * known > m->plan.nnodes;
}

static void ctrl_state(ea_rdzv *r, const ea_rdzv_msg *m) {
  /* Whatever the hint's holder says now is all it can teach us. */
  if (r->hint.term && id_eq(&m->src, &r->hint_from)) r->hint = (ea_rdzv_gen){0};
  if (m->gen.term == 0 || ea_rdzv_gen_cmp(&m->gen, &r->formed) <= 0) return;
  if (!state_credible(r, m)) {
    r->st.state_refused++;
    return;
  }
  ea_node_id *ids = malloc((m->plan.nnodes ? m->plan.nnodes : 1) * sizeof *ids);
  if (!ids) return;
  for (uint32_t i = 0; i < m->plan.nnodes; i++) ids[i] = m->plan.nodes[i].id;
  set_formed(r, &m->gen, ids, m->plan.nnodes);
  free(ids);
}

/* Know the last formed generation before judging quorum or rank order: a
 * newcomer, or an agent that restarted, learns it from a member that
 * advertises a newer one in its gossip metadata (meta.last_gen).  Returns
 * true while learning (the controller must not act yet). */
static bool learn(ea_rdzv *r) {
  char *why = r->ctrl_reason;
  const size_t cap = sizeof r->ctrl_reason;
  uint64_t adv = max_advertised_term(r);
  r->learning = false;
  /* A hint is asked about three times (the first QUERY and two retries,
   * one REPORT_MS apart); a holder that never answers is not waited for. */
  if (ea_rdzv_gen_cmp(&r->hint, &r->formed) > 0 && is_up(view_find(r, &r->hint_from)) &&
      (r->hint_tries < 3 || r->now < r->query_at)) {
    r->learning = true;
    if (r->now >= r->query_at) {
      ea_rdzv_msg q = {.type = EA_RDZV_QUERY};
      post(r, &r->hint_from, &q);
      r->asked = r->hint_from;
      r->asked_set = true;
      r->hint_tries++;
      r->query_at = r->now + REPORT_MS;
    }
    char nm[EA_NAME_MAX];
    name_of(r, &r->hint_from, nm);
    fmt(why, cap, "learning generation %" PRIu64 " from %s", r->hint.term, nm);
    return true;
  }
  if (adv <= r->formed.term) return false;
  /* Ask the holders in turn, so one that cannot answer does not stall us. */
  uint32_t nt = 0;
  for (size_t i = 0; i < r->nview; i++) {
    const ea_member *v = &r->view[i];
    if (v->state == EA_STATE_ALIVE && !id_eq(&v->id, &r->self) && v->meta.last_gen >> 16 == adv)
      nt++;
  }
  if (nt == 0) {
    if (r->cfg.quorum_none) return false; /* availability first: form without it */
    fmt(why, cap, "no quorum: no member of generation %" PRIu64 " is reachable", adv);
    return true;
  }
  const ea_member *t = NULL;
  uint32_t k = r->nqueries % nt;
  for (size_t i = 0; i < r->nview && !t; i++) {
    const ea_member *v = &r->view[i];
    if (v->state == EA_STATE_ALIVE && !id_eq(&v->id, &r->self) && v->meta.last_gen >> 16 == adv &&
        k-- == 0)
      t = v;
  }
  r->learning = true;
  if (r->now >= r->query_at) {
    ea_rdzv_msg q = {.type = EA_RDZV_QUERY};
    post(r, &t->id, &q);
    r->asked = t->id;
    r->asked_set = true;
    r->nqueries++;
    r->query_at = r->now + REPORT_MS;
  }
  fmt(why, cap, "learning generation %" PRIu64 " from %s", adv, t->meta.name);
  return true;
}

/* Alive non-members that gossip an older generation than the last formed
 * one still run it (or think they do): a partition side that formed on its
 * own under quorum: none, or a member that missed its RELEASE.  Tell them,
 * at most once per REPORT_MS; a RELEASE to one that already stopped is
 * harmless. */
static void release_strays(ea_rdzv *r) {
  if (r->formed.term == 0 || r->now < r->stray_at) return;
  uint64_t ours = ea_rdzv_gen_u64(&r->formed);
  bool sent = false;
  for (size_t i = 0; i < r->nview; i++) {
    const ea_member *v = &r->view[i];
    uint64_t lg = v->meta.last_gen;
    if (v->state != EA_STATE_ALIVE || id_eq(&v->id, &r->self) || lg == 0 || lg == ours ||
        lg >> 16 > r->formed.term || find_id(r->formed_ids, r->nformed, &v->id) >= 0)
      continue;
    ea_rdzv_msg rel = {.type = EA_RDZV_RELEASE, .gen = r->formed};
    post(r, &v->id, &rel);
    sent = true;
  }
  r->strays = sent; /* check again after REPORT_MS while there are any */
  if (sent) r->stray_at = r->now + REPORT_MS;
}

/* Names of the draft members that have not answered, for `status`. */
static void waiting_text(const ea_rdzv *r, char *out, size_t cap) {
  size_t off = 0;
  uint32_t shown = 0, missing = 0;
  for (uint32_t i = 0; i < r->f.n; i++) {
    if (r->f.ready[i]) continue;
    missing++;
    if (shown < 3) {
      char nm[EA_NAME_MAX];
      name_of(r, &r->f.ids[i], nm);
      int w = snprintf(out + off, cap - off, "%s%s", shown ? ", " : "", nm);
      if (w > 0 && (size_t)w < cap - off) off += (size_t)w;
      shown++;
    }
  }
  if (missing > shown) snprintf(out + off, cap - off, " +%u", missing - shown);
}

/* The formed generation is broken and no generation can re-form from it.
 *
 * Below min_nodes (everyone): members were lost for good (drained, left,
 * died) and too few nodes remain.  The generation cannot go on, so every
 * member still up gets an ABORT of it (agent_abort): a drainer drains at
 * once, the others pause, their workers keeping their live state for the
 * generation that forms when enough nodes are back.  Without this a
 * drainer would wait for its own drain deadline (the rendezvous timeout),
 * and when every node drains at once (SIGTERM to the whole job) nothing
 * would ever let them go; the others would sit in a broken communicator
 * until it timed out.
 *
 * No quorum for a draft (rule 2: voters are dead or sitting out besides
 * the drainers): only the drainers are let go.  They are not voters, so
 * this changes nothing for the quorum, and the others' own failures say
 * what happened to them.
 *
 * Sent once per generation (and again when it upgrades to everyone); a
 * member that still runs it says so in a REPORT (a drainer every
 * REPORT_MS), which ctrl_report_do answers with the ABORT again. */
static void stop_formed(ea_rdzv *r, bool everyone) {
  if (gen_eq(&r->stop_gen, &r->formed) && (r->stop_all || !everyone)) return;
  bool any = false;
  for (uint32_t i = 0; i < r->nformed && !any; i++) {
    const ea_node_id *id = &r->formed_ids[i];
    any = is_up(view_find(r, id)) && (everyone || in_drain_set(r, id));
  }
  if (!any) return;
  r->stop_gen = r->formed;
  r->stop_all = everyone;
  lc_free(r); /* no more copies of a COMMIT for a stopped generation */
  for (uint32_t i = 0; i < r->nformed; i++) {
    const ea_node_id *id = &r->formed_ids[i];
    if (!is_up(view_find(r, id)) || !(everyone || in_drain_set(r, id))) continue;
    ea_rdzv_msg a = {.type = EA_RDZV_ABORT, .gen = r->formed};
    post(r, id, &a);
  }
}

/* A hold-out never costs the job its min_nodes or its quorum: when the
 * nodes that could train without the held-out ones (up, eligible, not
 * draining or sitting out a failure; a joiner alive with its workers up)
 * are fewer than min_nodes, or the members among them no majority of the
 * last generation, every hold is waived for now and the held-out nodes are
 * kept or taken like the others.  Otherwise a straggler evicted from a job that
 * needs every node would stop it, and after the rendezvous timeout fail it
 * (min_nodes not reached) while the node was alive and willing. */
static void waive_holds(ea_rdzv *r) {
  bool any = false, anyst = false;
  uint32_t avail = 0, surv = 0, avail_st = 0, surv_st = 0; /* _st: the starting ones out too */
  for (size_t i = 0; i < r->nview; i++) {
    const ea_member *v = &r->view[i];
    if (!is_up(v) || observer(v) || in_drain_set(r, &v->id) || excluded(r, &v->id)) continue;
    if (held(r, &v->id)) {
      any = true;
      continue;
    }
    bool member = find_id(r->formed_ids, r->nformed, &v->id) >= 0;
    bool st = starting(r, v);
    surv += member;
    if (!member && (v->state != EA_STATE_ALIVE || st)) continue;
    avail++;
    if (member && st) {
      anyst = true;
      continue;
    }
    surv_st += member;
    avail_st++;
  }
  /* ... nor its quorum: a generation without them must still hold a
   * majority of the last one's voters (ctrl_step's rule). */
  uint32_t voters = 0;
  for (uint32_t i = 0; i < r->nformed; i++) {
    const ea_member *v = view_find(r, &r->formed_ids[i]);
    if ((v && v->state == EA_STATE_LEFT) || in_drain_set(r, &r->formed_ids[i])) continue;
    voters++;
  }
  bool no_quorum = !r->cfg.quorum_none && voters > 0 && 2 * surv <= voters;
  r->holds_waived = any && (avail < r->cfg.min_nodes || no_quorum);
  /* The same rule for members whose worker restarts: without them the job
   * must still have min_nodes and a quorum, or they are waited for. */
  bool no_quorum_st = !r->cfg.quorum_none && voters > 0 && 2 * surv_st <= voters;
  r->starting_waived = anyst && (avail_st < r->cfg.min_nodes || no_quorum_st);
}

/* The last moment (ea_rdzv.h): the drainers of the formed generation would
 * leave fewer than min_nodes and it is about to be stopped.  True while it
 * is held together for one last checkpoint (why says so); false when it
 * may be stopped: the feature is off, the generation cannot stage (only:
 * false), or its checkpoint is done or out of time. */
static bool last_moment(ea_rdzv *r, bool only, char *why, size_t cap) {
  if (!r->cfg.last_ckpt_ms) return false;
  if (!gen_eq(&r->lm_gen, &r->formed)) {
    if (!only) return false;
    r->lm_gen = r->formed;
    r->lm_since = r->now;
    r->lm = EA_RDZV_LASTCK_WAITING;
    r->lm_spares = false;
  }
  if (r->lm == EA_RDZV_LASTCK_WAITING && r->now >= r->lm_since + r->cfg.last_ckpt_ms)
    r->lm = EA_RDZV_LASTCK_TIMED_OUT;
  if (r->lm != EA_RDZV_LASTCK_WAITING) return false;
  size_t len = strlen(why);
  fmt(why + len, cap - len, "; holding it %" PRIu64 " ms more for a checkpoint before they leave",
      r->lm_since + r->cfg.last_ckpt_ms - r->now);
  return true;
}

/* Every member of the formed generation drains and spares would form the
 * next one alone: none of them holds the state, so it would resume the
 * last periodic checkpoint.  The last moment, as for too few nodes: the
 * drainers train on for one checkpoint, which the spares then resume (a
 * one-node job drained to its spare lost every step since the periodic
 * checkpoint: 100 of them on the GPU, scripts/gpu-check.sh).  True while
 * held (why says so). */
static bool spares_alone(ea_rdzv *r, const char *bwhy, char *why, size_t cap) {
  char held[sizeof r->ctrl_reason];
  fmt(held, sizeof held,
      "every member of generation %" PRIu64 " drains and the next would hold none of them (%s)",
      r->formed.term, bwhy);
  if (!last_moment(r, true, held, sizeof held)) return false;
  r->lm_spares = true;
  fmt(why, cap, "%s", held);
  return true;
}

/* One pass of the controller.  Returns true when it changed something that
 * warrants another pass (a formation ended, so a new one may start). */
static bool ctrl_step(ea_rdzv *r) {
  char *why = r->ctrl_reason;
  const size_t cap = sizeof r->ctrl_reason;
  bool me = r->el.have && id_eq(&r->el.controller, &r->self);
  if (!me) {
    if (r->f.phase) abandon(r);
    r->join_since = r->cold_since = 0;
    r->minn_since = 0;
    why[0] = 0;
    return false;
  }
  if (r->job_fail) {
    fmt(why, cap, "job failed: %s", r->job_why);
    return false;
  }
  waive_holds(r);
  if (!r->f.phase && r->now >= r->retry_at && learn(r)) return false;
  if (quorum_lost(r)) {
    if (r->f.phase) abandon(r);
    quorum_text(r, why, cap);
    return false;
  }
  if (r->f.phase) {
    /* A chosen member died, left or started draining: start over. */
    for (uint32_t i = 0; i < r->f.n; i++) {
      const ea_member *v = view_find(r, &r->f.ids[i]);
      if (in_drain_set(r, &r->f.ids[i]) || kept_out(r, &r->f.ids[i]) ||
          starting_out(r, &r->f.ids[i])) {
        formation_drained(r); /* start over without it, nobody to blame */
        return true;
      }
      if (!is_up(v)) {
        ea_node_id bad = r->f.ids[i];
        formation_failed(r, &bad, 1, EXCL_BASE_MS);
        return true;
      }
    }
  }
  if (r->f.phase == F_PERSIST) {
    if (!durable_at_least(r, &r->f.gen)) {
      fmt(why, cap, "persisting generation %" PRIu64, r->f.gen.term);
      return false;
    }
    send_prepares(r);
    return r->f.phase != F_PREPARE;
  }
  if (r->f.phase == F_PREPARE) {
    if (r->now >= r->f.deadline) {
      ea_node_id *bad = malloc(r->f.n * sizeof *bad);
      uint32_t nbad = 0;
      for (uint32_t i = 0; bad && i < r->f.n; i++)
        if (!r->f.ready[i]) bad[nbad++] = r->f.ids[i];
      /* They never answered, re-sends included: they cost a whole timeout
       * and sit out as long (see EXCL_BASE_MS), unless they show they are
       * back. */
      formation_failed(r, bad, nbad, r->cfg.rendezvous_timeout_ms);
      free(bad);
      return true;
    }
    if (r->now >= r->f.resend_at) resend_prepares(r);
    char w[96];
    waiting_text(r, w, sizeof w);
    fmt(why, cap, "waiting for READY from %s (gen %" PRIu64 ")", w, r->f.gen.term);
    return false;
  }
  if (r->now < r->retry_at) {
    fmt(why, cap, "backing off %" PRIu64 " ms after a failed formation (%u in a row)",
        r->retry_at - r->now, r->nfail);
    return false;
  }

  release_strays(r);
  uint32_t maxn = r->cfg.max_nodes, minn = r->cfg.min_nodes;
  ea_node_id *draft = malloc((r->nformed + r->nview + 1) * sizeof *draft);
  if (!draft) return false;
  uint32_t nd = 0, nsurv = 0, njoin = 0;
  bool broken = r->formed_broken;
  /* lost: broken for good, not only by members sitting out a failure (an
   * excluded member may still be running the generation with the rest). */
  bool lost = r->formed_broken;
  /* Only drainers are out, every one still up: the generation can still
   * stage its state (the last moment, below). */
  bool only_drains = !r->formed_broken;
  char bwhy[96];
  snprintf(bwhy, sizeof bwhy, "%s", r->broken_why);
  /* Survivors keep their relative order: ranks move as little as possible. */
  for (uint32_t i = 0; i < r->nformed; i++) {
    const ea_node_id *id = &r->formed_ids[i];
    const ea_member *v = view_find(r, id);
    char nm[EA_NAME_MAX];
    if (!is_up(v) || (v && observer(v)) || in_drain_set(r, id) || excluded(r, id) ||
        kept_out(r, id) || starting_out(r, id)) {
      if (!broken) {
        name_of(r, id, nm);
        snprintf(bwhy, sizeof bwhy, "%s is %s", nm,
                 !v                    ? "gone"
                 : !is_up(v)           ? (v->state == EA_STATE_LEFT ? "left" : "dead")
                 : in_drain_set(r, id) ? "draining"
                 : kept_out(r, id)     ? "held out"
                 : excluded(r, id)     ? "excluded"
                                       : "restarting its workers");
      }
      broken = true;
      if (!is_up(v) || observer(v) || in_drain_set(r, id)) lost = true;
      if (!is_up(v) || observer(v) || !in_drain_set(r, id) || excluded(r, id) || kept_out(r, id) ||
          starting_out(r, id))
        only_drains = false;
      continue;
    }
    draft[nd++] = *id;
    nsurv++;
  }
  if (r->formed.term && self_in_formed(r) && !r->prep &&
      !(r->running && gen_eq(&r->run.gen, &r->formed))) {
    if (!broken) snprintf(bwhy, sizeof bwhy, "this node is not running it");
    broken = lost = true;
    only_drains = false;
  }
  /* Joiners, in id order (the view is sorted): alive, eligible, not
   * draining, not sitting out a failure, workers up (EA_RDZV_TAG_STARTING). */
  uint32_t nstarting = 0;
  for (size_t i = 0; i < r->nview; i++) {
    const ea_member *v = &r->view[i];
    if (v->state != EA_STATE_ALIVE || observer(v) || in_drain_set(r, &v->id) ||
        excluded(r, &v->id) || kept_out(r, &v->id) ||
        find_id(r->formed_ids, r->nformed, &v->id) >= 0)
      continue;
    if (starting(r, v)) {
      nstarting++;
      continue;
    }
    /* its own health check failed (EA_RDZV_TAG_UNFIT): not swapped in for a
     * lost member; the first generation takes everyone (nothing to keep) */
    if (unfit(v) && r->formed.term) continue;
    draft[nd++] = v->id;
    njoin++;
  }
  uint32_t nall = nd;
  if (nd > maxn) nd = maxn;
  if (!only_drains || !broken) r->drain_since = 0;
  bool changed = false;
  /* A streak of short-lived generations is over once one lives past the
   * churn window. */
  if (r->churn && !r->formed_broken && r->formed_at &&
      r->now - r->formed_at > EA_RDZV_CHURN_WINDOW_MS)
    r->churn = 0;
  /* The same nodes again after a worker failed: a restart (counted when it
   * commits).  A node lost (or excluded) makes it a membership change,
   * which is neither counted nor damped. */
  bool restart = r->formed_broken && r->broken_by_failure;
  bool minn_wait = false;
  uint32_t minn_have = 0;
  if (r->formed.term == 0) {
    if (nall < minn) {
      if (nstarting)
        fmt(why, cap, "waiting for min_nodes: %u of %u alive with their workers up (%u starting)",
            nall, minn, nstarting);
      else
        fmt(why, cap, "waiting for min_nodes: %u of %u alive", nall, minn);
      r->cold_since = 0;
      minn_wait = true;
      minn_have = nall;
    } else {
      if (r->cold_since == 0) r->cold_since = r->now;
      uint64_t due = r->cold_since + r->cfg.scale_up_delay_ms;
      if (nall < maxn && r->now < due) {
        fmt(why, cap, "waiting %" PRIu64 " ms for more nodes (%u alive, max_nodes %u)",
            due - r->now, nall, maxn);
      } else {
        start_formation(r, draft, nd, false);
        changed = true;
      }
    }
  } else if (broken) {
    /* The new generation must itself hold a majority of the old one's
     * voters (members that did not leave and are not draining): then any
     * two generations formed from it share a member, who can run only one
     * of them.  Seeing a majority alive is not enough when some of them sit
     * out a failure (excluded) and so are not in the draft. */
    uint32_t voters = 0;
    for (uint32_t i = 0; i < r->nformed; i++) {
      const ea_member *v = view_find(r, &r->formed_ids[i]);
      if ((v && v->state == EA_STATE_LEFT) || in_drain_set(r, &r->formed_ids[i])) continue;
      voters++;
    }
    if (!r->cfg.quorum_none && voters > 0 && 2 * nsurv <= voters) {
      fmt(why, cap,
          "no quorum: a new generation would hold %u of %u members of generation %" PRIu64 " (%s)",
          nsurv, voters, r->formed.term, bwhy);
      stop_formed(r, false);
    } else if (nd < minn) {
      fmt(why, cap, "waiting for min_nodes: %u of %u alive (generation %" PRIu64 ": %s)", nd, minn,
          r->formed.term, bwhy);
      if (lost && !last_moment(r, only_drains, why, cap)) stop_formed(r, true);
      minn_wait = true;
      minn_have = nd;
    } else if (only_drains && r->cfg.last_ckpt_ms &&
               r->now < (r->drain_since ? r->drain_since : (r->drain_since = r->now)) +
                            EA_RDZV_DRAIN_BATCH_MS) {
      /* More notices may be on their way (see EA_RDZV_DRAIN_BATCH_MS): a
       * re-formation now would let this drainer go before the last moment
       * of a mass preemption could keep it. */
      fmt(why, cap, "batching drains (%" PRIu64 " ms left; generation %" PRIu64 ": %s)",
          r->drain_since + EA_RDZV_DRAIN_BATCH_MS - r->now, r->formed.term, bwhy);
    } else if (only_drains && nsurv == 0 && spares_alone(r, bwhy, why, cap)) {
      /* held for the last checkpoint; spares_alone said so */
    } else if ((restart = restart && nsurv == r->nformed) && r->now < churn_until(r)) {
      fmt(why, cap,
          "backing off %" PRIu64
          " ms before restart %u in a row of a generation that failed "
          "within %u s of its commit (%s)",
          churn_until(r) - r->now, churn_next(r), EA_RDZV_CHURN_WINDOW_MS / 1000, r->broken_why);
    } else {
      start_formation(r, draft, nd, false);
      r->f.restart = restart && r->f.phase;
      r->f.churn_next = churn_next(r);
      changed = true;
    }
  } else if (njoin > 0 && nsurv < maxn) {
    /* The window runs from the first joiner seen, ready or still starting
     * (below), so a joiner's start overlaps it; joiners still starting when
     * it closes are waited for one window more, so that nodes started
     * together still join together. */
    if (r->join_since == 0) r->join_since = r->now;
    uint64_t due = r->join_since + r->cfg.scale_up_delay_ms;
    if (nstarting && r->now >= due) due += r->cfg.scale_up_delay_ms;
    if (nd < minn) {
      /* Survivors and joiners together still below min_nodes: a formed
       * generation learnt from a STATE that leaves out the members that left
       * (a mass preemption) is not broken, yet holds too few to train. */
      fmt(why, cap, "waiting for min_nodes: %u of %u alive (generation %" PRIu64 ")", nd, minn,
          r->formed.term);
      minn_wait = true;
      minn_have = nd;
    } else if (r->now < due) {
      fmt(why, cap, "batching %u joiner%s (%" PRIu64 " ms left%s)", njoin, njoin == 1 ? "" : "s",
          due - r->now, nstarting ? ", waiting for one starting" : "");
    } else {
      start_formation(r, draft, nd, true);
      changed = true;
    }
  } else {
    /* Nothing to do: the generation runs with everyone it can hold.  A
     * streak of failed formations is over too (a join that failed leaves
     * the old generation running, and no commit resets the count), so the
     * next failure is retried at once rather than after a backoff grown by
     * a member that sits out its own.  A joiner still starting opens the
     * batching window already (above). */
    if (!(nstarting && nsurv < maxn))
      r->join_since = 0;
    else if (r->join_since == 0)
      r->join_since = r->now;
    r->nfail = 0;
    if (njoin)
      fmt(why, cap, "generation %" PRIu64 " running with %u nodes; %u spare at max_nodes",
          r->formed.term, nsurv, njoin);
    else if (nstarting)
      fmt(why, cap,
          "generation %" PRIu64 " running with %u nodes; %u joiner%s starting its workers",
          r->formed.term, nsurv, nstarting, nstarting == 1 ? "" : "s");
    else
      fmt(why, cap, "generation %" PRIu64 " running with %u nodes", r->formed.term, nsurv);
    /* ...and who is kept out of it, so `status` says why a node is idle. */
    uint32_t nheld = 0;
    const flapper *first = NULL;
    for (size_t i = 0; i < r->nflap; i++)
      if (r->flap[i].until > r->now && is_up(view_find(r, &r->flap[i].id))) {
        if (!nheld) first = &r->flap[i];
        nheld++;
      }
    if (nheld) {
      char nm[EA_NAME_MAX];
      name_of(r, &first->id, nm);
      size_t len = strlen(why);
      fmt(why + len, cap - len, "; %u held out (%s: %s for %" PRIu64 " s%s)%s", nheld, nm,
          ea_rdzv_hold_why_str(first->why), (first->until - r->now + 999) / 1000,
          nheld > 1 ? ", …" : "", r->holds_waived ? ", waived: too few nodes without" : "");
    }
  }
  free(draft);
  /* min_nodes out of reach for a whole rendezvous timeout fails the job
   * (torchrun's join timeout), unless this node is on its way out. */
  if (!minn_wait || r->draining) {
    r->minn_since = 0;
  } else if (r->cfg.min_nodes_timeout_ms) {
    if (!r->minn_since) r->minn_since = r->now;
    if (r->now - r->minn_since >= r->cfg.min_nodes_timeout_ms) {
      char jw[EA_RDZV_REASON_MAX];
      fmt(jw, sizeof jw,
          "min_nodes not reached: %u of %u nodes for %u s (runtime.rendezvous_timeout_seconds)",
          minn_have, minn, r->cfg.min_nodes_timeout_ms / 1000);
      job_failed(r, EA_RDZV_JOB_MIN_NODES, jw);
    }
  }
  return changed;
}

/* ---- dispatch and settle ----------------------------------------------- */

static void dispatch(ea_rdzv *r, const ea_rdzv_msg *m) {
  if (r->el.have && id_eq(&m->src, &r->el.controller)) r->announce = false; /* it heard us */
  switch (m->type) {
    case EA_RDZV_PREPARE:
      agent_prepare(r, m);
      break;
    case EA_RDZV_COMMIT:
      agent_commit(r, m);
      break;
    case EA_RDZV_ABORT:
      agent_abort(r, m);
      break;
    case EA_RDZV_RELEASE:
      agent_release(r, m);
      break;
    case EA_RDZV_DRAIN:
      if (!m->name[0] || strcmp(m->name, r->self_name) == 0) start_draining(r);
      break;
    case EA_RDZV_QUERY:
      agent_query(r, m);
      break;
    case EA_RDZV_READY:
      ctrl_ready(r, m);
      break;
    case EA_RDZV_NACK:
      ctrl_nack(r, m);
      break;
    case EA_RDZV_REPORT:
      ctrl_report(r, m);
      break;
    case EA_RDZV_BLAME:
      ctrl_blame(r, m);
      break;
    case EA_RDZV_STATE:
      ctrl_state(r, m);
      break;
    default:
      break;
  }
}

static void elect(ea_rdzv *r) {
  if (!r->el_dirty) return;
  r->el_dirty = false;
  ea_election_gen g = {
      .members = r->formed_ids, .nmembers = r->nformed, .quorum_none = r->cfg.quorum_none};
  ea_elect(r->view, r->nview, &g, &r->el);
}

static void agent_reason(const ea_rdzv *r, char *out, size_t cap) {
  char c[EA_NAME_MAX];
  if (r->drained) {
    fmt(out, cap, "drained: %s", drained_why(r));
  } else if (r->prep) {
    name_of(r, &r->prep_gen.ctrl, c);
    uint32_t got = 0;
    for (uint32_t i = 0; i < r->cfg.workers_per_node; i++) got += r->wready[i];
    if (!r->prep_ordered && !durable_at_least(r, &r->prep_gen))
      fmt(out, cap, "generation %" PRIu64 " prepared: persisting", r->prep_gen.term);
    else if (!r->prep_ordered)
      fmt(out, cap, "generation %" PRIu64 " prepared: waiting for a step boundary",
          r->prep_gen.term);
    else if (!all_ready(r))
      fmt(out, cap, "generation %" PRIu64 " prepared: %u of %u workers ready", r->prep_gen.term,
          got, r->cfg.workers_per_node);
    else if (!r->ready_sent)
      fmt(out, cap, "generation %" PRIu64 " prepared: sending READY", r->prep_gen.term);
    else
      fmt(out, cap, "generation %" PRIu64 " prepared: waiting for COMMIT from %s", r->prep_gen.term,
          c);
  } else if (r->running) {
    if (r->fail_gen.term && gen_eq(&r->fail_gen, &r->run.gen))
      fmt(out, cap, "generation %" PRIu64 " failed: a worker's communicator broke",
          r->run.gen.term);
    else if (r->draining)
      fmt(out, cap, "draining: waiting for the group to re-form without this node");
    else
      fmt(out, cap, "running generation %" PRIu64 " as ranks %u-%u of %u", r->run.gen.term,
          r->prep_base, r->prep_base + r->cfg.workers_per_node - 1, r->run.world);
  } else if (quorum_lost(r)) {
    char q[EA_RDZV_REASON_MAX];
    quorum_text(r, q, sizeof q);
    fmt(out, cap, "paused: %s", q);
  } else if (r->paused) {
    fmt(out, cap, "paused: %s", r->pause_why);
  } else if (r->formed.term && r->nformed >= r->cfg.max_nodes && !self_in_formed(r)) {
    /* ea_rdzv_spares' test, for this node: is it one, and which in line? */
    size_t n = ea_rdzv_spares(r, NULL, 0), me = n;
    ea_rdzv_spare *sp = n ? malloc(n * sizeof *sp) : NULL;
    if (sp) n = ea_rdzv_spares(r, sp, n);
    for (size_t i = 0; sp && i < n; i++)
      if (id_eq(&sp[i].id, &r->self)) me = i;
    uint8_t st = me < n ? sp[me].state : 0;
    free(sp);
    if (me < n && st == EA_RDZV_SPARE_READY)
      fmt(out, cap,
          "spare: generation %" PRIu64
          " runs at max_nodes %u; taken in when a member is lost "
          "(%zu of %zu in line)",
          r->formed.term, r->cfg.max_nodes, me + 1, n);
    else if (me < n)
      fmt(out, cap, "spare (%s): generation %" PRIu64 " runs at max_nodes %u",
          ea_rdzv_spare_state_str(st), r->formed.term, r->cfg.max_nodes);
    else
      fmt(out, cap, "idle: in no generation");
  } else {
    fmt(out, cap, "idle: in no generation");
  }
}

static void settle(ea_rdzv *r) {
  for (int round = 0; round < 64; round++) {
    while (r->nselfq) {
      ea_rdzv_msg *m = r->selfq[0];
      memmove(r->selfq, r->selfq + 1, (r->nselfq - 1) * sizeof r->selfq[0]);
      r->nselfq--;
      dispatch(r, m);
      ea_rdzv_msg_release(m);
      free(m);
    }
    elect(r);
    prune(r);
    agent_eval(r);
    elect(r);
    for (int i = 0; i < 8 && ctrl_step(r); i++) elect(r);
    pump_persist(r);
    if (!r->nselfq) break;
  }
  char now[EA_RDZV_REASON_MAX];
  bool me = r->el.have && id_eq(&r->el.controller, &r->self);
  if (me && r->ctrl_reason[0])
    snprintf(now, sizeof now, "%s", r->ctrl_reason);
  else
    agent_reason(r, now, sizeof now);
  if (strcmp(now, r->reason) != 0) {
    memcpy(r->reason, now, sizeof now);
    if (r->io.reason) r->io.reason(r->io.ctx, r->reason);
  }
}

/* ---- public entry points ----------------------------------------------- */

void ea_rdzv_config_default(ea_rdzv_config *c) {
  c->min_nodes = 1;
  c->max_nodes = 64;
  c->workers_per_node = 1;
  c->scale_up_delay_ms = 2000;
  c->rendezvous_timeout_ms = 30000;
  c->quorum_none = false;
  c->restart_mode = false;
  c->max_restarts = UINT32_MAX;
  c->min_nodes_timeout_ms = 0;
  c->flap_threshold = 0; /* off: the simulator's tests restart nodes at will */
  c->flap_window_ms = 300000;
  c->flap_cooldown_ms = 60000;
  c->last_ckpt_ms = 0; /* off: the simulator's drains are let go at once */
}

ea_rdzv *ea_rdzv_new(const ea_rdzv_config *cfg, const ea_node_id *self,
                     const ea_rdzv_gen *persisted, const ea_rdzv_io *io, uint64_t seed,
                     uint64_t now_ms) {
  if (!cfg || !self || !io || !io->send || !io->order || !io->persist) return NULL;
  if (cfg->workers_per_node == 0 || cfg->workers_per_node > EA_RDZV_MAX_WPN ||
      cfg->min_nodes == 0 || cfg->max_nodes < cfg->min_nodes ||
      cfg->max_nodes > EA_RDZV_MAX_NODES ||
      (uint64_t)cfg->max_nodes * cfg->workers_per_node > EA_RDZV_MAX_WORLD ||
      cfg->rendezvous_timeout_ms == 0 || cfg->flap_threshold >= FLAP_MAX ||
      (cfg->flap_threshold && (cfg->flap_window_ms == 0 || cfg->flap_cooldown_ms == 0)))
    return NULL;
  ea_rdzv *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->cfg = *cfg;
  r->self = *self;
  r->io = *io;
  ea_rng_seed(&r->rng, seed, EA_RNG_RDZV, 0);
  r->now = now_ms;
  if (persisted && persisted->term) {
    r->durable = r->accepted = r->seen = r->want = *persisted;
  }
  r->el_dirty = true;
  r->announce = true;
  return r;
}

void ea_rdzv_free(ea_rdzv *r) {
  if (!r) return;
  for (size_t i = 0; i < r->nselfq; i++) {
    ea_rdzv_msg_release(r->selfq[i]);
    free(r->selfq[i]);
  }
  f_free(r);
  lc_free(r);
  plan_free(&r->run);
  free(r->formed_ids);
  free(r->view);
  free(r->drain_set);
  free(r->wst);
  free(r->excl);
  free(r->flap);
  free(r->blame);
  free(r);
}

/* Every entry point moves the clock with at() and ends in settle(), on
 * every path: timers are compared with r->now, so a clock that moved
 * without a settle would let a due timer slip past unseen. */
static void at(ea_rdzv *r, uint64_t now) {
  if (now > r->now) r->now = now;
}

void ea_rdzv_view(ea_rdzv *r, uint64_t now_ms, const ea_member *members, size_t n) {
  at(r, now_ms);
  if (n > r->capview) {
    ea_member *p = realloc(r->view, n * sizeof *p);
    if (!p) { /* keep the old view; the next change retries */
      settle(r);
      return;
    }
    r->view = p;
    r->capview = n;
  }
  flap_prev *fp = flap_snapshot(r); /* the formed members as the old view had them */
  uint32_t nfp = r->nformed;
  if (n) memcpy(r->view, members, n * sizeof *members);
  r->nview = n;
  r->viewed = true;
  qsort(r->view, n, sizeof *r->view, cmp_member);
  flap_compare(r, fp, nfp);
  const ea_member *me = view_find(r, &r->self);
  if (me) snprintf(r->self_name, sizeof r->self_name, "%s", me->meta.name);
  r->el_dirty = true;
  settle(r);
}

void ea_rdzv_recv(ea_rdzv *r, uint64_t now_ms, const ea_rdzv_msg *m) {
  at(r, now_ms);
  if (!id_eq(&m->src, &r->self)) /* ours never come back by the network */
    dispatch(r, m);
  settle(r);
}

void ea_rdzv_persisted(ea_rdzv *r, uint64_t now_ms, const ea_rdzv_gen *g, int rc) {
  at(r, now_ms);
  if (r->persist_busy && gen_eq(g, &r->persisting)) { /* else: not ours */
    r->persist_busy = false;
    if (rc == 0) {
      gen_raise(&r->durable, g);
    } else {
      r->st.persist_errors++;
      r->persist_retry_at = r->now + RETRY_BASE_MS;
    }
  }
  settle(r);
}

int ea_rdzv_worker_ready(ea_rdzv *r, uint64_t now_ms, uint32_t local, const ea_rdzv_gen *gen,
                         const ea_addr *listen, uint64_t step, uint64_t state_gen,
                         const uint8_t *nccl_id) {
  if (local >= r->cfg.workers_per_node) return -EINVAL;
  if (!r->prep || !r->prep_ordered || !gen_eq(gen, &r->prep_gen)) return -ESTALE;
  at(r, now_ms);
  r->winfo[local].listen = *listen;
  r->winfo[local].step = step;
  r->winfo[local].state_gen = step ? state_gen : 0;
  r->wready[local] = true;
  if (step > r->last_step) r->last_step = step;
  if (nccl_id && local == 0) {
    r->whas_nccl = true;
    memcpy(r->wnccl, nccl_id, sizeof r->wnccl);
  }
  settle(r);
  return 0;
}

void ea_rdzv_set_latest_ckpt(ea_rdzv *r, uint64_t gen64) {
  r->latest_gen = gen64;
}

int ea_rdzv_reform(ea_rdzv *r, uint64_t now_ms, const char *why) {
  at(r, now_ms);
  if (!(r->el.have && id_eq(&r->el.controller, &r->self)) || r->formed.term == 0) return -EAGAIN;
  /* As after a membership change: nobody failed, nothing is damped. */
  r->formed_broken = true;
  r->broken_by_failure = false;
  fmt(r->broken_why, sizeof r->broken_why, "%s",
      why && why[0] ? why : "a new generation asked for");
  settle(r);
  return 0;
}

void ea_rdzv_worker_step(ea_rdzv *r, uint64_t now_ms, uint32_t local, uint64_t step) {
  if (local >= r->cfg.workers_per_node) return;
  at(r, now_ms);
  if (local == 0) {
    /* steps back to back in a running generation (a first one, or one after
     * a pause or formation, measures nothing) */
    if (r->running && r->step_at && step == r->last_step + 1 && now_ms > r->step_at) {
      uint64_t iv = now_ms - r->step_at;
      r->step_iv_ms = r->step_iv_ms ? (3 * r->step_iv_ms + iv) / 4 : iv;
    }
    r->step_at = r->running ? now_ms : 0;
  }
  if (step > r->last_step) r->last_step = step;
  if (r->running && gen_eq(&r->run.gen, &r->formed)) r->formed_stepped = true;
  if (r->prep && !r->prep_ordered) r->wstepped[local] = true;
  settle(r);
}

void ea_rdzv_worker_failed(ea_rdzv *r, uint64_t now_ms, uint32_t local) {
  ea_rdzv_worker_failed_peer(r, now_ms, local, NULL);
}

void ea_rdzv_worker_failed_peer(ea_rdzv *r, uint64_t now_ms, uint32_t local,
                                const ea_node_id *peer) {
  if (local >= r->cfg.workers_per_node) return;
  at(r, now_ms);
  ea_rdzv_gen was = r->fail_gen;
  if (r->prep && !r->prep_ordered) {
    /* Waiting for a boundary: a failed step is one too. */
    r->prep_boundary = false;
  } else if (r->prep) {
    r->wready[local] = false;
    r->fail_gen = r->prep_gen;
    r->report_to_set = false; /* report now */
  } else if (r->running) {
    r->fail_gen = r->run.gen;
    r->report_to_set = false;
  }
  /* The first named peer of this failure is the one blamed; a later
   * worker's failure of the same generation adds nothing. */
  if (r->fail_gen.term && (!gen_eq(&was, &r->fail_gen) || !r->fail_blame)) {
    r->fail_blame = peer && !id_eq(peer, &r->self);
    if (r->fail_blame) r->fail_peer = *peer;
  }
  settle(r);
}

void ea_rdzv_worker_starting(ea_rdzv *r, uint64_t now_ms, uint32_t local, bool on) {
  if (local >= r->cfg.workers_per_node) return;
  at(r, now_ms);
  if (r->wstarting[local] != on) {
    r->wstarting[local] = on;
    r->report_to_set = false; /* tell the controller now */
    /* The last one up: one REPORT without the flag, until the controller
     * answers (an introduction), so it need not wait for gossip. */
    if (!on && !any_wstarting(r)) r->announce = true;
  }
  settle(r);
}

int ea_rdzv_drain(ea_rdzv *r, uint64_t now_ms, const char *name) {
  at(r, now_ms);
  int rc = 0;
  if (!name || !name[0] || strcmp(name, r->self_name) == 0) {
    start_draining(r);
  } else {
    rc = -ENOENT;
    for (size_t i = 0; i < r->nview; i++) {
      const ea_member *v = &r->view[i];
      if (is_up(v) && strcmp(v->meta.name, name) == 0) {
        ea_rdzv_msg m = {.type = EA_RDZV_DRAIN, .target = v->id, .target_inc = v->incarnation};
        snprintf(m.name, sizeof m.name, "%s", name);
        rc = post(r, &v->id, &m) ? 0 : -ENOENT;
        break;
      }
    }
  }
  settle(r);
  return rc;
}

static void soonest(uint64_t *d, uint64_t now, uint64_t t) {
  if (t > now && t < *d) *d = t;
}

uint64_t ea_rdzv_next_deadline(const ea_rdzv *r) {
  uint64_t d = UINT64_MAX, now = r->now;
  if (r->f.phase == F_PREPARE) {
    soonest(&d, now, r->f.deadline);
    soonest(&d, now, r->f.resend_at);
  }
  if (!r->persist_busy && ea_rdzv_gen_cmp(&r->want, &r->durable) > 0)
    soonest(&d, now, r->persist_retry_at);
  if (ready_resend_due(r)) soonest(&d, now, r->ready_at);
  if (r->prep) {
    soonest(&d, now, prep_deadline(r));
    if (!r->prep_ordered && r->prep_boundary) soonest(&d, now, boundary_deadline(r));
  }
  if (r->el.have && need_report(r)) soonest(&d, now, r->report_at);
  if (r->learning) soonest(&d, now, r->query_at);
  if (r->strays) soonest(&d, now, r->stray_at);
  soonest(&d, now, r->retry_at);
  if (r->join_since) {
    soonest(&d, now, r->join_since + r->cfg.scale_up_delay_ms);
    soonest(&d, now, r->join_since + 2 * (uint64_t)r->cfg.scale_up_delay_ms); /* one starting */
  }
  if (r->cold_since) soonest(&d, now, r->cold_since + r->cfg.scale_up_delay_ms);
  for (size_t i = 0; i < r->nexcl; i++) soonest(&d, now, r->excl[i].until);
  for (size_t i = 0; i < r->nwst; i++) soonest(&d, now, r->wst[i].until);
  for (size_t i = 0; i < r->nflap; i++) soonest(&d, now, r->flap[i].until);
  if (r->formed_broken && r->broken_by_failure) soonest(&d, now, churn_until(r));
  if (r->churn && r->formed_at) soonest(&d, now, r->formed_at + EA_RDZV_CHURN_WINDOW_MS + 1);
  if (r->minn_since) soonest(&d, now, r->minn_since + r->cfg.min_nodes_timeout_ms);
  if (r->lm == EA_RDZV_LASTCK_WAITING) soonest(&d, now, r->lm_since + r->cfg.last_ckpt_ms);
  if (r->drain_since) soonest(&d, now, r->drain_since + EA_RDZV_DRAIN_BATCH_MS);
  return d;
}

uint64_t ea_rdzv_tick(ea_rdzv *r, uint64_t now_ms) {
  at(r, now_ms);
  settle(r);
  return ea_rdzv_next_deadline(r);
}

/* Advertise the generation we ran only while it is still the newest formed
 * one we know: after a RELEASE (formed without us) we no longer hold its
 * successor's member list, and a controller that learns from us must not
 * be sent to us for it. */
uint64_t ea_rdzv_last_gen(const ea_rdzv *r) {
  return gen_eq(&r->ran, &r->formed) ? ea_rdzv_gen_u64(&r->ran) : 0;
}

const ea_rdzv_plan *ea_rdzv_running(const ea_rdzv *r) {
  return r->running ? &r->run : NULL;
}

size_t ea_rdzv_formed_ids(const ea_rdzv *r, ea_rdzv_gen *gen, ea_node_id *out, size_t cap) {
  if (gen) *gen = r->formed;
  for (size_t i = 0; out && i < r->nformed && i < cap; i++) out[i] = r->formed_ids[i];
  return r->nformed;
}

const char *ea_rdzv_phase_str(uint8_t phase) {
  switch (phase) {
    case EA_RDZV_IDLE:
      return "idle";
    case EA_RDZV_PREPARED:
      return "prepared";
    case EA_RDZV_RUNNING:
      return "running";
    case EA_RDZV_FAILED:
      return "failed";
    case EA_RDZV_PAUSED:
      return "paused";
    case EA_RDZV_DRAINED:
      return "drained";
    default:
      return "?";
  }
}

const ea_election *ea_rdzv_election(const ea_rdzv *r) {
  /* settle() ends every entry point with elect(), so el is current here. */
  return r->viewed ? &r->el : NULL;
}

void ea_rdzv_status_get(const ea_rdzv *r, ea_rdzv_status *out) {
  *out = r->st;
  if (r->drained)
    out->phase = EA_RDZV_DRAINED;
  else if (r->prep)
    out->phase = EA_RDZV_PREPARED;
  else if (r->running)
    out->phase =
        r->fail_gen.term && gen_eq(&r->fail_gen, &r->run.gen) ? EA_RDZV_FAILED : EA_RDZV_RUNNING;
  else if (r->paused)
    out->phase = EA_RDZV_PAUSED;
  else
    out->phase = EA_RDZV_IDLE;
  out->draining = r->draining;
  out->have_controller = r->el.have;
  out->controller_id = r->el.controller;
  out->controller = r->el.have && id_eq(&r->el.controller, &r->self);
  out->has_quorum = r->cfg.quorum_none || r->el.has_quorum;
  out->forming = r->f.phase != F_NONE;
  out->seen = r->seen;
  out->accepted = r->accepted;
  out->durable = r->durable;
  out->running = r->running ? r->run.gen : (ea_rdzv_gen){0};
  out->formed = r->formed;
  out->formed_nodes = r->nformed;
  out->last_step = r->last_step;
  snprintf(out->reason, sizeof out->reason, "%s", r->reason);
  out->restarts = r->restarts;
  out->job_failed = r->job_fail;
  snprintf(out->job_why, sizeof out->job_why, "%s", r->job_why);
  out->churn = r->churn;
  out->churn_streak = r->churn_streak;
  snprintf(out->churn_why, sizeof out->churn_why, "%s", r->churn_why);
  out->churn_wait_ms = r->formed_broken && r->broken_by_failure && churn_until(r) > r->now
                           ? churn_until(r) - r->now
                           : 0;
  out->held_now = (uint32_t)ea_rdzv_held_out(r, NULL, 0);
  if (is_ctrl(r) && r->lm_gen.term) {
    out->last_ckpt = r->lm;
    out->last_ckpt_spares = r->lm_spares;
    out->last_ckpt_gen = ea_rdzv_gen_u64(&r->lm_gen);
    out->last_ckpt_since_ms = r->lm_since;
    uint64_t end = r->lm_since + r->cfg.last_ckpt_ms;
    out->last_ckpt_left_ms = r->lm == EA_RDZV_LASTCK_WAITING && end > r->now ? end - r->now : 0;
  }
}

const char *ea_rdzv_lastck_str(uint8_t s) {
  switch (s) {
    case EA_RDZV_LASTCK_NONE:
      return "none";
    case EA_RDZV_LASTCK_WAITING:
      return "waiting";
    case EA_RDZV_LASTCK_DONE:
      return "done";
    case EA_RDZV_LASTCK_TIMED_OUT:
      return "timed out";
    default:
      return "?";
  }
}

void ea_rdzv_last_ckpt_done(ea_rdzv *r, uint64_t now_ms, uint64_t gen64) {
  at(r, now_ms);
  if (is_ctrl(r) && r->lm == EA_RDZV_LASTCK_WAITING && ea_rdzv_gen_u64(&r->lm_gen) == gen64)
    r->lm = EA_RDZV_LASTCK_DONE;
  settle(r);
}

void ea_rdzv_node_failed(ea_rdzv *r, uint64_t now_ms, const ea_node_id *id, const char *what) {
  at(r, now_ms);
  flap_fail(r, id, what && what[0] ? what : "a worker crashed");
  settle(r);
}

int ea_rdzv_hold_out(ea_rdzv *r, uint64_t now_ms, const ea_node_id *id, uint8_t why,
                     const char *text) {
  at(r, now_ms);
  int rc = 0;
  if (!is_ctrl(r)) {
    rc = -EPERM;
  } else if (id_eq(id, &r->self)) {
    rc = -EINVAL;
  } else if (held(r, id)) {
    rc = -EALREADY;
  } else {
    flapper *f = flap_get(r, id);
    if (!f)
      rc = -ENOMEM;
    else
      hold(r, f, why, text ? text : "");
  }
  settle(r);
  return rc;
}

bool ea_rdzv_is_held(const ea_rdzv *r, const ea_node_id *id) {
  return is_ctrl(r) && held(r, id);
}

int ea_rdzv_link_down(ea_rdzv *r, uint64_t now_ms, const ea_node_id *by, const ea_node_id *peer) {
  at(r, now_ms);
  int rc = 0;
  if (!is_ctrl(r)) {
    rc = -EPERM;
  } else if (id_eq(by, peer)) {
    rc = -EINVAL;
  } else if (r->formed.term == 0 || find_id(r->formed_ids, r->nformed, by) < 0 ||
             find_id(r->formed_ids, r->nformed, peer) < 0) {
    rc = -ENOENT;
  } else if (!view_find(r, by) || view_find(r, by)->state != EA_STATE_ALIVE ||
             !view_find(r, peer) || view_find(r, peer)->state != EA_STATE_ALIVE) {
    /* A node suspected or dead is membership's to judge (a killed agent
     * answers no ping either): holding the higher name out would then
     * punish a healthy node for a dead one. */
    rc = -ESRCH;
  } else {
    /* blame_pick's tie: both ends named (a probe cannot tell directions). */
    link_blame l = {.named_a = 1, .named_b = 1};
    l.a = id_lt(by, peer) ? *by : *peer;
    l.b = id_lt(by, peer) ? *peer : *by;
    const ea_node_id *pick = blame_pick(r, &l);
    const ea_node_id *other = id_eq(pick, by) ? peer : by;
    flapper *f = held(r, pick) ? NULL : flap_get(r, pick);
    if (held(r, pick)) {
      rc = -EALREADY;
    } else if (!f) {
      rc = -ENOMEM;
    } else {
      char on[EA_NAME_MAX], who[EA_NAME_MAX], text[128];
      name_of(r, other, on);
      name_of(r, by, who);
      fmt(text, sizeof text, "link probe: no answer over the link with %s (found by %s)", on, who);
      hold(r, f, EA_RDZV_HOLD_LINK, text);
      r->st.link_downs++;
    }
  }
  settle(r);
  return rc;
}

const char *ea_rdzv_spare_state_str(uint8_t state) {
  switch (state) {
    case EA_RDZV_SPARE_READY:
      return "ready";
    case EA_RDZV_SPARE_STARTING:
      return "starting";
    case EA_RDZV_SPARE_UNFIT:
      return "unfit";
    case EA_RDZV_SPARE_HELD:
      return "held";
    default:
      return "?";
  }
}

/* The same eligibility as the joiners of agent_eval, in the same order. */
size_t ea_rdzv_spares(const ea_rdzv *r, ea_rdzv_spare *out, size_t cap) {
  if (r->formed.term == 0 || r->nformed < r->cfg.max_nodes) return 0;
  size_t n = 0;
  for (uint8_t want = EA_RDZV_SPARE_READY; want <= EA_RDZV_SPARE_HELD; want++)
    for (size_t i = 0; i < r->nview; i++) {
      const ea_member *v = &r->view[i];
      if (v->state != EA_STATE_ALIVE || observer(v) || in_drain_set(r, &v->id) ||
          find_id(r->formed_ids, r->nformed, &v->id) >= 0)
        continue;
      uint8_t st = excluded(r, &v->id) || kept_out(r, &v->id) ? EA_RDZV_SPARE_HELD
                   : starting(r, v)                           ? EA_RDZV_SPARE_STARTING
                   : unfit(v)                                 ? EA_RDZV_SPARE_UNFIT
                                                              : EA_RDZV_SPARE_READY;
      if (st != want) continue;
      if (out && n < cap) {
        out[n].id = v->id;
        name_of(r, &v->id, out[n].name);
        out[n].state = st;
      }
      n++;
    }
  return n;
}

size_t ea_rdzv_held_out(const ea_rdzv *r, ea_rdzv_held *out, size_t cap) {
  if (!is_ctrl(r)) return 0;
  size_t n = 0;
  for (size_t i = 0; i < r->nflap; i++) {
    const flapper *f = &r->flap[i];
    if (f->until <= r->now) continue;
    if (out && n < cap) {
      ea_rdzv_held *h = &out[n];
      memset(h, 0, sizeof *h);
      h->id = f->id;
      name_of(r, &f->id, h->name);
      h->why = f->why;
      snprintf(h->text, sizeof h->text, "%s", f->text);
      h->until_ms = f->until;
      h->holds = f->holds;
      h->failures = f->nfails;
      h->waived = r->holds_waived && is_up(view_find(r, &f->id));
    }
    n++;
  }
  return n;
}
