/* job_pace.c — the job's pace: each rank's compute time to the controller,
 * and the controller's straggler alert and eviction.
 *
 * Every agent adds up its workers' step.compute_seconds (the forward and
 * backward of a step, without the allreduce, where every rank waits for the
 * slowest) and, once a second while it runs a generation, sends each local
 * rank's mean to the controller in one JOB_PACE (agent/job/job_wire.c); the
 * controller's own go to its detector directly.  The controller judges
 * once a second with the pure detector (rdzv/straggler.c): a node with a
 * straggling rank is one `straggler` alert (subject: the node), shown in
 * status; with observability.straggler_evict it is also held out of
 * generations (ea_rdzv_hold_out: runtime.flap_cooldown_seconds, doubled on
 * each repeat) and the job re-forms without it.  The alert resolves once
 * its ranks are back under the factor, or have not been judged for a few
 * seconds (it left the generation).  Only the controller says it, so it is
 * said once; a controller that loses the role resolves what it raised and
 * forgets its samples (the new one judges afresh).
 *
 * A second is the rendezvous' REPORT pace: one small frame per node per
 * second at the controller, and a window (straggler_window_seconds, 30 by
 * default) holds tens of samples.
 */
#include "agent_int.h"

#include "ea_log.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Nodes a straggler alert is firing for at once; more share the oldest's
 * slot (the alert registry keeps FIRING_MAX conditions in all). */
#define FIRED_MAX 16

typedef struct {
  uint64_t gen; /* the generation its steps belong to (u64 form) */
  double sum;
  uint32_t n;
} acc;

typedef struct {
  ea_node_id id;
  char name[EA_NAME_MAX];
  uint64_t last_slow_ms;
} fired;

struct ea__agent_pace {
  ea__agent *a;
  ea_rdzv_strag *det;
  acc acc[EA_RDZV_MAX_WPN];
  bool ctrl; /* controlled at the last tick */
  fired fired[FIRED_MAX];
  size_t nfired;
  uint64_t sent, received, refused, evictions;
};

static bool controls(ea__agent *a) {
  const ea_election *el = a->rdzv ? ea_rdzv_election(a->rdzv) : NULL;
  return el && el->have && ea_node_id_cmp(&el->controller, &a->id) == 0;
}

void ea__agent_pace_step(ea__agent *a, uint32_t k, const ea_ipc_msg *m) {
  struct ea__agent_pace *p = a->pace;
  if (!p || k >= EA_RDZV_MAX_WPN || !m->has_compute_seconds || !isfinite(m->compute_seconds) ||
      m->compute_seconds < 0)
    return;
  acc *x = &p->acc[k];
  if (x->gen != m->gen) *x = (acc){.gen = m->gen};
  x->sum += m->compute_seconds;
  x->n++;
}

/* A JOB_PACE from src (ours included) as controller: into the detector. */
static void take(struct ea__agent_pace *p, uint64_t now, const ea_node_id *src,
                 const ea__job_msg *m) {
  for (uint32_t i = 0; i < m->npace; i++) {
    int rc = ea_rdzv_strag_sample(p->det, now, m->gen, m->world, m->pace[i].rank, src,
                                  m->pace[i].compute_s);
    if (rc == 0)
      p->received++;
    else
      p->refused++; /* an older generation's, after a re-formation */
  }
}

static void job_pace(void *ctx, const ea__job_msg *m) {
  ea__agent *a = ctx;
  if (a->pace && controls(a)) take(a->pace, ea__agent_now_ms(a), &m->src, m);
}

/* Our ranks' means of the last second, to the controller. */
static void send_ours(struct ea__agent_pace *p, uint64_t now) {
  ea__agent *a = p->a;
  ea__job_msg m = {.type = EA__JOB_PACE, .src = a->id};
  if (a->run.active) {
    m.gen = a->run.g64;
    m.world = a->run.world;
    for (uint32_t k = 0; k < a->wpn && k < EA_RDZV_MAX_WPN; k++) {
      acc *x = &p->acc[k];
      if (x->n && x->gen == a->run.g64 && a->run.rank_base + k < a->run.world)
        m.pace[m.npace++] = (ea__job_pace){a->run.rank_base + k, x->sum / x->n};
    }
  }
  for (uint32_t k = 0; k < EA_RDZV_MAX_WPN; k++) p->acc[k].sum = 0, p->acc[k].n = 0;
  if (!m.npace || !m.gen) return;
  const ea_election *el = ea_rdzv_election(a->rdzv);
  if (!el || !el->have) return;
  if (ea_node_id_cmp(&el->controller, &a->id) == 0) {
    take(p, now, &a->id, &m);
    return;
  }
  const ea_member *c = ea__agent_find_member(a, &el->controller);
  uint8_t buf[EA__JOB_WIRE_MAX];
  size_t len;
  if (!c || !a->ctl || ea__job_encode(&m, buf, sizeof buf, &len) != 0) return;
  ea__ctl_send_bytes(a->ctl, &el->controller, &c->meta.control, buf, len);
  p->sent++;
}

static int find_fired(const struct ea__agent_pace *p, const ea_node_id *id) {
  for (size_t i = 0; i < p->nfired; i++)
    if (ea_node_id_cmp(&p->fired[i].id, id) == 0) return (int)i;
  return -1;
}

static void unfire(struct ea__agent_pace *p, size_t i, const char *why) {
  ea__agent_alert_resolve(p->a, EA__ALERT_STRAGGLER, p->fired[i].name, "straggler %s resolved: %s",
                          p->fired[i].name, why);
  p->fired[i] = p->fired[--p->nfired];
}

static void evict(struct ea__agent_pace *p, const fired *f, const char *text, uint64_t now) {
  ea__agent *a = p->a;
  if (ea_rdzv_is_held(a->rdzv, &f->id)) return;
  int rc = ea__agent_do1(
      a,
      (ea__intent){
          .kind = EA__DO_HOLD_OUT, .node = &f->id, .hold = EA_RDZV_HOLD_STRAGGLER, .text = text});
  if (rc == -EINVAL)
    ea_log(EA_LOG_WARN, "rdzv",
           "straggler %s is the controller, which never holds itself out: not evicted", f->name);
  if (rc == 0) {
    p->evictions++;
    ea_rdzv_held h[8];
    size_t n = ea_rdzv_held_out(a->rdzv, h, 8);
    for (size_t i = 0; i < n && i < 8; i++)
      if (ea_node_id_cmp(&h[i].id, &f->id) == 0)
        ea_log(EA_LOG_WARN, "rdzv",
               "straggler %s held out for %" PRIu64
               " s (observability.straggler_evict, hold-out %u)",
               f->name, (h[i].until_ms - now + 999) / 1000, h[i].holds);
  }
}

/* As controller: judge, and make the alerts say what the detector says. */
static void judge(struct ea__agent_pace *p, uint64_t now) {
  ea__agent *a = p->a;
  if (!controls(a)) {
    if (p->ctrl) {
      while (p->nfired) unfire(p, p->nfired - 1, "this node no longer controls the job");
      ea_rdzv_strag_reset(p->det);
    }
    p->ctrl = false;
    return;
  }
  p->ctrl = true;
  ea_rdzv_strag_eval(p->det, now);
  uint32_t nfresh;
  double med = ea_rdzv_strag_median(p->det, &nfresh);
  const ea_rdzv_strag_rank *r;
  size_t world = ea_rdzv_strag_ranks(p->det, &r);
  const ea__agent_opts *o = a->o;
  for (size_t i = 0; i < world; i++) {
    if (!r[i].slow) continue;
    int k = find_fired(p, &r[i].node);
    if (k >= 0) p->fired[k].last_slow_ms = now;
    if (k >= 0 || !r[i].straggler) continue;
    if (p->nfired == FIRED_MAX) continue; /* the registry could not hold more anyway */
    fired *f = &p->fired[p->nfired++];
    f->id = r[i].node;
    snprintf(f->name, sizeof f->name, "%s",
             ea__agent_member_name(ea__agent_find_member(a, &r[i].node)));
    f->last_slow_ms = now;
    char text[128];
    snprintf(text, sizeof text, "rank %zu at %.1fx the median compute time for %" PRIu64 " s", i,
             med > 0 ? r[i].compute_s / med : 0.0, (now - r[i].slow_since_ms) / 1000);
    ea__agent_alert(a, EA__ALERT_STRAGGLER, EA__SEV_WARNING, f->name,
                    "straggler: rank %zu on %s computes a step in %.4f s, %.1fx the median %.4f s "
                    "of %u ranks, for %" PRIu64 " s (straggler_factor %g)%s",
                    i, f->name, r[i].compute_s, med > 0 ? r[i].compute_s / med : 0.0, med, nfresh,
                    (now - r[i].slow_since_ms) / 1000, o->cfg.observability.straggler_factor,
                    o->cfg.observability.straggler_evict ? "; evicting it" : "");
    if (o->cfg.observability.straggler_evict) evict(p, f, text, now);
  }
  /* Resolved: a judged rank of it is back under the factor and none is
   * slow, or none of it has been judged slow for a few seconds (it left the
   * generation, was held out, or stopped reporting). */
  for (size_t i = 0; i < p->nfired;) {
    fired *f = &p->fired[i];
    bool slow = false, ok = false;
    for (size_t j = 0; j < world; j++) {
      if (!r[j].have || ea_node_id_cmp(&r[j].node, &f->id) != 0) continue;
      if (r[j].slow) slow = true;
      if (!r[j].slow && now - r[j].at_ms <= EA_RDZV_STRAG_STALE_MS && nfresh >= 2) ok = true;
    }
    if (!slow && (ok || now - f->last_slow_ms > EA_RDZV_STRAG_STALE_MS)) {
      char why[160];
      if (ea_rdzv_is_held(a->rdzv, &f->id))
        snprintf(why, sizeof why, "held out of the generation (observability.straggler_evict)");
      else if (ok)
        snprintf(why, sizeof why, "back within %gx the median compute time",
                 o->cfg.observability.straggler_factor);
      else
        snprintf(why, sizeof why, "no longer judged (left the generation or stopped stepping)");
      unfire(p, i, why);
    } else {
      i++;
    }
  }
}

void ea__agent_pace_tick(ea__agent *a) {
  struct ea__agent_pace *p = a->pace;
  if (!p || a->phase == EA__PHASE_CLOSING || !a->rdzv) return;
  uint64_t now = ea__agent_now_ms(a);
  send_ours(p, now);
  judge(p, now);
}

int ea__agent_pace_start(ea__agent *a, char *err, size_t errlen) {
  struct ea__agent_pace *p = calloc(1, sizeof *p);
  const ea_config *c = &a->o->cfg;
  if (p)
    p->det = ea_rdzv_strag_new(c->observability.straggler_factor,
                               c->observability.straggler_window_seconds * 1000u);
  if (!p || !p->det) {
    free(p);
    snprintf(err, errlen, "straggler detector: out of memory or a bad straggler_factor");
    return -ENOMEM;
  }
  p->a = a;
  a->pace = p;
  return 0;
}

void ea__agent_pace_close(ea__agent *a) {
  struct ea__agent_pace *p = a->pace;
  if (!p) return;
  a->pace = NULL;
  ea_rdzv_strag_free(p->det);
  free(p);
}

void ea__agent_pace_status(ea__agent *a, ea_jb *b, json_t *doc) {
  struct ea__agent_pace *p = a->pace;
  const ea_config *c = &a->o->cfg;
  json_t *o = ea_jb_obj(b, doc, "stragglers");
  ea_jb_fixed(b, o, "factor", c->observability.straggler_factor, 3);
  ea_jb_u64(b, o, "window_s", c->observability.straggler_window_seconds);
  ea_jb_bool(b, o, "evict", c->observability.straggler_evict);
  bool judging = p && controls(a);
  ea_jb_bool(b, o, "judged_here", judging);
  json_t *slow = ea_jb_arr(b, o, "slow");
  if (!p) return;
  ea_jb_u64(b, o, "reports_sent", p->sent);
  ea_jb_u64(b, o, "samples", p->received);
  ea_jb_u64(b, o, "samples_refused", p->refused);
  ea_jb_u64(b, o, "evictions", p->evictions);
  if (!judging) return;
  uint32_t nfresh;
  double med = ea_rdzv_strag_median(p->det, &nfresh);
  ea_jb_u64(b, o, "generation", ea_rdzv_gen64_term(ea_rdzv_strag_gen(p->det)));
  ea_jb_u64(b, o, "ranks_judged", nfresh);
  ea_jb_fixed(b, o, "median_s", med, 6);
  const ea_rdzv_strag_rank *r;
  size_t world = ea_rdzv_strag_ranks(p->det, &r);
  uint64_t now = ea__agent_now_ms(a);
  for (size_t i = 0; i < world; i++) {
    if (!r[i].slow) continue;
    json_t *x = ea_jb_obj(b, slow, NULL);
    ea_jb_u64(b, x, "rank", i);
    ea_jb_str(b, x, "node", ea__agent_member_name(ea__agent_find_member(a, &r[i].node)));
    ea_jb_fixed(b, x, "compute_s", r[i].compute_s, 6);
    ea_jb_fixed(b, x, "ratio", med > 0 ? r[i].compute_s / med : 0, 2);
    ea_jb_fixed(b, x, "slow_for_s", (double)(now - r[i].slow_since_ms) / 1000.0, 1);
    ea_jb_bool(b, x, "straggler", r[i].straggler);
  }
}

uint32_t ea__agent_pace_stragglers(ea__agent *a) {
  struct ea__agent_pace *p = a->pace;
  if (!p || !controls(a)) return 0;
  const ea_rdzv_strag_rank *r;
  size_t world = ea_rdzv_strag_ranks(p->det, &r);
  uint32_t n = 0;
  for (size_t i = 0; i < world; i++) n += r[i].straggler;
  return n;
}

void ea__agent_pace_wire(ea__job_cbs *cb) {
  cb->pace = job_pace;
}
