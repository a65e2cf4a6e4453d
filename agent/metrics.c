/* Metrics, progress, stalls and readiness: what /metrics, /healthz and
 * /readyz answer, and the parts of `status` they share.
 *
 * The agent's loop owns every number here; the HTTP server (http.c) runs
 * in libmicrohttpd's own thread and must never read the agent.  So the
 * loop builds an immutable snapshot (ea__mx_snap, plain values) every
 * EA__MX_PERIOD_MS and hands it over (ea__http_publish swaps a pointer
 * under a mutex); a scrape formats the newest one.  A scrape therefore
 * costs the loop nothing, a stuck loop cannot stall a probe (it shows as a
 * snapshot growing old: /healthz's 503), and every sample of one scrape
 * comes from one instant of the loop.
 *
 * One source of truth.  The snapshot reads the values `status` shows from
 * the same places (the rendezvous status, the election, a->ck, the
 * transport's and the control channel's counters); where status derived
 * something, both call the same function (ea__agent_ckpt_newest and
 * ea__agent_member_counts in status.c; ea__agent_progress_get and
 * ea__agent_ready here, which status shows as generation.steps_per_s,
 * generation.stalled and self.ready).
 *
 * What only this file tracks, sampled on the loop's tick (agent.c, every
 * EA__MX_PERIOD_MS, before the checkpoint and identity work of that tick;
 * the snapshot is published after it):
 *   - progress: the step of the most advanced local worker (status
 *     generation.last_step), sampled every period into a ring; steps per
 *     second over the last EA__RATE_WINDOW_MS, and when it last moved;
 *   - stalls: a running generation of this node in which no local worker
 *     completed a step for runtime.stall_timeout_seconds (counted from the
 *     commit, or the last step) is `stalled`: one `alert` line and the
 *     `stalled` alert counter on the way in, one `alert ... resolved` line
 *     on the way out (a step, or the generation ended).  The sampling makes
 *     the verdict at most one period late;
 *   - histograms of formation and checkpoint persist durations, observed by
 *     hooks where status records the last one (workers.c, ckpt_glue.c);
 *   - alert counters by kind come from the alert registry (alerts.c,
 *     ea__agent_alerts), which every `alert` goes through;
 *   - the page's history (history.c): a point a second (step, steps/s,
 *     loss, generation) on the tick, a generation record at each commit
 *     (the formation hook) with why it formed, from the node set of the
 *     generation before and what the member table says of those that went.
 *
 * The page's JSON (issue 31): while ea__http_wanted says someone asked for
 * it in the last minute, the snapshot also carries the `status --json`
 * document (ea__agent_cmd_status, the admin socket's own answer) and the
 * /api/v1/history document as text, formatted here on the loop; the HTTP
 * thread only copies them out.
 *
 * The exposition (the Prometheus text of a snapshot, pure) is
 * obs/exposition.c; the HTTP server obs/http.c.
 */
#include "agent_int.h"

#include "ea_ckpt.h"
#include "ea_log.h"
#include "history.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Steps per second are averaged over this window: ten seconds, like the
 * `progress` log line, smooths the per-step jitter of a shared machine and
 * still follows a world-size change within a few scrapes. */
#define EA__RATE_WINDOW_MS 10000
/* Samples kept: the window over the period, and a few spare. */
#define RATE_SAMPLES (EA__RATE_WINDOW_MS / EA__MX_PERIOD_MS + 4)

/* Formations take milliseconds here (README, "Figures") and at most
 * runtime.rendezvous_timeout_seconds (30 s by default). */
static const double formation_le[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
/* A checkpoint of the default model persists in milliseconds; one of a
 * large model on a network file system in minutes. */
static const double persist_le[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                    2.5,  5,     10,   30,  60,   120, 300};
_Static_assert(sizeof formation_le / sizeof formation_le[0] <= EA__MX_BUCKETS_MAX, "buckets");
_Static_assert(sizeof persist_le / sizeof persist_le[0] <= EA__MX_BUCKETS_MAX, "buckets");

/* ---- the loop's side ----------------------------------------------------------- */

typedef struct {
  uint64_t ms, step;
} rate_sample;

struct ea__agent_mx {
  ea__agent *a;
  ea__http *http;
  char addr[96]; /* bound, "" when off */
  char err[320]; /* why it is not bound, "" when fine or off */
  double start_wall_s;
  /* progress */
  uint64_t seen_step, step_ms; /* the step last seen and when it moved (mono ms) */
  rate_sample ring[RATE_SAMPLES];
  size_t ring_n, ring_head;
  double rate;
  /* stalls */
  bool stalled;
  uint64_t stalled_gen, stalled_since_ms;
  bool expected;        /* training_expected at the last sample */
  uint64_t expected_ms; /* when it last became true */
  uint64_t health_ms;   /* last stall check (runtime.health_check_interval_seconds) */
  uint64_t export_ms;   /* last `metrics` line (observability.metrics_export_interval_seconds) */
  /* the newest checkpoint known and when we learned of it */
  bool ck_have;
  uint64_t ck_step, ck_gen;
  double ck_time_s;
  ea__mx_hist formation, persist;
  /* the page's history, and what the next generation record compares with:
   * the node set this node ran last (ids and names), the job's restarts
   * and this node's worker restarts then; the checkpoint counters at the
   * last sample (a checkpoint's size is what one commit added) */
  ea__hist hist;
  bool prev_have;
  uint32_t nprev;
  ea_node_id *prev_ids;
  char (*prev_names)[EA_NAME_MAX];
  uint64_t prev_restarts, prev_worker_restarts;
  uint64_t ck_committed_seen, ck_bytes_seen;
};

static double wall_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The generation this node just committed (a->run, and the core's running
 * plan), into the history with why it formed. */
static void history_generation(ea__agent *a, struct ea__agent_mx *mx) {
  const ea_rdzv_plan *p = ea_rdzv_running(a->rdzv);
  ea__hist_gen g = {0};
  g.gen = a->run.gen.term;
  ea_rdzv_gen_str(&a->run.gen, g.id, sizeof g.id);
  g.t_s = wall_now_s();
  g.world = a->run.world;
  g.nodes = a->run.nnodes;
  g.formation_ms = a->last_formation_ms;
  g.stalled_ms = a->last_stall_ms;
  ea_rdzv_status st;
  ea_rdzv_status_get(a->rdzv, &st);
  g.step = st.last_step;
  uint32_t n = p ? p->nnodes : 0;
  /* Who went (and what became of them) and who came, by id. */
  const char **gone = calloc(mx->nprev ? mx->nprev : 1, sizeof *gone);
  ea__hist_gone *fate = calloc(mx->nprev ? mx->nprev : 1, sizeof *fate);
  const char **joined = calloc(n ? n : 1, sizeof *joined);
  size_t ngone = 0, njoined = 0;
  ea_rdzv_held held[32];
  size_t nheld = ea_rdzv_held_out(a->rdzv, held, 32);
  if (gone && fate && joined) {
    /* (No running plan to compare: nothing named; not seen at a commit.) */
    for (uint32_t i = 0; p && mx->prev_have && i < mx->nprev; i++) {
      bool in = false;
      for (uint32_t j = 0; j < n && !in; j++)
        in = !ea_node_id_cmp(&p->nodes[j].id, &mx->prev_ids[i]);
      if (in) continue;
      const ea_member *m = ea__agent_find_member(a, &mx->prev_ids[i]);
      bool is_held = false;
      for (size_t k = 0; k < nheld && k < 32 && !is_held; k++)
        is_held = !ea_node_id_cmp(&held[k].id, &mx->prev_ids[i]) && !held[k].waived;
      gone[ngone] = mx->prev_names[i];
      fate[ngone++] = !m || m->state == EA_STATE_DEAD || m->state == EA_STATE_SUSPECT
                          ? EA__HIST_GONE_DEAD
                      : m->state == EA_STATE_LEFT ? EA__HIST_GONE_LEFT
                      : is_held                   ? EA__HIST_GONE_HELD
                                                  : EA__HIST_GONE_ALIVE;
    }
    for (uint32_t j = 0; mx->prev_have && j < n; j++) {
      bool was = false;
      for (uint32_t i = 0; i < mx->nprev && !was; i++)
        was = !ea_node_id_cmp(&p->nodes[j].id, &mx->prev_ids[i]);
      if (!was) joined[njoined++] = p->nodes[j].name;
    }
  }
  bool restarted =
      (p && p->restarts > mx->prev_restarts) || a->worker_restarts > mx->prev_worker_restarts;
  ea__hist_explain(&g, !mx->prev_have, gone, fate, ngone, joined, njoined, restarted);
  ea__hist_generation(&mx->hist, &g);
  free(gone);
  free(fate);
  free(joined);
  if (!p) return;
  /* This generation's nodes are what the next one is compared with. */
  ea_node_id *ids = malloc((n ? n : 1) * sizeof *ids);
  char(*names)[EA_NAME_MAX] = malloc((n ? n : 1) * sizeof *names);
  if (!ids || !names) {
    free(ids);
    free(names);
    return; /* the previous set stays: the next record may name too much */
  }
  for (uint32_t j = 0; j < n; j++) {
    ids[j] = p->nodes[j].id;
    snprintf(names[j], EA_NAME_MAX, "%s", p->nodes[j].name);
  }
  free(mx->prev_ids);
  free(mx->prev_names);
  mx->prev_ids = ids;
  mx->prev_names = names;
  mx->nprev = n;
  mx->prev_have = true;
  mx->prev_restarts = p ? p->restarts : 0;
  mx->prev_worker_restarts = a->worker_restarts;
}

/* Called by workers.c at each commit of a generation this node is in. */
void ea__agent_metrics_formation(ea__agent *a, double seconds) {
  if (!a->mx) return;
  ea__mx_hist_observe(&a->mx->formation, seconds);
  history_generation(a, a->mx);
}

void ea__agent_metrics_persist(ea__agent *a, double seconds) {
  if (a->mx) ea__mx_hist_observe(&a->mx->persist, seconds);
}

void ea__agent_http_stats(const ea__agent *a, ea__http_stats *out) {
  memset(out, 0, sizeof *out);
  if (a->mx && a->mx->http) ea__http_stats_get(a->mx->http, out);
}

const char *ea__agent_metrics_addr(const ea__agent *a, const char **err) {
  if (err) *err = a->mx ? a->mx->err : "";
  return a->mx ? a->mx->addr : "";
}

static bool workers_all_done(const ea__agent *a) {
  if (a->wpn == 0 || !a->w) return false;
  for (uint32_t k = 0; k < a->wpn; k++)
    if (a->w[k].state != EA__W_DONE) return false;
  return true;
}

/* This node takes part in the job and should be making steps: it runs a
 * committed generation, or one of its generations broke or is forming —
 * the gaps of a job that re-forms again and again without a step, which
 * must not read as "not expected to train" (issue 11: a one-way link loss
 * re-formed the same nodes for 20 s with no step, and status said running). */
static bool training_expected(const ea__agent *a) {
  if (a->wpn == 0 || a->phase != EA__PHASE_RUNNING || workers_all_done(a)) return false;
  /* Restart mode: an unmodified torchrun script reports no steps, so no
   * step can be awaited (a healthy job would be stalled after
   * stall_timeout_seconds); its worker exits and the link probe (always on
   * there) are what tell a sick generation. */
  if (a->mode == EA__MODE_TORCHRUN) return false;
  if (a->run.active || a->prep.active) return true;
  ea_rdzv_status st;
  ea_rdzv_status_get(a->rdzv, &st);
  return st.phase == EA_RDZV_PREPARED || st.phase == EA_RDZV_RUNNING || st.phase == EA_RDZV_FAILED;
}

/* The stall clock: the last step, or when this node began to take part
 * (expected went true) if no step came since.  Not a generation's commit:
 * a generation that re-forms keeps the clock of the stall it is part of. */
static uint64_t quiet_since_ms(const struct ea__agent_mx *mx) {
  return mx->step_ms > mx->expected_ms ? mx->step_ms : mx->expected_ms;
}

/* Sample the step; update the rate and the stall verdict (its alert and
 * resolved lines). */
static void progress_update(ea__agent *a, struct ea__agent_mx *mx, uint64_t now) {
  ea_rdzv_status st;
  ea_rdzv_status_get(a->rdzv, &st);
  uint64_t step = st.last_step;
  if (step != mx->seen_step) {
    if (step < mx->seen_step) mx->ring_n = 0; /* a restart from a checkpoint */
    mx->seen_step = step;
    mx->step_ms = now;
  }
  /* the rate over the window */
  size_t cap = sizeof mx->ring / sizeof mx->ring[0];
  mx->ring[mx->ring_head] = (rate_sample){now, step};
  mx->ring_head = (mx->ring_head + 1) % cap;
  if (mx->ring_n < cap) mx->ring_n++;
  const rate_sample *old = NULL;
  for (size_t i = 0; i < mx->ring_n; i++) {
    const rate_sample *r = &mx->ring[(mx->ring_head + cap - mx->ring_n + i) % cap];
    if (now - r->ms <= EA__RATE_WINDOW_MS) {
      old = r;
      break;
    }
  }
  mx->rate = old && now > old->ms && step >= old->step
                 ? (double)(step - old->step) * 1000.0 / (double)(now - old->ms)
                 : 0.0;

  /* stalls */
  uint64_t limit_ms = (uint64_t)a->o->cfg.runtime.stall_timeout_seconds * 1000u;
  bool expected = training_expected(a);
  if (expected && !mx->expected) mx->expected_ms = now;
  mx->expected = expected;
  uint64_t since = quiet_since_ms(mx);
  bool stalled = expected && now >= since && now - since >= limit_ms;
  /* runtime.health_check_interval_seconds: the verdict changes only on a
   * check; 0 checks at every sample. */
  uint64_t every_ms = (uint64_t)a->o->cfg.runtime.health_check_interval_seconds * 1000u;
  bool check = every_ms == 0 || now - mx->health_ms >= every_ms;
  if (check) mx->health_ms = now;
  if (check && stalled && !mx->stalled) {
    char g[48];
    ea_rdzv_gen_str(&a->run.gen, g, sizeof g);
    mx->stalled = true;
    mx->stalled_gen = a->run.g64;
    mx->stalled_since_ms = since;
    ea__agent_alert(a, EA__ALERT_STALLED, EA__SEV_CRITICAL, "",
                    "stalled gen=%s world=%u step=%" PRIu64
                    ": no step for %.1f s "
                    "(runtime.stall_timeout_seconds %u); /readyz fails until training moves",
                    g, a->run.world, step, (double)(now - since) / 1000.0,
                    a->o->cfg.runtime.stall_timeout_seconds);
  } else if (check && !stalled && mx->stalled) {
    mx->stalled = false;
    ea__agent_alert_resolve(a, EA__ALERT_STALLED, "", "stalled resolved after %.1f s: %s",
                            (double)(now - mx->stalled_since_ms) / 1000.0,
                            expected ? "training moves again" : "the generation ended");
  }

  /* the newest checkpoint, and when we learned of it; its size when this
   * node committed it, alone since the last sample */
  uint64_t cs = 0, cg = 0;
  double wall = wall_now_s();
  if (ea__agent_ckpt_newest(a, &cs, &cg) &&
      (!mx->ck_have || cs != mx->ck_step || cg != mx->ck_gen)) {
    mx->ck_have = true;
    mx->ck_step = cs;
    mx->ck_gen = cg;
    mx->ck_time_s = wall;
    bool one = a->ck.committed == mx->ck_committed_seen + 1 && a->ck.have_last &&
               a->ck.last_step == cs && a->ck.last_gen == cg;
    ea__hist_checkpoint(&mx->hist,
                        &(ea__hist_ckpt){.have = true,
                                         .step = cs,
                                         .gen = cg,
                                         .t_s = wall,
                                         .have_bytes = one,
                                         .bytes = one ? a->ck.bytes - mx->ck_bytes_seen : 0});
  }
  mx->ck_committed_seen = a->ck.committed;
  mx->ck_bytes_seen = a->ck.bytes;

  /* the page's point of this second */
  ea__hist_sample(&mx->hist, now,
                  &(ea__hist_point){.t_s = wall,
                                    .step = step,
                                    .steps_per_s = mx->rate,
                                    .has_loss = a->has_loss,
                                    .loss = a->last_loss,
                                    .gen = a->run.active ? a->run.gen.term : 0,
                                    .world = a->run.active ? a->run.world : 0});
}

void ea__agent_progress_get(const ea__agent *a, ea__agent_progress *p) {
  memset(p, 0, sizeof *p);
  const struct ea__agent_mx *mx = a->mx;
  if (!mx) return;
  uint64_t now = ea__agent_mono_ms();
  p->steps_per_s = mx->rate;
  p->since_step_s = now >= mx->step_ms ? (double)(now - mx->step_ms) / 1000.0 : 0.0;
  p->stalled = mx->stalled;
  if (mx->stalled && now >= mx->stalled_since_ms)
    p->stalled_s = (double)(now - mx->stalled_since_ms) / 1000.0;
}

bool ea__agent_ready(ea__agent *a, char *why, size_t cap) {
  if (a->phase != EA__PHASE_RUNNING || !a->tr || !a->rdzv) {
    snprintf(why, cap, "not ready: %s",
             a->phase == EA__PHASE_DRAINING ? "draining (the job re-forms without this node)"
                                            : "leaving the cluster");
    return false;
  }
  size_t counts[4] = {0};
  ea__agent_member_counts(a, counts);
  /* A node started without seeds founded the cluster; one with seeds is
   * in once a seed answered or a peer reached it first. */
  if (!a->joined && a->o->join[0] && counts[EA_STATE_ALIVE] < 2) {
    snprintf(why, cap, "not joined: no seed of --join %.200s has answered yet", a->o->join);
    return false;
  }
  if (a->wpn == 0) {
    snprintf(why, cap, "ok");
    return true;
  }
  if (workers_all_done(a)) {
    snprintf(why, cap, "ok: training finished");
    return true;
  }
  ea_rdzv_status st;
  ea_rdzv_status_get(a->rdzv, &st);
  if (!a->run.active || st.phase != EA_RDZV_RUNNING) {
    snprintf(why, cap, "not in a running generation (%s): %s", ea_rdzv_phase_str(st.phase),
             st.reason);
    return false;
  }
  char g[48];
  ea_rdzv_gen_str(&a->run.gen, g, sizeof g);
  if (a->mx && a->mx->stalled) {
    ea__agent_progress p;
    ea__agent_progress_get(a, &p);
    snprintf(why, cap,
             "stalled: generation %s has made no step for %.0f s (runtime.stall_timeout_seconds "
             "%u)",
             g, p.stalled_s, a->o->cfg.runtime.stall_timeout_seconds);
    return false;
  }
  if (a->mode == EA__MODE_TORCHRUN) { /* no steps to wait for: the program runs */
    snprintf(why, cap, "ok: generation %s runs (restart mode: the program reports no steps)", g);
    return true;
  }
  if (!a->run.first_step_seen) {
    snprintf(why, cap, "generation %s committed, waiting for its first step", g);
    return false;
  }
  snprintf(why, cap, "ok");
  return true;
}

/* The snapshot: the values of `status`, read from the same places. */
static ea__mx_snap *snapshot(ea__agent *a, struct ea__agent_mx *mx) {
  ea__mx_snap *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  const ea_config *cfg = &a->o->cfg;
  snprintf(s->job, sizeof s->job, "%s", cfg->experiment.name);
  snprintf(s->node, sizeof s->node, "%s", a->o->name);
  snprintf(s->id, sizeof s->id, "%s", a->idhex);
  snprintf(s->version, sizeof s->version, "%s", EA_VERSION);
  snprintf(s->role, sizeof s->role, "%s", a->o->role);
  s->start_time_s = mx->start_wall_s;
  s->mono_ms = ea__agent_mono_ms();
  s->ready = ea__agent_ready(a, s->ready_why, sizeof s->ready_why);

  size_t counts[4] = {0};
  ea__agent_member_counts(a, counts);
  for (int i = 0; i < 4; i++) s->members[i] = counts[i];
  const ea_election *el = ea_rdzv_election(a->rdzv);
  s->controller = el && el->have && ea_node_id_cmp(&el->controller, &a->id) == 0;

  ea_rdzv_status st;
  ea_rdzv_status_get(a->rdzv, &st);
  const ea_rdzv_plan *p = ea_rdzv_running(a->rdzv);
  s->generation = st.running.term;
  s->world = p ? p->world : 0;
  s->held_out = st.held_now;
  s->stragglers = ea__agent_pace_stragglers(a);
  ea__agent_spare_counts(a, s->spare_nodes, &s->spare_self);
  s->gens_committed = a->gens_committed;
  s->formations_started = st.formations_started;
  s->formations_committed = st.formations_committed;
  s->formations_failed = st.formations_failed;
  s->formation = mx->formation;

  ea__agent_progress pr;
  ea__agent_progress_get(a, &pr);
  s->step = st.last_step;
  s->steps_per_s = pr.steps_per_s;
  s->has_loss = a->has_loss;
  s->loss = a->last_loss;
  s->since_step_s = pr.since_step_s;
  s->stalled = pr.stalled;
  s->worker_failures = a->worker_failures;
  s->worker_restarts = a->worker_restarts;
  if (a->sup) {
    ea__sup_starts(a->sup, &s->starts_warm, &s->starts_cold);
    s->spares = 0;
    for (uint32_t k = 0; k < a->wpn && k < 64; k++) {
      ea__sup_spare sp;
      ea__sup_spare_get(a->sup, k, &sp);
      if (sp.kept) s->spares = k + 1;
      s->spare_ready[k] = sp.ready;
      s->spare_rss[k] = sp.rss;
    }
  }

  s->ck_interval = cfg->checkpoint.save_interval_steps;
  s->ck_committed = a->ck.committed;
  s->ck_failed = a->ck.failed;
  s->ck_skipped = a->ck.skipped;
  s->ck_have_last = mx->ck_have;
  s->ck_last_step = mx->ck_step;
  s->ck_last_time_s = mx->ck_time_s;
  ea__ckpt_svc_stats sv = {0};
  if (a->ckpt_svc) ea__ckpt_svc_stats_get(a->ckpt_svc, &sv);
  s->ck_bytes_written = sv.bytes;
  s->ck_bytes_committed = a->ck.bytes;
  s->persist = mx->persist;

  ea_transport_stats t;
  ea_transport_stats_get(a->tr, &t);
  s->gossip_in = t.packets_in;
  s->gossip_out = t.packets_out;
  s->gossip_bytes_in = t.bytes_in;
  s->gossip_bytes_out = t.bytes_out;
  s->gossip_drop_malformed = t.dropped_malformed;
  s->gossip_drop_unauth = t.dropped_unauthenticated;
  s->gossip_drop_oversize = t.dropped_oversize;
  s->gossip_drop_replayed = t.dropped_replayed;
  ea__ctl_stats c = {0};
  if (a->ctl) ea__ctl_stats_get(a->ctl, &c);
  s->ctl_drop_malformed = c.dropped_malformed;
  s->ctl_drop_unauth = c.dropped_unauthenticated;
  s->ctl_drop_oversize = c.dropped_oversize;
  s->ctl_drop_replayed = c.dropped_replayed;
  s->drains_refused = a->drains_refused;
  if (mx->http) ea__http_stats_get(mx->http, &s->http);
  for (int k = 0; k < EA__ALERT_KINDS; k++) s->alerts[k] = ea__agent_alerts(a, (ea__alert_kind)k);
  return s;
}

void ea__agent_metrics_sample(ea__agent *a, uint64_t now) {
  struct ea__agent_mx *mx = a->mx;
  if (mx) progress_update(a, mx, now);
}

/* The page's two documents into s (each stays NULL when it cannot be
 * made: the API answers 503 until the next publish). */
static void page_json(ea__agent *a, struct ea__agent_mx *mx, ea__mx_snap *s) {
  json_t *doc = NULL;
  if (ea__agent_cmd_status(a, "", &doc) == 0 && doc) s->status_json = ea_json_dump(doc);
  json_decref(doc);
  ea_sb b = {0};
  ea__hist_format(&mx->hist, a->o->name, wall_now_s(), &b);
  if (b.oom)
    ea_sb_free(&b);
  else
    s->history_json = b.buf;
}

void ea__agent_metrics_publish(ea__agent *a, uint64_t now) {
  struct ea__agent_mx *mx = a->mx;
  if (!mx) return;
  /* observability.metrics_export_interval_seconds: the same snapshot as a
   * log line, for jobs shipped by log rather than scraped. */
  uint64_t every_ms = (uint64_t)a->o->cfg.observability.metrics_export_interval_seconds * 1000u;
  bool export = every_ms && now - mx->export_ms >= every_ms;
  if (!mx->http && !export) return;
  ea__mx_snap *s = snapshot(a, mx);
  if (!s) return;
  if (export) {
    mx->export_ms = now;
    ea_logkv(EA_LOG_INFO, "metrics",
             (ea_log_kv[]){EA_KV_U("generation", s->generation), EA_KV_U("world", s->world),
                           EA_KV_U("step", s->step), EA_KV_F("loss", s->has_loss ? s->loss : NAN),
                           EA_KV_F("steps_per_s", s->steps_per_s),
                           EA_KV_U("checkpoints_committed", s->ck_committed)},
             6, "gen=%" PRIu64 " world=%u step=%" PRIu64 " loss=%.4f steps_per_s=%.1f",
             s->generation, s->world, s->step, s->has_loss ? s->loss : NAN, s->steps_per_s);
  }
  if (mx->http && ea__http_wanted(mx->http, now)) page_json(a, mx, s);
  if (mx->http)
    ea__http_publish(mx->http, s);
  else
    ea__mx_snap_free(s);
}

int ea__agent_metrics_start(ea__agent *a, char *err, size_t errlen) {
  (void)err, (void)errlen;
  struct ea__agent_mx *mx = calloc(1, sizeof *mx);
  if (!mx) {
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  mx->a = a;
  mx->start_wall_s = wall_now_s();
  mx->step_ms = ea__agent_mono_ms();
  mx->formation =
      (ea__mx_hist){.le = formation_le, .n = sizeof formation_le / sizeof *formation_le};
  mx->persist = (ea__mx_hist){.le = persist_le, .n = sizeof persist_le / sizeof *persist_le};
  ea__hist_init(&mx->hist);
  a->mx = mx;
  const char *listen = a->o->cfg.observability.metrics_listen;
  if (listen[0]) {
    char e[256];
    int rc = ea__http_start(listen, &mx->http, mx->addr, sizeof mx->addr, e, sizeof e);
    if (rc < 0) {
      /* Not fatal: training does not depend on being observed, and several
       * agents on one host (tests, the demo) would otherwise all need a
       * port of their own.  The line says how to fix it; status shows it. */
      snprintf(mx->err, sizeof mx->err, "%s", e);
      mx->addr[0] = 0;
      ea_log(EA_LOG_ERROR, "listen",
             "metrics: %s; /metrics, /healthz and /readyz are off (set "
             "observability.metrics_listen to a free HOST:PORT, or \"\" to turn them off)",
             e);
    } else {
      ea_log(EA_LOG_INFO, "listen",
             "metrics=http://%s/metrics health=/healthz ready=/readyz page=http://%s/ job=%s",
             mx->addr, mx->addr, a->o->cfg.experiment.name);
    }
  }
  return 0;
}

void ea__agent_metrics_close(ea__agent *a) {
  struct ea__agent_mx *mx = a->mx;
  if (!mx) return;
  a->mx = NULL;
  /* Joins the HTTP thread: an answer being formatted finishes first (it
   * reads only its snapshot), then the socket closes. */
  if (mx->http) ea__http_stop(mx->http);
  mx->http = NULL;
  free(mx->prev_ids);
  free(mx->prev_names);
  free(mx);
}
