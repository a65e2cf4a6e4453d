/* episode.c — the fault episodes: one per scheduled fault.
 *
 *   wait until training passed the fault's fraction and the cluster is
 *   whole (every slot's agent runs one generation of world N) →
 *   inject → the *degraded* phase (the cluster re-forms without the victim,
 *   or with the newcomer of a join) → heal (SIGCONT, partition lifted, loss
 *   off) → restore (the victim restarts on its data dir, or a fresh node
 *   with a new disk replaces it) → the *restored* phase (world N again,
 *   training again) → a few steps of settling.
 *
 * Every phase has a deadline (the recovery bound): a cluster that does not
 * get there in time is a "hang" violation, reported with what it was doing.
 * Each fault kind is one function here; what they share with run.c — nodes,
 * polling (which also checks the continuous invariants while an episode
 * waits) and what "formed" means — is declared in chaos.h, so an episode
 * only says which phases it expects and which nodes each phase should hold.
 */
#include "chaos.h"

#include "ea_rdzv.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Steps the cluster trains between two episodes before the next may fire:
 * enough to prove it trains again, a few ms of work. */
#define SETTLE_STEPS 20

/* ---- episodes --------------------------------------------------------------- */

static void restore_and_wait(ea__chaos_run *r, ea__chaos_episode *e, ea__chaos_node *victim,
                             bool fresh, uint64_t gen_after, uint64_t step_after) {
  ea__chaos_node *back = victim;
  if (fresh) {
    back = ea__chaos_replace_fresh(r, victim);
    if (!back) {
      snprintf(e->note, sizeof e->note, "could not create a fresh node");
      return;
    }
  }
  back->ckpt_fault[0] = 0;
  snprintf(e->newcomer, sizeof e->newcomer, "%s", back->name);
  e->t_restore = ea__chaos_now_ms();
  ea__chaos_say(r, "  restore: %s %s", back->name,
                fresh ? "(fresh node: new disk, new id)" : "(same data dir)");
  ea__chaos_node_start(r, back);
  ea__chaos_want w;
  ea__chaos_want_set(&w, r, NULL, NULL);
  w.gen_after = gen_after;
  w.strictly = true;
  w.step_after = step_after;
  if (!ea__chaos_phase_wait(r, &e->res, &w, e->t_restore, true, "restored"))
    ea__chaos_hang(r, e, "restored", &w);
}

static void run_remove(ea__chaos_run *r, ea__chaos_episode *e, ea__chaos_node *v) {
  const ea__chaos_fault *f = &e->f;
  ea__chaos_want w;
  ea__chaos_want_set(&w, r, v->name, NULL);
  w.gen_after = e->gen_at_inject;
  w.strictly = true;
  w.step_after = e->step_at_inject;
  e->t_inject = ea__chaos_now_ms();
  switch (f->kind) {
    case EA__F_NODE_CRASH:
    case EA__F_CONTROLLER_KILL:
      v->expect_death = true;
      ea__chaos_node_signal(r, v, SIGKILL, true);
      break;
    case EA__F_SIGTERM:
      v->expect_death = v->expect_exit0 = true;
      ea__chaos_node_signal(r, v, SIGTERM, false);
      w.gone = v->name;
      break;
    case EA__F_DRAIN: {
      ea__chaos_node *via = NULL;
      for (int s = 1; s <= r->o.nagents && !via; s++) {
        ea__chaos_node *n = ea__chaos_slot_node(r, s);
        if (ea__chaos_node_running(n) && n != v) via = n;
      }
      v->expect_death = v->expect_exit0 = true;
      w.gone = v->name;
      if (!via) break;
      char *argv[] = {r->o.agent_bin, "drain", v->name, "--data-dir", via->data, NULL};
      char out[512];
      int rc = ea__chaos_cmd(NULL, argv, r->log_path, 10000, out, sizeof out);
      out[strcspn(out, "\n")] = 0;
      ea__chaos_logf(r, "drain %s via %s: rc %d: %s", v->name, via->name, rc, out);
      if (rc != 0)
        ea__chaos_violate(r, EA__I_RECOVERY, "`elastic-agent drain %s` through %s failed (%d): %s",
                          v->name, via->name, rc, out);
      break;
    }
    default:
      break;
  }
  if (!ea__chaos_phase_wait(r, &e->deg, &w, e->t_inject, true, "degraded")) {
    ea__chaos_hang(r, e, "degraded", &w);
    if (ea__chaos_node_running(v) && (f->kind == EA__F_SIGTERM || f->kind == EA__F_DRAIN)) {
      /* It never left: end it so the restore can start clean. */
      v->expect_exit0 = false;
      ea__chaos_node_signal(r, v, SIGKILL, true);
      ea__chaos_wait_gone(r, v, 5000);
    }
  }
  if (ea__chaos_node_running(v) &&
      (f->kind == EA__F_NODE_CRASH || f->kind == EA__F_CONTROLLER_KILL))
    ea__chaos_wait_gone(r, v, 5000);
  restore_and_wait(r, e, v, f->fresh, e->deg.observed ? e->deg.gen : e->gen_at_inject,
                   e->deg.observed ? ea__chaos_cluster_step(r) : e->step_at_inject);
}

static void run_worker_kill(ea__chaos_run *r, ea__chaos_episode *e, ea__chaos_node *v) {
  pid_t kids[CH_MAX_WPN * 2];
  int nk = ea__chaos_children(v->pid, kids, CH_MAX_WPN * 2);
  if (nk <= 0) {
    e->state = EA__EP_SKIPPED;
    snprintf(e->skip_reason, sizeof e->skip_reason, "%s has no worker process to kill", v->name);
    return;
  }
  /* The k-th worker: match the pid against status to learn its index. */
  uint32_t idx = (uint32_t)(e->f.nth - 1) % (uint32_t)nk;
  pid_t victim = kids[idx];
  uint32_t widx = 0, before = 0;
  for (uint32_t k = 0; k < v->st.nworkers; k++)
    if (v->st.w[k].pid == victim) widx = k, before = v->st.w[k].restarts;
  ea__chaos_want w;
  ea__chaos_want_set(&w, r, NULL, NULL);
  w.gen_after = e->gen_at_inject;
  w.strictly = true;
  w.step_after = e->step_at_inject;
  w.worker_node = v->name;
  w.worker_idx = widx;
  w.restarts_before = before;
  e->t_inject = ea__chaos_now_ms();
  kill(victim, SIGKILL);
  ea__chaos_logf(r, "SIGKILL worker %u (pid %d) of %s", widx, (int)victim, v->name);
  snprintf(e->note, sizeof e->note, "worker %u pid %d", widx, (int)victim);
  e->deg.expected = false;
  e->deg.t_detect = e->deg.t_reform = e->deg.t_first_step = -1;
  if (!ea__chaos_phase_wait(r, &e->res, &w, e->t_inject, true, "restored"))
    ea__chaos_hang(r, e, "restored", &w);
}

/* Wait until t (wall ms), watching for the degraded cluster meanwhile. */
static void watch_until(ea__chaos_run *r, ea__chaos_phase *p, ea__chaos_want *w, int64_t t_end) {
  while (!ea__chaos_interrupted) {
    int64_t now = ea__chaos_now_ms();
    if (now >= t_end) break;
    if (!p->observed) {
      if (ea__chaos_wait_until(r, ea__chaos_mono_ms() + (t_end - now), ea__chaos_cond_formed, w)) {
        p->observed = true;
        p->t_seen = ea__chaos_now_ms();
        p->gen = w->gen_out;
        p->world = w->world_out;
        ea__chaos_say(r, "  degraded: world %u, generation %llu/%04llx, step %llu (%.2f s)",
                      w->world_out, (unsigned long long)ea_rdzv_gen64_term(w->gen_out),
                      (unsigned long long)(uint64_t)ea_rdzv_gen64_ctrl(w->gen_out),
                      (unsigned long long)w->step_out, (double)(p->t_seen - p->t_start) / 1000.0);
      }
    } else {
      ea__chaos_wait_until(r, ea__chaos_mono_ms() + (t_end - now), ea__chaos_never, NULL);
    }
  }
}

static void run_pause(ea__chaos_run *r, ea__chaos_episode *e, ea__chaos_node *v) {
  const ea__chaos_fault *f = &e->f;
  ea__chaos_want w;
  ea__chaos_want_set(&w, r, v->name, NULL);
  w.gen_after = e->gen_at_inject;
  w.strictly = true;
  w.step_after = e->step_at_inject;
  e->deg.t_start = e->t_inject = ea__chaos_now_ms();
  e->deg.bound_ms = r->bound_ms;
  e->deg.t_detect = e->deg.t_reform = e->deg.t_first_step = -1;
  ea__chaos_want_str(&w, e->deg.nodes, sizeof e->deg.nodes);
  /* A pause longer than detection plus a formation must end in a
   * re-formation without the node; a shorter one may be ridden out. */
  e->deg.expected = (int64_t)f->dur_ms > (int64_t)r->detection_bound_ms + 1500;
  v->stopped = true;
  v->stopped_workers = f->whole_node;
  ea__chaos_node_signal(r, v, SIGSTOP, f->whole_node);
  watch_until(r, &e->deg, &w, e->t_inject + f->dur_ms);
  e->t_heal = ea__chaos_now_ms();
  ea__chaos_node_signal(r, v, SIGCONT, f->whole_node);
  v->stopped = false;
  ea__chaos_add_span(r, v->name, e->t_inject, e->t_heal, 1);
  if (e->deg.expected && !e->deg.observed) {
    ea__chaos_hang(r, e, "degraded (re-form without the paused node)", &w);
    e->deg.timed_out = true;
  }
  if (!e->deg.observed)
    snprintf(e->note, sizeof e->note, "no re-formation during the %.1f s pause",
             f->dur_ms / 1000.0);
  ea__chaos_want_set(&w, r, NULL, NULL);
  w.gen_after = e->gen_at_inject;
  w.strictly = false;
  w.step_after = ea__chaos_cluster_step(r);
  if (!ea__chaos_phase_wait(r, &e->res, &w, e->t_heal, true, "restored"))
    ea__chaos_hang(r, e, "restored", &w);
}

/* After a network fault was healed: a degraded phase that was expected
 * and not seen is a hang (what: which); then every node must be back,
 * within the restore bound plus extra_ms. */
static void heal_and_restore(ea__chaos_run *r, ea__chaos_episode *e, ea__chaos_want *w,
                             const char *what, int64_t extra_ms, const char *held) {
  if (e->deg.expected && !e->deg.observed) {
    ea__chaos_hang(r, e, what, w);
    e->deg.timed_out = true;
  }
  ea__chaos_want_set(w, r, NULL, NULL);
  w->gen_after = e->gen_at_inject;
  w->strictly = false;
  w->step_after = ea__chaos_cluster_step(r);
  /* A hold the controller decides on pings lost before the heal may start
   * up to a link probe's verdict (two missed pings a second apart) after
   * it; one that starts later is not this fault's. */
  w->held_node = held;
  w->hold_from = e->t_heal + (int64_t)r->detection_bound_ms + 2000;
  r->bound_extra_ms = extra_ms;
  if (!ea__chaos_phase_wait(r, &e->res, w, e->t_heal, true, "restored"))
    ea__chaos_hang(r, e, "restored", w);
  r->bound_extra_ms = 0;
}

static void run_partition(ea__chaos_run *r, ea__chaos_episode *e, uint32_t minority, int loss) {
  const ea__chaos_fault *f = &e->f;
  ea__chaos_want w;
  memset(&w, 0, sizeof w);
  uint32_t drop[CH_MAX_SLOTS + 2] = {0};
  size_t off = 0;
  if (minority) {
    uint32_t all = 0;
    for (int s = 1; s <= r->nslots; s++) all |= 1u << s;
    for (int s = 1; s <= r->nslots; s++)
      drop[s] = (minority & (1u << s)) ? (all & ~minority) : minority;
    for (int s = 1; s <= r->o.nagents; s++) {
      ea__chaos_node *n = ea__chaos_slot_node(r, s);
      if (!n) continue;
      if (minority & (1u << s))
        off += (size_t)snprintf(e->minority + off, sizeof e->minority - off, "%s%s", off ? "," : "",
                                n->name);
      else
        snprintf(w.names[w.n++], CH_NAME_MAX, "%s", n->name);
    }
    qsort(w.names, (size_t)w.n, CH_NAME_MAX, ea__chaos_cmp_name);
    w.gen_after = e->gen_at_inject;
    w.strictly = true;
    w.step_after = e->step_at_inject;
  }
  e->deg.t_start = e->t_inject = ea__chaos_now_ms();
  e->deg.bound_ms = r->bound_ms;
  e->deg.t_detect = e->deg.t_reform = e->deg.t_first_step = -1;
  ea__chaos_want_str(&w, e->deg.nodes, sizeof e->deg.nodes);
  int rc = ea__chaos_net_rules(r, drop, loss);
  if (rc) ea__chaos_say(r, "  nft failed (%d): see %s", rc, r->log_path);
  if (minority) {
    /* Baseline for "the minority never trains": what each minority node
     * holds once the rules are in (a step already in flight may still
     * finish). */
    ea__chaos_sleep_ms(50);
    r->minority_mask = minority;
    for (int s = 1; s <= r->o.nagents; s++) {
      ea__chaos_node *n = ea__chaos_slot_node(r, s);
      if (!n || !(minority & (1u << s))) continue;
      ea__chaos_status st;
      n->steps_at_partition = ea__chaos_status_query(n->sock, EA__CHAOS_STATUS_TIMEOUT_MS, &st) == 0
                                  ? st.last_step
                                  : n->st.last_step;
      ea__chaos_add_span(r, n->name, e->t_inject, e->t_inject + f->dur_ms, 2);
    }
    r->partition_since = ea__chaos_now_ms();
    e->deg.expected = (int64_t)f->dur_ms > (int64_t)r->detection_bound_ms + 1500;
    watch_until(r, &e->deg, &w, e->t_inject + f->dur_ms);
  } else {
    e->deg.expected = false;
    ea__chaos_wait_until(r, ea__chaos_mono_ms() + f->dur_ms, ea__chaos_never, NULL);
    snprintf(e->note, sizeof e->note, "trained from step %llu to %llu during %d%% loss",
             (unsigned long long)e->step_at_inject, (unsigned long long)ea__chaos_cluster_step(r),
             loss);
  }
  e->t_heal = ea__chaos_now_ms();
  ea__chaos_net_heal(r);
  r->partition_since = 0;
  r->minority_mask = 0;
  /* The link probe may find an end of a lossy or cut link and the
   * controller hold it out (doubled for its earlier holds): as after a
   * one-way drop, the bound then runs from that hold's end. */
  heal_and_restore(r, e, &w, "degraded (the majority re-forms without the minority)", 0,
                   EA__CHAOS_ANY_HELD);
}

/* One-way loss between ring neighbours (issue 11, items 6 and 8): all that
 * a node sends to its right neighbour in the plan is dropped on the
 * neighbour's input chain, while gossip still reaches both through the
 * others.  The pair is the victim and its right neighbour, moved along the
 * ring to the first pair without the controller (its control messages to
 * the receiver would be lost too: another fault).  The controller holds
 * the receiver out after two failed generations (link blame: the end the
 * sender's failures name, docs/rendezvous.md), so the others must train
 * without it within the bound plus two communication timeouts (the op that
 * fails, then the new generation's connect), and, once healed, everyone
 * must be back within the restore bound plus the hold-out's cooldown
 * (doubled for each earlier hold of that node: four cooldowns cover
 * three). */
static void run_oneway(ea__chaos_run *r, ea__chaos_episode *e, ea__chaos_node *v) {
  const ea__chaos_fault *f = &e->f;
  ea__chaos_status st;
  ea__chaos_node *from = NULL, *to = NULL;
  if (v && ea__chaos_status_query(v->sock, EA__CHAOS_STATUS_TIMEOUT_MS, &st) == 0 &&
      st.nnodes >= 3) {
    int at = -1;
    for (uint32_t i = 0; i < st.nnodes; i++)
      if (!strcmp(st.nodes[i], v->name)) at = (int)i;
    for (uint32_t k = 0; at >= 0 && k < st.nnodes && !to; k++) {
      ea__chaos_node *a = NULL, *b = NULL;
      const char *na = st.nodes[((uint32_t)at + k) % st.nnodes];
      const char *nb = st.nodes[((uint32_t)at + k + 1) % st.nnodes];
      for (int s = 1; s <= r->nslots; s++) {
        ea__chaos_node *n = ea__chaos_slot_node(r, s);
        if (n && !strcmp(n->name, na)) a = n;
        if (n && !strcmp(n->name, nb)) b = n;
      }
      if (a && b && !a->st.controller && !b->st.controller) {
        from = a;
        to = b;
      }
    }
  }
  if (!to) {
    e->state = EA__EP_SKIPPED;
    snprintf(e->skip_reason, sizeof e->skip_reason,
             "no ring of 3 or more nodes with two neighbours that are not the controller");
    return;
  }
  /* Drop towards the higher name: the end held out is then the same
   * whichever finds the link first — the ring's BLAME holds out the
   * receiver (the end that acknowledges nothing), the link probe the higher
   * name of two ends that cannot reach each other (a one-way drop breaks
   * TCP both ways). */
  if (strcmp(from->name, to->name) > 0) {
    ea__chaos_node *x = from;
    from = to;
    to = x;
  }
  snprintf(e->victim, sizeof e->victim, "%s", to->name);
  const int64_t comm_ms = (int64_t)r->cfg.distributed.communication_timeout_seconds * 1000;
  ea__chaos_want w;
  ea__chaos_want_set(&w, r, to->name, NULL);
  w.gen_after = e->gen_at_inject;
  w.strictly = true;
  w.step_after = e->step_at_inject;
  uint32_t drop[CH_MAX_SLOTS + 2] = {0};
  drop[to->slot] = 1u << from->slot;
  e->deg.t_start = e->t_inject = ea__chaos_now_ms();
  e->deg.bound_ms = r->bound_ms + 2 * comm_ms;
  e->deg.t_detect = e->deg.t_reform = e->deg.t_first_step = -1;
  ea__chaos_want_str(&w, e->deg.nodes, sizeof e->deg.nodes);
  ea__chaos_say(r, "  dropping what %s sends to %s on %s's input", from->name, to->name, to->name);
  int rc = ea__chaos_net_rules(r, drop, 0);
  if (rc) ea__chaos_say(r, "  nft failed (%d): see %s", rc, r->log_path);
  ea__chaos_add_span(r, to->name, e->t_inject, e->t_inject + f->dur_ms, 2);
  e->deg.expected = (int64_t)f->dur_ms > e->deg.bound_ms;
  watch_until(r, &e->deg, &w, e->t_inject + f->dur_ms);
  e->t_heal = ea__chaos_now_ms();
  ea__chaos_net_heal(r);
  snprintf(e->note, sizeof e->note, "%s → %s dropped; %s", from->name, to->name,
           e->deg.observed ? "trained without the receiver" : "not re-formed without it");
  heal_and_restore(r, e, &w, "degraded (the others re-form without one end of the link)",
                   4 * (int64_t)r->cfg.runtime.flap_cooldown_seconds * 1000, e->victim);
}

void ea__chaos_run_join(ea__chaos_run *r, ea__chaos_episode *e, const char *via) {
  int s = r->o.nagents + 1;
  ea__chaos_node *n = ea__chaos_slot_new(r, s);
  if (!n) {
    e->state = EA__EP_SKIPPED;
    snprintf(e->skip_reason, sizeof e->skip_reason, "cannot create a node for slot %d", s);
    return;
  }
  if (via) snprintf(n->join_via, sizeof n->join_via, "%s", via);
  snprintf(e->victim, sizeof e->victim, "%s", n->name);
  ea__chaos_want w;
  ea__chaos_want_set(&w, r, NULL, n->name);
  w.gen_after = e->gen_at_inject;
  w.strictly = true;
  w.step_after = e->step_at_inject;
  e->t_inject = ea__chaos_now_ms();
  ea__chaos_node_start(r, n);
  if (!ea__chaos_phase_wait(r, &e->deg, &w, e->t_inject, true, "grown"))
    ea__chaos_hang(r, e, "grown (the newcomer trains)", &w);
  /* Scale back in. */
  uint64_t g1 = e->deg.observed ? e->deg.gen : e->gen_at_inject;
  e->t_restore = ea__chaos_now_ms();
  n->expect_death = n->expect_exit0 = true;
  if (e->f.remove_by_drain) {
    ea__chaos_node *via = ea__chaos_slot_node(r, 1);
    char *argv[] = {
        r->o.agent_bin, "drain", n->name, "--data-dir", via ? via->data : n->data, NULL};
    char out[512];
    int rc = ea__chaos_cmd(NULL, argv, r->log_path, 10000, out, sizeof out);
    out[strcspn(out, "\n")] = 0;
    if (rc != 0)
      ea__chaos_violate(r, EA__I_RECOVERY, "`elastic-agent drain %s` failed (%d): %s", n->name, rc,
                        out);
  } else {
    ea__chaos_node_signal(r, n, SIGTERM, false);
  }
  snprintf(e->newcomer, sizeof e->newcomer, "%s", n->name);
  ea__chaos_want_set(&w, r, NULL, NULL);
  w.gen_after = g1;
  w.strictly = true;
  w.step_after = ea__chaos_cluster_step(r);
  w.gone = n->name;
  if (!ea__chaos_phase_wait(r, &e->res, &w, e->t_restore, true, "restored")) {
    ea__chaos_hang(r, e, "restored (the newcomer left)", &w);
    if (ea__chaos_node_running(n)) {
      n->expect_exit0 = false;
      ea__chaos_node_signal(r, n, SIGKILL, true);
      ea__chaos_wait_gone(r, n, 5000);
    }
  }
  n->retired = true;
  r->slot_node[s] = -1;
}

/* Kill while a checkpoint shard is written: the victim restarts with the
 * checkpoint layer armed to write half of its n-th shard write and SIGKILL
 * itself (EA_CKPT_FAULT=torn:N:kill, docs/checkpoints.md); its death is the
 * fault. */
static bool cond_dead(ea__chaos_run *r, void *ctx) {
  (void)r;
  return !ea__chaos_node_running((ea__chaos_node *)ctx);
}

/* The armed node is back in a full generation — or already dead: its
 * first write under the fault may come before it rejoins (elected
 * controller again at once, it commits a checkpoint its predecessor
 * collected: soak seed 284935115, faults #12 and #92), which is the fault
 * firing early, not a hang. */
typedef struct {
  ea__chaos_want *w;
  ea__chaos_node *v;
} armed_ctx;

static bool cond_formed_or_dead(ea__chaos_run *r, void *ctx) {
  armed_ctx *a = ctx;
  return !ea__chaos_node_running(a->v) || ea__chaos_cond_formed(r, a->w);
}

static void run_ckpt_kill(ea__chaos_run *r, ea__chaos_episode *e, ea__chaos_node *v) {
  /* Stop it gracefully (SIGTERM: drain, leave) rather than kill it, so it
   * is an ordinary joiner at once when it comes back armed (a crashed node
   * may first sit out a rendezvous timeout). */
  v->expect_death = v->expect_exit0 = true;
  ea__chaos_node_signal(r, v, SIGTERM, false);
  if (!ea__chaos_wait_gone(r, v, (int)r->bound_ms)) {
    v->expect_exit0 = false;
    ea__chaos_node_signal(r, v, SIGKILL, true);
    ea__chaos_wait_gone(r, v, 5000);
  }
  snprintf(v->ckpt_fault, sizeof v->ckpt_fault, "torn:%d:kill", e->f.nth);
  ea__chaos_node_start(r, v);
  v->expect_death = true; /* armed to die */
  ea__chaos_want w;
  ea__chaos_want_set(&w, r, NULL, NULL);
  armed_ctx ac = {.w = &w, .v = v};
  if (!ea__chaos_wait_until(r, ea__chaos_mono_ms() + r->bound_restore_ms, cond_formed_or_dead,
                            &ac)) {
    ea__chaos_hang(r, e, "restored (the armed node rejoins before its checkpoint)", &w);
    return;
  }
  uint64_t interval =
      r->cfg.checkpoint.save_interval_steps ? r->cfg.checkpoint.save_interval_steps : 100;
  double rate = r->calib_rate > 1 ? r->calib_rate : 100;
  int64_t wait_ms = (int64_t)((double)interval * (e->f.nth + 1) / rate * 1000.0 * 3) + r->bound_ms;
  if (!ea__chaos_wait_until(r, ea__chaos_mono_ms() + wait_ms, cond_dead, v)) {
    snprintf(e->note, sizeof e->note, "%s did not die at its shard write #%d within %.1f s",
             v->name, e->f.nth, wait_ms / 1000.0);
    e->state = EA__EP_SKIPPED;
    snprintf(e->skip_reason, sizeof e->skip_reason, "%.199s", e->note);
    v->expect_death = true;
    ea__chaos_node_signal(r, v, SIGKILL, true);
    ea__chaos_wait_gone(r, v, 5000);
    v->ckpt_fault[0] = 0;
    ea__chaos_node_start(r, v);
    return;
  }
  e->t_inject = v->exit_ms;
  e->step_at_inject = r->max_cluster_step;
  ea__chaos_want_set(&w, r, v->name, NULL);
  w.gen_after = e->gen_at_inject;
  w.strictly = true;
  w.step_after = 0;
  if (!ea__chaos_phase_wait(r, &e->deg, &w, e->t_inject, true, "degraded"))
    ea__chaos_hang(r, e, "degraded", &w);
  restore_and_wait(r, e, v, e->f.fresh, e->deg.observed ? e->deg.gen : e->gen_at_inject,
                   ea__chaos_cluster_step(r));
}

static int fill_disk(const char *dir, char *path, size_t cap) {
  snprintf(path, cap, "%s/.chaos-ballast", dir);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return -errno;
  static char block[1 << 16];
  for (;;) {
    ssize_t w = write(fd, block, sizeof block);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break; /* ENOSPC: full */
  }
  fsync(fd);
  close(fd);
  return 0;
}

static bool cond_new_ckpt(ea__chaos_run *r, void *ctx) {
  return r->latest_step > *(uint64_t *)ctx;
}

static void run_disk_full(ea__chaos_run *r, ea__chaos_episode *e) {
  char ballast[CH_PATH_MAX + 32];
  e->t_inject = ea__chaos_now_ms();
  uint64_t latest_before = r->latest_step;
  if (fill_disk(r->ckpt_dir, ballast, sizeof ballast) < 0) {
    e->state = EA__EP_SKIPPED;
    snprintf(e->skip_reason, sizeof e->skip_reason, "could not fill %.150s", r->ckpt_dir);
    return;
  }
  e->deg.expected = false;
  e->deg.t_start = e->t_inject;
  e->deg.t_detect = e->deg.t_reform = e->deg.t_first_step = -1;
  ea__chaos_wait_until(r, ea__chaos_mono_ms() + e->f.dur_ms, ea__chaos_never, NULL);
  uint64_t s_full = ea__chaos_cluster_step(r);
  e->t_heal = ea__chaos_now_ms();
  unlink(ballast);
  snprintf(e->note, sizeof e->note,
           "trained from step %llu to %llu with a full disk; LATEST %llu -> %llu",
           (unsigned long long)e->step_at_inject, (unsigned long long)s_full,
           (unsigned long long)latest_before, (unsigned long long)r->latest_step);
  if (s_full <= e->step_at_inject + 1)
    ea__chaos_violate(r, EA__I_RECOVERY,
                      "training stood still while the checkpoint disk was full (step %llu)",
                      (unsigned long long)s_full);
  /* Freed: the next checkpoint must commit. */
  uint64_t after = r->latest_step > s_full ? r->latest_step : s_full;
  e->res.expected = true;
  e->res.t_start = e->t_heal;
  e->res.bound_ms = r->bound_ms;
  e->res.t_detect = e->res.t_reform = e->res.t_first_step = -1;
  uint64_t interval =
      r->cfg.checkpoint.save_interval_steps ? r->cfg.checkpoint.save_interval_steps : 100;
  double rate = r->calib_rate > 1 ? r->calib_rate : 100;
  int64_t wait_ms = (int64_t)((double)interval * 2 / rate * 1000.0) + r->bound_ms;
  if (ea__chaos_wait_until(r, ea__chaos_mono_ms() + wait_ms, cond_new_ckpt, &after)) {
    e->res.observed = true;
    e->res.t_seen = ea__chaos_now_ms();
    ea__chaos_say(r, "  a checkpoint committed again after the disk was freed: step %llu",
                  (unsigned long long)r->latest_step);
  } else {
    e->res.timed_out = true;
    ea__chaos_violate(r, EA__I_RECOVERY,
                      "no checkpoint committed within %.1f s after the disk was freed",
                      wait_ms / 1000.0);
  }
}

/* An agent of another cluster (issue 11, items 3 and 8): the ordinary
 * misconfiguration of an agent started with another key, --join pointing
 * at the cluster and the same checkpoint.dir, whose job (min_nodes 1)
 * would train alone if it could.  It is no node of the harness (it takes
 * part in no invariant but this one): started in the spare slot's
 * namespace, watched for the fault's window, then SIGKILLed.  Without
 * --bootstrap it must wait to join and start no job; with it, it forms a
 * cluster of its own and must refuse the cluster's checkpoint.dir (once
 * the directory has the cluster's CLUSTER file).  Either way no node of
 * the cluster may ever list it in a generation, the cluster keeps training
 * at full strength, and DIR/CLUSTER stays the cluster's. */
static bool cond_stranger_listed(ea__chaos_run *r, void *ctx) {
  const char *name = ctx;
  for (int s = 1; s <= r->o.nagents; s++) {
    ea__chaos_node *n = ea__chaos_slot_node(r, s);
    if (!n || !n->st.ok) continue;
    for (uint32_t i = 0; i < n->st.nnodes; i++)
      if (!strcmp(n->st.nodes[i], name)) return true;
  }
  return false;
}

static bool cond_pid_gone(ea__chaos_run *r, void *ctx) {
  (void)r;
  return !ea__chaos_pid_alive(*(pid_t *)ctx);
}

static bool log_has(const char *path, const char *what) {
  char *text = NULL;
  size_t len = 0;
  if (ea__chaos_read_file(path, &text, &len) < 0) return false;
  bool has = strstr(text, what) != NULL;
  free(text);
  return has;
}

static void run_foreign(ea__chaos_run *r, ea__chaos_episode *e) {
  const ea__chaos_fault *f = &e->f;
  const int s = r->o.nagents + 1;
  static int count;
  char name[CH_NAME_MAX], dir[CH_PATH_MAX], data[CH_PATH_MAX + 8], key[CH_PATH_MAX + 16],
      log[CH_PATH_MAX + 16], sock[CH_PATH_MAX + 24], cl[CH_PATH_MAX + 16];
  snprintf(name, sizeof name, "stranger%d", ++count);
  snprintf(dir, sizeof dir, "%s/%s", r->o.work, name);
  snprintf(data, sizeof data, "%s/d", dir);
  snprintf(key, sizeof key, "%s/other.key", dir);
  snprintf(log, sizeof log, "%s/agent.log", dir);
  snprintf(sock, sizeof sock, "%s/admin.sock", data);
  snprintf(cl, sizeof cl, "%s/CLUSTER", r->ckpt_dir);
  snprintf(e->victim, sizeof e->victim, "%s", name);
  char out[512] = "";
  char *kargv[] = {r->o.agent_bin, "keygen", key, NULL};
  if (ea__chaos_mkdirs(data, 0700) < 0 ||
      ea__chaos_cmd(NULL, kargv, r->log_path, 10000, out, sizeof out) != 0) {
    e->state = EA__EP_SKIPPED;
    snprintf(e->skip_reason, sizeof e->skip_reason, "cannot make %.150s and a key in it", dir);
    return;
  }
  char *before = NULL, *after = NULL;
  size_t nbefore = 0, nafter = 0;
  const bool claimed = ea__chaos_read_file(cl, &before, &nbefore) == 0;
  char bind[64], seeds[256] = "";
  if (r->o.netns)
    snprintf(bind, sizeof bind, "%s:7000", r->ip[s]);
  else
    snprintf(bind, sizeof bind, "127.0.0.1:0");
  for (int t = 1; t <= r->o.nagents; t++) {
    ea__chaos_node *n = ea__chaos_slot_node(r, t);
    if (!ea__chaos_node_running(n)) continue;
    if (r->o.netns)
      snprintf(seeds, sizeof seeds, "%s:7000", r->ip[t]);
    else if (n->gossip[0])
      snprintf(seeds, sizeof seeds, "%s", n->gossip);
    if (seeds[0]) break;
  }
  char *argv[] = {r->o.agent_bin,
                  "run",
                  "--name",
                  name,
                  "--data-dir",
                  data,
                  "--config",
                  r->job_path,
                  "--set",
                  "compute.min_nodes=1",
                  "--log-format",
                  "text",
                  "--key-file",
                  key,
                  "--bind",
                  bind,
                  "--join",
                  seeds,
                  f->fresh ? "--bootstrap" : NULL,
                  NULL};
  pid_t pid = 0;
  e->t_inject = ea__chaos_now_ms();
  int rc = ea__chaos_spawn(argv, r->o.netns ? r->ns[s] : NULL, log, NULL, &pid);
  if (rc < 0) {
    free(before);
    e->state = EA__EP_SKIPPED;
    snprintf(e->skip_reason, sizeof e->skip_reason, "cannot start %s: %s", name, strerror(-rc));
    return;
  }
  ea__chaos_logf(r, "started stranger %s pid %d bind %s join [%s]%s", name, (int)pid, bind, seeds,
                 f->fresh ? " --bootstrap" : "");
  const uint64_t step0 = ea__chaos_cluster_step(r);
  if (ea__chaos_wait_until(r, ea__chaos_mono_ms() + f->dur_ms, cond_stranger_listed, name))
    ea__chaos_violate(r, EA__I_FOREIGN, "%s (another key) is listed in a generation of the cluster",
                      name);
  ea__chaos_status st;
  const bool answered = ea__chaos_status_query(sock, EA__CHAOS_STATUS_TIMEOUT_MS, &st) == 0;
  const bool alive = ea__chaos_pid_alive(pid);
  if (alive) kill(pid, SIGKILL);
  /* the harness's loop reaps it (an unknown pid to on_reap) */
  ea__chaos_wait_until(r, ea__chaos_mono_ms() + 5000, cond_pid_gone, &pid);
  e->t_heal = ea__chaos_now_ms();
  const uint64_t step1 = ea__chaos_cluster_step(r);
  if (step1 <= step0 + 1)
    ea__chaos_violate(r, EA__I_RECOVERY, "training stood still while %s tried to join (step %llu)",
                      name, (unsigned long long)step1);
  if (!f->fresh) {
    /* no job of its own: the gate holds it while no seed answers */
    if (!log_has(log, "waiting to join"))
      ea__chaos_violate(r, EA__I_FOREIGN,
                        "%s (--join, no --bootstrap) never said it waits to join: %s", name, log);
    if (answered && st.gen != 0)
      ea__chaos_violate(r, EA__I_FOREIGN,
                        "%s (--join, no --bootstrap) runs generation %llx of its own", name,
                        (unsigned long long)st.gen);
  } else if (claimed && !log_has(log, "refusing to")) {
    ea__chaos_violate(r, EA__I_FOREIGN,
                      "%s (--bootstrap) did not refuse the cluster's checkpoint.dir %s: %s", name,
                      r->ckpt_dir, log);
  }
  if (claimed && (ea__chaos_read_file(cl, &after, &nafter) < 0 || nafter != nbefore ||
                  memcmp(before, after, nbefore) != 0))
    ea__chaos_violate(r, EA__I_FOREIGN, "%s changed or removed %s", name, cl);
  free(before);
  free(after);
  snprintf(e->note, sizeof e->note, "%s%s: %s; the cluster trained from step %llu to %llu", name,
           f->fresh ? " (--bootstrap)" : "",
           !answered ? (alive ? "no status" : "exited by itself")
           : st.gen  ? "formed a cluster of its own"
                     : "waited to join",
           (unsigned long long)step0, (unsigned long long)step1);
  ea__chaos_say(r, "  %s", e->note);
}

void ea__chaos_episode_run(ea__chaos_run *r, ea__chaos_episode *e) {
  const ea__chaos_fault *f = &e->f;
  char desc[256];
  ea__chaos_fault_str(f, desc, sizeof desc);
  if (ea__chaos_kind_needs_netns(f->kind) && !r->o.netns) {
    e->state = EA__EP_SKIPPED;
    snprintf(
        e->skip_reason, sizeof e->skip_reason,
        "needs --netns (root): on one loopback interface a partition or loss cannot be made real");
  } else if (ea__chaos_kind_needs_ckpt(f->kind) && !r->ckpt_available) {
    e->state = EA__EP_SKIPPED;
    snprintf(e->skip_reason, sizeof e->skip_reason, "%s", r->ckpt_why);
  } else if (f->kind == EA__F_DISK_FULL && !r->tmpfs_ckpt) {
    e->state = EA__EP_SKIPPED;
    snprintf(e->skip_reason, sizeof e->skip_reason,
             "needs root: the harness mounts a small tmpfs on the checkpoint dir to fill it");
  } else if (f->kind == EA__F_PREEMPT && !r->notice_port) {
    e->state = EA__EP_SKIPPED;
    snprintf(e->skip_reason, sizeof e->skip_reason,
             "the fake metadata service did not start (harness.log says why)");
  } else if (f->kind == EA__F_PREEMPT && f->whole_node &&
             (!r->ckpt_available || !r->cfg.checkpoint.save_interval_steps ||
              !r->cfg.runtime.preemption_grace_seconds)) {
    e->state = EA__EP_SKIPPED;
    snprintf(e->skip_reason, sizeof e->skip_reason, "%s",
             !r->ckpt_available ? r->ckpt_why
                                : "the job has checkpoint.save_interval_steps or "
                                  "runtime.preemption_grace_seconds 0: no checkpoint before a "
                                  "mass preemption");
  } else if (f->kind == EA__F_SPARE && r->cfg.compute.max_nodes != (uint32_t)r->o.nagents &&
             r->cfg.compute.max_nodes != (uint32_t)r->o.nagents + 1) {
    e->state = EA__EP_SKIPPED;
    snprintf(e->skip_reason, sizeof e->skip_reason,
             "compute.max_nodes is %u: spare churn needs it at the agents (%d) or one more, "
             "so that a node beyond it waits as a spare",
             r->cfg.compute.max_nodes, r->o.nagents);
  } else if ((f->kind == EA__F_JOIN || f->kind == EA__F_JOIN_FLOOD) &&
             (uint32_t)r->o.nagents + 1 > r->cfg.compute.max_nodes) {
    e->state = EA__EP_SKIPPED;
    snprintf(e->skip_reason, sizeof e->skip_reason,
             "compute.max_nodes is %u: a joiner would only be a spare", r->cfg.compute.max_nodes);
  }
  if (e->state == EA__EP_SKIPPED) {
    ea__chaos_say(r, "fault #%d %s: skipped: %s", (int)(e - r->eps) + 1,
                  ea__chaos_kind_name(f->kind), e->skip_reason);
    return;
  }
  if (!ea__chaos_ensure_whole(r)) {
    e->state = EA__EP_NOT_RUN;
    snprintf(e->skip_reason, sizeof e->skip_reason, "the cluster was not whole before the fault");
    ea__chaos_want w;
    ea__chaos_want_set(&w, r, NULL, NULL);
    char st[900];
    ea__chaos_cluster_state(r, &w, st, sizeof st);
    ea__chaos_violate(r, EA__I_RECOVERY,
                      "before fault #%d the cluster did not return to world %u: %s",
                      (int)(e - r->eps) + 1, (unsigned)r->o.nagents * ea__chaos_wpn(r), st);
    r->aborted = true;
    snprintf(r->abort_why, sizeof r->abort_why,
             "the cluster did not return to world %u before fault #%d",
             (unsigned)r->o.nagents * ea__chaos_wpn(r), (int)(e - r->eps) + 1);
    return;
  }
  /* The state the fault hits. */
  ea__chaos_node *any = ea__chaos_slot_node(r, 1);
  e->gen_at_inject = any ? any->st.gen : 0;
  e->step_at_inject = ea__chaos_cluster_step(r);
  ea__chaos_node *v = NULL;
  if (f->kind == EA__F_CONTROLLER_KILL) {
    for (int s = 1; s <= r->o.nagents && !v; s++) {
      ea__chaos_node *n = ea__chaos_slot_node(r, s);
      if (ea__chaos_node_running(n) && n->st.ok && n->st.controller && n->st.has_quorum) v = n;
    }
    if (!v) {
      e->state = EA__EP_SKIPPED;
      snprintf(e->skip_reason, sizeof e->skip_reason,
               "no agent said it was controller with quorum");
      return;
    }
  } else if (f->slot >= 1 && f->slot <= r->o.nagents) {
    v = ea__chaos_slot_node(r, f->slot);
  }
  if (v) {
    snprintf(e->victim, sizeof e->victim, "%s", v->name);
    e->victim_was_controller = v->st.controller && v->st.has_quorum;
  }
  r->injected++;
  e->state = EA__EP_DONE;
  ea__chaos_say(r, "fault #%d at step %llu: %s%s%s%s", (int)(e - r->eps) + 1,
                (unsigned long long)e->step_at_inject, desc, v ? " → " : "", v ? v->name : "",
                e->victim_was_controller ? " (controller)" : "");
  switch (f->kind) {
    case EA__F_NODE_CRASH:
    case EA__F_CONTROLLER_KILL:
    case EA__F_DRAIN:
    case EA__F_SIGTERM:
      run_remove(r, e, v);
      break;
    case EA__F_WORKER_KILL:
      run_worker_kill(r, e, v);
      break;
    case EA__F_PAUSE:
      run_pause(r, e, v);
      break;
    case EA__F_JOIN:
      ea__chaos_run_join(r, e, NULL);
      break;
    case EA__F_JOIN_FLOOD:
      ea__chaos_run_join_flood(r, e, v);
      break;
    case EA__F_HTTP_FLOOD:
      ea__chaos_run_http_flood(r, e, v);
      break;
    case EA__F_ISOLATE:
      run_partition(r, e, 1u << f->slot, 0);
      break;
    case EA__F_SPLIT:
      run_partition(r, e, f->minority, 0);
      break;
    case EA__F_LOSS:
      run_partition(r, e, 0, f->loss_pct);
      break;
    case EA__F_ONEWAY:
      run_oneway(r, e, v);
      break;
    case EA__F_CKPT_KILL:
      run_ckpt_kill(r, e, v);
      break;
    case EA__F_DISK_FULL:
      run_disk_full(r, e);
      break;
    case EA__F_FOREIGN:
      run_foreign(r, e);
      break;
    case EA__F_PREEMPT:
      ea__chaos_run_preempt(r, e, v);
      break;
    case EA__F_SPARE:
      ea__chaos_run_spare(r, e, v);
      break;
    default:
      break;
  }
  if (e->state == EA__EP_SKIPPED) r->injected--;
  e->t_end = ea__chaos_now_ms();
  /* Settle: a few steps at full strength before anything else happens. */
  uint64_t s = ea__chaos_cluster_step(r);
  ea__chaos_want w;
  ea__chaos_want_set(&w, r, NULL, NULL);
  w.step_after = s + SETTLE_STEPS;
  ea__chaos_wait_until(r, ea__chaos_mono_ms() + r->bound_ms, ea__chaos_cond_formed, &w);
}
