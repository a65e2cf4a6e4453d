/* The `status` document: what this agent knows, as one JSON object for
 * `elastic-agent status` (main.c renders it for people), `status --json`,
 * monitoring scripts and the chaos harness (chaos/status.c).  Its field
 * names and types are an interface: tests/e2e and chaos/ read them, so add
 * fields, never rename or retype one.
 *
 * Sections, in order: version, self, summary, members (sorted by name),
 * controller (ea_rdzv_election's answer), generation and workers (what this
 * node trains, and why not), checkpoint, counters (transport, swim, rdzv,
 * control, workers) and config (with the detection bound derived below).
 * Built on the loop from state in memory (no I/O, no blocking) as a
 * jansson document through json.c's setters; every number keeps the JSON
 * type it always had (counters integers, durations with decimals reals,
 * microseconds integers, a loss before the first step null).
 */
#include "agent_int.h"

#include "ea_ckpt.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* How long after a member crashes can it take until every other member has
 * it dead?  docs/membership.md derives a bound that holds with probability
 * 1 − ε, assuming suspicion confirmations arrive in time (the timer then runs
 * its minimum).  Operators and the end-to-end test want a bound that needs
 * no luck, so this one takes each step's worst case (no packet loss, healthy
 * members, Lifeguard health 0), with N = members alive or suspect:
 *
 *   1. first probe of the crashed member: probes walk a shuffled round-robin
 *      over the N−1 others, reshuffled every round, so one prober's gap
 *      between two probes of the same target is at most 2(N−1)−1 intervals
 *      (first in one round, last in the next);
 *   2. that probe fails at the end of its interval (direct timeout, then the
 *      ping-req round): + 1 interval, and the member is SUSPECT;
 *   3. the suspicion timer starts at its maximum and only shrinks with
 *      confirmations: + suspicion max
 *      (= suspicion_max_mult · suspicion_mult · log10(max(N,10)) · interval);
 *   4. DEAD reaches everyone by push gossip, fanout g every G:
 *      ⌈log_{g+1} N + ln N / g⌉ rounds (Pittel), + 1 round for the delay.
 *
 * tests/e2e/test_cluster.sh asserts the measured time stays under it. */
uint64_t ea__detection_bound_ms(const ea_swim_config *c, size_t n) {
  if (n < 2) n = 2;
  double interval = c->probe_interval_ms;
  double first_probe = (2.0 * (double)(n - 1) - 1.0) * interval;
  double verdict = interval > c->probe_timeout_ms ? interval : c->probe_timeout_ms;
  double min = c->suspicion_mult * log10(n > 10 ? (double)n : 10.0) * interval;
  double susp = (c->suspicion_max_mult > 1 ? c->suspicion_max_mult : 1) * min;
  double g = c->gossip_nodes ? c->gossip_nodes : 1;
  double rounds = ceil(log((double)n) / log(g + 1.0) + log((double)n) / g) + 1.0;
  return (uint64_t)ceil(first_probe + verdict + susp + rounds * c->gossip_interval_ms);
}

void ea__agent_member_counts(ea__agent *a, size_t counts[4]) {
  const ea_member *ms;
  size_t n = a->tr ? ea_swim_members(ea_transport_swim(a->tr), &ms) : 0;
  for (size_t i = 0; i < n; i++)
    if (ms[i].state < 4) counts[ms[i].state]++;
}

bool ea__agent_ckpt_newest(const ea__agent *a, uint64_t *step, uint64_t *gen) {
  const ea__agent_ck *k = &a->ck;
  uint64_t ls = 0, lg = 0;
  bool have = false;
  if (k->latest[0] && ea_ckpt_parse_dir_name(k->latest, &ls, &lg) == 0) have = true;
  if (k->have_last && (!have || k->last_gen > lg || (k->last_gen == lg && k->last_step > ls))) {
    ls = k->last_step;
    lg = k->last_gen;
    have = true;
  }
  *step = ls;
  *gen = lg;
  return have;
}

static int cmp_member_ptr(const void *x, const void *y) {
  const ea_member *a = *(const ea_member *const *)x, *b = *(const ea_member *const *)y;
  int c = strcmp(a->meta.name, b->meta.name);
  return c ? c : ea_node_id_cmp(&a->id, &b->id);
}

static void put_addr(ea_jb *b, json_t *o, const char *key, const ea_addr *addr) {
  char s[64];
  ea_addr_str(addr, s, sizeof s);
  ea_jb_str(b, o, key, s);
}

static void put_gen(ea_jb *b, json_t *o, const char *key, const ea_rdzv_gen *g) {
  char s[48];
  ea_rdzv_gen_str(g, s, sizeof s);
  ea_jb_str(b, o, key, s);
}

/* A loss: 6 decimals, null before the first step (or when not finite). */
static void put_loss(ea_jb *b, json_t *o, const char *key, bool has, double v) {
  if (has && isfinite(v))
    ea_jb_fixed(b, o, key, v, 6);
  else
    ea_jb_null(b, o, key);
}

static void put_hex64(ea_jb *b, json_t *o, const char *key, uint64_t v) {
  char s[24];
  snprintf(s, sizeof s, "%016" PRIx64, v);
  ea_jb_str(b, o, key, s);
}

/* A duration kept in seconds, shown in microseconds: an integer. */
static void put_us(ea_jb *b, json_t *o, const char *key, double seconds) {
  ea_jb_int(b, o, key, (int64_t)llround(seconds * 1e6));
}

static const char *agent_phase_str(ea__agent_phase p) {
  return p == EA__PHASE_RUNNING    ? "running"
         : p == EA__PHASE_DRAINING ? "draining"
         : p == EA__PHASE_STOPPING ? "stopping"
                                   : "leaving";
}

/* "self": this node. */
static void status_self(ea__agent *a, ea_jb *b, json_t *doc, uint64_t now) {
  const ea_member *self = ea_swim_self(ea_transport_swim(a->tr));
  json_t *o = ea_jb_obj(b, doc, "self");
  ea_jb_str(b, o, "name", a->o->name);
  ea_jb_str(b, o, "id", a->idhex);
  put_addr(b, o, "gossip", ea_transport_addr(a->tr));
  put_addr(b, o, "control", ea_transport_control(a->tr));
  put_addr(b, o, "bound", ea_transport_bound(a->tr));
  ea_jb_str(b, o, "admin", a->sock_path);
  ea_jb_str(b, o, "role", a->o->role);
  ea_jb_str(b, o, "state", ea_member_state_str(self->state));
  ea_jb_int(b, o, "incarnation", self->incarnation);
  ea_jb_int(b, o, "pid", getpid());
  ea_jb_fixed(b, o, "uptime_s", (double)(now - a->start_ms) / 1000.0, 1);
  ea_jb_bool(b, o, "joined", a->joined);
  ea_jb_bool(b, o, "leaving", a->phase >= EA__PHASE_STOPPING);
  /* What /readyz answers, and where it is served (metrics.c, http.c). */
  char why[256];
  ea_jb_bool(b, o, "ready", ea__agent_ready(a, why, sizeof why));
  ea_jb_str(b, o, "ready_reason", why);
  const char *merr = "";
  const char *maddr = ea__agent_metrics_addr(a, &merr);
  if (maddr[0])
    ea_jb_str(b, o, "metrics", maddr);
  else
    ea_jb_null(b, o, "metrics");
  ea_jb_str(b, o, "metrics_error", merr);
}

/* "summary" and "members" (sorted by name, then id); counts[state] are
 * filled for the config section's detection bound. */
static int status_members(ea__agent *a, ea_jb *b, json_t *doc, uint64_t now, size_t counts[4]) {
  const ea_member *ms;
  size_t n = ea_swim_members(ea_transport_swim(a->tr), &ms);
  const ea_member **sorted = malloc((n ? n : 1) * sizeof *sorted);
  if (!sorted) return -ENOMEM;
  for (size_t i = 0; i < n; i++) {
    sorted[i] = &ms[i];
    if (ms[i].state < 4) counts[ms[i].state]++;
  }
  qsort(sorted, n, sizeof *sorted, cmp_member_ptr);
  json_t *sum = ea_jb_obj(b, doc, "summary");
  ea_jb_u64(b, sum, "members", n);
  ea_jb_u64(b, sum, "alive", counts[EA_STATE_ALIVE]);
  ea_jb_u64(b, sum, "suspect", counts[EA_STATE_SUSPECT]);
  ea_jb_u64(b, sum, "dead", counts[EA_STATE_DEAD]);
  ea_jb_u64(b, sum, "left", counts[EA_STATE_LEFT]);
  json_t *arr = ea_jb_arr(b, doc, "members");
  for (size_t i = 0; i < n; i++) {
    const ea_member *m = sorted[i];
    char hex[33];
    ea_node_id_hex(&m->id, hex);
    json_t *o = ea_jb_obj(b, arr, NULL);
    ea_jb_str(b, o, "name", m->meta.name);
    ea_jb_str(b, o, "id", hex);
    put_addr(b, o, "gossip", &m->meta.gossip);
    put_addr(b, o, "control", &m->meta.control);
    ea_jb_str(b, o, "role", m->meta.role);
    ea_jb_str(b, o, "version", m->meta.version);
    ea_jb_str(b, o, "state", ea_member_state_str(m->state));
    ea_jb_int(b, o, "incarnation", m->incarnation);
    ea_jb_fixed(b, o, "since_s", now >= m->since_ms ? (double)(now - m->since_ms) / 1000.0 : 0.0,
                1);
    ea_jb_bool(b, o, "self", ea_node_id_cmp(&m->id, &a->id) == 0);
  }
  free(sorted);
  return 0;
}

/* "controller": the rendezvous core's election (ea_rdzv_election). */
static void status_controller(ea__agent *a, ea_jb *b, json_t *doc) {
  json_t *o = ea_jb_obj(b, doc, "controller");
  const ea_election *el = ea_rdzv_election(a->rdzv);
  if (el && el->have) {
    char hex[33];
    ea_node_id_hex(&el->controller, hex);
    ea_jb_str(b, o, "name", ea__agent_member_name(ea__agent_find_member(a, &el->controller)));
    ea_jb_str(b, o, "id", hex);
    ea_jb_bool(b, o, "self", ea_node_id_cmp(&el->controller, &a->id) == 0);
    ea_jb_int(b, o, "eligible", el->eligible);
    ea_jb_str(b, o, "reason", el->reason);
  } else {
    ea_jb_null(b, o, "name");
    ea_jb_null(b, o, "id");
    ea_jb_str(b, o, "reason", el ? el->reason : "no election yet");
  }
}

/* "held_out": the nodes the controller keeps out of generations (flapping,
 * or evicted stragglers), why and until when; empty except on the
 * controller, whose record it is. */
static void status_held_out(ea__agent *a, ea_jb *b, json_t *doc, uint64_t now) {
  json_t *arr = ea_jb_arr(b, doc, "held_out");
  ea_rdzv_held h[32];
  size_t n = ea_rdzv_held_out(a->rdzv, h, 32);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  double wall = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
  for (size_t i = 0; i < n && i < 32; i++) {
    json_t *o = ea_jb_obj(b, arr, NULL);
    char hex[33], t[40];
    ea_node_id_hex(&h[i].id, hex);
    double left = h[i].until_ms > now ? (double)(h[i].until_ms - now) / 1000.0 : 0;
    ea__alert_time_str(wall + left, t, sizeof t);
    ea_jb_str(b, o, "node", h[i].name);
    ea_jb_str(b, o, "id", hex);
    ea_jb_str(b, o, "why", ea_rdzv_hold_why_str(h[i].why));
    ea_jb_str(b, o, "reason", h[i].text);
    ea_jb_str(b, o, "until", t);
    ea_jb_fixed(b, o, "remaining_s", left, 1);
    ea_jb_u64(b, o, "holds", h[i].holds);
    ea_jb_bool(b, o, "waived", h[i].waived); /* too few nodes without it: kept in */
  }
}

/* "generation" and "workers": what this node trains, and why (not). */
static void status_generation(ea__agent *a, ea_jb *b, json_t *doc) {
  ea_rdzv_status st;
  ea_rdzv_status_get(a->rdzv, &st);
  const ea_rdzv_plan *p = ea_rdzv_running(a->rdzv);
  json_t *o = ea_jb_obj(b, doc, "generation");
  ea_jb_str(b, o, "phase", ea_rdzv_phase_str(st.phase));
  put_gen(b, o, "running", &st.running);
  ea_jb_u64(b, o, "gen", ea_rdzv_gen_u64(&st.running));
  ea_jb_int(b, o, "world", p ? p->world : 0);
  json_t *nodes = ea_jb_arr(b, o, "nodes");
  for (uint32_t i = 0; p && i < p->nnodes; i++) ea_jb_str(b, nodes, NULL, p->nodes[i].name);
  json_t *ranks = ea_jb_arr(b, o, "ranks");
  for (uint32_t k = 0; p && k < a->wpn; k++) ea_jb_int(b, ranks, NULL, a->run.rank_base + k);
  ea_jb_u64(b, o, "last_step", st.last_step);
  put_loss(b, o, "last_loss", a->has_loss, a->last_loss);
  ea_jb_str(b, o, "reason", st.reason);
  ea_jb_bool(b, o, "controller", st.controller);
  ea_jb_bool(b, o, "has_quorum", st.has_quorum);
  ea_jb_bool(b, o, "forming", st.forming);
  ea_jb_bool(b, o, "draining", st.draining);
  ea_jb_str(b, o, "agent_phase", agent_phase_str(a->phase));
  put_gen(b, o, "seen", &st.seen);
  put_gen(b, o, "accepted", &st.accepted);
  put_gen(b, o, "durable", &st.durable);
  put_gen(b, o, "formed", &st.formed);
  ea_jb_int(b, o, "formed_nodes", st.formed_nodes);
  ea_jb_u64(b, o, "committed_here", a->gens_committed);
  ea_jb_u64(b, o, "recoveries", a->recoveries);
  ea_jb_u64(b, o, "last_formation_ms", a->last_formation_ms);
  ea_jb_u64(b, o, "last_stall_ms", a->last_stall_ms);
  /* progress and stalls (metrics.c: the same numbers /metrics exports) */
  ea__agent_progress pr;
  ea__agent_progress_get(a, &pr);
  ea_jb_fixed(b, o, "steps_per_s", pr.steps_per_s, 2);
  ea_jb_fixed(b, o, "since_step_s", pr.since_step_s, 1);
  ea_jb_bool(b, o, "stalled", pr.stalled);
  ea_jb_fixed(b, o, "stalled_s", pr.stalled_s, 1);
  ea__agent_link_status(a, b, o); /* link_probe, degraded: the probe while no step is made */

  json_t *ws = ea_jb_arr(b, doc, "workers");
  for (uint32_t k = 0; k < a->wpn; k++) {
    const ea__agent_wk *w = &a->w[k];
    json_t *x = ea_jb_obj(b, ws, NULL);
    ea_jb_int(b, x, "idx", k);
    ea_jb_int(b, x, "pid", a->sup ? ea__sup_pid(a->sup, k) : 0);
    ea_jb_str(b, x, "state", ea__agent_wstate_str(w->state));
    ea_jb_u64(b, x, "gen", w->gen);
    ea_jb_u64(b, x, "step", w->next_step);
    put_loss(b, x, "loss", w->has_loss, w->loss);
    put_hex64(b, x, "digest", w->digest);
    ea_jb_fixed(b, x, "step_ms", w->step_s * 1e3, 2);
    if (w->compute_s >= 0) ea_jb_fixed(b, x, "compute_ms", w->compute_s * 1e3, 2);
    ea_jb_int(b, x, "restarts", w->restarts);
    ea_jb_str(b, x, "comm", w->comm);
    if (a->sup) { /* its warm interpreter (compute.warm_start) */
      ea__sup_spare sp;
      ea__sup_spare_get(a->sup, k, &sp);
      json_t *y = ea_jb_obj(b, x, "spare");
      ea_jb_str(b, y, "state",
                !sp.kept ? "off"
                : sp.off ? "off"
                : sp.pid ? (sp.ready ? "ready" : "importing")
                         : "none");
      if (sp.pid) ea_jb_int(b, y, "pid", sp.pid);
      if (sp.pid) ea_jb_u64(b, y, "rss_bytes", sp.rss);
      if (sp.why) ea_jb_str(b, y, "why", sp.why);
      ea_jb_u64(b, y, "warm_starts", sp.warm);
      ea_jb_u64(b, y, "cold_starts", sp.cold);
      ea_jb_u64(b, y, "lost", sp.lost);
    }
    if (w->exit_reason[0]) {
      ea_jb_str(b, x, "exit_reason", w->exit_reason);
      ea_jb_int(b, x, "exit_code", w->exit_code);
    }
    if (w->fail_msg[0]) { /* its last communicator failure, and whom it blamed */
      json_t *f = ea_jb_obj(b, x, "last_failure");
      ea_jb_u64(b, f, "gen", w->fail_gen);
      ea_jb_str(b, f, "message", w->fail_msg);
      if (w->fail_rank >= 0) {
        ea_jb_int(b, f, "peer_rank", w->fail_rank);
        ea_jb_str(b, f, "peer_node", w->fail_node);
      }
    }
  }
}

/* "checkpoint": the checkpoints of the job as this node knows them — all
 * it committed as controller, LATEST as last read, its own shards. */
static void status_checkpoint(ea__agent *a, ea_jb *b, json_t *doc) {
  const ea__agent_ck *k = &a->ck;
  const ea_config *cfg = &a->o->cfg;
  ea__ckpt_svc_stats sv = {0};
  if (a->ckpt_svc) ea__ckpt_svc_stats_get(a->ckpt_svc, &sv);
  ea__ckpt_core_stats cs = {0};
  if (a->ckpt_ctl) ea__ckpt_ctl_stats_get(a->ckpt_ctl, &cs);
  json_t *o = ea_jb_obj(b, doc, "checkpoint");
  ea_jb_bool(b, o, "enabled", cfg->checkpoint.save_interval_steps != 0);
  ea_jb_str(b, o, "dir", a->ckpt_dir);
  ea_jb_int(b, o, "interval", cfg->checkpoint.save_interval_steps);
  ea_jb_int(b, o, "keep_last", cfg->checkpoint.keep_last);
  ea_jb_str(b, o, "busy_policy", cfg->checkpoint.busy_policy);
  ea_jb_bool(b, o, "controller", a->ckpt_ctl != NULL);
  /* The newest checkpoint known here: our own last commit, or LATEST. */
  uint64_t ls = 0, lg = 0;
  bool have = ea__agent_ckpt_newest(a, &ls, &lg);
  if (k->latest[0])
    ea_jb_str(b, o, "latest", k->latest);
  else
    ea_jb_null(b, o, "latest");
  if (have) {
    ea_jb_u64(b, o, "last_step", ls);
    ea_jb_u64(b, o, "last_gen", lg);
  } else {
    ea_jb_null(b, o, "last_step");
    ea_jb_null(b, o, "last_gen");
  }
  ea_jb_int(b, o, "in_flight", (int64_t)sv.in_flight + cs.pending);
  ea_jb_u64(b, o, "started", k->started);
  ea_jb_u64(b, o, "committed", k->committed);
  ea_jb_u64(b, o, "failed", k->failed);
  ea_jb_u64(b, o, "skipped", k->skipped);
  ea_jb_u64(b, o, "stale", k->stale);
  ea_jb_u64(b, o, "bytes", k->bytes);
  ea_jb_fixed(b, o, "last_persist_s", k->last_persist_s, 6);
  ea_jb_fixed(b, o, "last_write_ms", k->last_write_s * 1e3, 3);
  ea_jb_fixed(b, o, "last_commit_ms", k->last_commit_s * 1e3, 3);
  put_us(b, o, "last_stall_us", k->last_stall_s);
  put_us(b, o, "last_wait_us", k->last_wait_s);
  ea_jb_str(b, o, "last_error", k->last_error);
  ea_jb_int(b, o, "pending", cs.pending);
  json_t *sh = ea_jb_obj(b, o, "shards");
  ea_jb_u64(b, sh, "staged", sv.staged);
  ea_jb_u64(b, sh, "written", sv.written);
  ea_jb_u64(b, sh, "failed", sv.failed);
  ea_jb_u64(b, sh, "skipped", sv.skipped);
  ea_jb_u64(b, sh, "bytes", sv.bytes);
  ea_jb_int(b, sh, "in_flight", sv.in_flight);
  ea_jb_fixed(b, sh, "last_write_ms", k->shard_write_s * 1e3, 3);
  put_us(b, sh, "last_stall_us", k->shard_stall_s);
  json_t *rp = ea_jb_obj(b, o, "reports");
  ea_jb_u64(b, rp, "sent", k->reports_sent);
  ea_jb_u64(b, rp, "local", k->reports_local);
  ea_jb_u64(b, rp, "received", k->reports_in);
  ea_jb_u64(b, rp, "dropped", k->reports_dropped);
  ea_jb_u64(b, rp, "malformed", k->reports_bad);
  ea_jb_u64(b, rp, "ignored", cs.ignored);
  if (k->loaded) {
    json_t *r = ea_jb_obj(b, o, "resumed");
    ea_jb_str(b, r, "name", k->loaded_name);
    ea_jb_u64(b, r, "step", k->loaded_step);
    put_hex64(b, r, "digest", k->loaded_digest);
    ea_jb_int(b, r, "fallbacks", k->loaded_fallbacks);
    ea_jb_fixed(b, r, "seconds", k->loaded_s, 3);
    ea_jb_str(b, r, "why", k->loaded_why);
  } else {
    ea_jb_null(b, o, "resumed");
  }
}

/* "counters": transport, swim, rdzv, control, http, workers. */
static void status_counters(ea__agent *a, ea_jb *b, json_t *doc) {
  json_t *cn = ea_jb_obj(b, doc, "counters");
  ea_transport_stats t;
  ea_transport_stats_get(a->tr, &t);
  json_t *o = ea_jb_obj(b, cn, "transport");
  ea_jb_u64(b, o, "packets_in", t.packets_in);
  ea_jb_u64(b, o, "packets_out", t.packets_out);
  ea_jb_u64(b, o, "bytes_in", t.bytes_in);
  ea_jb_u64(b, o, "bytes_out", t.bytes_out);
  ea_jb_u64(b, o, "dropped_malformed", t.dropped_malformed);
  ea_jb_u64(b, o, "dropped_unauthenticated", t.dropped_unauthenticated);
  ea_jb_u64(b, o, "dropped_replayed", t.dropped_replayed);
  ea_jb_u64(b, o, "dropped_oversize", t.dropped_oversize);
  ea_jb_u64(b, o, "send_errors", t.send_errors);
  ea_jb_u64(b, o, "encode_errors", t.encode_errors);
  ea_jb_u64(b, o, "updates_trimmed", t.updates_trimmed);
  ea_jb_u64(b, o, "syncs_ok", t.syncs_ok);
  ea_jb_u64(b, o, "syncs_failed", t.syncs_failed);
  ea_jb_u64(b, o, "syncs_served", t.syncs_served);
  ea_jb_u64(b, o, "syncs_refused", t.syncs_refused);
  ea_jb_u64(b, o, "preauth_evicted", t.preauth_evicted);
  ea_jb_u64(b, o, "preauth_timeouts", t.preauth_timeouts);
  ea_jb_u64(b, o, "refused_rate", t.refused_rate);
  ea_jb_u64(b, o, "accepts_deferred", t.accepts_deferred);
  ea_jb_u64(b, o, "join_attempts", t.join_attempts);
  ea_swim_stats w;
  ea_swim_stats_get(ea_transport_swim(a->tr), &w);
  o = ea_jb_obj(b, cn, "swim");
  ea_jb_u64(b, o, "msgs_in", w.msgs_in);
  ea_jb_u64(b, o, "msgs_out", w.msgs_out);
  ea_jb_u64(b, o, "pings_sent", w.pings_sent);
  ea_jb_u64(b, o, "acks_recv", w.acks_recv);
  ea_jb_u64(b, o, "ping_reqs_sent", w.ping_reqs_sent);
  ea_jb_u64(b, o, "nacks_recv", w.nacks_recv);
  ea_jb_u64(b, o, "suspicions", w.suspicions);
  ea_jb_u64(b, o, "refutations", w.refutations);
  ea_jb_u64(b, o, "declared_dead", w.declared_dead);
  ea_jb_u64(b, o, "updates_sent", w.updates_sent);
  ea_jb_u64(b, o, "syncs_started", w.syncs_started);
  ea_jb_u64(b, o, "syncs_merged", w.syncs_merged);
  ea_jb_u64(b, o, "reconnects", w.reconnects);
  ea_jb_u64(b, o, "urgent_probes", w.urgent_probes);
  ea_jb_u64(b, o, "gone_suspicions", w.gone_suspicions);
  ea_jb_u64(b, o, "stale_dropped", w.stale_dropped);
  ea_jb_u64(b, o, "stale_meta", w.stale_meta);
  ea_jb_u64(b, o, "recheck_pokes", w.recheck_pokes);
  ea_jb_int(b, o, "health", w.health);
  ea_rdzv_status st;
  ea_rdzv_status_get(a->rdzv, &st);
  o = ea_jb_obj(b, cn, "rdzv");
  ea_jb_u64(b, o, "formations_started", st.formations_started);
  ea_jb_u64(b, o, "formations_committed", st.formations_committed);
  ea_jb_u64(b, o, "formations_failed", st.formations_failed);
  ea_jb_u64(b, o, "nacks_sent", st.nacks_sent);
  ea_jb_u64(b, o, "nacks_received", st.nacks_received);
  ea_jb_u64(b, o, "stale_ignored", st.stale_ignored);
  ea_jb_u64(b, o, "state_refused", st.state_refused);
  ea_jb_u64(b, o, "persist_errors", st.persist_errors);
  ea_jb_u64(b, o, "node_failures", st.node_failures); /* as controller, toward flapping */
  ea_jb_u64(b, o, "blames", st.blames);               /* as controller, toward link hold-outs */
  ea_jb_u64(b, o, "link_downs", st.link_downs);       /* as controller: link probes' hold-outs */
  ea_jb_u64(b, o, "holds", st.holds);
  ea_jb_u64(b, o, "drains_refused", a->drains_refused);
  ea__ctl_stats c = {0};
  if (a->ctl) ea__ctl_stats_get(a->ctl, &c);
  o = ea_jb_obj(b, cn, "control");
  ea_jb_u64(b, o, "frames_in", c.frames_in);
  ea_jb_u64(b, o, "frames_out", c.frames_out);
  ea_jb_u64(b, o, "bytes_in", c.bytes_in);
  ea_jb_u64(b, o, "bytes_out", c.bytes_out);
  ea_jb_u64(b, o, "dropped_malformed", c.dropped_malformed);
  ea_jb_u64(b, o, "dropped_unauthenticated", c.dropped_unauthenticated);
  ea_jb_u64(b, o, "dropped_replayed", c.dropped_replayed);
  ea_jb_u64(b, o, "dropped_oversize", c.dropped_oversize);
  ea_jb_u64(b, o, "send_errors", c.send_errors);
  ea_jb_u64(b, o, "encode_errors", c.encode_errors);
  ea_jb_u64(b, o, "connects", c.connects);
  ea_jb_u64(b, o, "accepted", c.accepted);
  ea_jb_u64(b, o, "conns_out", c.conns_out);
  ea_jb_u64(b, o, "conns_in", c.conns_in);
  ea_jb_u64(b, o, "resets", c.resets);
  ea_jb_u64(b, o, "preauth_evicted", c.preauth_evicted);
  ea_jb_u64(b, o, "refused_rate", c.refused_rate);
  ea_jb_u64(b, o, "accepts_deferred", c.accepts_deferred);
  ea_jb_u64(b, o, "preauth_timeouts", c.preauth_timeouts);
  ea__http_stats hs;
  ea__agent_http_stats(a, &hs);
  o = ea_jb_obj(b, cn, "http");
  ea_jb_u64(b, o, "requests", hs.requests);
  ea_jb_u64(b, o, "refused_per_source", hs.refused_per_source);
  ea_jb_u64(b, o, "refused_full", hs.refused_full);
  ea_jb_u64(b, o, "closed_unrequested", hs.closed_unrequested);
  o = ea_jb_obj(b, cn, "workers");
  ea_jb_u64(b, o, "failures", a->worker_failures);
  ea_jb_u64(b, o, "restarts", a->worker_restarts);
  uint64_t sw = 0, sc = 0;
  if (a->sup) ea__sup_starts(a->sup, &sw, &sc);
  ea_jb_u64(b, o, "warm_starts", sw);
  ea_jb_u64(b, o, "cold_starts", sc);
  ea_jb_u64(b, o, "bad_packets", a->sup ? ea__sup_bad_packets(a->sup) : 0);
  o = ea_jb_obj(b, cn, "alerts");
  for (int k = 0; k < EA__ALERT_KINDS; k++)
    ea_jb_u64(b, o, ea__alert_kind_str((ea__alert_kind)k), ea__agent_alerts(a, (ea__alert_kind)k));
}

/* "config": what this agent runs with; n_up members alive or suspect. */
static void status_config(ea__agent *a, ea_jb *b, json_t *doc, size_t n_up) {
  const ea_swim_config *c = &a->o->cfg.membership;
  uint64_t smin = 0, smax = 0;
  ea_swim_suspicion_bounds(ea_transport_swim(a->tr), &smin, &smax);
  json_t *o = ea_jb_obj(b, doc, "config");
  ea_jb_str(b, o, "bind", a->o->bind);
  ea_jb_str(b, o, "join", a->o->join);
  ea_jb_bool(b, o, "key", ea_transport_has_key(a->tr));
  ea_jb_str(b, o, "data_dir", a->o->data_dir);
  ea_jb_str(b, o, "config_file", a->o->config_path);
  ea_jb_int(b, o, "probe_interval_ms", c->probe_interval_ms);
  ea_jb_int(b, o, "probe_timeout_ms", c->probe_timeout_ms);
  ea_jb_int(b, o, "gossip_interval_ms", c->gossip_interval_ms);
  ea_jb_int(b, o, "push_pull_interval_ms", c->push_pull_interval_ms);
  ea_jb_u64(b, o, "suspicion_min_ms", smin);
  ea_jb_u64(b, o, "suspicion_max_ms", smax);
  ea_jb_u64(b, o, "detection_bound_ms", ea__detection_bound_ms(c, n_up));
  ea_jb_str(b, o, "log_level", a->o->cfg.logging.level);
  ea_jb_str(b, o, "backend", ea_comm_backend_name(a->backend));
  ea_jb_int(b, o, "workers_per_node", a->o->cfg.compute.workers_per_node);
  ea_jb_int(b, o, "min_nodes", a->o->cfg.compute.min_nodes);
  ea_jb_int(b, o, "max_nodes", a->o->cfg.compute.max_nodes);
  ea_jb_u64(b, o, "train_steps", a->o->cfg.train.steps);
  ea_jb_int(b, o, "stall_timeout_seconds", a->o->cfg.runtime.stall_timeout_seconds);
  ea_jb_str(b, o, "worker_config", a->job_path);
}

int ea__agent_cmd_status(void *ctx, const char *args, json_t **out) {
  ea__agent *a = ctx;
  (void)args;
  if (!a->tr) {
    *out = ea_json_error("shutting down");
    return -ESHUTDOWN;
  }
  uint64_t now = uv_now(&a->loop);
  ea_jb b = {0};
  json_t *doc = json_object();
  ea_jb_str(&b, doc, "version", EA_VERSION);
  ea_jb_str(&b, doc, "experiment", a->o->cfg.experiment.name); /* the metrics job label */
  status_self(a, &b, doc, now);
  size_t counts[4] = {0};
  if (status_members(a, &b, doc, now, counts) < 0) {
    json_decref(doc);
    *out = ea_json_error("out of memory");
    return -ENOMEM;
  }
  status_controller(a, &b, doc);
  ea__ident_status(a, &b, doc);
  status_generation(a, &b, doc);
  status_held_out(a, &b, doc, now);
  ea__agent_spare_status(a, &b, doc);
  ea__agent_pace_status(a, &b, doc);
  status_checkpoint(a, &b, doc);
  ea__agent_job_status(a, &b, doc);
  status_counters(a, &b, doc);
  ea__agent_alerts_status(a, &b, doc);
  status_config(a, &b, doc, counts[EA_STATE_ALIVE] + counts[EA_STATE_SUSPECT]);
  if (b.oom) {
    json_decref(doc);
    *out = NULL;
    return -ENOMEM;
  }
  *out = doc;
  return 0;
}
