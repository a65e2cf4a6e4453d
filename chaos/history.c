/* history.c — what the agents' logs prove, read after the run.
 *
 * Every agent runs at --log-level debug, so it logs one `step` line per
 * completed step of each local worker (worker, generation, rank, world,
 * step, loss, params digest), and one line for every generation it
 * prepares and commits (members, state-sync source), every worker that
 * starts, is ready (with its step and digest) and syncs, every membership
 * change and every checkpoint event.  From these lines alone:
 *
 *  * per generation and step, one params digest: every rank that completed
 *    step s in generation g logged the same digest (ranks_agree);
 *  * per worker process, steps strictly increase and generations never go
 *    back; per agent, no step of an older generation after it committed a
 *    newer one (one_generation); per data dir, prepared generation numbers
 *    strictly increase across restarts (generations_grow); every node that
 *    committed generation g logged the same plan (one_plan);
 *  * the *final history* (lineage): the generation that reached the target
 *    started from the state its sync root held; that root's worker last
 *    trained in some earlier generation, whose last step there must be the
 *    step before, with the digest the root reported when it got ready; and
 *    so on back to step 0.  Each step appears exactly once along this chain
 *    (each_step_once).  Steps a generation computed past the point its
 *    successor took the state from are orphans: legal only one step deep
 *    (a ring allreduce can finish on a rank that then dies); two
 *    generations sharing two or more steps trained side by side;
 *  * per fault, from the log stamps: when the cluster noticed (detection),
 *    when a generation of the expected members committed (re-formation),
 *    when it completed its first step, and how many computed steps were
 *    discarded (steps lost).
 *
 * The files: history_parse.c reads the log lines into struct
 * ea__chaos_history (history_int.h: the generations' step arrays, worker
 * processes, membership and checkpoint events) and checks on the way what
 * one agent's lines prove in order (ranks_agree, one_generation,
 * generations_grow, one_plan, and that a generation's ranks started from
 * one step); this file builds the lineage from that history and checks what
 * needs all of it (each_step_once along the lineage, and ranks_agree's
 * "every rank logged every step"), times the faults, and holds the entry
 * points, the only part the rest of chaos/ sees (chaos.h).
 */
#include "chaos.h"
#include "history_int.h"

#include "ea_rdzv.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static bool gen_has(const hgen *g, uint64_t step) {
  return g->len && step >= g->base && step - g->base < g->len && g->cnt[step - g->base];
}

static uint64_t gen_last(const hgen *g) {
  for (size_t i = g->len; i-- > 0;)
    if (g->cnt[i]) return g->base + i;
  return 0;
}

static uint64_t gen_first(const hgen *g) {
  for (size_t i = 0; i < g->len; i++)
    if (g->cnt[i]) return g->base + i;
  return 0;
}

/* The step generation g starts from: its workers' start line, else its
 * commit line's "sync=rank R at step S" (a generation superseded during its
 * state sync logs no start line and no step, yet its ranks may hold the
 * state it broadcast), else its first step. */
static uint64_t gen_start(const hgen *g) {
  return g->have_start ? g->start : g->sync_step ? g->sync_step : gen_first(g);
}

/* ---- lineage --------------------------------------------------------------------- */

static int find_gen(const struct ea__chaos_history *h, uint64_t gen) {
  for (size_t i = 0; i < h->ngens; i++)
    if (h->gens[i].gen == gen) return (int)i;
  return -1;
}

/* The generation the state of generation gi came from, or -1 (initial
 * state, or unknown: *why says). */
static int predecessor(ea__chaos_run *r, struct ea__chaos_history *h, int gi, char *why,
                       size_t cap) {
  hgen *g = &h->gens[gi];
  uint64_t start = gen_start(g);
  why[0] = 0;
  if (start == 0) return -1;
  if (g->root_proc < 0) {
    snprintf(why, cap,
             "the state-sync source of generation %" PRIu64 " is unknown (no commit line with it)",
             ea_rdzv_gen64_term(g->gen));
    return -2;
  }
  proc *p = &h->procs[g->root_proc];
  const seg *prev = NULL;
  for (size_t i = 0; i < p->nsegs; i++) {
    if (p->segs[i].gen >= g->gen) break;
    prev = &p->segs[i];
  }
  if (!prev) {
    snprintf(why, cap,
             "generation %" PRIu64 " started at step %" PRIu64
             " from %s worker %d, which had trained nothing "
             "before (a checkpoint resume?)",
             ea_rdzv_gen64_term(g->gen), start, r->nodes[p->node].name, p->widx);
    return -2;
  }
  if (prev->last + 1 != start || (g->have_ready && g->ready_digest != prev->last_digest)) {
    /* The source may hold a state it received in a generation between the
     * two that failed after its state sync had loaded the broadcast (the
     * digest check that follows it lost a peer: soak seed 284935115, n2e
     * in generation 324), or that the agent superseded once the broadcast
     * had loaded (soak seed 366782123: generation 3 formed as n5 came
     * back, generation 4 at once after; n3's worker reported "state sync
     * … Operation canceled" yet held rank 2's step 152293): that
     * generation's source is then the lineage, if it held exactly this
     * step and digest. */
    for (size_t j = 0; j < h->ngens; j++) {
      hgen *g2 = &h->gens[j];
      if (g2->gen <= prev->gen || g2->gen >= g->gen || g2->root_proc < 0 ||
          g2->root_proc == g->root_proc || gen_start(g2) != start)
        continue;
      const proc *p2 = &h->procs[g2->root_proc];
      const seg *s2 = NULL;
      for (size_t i = 0; i < p2->nsegs && p2->segs[i].gen < g2->gen; i++) s2 = &p2->segs[i];
      if (s2 && s2->last + 1 == start && (!g->have_ready || s2->last_digest == g->ready_digest))
        return predecessor(r, h, (int)j, why, cap);
    }
  }
  if (prev->last + 1 != start) {
    ea__chaos_violate(r, EA__I_ONCE,
                      "generation %" PRIu64 "/%04" PRIx64 " started at step %" PRIu64
                      " but its state-sync source (%s worker %d) had last completed step %" PRIu64
                      " (generation %" PRIu64 ")",
                      ea_rdzv_gen64_term(g->gen), (uint64_t)ea_rdzv_gen64_ctrl(g->gen), start,
                      r->nodes[p->node].name, p->widx, prev->last, ea_rdzv_gen64_term(prev->gen));
  }
  if (g->have_ready && g->ready_digest != prev->last_digest) {
    ea__chaos_violate(r, EA__I_ONCE,
                      "generation %" PRIu64 "/%04" PRIx64
                      ": its state-sync source reported digest %016" PRIx64
                      " when ready, but had logged %016" PRIx64 " after its last step %" PRIu64,
                      ea_rdzv_gen64_term(g->gen), (uint64_t)ea_rdzv_gen64_ctrl(g->gen),
                      g->ready_digest, prev->last_digest, prev->last);
  }
  return find_gen(h, prev->gen);
}

static void build_lineage(ea__chaos_run *r, struct ea__chaos_history *h) {
  /* The final generation: the one whose steps reach furthest (the newest
   * among equals). */
  int fin = -1;
  uint64_t best = 0;
  for (size_t i = 0; i < h->ngens; i++) {
    hgen *g = &h->gens[i];
    if (!g->len) continue;
    uint64_t l = gen_last(g);
    if (fin < 0 || l > best || (l == best && g->gen > h->gens[fin].gen)) fin = (int)i, best = l;
  }
  h->final_gen = fin;
  if (fin < 0) {
    ea__chaos_violate(r, EA__I_ONCE, "no step was logged by any agent");
    return;
  }
  uint64_t total = best + 1;
  h->lin_world = calloc(total, sizeof *h->lin_world);
  if (!h->lin_world) return;
  h->lin_len = total;
  int cur = fin;
  uint64_t upto = best;
  int guard = 0;
  while (cur >= 0 && guard++ < 100000) {
    hgen *g = &h->gens[cur];
    uint64_t start = g->have_start ? g->start : gen_first(g);
    if (start > upto + 1) {
      ea__chaos_violate(r, EA__I_ONCE,
                        "steps %" PRIu64 "..%" PRIu64 " are missing from the final history",
                        upto + 1, start - 1);
    }
    uint64_t from = start, missing = 0, first_missing = 0;
    for (uint64_t s = from; s <= upto && s < total; s++) {
      /* The world size stays known for the replay even where a step is
       * missing, so one hole is reported once, not as a cascade. */
      h->lin_world[s] = g->world ? g->world : 1;
      if (!gen_has(g, s) && missing++ == 0) first_missing = s;
    }
    if (missing)
      ea__chaos_violate(r, EA__I_ONCE,
                        "%" PRIu64 " step(s) of the final history in generation %" PRIu64
                        "/%04" PRIx64 " were logged by no rank, the first is step %" PRIu64,
                        missing, ea_rdzv_gen64_term(g->gen), (uint64_t)ea_rdzv_gen64_ctrl(g->gen),
                        first_missing);
    if (g->lineage) {
      ea__chaos_violate(r, EA__I_ONCE, "the final history passes generation %" PRIu64 " twice",
                        ea_rdzv_gen64_term(g->gen));
      break;
    }
    g->lineage = true;
    g->lin_from = from;
    g->lin_to = upto;
    /* Orphans: steps g computed beyond what its successor took. */
    uint64_t last = gen_last(g);
    if (last > upto) h->orphans += last - upto;
    if (last > upto + 1)
      ea__chaos_violate(r, EA__I_ONCE,
                        "generation %" PRIu64 "/%04" PRIx64 " trained steps %" PRIu64 "..%" PRIu64
                        " that its successor also trained: two generations trained the same steps",
                        ea_rdzv_gen64_term(g->gen), (uint64_t)ea_rdzv_gen64_ctrl(g->gen), upto + 1,
                        last);
    if (from == 0) break;
    char why[400];
    int pred = predecessor(r, h, cur, why, sizeof why);
    g->pred = pred;
    if (pred == -2) {
      ea__chaos_violate(r, EA__I_ONCE, "%s", why);
      break;
    }
    if (pred < 0) break;
    upto = from - 1;
    cur = pred;
  }
  /* Steps before the start of the chain that nobody covers. */
  for (uint64_t s = 0; s < total; s++)
    if (!h->lin_world[s]) {
      uint64_t e = s;
      while (e + 1 < total && !h->lin_world[e + 1]) e++;
      ea__chaos_violate(r, EA__I_ONCE,
                        "steps %" PRIu64 "..%" PRIu64 " are not in the final history", s, e);
      s = e;
    }
  /* Generations off the final history that trained: their steps are lost
   * work (a dead end), counted with the orphans. */
  for (size_t i = 0; i < h->ngens; i++) {
    hgen *g = &h->gens[i];
    if (g->lineage || !g->len) continue;
    uint64_t n = 0;
    for (size_t k = 0; k < g->len; k++) n += g->cnt[k] != 0;
    h->orphans += n;
  }
  /* Two generations must not share two or more steps (quorum: none lets a
   * partition's sides train side by side by design). */
  if (strcmp(r->cfg.distributed.quorum, "none") != 0) {
    for (size_t i = 0; i < h->ngens; i++)
      for (size_t j = i + 1; j < h->ngens; j++) {
        hgen *a = &h->gens[i], *b = &h->gens[j];
        if (!a->len || !b->len) continue;
        uint64_t lo = gen_first(a) > gen_first(b) ? gen_first(a) : gen_first(b);
        uint64_t hi = gen_last(a) < gen_last(b) ? gen_last(a) : gen_last(b);
        if (hi < lo) continue;
        uint64_t both = 0;
        for (uint64_t s = lo; s <= hi; s++) both += gen_has(a, s) && gen_has(b, s);
        if (both >= 2)
          ea__chaos_violate(r, EA__I_ONCE,
                            "generations %" PRIu64 "/%04" PRIx64 " and %" PRIu64 "/%04" PRIx64
                            " both trained %" PRIu64 " of steps %" PRIu64 "..%" PRIu64,
                            ea_rdzv_gen64_term(a->gen), (uint64_t)ea_rdzv_gen64_ctrl(a->gen),
                            ea_rdzv_gen64_term(b->gen), (uint64_t)ea_rdzv_gen64_ctrl(b->gen), both,
                            lo, hi);
      }
  }
  /* In each generation every rank logged every step until the first of
   * them stopped. */
  for (size_t i = 0; i < h->ngens; i++) {
    hgen *g = &h->gens[i];
    if (!g->len || !g->world || g->world > MAX_RANKS) continue;
    uint64_t stop = UINT64_MAX;
    uint32_t seen = 0;
    for (uint32_t k = 0; k < g->world; k++)
      if (g->rank_seen[k]) {
        seen++;
        if (g->rank_last[k] < stop) stop = g->rank_last[k];
      }
    if (seen < g->world) continue; /* a rank's agent died before logging */
    for (uint64_t s = gen_first(g); s <= stop; s++)
      if (gen_has(g, s) && g->cnt[s - g->base] < g->world && g->cnt[s - g->base] != 255) {
        ea__chaos_violate(r, EA__I_DIGEST,
                          "generation %" PRIu64 " (world %u) step %" PRIu64
                          " was logged by %u ranks only",
                          ea_rdzv_gen64_term(g->gen), g->world, s, g->cnt[s - g->base]);
        break;
      }
  }
}

/* ---- per-fault timings ------------------------------------------------------------ */

static void names_sorted(const char *list, char *out, size_t cap) {
  char tmp[512], *items[CH_MAX_SLOTS * 4];
  int n = 0;
  snprintf(tmp, sizeof tmp, "%s", list);
  for (char *s = strtok(tmp, ","); s && n < (int)(sizeof items / sizeof items[0]);
       s = strtok(NULL, ","))
    items[n++] = s;
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && strcmp(items[j - 1], items[j]) > 0; j--) {
      char *t = items[j];
      items[j] = items[j - 1];
      items[j - 1] = t;
    }
  size_t off = 0;
  out[0] = 0;
  for (int i = 0; i < n && off < cap - 1; i++)
    off += (size_t)snprintf(out + off, cap - off, "%s%s", i ? "," : "", items[i]);
}

static bool in_list(const char *list, const char *name) {
  size_t l = strlen(name);
  for (const char *p = list; p && *p;) {
    const char *c = strchr(p, ',');
    size_t n = c ? (size_t)(c - p) : strlen(p);
    if (n == l && memcmp(p, name, l) == 0) return true;
    p = c ? c + 1 : NULL;
  }
  return false;
}

/* The first commit in [t, h->t_end) whose members are exactly `nodes`. */
static int commit_after(struct ea__chaos_history *h, int64_t t, const char *nodes) {
  int best = -1;
  for (size_t i = 0; i < h->ngens; i++) {
    hgen *g = &h->gens[i];
    if (!g->committed || g->t_commit < t || g->t_commit >= h->t_end) continue;
    char sorted[512];
    names_sorted(g->nodes, sorted, sizeof sorted);
    if (strcmp(sorted, nodes) != 0) continue;
    if (best < 0 || g->t_commit < h->gens[best].t_commit) best = (int)i;
  }
  return best;
}

static int64_t first_member(struct ea__chaos_history *h, int64_t t, const char *members,
                            const char *to, const char *not_observer) {
  int64_t best = -1;
  for (size_t i = 0; i < h->nmem; i++) {
    memev *m = &h->mem[i];
    if (m->ts < t || m->ts >= h->t_end || !in_list(members, m->member) || strcmp(m->to, to) != 0)
      continue;
    if (not_observer && in_list(not_observer, m->observer)) continue;
    if (best < 0 || m->ts < best) best = m->ts;
  }
  return best;
}

static int64_t first_event(ea__chaos_run *r, struct ea__chaos_history *h, int64_t t,
                           const char *node, int kind) {
  int64_t best = -1;
  for (size_t i = 0; i < h->nev; i++) {
    evrec *e = &h->ev[i];
    if (e->ts < t || e->ts >= h->t_end || e->kind != kind) continue;
    if (node && strcmp(r->nodes[e->node].name, node) != 0) continue;
    if (best < 0 || e->ts < best) best = e->ts;
  }
  return best;
}

static int64_t first_step_after(const struct ea__chaos_history *h, int64_t t) {
  for (size_t i = 0; i < h->nprobes; i++)
    if (h->probe_t[i] == t) return h->probe_best[i];
  return -1;
}

/* A full disk: "detection" is the first checkpoint given up after the disk
 * filled, "re-formation" the first checkpoint committed after it was freed
 * (no generation changes: training must simply go on). */
static void disk_times(struct ea__chaos_history *h, ea__chaos_episode *e) {
  e->deg.t_detect = e->res.t_reform = -1;
  for (size_t i = 0; i < h->nck; i++) {
    const ea__chaos_ckev *k = &h->ck[i];
    if (k->kind != 0 && k->t_ms >= e->t_inject && k->t_ms <= e->t_heal + 1000 &&
        (e->deg.t_detect < 0 || k->t_ms < e->deg.t_detect))
      e->deg.t_detect = k->t_ms;
    if (k->kind == 0 && k->t_ms >= e->t_heal && (e->res.t_reform < 0 || k->t_ms < e->res.t_reform))
      e->res.t_reform = k->t_ms;
  }
  e->deg.t_reform = e->deg.t_first_step = e->res.t_detect = e->res.t_first_step = -1;
  e->steps_lost = 0;
}

static void phase_times(ea__chaos_run *r, struct ea__chaos_history *h, ea__chaos_episode *e,
                        ea__chaos_phase *p, bool restored) {
  if (e->f.kind == EA__F_DISK_FULL) {
    if (!restored) disk_times(h, e);
    return;
  }
  if (!p->t_start || !p->nodes[0]) return;
  /* The generation polling saw recover, when it saw one; else the first
   * commit of exactly the expected members after the phase began. */
  int gi = p->observed ? find_gen(h, p->gen) : -1;
  if (gi < 0) {
    char sorted[512];
    names_sorted(p->nodes, sorted, sizeof sorted);
    gi = commit_after(h, p->t_start, sorted);
  }
  if (gi >= 0 && h->gens[gi].t_commit >= p->t_start) {
    hgen *g = &h->gens[gi];
    p->t_reform = g->t_commit;
    p->gen = g->gen;
    p->world = g->world;
    if (g->ts_first >= 0) p->t_first_step = g->ts_first;
    /* Steps lost: computed by the generations before this one (from its
     * state's source on) past the step it started from. */
    uint64_t start = g->have_start ? g->start : gen_first(g);
    int64_t lost = 0;
    for (size_t i = 0; i < h->ngens; i++) {
      hgen *o = &h->gens[i];
      if (o->gen >= g->gen || !o->len || o->ts_last < e->t_inject - 1000) continue;
      uint64_t last = gen_last(o);
      if (last + 1 > start && (int64_t)(last + 1 - start) > lost)
        lost = (int64_t)(last + 1 - start);
    }
    if (!restored || e->steps_lost < 0 || lost > e->steps_lost) e->steps_lost = lost;
  } else {
    /* No new generation was needed (a short pause, loss the ring rode
     * out): training simply went on. */
    p->t_reform = -1;
    p->t_first_step = first_step_after(h, p->t_start);
    if (!restored && e->steps_lost < 0) e->steps_lost = 0;
  }
  const char *victim = e->victim;
  switch (e->f.kind) {
    case EA__F_WORKER_KILL:
      p->t_detect = first_event(r, h, e->t_inject, victim, 1);
      break;
    case EA__F_DRAIN:
    case EA__F_SIGTERM:
    case EA__F_PREEMPT:
      if (!restored)
        p->t_detect = first_event(r, h, e->t_inject, victim, 2);
      else
        p->t_detect = first_member(h, p->t_start, e->newcomer, "alive", e->newcomer);
      break;
    case EA__F_SPARE: /* the victim's death; the last newcomer's leaving */
      if (!restored)
        p->t_detect = first_member(h, p->t_start, victim, "dead", victim);
      else
        p->t_detect = first_event(r, h, p->t_start, e->newcomer, 2);
      break;
    case EA__F_JOIN:
    case EA__F_JOIN_FLOOD:
      if (!restored)
        p->t_detect = first_member(h, p->t_start, victim, "alive", victim);
      else
        p->t_detect = first_event(r, h, p->t_start, victim, 2);
      break;
    case EA__F_SPLIT:
      if (!restored)
        p->t_detect = first_member(h, p->t_start, e->minority, "dead", e->minority);
      else
        p->t_detect = first_member(h, p->t_start, e->minority, "alive", e->minority);
      break;
    case EA__F_HTTP_FLOOD: /* nothing to detect: the cluster trains on */
      p->t_detect = -1;
      break;
    case EA__F_LOSS:
    case EA__F_ONEWAY: /* nobody dies: the first failure the agents log */
      p->t_detect = -1;
      for (size_t i = 0; i < h->nev; i++)
        if (h->ev[i].ts >= e->t_inject && h->ev[i].ts <= e->t_heal && h->ev[i].kind == 0 &&
            (p->t_detect < 0 || h->ev[i].ts < p->t_detect))
          p->t_detect = h->ev[i].ts;
      break;
    default: /* crash, controller, pause, isolate, ckpt-kill */
      if (!restored) {
        p->t_detect = first_member(h, p->t_start, victim, "dead", victim);
      } else {
        const char *who = e->newcomer[0] ? e->newcomer : victim;
        p->t_detect = first_member(h, p->t_start, who, "alive", who);
      }
  }
}

/* ---- entry points ---------------------------------------------------------------- */

int ea__chaos_history_check(ea__chaos_run *r) {
  struct ea__chaos_history *h = calloc(1, sizeof *h);
  if (!h) return -ENOMEM;
  r->hist = h;
  h->final_gen = -1;
  h->t_end = INT64_MAX;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  h->probe_t = calloc(2 * r->neps + 1, sizeof *h->probe_t);
  h->probe_best = calloc(2 * r->neps + 1, sizeof *h->probe_best);
  if (!h->probe_t || !h->probe_best) return -ENOMEM;
  for (size_t i = 0; i < r->neps; i++) {
    const ea__chaos_episode *e = &r->eps[i];
    if (e->state != EA__EP_DONE) continue;
    if (e->deg.t_start) h->probe_t[h->nprobes++] = e->deg.t_start;
    if (e->res.t_start) h->probe_t[h->nprobes++] = e->res.t_start;
  }
  for (size_t i = 1; i < h->nprobes; i++)
    for (size_t j = i; j > 0 && h->probe_t[j - 1] > h->probe_t[j]; j--) {
      int64_t t = h->probe_t[j];
      h->probe_t[j] = h->probe_t[j - 1];
      h->probe_t[j - 1] = t;
    }
  for (size_t i = 0; i < h->nprobes; i++) h->probe_best[i] = -1;
  for (size_t i = 0; i < r->nnodes; i++) {
    uint64_t prepared_max = 0;
    for (int k = 0; k < r->nodes[i].starts; k++) {
      char path[CH_PATH_MAX + 32];
      snprintf(path, sizeof path, "%s/agent.%d.log", r->nodes[i].dir, k);
      int rc = ea__chaos_history_parse_file(r, h, (int)i, k, path, &prepared_max);
      if (rc < 0) {
        ea__chaos_violate(r, EA__I_ONCE, "cannot read %s: %s", path, strerror(-rc));
        return rc;
      }
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  h->parse_seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  build_lineage(r, h);
  for (size_t i = 0; i < r->neps; i++) {
    ea__chaos_episode *e = &r->eps[i];
    if (e->state != EA__EP_DONE) continue;
    e->steps_lost = -1;
    /* Episodes run one after another: a short pause ridden out has no
     * "dead" of its own, and the next fault's of the same node is not it. */
    h->t_end = INT64_MAX;
    for (size_t j = i + 1; j < r->neps && h->t_end == INT64_MAX; j++)
      if (r->eps[j].state == EA__EP_DONE && r->eps[j].t_inject > e->t_inject)
        h->t_end = r->eps[j].t_inject;
    phase_times(r, h, e, &e->deg, false);
    phase_times(r, h, e, &e->res, true);
  }
  /* The views for the report. */
  h->views = calloc(h->ngens ? h->ngens : 1, sizeof *h->views);
  if (h->views) {
    for (size_t i = 0; i < h->ngens; i++) {
      hgen *g = &h->gens[i];
      ea__chaos_genview *v = &h->views[h->nviews++];
      v->gen = g->gen;
      v->world = g->world;
      v->t_commit = g->t_commit;
      v->t_first = g->ts_first;
      v->t_last = g->ts_last;
      v->trained = g->len > 0;
      v->start = g->len ? gen_first(g) : (g->have_start ? g->start : 0);
      v->last = g->len ? gen_last(g) : 0;
      v->lineage = g->lineage;
      v->lineage_from = g->lin_from;
      v->lineage_to = g->lin_to;
      snprintf(v->nodes, sizeof v->nodes, "%.255s", g->nodes);
    }
  }
  return 0;
}

const uint32_t *ea__chaos_lineage_world(const ea__chaos_run *r, uint64_t *nsteps) {
  *nsteps = 0;
  if (!r->hist || !r->hist->lin_world) return NULL;
  *nsteps = r->hist->lin_len;
  return r->hist->lin_world;
}

bool ea__chaos_lineage_digest(const ea__chaos_run *r, uint64_t step, uint64_t *digest,
                              float *loss) {
  const struct ea__chaos_history *h = r->hist;
  if (!h) return false;
  for (size_t i = 0; i < h->ngens; i++) {
    const hgen *g = &h->gens[i];
    if (!g->lineage || step < g->lin_from || step > g->lin_to || !gen_has(g, step)) continue;
    if (digest) *digest = g->dig[step - g->base];
    if (loss) *loss = g->loss[step - g->base];
    return true;
  }
  return false;
}

bool ea__chaos_gen_digest(const ea__chaos_run *r, uint64_t gen, uint64_t step, uint64_t *digest) {
  const struct ea__chaos_history *h = r->hist;
  if (!h) return false;
  int gi = find_gen(h, gen);
  if (gi < 0 || !gen_has(&h->gens[gi], step)) return false;
  *digest = h->gens[gi].dig[step - h->gens[gi].base];
  return true;
}

bool ea__chaos_history_view(const ea__chaos_run *r, ea__chaos_histview *v) {
  memset(v, 0, sizeof *v);
  const struct ea__chaos_history *h = r->hist;
  if (!h) return false;
  v->ngens = h->nviews;
  v->gens = h->views;
  v->nckev = h->nck;
  v->ckev = h->ck;
  v->records = h->records;
  v->lineage_steps = h->lin_len;
  v->orphan_steps = h->orphans;
  v->log_bytes = h->log_bytes;
  v->parse_seconds = h->parse_seconds;
  return true;
}

void ea__chaos_history_free(struct ea__chaos_history *h) {
  if (!h) return;
  for (size_t i = 0; i < h->ngens; i++) {
    free(h->gens[i].dig);
    free(h->gens[i].loss);
    free(h->gens[i].cnt);
  }
  for (size_t i = 0; i < h->nprocs; i++) free(h->procs[i].segs);
  free(h->gens);
  free(h->procs);
  free(h->mem);
  free(h->ev);
  free(h->ck);
  free(h->views);
  free(h->lin_world);
  free(h->probe_t);
  free(h->probe_best);
  free(h);
}
