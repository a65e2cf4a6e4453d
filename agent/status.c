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
 * Built on the loop from state in memory: no I/O, no blocking.
 */
#include "agent_int.h"

#include "ea_ckpt.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static int cmp_member_ptr(const void *x, const void *y) {
  const ea_member *a = *(const ea_member *const *)x, *b = *(const ea_member *const *)y;
  int c = strcmp(a->meta.name, b->meta.name);
  return c ? c : ea_node_id_cmp(&a->id, &b->id);
}

static void json_addr(ea__sb *o, const char *key, const ea_addr *addr) {
  char s[64];
  ea_addr_str(addr, s, sizeof s);
  ea__sb_printf(o, "\"%s\":", key);
  ea__sb_json_str(o, s);
}

static void json_gen(ea__sb *o, const char *key, const ea_rdzv_gen *g) {
  char s[48];
  ea_rdzv_gen_str(g, s, sizeof s);
  ea__sb_printf(o, "\"%s\":", key);
  ea__sb_json_str(o, s);
}

/* "generation" and "workers": what this node trains, and why (not). */
static void status_generation(ea__agent *a, ea__sb *o) {
  ea_rdzv_status st;
  ea_rdzv_status_get(a->rdzv, &st);
  const ea_rdzv_plan *p = ea_rdzv_running(a->rdzv);
  ea__sb_printf(o, ",\"generation\":{\"phase\":\"%s\",", ea_rdzv_phase_str(st.phase));
  json_gen(o, "running", &st.running);
  ea__sb_printf(o, ",\"gen\":%" PRIu64 ",\"world\":%" PRIu32 ",\"nodes\":[",
                ea_rdzv_gen_u64(&st.running), p ? p->world : 0);
  for (uint32_t i = 0; p && i < p->nnodes; i++) {
    if (i) ea__sb_puts(o, ",");
    ea__sb_json_str(o, p->nodes[i].name);
  }
  ea__sb_puts(o, "],\"ranks\":[");
  for (uint32_t k = 0; p && k < a->wpn; k++)
    ea__sb_printf(o, "%s%" PRIu32, k ? "," : "", a->run.rank_base + k);
  ea__sb_printf(o, "],\"last_step\":%" PRIu64 ",\"last_loss\":", st.last_step);
  if (a->has_loss && isfinite(a->last_loss))
    ea__sb_printf(o, "%.6f", a->last_loss);
  else
    ea__sb_puts(o, "null");
  ea__sb_puts(o, ",\"reason\":");
  ea__sb_json_str(o, st.reason);
  ea__sb_printf(o,
                ",\"controller\":%s,\"has_quorum\":%s,\"forming\":%s,\"draining\":%s,"
                "\"agent_phase\":\"%s\",",
                st.controller ? "true" : "false", st.has_quorum ? "true" : "false",
                st.forming ? "true" : "false", st.draining ? "true" : "false",
                a->phase == EA__PHASE_RUNNING    ? "running"
                : a->phase == EA__PHASE_DRAINING ? "draining"
                : a->phase == EA__PHASE_STOPPING ? "stopping"
                                             : "leaving");
  json_gen(o, "seen", &st.seen);
  ea__sb_puts(o, ",");
  json_gen(o, "accepted", &st.accepted);
  ea__sb_puts(o, ",");
  json_gen(o, "durable", &st.durable);
  ea__sb_puts(o, ",");
  json_gen(o, "formed", &st.formed);
  ea__sb_printf(
      o,
      ",\"formed_nodes\":%" PRIu32 ",\"committed_here\":%" PRIu64 ",\"recoveries\":%" PRIu64
      ",\"last_formation_ms\":%" PRIu64 ",\"last_stall_ms\":%" PRIu64 "},\"workers\":[",
      st.formed_nodes, a->gens_committed, a->recoveries, a->last_formation_ms, a->last_stall_ms);
  for (uint32_t k = 0; k < a->wpn; k++) {
    const ea__agent_wk *w = &a->w[k];
    ea__sb_printf(o,
                  "%s{\"idx\":%" PRIu32 ",\"pid\":%d,\"state\":\"%s\",\"gen\":%" PRIu64
                  ",\"step\":%" PRIu64 ",\"loss\":",
                  k ? "," : "", k, a->sup ? ea__sup_pid(a->sup, k) : 0, ea__agent_wstate_str(w->state),
                  w->gen, w->next_step);
    if (w->has_loss && isfinite(w->loss))
      ea__sb_printf(o, "%.6f", w->loss);
    else
      ea__sb_puts(o, "null");
    ea__sb_printf(
        o, ",\"digest\":\"%016" PRIx64 "\",\"step_ms\":%.2f,\"restarts\":%" PRIu32 ",\"comm\":",
        w->digest, w->step_s * 1e3, w->restarts);
    ea__sb_json_str(o, w->comm);
    ea__sb_puts(o, "}");
  }
  ea__sb_puts(o, "]");
}

/* "checkpoint": the checkpoints of the job as this node knows them — all
 * it committed as controller, LATEST as last read, its own shards. */
static void status_checkpoint(ea__agent *a, ea__sb *o) {
  const ea__agent_ck *k = &a->ck;
  const ea_config *cfg = &a->o->cfg;
  ea__ckpt_svc_stats sv = {0};
  if (a->ckpt_svc) ea__ckpt_svc_stats_get(a->ckpt_svc, &sv);
  ea__ckpt_core_stats cs = {0};
  if (a->ckpt_ctl) ea__ckpt_ctl_stats_get(a->ckpt_ctl, &cs);
  ea__sb_printf(o, ",\"checkpoint\":{\"enabled\":%s,\"dir\":",
                cfg->checkpoint.save_interval_steps ? "true" : "false");
  ea__sb_json_str(o, a->ckpt_dir);
  ea__sb_printf(o,
                ",\"interval\":%" PRIu32 ",\"keep_last\":%" PRIu32 ",\"busy_policy\":\"%s\","
                "\"controller\":%s,\"latest\":",
                cfg->checkpoint.save_interval_steps, cfg->checkpoint.keep_last,
                cfg->checkpoint.busy_policy, a->ckpt_ctl ? "true" : "false");
  /* The newest checkpoint known here: our own last commit, or LATEST. */
  uint64_t ls = 0, lg = 0;
  bool have = false;
  if (k->latest[0] && ea_ckpt_parse_dir_name(k->latest, &ls, &lg) == 0) have = true;
  if (k->have_last && (!have || k->last_gen > lg || (k->last_gen == lg && k->last_step > ls))) {
    ls = k->last_step;
    lg = k->last_gen;
    have = true;
  }
  if (k->latest[0])
    ea__sb_json_str(o, k->latest);
  else
    ea__sb_puts(o, "null");
  if (have)
    ea__sb_printf(o, ",\"last_step\":%" PRIu64 ",\"last_gen\":%" PRIu64, ls, lg);
  else
    ea__sb_puts(o, ",\"last_step\":null,\"last_gen\":null");
  ea__sb_printf(o,
                ",\"in_flight\":%" PRIu32 ",\"started\":%" PRIu64 ",\"committed\":%" PRIu64
                ",\"failed\":%" PRIu64 ",\"skipped\":%" PRIu64 ",\"stale\":%" PRIu64
                ",\"bytes\":%" PRIu64 ",\"last_persist_s\":%.6f,\"last_write_ms\":%.3f"
                ",\"last_commit_ms\":%.3f,\"last_stall_us\":%.0f,\"last_wait_us\":%.0f"
                ",\"last_error\":",
                sv.in_flight + cs.pending, k->started, k->committed, k->failed, k->skipped,
                k->stale, k->bytes, k->last_persist_s, k->last_write_s * 1e3,
                k->last_commit_s * 1e3, k->last_stall_s * 1e6, k->last_wait_s * 1e6);
  ea__sb_json_str(o, k->last_error);
  ea__sb_printf(o,
                ",\"pending\":%" PRIu32 ",\"shards\":{\"staged\":%" PRIu64
                ",\"written\":%" PRIu64 ",\"failed\":%" PRIu64 ",\"skipped\":%" PRIu64
                ",\"bytes\":%" PRIu64 ",\"in_flight\":%" PRIu32
                ",\"last_write_ms\":%.3f,\"last_stall_us\":%.0f},\"reports\":{\"sent\":%" PRIu64
                ",\"local\":%" PRIu64 ",\"received\":%" PRIu64 ",\"dropped\":%" PRIu64
                ",\"malformed\":%" PRIu64 ",\"ignored\":%" PRIu64 "},\"resumed\":",
                cs.pending, sv.staged, sv.written, sv.failed, sv.skipped, sv.bytes, sv.in_flight,
                k->shard_write_s * 1e3, k->shard_stall_s * 1e6, k->reports_sent, k->reports_local,
                k->reports_in, k->reports_dropped, k->reports_bad, cs.ignored);
  if (k->loaded) {
    ea__sb_puts(o, "{\"name\":");
    ea__sb_json_str(o, k->loaded_name);
    ea__sb_printf(o,
                  ",\"step\":%" PRIu64 ",\"digest\":\"%016" PRIx64
                  "\",\"fallbacks\":%" PRIu32 ",\"seconds\":%.3f,\"why\":",
                  k->loaded_step, k->loaded_digest, k->loaded_fallbacks, k->loaded_s);
    ea__sb_json_str(o, k->loaded_why);
    ea__sb_puts(o, "}}");
  } else {
    ea__sb_puts(o, "null}");
  }
}

static void status_counters(ea__agent *a, ea__sb *o) {
  ea_rdzv_status st;
  ea_rdzv_status_get(a->rdzv, &st);
  ea__sb_printf(o,
                ",\"rdzv\":{\"formations_started\":%" PRIu64 ",\"formations_committed\":%" PRIu64
                ",\"formations_failed\":%" PRIu64 ",\"nacks_sent\":%" PRIu64
                ",\"nacks_received\":%" PRIu64 ",\"stale_ignored\":%" PRIu64
                ",\"persist_errors\":%" PRIu64 "}",
                st.formations_started, st.formations_committed, st.formations_failed, st.nacks_sent,
                st.nacks_received, st.stale_ignored, st.persist_errors);
  ea__ctl_stats c = {0};
  if (a->ctl) ea__ctl_stats_get(a->ctl, &c);
  ea__sb_printf(o,
                ",\"control\":{\"frames_in\":%" PRIu64 ",\"frames_out\":%" PRIu64
                ",\"bytes_in\":%" PRIu64 ",\"bytes_out\":%" PRIu64 ",\"dropped_malformed\":%" PRIu64
                ",\"dropped_unauthenticated\":%" PRIu64 ",\"dropped_oversize\":%" PRIu64
                ",\"send_errors\":%" PRIu64 ",\"encode_errors\":%" PRIu64 ",\"connects\":%" PRIu64
                ",\"accepted\":%" PRIu64 ",\"conns_out\":%" PRIu64 ",\"conns_in\":%" PRIu64 "}",
                c.frames_in, c.frames_out, c.bytes_in, c.bytes_out, c.dropped_malformed,
                c.dropped_unauthenticated, c.dropped_oversize, c.send_errors, c.encode_errors,
                c.connects, c.accepted, c.conns_out, c.conns_in);
  ea__sb_printf(o,
                ",\"workers\":{\"failures\":%" PRIu64 ",\"restarts\":%" PRIu64
                ",\"bad_packets\":%" PRIu64 "}},",
                a->worker_failures, a->worker_restarts, a->sup ? ea__sup_bad_packets(a->sup) : 0);
}

int ea__agent_cmd_status(void *ctx, const char *args, ea__sb *o) {
  ea__agent *a = ctx;
  (void)args;
  if (!a->tr) {
    ea__sb_puts(o, "{\"error\":\"shutting down\"}");
    return -ESHUTDOWN;
  }
  const ea_swim *s = ea_transport_swim(a->tr);
  uint64_t now = uv_now(&a->loop);
  const ea_member *ms;
  size_t n = ea_swim_members(s, &ms);
  const ea_member **sorted = malloc((n ? n : 1) * sizeof *sorted);
  if (!sorted) {
    ea__sb_puts(o, "{\"error\":\"out of memory\"}");
    return -ENOMEM;
  }
  size_t counts[4] = {0};
  for (size_t i = 0; i < n; i++) {
    sorted[i] = &ms[i];
    if (ms[i].state < 4) counts[ms[i].state]++;
  }
  qsort(sorted, n, sizeof *sorted, cmp_member_ptr);

  const ea_member *self = ea_swim_self(s);
  ea__sb_printf(o, "{\"version\":\"%s\",\"self\":{\"name\":", EA_VERSION);
  ea__sb_json_str(o, a->o->name);
  ea__sb_printf(o, ",\"id\":\"%s\",", a->idhex);
  json_addr(o, "gossip", ea_transport_addr(a->tr));
  ea__sb_puts(o, ",");
  json_addr(o, "control", ea_transport_control(a->tr));
  ea__sb_puts(o, ",");
  json_addr(o, "bound", ea_transport_bound(a->tr));
  ea__sb_puts(o, ",\"admin\":");
  ea__sb_json_str(o, a->sock_path);
  ea__sb_puts(o, ",\"role\":");
  ea__sb_json_str(o, a->o->role);
  ea__sb_printf(o,
                ",\"state\":\"%s\",\"incarnation\":%" PRIu32
                ",\"pid\":%ld,\"uptime_s\":%.1f,"
                "\"joined\":%s,\"leaving\":%s},",
                ea_member_state_str(self->state), self->incarnation, (long)getpid(),
                (double)(now - a->start_ms) / 1000.0, a->joined ? "true" : "false",
                a->phase >= EA__PHASE_STOPPING ? "true" : "false");

  ea__sb_printf(o,
                "\"summary\":{\"members\":%zu,\"alive\":%zu,\"suspect\":%zu,\"dead\":%zu,"
                "\"left\":%zu},\"members\":[",
                n, counts[EA_STATE_ALIVE], counts[EA_STATE_SUSPECT], counts[EA_STATE_DEAD],
                counts[EA_STATE_LEFT]);
  for (size_t i = 0; i < n; i++) {
    const ea_member *m = sorted[i];
    char hex[33];
    ea_node_id_hex(&m->id, hex);
    ea__sb_printf(o, "%s{\"name\":", i ? "," : "");
    ea__sb_json_str(o, m->meta.name);
    ea__sb_printf(o, ",\"id\":\"%s\",", hex);
    json_addr(o, "gossip", &m->meta.gossip);
    ea__sb_puts(o, ",");
    json_addr(o, "control", &m->meta.control);
    ea__sb_puts(o, ",\"role\":");
    ea__sb_json_str(o, m->meta.role);
    ea__sb_puts(o, ",\"version\":");
    ea__sb_json_str(o, m->meta.version);
    ea__sb_printf(o, ",\"state\":\"%s\",\"incarnation\":%" PRIu32 ",\"since_s\":%.1f,\"self\":%s}",
                  ea_member_state_str(m->state), m->incarnation,
                  now >= m->since_ms ? (double)(now - m->since_ms) / 1000.0 : 0.0,
                  ea_node_id_cmp(&m->id, &a->id) == 0 ? "true" : "false");
  }
  free(sorted);
  ea__sb_puts(o, "],\"controller\":");
  const ea_election *el = ea_rdzv_election(a->rdzv);
  if (el && el->have) {
    char hex[33];
    ea_node_id_hex(&el->controller, hex);
    const ea_member *c = ea_swim_find(s, &el->controller);
    ea__sb_puts(o, "{\"name\":");
    ea__sb_json_str(o, ea__agent_member_name(c));
    ea__sb_printf(o, ",\"id\":\"%s\",\"self\":%s,\"eligible\":%" PRIu32 ",\"reason\":", hex,
                  ea_node_id_cmp(&el->controller, &a->id) == 0 ? "true" : "false", el->eligible);
    ea__sb_json_str(o, el->reason);
    ea__sb_puts(o, "}");
  } else {
    ea__sb_puts(o, "{\"name\":null,\"id\":null,\"reason\":");
    ea__sb_json_str(o, el ? el->reason : "no election yet");
    ea__sb_puts(o, "}");
  }

  status_generation(a, o);
  status_checkpoint(a, o);

  ea_transport_stats t;
  ea_transport_stats_get(a->tr, &t);
  ea__sb_printf(o,
                ",\"counters\":{\"transport\":{\"packets_in\":%" PRIu64 ",\"packets_out\":%" PRIu64
                ",\"bytes_in\":%" PRIu64 ",\"bytes_out\":%" PRIu64 ",\"dropped_malformed\":%" PRIu64
                ",\"dropped_unauthenticated\":%" PRIu64 ",\"dropped_oversize\":%" PRIu64
                ",\"send_errors\":%" PRIu64 ",\"encode_errors\":%" PRIu64
                ",\"updates_trimmed\":%" PRIu64 ",\"syncs_ok\":%" PRIu64
                ",\"syncs_failed\":%" PRIu64 ",\"syncs_served\":%" PRIu64
                ",\"syncs_refused\":%" PRIu64 ",\"join_attempts\":%" PRIu64 "},",
                t.packets_in, t.packets_out, t.bytes_in, t.bytes_out, t.dropped_malformed,
                t.dropped_unauthenticated, t.dropped_oversize, t.send_errors, t.encode_errors,
                t.updates_trimmed, t.syncs_ok, t.syncs_failed, t.syncs_served, t.syncs_refused,
                t.join_attempts);
  ea_swim_stats w;
  ea_swim_stats_get(s, &w);
  ea__sb_printf(o,
                "\"swim\":{\"msgs_in\":%" PRIu64 ",\"msgs_out\":%" PRIu64 ",\"pings_sent\":%" PRIu64
                ",\"acks_recv\":%" PRIu64 ",\"ping_reqs_sent\":%" PRIu64 ",\"nacks_recv\":%" PRIu64
                ",\"suspicions\":%" PRIu64 ",\"refutations\":%" PRIu64 ",\"declared_dead\":%" PRIu64
                ",\"updates_sent\":%" PRIu64 ",\"syncs_started\":%" PRIu64
                ",\"syncs_merged\":%" PRIu64 ",\"stale_dropped\":%" PRIu64 ",\"health\":%" PRIu32
                "}",
                w.msgs_in, w.msgs_out, w.pings_sent, w.acks_recv, w.ping_reqs_sent, w.nacks_recv,
                w.suspicions, w.refutations, w.declared_dead, w.updates_sent, w.syncs_started,
                w.syncs_merged, w.stale_dropped, w.health);
  status_counters(a, o);

  const ea_swim_config *c = &a->o->cfg.membership;
  uint64_t smin = 0, smax = 0;
  ea_swim_suspicion_bounds(s, &smin, &smax);
  ea__sb_puts(o, "\"config\":{\"bind\":");
  ea__sb_json_str(o, a->o->bind);
  ea__sb_puts(o, ",\"join\":");
  ea__sb_json_str(o, a->o->join);
  ea__sb_printf(o, ",\"key\":%s,\"data_dir\":", ea_transport_has_key(a->tr) ? "true" : "false");
  ea__sb_json_str(o, a->o->data_dir);
  ea__sb_puts(o, ",\"config_file\":");
  ea__sb_json_str(o, a->o->config_path);
  ea__sb_printf(o,
                ",\"probe_interval_ms\":%" PRIu32 ",\"probe_timeout_ms\":%" PRIu32
                ",\"gossip_interval_ms\":%" PRIu32 ",\"push_pull_interval_ms\":%" PRIu32
                ",\"suspicion_min_ms\":%" PRIu64 ",\"suspicion_max_ms\":%" PRIu64
                ",\"detection_bound_ms\":%" PRIu64 ",\"log_level\":",
                c->probe_interval_ms, c->probe_timeout_ms, c->gossip_interval_ms,
                c->push_pull_interval_ms, smin, smax,
                ea__detection_bound_ms(c, counts[EA_STATE_ALIVE] + counts[EA_STATE_SUSPECT]));
  ea__sb_json_str(o, a->o->cfg.logging.level);
  ea__sb_printf(o,
                ",\"backend\":\"%s\",\"workers_per_node\":%" PRIu32 ",\"min_nodes\":%" PRIu32
                ",\"max_nodes\":%" PRIu32 ",\"train_steps\":%" PRIu64 ",\"worker_config\":",
                ea_comm_backend_name(a->backend), a->o->cfg.compute.workers_per_node,
                a->o->cfg.compute.min_nodes, a->o->cfg.compute.max_nodes, a->o->cfg.train.steps);
  ea__sb_json_str(o, a->job_path);
  ea__sb_puts(o, "}}");
  return o->oom ? -ENOMEM : 0;
}
