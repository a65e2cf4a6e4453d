/* spare.c — the spare-churn episode and the spare_world_held invariant
 * (docs/chaos.md, docs/operations.md "Spares").
 *
 * A node that waits beyond compute.max_nodes is a spare; when a member is
 * lost, a ready spare takes its place and the world size does not change.
 * The episode, with m = max_nodes and n agents (m is n or n + 1):
 *
 *   fill      (m = n + 1) a joiner in slot n+1: the world reaches m;
 *   spare     a fresh node in slot n+2 becomes a ready spare, and the
 *             cluster does not re-form for it;
 *   degraded  SIGKILL a member: the spare takes its place, world m;
 *   back      the member restarts on its data dir and is now the spare;
 *   swap      (m = n + 1) the joiner leaves (SIGTERM): the spare — the
 *             member that came back — takes its place, world m again;
 *   restored  the node of slot n+2 leaves (SIGTERM): with m = n the spare
 *             takes its place (world m), with m = n + 1 none is left and
 *             the world shrinks to n, the base layout.
 *
 * spare_world_held: in the windows where a member was lost and a ready
 * spare was left (degraded, swap, and restored when m = n), every
 * generation committed has world m — never a smaller one first, taken
 * back to m later.  Judged after the run from the agents' logs
 * (the history's generations with their commit times), so a generation
 * that lived shorter than one poll is seen too.
 */
#include "chaos.h"

#include "ea_rdzv.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The slot the spare starts in: one past the joiner's slot. */
static int spare_slot(const ea__chaos_run *r) {
  return r->o.nagents + 2;
}

typedef struct {
  ea__chaos_want *w;
  ea__chaos_node *spare;
} spare_ctx;

/* The controller (with quorum) counts a ready spare in its view.  The
 * spare's own status says ready a gossip round or two before the controller
 * hears it (seed 120526, fault #752: a member killed 25 ms after the spare
 * said ready was replaced at world 5, the spare taken 500 ms later as a
 * joiner), and only the controller's view decides. */
static bool controller_sees_spare(ea__chaos_run *r) {
  for (int s = 1; s <= r->nslots; s++) {
    const ea__chaos_node *n = ea__chaos_slot_node(r, s);
    if (ea__chaos_node_running(n) && n->st.ok && n->st.controller && n->st.has_quorum)
      return n->st.spares_ready > 0;
  }
  return false;
}

/* w has formed, `spare` says it is a ready spare (not in w), and the
 * controller counts it. */
static bool cond_spare_ready(ea__chaos_run *r, void *ctx) {
  spare_ctx *c = ctx;
  const ea__chaos_node *s = c->spare;
  if (!ea__chaos_node_running(s) || s->stopped || !s->st.ok ||
      ea__chaos_now_ms() - s->st.t_ms > 1000 || !s->st.spare ||
      strcmp(s->st.spare_state, "ready") != 0)
    return false;
  return ea__chaos_cond_formed(r, c->w) && controller_sees_spare(r);
}

/* w = the current slots 1..n, less `without`, plus each name of `with`. */
static void want_of(ea__chaos_want *w, ea__chaos_run *r, const char *without,
                    ea__chaos_node *const *with, int nwith) {
  ea__chaos_want_set(w, r, without, NULL);
  for (int i = 0; i < nwith; i++)
    if (with[i]) snprintf(w->names[w->n++], CH_NAME_MAX, "%s", with[i]->name);
  qsort(w->names, (size_t)w->n, CH_NAME_MAX, ea__chaos_cmp_name);
}

/* Starts a fresh node in slot s; NULL (the episode skipped) when none. */
static ea__chaos_node *start_in(ea__chaos_run *r, ea__chaos_episode *e, int s) {
  ea__chaos_node *n = ea__chaos_slot_new(r, s);
  if (!n) {
    e->state = EA__EP_SKIPPED;
    snprintf(e->skip_reason, sizeof e->skip_reason, "cannot create a node for slot %d", s);
    return NULL;
  }
  ea__chaos_node_start(r, n);
  return n;
}

/* Waits for spare `s` to be ready beside w; a hang when it is not. */
static bool wait_spare(ea__chaos_run *r, ea__chaos_episode *e, ea__chaos_want *w, ea__chaos_node *s,
                       const char *phase) {
  spare_ctx c = {w, s};
  if (ea__chaos_wait_until(r, ea__chaos_mono_ms() + r->bound_restore_ms, cond_spare_ready, &c)) {
    ea__chaos_say(r, "  %s: %s is a ready spare beside world %u (generation %llu)", phase, s->name,
                  w->world_out, (unsigned long long)ea_rdzv_gen64_term(w->gen_out));
    return true;
  }
  char why[80];
  snprintf(why, sizeof why, "%s (%s a ready spare: %s)", phase, s->name,
           s->st.ok ? (s->st.spare_state[0] ? s->st.spare_state : "not a spare") : "no status");
  ea__chaos_hang(r, e, why, w);
  return false;
}

/* SIGTERM `n` (it drains and exits 0) and wait for w: one phase. */
static bool leave(ea__chaos_run *r, ea__chaos_episode *e, ea__chaos_phase *p, ea__chaos_node *n,
                  ea__chaos_want *w, uint64_t gen_after, const char *what) {
  n->expect_death = n->expect_exit0 = true;
  int64_t t = ea__chaos_now_ms();
  ea__chaos_node_signal(r, n, SIGTERM, false);
  w->gen_after = gen_after;
  w->strictly = true;
  w->step_after = ea__chaos_cluster_step(r);
  w->gone = n->name;
  if (ea__chaos_phase_wait(r, p, w, t, true, what)) return true;
  ea__chaos_hang(r, e, what, w);
  return false;
}

static void held(ea__chaos_episode *e, int64_t from, const ea__chaos_phase *p) {
  if (e->nheld < 2 && p->observed) {
    e->held_from[e->nheld] = from;
    e->held_to[e->nheld++] = p->t_seen;
  }
}

/* Whatever is left of the joiner and the spare goes; the victim runs. */
static void cleanup(ea__chaos_run *r, ea__chaos_node *x) {
  if (!x) return;
  if (ea__chaos_node_running(x)) {
    x->expect_exit0 = false;
    x->expect_death = true;
    ea__chaos_node_signal(r, x, SIGKILL, true);
    ea__chaos_wait_gone(r, x, 5000);
  }
  x->retired = true;
  r->slot_node[x->slot] = -1;
}

void ea__chaos_run_spare(ea__chaos_run *r, ea__chaos_episode *e, ea__chaos_node *v) {
  const uint32_t m = r->cfg.compute.max_nodes, n = (uint32_t)r->o.nagents;
  ea__chaos_node *joiner = NULL, *spare = NULL, *in[2];
  ea__chaos_phase p;
  ea__chaos_want w;
  uint64_t g = e->gen_at_inject;
  int64_t t;
  bool ok;
  memset(&p, 0, sizeof p);
  e->held_world = m * ea__chaos_wpn(r);
  e->t_inject = ea__chaos_now_ms();
  if (m == n + 1) { /* fill: the world reaches max_nodes */
    if (!(joiner = start_in(r, e, (int)n + 1))) return;
    want_of(&w, r, NULL, &joiner, 1);
    w.gen_after = g;
    w.strictly = true;
    if (!ea__chaos_phase_wait(r, &p, &w, e->t_inject, true, "filled")) {
      ea__chaos_hang(r, e, "filled (a joiner brings the world to max_nodes)", &w);
      goto out;
    }
    g = p.gen;
  }
  /* the spare: ready, and nothing re-forms for it */
  if (!(spare = start_in(r, e, spare_slot(r)))) goto out;
  snprintf(e->newcomer, sizeof e->newcomer, "%s", spare->name);
  want_of(&w, r, NULL, &joiner, 1);
  w.gen_after = g;
  if (!wait_spare(r, e, &w, spare, "spare")) goto out;
  if (w.gen_out != g)
    ea__chaos_violate(r, EA__I_SPARE,
                      "fault #%d: the cluster re-formed (generation %llu → %llu) for %s, which "
                      "came in beyond max_nodes %u",
                      (int)(e - r->eps) + 1, (unsigned long long)ea_rdzv_gen64_term(g),
                      (unsigned long long)ea_rdzv_gen64_term(w.gen_out), spare->name, m);
  g = w.gen_out;
  /* degraded: a member dies, the spare takes its place */
  in[0] = joiner;
  in[1] = spare;
  want_of(&w, r, v->name, in, 2);
  w.gen_after = g;
  w.strictly = true;
  w.step_after = ea__chaos_cluster_step(r);
  e->t_inject = ea__chaos_now_ms();
  v->expect_death = true;
  ea__chaos_node_signal(r, v, SIGKILL, true);
  ok = ea__chaos_phase_wait(r, &e->deg, &w, e->t_inject, true, "degraded");
  if (!ok) ea__chaos_hang(r, e, "degraded (the spare takes the lost member's place)", &w);
  held(e, e->t_inject, &e->deg);
  ea__chaos_wait_gone(r, v, 5000);
  if (!ok) goto out;
  g = e->deg.gen;
  /* back: the member restarts on its data dir and waits as the spare */
  e->t_restore = ea__chaos_now_ms();
  ea__chaos_say(r, "  restore: %s (same data dir; a spare now)", v->name);
  ea__chaos_node_start(r, v);
  want_of(&w, r, v->name, in, 2);
  w.gen_after = g;
  if (!wait_spare(r, e, &w, v, "back")) goto out;
  g = w.gen_out;
  if (joiner) { /* swap: the joiner leaves, the spare takes its place */
    ea__chaos_want_set(&w, r, NULL, spare->name);
    t = ea__chaos_now_ms();
    ok = leave(r, e, &p, joiner, &w, g, "swapped");
    held(e, t, &p);
    if (!ok) goto out;
    g = p.gen;
  }
  /* restored: the last newcomer leaves; slots 1..n are the world again */
  ea__chaos_want_set(&w, r, NULL, NULL);
  t = ea__chaos_now_ms();
  ok = leave(r, e, &e->res, spare, &w, g, "restored");
  if (!joiner) held(e, t, &e->res);
  if (ok)
    snprintf(e->note, sizeof e->note,
             "spare %s took %s's place at world %u; %s came back as the spare%s", spare->name,
             v->name, m, v->name,
             joiner ? " and took the leaving joiner's; then the world shrank to n" : "");
out:
  cleanup(r, joiner);
  cleanup(r, spare);
}

/* ---- the invariant, after the run ---------------------------------------------- */

void ea__chaos_spare_check(ea__chaos_run *r) {
  ea__chaos_histview hv;
  if (!ea__chaos_history_view(r, &hv)) return;
  for (size_t i = 0; i < r->neps; i++) {
    const ea__chaos_episode *e = &r->eps[i];
    if (e->f.kind != EA__F_SPARE || e->state != EA__EP_DONE) continue;
    for (int k = 0; k < e->nheld; k++) {
      r->spare_checked = true;
      for (size_t j = 0; j < hv.ngens; j++) {
        const ea__chaos_genview *gv = &hv.gens[j];
        if (gv->t_commit < e->held_from[k] || gv->t_commit > e->held_to[k] ||
            gv->world == e->held_world)
          continue;
        ea__chaos_violate(r, EA__I_SPARE,
                          "fault #%d (spare of %s): generation %llu committed at world %u "
                          "(%s) while a ready spare was left; the world was %u",
                          (int)i + 1, e->victim, (unsigned long long)ea_rdzv_gen64_term(gv->gen),
                          gv->world, gv->nodes, e->held_world);
      }
    }
  }
}
