/* The Prometheus exposition of the metrics snapshot, and the pure pieces
 * the agent's metrics share: alert kind names, histograms.
 *
 * The exposition is the Prometheus text format 0.0.4: HELP and TYPE before
 * each family, every sample labelled job (experiment.name) and node
 * (--name), counters ending in _total, durations in seconds, sizes in
 * bytes.  ea__mx_format is pure; tests/unit/test_metrics.c pins its text.
 * What fills the snapshot, on the loop, is the top floor's metrics.c.
 */
#include "obs.h"

#include "ea_base.h"
#include "ea_rdzv.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- alert kinds ---------------------------------------------------------- */

const char *ea__alert_kind_str(ea__alert_kind k) {
  static const char *const n[EA__ALERT_KINDS] = {
      [EA__ALERT_LOSS_NAN] = "loss_nan",
      [EA__ALERT_CHECKPOINT_FAILED] = "checkpoint_failed",
      [EA__ALERT_STORAGE_TIMEOUT] = "storage_timeout",
      [EA__ALERT_WORKER_EXIT] = "worker_exit",
      [EA__ALERT_NODE_LOST] = "node_lost",
      [EA__ALERT_STRAGGLER] = "straggler",
      [EA__ALERT_STALLED] = "stalled",
      [EA__ALERT_GENERATION_CHURN] = "generation_churn",
      [EA__ALERT_RESUME_FALLBACK] = "resume_fallback",
      [EA__ALERT_JOB_FAILED] = "job_failed",
      [EA__ALERT_PREEMPTED] = "preempted",
      [EA__ALERT_NO_SPARE] = "no_spare",
      [EA__ALERT_PREEMPTED_CHECKPOINT] = "preempted_checkpoint",
  };
  return (unsigned)k < EA__ALERT_KINDS ? n[k] : "?";
}

/* ---- histograms ------------------------------------------------------------ */

void ea__mx_hist_observe(ea__mx_hist *h, double v) {
  if (!isfinite(v)) return;
  for (size_t i = 0; i < h->n; i++)
    if (v <= h->le[i]) h->cum[i]++;
  h->count++;
  h->sum += v;
}

/* ---- the exposition --------------------------------------------------------- */

/* The shortest decimal that reads back as v ("0.1", "2.5", "1e-06"), and
 * Prometheus's spellings of the special values. */
static void put_double(ea_sb *b, double v) {
  if (isnan(v)) {
    ea_sb_puts(b, "NaN");
    return;
  }
  if (isinf(v)) {
    ea_sb_puts(b, v > 0 ? "+Inf" : "-Inf");
    return;
  }
  char s[40];
  if (v == floor(v) && fabs(v) < 9007199254740992.0) { /* 2^53: integral, exactly */
    snprintf(s, sizeof s, "%.0f", v == 0 ? 0.0 : v);
    ea_sb_puts(b, s);
    return;
  }
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(s, sizeof s, "%.*g", prec, v);
    if (strtod(s, NULL) == v) break;
  }
  ea_sb_puts(b, s);
}

/* A label value: \\ " and newline escaped as the format requires; bytes
 * that are not UTF-8 (a --name is any bytes) become U+FFFD, since the
 * format is UTF-8 and a scraper refuses the whole page otherwise.  The runs
 * between escapes go out whole (every sample carries job and node). */
static void put_label_value(ea_sb *b, const char *s) {
  for (;;) {
    size_t run = strcspn(s, "\\\"\n");
    ea_sb_put_utf8(b, s, run); /* no character crosses run: the escapes are ASCII */
    s += run;
    if (!*s) return;
    ea_sb_putn(b, *s == '\n' ? "\\n" : *s == '"' ? "\\\"" : "\\\\", 2);
    s++;
  }
}

/* {job="…",node="…"[,k="v"]} */
static void put_labels(ea_sb *b, const ea__mx_snap *s, const char *k, const char *v) {
  ea_sb_puts(b, "{job=\"");
  put_label_value(b, s->job);
  ea_sb_puts(b, "\",node=\"");
  put_label_value(b, s->node);
  ea_sb_puts(b, "\"");
  if (k) {
    ea_sb_printf(b, ",%s=\"", k);
    put_label_value(b, v);
    ea_sb_puts(b, "\"");
  }
  ea_sb_puts(b, "}");
}

/* HELP texts are ours and plain ASCII without backslashes or newlines. */
static void family(ea_sb *b, const char *name, const char *type, const char *help) {
  ea_sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void sample_u64(ea_sb *b, const ea__mx_snap *s, const char *name, const char *k,
                       const char *v, uint64_t x) {
  ea_sb_puts(b, name);
  put_labels(b, s, k, v);
  ea_sb_printf(b, " %" PRIu64 "\n", x);
}

static void sample_dbl(ea_sb *b, const ea__mx_snap *s, const char *name, const char *k,
                       const char *v, double x) {
  ea_sb_puts(b, name);
  put_labels(b, s, k, v);
  ea_sb_puts(b, " ");
  put_double(b, x);
  ea_sb_puts(b, "\n");
}

static void counter(ea_sb *b, const ea__mx_snap *s, const char *name, const char *help,
                    uint64_t x) {
  family(b, name, "counter", help);
  sample_u64(b, s, name, NULL, NULL, x);
}

static void gauge(ea_sb *b, const ea__mx_snap *s, const char *name, const char *help, double x) {
  family(b, name, "gauge", help);
  sample_dbl(b, s, name, NULL, NULL, x);
}

static void histogram(ea_sb *b, const ea__mx_snap *s, const char *name, const char *help,
                      const ea__mx_hist *h) {
  family(b, name, "histogram", help);
  char le[40], n[160];
  snprintf(n, sizeof n, "%s_bucket", name);
  for (size_t i = 0; i < h->n; i++) {
    ea_sb sb = {0};
    put_double(&sb, h->le[i]);
    snprintf(le, sizeof le, "%s", sb.buf ? sb.buf : "0");
    ea_sb_free(&sb);
    sample_u64(b, s, n, "le", le, h->cum[i]);
  }
  sample_u64(b, s, n, "le", "+Inf", h->count);
  snprintf(n, sizeof n, "%s_sum", name);
  sample_dbl(b, s, n, NULL, NULL, h->sum);
  snprintf(n, sizeof n, "%s_count", name);
  sample_u64(b, s, n, NULL, NULL, h->count);
}

void ea__mx_format(const ea__mx_snap *s, ea_sb *b) {
  /* identity */
  const char *info = "elastic_agent_info";
  family(b, info, "gauge", "This agent: version, role and node id (always 1).");
  ea_sb_puts(b, info);
  ea_sb_puts(b, "{job=\"");
  put_label_value(b, s->job);
  ea_sb_puts(b, "\",node=\"");
  put_label_value(b, s->node);
  ea_sb_puts(b, "\",version=\"");
  put_label_value(b, s->version);
  ea_sb_puts(b, "\",role=\"");
  put_label_value(b, s->role);
  ea_sb_puts(b, "\",id=\"");
  put_label_value(b, s->id);
  ea_sb_puts(b, "\"} 1\n");
  gauge(b, s, "elastic_agent_start_time_seconds", "Unix time the agent started.", s->start_time_s);
  gauge(b, s, "elastic_agent_ready",
        "1 when /readyz answers 200: joined and, with workers, training in a generation "
        "making steps.",
        s->ready ? 1 : 0);

  /* membership */
  family(b, "elastic_agent_members", "gauge", "Members of this agent's table by state.");
  static const char *const st[4] = {"alive", "suspect", "dead", "left"};
  for (int i = 0; i < 4; i++)
    sample_u64(b, s, "elastic_agent_members", "state", st[i], s->members[i]);
  gauge(b, s, "elastic_agent_is_controller", "1 while the election names this node controller.",
        s->controller ? 1 : 0);

  /* generations */
  gauge(b, s, "elastic_agent_generation",
        "Term of the generation this node trains in; 0 when none.", (double)s->generation);
  gauge(b, s, "elastic_agent_world_size",
        "Ranks in the generation this node trains in; 0 when none.", s->world);
  gauge(b, s, "elastic_agent_held_out_nodes",
        "Nodes this controller holds out of generations (flapping, evicted stragglers).",
        s->held_out);
  gauge(b, s, "elastic_agent_stragglers",
        "Ranks this controller judges stragglers (compute time over straggler_factor x median).",
        s->stragglers);
  /* spare nodes (ea_rdzv_spares): the same count on every node */
  gauge(b, s, "elastic_agent_spares_ready",
        "Spare nodes ready to replace a lost member (waiting beyond compute.max_nodes).",
        s->spare_nodes[EA_RDZV_SPARE_READY]);
  family(b, "elastic_agent_spares", "gauge",
         "Spare nodes by readiness: ready, starting (worker not up), unfit (health check "
         "failed), held (held out).");
  for (uint8_t i = 0; i < 4; i++)
    sample_u64(b, s, "elastic_agent_spares", "state", ea_rdzv_spare_state_str(i),
               s->spare_nodes[i]);
  gauge(b, s, "elastic_agent_is_spare", "1 while this node waits as a spare.",
        s->spare_self ? 1 : 0);
  counter(b, s, "elastic_agent_generations_committed_total",
          "Generations this node has run (committed with this node in them).", s->gens_committed);
  family(b, "elastic_agent_formations_total", "counter",
         "Generation formations this node led as controller, by result.");
  sample_u64(b, s, "elastic_agent_formations_total", "result", "started", s->formations_started);
  sample_u64(b, s, "elastic_agent_formations_total", "result", "committed",
             s->formations_committed);
  sample_u64(b, s, "elastic_agent_formations_total", "result", "failed", s->formations_failed);
  histogram(b, s, "elastic_agent_formation_duration_seconds",
            "PREPARE to COMMIT of each generation this node ran.", &s->formation);

  /* training */
  gauge(b, s, "elastic_agent_training_step", "Steps completed by this node's most advanced worker.",
        (double)s->step);
  gauge(b, s, "elastic_agent_training_steps_per_second", "Steps per second over the last 10 s.",
        s->steps_per_s);
  if (s->has_loss)
    gauge(b, s, "elastic_agent_training_loss", "Loss of the last step a local worker completed.",
          s->loss);
  gauge(b, s, "elastic_agent_training_last_step_age_seconds",
        "Seconds since a local worker last completed a step (since start when none has).",
        s->since_step_s);
  gauge(b, s, "elastic_agent_training_stalled",
        "1 while this node's generation has made no step for runtime.stall_timeout_seconds.",
        s->stalled ? 1 : 0);
  counter(b, s, "elastic_agent_worker_failures_total",
          "Local worker failures (communicator failed, or the process exited).",
          s->worker_failures);
  counter(b, s, "elastic_agent_worker_restarts_total", "Local worker processes restarted.",
          s->worker_restarts);
  const char *starts = "elastic_agent_worker_starts_total";
  family(b, starts, "counter",
         "Worker processes started: from a warm interpreter, or spawned cold.");
  sample_u64(b, s, starts, "start", "warm", s->starts_warm);
  sample_u64(b, s, starts, "start", "cold", s->starts_cold);
  if (s->spares) {
    const char *ready = "elastic_agent_warm_spare_ready",
               *rss = "elastic_agent_warm_spare_rss_bytes";
    char k[16];
    family(b, ready, "gauge",
           "1 while this local rank's warm interpreter has imported compute.preload and waits.");
    for (uint32_t i = 0; i < s->spares && i < 64; i++) {
      snprintf(k, sizeof k, "%u", i);
      sample_u64(b, s, ready, "local_rank", k, s->spare_ready[i]);
    }
    family(b, rss, "gauge", "Resident memory of this local rank's warm interpreter (0: none).");
    for (uint32_t i = 0; i < s->spares && i < 64; i++) {
      snprintf(k, sizeof k, "%u", i);
      sample_u64(b, s, rss, "local_rank", k, s->spare_rss[i]);
    }
  }

  /* checkpoints */
  gauge(b, s, "elastic_agent_checkpoint_interval_steps",
        "checkpoint.save_interval_steps; 0 when periodic checkpoints are off.", s->ck_interval);
  counter(b, s, "elastic_agent_checkpoints_committed_total",
          "Checkpoints this node committed as controller.", s->ck_committed);
  counter(b, s, "elastic_agent_checkpoints_failed_total",
          "Checkpoints that failed while this node was controller.", s->ck_failed);
  counter(b, s, "elastic_agent_checkpoints_skipped_total",
          "Checkpoints skipped while this node was controller (busy_policy skip).", s->ck_skipped);
  if (s->ck_have_last) {
    gauge(b, s, "elastic_agent_checkpoint_last_step",
          "Step of the newest complete checkpoint this node knows of.", (double)s->ck_last_step);
    gauge(b, s, "elastic_agent_checkpoint_last_timestamp_seconds",
          "Unix time this node first knew of that checkpoint (its commit, on the controller).",
          s->ck_last_time_s);
  }
  counter(b, s, "elastic_agent_checkpoint_written_bytes_total",
          "Bytes of this node's checkpoint shards written and made durable.", s->ck_bytes_written);
  counter(b, s, "elastic_agent_checkpoint_committed_bytes_total",
          "Bytes of the checkpoints this node committed as controller.", s->ck_bytes_committed);
  histogram(b, s, "elastic_agent_checkpoint_persist_duration_seconds",
            "First shard report to durable MANIFEST, per checkpoint this node committed.",
            &s->persist);

  /* gossip and control channel */
  counter(b, s, "elastic_agent_gossip_packets_received_total", "Gossip UDP datagrams received.",
          s->gossip_in);
  counter(b, s, "elastic_agent_gossip_packets_sent_total", "Gossip UDP datagrams sent.",
          s->gossip_out);
  counter(b, s, "elastic_agent_gossip_received_bytes_total",
          "Bytes of gossip UDP datagrams received.", s->gossip_bytes_in);
  counter(b, s, "elastic_agent_gossip_sent_bytes_total", "Bytes of gossip UDP datagrams sent.",
          s->gossip_bytes_out);
  family(b, "elastic_agent_gossip_packets_dropped_total", "counter",
         "Gossip datagrams and push-pull frames dropped, by reason.");
  sample_u64(b, s, "elastic_agent_gossip_packets_dropped_total", "reason", "malformed",
             s->gossip_drop_malformed);
  sample_u64(b, s, "elastic_agent_gossip_packets_dropped_total", "reason", "unauthenticated",
             s->gossip_drop_unauth);
  sample_u64(b, s, "elastic_agent_gossip_packets_dropped_total", "reason", "oversize",
             s->gossip_drop_oversize);
  sample_u64(b, s, "elastic_agent_gossip_packets_dropped_total", "reason", "replayed",
             s->gossip_drop_replayed);
  family(b, "elastic_agent_control_frames_dropped_total", "counter",
         "Control-channel frames dropped, by reason.");
  sample_u64(b, s, "elastic_agent_control_frames_dropped_total", "reason", "malformed",
             s->ctl_drop_malformed);
  sample_u64(b, s, "elastic_agent_control_frames_dropped_total", "reason", "unauthenticated",
             s->ctl_drop_unauth);
  sample_u64(b, s, "elastic_agent_control_frames_dropped_total", "reason", "oversize",
             s->ctl_drop_oversize);
  sample_u64(b, s, "elastic_agent_control_frames_dropped_total", "reason", "replayed",
             s->ctl_drop_replayed);
  family(b, "elastic_agent_http_connections_refused_total", "counter",
         "Connections to this listener closed as soon as accepted: their source held its "
         "limit (per_source), or every connection was held (full).");
  sample_u64(b, s, "elastic_agent_http_connections_refused_total", "reason", "per_source",
             s->http.refused_per_source);
  sample_u64(b, s, "elastic_agent_http_connections_refused_total", "reason", "full",
             s->http.refused_full);
  counter(b, s, "elastic_agent_http_connections_unrequested_total",
          "Connections to this listener closed before a whole request came (the 2 s timeout, "
          "or the client left).",
          s->http.closed_unrequested);
  counter(b, s, "elastic_agent_drains_refused_total",
          "DRAIN commands refused: they named another member id or an incarnation of an "
          "earlier run of this node.",
          s->drains_refused);

  /* alerts */
  family(b, "elastic_agent_alerts_total", "counter", "Alerts this node raised, by kind.");
  for (int k = 0; k < EA__ALERT_KINDS; k++)
    sample_u64(b, s, "elastic_agent_alerts_total", "kind", ea__alert_kind_str((ea__alert_kind)k),
               s->alerts[k]);
}

void ea__mx_snap_free(ea__mx_snap *s) {
  if (!s) return;
  free(s->status_json);
  free(s->history_json);
  free(s);
}
