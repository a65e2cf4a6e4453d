/* status_text.c — `elastic-agent status` for humans: the status document
 * (agent/status.c builds it, the admin socket carries it as JSON) printed as
 * a few short sections: the node, its generation and workers, the last
 * checkpoint, the job, membership.  A missing or null field prints as "?"
 * or "-", never as an error: an older agent's document has fewer fields.
 * Moved out of main.c, which parses the command and calls it (cli.h).
 */
#include "ea_json.h"
#include "cli.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *shorten_id(const char *hex, char *buf, size_t cap) {
  snprintf(buf, cap, "%.12s", hex ? hex : "?");
  return buf;
}

/* Member names come from the network: never let one carry terminal escape
 * sequences onto an operator's screen. */
void ea__cli_scrub(ea_json *j) {
  for (; j; j = j->next) {
    for (char *p = j->text; p && *p; p++)
      if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
    ea__cli_scrub(j->child);
  }
}

/* A value that may be JSON null (a loss before the first step): "-". */
static const char *or_dash(const ea_json *j, const char *path) {
  const ea_json *v = ea_json_get(j, path);
  return !v || v->type == EA_J_NULL ? "-" : ea_json_str(j, path, "-");
}

/* The generation this node trains in, why, and its workers. */
static const char *human_bytes(double b, char *buf, size_t cap);

static void print_generation(const ea_json *j) {
  const char *phase = ea_json_str(j, "generation.phase", "?");
  /* A stall first: "running" alone hid one that re-formed without a step (issue 11);
   * then the link probe, which starts before the stall timeout (issue 27). */
  const char *probe = ea_json_str(j, "generation.link_probe.text", "");
  printf("\ngeneration: %s%s%s%s%s %s", ea_json_num(j, "generation.stalled", 0) ? "stalled, " : "",
         probe[0] ? "degraded (" : "", probe, probe[0] ? "), " : "", phase,
         ea_json_str(j, "generation.running", "none"));
  const ea_json *nodes = ea_json_get(j, "generation.nodes");
  if (nodes && nodes->n > 0) {
    printf(", world %s (", ea_json_str(j, "generation.world", "?"));
    for (const ea_json *n = nodes->child; n; n = n->next)
      printf("%s%s", n == nodes->child ? "" : " ", n->text ? n->text : "?");
    printf("), this node: rank");
    const ea_json *ranks = ea_json_get(j, "generation.ranks");
    if (ranks && ranks->n > 1) printf("s");
    for (const ea_json *r = ranks ? ranks->child : NULL; r; r = r->next)
      printf("%s%s", r == ranks->child ? " " : ",", r->text ? r->text : "?");
  }
  printf("; step %s, loss %s\n", ea_json_str(j, "generation.last_step", "?"),
         or_dash(j, "generation.last_loss"));
  printf("            %s%s\n", ea_json_str(j, "generation.reason", ""),
         ea_json_num(j, "generation.draining", 0) ? " [draining]" : "");
  printf(
      "            generations committed here %s, recoveries %s, last formation %s ms, "
      "last stall %s ms\n",
      ea_json_str(j, "generation.committed_here", "?"),
      ea_json_str(j, "generation.recoveries", "?"),
      ea_json_str(j, "generation.last_formation_ms", "?"),
      ea_json_str(j, "generation.last_stall_ms", "?"));
  const ea_json *ws = ea_json_get(j, "workers");
  if (!ws || ws->type != EA_J_ARR || ws->n == 0) {
    printf("workers:    none (observer)\n\n");
    return;
  }
  for (const ea_json *w = ws->child; w; w = w->next) {
    printf("%s%-2s pid %-7s %-9s step %-7s loss %-9s digest %s restarts %s",
           w == ws->child ? "workers:    " : "            ", ea_json_str(w, "idx", "?"),
           ea_json_str(w, "pid", "?"), ea_json_str(w, "state", "?"), ea_json_str(w, "step", "?"),
           or_dash(w, "loss"), ea_json_str(w, "digest", "?"), ea_json_str(w, "restarts", "?"));
    /* its warm interpreter: "warm ready pid 812 (651 MiB), started 3 warm 0 cold" */
    const char *st = ea_json_str(w, "spare.state", "off");
    if (strcmp(st, "off") != 0 || ea_json_get(w, "spare.why")) {
      char rss[32];
      printf("\n              warm interpreter %s", st);
      if (ea_json_get(w, "spare.pid"))
        printf(" pid %s (%s)", ea_json_str(w, "spare.pid", "?"),
               human_bytes(ea_json_num(w, "spare.rss_bytes", 0), rss, sizeof rss));
      if (ea_json_get(w, "spare.why")) printf(": %s", ea_json_str(w, "spare.why", ""));
      printf("; starts %s warm, %s cold", ea_json_str(w, "spare.warm_starts", "0"),
             ea_json_str(w, "spare.cold_starts", "0"));
    }
    printf("\n");
  }
  printf("\n");
}

/* "spares": the nodes waiting beyond max_nodes, in the order they would be
 * taken, and this node's part (spare.c).  Nothing when there are none and
 * this node's health check passes. */
static void print_spares(const ea_json *j) {
  const ea_json *ns = ea_json_get(j, "spares.nodes");
  bool self = ea_json_num(j, "spares.self.spare", 0) != 0;
  const ea_json *ok = ea_json_get(j, "spares.self.check.ok");
  bool failed = ok && ok->type != EA_J_NULL && ea_json_num(j, "spares.self.check.ok", 1) == 0;
  if ((!ns || ns->n == 0) && !self && !failed) return;
  printf("spares:     %s ready of %s (max_nodes %s)", ea_json_str(j, "spares.ready", "0"),
         ea_json_str(j, "spares.total", "0"), ea_json_str(j, "spares.max_nodes", "?"));
  for (const ea_json *n = ns ? ns->child : NULL; n; n = n->next)
    printf("%s%s %s", n == ns->child ? ": " : ", ", ea_json_str(n, "name", "?"),
           ea_json_str(n, "state", "?"));
  printf("\n");
  if (self)
    printf("            this node: spare (%s, %s of %s in line); %s\n",
           ea_json_str(j, "spares.self.state", "?"), ea_json_str(j, "spares.self.in_line", "?"),
           ea_json_str(j, "spares.total", "?"), ea_json_str(j, "spares.self.readiness", ""));
  if ((self || failed) && ok && ok->type != EA_J_NULL)
    printf("            health check %s %ss ago: %s\n", failed ? "FAILED" : "ok",
           ea_json_str(j, "spares.self.check.age_s", "?"),
           ea_json_str(j, "spares.self.check.detail", ""));
  printf("\n");
}

/* Bytes for people: "151.2 KB", "3.0 MiB". */
static const char *human_bytes(double b, char *buf, size_t cap) {
  static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, u++;
  snprintf(buf, cap, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
  return buf;
}

/* Checkpoints: the newest one, what this node committed (as controller)
 * and wrote (its own shards), a cold start's load, the last error. */
static void print_checkpoint(const ea_json *j) {
  const char *c = "checkpoint.";
  char k[128], b1[32], b2[32];
#define K(name) (snprintf(k, sizeof k, "%s%s", c, name), k)
  if (!ea_json_get(j, "checkpoint")) return;
  if (ea_json_num(j, K("enabled"), 0))
    printf("checkpoint: every %s steps to %s (keep %s, busy %s)",
           ea_json_str(j, K("interval"), "?"), ea_json_str(j, K("dir"), "?"),
           ea_json_str(j, K("keep_last"), "?"), ea_json_str(j, K("busy_policy"), "?"));
  else
    printf("checkpoint: off (checkpoint.save_interval_steps 0), dir %s",
           ea_json_str(j, K("dir"), "?"));
  printf("; latest %s\n", or_dash(j, K("latest")));
  printf("            committed %s, started %s, failed %s, skipped %s, stale %s, in flight %s%s\n",
         ea_json_str(j, K("committed"), "?"), ea_json_str(j, K("started"), "?"),
         ea_json_str(j, K("failed"), "?"), ea_json_str(j, K("skipped"), "?"),
         ea_json_str(j, K("stale"), "?"), ea_json_str(j, K("in_flight"), "?"),
         ea_json_num(j, K("controller"), 0) ? " (this node commits)" : "");
  if (ea_json_num(j, K("committed"), 0) > 0)
    printf(
        "            last commit step %s gen %s: %s in %.3f s (slowest shard %.1f ms, commit %.1f "
        "ms), stall %s us\n",
        or_dash(j, K("last_step")), or_dash(j, K("last_gen")),
        human_bytes(ea_json_num(j, K("bytes"), 0) / ea_json_num(j, K("committed"), 1), b1,
                    sizeof b1),
        ea_json_num(j, K("last_persist_s"), 0), ea_json_num(j, K("last_write_ms"), 0),
        ea_json_num(j, K("last_commit_ms"), 0), ea_json_str(j, K("last_stall_us"), "?"));
  printf(
      "            shards here: written %s (%s), failed %s, skipped %s; last write %.1f ms, stall "
      "%s "
      "us\n",
      ea_json_str(j, K("shards.written"), "?"),
      human_bytes(ea_json_num(j, K("shards.bytes"), 0), b2, sizeof b2),
      ea_json_str(j, K("shards.failed"), "?"), ea_json_str(j, K("shards.skipped"), "?"),
      ea_json_num(j, K("shards.last_write_ms"), 0), ea_json_str(j, K("shards.last_stall_us"), "?"));
  const ea_json *r = ea_json_get(j, K("resumed"));
  if (r && r->type == EA_J_OBJ)
    printf("            resumed from %s: step %s, digest %s, %s fallback(s)%s%s\n",
           ea_json_str(r, "name", "?"), ea_json_str(r, "step", "?"), ea_json_str(r, "digest", "?"),
           ea_json_str(r, "fallbacks", "?"), ea_json_num(r, "fallbacks", 0) ? ": " : "",
           ea_json_num(r, "fallbacks", 0) ? ea_json_str(r, "why", "") : "");
  const char *e = ea_json_str(j, K("last_error"), "");
  if (*e) printf("            last error: %s\n", e);
  printf("\n");
#undef K
}

/* The job: how the program is driven, its state, restarts, the last failure. */
static void print_job(const ea_json *j) {
  if (!ea_json_get(j, "job")) return;
  const char *cmd = ea_json_str(j, "job.command", "");
  printf("job:        %s%s%s%s: %s", ea_json_str(j, "job.protocol", "?"), cmd[0] ? " `" : "", cmd,
         cmd[0] ? "`" : "", ea_json_str(j, "job.state", "?"));
  const ea_json *ec = ea_json_get(j, "job.exit_code");
  if (ec && ec->type != EA_J_NULL)
    printf(" (%s, exit status %s: %s)", ea_json_str(j, "job.outcome", "?"),
           ea_json_str(j, "job.exit_code", "?"), ea_json_str(j, "job.reason", ""));
  const ea_json *mr = ea_json_get(j, "job.max_restarts");
  printf(", restarts %s", ea_json_str(j, "job.restarts", "?"));
  if (mr && mr->type != EA_J_NULL) printf(" of %s", ea_json_str(j, "job.max_restarts", "?"));
  printf("\n");
  const ea_json *f = ea_json_get(j, "job.failure");
  if (f && f->type == EA_J_OBJ) {
    const ea_json *code = ea_json_get(f, "exit_code");
    printf("            last failure: rank %s on %s %s %s: %s\n", ea_json_str(f, "rank", "?"),
           ea_json_str(f, "node", "?"),
           code && code->type != EA_J_NULL ? "exited with code" : "killed by signal",
           code && code->type != EA_J_NULL ? ea_json_str(f, "exit_code", "?")
                                           : ea_json_str(f, "signal", "?"),
           ea_json_str(f, "message", ""));
  }
  if (ea_json_num(j, "job.churn.count", 0) >= 2)
    printf(
        "            churn: %s generations in a row failed soon after their commit (%s); next "
        "waits %s ms\n",
        ea_json_str(j, "job.churn.count", "?"), ea_json_str(j, "job.churn.reason", ""),
        ea_json_str(j, "job.churn.wait_ms", "?"));
  /* The controller's hold-outs and stragglers (issue 13, items 4-5). */
  const ea_json *ho = ea_json_get(j, "held_out");
  for (const ea_json *x = ho && ho->type == EA_J_ARR ? ho->child : NULL; x; x = x->next)
    printf("            held out: %s (%s: %s) until %s, %ss left (hold-out %s)\n",
           ea_json_str(x, "node", "?"), ea_json_str(x, "why", "?"), ea_json_str(x, "reason", ""),
           ea_json_str(x, "until", "?"), ea_json_str(x, "remaining_s", "?"),
           ea_json_str(x, "holds", "?"));
  const ea_json *sl = ea_json_get(j, "stragglers.slow");
  for (const ea_json *x = sl && sl->type == EA_J_ARR ? sl->child : NULL; x; x = x->next)
    printf("            %s: rank %s on %s computes %ss a step, %sx the median, for %ss\n",
           ea_json_num(x, "straggler", 0) ? "straggler" : "slow", ea_json_str(x, "rank", "?"),
           ea_json_str(x, "node", "?"), ea_json_str(x, "compute_s", "?"),
           ea_json_str(x, "ratio", "?"), ea_json_str(x, "slow_for_s", "?"));
}

void ea__cli_print_status(const ea_json *j) {
  const char *sname = ea_json_str(j, "self.name", "?");
  char sid[16];
  printf("node        %s (id %s, pid %s, version %s), gossip %s, up %ss, cluster key: %s\n", sname,
         shorten_id(ea_json_str(j, "self.id", "?"), sid, sizeof sid),
         ea_json_str(j, "self.pid", "?"), ea_json_str(j, "version", "?"),
         ea_json_str(j, "self.gossip", "?"), ea_json_str(j, "self.uptime_s", "?"),
         ea_json_num(j, "config.key", 0) ? "yes" : "NO (unauthenticated)");
  printf("members: %s alive, %s suspect, %s dead, %s left\n", ea_json_str(j, "summary.alive", "?"),
         ea_json_str(j, "summary.suspect", "?"), ea_json_str(j, "summary.dead", "?"),
         ea_json_str(j, "summary.left", "?"));
  const ea_json *ms = ea_json_get(j, "members");
  int wn = 4, wa = 7;
  for (const ea_json *m = ms ? ms->child : NULL; m; m = m->next) {
    int ln = (int)strlen(ea_json_str(m, "name", "?")),
        la = (int)strlen(ea_json_str(m, "gossip", "?"));
    if (ln > wn) wn = ln;
    if (la > wa) wa = la;
  }
  printf("\n  %-*s  %-*s  %-8s %11s  %9s  %-8s %s\n", wn, "NAME", wa, "ADDRESS", "STATE",
         "INCARNATION", "SINCE", "ROLE", "ID");
  for (const ea_json *m = ms ? ms->child : NULL; m; m = m->next) {
    char id[16], since[32];
    snprintf(since, sizeof since, "%ss", ea_json_str(m, "since_s", "?"));
    printf("  %-*s  %-*s  %-8s %11s  %9s  %-8s %s%s\n", wn, ea_json_str(m, "name", "?"), wa,
           ea_json_str(m, "gossip", "?"), ea_json_str(m, "state", "?"),
           ea_json_str(m, "incarnation", "?"), since, ea_json_str(m, "role", "?"),
           shorten_id(ea_json_str(m, "id", "?"), id, sizeof id),
           ea_json_num(m, "self", 0) ? "  (self)" : "");
  }
  const ea_json *cname = ea_json_get(j, "controller.name");
  if (cname && cname->type == EA_J_STR)
    printf("\ncontroller: %s (id %s) — %s\n", cname->text, ea_json_str(j, "controller.id", "?"),
           ea_json_str(j, "controller.reason", ""));
  else
    printf("\ncontroller: none — %s\n", ea_json_str(j, "controller.reason", ""));
  const char *cst = ea_json_str(j, "cluster.state", "");
  if (strcmp(cst, "waiting to join") == 0)
    printf("cluster: waiting to join through %s (no job starts here before; --bootstrap)\n",
           ea_json_str(j, "cluster.join", "?"));
  else if (cst[0])
    printf(
        "cluster: %s (%s)\n",
        ea_json_str(j, "cluster.id", "")[0] ? ea_json_str(j, "cluster.id", "") : "no identity yet",
        ea_json_str(j, "cluster.how", ""));
  if (ea_json_num(j, "cluster.checkpoint_dir_refusals", 0) > 0)
    printf("  refused: %s\n", ea_json_str(j, "cluster.last_refusal", ""));
  print_job(j);
  print_generation(j);
  print_spares(j);
  print_checkpoint(j);
  const char *t = "counters.transport.";
  char k[128];
#define T(name) (snprintf(k, sizeof k, "%s%s", t, name), ea_json_str(j, k, "?"))
  printf("transport:  packets in %s out %s, bytes in %s out %s\n", T("packets_in"),
         T("packets_out"), T("bytes_in"), T("bytes_out"));
  printf(
      "            dropped: malformed %s, unauthenticated %s, replayed %s, oversize %s; send "
      "errors %s\n",
      T("dropped_malformed"), T("dropped_unauthenticated"), T("dropped_replayed"),
      T("dropped_oversize"), T("send_errors"));
  printf("            push-pull: ok %s, failed %s, served %s, refused %s; join attempts %s\n",
         T("syncs_ok"), T("syncs_failed"), T("syncs_served"), T("syncs_refused"),
         T("join_attempts"));
  printf(
      "            before a frame header: evicted %s, timed out %s, over the connect rate %s; "
      "accept batches full %s\n",
      T("preauth_evicted"), T("preauth_timeouts"), T("refused_rate"), T("accepts_deferred"));
#undef T
  t = "counters.swim.";
#define S(name) (snprintf(k, sizeof k, "%s%s", t, name), ea_json_str(j, k, "?"))
  printf("swim:       pings %s, acks %s, ping-reqs %s, nacks %s, suspicions %s, refutations %s,\n",
         S("pings_sent"), S("acks_recv"), S("ping_reqs_sent"), S("nacks_recv"), S("suspicions"),
         S("refutations"));
  printf("            declared dead %s, updates sent %s, stale dropped %s, health %s\n",
         S("declared_dead"), S("updates_sent"), S("stale_dropped"), S("health"));
#undef S
  t = "counters.rdzv.";
#define R(name) (snprintf(k, sizeof k, "%s%s", t, name), ea_json_str(j, k, "?"))
  printf(
      "rdzv:       formations started %s, committed %s, failed %s; nacks sent %s, received "
      "%s;\n            stale ignored %s, persist errors %s\n",
      R("formations_started"), R("formations_committed"), R("formations_failed"), R("nacks_sent"),
      R("nacks_received"), R("stale_ignored"), R("persist_errors"));
#undef R
  t = "counters.control.";
#define C(name) (snprintf(k, sizeof k, "%s%s", t, name), ea_json_str(j, k, "?"))
  printf("control:    frames in %s out %s, bytes in %s out %s; connections out %s in %s\n",
         C("frames_in"), C("frames_out"), C("bytes_in"), C("bytes_out"), C("conns_out"),
         C("conns_in"));
  printf(
      "            dropped: malformed %s, unauthenticated %s, replayed %s, oversize %s; send "
      "errors %s\n",
      C("dropped_malformed"), C("dropped_unauthenticated"), C("dropped_replayed"),
      C("dropped_oversize"), C("send_errors"));
#undef C
  printf("detection:  probe every %s ms, suspicion %s..%s ms, dead everywhere within %s ms\n",
         ea_json_str(j, "config.probe_interval_ms", "?"),
         ea_json_str(j, "config.suspicion_min_ms", "?"),
         ea_json_str(j, "config.suspicion_max_ms", "?"),
         ea_json_str(j, "config.detection_bound_ms", "?"));
}
