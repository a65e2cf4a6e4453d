/* Check suite for the metrics exposition (agent/obs/exposition.c) and the HTTP
 * listener that serves it (agent/obs/http.c).
 *
 * What they promise, tested as such: a fixed snapshot gives exactly the
 * text below (HELP and TYPE before each family, job and node on every
 * sample, label values escaped — \\, \" and \n — and bytes that are not
 * UTF-8 replaced by U+FFFD, a NaN loss as "NaN"); samples with nothing to
 * say (no loss yet, no checkpoint yet) are left out rather than invented;
 * histogram buckets are cumulative; and over real sockets, /healthz says
 * 503 before the first snapshot and once the newest is older than
 * EA__HEALTH_MAX_AGE_MS, /readyz gives the snapshot's verdict and reason,
 * /metrics is the formatter's text with the 0.0.4 content type, other
 * paths are 404 and other methods 405 (with Allow), a port in use is an
 * error that names it, and stopping the server closes its socket and
 * leaks no descriptor.
 */
#include "agent_int.h"

#include <arpa/inet.h>
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const double le2[] = {0.1, 1};
static const double le1[] = {0.5};

static ea__mx_snap *fixed_snapshot(void) {
  ea__mx_snap *s = calloc(1, sizeof *s);
  ck_assert_ptr_nonnull(s);
  snprintf(s->job, sizeof s->job, "j\"1\\x\ny"); /* a quote, a backslash, a newline */
  snprintf(s->node, sizeof s->node, "n\xff");    /* not UTF-8 */
  snprintf(s->id, sizeof s->id, "00ff");
  snprintf(s->version, sizeof s->version, "1.2.3");
  snprintf(s->role, sizeof s->role, "worker");
  s->start_time_s = 1700000000.5;
  s->ready = true;
  snprintf(s->ready_why, sizeof s->ready_why, "ok");
  s->members[EA_STATE_ALIVE] = 3;
  s->members[EA_STATE_SUSPECT] = 1;
  s->members[EA_STATE_DEAD] = 2;
  s->controller = true;
  s->generation = 7;
  s->world = 3;
  s->held_out = 1;
  s->stragglers = 2;
  s->spare_nodes[EA_RDZV_SPARE_READY] = 1;
  s->spare_nodes[EA_RDZV_SPARE_UNFIT] = 2;
  s->spare_self = true;
  s->gens_committed = 4;
  s->formations_started = 5;
  s->formations_committed = 4;
  s->formations_failed = 1;
  s->formation = (ea__mx_hist){.le = le2, .n = 2};
  ea__mx_hist_observe(&s->formation, 0.125);
  ea__mx_hist_observe(&s->formation, 0.5);
  ea__mx_hist_observe(&s->formation, 2);
  s->step = 1234;
  s->steps_per_s = 12.5;
  s->has_loss = true;
  s->loss = NAN;
  s->since_step_s = 0.25;
  s->worker_failures = 2;
  s->worker_restarts = 1;
  s->starts_warm = 3;
  s->starts_cold = 1;
  s->spares = 2;
  s->spare_ready[0] = true;
  s->spare_rss[0] = 700u << 20;
  s->ck_interval = 100;
  s->ck_committed = 6;
  s->ck_failed = 1;
  s->ck_have_last = true;
  s->ck_last_step = 1200;
  s->ck_last_time_s = 1700000100;
  s->ck_bytes_written = 4096;
  s->ck_bytes_committed = 12288;
  s->persist = (ea__mx_hist){.le = le1, .n = 1};
  ea__mx_hist_observe(&s->persist, 0.25);
  s->gossip_in = 10;
  s->gossip_out = 11;
  s->gossip_bytes_in = 1000;
  s->gossip_bytes_out = 1100;
  s->gossip_drop_malformed = 1;
  s->gossip_drop_unauth = 2;
  s->gossip_drop_oversize = 3;
  s->ctl_drop_malformed = 4;
  s->ctl_drop_unauth = 5;
  s->ctl_drop_oversize = 6;
  s->gossip_drop_replayed = 7;
  s->ctl_drop_replayed = 8;
  s->drains_refused = 9;
  s->http.refused_per_source = 10;
  s->http.refused_full = 11;
  s->http.closed_unrequested = 12;
  s->alerts[EA__ALERT_STALLED] = 2;
  s->alerts[EA__ALERT_CHECKPOINT_FAILED] = 1;
  return s;
}

static char *format(const ea__mx_snap *s) {
  ea_sb b = {0};
  ea__mx_format(s, &b);
  ck_assert(!b.oom);
  ck_assert_ptr_nonnull(b.buf);
  return b.buf;
}

/* The whole page, byte for byte (`promtool check metrics` accepts it
 * without a lint warning; tests/e2e/test_metrics.sh runs it on a live one). */
static const char expected[] =
    "# HELP elastic_agent_info This agent: version, role and node id (always 1).\n"
    "# TYPE elastic_agent_info gauge\n"
    "elastic_agent_info{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",version=\"1.2.3\",role=\"worker\",id=\"00ff\"} 1\n"
    "# HELP elastic_agent_start_time_seconds Unix time the agent started.\n"
    "# TYPE elastic_agent_start_time_seconds gauge\n"
    "elastic_agent_start_time_seconds{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\"} 1700000000.5\n"
    "# HELP elastic_agent_ready 1 when /readyz answers 200: joined and, with workers, training in "
    "a generation making steps.\n"
    "# TYPE elastic_agent_ready gauge\n"
    "elastic_agent_ready{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\"} 1\n"
    "# HELP elastic_agent_members Members of this agent's table by state.\n"
    "# TYPE elastic_agent_members gauge\n"
    "elastic_agent_members{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",state=\"alive\"} 3\n"
    "elastic_agent_members{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",state=\"suspect\"} 1\n"
    "elastic_agent_members{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",state=\"dead\"} 2\n"
    "elastic_agent_members{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",state=\"left\"} 0\n"
    "# HELP elastic_agent_is_controller 1 while the election names this node controller.\n"
    "# TYPE elastic_agent_is_controller gauge\n"
    "elastic_agent_is_controller{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\"} 1\n"
    "# HELP elastic_agent_generation Term of the generation this node trains in; 0 when none.\n"
    "# TYPE elastic_agent_generation gauge\n"
    "elastic_agent_generation{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\"} 7\n"
    "# HELP elastic_agent_world_size Ranks in the generation this node trains in; 0 when none.\n"
    "# TYPE elastic_agent_world_size gauge\n"
    "elastic_agent_world_size{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\"} 3\n"
    "# HELP elastic_agent_held_out_nodes Nodes this controller holds out of generations "
    "(flapping, evicted stragglers).\n"
    "# TYPE elastic_agent_held_out_nodes gauge\n"
    "elastic_agent_held_out_nodes{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\"} 1\n"
    "# HELP elastic_agent_stragglers Ranks this controller judges stragglers (compute time over "
    "straggler_factor x median).\n"
    "# TYPE elastic_agent_stragglers gauge\n"
    "elastic_agent_stragglers{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\"} 2\n"
    "# HELP elastic_agent_spares_ready Spare nodes ready to replace a lost member (waiting beyond "
    "compute.max_nodes).\n"
    "# TYPE elastic_agent_spares_ready gauge\n"
    "elastic_agent_spares_ready{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\"} 1\n"
    "# HELP elastic_agent_spares Spare nodes by readiness: ready, starting (worker not up), unfit "
    "(health check failed), held (held out).\n"
    "# TYPE elastic_agent_spares gauge\n"
    "elastic_agent_spares{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",state=\"ready\"} 1\n"
    "elastic_agent_spares{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",state=\"starting\"} 0\n"
    "elastic_agent_spares{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",state=\"unfit\"} 2\n"
    "elastic_agent_spares{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",state=\"held\"} 0\n"
    "# HELP elastic_agent_is_spare 1 while this node waits as a spare.\n"
    "# TYPE elastic_agent_is_spare gauge\n"
    "elastic_agent_is_spare{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\"} 1\n"
    "# HELP elastic_agent_generations_committed_total Generations this node has run (committed "
    "with this node in them).\n"
    "# TYPE elastic_agent_generations_committed_total counter\n"
    "elastic_agent_generations_committed_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\"} 4\n"
    "# HELP elastic_agent_formations_total Generation formations this node led as controller, by "
    "result.\n"
    "# TYPE elastic_agent_formations_total counter\n"
    "elastic_agent_formations_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",result=\"started\"} 5\n"
    "elastic_agent_formations_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",result=\"committed\"} 4\n"
    "elastic_agent_formations_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",result=\"failed\"} 1\n"
    "# HELP elastic_agent_formation_duration_seconds PREPARE to COMMIT of each generation this "
    "node ran.\n"
    "# TYPE elastic_agent_formation_duration_seconds histogram\n"
    "elastic_agent_formation_duration_seconds_bucket{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",le=\"0.1\"} 0\n"
    "elastic_agent_formation_duration_seconds_bucket{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",le=\"1\"} 2\n"
    "elastic_agent_formation_duration_seconds_bucket{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",le=\"+Inf\"} 3\n"
    "elastic_agent_formation_duration_seconds_sum{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\"} 2.625\n"
    "elastic_agent_formation_duration_seconds_count{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\"} 3\n"
    "# HELP elastic_agent_training_step Steps completed by this node's most advanced worker.\n"
    "# TYPE elastic_agent_training_step gauge\n"
    "elastic_agent_training_step{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\"} 1234\n"
    "# HELP elastic_agent_training_steps_per_second Steps per second over the last 10 s.\n"
    "# TYPE elastic_agent_training_steps_per_second gauge\n"
    "elastic_agent_training_steps_per_second{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\"} 12.5\n"
    "# HELP elastic_agent_training_loss Loss of the last step a local worker completed.\n"
    "# TYPE elastic_agent_training_loss gauge\n"
    "elastic_agent_training_loss{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\"} NaN\n"
    "# HELP elastic_agent_training_last_step_age_seconds Seconds since a local worker last "
    "completed a step (since start when none has).\n"
    "# TYPE elastic_agent_training_last_step_age_seconds gauge\n"
    "elastic_agent_training_last_step_age_seconds{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\"} 0.25\n"
    "# HELP elastic_agent_training_stalled 1 while this node's generation has made no step for "
    "runtime.stall_timeout_seconds.\n"
    "# TYPE elastic_agent_training_stalled gauge\n"
    "elastic_agent_training_stalled{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\"} 0\n"
    "# HELP elastic_agent_worker_failures_total Local worker failures (communicator failed, or the "
    "process exited).\n"
    "# TYPE elastic_agent_worker_failures_total counter\n"
    "elastic_agent_worker_failures_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\"} 2\n"
    "# HELP elastic_agent_worker_restarts_total Local worker processes restarted.\n"
    "# TYPE elastic_agent_worker_restarts_total counter\n"
    "elastic_agent_worker_restarts_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\"} 1\n"
    "# HELP elastic_agent_worker_starts_total Worker processes started: from a warm interpreter, "
    "or spawned cold.\n"
    "# TYPE elastic_agent_worker_starts_total counter\n"
    "elastic_agent_worker_starts_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",start=\"warm\"} 3\n"
    "elastic_agent_worker_starts_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",start=\"cold\"} 1\n"
    "# HELP elastic_agent_warm_spare_ready 1 while this local rank's warm interpreter has imported "
    "compute.preload and waits.\n"
    "# TYPE elastic_agent_warm_spare_ready gauge\n"
    "elastic_agent_warm_spare_ready{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",local_rank=\"0\"} 1\n"
    "elastic_agent_warm_spare_ready{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",local_rank=\"1\"} 0\n"
    "# HELP elastic_agent_warm_spare_rss_bytes Resident memory of this local rank's warm "
    "interpreter (0: none).\n"
    "# TYPE elastic_agent_warm_spare_rss_bytes gauge\n"
    "elastic_agent_warm_spare_rss_bytes{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",local_rank=\"0\"} 734003200\n"
    "elastic_agent_warm_spare_rss_bytes{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",local_rank=\"1\"} 0\n"
    "# HELP elastic_agent_checkpoint_interval_steps checkpoint.save_interval_steps; 0 when "
    "periodic checkpoints are off.\n"
    "# TYPE elastic_agent_checkpoint_interval_steps gauge\n"
    "elastic_agent_checkpoint_interval_steps{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\"} 100\n"
    "# HELP elastic_agent_checkpoints_committed_total Checkpoints this node committed as "
    "controller.\n"
    "# TYPE elastic_agent_checkpoints_committed_total counter\n"
    "elastic_agent_checkpoints_committed_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\"} 6\n"
    "# HELP elastic_agent_checkpoints_failed_total Checkpoints that failed while this node was "
    "controller.\n"
    "# TYPE elastic_agent_checkpoints_failed_total counter\n"
    "elastic_agent_checkpoints_failed_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\"} 1\n"
    "# HELP elastic_agent_checkpoints_skipped_total Checkpoints skipped while this node was "
    "controller (busy_policy skip).\n"
    "# TYPE elastic_agent_checkpoints_skipped_total counter\n"
    "elastic_agent_checkpoints_skipped_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\"} 0\n"
    "# HELP elastic_agent_checkpoint_last_step Step of the newest complete checkpoint this node "
    "knows of.\n"
    "# TYPE elastic_agent_checkpoint_last_step gauge\n"
    "elastic_agent_checkpoint_last_step{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\"} 1200\n"
    "# HELP elastic_agent_checkpoint_last_timestamp_seconds Unix time this node first knew of that "
    "checkpoint (its commit, on the controller).\n"
    "# TYPE elastic_agent_checkpoint_last_timestamp_seconds gauge\n"
    "elastic_agent_checkpoint_last_timestamp_seconds{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\"} 1700000100\n"
    "# HELP elastic_agent_checkpoint_written_bytes_total Bytes of this node's checkpoint shards "
    "written and made durable.\n"
    "# TYPE elastic_agent_checkpoint_written_bytes_total counter\n"
    "elastic_agent_checkpoint_written_bytes_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\"} 4096\n"
    "# HELP elastic_agent_checkpoint_committed_bytes_total Bytes of the checkpoints this node "
    "committed as controller.\n"
    "# TYPE elastic_agent_checkpoint_committed_bytes_total counter\n"
    "elastic_agent_checkpoint_committed_bytes_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\"} 12288\n"
    "# HELP elastic_agent_checkpoint_persist_duration_seconds First shard report to durable "
    "MANIFEST, per checkpoint this node committed.\n"
    "# TYPE elastic_agent_checkpoint_persist_duration_seconds histogram\n"
    "elastic_agent_checkpoint_persist_duration_seconds_bucket{job=\"j\\\"1\\\\x\\ny\",node="
    "\"n\xEF\xBF\xBD"
    "\",le=\"0.5\"} 1\n"
    "elastic_agent_checkpoint_persist_duration_seconds_bucket{job=\"j\\\"1\\\\x\\ny\",node="
    "\"n\xEF\xBF\xBD"
    "\",le=\"+Inf\"} 1\n"
    "elastic_agent_checkpoint_persist_duration_seconds_sum{job=\"j\\\"1\\\\x\\ny\",node="
    "\"n\xEF\xBF\xBD"
    "\"} 0.25\n"
    "elastic_agent_checkpoint_persist_duration_seconds_count{job=\"j\\\"1\\\\x\\ny\",node="
    "\"n\xEF\xBF\xBD"
    "\"} 1\n"
    "# HELP elastic_agent_gossip_packets_received_total Gossip UDP datagrams received.\n"
    "# TYPE elastic_agent_gossip_packets_received_total counter\n"
    "elastic_agent_gossip_packets_received_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\"} 10\n"
    "# HELP elastic_agent_gossip_packets_sent_total Gossip UDP datagrams sent.\n"
    "# TYPE elastic_agent_gossip_packets_sent_total counter\n"
    "elastic_agent_gossip_packets_sent_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\"} 11\n"
    "# HELP elastic_agent_gossip_received_bytes_total Bytes of gossip UDP datagrams received.\n"
    "# TYPE elastic_agent_gossip_received_bytes_total counter\n"
    "elastic_agent_gossip_received_bytes_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\"} 1000\n"
    "# HELP elastic_agent_gossip_sent_bytes_total Bytes of gossip UDP datagrams sent.\n"
    "# TYPE elastic_agent_gossip_sent_bytes_total counter\n"
    "elastic_agent_gossip_sent_bytes_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\"} 1100\n"
    "# HELP elastic_agent_gossip_packets_dropped_total Gossip datagrams and push-pull frames "
    "dropped, by reason.\n"
    "# TYPE elastic_agent_gossip_packets_dropped_total counter\n"
    "elastic_agent_gossip_packets_dropped_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",reason=\"malformed\"} 1\n"
    "elastic_agent_gossip_packets_dropped_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",reason=\"unauthenticated\"} 2\n"
    "elastic_agent_gossip_packets_dropped_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",reason=\"oversize\"} 3\n"
    "elastic_agent_gossip_packets_dropped_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",reason=\"replayed\"} 7\n"
    "# HELP elastic_agent_control_frames_dropped_total Control-channel frames dropped, by reason.\n"
    "# TYPE elastic_agent_control_frames_dropped_total counter\n"
    "elastic_agent_control_frames_dropped_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",reason=\"malformed\"} 4\n"
    "elastic_agent_control_frames_dropped_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",reason=\"unauthenticated\"} 5\n"
    "elastic_agent_control_frames_dropped_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",reason=\"oversize\"} 6\n"
    "elastic_agent_control_frames_dropped_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",reason=\"replayed\"} 8\n"
    "# HELP elastic_agent_http_connections_refused_total Connections to this listener closed as "
    "soon as accepted: their source held its limit (per_source), or every connection was held "
    "(full).\n"
    "# TYPE elastic_agent_http_connections_refused_total counter\n"
    "elastic_agent_http_connections_refused_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",reason=\"per_source\"} 10\n"
    "elastic_agent_http_connections_refused_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",reason=\"full\"} 11\n"
    "# HELP elastic_agent_http_connections_unrequested_total Connections to this listener closed "
    "before a whole request came (the 2 s timeout, or the client left).\n"
    "# TYPE elastic_agent_http_connections_unrequested_total counter\n"
    "elastic_agent_http_connections_unrequested_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\"} 12\n"
    "# HELP elastic_agent_drains_refused_total DRAIN commands refused: they named another member "
    "id or an incarnation of an earlier run of this node.\n"
    "# TYPE elastic_agent_drains_refused_total counter\n"
    "elastic_agent_drains_refused_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\"} 9\n"
    "# HELP elastic_agent_alerts_total Alerts this node raised, by kind.\n"
    "# TYPE elastic_agent_alerts_total counter\n"
    "elastic_agent_alerts_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",kind=\"loss_nan\"} 0\n"
    "elastic_agent_alerts_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",kind=\"checkpoint_failed\"} 1\n"
    "elastic_agent_alerts_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",kind=\"storage_timeout\"} 0\n"
    "elastic_agent_alerts_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",kind=\"worker_exit\"} 0\n"
    "elastic_agent_alerts_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",kind=\"node_lost\"} 0\n"
    "elastic_agent_alerts_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",kind=\"straggler\"} 0\n"
    "elastic_agent_alerts_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",kind=\"stalled\"} 2\n"
    "elastic_agent_alerts_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",kind=\"generation_churn\"} 0\n"
    "elastic_agent_alerts_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",kind=\"resume_fallback\"} 0\n"
    "elastic_agent_alerts_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",kind=\"job_failed\"} 0\n"
    "elastic_agent_alerts_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",kind=\"preempted\"} 0\n"
    "elastic_agent_alerts_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",kind=\"no_spare\"} 0\n"
    "elastic_agent_alerts_total{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD"
    "\",kind=\"preempted_checkpoint\"} 0\n";

START_TEST(exposition_exact_text) {
  ea__mx_snap *s = fixed_snapshot();
  char *t = format(s);
  if (strcmp(t, expected) != 0) {
    /* Name the first line that differs: easier to read than two pages. */
    const char *a = t, *b = expected;
    int line = 1;
    while (*a && *a == *b) {
      if (*a == '\n') line++;
      a++, b++;
    }
    ck_abort_msg("exposition differs at line %d: got \"%.80s\", want \"%.80s\"", line, a, b);
  }
  free(t);
  free(s);
}
END_TEST

START_TEST(values_and_absent_samples) {
  ea__mx_snap *s = fixed_snapshot();
  s->loss = INFINITY;
  s->steps_per_s = 1e-6;
  s->since_step_s = 0.1;
  s->start_time_s = -0.0;
  char *t = format(s);
  ck_assert_ptr_nonnull(strstr(
      t, "elastic_agent_training_loss{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD\"} +Inf\n"));
  ck_assert_ptr_nonnull(
      strstr(t, "_steps_per_second{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD\"} 1e-06\n"));
  ck_assert_ptr_nonnull(
      strstr(t, "_last_step_age_seconds{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD\"} 0.1\n"));
  ck_assert_ptr_nonnull(
      strstr(t, "_start_time_seconds{job=\"j\\\"1\\\\x\\ny\",node=\"n\xEF\xBF\xBD\"} 0\n"));
  free(t);
  s->loss = -INFINITY;
  t = format(s);
  ck_assert_ptr_nonnull(strstr(t, "} -Inf\n"));
  free(t);
  /* Nothing known yet: no loss sample, no checkpoint samples. */
  s->has_loss = false;
  s->ck_have_last = false;
  t = format(s);
  ck_assert_ptr_null(strstr(t, "elastic_agent_training_loss"));
  ck_assert_ptr_null(strstr(t, "elastic_agent_checkpoint_last_step"));
  ck_assert_ptr_null(strstr(t, "elastic_agent_checkpoint_last_timestamp_seconds"));
  ck_assert_ptr_nonnull(strstr(t, "elastic_agent_checkpoints_committed_total{"));
  free(t);
  /* Plain names pass through unescaped. */
  snprintf(s->job, sizeof s->job, "training_baseline_v1");
  snprintf(s->node, sizeof s->node, "node-7.example");
  t = format(s);
  ck_assert_ptr_nonnull(strstr(
      t, "elastic_agent_generation{job=\"training_baseline_v1\",node=\"node-7.example\"} 7\n"));
  free(t);
  free(s);
}
END_TEST

START_TEST(histogram_is_cumulative) {
  static const double le[] = {1, 2, 3};
  ea__mx_hist h = {.le = le, .n = 3};
  ea__mx_hist_observe(&h, 0.5);
  ea__mx_hist_observe(&h, 1); /* on a bound: counted in it (le is ≤) */
  ea__mx_hist_observe(&h, 2.5);
  ea__mx_hist_observe(&h, 99);
  ea__mx_hist_observe(&h, NAN); /* ignored */
  ck_assert_uint_eq(h.cum[0], 2);
  ck_assert_uint_eq(h.cum[1], 2);
  ck_assert_uint_eq(h.cum[2], 3);
  ck_assert_uint_eq(h.count, 4);
  ck_assert(fabs(h.sum - 103.0) < 1e-12);
}
END_TEST

START_TEST(alert_kinds_named) {
  static const char *const want[] = {
      "loss_nan",  "checkpoint_failed", "storage_timeout",     "worker_exit",     "node_lost",
      "straggler", "stalled",           "generation_churn",    "resume_fallback", "job_failed",
      "preempted", "no_spare",          "preempted_checkpoint"};
  ck_assert_int_eq(EA__ALERT_KINDS, sizeof want / sizeof want[0]);
  for (int k = 0; k < EA__ALERT_KINDS; k++)
    ck_assert_str_eq(ea__alert_kind_str((ea__alert_kind)k), want[k]);
  ck_assert_str_eq(ea__alert_kind_str(EA__ALERT_KINDS), "?");
}
END_TEST

/* ---- the server, over real sockets --------------------------------------- */

typedef struct {
  int code;
  char head[2048];
  char *body;
} http_resp;

/* A TCP connection to 127.0.0.1:port from src (an address of 127/8; NULL:
 * the kernel's choice, 127.0.0.1). */
static int connect_from(const char *src, uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ck_assert_int_ge(fd, 0);
  if (src) {
    struct sockaddr_in me = {.sin_family = AF_INET};
    ck_assert_int_eq(inet_pton(AF_INET, src, &me.sin_addr), 1);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&me, sizeof me), 0);
  }
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  return fd;
}

/* One HTTP/1.0 request to 127.0.0.1:port from src; the server closes after it. */
static void request_from(const char *src, uint16_t port, const char *method, const char *path,
                         http_resp *r) {
  memset(r, 0, sizeof *r);
  int fd = connect_from(src, port);
  char req[256];
  int n = snprintf(req, sizeof req, "%s %s HTTP/1.0\r\nHost: t\r\n\r\n", method, path);
  ck_assert_int_eq(write(fd, req, (size_t)n), n);
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  ssize_t k;
  while ((k = read(fd, buf + len, cap - len - 1)) > 0) {
    len += (size_t)k;
    if (len + 1 >= cap) buf = realloc(buf, cap *= 2);
  }
  close(fd);
  buf[len] = 0;
  ck_assert_msg(sscanf(buf, "HTTP/1.%*d %d", &r->code) == 1, "no status line: %.80s", buf);
  char *end = strstr(buf, "\r\n\r\n");
  ck_assert_ptr_nonnull(end);
  size_t hl = (size_t)(end - buf);
  snprintf(r->head, sizeof r->head, "%.*s", (int)(hl < sizeof r->head ? hl : sizeof r->head - 1),
           buf);
  r->body = strdup(end + 4);
  free(buf);
}

static void request(uint16_t port, const char *method, const char *path, http_resp *r) {
  request_from(NULL, port, method, path, r);
}

static uint16_t port_of(const char *bound) {
  const char *c = strrchr(bound, ':');
  ck_assert_ptr_nonnull(c);
  return (uint16_t)atoi(c + 1);
}

static int count_fds(void) {
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  ck_assert_ptr_nonnull(d);
  while (readdir(d)) n++;
  closedir(d);
  return n;
}

START_TEST(server_answers_from_the_snapshot) {
  int fds_before = count_fds();
  char bound[96], err[256];
  ea__http *h = NULL;
  ck_assert_msg(ea__http_start("127.0.0.1:0", &h, bound, sizeof bound, err, sizeof err) == 0, "%s",
                err);
  ck_assert_str_eq(strncmp(bound, "127.0.0.1:", 10) == 0 ? "ok" : bound, "ok");
  uint16_t port = port_of(bound);
  ck_assert_uint_gt(port, 0);
  http_resp r;

  /* nothing published yet */
  request(port, "GET", "/healthz", &r);
  ck_assert_int_eq(r.code, 503);
  ck_assert_str_eq(r.body, "starting\n");
  free(r.body);

  ea__mx_snap *s = fixed_snapshot();
  s->mono_ms = uv_hrtime() / 1000000u;
  ea__http_publish(h, s);
  request(port, "GET", "/healthz", &r);
  ck_assert_int_eq(r.code, 200);
  ck_assert_str_eq(r.body, "ok\n");
  free(r.body);
  request(port, "GET", "/readyz", &r);
  ck_assert_int_eq(r.code, 200);
  ck_assert_str_eq(r.body, "ok\n");
  free(r.body);
  request(port, "GET", "/metrics", &r);
  ck_assert_int_eq(r.code, 200);
  ck_assert_str_eq(r.body, expected);
  ck_assert_msg(strstr(r.head, "Content-Type: text/plain; version=0.0.4; charset=utf-8"), "%s",
                r.head);
  free(r.body);
  request(port, "HEAD", "/metrics", &r);
  ck_assert_int_eq(r.code, 200);
  ck_assert_str_eq(r.body, "");
  free(r.body);

  /* not ready, with the reason */
  s = fixed_snapshot();
  s->mono_ms = uv_hrtime() / 1000000u;
  s->ready = false;
  snprintf(s->ready_why, sizeof s->ready_why, "stalled: generation 7 has made no step for 301 s");
  ea__http_publish(h, s);
  request(port, "GET", "/readyz", &r);
  ck_assert_int_eq(r.code, 503);
  ck_assert_str_eq(r.body, "stalled: generation 7 has made no step for 301 s\n");
  free(r.body);
  request(port, "GET", "/healthz", &r);
  ck_assert_int_eq(r.code, 200); /* alive, just not ready */
  free(r.body);

  /* a loop that stopped publishing: both probes fail */
  s = fixed_snapshot();
  s->mono_ms = uv_hrtime() / 1000000u - EA__HEALTH_MAX_AGE_MS - 1500;
  ea__http_publish(h, s);
  request(port, "GET", "/healthz", &r);
  ck_assert_int_eq(r.code, 503);
  ck_assert_msg(strstr(r.body, "the agent's loop has not answered for 6."), "%s", r.body);
  free(r.body);
  request(port, "GET", "/readyz", &r);
  ck_assert_int_eq(r.code, 503);
  free(r.body);

  /* other paths and methods */
  request(port, "GET", "/metricsx", &r);
  ck_assert_int_eq(r.code, 404);
  free(r.body);
  request(port, "POST", "/metrics", &r);
  ck_assert_int_eq(r.code, 405);
  ck_assert_msg(strstr(r.head, "Allow: GET, HEAD"), "%s", r.head);
  free(r.body);
  /* the page: the embedded HTML whole, with its policy */
  ck_assert(!ea__http_wanted(h, uv_hrtime() / 1000000u)); /* nobody asked for it yet */
  request(port, "GET", "/", &r);
  ck_assert_int_eq(r.code, 200);
  size_t page_len;
  const char *page = ea__page_html(&page_len);
  ck_assert_str_eq(r.body, page);
  ck_assert_uint_eq(strlen(page), page_len);
  ck_assert_msg(strstr(r.head, "Content-Type: text/html; charset=utf-8"), "%s", r.head);
  ck_assert_msg(strstr(r.head, "Content-Security-Policy: default-src 'none';"), "%s", r.head);
  ck_assert_msg(strstr(r.head, "connect-src 'self';"), "%s", r.head);
  ck_assert_msg(strstr(r.head, "X-Content-Type-Options: nosniff"), "%s", r.head);
  free(r.body);
  ck_assert(ea__http_wanted(h, uv_hrtime() / 1000000u)); /* now the loop formats the JSON */
  ck_assert_uint_ge(ea__http_requests(h), 12);

  /* the port is taken while we run: a second server says so */
  char spec[64];
  snprintf(spec, sizeof spec, "127.0.0.1:%u", port);
  ea__http *h2 = NULL;
  char b2[96];
  ck_assert_int_eq(ea__http_start(spec, &h2, b2, sizeof b2, err, sizeof err), -EADDRINUSE);
  ck_assert_ptr_null(h2);
  char want[128];
  snprintf(want, sizeof want, "cannot listen on %s: Address already in use", spec);
  ck_assert_str_eq(err, want);

  ea__http_stop(h);
  /* closed: refused now, and nothing left open */
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ck_assert_int_ne(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  close(fd);
  ck_assert_int_eq(count_fds(), fds_before);
}
END_TEST

/* Is s (n bytes) well-formed UTF-8 (RFC 3629: no overlong forms, no
 * surrogates, nothing past U+10FFFF)?  Written here from the RFC's table,
 * not with the code under test. */
static bool utf8_valid(const char *str, size_t n) {
  const unsigned char *s = (const unsigned char *)str;
  for (size_t i = 0; i < n;) {
    unsigned c = s[i];
    size_t k;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80) {
      i++;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      k = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      k = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      k = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (i + k >= n) return false;
    if (s[i + 1] < lo || s[i + 1] > hi) return false;
    for (size_t j = 2; j <= k; j++)
      if ((s[i + j] & 0xC0) != 0x80) return false;
    i += k + 1;
  }
  return true;
}

/* Every text answer is UTF-8, as its Content-Type says, whatever bytes the
 * request or the snapshot holds: a reason naming a --join spec or a member
 * (any bytes), a reason cut inside a character by its buffer, a URL that
 * percent-decodes to bytes that are not UTF-8, or one cut at 200 bytes in
 * the middle of a character.  Each byte that starts no valid sequence
 * becomes U+FFFD; a character cut by a limit is left out whole.  (Before,
 * each was echoed as it came, and the page was not UTF-8.) */
/* Issue 27: one source holds at most 8 connections; the ninth is closed as
 * soon as it is accepted and counted, other sources are still answered,
 * and a connection that sends no request is closed within 2 s and counted. */
START_TEST(a_source_over_its_limit_is_refused_at_once) {
  char bound[96], err[256];
  ea__http *h = NULL;
  ck_assert_msg(ea__http_start("127.0.0.1:0", &h, bound, sizeof bound, err, sizeof err) == 0, "%s",
                err);
  uint16_t port = port_of(bound);
  ea__mx_snap *s = fixed_snapshot();
  s->mono_ms = uv_hrtime() / 1000000u;
  ea__http_publish(h, s);
  int held[8];
  for (int i = 0; i < 8; i++) held[i] = connect_from("127.0.0.2", port);
  int ninth = connect_from("127.0.0.2", port);
  struct timeval tv = {.tv_sec = 1};
  setsockopt(ninth, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char c;
  uint64_t t0 = uv_hrtime();
  ck_assert_int_eq(read(ninth, &c, 1), 0); /* closed by the server, not timed out */
  ck_assert_uint_lt(uv_hrtime() - t0, 900000000u);
  close(ninth);
  ea__http_stats st;
  ea__http_stats_get(h, &st);
  ck_assert_uint_eq(st.refused_per_source, 1);
  ck_assert_uint_eq(st.refused_full, 0);
  http_resp r;
  request_from("127.0.0.3", port, "GET", "/healthz", &r);
  ck_assert_int_eq(r.code, 200);
  free(r.body);
  /* The held eight sent nothing: closed within 2 s (and a margin). */
  for (int i = 0; i < 8; i++) {
    setsockopt(held[i], SOL_SOCKET, SO_RCVTIMEO, &(struct timeval){.tv_sec = 4}, sizeof tv);
    ck_assert_int_eq(read(held[i], &c, 1), 0);
    close(held[i]);
  }
  ck_assert_uint_lt(uv_hrtime() - t0, 3500000000u);
  /* libmicrohttpd shuts a connection down before it notifies its close:
   * poll the count (1 s deadline). */
  for (int i = 0; i < 100; i++) {
    ea__http_stats_get(h, &st);
    if (st.closed_unrequested == 8) break;
    usleep(10000);
  }
  ck_assert_uint_eq(st.closed_unrequested, 8);
  /* Their source's count went back down: it is answered again. */
  request_from("127.0.0.2", port, "GET", "/healthz", &r);
  ck_assert_int_eq(r.code, 200);
  free(r.body);
  ea__http_stats_get(h, &st);
  ck_assert_uint_eq(st.requests, 2);
  ea__http_stop(h);
}
END_TEST

START_TEST(text_answers_are_utf8) {
  char bound[96], err[256];
  ea__http *h = NULL;
  ck_assert_msg(ea__http_start("127.0.0.1:0", &h, bound, sizeof bound, err, sizeof err) == 0, "%s",
                err);
  uint16_t port = port_of(bound);
  http_resp r;
  ea__mx_snap *s = fixed_snapshot();
  s->mono_ms = uv_hrtime() / 1000000u;
  s->ready = false;
  /* a reason naming bytes that are not UTF-8, cut by its buffer inside "é" */
  memset(s->ready_why, 'a', sizeof s->ready_why);
  memcpy(s->ready_why, "not joined: no seed of --join h\xff\xfe:1 has answered", 48);
  s->ready_why[sizeof s->ready_why - 3] = '\xC3';
  s->ready_why[sizeof s->ready_why - 2] = '\xA9';
  s->ready_why[sizeof s->ready_why - 4] = '\xE2'; /* a 3-byte character cut after one */
  s->ready_why[sizeof s->ready_why - 1] = 0;
  ea__http_publish(h, s);
  request(port, "GET", "/readyz", &r);
  ck_assert_int_eq(r.code, 503);
  ck_assert_msg(utf8_valid(r.body, strlen(r.body)), "not UTF-8: %s", r.body);
  ck_assert_msg(
      strncmp(r.body, "not joined: no seed of --join h\xEF\xBF\xBD\xEF\xBF\xBD:1 has", 40) == 0,
      "%s", r.body);
  ck_assert_ptr_nonnull(strstr(r.body, "a\xEF\xBF\xBD\xC3\xA9\n"));
  free(r.body);

  request(port, "GET", "/%FF%C3x%E2%82", &r);
  ck_assert_int_eq(r.code, 404);
  ck_assert_msg(utf8_valid(r.body, strlen(r.body)), "not UTF-8: %s", r.body);
  ck_assert_str_eq(
      r.body,
      "not found: /\xEF\xBF\xBD\xEF\xBF\xBDx\xEF\xBF\xBD\xEF\xBF\xBD (try /, /metrics, "
      "/healthz, /readyz, /api/v1/status, /api/v1/history)\n");
  free(r.body);

  /* 199 bytes of path, then "é": the 200-byte cut falls inside it */
  char path[256] = "/";
  memset(path + 1, 'p', 198);
  strcpy(path + 199, "%C3%A9tail");
  request(port, "GET", path, &r);
  ck_assert_int_eq(r.code, 404);
  ck_assert_msg(utf8_valid(r.body, strlen(r.body)), "not UTF-8: %s", r.body);
  ck_assert_ptr_nonnull(strstr(r.body, "pp (try /, /metrics"));
  free(r.body);

  request(port, "GET", "/metrics", &r);
  ck_assert_int_eq(r.code, 200);
  ck_assert(utf8_valid(r.body, strlen(r.body)));
  free(r.body);
  ea__http_stop(h);
}
END_TEST

/* The page's JSON (issue 31): what the loop put in the snapshot, as it
 * is, or a JSON 503 that says why not; only GET and HEAD. */
START_TEST(page_json_answers) {
  ea__http_reply r;
  ea__http_answer("GET", "/api/v1/status", NULL, 1000, &r);
  ck_assert_int_eq(r.code, 503);
  ck_assert_str_eq(r.type, "application/json");
  ck_assert_str_eq(r.body, "{\"error\":\"starting\"}\n");
  free(r.body);

  ea__mx_snap *s = fixed_snapshot();
  s->mono_ms = 1000;
  ea__http_answer("GET", "/api/v1/history", s, 1000, &r);
  ck_assert_int_eq(r.code, 503); /* not formatted: nobody asked in the last minute */
  ck_assert_str_eq(r.type, "application/json");
  ck_assert_ptr_nonnull(strstr(r.body, "{\"error\":\"warming up:"));
  free(r.body);

  s->status_json = strdup("{\"version\":\"1.2.3\",\"members\":[{\"name\":\"<script>\"}]}");
  s->history_json = strdup("{\"version\":1,\"points\":[]}");
  ea__http_answer("GET", "/api/v1/status", s, 1000, &r);
  ck_assert_int_eq(r.code, 200);
  ck_assert_str_eq(r.type, "application/json");
  ck_assert_ptr_null(r.csp);
  ck_assert_str_eq(r.body, "{\"version\":\"1.2.3\",\"members\":[{\"name\":\"<script>\"}]}\n");
  free(r.body);
  ea__http_answer("HEAD", "/api/v1/history", s, 1000, &r);
  ck_assert_int_eq(r.code, 200);
  ck_assert_str_eq(r.body, "{\"version\":1,\"points\":[]}\n");
  free(r.body);
  /* a stale snapshot still answers: /healthz is where staleness shows */
  ea__http_answer("GET", "/api/v1/status", s, 1000 + EA__HEALTH_MAX_AGE_MS * 10, &r);
  ck_assert_int_eq(r.code, 200);
  free(r.body);
  /* nothing here changes anything */
  ea__http_answer("POST", "/api/v1/status", s, 1000, &r);
  ck_assert_int_eq(r.code, 405);
  ck_assert(r.allow);
  free(r.body);
  ea__http_answer("GET", "/api/v1/statusx", s, 1000, &r);
  ck_assert_int_eq(r.code, 404);
  free(r.body);
  ea__http_answer("GET", "/", s, 1000, &r);
  ck_assert_int_eq(r.code, 200);
  ck_assert_str_eq(r.type, "text/html; charset=utf-8");
  ck_assert_ptr_nonnull(r.csp);
  ck_assert_ptr_nonnull(strstr(r.body, "/api/v1/history"));
  /* the page fetches nothing from elsewhere: no absolute or protocol-relative URL in a
   * src or href, no CSS import or url() */
  ck_assert_ptr_null(strstr(r.body, "src=\"http"));
  ck_assert_ptr_null(strstr(r.body, "href=\"http"));
  ck_assert_ptr_null(strstr(r.body, "=\"//"));
  ck_assert_ptr_null(strstr(r.body, "@import"));
  ck_assert_ptr_null(strstr(r.body, "url("));
  free(r.body);
  ea__mx_snap_free(s);
}
END_TEST

/* The loop formats the page's JSON only while someone asked for it in the
 * last EA__PAGE_IDLE_MS; /metrics and the probes do not count. */
START_TEST(page_json_is_wanted_for_a_minute) {
  char bound[96], err[256];
  ea__http *h = NULL;
  ck_assert_msg(ea__http_start("127.0.0.1:0", &h, bound, sizeof bound, err, sizeof err) == 0, "%s",
                err);
  uint16_t port = port_of(bound);
  http_resp r;
  request(port, "GET", "/metrics", &r);
  free(r.body);
  request(port, "GET", "/healthz", &r);
  free(r.body);
  uint64_t before = uv_hrtime() / 1000000u;
  ck_assert(!ea__http_wanted(h, before));
  request(port, "GET", "/api/v1/status", &r);
  ck_assert_int_eq(r.code, 503); /* no snapshot yet */
  ck_assert_str_eq(r.body, "{\"error\":\"starting\"}\n");
  free(r.body);
  uint64_t after = uv_hrtime() / 1000000u;
  ck_assert(ea__http_wanted(h, after));
  ck_assert(ea__http_wanted(h, before)); /* a loop whose clock read came first */
  /* the boundary: still wanted EA__PAGE_IDLE_MS after the request at the
   * latest, no longer one minute after it at the earliest */
  ck_assert(ea__http_wanted(h, before + EA__PAGE_IDLE_MS - 1));
  ck_assert(!ea__http_wanted(h, after + EA__PAGE_IDLE_MS));
  ea__http_stop(h);
}
END_TEST

START_TEST(bad_listen_specs) {
  char bound[96], err[256];
  ea__http *h = NULL;
  ck_assert_int_eq(ea__http_start("nocolon", &h, bound, sizeof bound, err, sizeof err), -EINVAL);
  ck_assert_str_eq(err, "cannot parse 'nocolon' as HOST:PORT");
  ck_assert_int_eq(ea__http_start("[::1:80", &h, bound, sizeof bound, err, sizeof err), -EINVAL);
  /* TEST-NET-1 (RFC 5737) is on no interface here */
  ck_assert_int_eq(ea__http_start("192.0.2.1:9400", &h, bound, sizeof bound, err, sizeof err),
                   -EADDRNOTAVAIL);
  ck_assert_str_eq(err, "cannot listen on 192.0.2.1:9400: Cannot assign requested address");
  ck_assert_ptr_null(h);
}
END_TEST

static Suite *metrics_suite(void) {
  Suite *s = suite_create("metrics");
  TCase *tc = tcase_create("metrics");
  tcase_add_test(tc, exposition_exact_text);
  tcase_add_test(tc, values_and_absent_samples);
  tcase_add_test(tc, histogram_is_cumulative);
  tcase_add_test(tc, alert_kinds_named);
  tcase_add_test(tc, server_answers_from_the_snapshot);
  tcase_add_test(tc, a_source_over_its_limit_is_refused_at_once);
  tcase_add_test(tc, text_answers_are_utf8);
  tcase_add_test(tc, page_json_answers);
  tcase_add_test(tc, page_json_is_wanted_for_a_minute);
  tcase_add_test(tc, bad_listen_specs);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(metrics_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
