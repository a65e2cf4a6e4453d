/* report.c — what a run found, four ways: a JSON document for tools, a
 * summary for people (stdout and summary.txt), JUnit XML for CI, and an
 * SVG timeline to open in a browser.
 *
 * The recovery table groups episodes by fault kind and phase and gives the
 * median and the maximum of three intervals measured from the agents' log
 * stamps: detection (the first log line that shows the cluster noticed:
 * a member declared dead, a worker's exit seen, a drain begun), re-formation
 * (the first commit of a generation with exactly the expected members) and
 * first step (that generation's first completed step), each from the moment
 * the harness acted (the fault, the heal, or the restore).
 *
 * The timeline draws the cluster's step over time on top, then one row per
 * node (coloured by the generation it runs, grey when paused, hatched while
 * SIGSTOPped, outlined red while cut off), with every fault as a red line,
 * every generation commit as a thin blue line and every committed
 * checkpoint as a green mark.  Hover text (<title>) says what each is.
 */
#include "chaos.h"

#include "ea_rdzv.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- recovery statistics ------------------------------------------------------- */

typedef struct {
  const char *kind;
  const char *phase;
  double det[512], ref[512], first[512], lost[512];
  int ndet, nref, nfirst, nlost, n;
} row;

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  if (!n) return NAN;
  qsort(v, (size_t)n, sizeof *v, cmpd);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double maxv(const double *v, int n) {
  double m = NAN;
  for (int i = 0; i < n; i++)
    if (isnan(m) || v[i] > m) m = v[i];
  return m;
}

static row *row_for(row *rows, int *nrows, const char *kind, const char *phase) {
  for (int i = 0; i < *nrows; i++)
    if (!strcmp(rows[i].kind, kind) && !strcmp(rows[i].phase, phase)) return &rows[i];
  row *r = &rows[(*nrows)++];
  memset(r, 0, sizeof *r);
  r->kind = kind;
  r->phase = phase;
  return r;
}

static void add_phase(row *w, const ea__chaos_phase *p, int64_t lost) {
  if (w->n >= 512) return;
  w->n++;
  if (p->t_detect >= 0 && p->t_detect >= p->t_start)
    w->det[w->ndet++] = (double)(p->t_detect - p->t_start);
  if (p->t_reform >= 0) w->ref[w->nref++] = (double)(p->t_reform - p->t_start);
  if (p->t_first_step >= 0) w->first[w->nfirst++] = (double)(p->t_first_step - p->t_start);
  if (lost >= 0) w->lost[w->nlost++] = (double)lost;
}

static const char *restore_label(const ea__chaos_episode *e) {
  if (e->f.kind == EA__F_JOIN || e->f.kind == EA__F_JOIN_FLOOD)
    return e->f.remove_by_drain ? "leave (drain)" : "leave (SIGTERM)";
  switch (e->f.kind) {
    case EA__F_HTTP_FLOOD:
      return "flood over";
    case EA__F_SPARE:
      return "newcomers leave";
    case EA__F_PAUSE:
    case EA__F_ISOLATE:
    case EA__F_SPLIT:
    case EA__F_LOSS:
    case EA__F_ONEWAY:
      return "heal";
    case EA__F_WORKER_KILL:
      return "restart";
    case EA__F_DISK_FULL:
      return "disk freed";
    default:
      return e->f.fresh ? "restore (fresh node)" : "restore (rejoin)";
  }
}

static const char *degraded_label(const ea__chaos_episode *e) {
  if (e->f.kind == EA__F_JOIN || e->f.kind == EA__F_JOIN_FLOOD) return "join";
  if (e->f.kind == EA__F_DISK_FULL) return "disk full";
  if (e->f.kind == EA__F_SPARE) return "member lost, spare in";
  return "fault";
}

static int build_rows(const ea__chaos_run *r, row *rows) {
  int n = 0;
  for (size_t i = 0; i < r->neps; i++) {
    const ea__chaos_episode *e = &r->eps[i];
    if (e->state != EA__EP_DONE) continue;
    const char *k = ea__chaos_kind_name(e->f.kind);
    if (e->deg.t_start && (e->deg.observed || e->deg.t_reform >= 0 || e->deg.t_detect >= 0))
      add_phase(row_for(rows, &n, k, degraded_label(e)), &e->deg, e->steps_lost);
    if (e->res.t_start && (e->res.observed || e->res.t_reform >= 0))
      add_phase(row_for(rows, &n, k, restore_label(e)), &e->res,
                e->f.kind == EA__F_WORKER_KILL ? e->steps_lost : -1);
  }
  return n;
}

/* ---- invariants ---------------------------------------------------------------- */

static int nviol(const ea__chaos_run *r, int inv) {
  int n = 0;
  for (size_t i = 0; i < r->nviol; i++) n += r->viol[i].inv == inv;
  return n;
}

/* NULL when checked, else why not. */
static const char *inv_skip(const ea__chaos_run *r, int inv) {
  static char why[300];
  bool partitioned = false;
  for (size_t i = 0; i < r->neps; i++)
    if (r->eps[i].state == EA__EP_DONE &&
        (r->eps[i].f.kind == EA__F_ISOLATE || r->eps[i].f.kind == EA__F_SPLIT))
      partitioned = true;
  switch (inv) {
    case EA__I_MINORITY:
      if (!strcmp(r->cfg.distributed.quorum, "none"))
        return "distributed.quorum is none: both sides may train by design";
      if (!partitioned)
        return r->o.netns ? "no partition was made in this run"
                          : "no partition: needs --netns (root)";
      return NULL;
    case EA__I_CKPT:
      if (!r->ckpt_available) {
        snprintf(why, sizeof why, "%s",
                 r->ckpt_why[0] ? r->ckpt_why : "checkpoints are not available");
        return why;
      }
      return NULL;
    case EA__I_REFERENCE:
      if (r->library)
        return "a library-mode program: the harness has no model of it to replay or compare "
               "with";
      if (!r->t_done && nviol(r, inv) == 0) return "training did not reach the target step";
      return NULL;
    case EA__I_RESOURCES:
      return nviol(r, inv) ? NULL : ea__chaos_rsrc_skip(r);
    case EA__I_FOREIGN:
      for (size_t i = 0; i < r->neps; i++)
        if (r->eps[i].f.kind == EA__F_FOREIGN && r->eps[i].state == EA__EP_DONE) return NULL;
      return nviol(r, inv) ? NULL : "no foreign fault ran";
    case EA__I_PREEMPT:
      return r->preempt_checked || nviol(r, inv) ? NULL : "no mass preemption ran";
    case EA__I_PROBES:
      return r->probes_checked || nviol(r, inv) ? NULL : "no http-flood ran";
    case EA__I_SPARE:
      return r->spare_checked || nviol(r, inv) ? NULL : "no spare took a lost member's place";
    case EA__I_COVERAGE:
      return ea__chaos_interrupted && !nviol(r, inv)
                 ? "interrupted before the schedule ended: not judged"
                 : NULL;
    default:
      return NULL;
  }
}

bool ea__chaos_all_ok(const ea__chaos_run *r) {
  return r->nviol == 0 && !ea__chaos_interrupted;
}

/* ---- JSON ---------------------------------------------------------------------- */

static void jnum(ea_sb *s, double v) {
  if (isnan(v) || isinf(v))
    ea_sb_puts(s, "null");
  else
    ea_sb_printf(s, "%.1f", v);
}

static void jms(ea_sb *s, int64_t t, int64_t from) {
  if (t < 0 || !from)
    ea_sb_puts(s, "null");
  else
    ea_sb_printf(s, "%lld", (long long)(t - from));
}

static void json_phase(ea_sb *s, const ea__chaos_phase *p) {
  ea_sb_printf(
      s, "{\"expected\":%s,\"observed\":%s,\"timed_out\":%s,\"bound_ms\":%lld,\"detection_ms\":",
      p->expected ? "true" : "false", p->observed ? "true" : "false",
      p->timed_out ? "true" : "false", (long long)p->bound_ms);
  jms(s, p->t_detect, p->t_start);
  ea_sb_puts(s, ",\"reformation_ms\":");
  jms(s, p->t_reform, p->t_start);
  ea_sb_puts(s, ",\"first_step_ms\":");
  jms(s, p->t_first_step, p->t_start);
  ea_sb_puts(s, ",\"seen_by_polling_ms\":");
  jms(s, p->observed ? p->t_seen : -1, p->t_start);
  ea_sb_printf(s, ",\"generation\":\"%" PRIu64 "/%04" PRIx64 "\",\"world\":%u,\"nodes\":",
               ea_rdzv_gen64_term(p->gen), (uint64_t)ea_rdzv_gen64_ctrl(p->gen), p->world);
  ea_sb_json_str(s, p->nodes);
  ea_sb_puts(s, "}");
}

static const char *ep_state(int st) {
  switch (st) {
    case EA__EP_DONE:
      return "injected";
    case EA__EP_SKIPPED:
      return "skipped";
    case EA__EP_NOT_RUN:
      return "not_run";
    default:
      return "pending";
  }
}

static void write_json(const ea__chaos_run *r, ea_sb *s, const row *rows, int nrows) {
  double t0 = (double)r->t0;
  ea_sb_puts(s, "{\n\"tool\":\"elastic-chaos\",");
  ea_sb_printf(s, "\"version\":\"%s\",\"seed\":%" PRIu64 ",\"agents\":%d,\"duration_ms\":%lld,",
               EA_VERSION, r->o.seed, r->o.nagents, (long long)r->o.duration_ms);
  ea_sb_printf(s, "\"mode\":\"%s\",\"work_dir\":", r->o.netns ? "netns" : "loopback");
  ea_sb_json_str(s, r->o.work);
  ea_sb_puts(s, ",\"config\":");
  ea_sb_json_str(s, r->o.config[0] ? r->o.config : "(built-in)");
  ea_sb_printf(s,
               ",\"target_steps\":%" PRIu64
               ",\"calibrated_steps_per_s\":%.1f,\"recovery_bound_ms\":%lld,"
               "\"wall_s\":%.1f,\"ok\":%s,\"interrupted\":%s,",
               r->target_steps, r->calib_rate, (long long)r->bound_ms,
               r->t_end > r->t0 ? (double)(r->t_end - r->t0) / 1000.0 : 0.0,
               ea__chaos_all_ok(r) ? "true" : "false", ea__chaos_interrupted ? "true" : "false");
  ea_sb_puts(s, "\"aborted\":");
  if (r->aborted)
    ea_sb_json_str(s, r->abort_why);
  else
    ea_sb_puts(s, "null");
  ea_sb_printf(
      s,
      ",\n\"job\":{\"context\":%u,\"embed_dim\":%u,\"hidden\":%u,\"layers\":%u,\"global_batch\":%u,"
      "\"micro_batch\":%u,\"workers_per_node\":%u,\"min_nodes\":%u,\"max_nodes\":%u,\"quorum\":",
      r->cfg.train.context, r->cfg.train.embed_dim, r->cfg.train.hidden, r->cfg.train.layers,
      r->cfg.distributed.global_batch, r->cfg.distributed.micro_batch,
      r->cfg.compute.workers_per_node, r->cfg.compute.min_nodes, r->cfg.compute.max_nodes);
  ea_sb_json_str(s, r->cfg.distributed.quorum);
  ea_sb_printf(
      s,
      ",\"scale_up_delay_ms\":%u,\"communication_timeout_seconds\":%u,\"save_interval_steps\":%u},",
      r->cfg.distributed.scale_up_delay_ms, r->cfg.distributed.communication_timeout_seconds,
      r->cfg.checkpoint.save_interval_steps);
  ea_sb_puts(s, "\n\"faults\":[");
  for (size_t i = 0; i < r->neps; i++) {
    const ea__chaos_episode *e = &r->eps[i];
    char desc[256];
    ea__chaos_fault_str(&e->f, desc, sizeof desc);
    ea_sb_printf(s, "%s\n {\"index\":%zu,\"kind\":\"%s\",\"at_fraction\":%.4f,\"description\":",
                 i ? "," : "", i + 1, ea__chaos_kind_name(e->f.kind), e->f.frac);
    ea_sb_json_str(s, desc);
    ea_sb_printf(s, ",\"state\":\"%s\",\"skip_reason\":", ep_state(e->state));
    ea_sb_json_str(s, e->skip_reason);
    ea_sb_puts(s, ",\"victim\":");
    ea_sb_json_str(s, e->victim);
    ea_sb_printf(s, ",\"victim_was_controller\":%s,\"newcomer\":",
                 e->victim_was_controller ? "true" : "false");
    ea_sb_json_str(s, e->newcomer);
    ea_sb_puts(s, ",\"minority\":");
    ea_sb_json_str(s, e->minority);
    ea_sb_puts(s, ",\"t_inject_s\":");
    if (e->t_inject)
      ea_sb_printf(s, "%.3f", ((double)e->t_inject - t0) / 1000.0);
    else
      ea_sb_puts(s, "null");
    ea_sb_printf(s, ",\"step_at_inject\":%" PRIu64 ",\"steps_lost\":", e->step_at_inject);
    if (e->steps_lost >= 0 && e->state == EA__EP_DONE)
      ea_sb_printf(s, "%lld", (long long)e->steps_lost);
    else
      ea_sb_puts(s, "null");
    ea_sb_puts(s, ",\"degraded\":");
    json_phase(s, &e->deg);
    ea_sb_puts(s, ",\"restored\":");
    json_phase(s, &e->res);
    ea_sb_puts(s, ",\"note\":");
    ea_sb_json_str(s, e->note);
    ea_sb_puts(s, "}");
  }
  ea_sb_puts(s, "],\n\"recovery\":[");
  for (int i = 0; i < nrows; i++) {
    row w = rows[i];
    ea_sb_printf(s, "%s\n {\"kind\":\"%s\",\"phase\":\"%s\",\"n\":%d,\"detection_ms\":{\"median\":",
                 i ? "," : "", w.kind, w.phase, w.n);
    jnum(s, median(w.det, w.ndet));
    ea_sb_puts(s, ",\"max\":");
    jnum(s, maxv(w.det, w.ndet));
    ea_sb_puts(s, "},\"reformation_ms\":{\"median\":");
    jnum(s, median(w.ref, w.nref));
    ea_sb_puts(s, ",\"max\":");
    jnum(s, maxv(w.ref, w.nref));
    ea_sb_puts(s, "},\"first_step_ms\":{\"median\":");
    jnum(s, median(w.first, w.nfirst));
    ea_sb_puts(s, ",\"max\":");
    jnum(s, maxv(w.first, w.nfirst));
    ea_sb_puts(s, "},\"steps_lost\":{\"median\":");
    jnum(s, median(w.lost, w.nlost));
    ea_sb_puts(s, ",\"max\":");
    jnum(s, maxv(w.lost, w.nlost));
    ea_sb_puts(s, "}}");
  }
  ea_sb_puts(s, "],\n\"invariants\":[");
  for (int inv = 0; inv < EA__I_COUNT; inv++) {
    const char *skip = inv_skip(r, inv);
    int n = nviol(r, inv);
    ea_sb_printf(s, "%s\n {\"name\":\"%s\",\"description\":", inv ? "," : "",
                 ea__chaos_inv_name(inv));
    ea_sb_json_str(s, ea__chaos_inv_desc(inv));
    ea_sb_printf(s, ",\"ok\":%s,\"skipped\":", n == 0 ? "true" : "false");
    if (skip && n == 0)
      ea_sb_json_str(s, skip);
    else
      ea_sb_puts(s, "null");
    ea_sb_puts(s, ",\"violations\":[");
    int k = 0;
    for (size_t i = 0; i < r->nviol; i++) {
      if (r->viol[i].inv != inv) continue;
      ea_sb_printf(s, "%s{\"t_s\":%.3f,\"message\":", k++ ? "," : "",
                   ((double)r->viol[i].t_ms - t0) / 1000.0);
      ea_sb_json_str(s, r->viol[i].msg);
      ea_sb_puts(s, "}");
    }
    ea_sb_puts(s, "]}");
  }
  const ea__chaos_refres *x = &r->ref;
  ea_sb_printf(s,
               "],\n\"reference\":{\"w1\":{\"done\":%s,\"steps\":%" PRIu64
               ",\"digest\":\"%016" PRIx64 "\",\"seconds\":%.1f,\"final_loss\":",
               x->ref_done && x->ref_rc == 0 ? "true" : "false", x->ref_steps, x->ref_digest,
               x->ref_seconds);
  jnum(s, x->final_loss_ref);
  ea_sb_puts(s, ",\"cluster_final_loss\":");
  jnum(s, x->final_loss_cluster);
  ea_sb_printf(s,
               ",\"final_rel_diff\":%.3g,\"window\":%" PRIu64
               ",\"window_rel_diff\":%.3g,\"tolerance\":%.3g,"
               "\"digest_equal\":%s},",
               x->final_rel_diff, x->window, x->window_rel_diff, r->o.loss_tol,
               x->digest_equal_ref ? "true" : "false");
  ea_sb_printf(s,
               "\"exact_replay\":{\"ran\":%s,\"steps\":%" PRIu64 ",\"digest\":\"%016" PRIx64
               "\",\"first_mismatch\":%lld,\"seconds\":%.1f,\"message\":",
               x->replay_done ? "true" : "false", x->replay_steps, x->replay_digest,
               (long long)x->first_mismatch, x->replay_seconds);
  ea_sb_json_str(s, x->first_mismatch >= 0 ? x->mismatch : x->replay_err);
  ea_sb_puts(s, "},\"cluster_final_digest\":");
  ea_sb_json_str(s, r->final_digest_known ? r->final_digest_str : "");
  ea_sb_puts(s, "},\n\"checkpoints\":{\"available\":");
  ea_sb_puts(s, r->ckpt_available ? "true" : "false");
  ea_sb_puts(s, ",\"why\":");
  ea_sb_json_str(s, r->ckpt_available ? "" : r->ckpt_why);
  int verified = 0, matched = 0;
  for (size_t i = 0; i < r->nckpts; i++) {
    verified += r->ckpts[i].verified;
    matched += r->ckpts[i].live_match;
  }
  ea_sb_printf(
      s, ",\"seen\":%zu,\"verified\":%d,\"match_live_state\":%d,\"failed_events\":%d,\"resume\":",
      r->nckpts, verified, matched, r->ckpt_failed_events);
  ea_sb_json_str(s, r->resume_msg);
  ea_sb_puts(s, ",\"list\":[");
  for (size_t i = 0; i < r->nckpts; i++) {
    const ea__chaos_ckpt *c = &r->ckpts[i];
    ea_sb_printf(s,
                 "%s{\"name\":\"%s\",\"world\":%u,\"verified\":%s,\"matches_live\":%s,\"error\":",
                 i ? "," : "", c->name, c->world, c->verified ? "true" : "false",
                 c->live_known ? (c->live_match ? "true" : "false") : "null");
    ea_sb_json_str(s, c->err);
    ea_sb_puts(s, "}");
  }
  ea_sb_puts(s, "]},\n");
  ea__chaos_rsrc_json(r, s);
  ea_sb_puts(s, ",\n\"history\":");
  ea__chaos_histview hv;
  if (ea__chaos_history_view(r, &hv)) {
    ea_sb_printf(s,
                 "{\"step_records\":%" PRIu64 ",\"final_history_steps\":%" PRIu64
                 ",\"orphan_steps\":%" PRIu64 ",\"log_bytes\":%" PRIu64
                 ",\"parse_seconds\":%.2f,\"generations\":[",
                 hv.records, hv.lineage_steps, hv.orphan_steps, hv.log_bytes, hv.parse_seconds);
    for (size_t i = 0; i < hv.ngens; i++) {
      const ea__chaos_genview *g = &hv.gens[i];
      ea_sb_printf(
          s, "%s\n {\"gen\":\"%" PRIu64 "/%04" PRIx64 "\",\"world\":%u,\"nodes\":", i ? "," : "",
          ea_rdzv_gen64_term(g->gen), (uint64_t)ea_rdzv_gen64_ctrl(g->gen), g->world);
      ea_sb_json_str(s, g->nodes);
      ea_sb_printf(s, ",\"committed_s\":");
      if (g->t_commit >= 0)
        ea_sb_printf(s, "%.3f", ((double)g->t_commit - t0) / 1000.0);
      else
        ea_sb_puts(s, "null");
      if (g->trained)
        ea_sb_printf(s, ",\"steps\":[%" PRIu64 ",%" PRIu64 "]", g->start, g->last);
      else
        ea_sb_puts(s, ",\"steps\":null");
      if (g->lineage)
        ea_sb_printf(s, ",\"final_history\":[%" PRIu64 ",%" PRIu64 "]}", g->lineage_from,
                     g->lineage_to);
      else
        ea_sb_puts(s, ",\"final_history\":null}");
    }
    ea_sb_puts(s, "]}");
  } else {
    ea_sb_puts(s, "null");
  }
  ea_sb_puts(s, "\n}\n");
}

/* ---- text --------------------------------------------------------------------- */

static void fmt_stat(char *out, size_t cap, double *v, int n) {
  if (!n) {
    snprintf(out, cap, "-");
    return;
  }
  double mx = maxv(v, n), md = median(v, n);
  snprintf(out, cap, "%.0f (%.0f)", md, mx);
}

static void write_text(const ea__chaos_run *r, ea_sb *s, const row *rows, int nrows) {
  int skipped = 0, notrun = 0;
  for (size_t i = 0; i < r->neps; i++) {
    skipped += r->eps[i].state == EA__EP_SKIPPED;
    notrun += r->eps[i].state == EA__EP_NOT_RUN;
  }
  ea_sb_printf(s,
               "elastic-chaos seed %" PRIu64
               ": %d agents (%s), %zu faults scheduled: %d injected, %d skipped, %d not run\n",
               r->o.seed, r->o.nagents, r->o.netns ? "network namespaces" : "loopback", r->neps,
               r->injected, skipped, notrun);
  if (r->t_done)
    ea_sb_printf(s, "training reached step %" PRIu64 " after %.1f s; final params digest %s\n",
                 r->target_steps, (double)(r->t_done - r->t0) / 1000.0, r->final_digest_str);
  else
    ea_sb_printf(s, "training did NOT reach step %" PRIu64 "%s%s\n", r->target_steps,
                 r->aborted ? ": " : "", r->aborted ? r->abort_why : "");
  if (!r->o.netns)
    ea_sb_puts(s,
               "partitions and packet loss: skipped (need --netns, as root: one network "
               "namespace per agent)\n");
  ea_sb_puts(s, "packet delay: not available (this kernel has no sch_netem)\n");
  for (size_t i = 0; i < r->neps; i++)
    if (r->eps[i].state == EA__EP_SKIPPED || r->eps[i].state == EA__EP_NOT_RUN)
      ea_sb_printf(s, "  fault #%zu %s %s: %s\n", i + 1, ea__chaos_kind_name(r->eps[i].f.kind),
                   r->eps[i].state == EA__EP_SKIPPED ? "skipped" : "not run",
                   r->eps[i].skip_reason);
  ea_sb_puts(s, "\nrecovery, ms from the fault (or the heal / restore): median (max)\n");
  ea_sb_printf(s, "  %-16s %-22s %3s  %-13s %-13s %-13s %s\n", "kind", "phase", "n", "detection",
               "re-formation", "first step", "steps lost");
  for (int i = 0; i < nrows; i++) {
    row w = rows[i];
    char d[32], f[32], st[32], l[32];
    fmt_stat(d, sizeof d, w.det, w.ndet);
    fmt_stat(f, sizeof f, w.ref, w.nref);
    fmt_stat(st, sizeof st, w.first, w.nfirst);
    fmt_stat(l, sizeof l, w.lost, w.nlost);
    ea_sb_printf(s, "  %-16s %-22s %3d  %-13s %-13s %-13s %s\n", w.kind, w.phase, w.n, d, f, st, l);
  }
  ea_sb_puts(s, "\ninvariants\n");
  for (int inv = 0; inv < EA__I_COUNT; inv++) {
    int n = nviol(r, inv);
    const char *skip = inv_skip(r, inv);
    if (n)
      ea_sb_printf(s, "  FAIL %-22s %s: %d violation%s\n", ea__chaos_inv_name(inv),
                   ea__chaos_inv_desc(inv), n, n == 1 ? "" : "s");
    else if (skip)
      ea_sb_printf(s, "  skip %-22s %s (%s)\n", ea__chaos_inv_name(inv), ea__chaos_inv_desc(inv),
                   skip);
    else
      ea_sb_printf(s, "  ok   %-22s %s\n", ea__chaos_inv_name(inv), ea__chaos_inv_desc(inv));
    int k = 0;
    for (size_t i = 0; i < r->nviol && k < 10; i++)
      if (r->viol[i].inv == inv) {
        ea_sb_printf(s, "         - [%.1fs] %s\n",
                     ((double)r->viol[i].t_ms - (double)r->t0) / 1000.0, r->viol[i].msg);
        k++;
      }
  }
  const ea__chaos_refres *x = &r->ref;
  ea_sb_puts(s, "\nreference\n");
  if (r->library)
    ea_sb_puts(s, "  not run: a library-mode program (the harness has no model of it to replay)\n");
  else if (x->replay_done && x->first_mismatch < 0)
    ea_sb_printf(s,
                 "  exact replay of the final history (%" PRIu64
                 " steps at the world sizes the cluster used, "
                 "ring summation order): bit-identical at every step; final digest %016" PRIx64
                 " (%.1f s)\n",
                 x->replay_steps, x->replay_digest, x->replay_seconds);
  else if (x->first_mismatch >= 0)
    ea_sb_printf(s, "  exact replay DIVERGES: %s\n", x->mismatch);
  else
    ea_sb_printf(s, "  exact replay: not run%s%s\n", x->replay_err[0] ? ": " : "", x->replay_err);
  if (x->window)
    ea_sb_printf(s,
                 "  W=1 reference (%" PRIu64
                 " steps, no faults, %.1f s): final loss %.6f vs cluster %.6f "
                 "(rel %.2g); mean of the last %" PRIu64
                 " steps rel diff %.2g (tolerance %.2g); params digest %s\n",
                 x->ref_steps, x->ref_seconds, x->final_loss_ref, x->final_loss_cluster,
                 x->final_rel_diff, x->window, x->window_rel_diff, r->o.loss_tol,
                 x->digest_equal_ref ? "equal" : "differs (expected: W=1 sums in another order)");
  ea_sb_puts(s, "\ncheckpoints\n");
  if (!r->ckpt_available) {
    ea_sb_printf(s, "  not checked: %s\n", r->ckpt_why);
  } else {
    int verified = 0, matched = 0, known = 0;
    for (size_t i = 0; i < r->nckpts; i++) {
      verified += r->ckpts[i].verified;
      matched += r->ckpts[i].live_match;
      known += r->ckpts[i].live_known;
    }
    ea_sb_printf(
        s,
        "  %zu committed checkpoints seen, %d verified in full, %d of %d equal the live state; "
        "%d checkpoint failure events\n  %s\n",
        r->nckpts, verified, matched, known, r->ckpt_failed_events, r->resume_msg);
  }
  ea_sb_puts(s, "\n");
  ea__chaos_rsrc_summary(r, s);
  ea__chaos_histview hv;
  if (ea__chaos_history_view(r, &hv))
    ea_sb_printf(s,
                 "\nhistory: %" PRIu64
                 " step lines (%.1f MB of logs, parsed in %.1f s), %zu generations, "
                 "final history %" PRIu64 " steps, %" PRIu64
                 " computed steps discarded with their node\n",
                 hv.records, (double)hv.log_bytes / 1e6, hv.parse_seconds, hv.ngens,
                 hv.lineage_steps, hv.orphan_steps);
}

/* ---- JUnit --------------------------------------------------------------------- */

static void write_junit(const ea__chaos_run *r, ea_sb *s) {
  int tests = 0, failures = 0, skipped = 0;
  for (int inv = 0; inv < EA__I_COUNT; inv++) {
    tests++;
    if (nviol(r, inv))
      failures++;
    else if (inv_skip(r, inv))
      skipped++;
  }
  for (size_t i = 0; i < r->neps; i++) {
    const ea__chaos_episode *e = &r->eps[i];
    tests++;
    if (e->state != EA__EP_DONE)
      skipped++;
    else if ((e->deg.expected && e->deg.timed_out) || (e->res.expected && e->res.timed_out))
      failures++;
  }
  double secs = r->t_end > r->t0 ? (double)(r->t_end - r->t0) / 1000.0 : 0;
  ea_sb_printf(
      s,
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"elastic-chaos\" tests=\"%d\" "
      "failures=\"%d\" skipped=\"%d\" time=\"%.1f\">\n<testsuite name=\"elastic-chaos seed %" PRIu64
      "\" tests=\"%d\" failures=\"%d\" errors=\"0\" skipped=\"%d\" time=\"%.1f\">\n",
      tests, failures, skipped, secs, r->o.seed, tests, failures, skipped, secs);
  ea_sb_printf(
      s,
      "<properties><property name=\"seed\" value=\"%" PRIu64
      "\"/><property name=\"agents\" value=\"%d\"/>"
      "<property name=\"mode\" value=\"%s\"/><property name=\"target_steps\" value=\"%" PRIu64
      "\"/>"
      "</properties>\n",
      r->o.seed, r->o.nagents, r->o.netns ? "netns" : "loopback", r->target_steps);
  for (int inv = 0; inv < EA__I_COUNT; inv++) {
    ea_sb_printf(s, "<testcase classname=\"elastic-chaos.invariants\" name=\"%s\" time=\"0\">",
                 ea__chaos_inv_name(inv));
    int n = nviol(r, inv);
    const char *skip = inv_skip(r, inv);
    if (n) {
      ea_sb_printf(s, "<failure message=\"%d violation%s\" type=\"invariant\">", n,
                   n == 1 ? "" : "s");
      for (size_t i = 0; i < r->nviol; i++)
        if (r->viol[i].inv == inv) {
          ea__chaos_xml_str(s, r->viol[i].msg);
          ea_sb_puts(s, "\n");
        }
      ea_sb_puts(s, "</failure>");
    } else if (skip) {
      ea_sb_puts(s, "<skipped message=\"");
      ea__chaos_xml_str(s, skip);
      ea_sb_puts(s, "\"/>");
    }
    ea_sb_puts(s, "</testcase>\n");
  }
  for (size_t i = 0; i < r->neps; i++) {
    const ea__chaos_episode *e = &r->eps[i];
    char name[128];
    snprintf(name, sizeof name, "#%02zu %s %s", i + 1, ea__chaos_kind_name(e->f.kind), e->victim);
    double t =
        e->t_end > e->t_inject && e->t_inject ? (double)(e->t_end - e->t_inject) / 1000.0 : 0;
    ea_sb_puts(s, "<testcase classname=\"elastic-chaos.faults\" name=\"");
    ea__chaos_xml_str(s, name);
    ea_sb_printf(s, "\" time=\"%.2f\">", t);
    if (e->state != EA__EP_DONE) {
      ea_sb_puts(s, "<skipped message=\"");
      ea__chaos_xml_str(s, e->skip_reason);
      ea_sb_puts(s, "\"/>");
    } else if ((e->deg.expected && e->deg.timed_out) || (e->res.expected && e->res.timed_out)) {
      ea_sb_printf(s, "<failure message=\"not recovered within %.1f s\" type=\"hang\">",
                   (double)r->bound_ms / 1000.0);
      ea__chaos_xml_str(s, e->note);
      ea_sb_puts(s, "</failure>");
    }
    ea_sb_puts(s, "</testcase>\n");
  }
  ea_sb_puts(s, "</testsuite>\n</testsuites>\n");
}

/* ---- SVG ----------------------------------------------------------------------- */

#define SVG_W 1400
#define SVG_L 110 /* left margin: node names */
#define SVG_R 20
#define SVG_TOP 40
#define SVG_PROG_H 170
#define SVG_ROW_H 20

static double xpos(const ea__chaos_run *r, int64_t t) {
  double span = (double)(r->t_end - r->t0);
  if (span <= 0) span = 1;
  double x = SVG_L + ((double)(t - r->t0) / span) * (SVG_W - SVG_L - SVG_R);
  if (x < SVG_L) x = SVG_L;
  if (x > SVG_W - SVG_R) x = SVG_W - SVG_R;
  return x;
}

static void gen_color(uint64_t gen, char *out, size_t cap) {
  /* Hue from the term, golden-angle apart: neighbouring generations get
   * clearly different colours. */
  unsigned h = (unsigned)(((ea_rdzv_gen64_term(gen)) * 137u) % 360u);
  snprintf(out, cap, "hsl(%u,60%%,62%%)", h);
}

static void write_svg(const ea__chaos_run *r, ea_sb *s) {
  /* Rows: every node that ever ran, in slot then replacement order. */
  int order[CH_MAX_NODES], nrows = 0;
  for (int slot = 1; slot <= r->nslots; slot++)
    for (size_t i = 0; i < r->nnodes; i++)
      if (r->nodes[i].slot == slot && r->nodes[i].starts > 0) order[nrows++] = (int)i;
  int rows_top = SVG_TOP + SVG_PROG_H + 30;
  int height = rows_top + nrows * SVG_ROW_H + 90;
  ea_sb_printf(
      s,
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" "
      "width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" "
      "font-size=\"11\">\n",
      SVG_W, height, SVG_W, height);
  ea_sb_puts(s,
             "<defs><pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
             "patternTransform=\"rotate(45)\"><rect width=\"3\" height=\"6\" fill=\"#333\" "
             "fill-opacity=\"0.55\"/></pattern></defs>\n");
  ea_sb_printf(s, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", SVG_W, height);
  ea_sb_printf(
      s,
      "<text x=\"%d\" y=\"20\" font-size=\"14\" font-weight=\"bold\">elastic-chaos seed %" PRIu64
      ": %d agents (%s), %d faults, target %" PRIu64 " steps — %s</text>\n",
      SVG_L, r->o.seed, r->o.nagents, r->o.netns ? "netns" : "loopback", r->injected,
      r->target_steps, ea__chaos_all_ok(r) ? "all invariants held" : "INVARIANTS VIOLATED");
  /* Progress chart. */
  uint64_t maxstep = r->target_steps ? r->target_steps : 1;
  for (size_t i = 0; i < r->nprog; i++)
    if (r->prog[i].step > maxstep) maxstep = r->prog[i].step;
  int py0 = SVG_TOP, py1 = SVG_TOP + SVG_PROG_H;
  ea_sb_printf(
      s, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#f7f7f7\" stroke=\"#ccc\"/>\n",
      SVG_L, py0, SVG_W - SVG_L - SVG_R, SVG_PROG_H);
  ea_sb_printf(s, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">step</text>\n", SVG_L - 6, py0 + 10);
  ea_sb_printf(s, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%" PRIu64 "</text>\n", SVG_L - 6,
               py0 + 24, maxstep);
  ea_sb_printf(s, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">0</text>\n", SVG_L - 6, py1);
  if (r->nprog) {
    ea_sb_puts(s, "<polyline fill=\"none\" stroke=\"#1f5fbf\" stroke-width=\"1.5\" points=\"");
    for (size_t i = 0; i < r->nprog; i++)
      ea_sb_printf(s, "%.1f,%.1f ", xpos(r, r->prog[i].t_ms),
                   py1 - (double)r->prog[i].step / (double)maxstep * (SVG_PROG_H - 8));
    ea_sb_puts(s, "\"><title>highest step held by a live worker</title></polyline>\n");
  }
  ea__chaos_histview hv;
  bool have_hist = ea__chaos_history_view(r, &hv);
  int bottom = rows_top + nrows * SVG_ROW_H;
  if (have_hist) {
    for (size_t i = 0; i < hv.ngens; i++) {
      const ea__chaos_genview *g = &hv.gens[i];
      if (g->t_commit < 0) continue;
      double x = xpos(r, g->t_commit);
      ea_sb_printf(s,
                   "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#6a8fd8\" "
                   "stroke-width=\"0.7\" "
                   "stroke-dasharray=\"2,2\"><title>generation %" PRIu64 "/%04" PRIx64
                   " committed: world %u (",
                   x, py0, x, bottom, ea_rdzv_gen64_term(g->gen),
                   (uint64_t)ea_rdzv_gen64_ctrl(g->gen), g->world);
      ea__chaos_xml_str(s, g->nodes);
      if (g->trained)
        ea_sb_printf(s, "), trained steps %" PRIu64 "..%" PRIu64 "%s</title></line>\n", g->start,
                     g->last, g->lineage ? "" : " (off the final history)");
      else
        ea_sb_puts(s, "), trained no step</title></line>\n");
    }
    for (size_t i = 0; i < hv.nckev; i++) {
      const ea__chaos_ckev *c = &hv.ckev[i];
      double x = xpos(r, c->t_ms), y = py1 - (double)c->step / (double)maxstep * (SVG_PROG_H - 8);
      if (c->kind == 0)
        ea_sb_printf(s,
                     "<path d=\"M%.1f %.1f l4 4 l-4 4 l-4 -4 z\" "
                     "fill=\"#2a9d3a\"><title>checkpoint step %" PRIu64
                     " committed</title></path>\n",
                     x, y - 4, c->step);
      else
        ea_sb_printf(s,
                     "<text x=\"%.1f\" y=\"%.1f\" fill=\"#c00\" "
                     "text-anchor=\"middle\">×<title>checkpoint step %" PRIu64
                     " %s</title></text>\n",
                     x, y, c->step, c->kind == 1 ? "failed" : "refused (stale)");
    }
  }
  /* Node rows. */
  for (int k = 0; k < nrows; k++) {
    const ea__chaos_node *n = &r->nodes[order[k]];
    int y = rows_top + k * SVG_ROW_H;
    ea_sb_printf(s, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%s</text>\n", SVG_L - 6, y + 14,
                 n->name);
    ea_sb_printf(
        s,
        "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#fafafa\" stroke=\"#eee\"/>\n",
        SVG_L, y + 2, SVG_W - SVG_L - SVG_R, SVG_ROW_H - 4);
    for (size_t i = 0; i < n->nsamples; i++) {
      const ea__chaos_sample *a = &n->samples[i];
      int64_t tend = i + 1 < n->nsamples ? n->samples[i + 1].t_ms : a->t_ms + 150;
      /* The node may have died between two samples. */
      for (size_t q = 0; q < r->nspans; q++)
        if (r->spans[q].what == 0 && !strcmp(r->spans[q].node, n->name) &&
            r->spans[q].t0 <= a->t_ms && r->spans[q].t1 >= a->t_ms && r->spans[q].t1 < tend)
          tend = r->spans[q].t1;
      char col[40];
      if (!strcmp(a->phase, "running"))
        gen_color(a->gen, col, sizeof col);
      else if (!strcmp(a->phase, "paused"))
        snprintf(col, sizeof col, "#9a9a9a");
      else if (!strcmp(a->phase, "failed"))
        snprintf(col, sizeof col, "#f0a040");
      else if (!strcmp(a->phase, "prepared"))
        snprintf(col, sizeof col, "#f5e27a");
      else if (!strcmp(a->phase, "drained"))
        snprintf(col, sizeof col, "#9b6bc9");
      else
        snprintf(col, sizeof col, "#dcdcdc");
      double x0 = xpos(r, a->t_ms), x1 = xpos(r, tend);
      if (x1 - x0 < 0.5) x1 = x0 + 0.5;
      ea_sb_printf(
          s,
          "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" "
          "fill=\"%s\"><title>%s: %s gen %" PRIu64 " world %u step %" PRIu64 "%s</title></rect>\n",
          x0, y + 3, x1 - x0, SVG_ROW_H - 6, col, n->name, a->phase, ea_rdzv_gen64_term(a->gen),
          a->world, a->step, a->controller ? " (controller)" : "");
      if (a->controller)
        ea_sb_printf(s, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"2\" fill=\"#111\"/>\n",
                     x0, y + SVG_ROW_H - 4, x1 - x0);
    }
    for (size_t q = 0; q < r->nspans; q++) {
      const ea__chaos_span *sp = &r->spans[q];
      if (strcmp(sp->node, n->name) != 0 || sp->what == 0) continue;
      double x0 = xpos(r, sp->t0), x1 = xpos(r, sp->t1);
      if (sp->what == 1)
        ea_sb_printf(
            s,
            "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"url(#hatch)\"><title>%s "
            "SIGSTOPped</title></rect>\n",
            x0, y + 2, x1 - x0, SVG_ROW_H - 4, n->name);
      else
        ea_sb_printf(
            s,
            "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"none\" stroke=\"#d00\" "
            "stroke-width=\"2\"><title>%s cut off by a partition</title></rect>\n",
            x0, y + 2, x1 - x0, SVG_ROW_H - 4, n->name);
    }
  }
  /* Faults on top of everything. */
  for (size_t i = 0; i < r->neps; i++) {
    const ea__chaos_episode *e = &r->eps[i];
    if (e->state != EA__EP_DONE || !e->t_inject) continue;
    double x = xpos(r, e->t_inject);
    char desc[256];
    ea__chaos_fault_str(&e->f, desc, sizeof desc);
    ea_sb_printf(s,
                 "<g><line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#d00\" "
                 "stroke-width=\"1.5\"/>",
                 x, py0 - 6, x, bottom);
    ea_sb_printf(s,
                 "<text x=\"%.1f\" y=\"%d\" fill=\"#d00\" text-anchor=\"middle\" "
                 "font-weight=\"bold\">%zu</text>",
                 x, py0 - 8, i + 1);
    ea_sb_printf(s, "<title>#%zu ", i + 1);
    ea__chaos_xml_str(s, desc);
    ea_sb_printf(s, " → %s at step %" PRIu64, e->victim, e->step_at_inject);
    if (e->deg.t_reform >= 0)
      ea_sb_printf(s, "; re-formed after %lld ms", (long long)(e->deg.t_reform - e->deg.t_start));
    ea_sb_puts(s, "</title></g>\n");
    if (e->t_heal) {
      double xh = xpos(r, e->t_heal);
      ea_sb_printf(
          s,
          "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#2a9d3a\" stroke-width=\"1\" "
          "stroke-dasharray=\"4,2\"><title>#%zu healed</title></line>\n",
          xh, py0, xh, bottom, i + 1);
    }
  }
  /* Time axis and legend. */
  double span = (double)(r->t_end - r->t0) / 1000.0;
  double tick = span > 600 ? 60 : span > 120 ? 20 : span > 40 ? 10 : 5;
  for (double t = 0; t <= span; t += tick) {
    double x = xpos(r, r->t0 + (int64_t)(t * 1000));
    ea_sb_printf(s,
                 "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#999\"/><text "
                 "x=\"%.1f\" y=\"%d\" "
                 "text-anchor=\"middle\">%.0f s</text>\n",
                 x, bottom + 2, x, bottom + 7, x, bottom + 19, t);
  }
  int ly = bottom + 40;
  ea_sb_printf(
      s,
      "<g transform=\"translate(%d,%d)\"><rect width=\"14\" height=\"10\" "
      "fill=\"hsl(137,60%%,62%%)\"/>"
      "<text x=\"18\" y=\"9\">running (colour = generation)</text>"
      "<rect x=\"200\" width=\"14\" height=\"10\" fill=\"#9a9a9a\"/><text x=\"218\" y=\"9\">paused "
      "(no quorum, "
      "released)</text>"
      "<rect x=\"400\" width=\"14\" height=\"10\" fill=\"#f5e27a\"/><text x=\"418\" "
      "y=\"9\">preparing</text>"
      "<rect x=\"500\" width=\"14\" height=\"10\" fill=\"#f0a040\"/><text x=\"518\" "
      "y=\"9\">failed</text>"
      "<rect x=\"580\" width=\"14\" height=\"10\" fill=\"url(#hatch)\"/><text x=\"598\" "
      "y=\"9\">SIGSTOPped</text>"
      "<rect x=\"690\" width=\"14\" height=\"10\" fill=\"none\" stroke=\"#d00\" "
      "stroke-width=\"2\"/>"
      "<text x=\"708\" y=\"9\">cut off</text>"
      "<rect x=\"770\" y=\"8\" width=\"14\" height=\"2\" fill=\"#111\"/><text x=\"788\" "
      "y=\"9\">controller</text>"
      "<line x1=\"870\" y1=\"0\" x2=\"870\" y2=\"10\" stroke=\"#d00\" stroke-width=\"1.5\"/>"
      "<text x=\"876\" y=\"9\">fault (hover for details)</text>"
      "<line x1=\"1030\" y1=\"0\" x2=\"1030\" y2=\"10\" stroke=\"#6a8fd8\" "
      "stroke-dasharray=\"2,2\"/>"
      "<text x=\"1036\" y=\"9\">generation committed</text>"
      "<path d=\"M1180 0 l4 4 l-4 4 l-4 -4 z\" fill=\"#2a9d3a\"/><text x=\"1190\" "
      "y=\"9\">checkpoint</text>"
      "</g>\n",
      SVG_L, ly);
  ea_sb_puts(s, "</svg>\n");
}

/* ---- entry ---------------------------------------------------------------------- */

static int save(const char *path, const ea_sb *s) {
  return ea__chaos_write_file(path, s->buf ? s->buf : "", s->len);
}

int ea__chaos_report(ea__chaos_run *r) {
  row *rows = calloc(EA__F_NKINDS * 4, sizeof *rows);
  if (!rows) return -ENOMEM;
  int nrows = build_rows(r, rows);
  int rc = 0;
  ea__chaos_mkdirs(r->o.out, 0755);
  ea_sb j = {0}, t = {0}, x = {0}, v = {0};
  write_json(r, &j, rows, nrows);
  write_text(r, &t, rows, nrows);
  write_junit(r, &x);
  write_svg(r, &v);
  char path[CH_PATH_MAX + 32];
  const char *jp =
      r->o.json[0] ? r->o.json : (snprintf(path, sizeof path, "%s/report.json", r->o.out), path);
  if (save(jp, &j) < 0) rc = -EIO;
  char jpath[CH_PATH_MAX + 32];
  snprintf(jpath, sizeof jpath, "%s", jp);
  char spath[CH_PATH_MAX + 32];
  if (r->o.svg[0])
    snprintf(spath, sizeof spath, "%s", r->o.svg);
  else
    snprintf(spath, sizeof spath, "%s/timeline.svg", r->o.out);
  if (save(spath, &v) < 0) rc = -EIO;
  snprintf(path, sizeof path, "%s/summary.txt", r->o.out);
  if (save(path, &t) < 0) rc = -EIO;
  if (r->o.junit[0] && save(r->o.junit, &x) < 0) rc = -EIO;
  printf("\n%s", t.buf ? t.buf : "");
  printf("\nreports: %s, %s, %s/summary.txt%s%s\n", jpath, spath, r->o.out,
         r->o.junit[0] ? ", " : "", r->o.junit);
  ea_sb_free(&j);
  ea_sb_free(&t);
  ea_sb_free(&x);
  ea_sb_free(&v);
  free(rows);
  return rc;
}
