/* run.c — the cluster under test and the invariants that are checked while
 * it runs.
 *
 * The harness polls every agent's status ten times a second and drives one
 * *episode* per scheduled fault (episode.c).  Polling also checks,
 * continuously: generation numbers only grow on each agent (running and
 * persisted), never two controllers with quorum for longer than gossip
 * needs to converge, the cluster's step never falls back, and nodes on the
 * minority side of a partition never train.  The exact timings (detection,
 * re-formation, first step) are taken afterwards from the agents' log
 * stamps (history.c); polling only decides when to move on.
 *
 * Here: the nodes (start, signal, reap), polling and the continuous
 * invariants, what "formed" means, the cluster as a whole, and the run
 * (start, episodes, the target, stop).  The work dir, job file and the
 * calibration cluster are in setup.c; what episode.c and setup.c use from
 * this file is declared in chaos.h.
 */
#include "chaos.h"

#include "ea_rdzv.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

volatile int ea__chaos_interrupted;

/* Ten polls a second: recovery here takes about a second, so the harness
 * sees each phase within 10% of its length; each poll costs the agents a
 * few microseconds. */
#define POLL_MS 100
/* From exec to the admin socket answering: < 100 ms here; 20 s covers a
 * machine loaded by other work. */
#define START_TIMEOUT_MS 20000
/* Slack on top of detection + batching + comm timeout in the default
 * recovery bound: a formation is milliseconds, state sync of the test model
 * well under a second, and a loaded machine adds seconds. */
#define BOUND_SLACK_MS 5000

static const char *const inv_names[EA__I_COUNT] = {"target_step",        "step_only_grows",
                                                   "each_step_once",     "ranks_agree",
                                                   "matches_reference",  "one_generation",
                                                   "generations_grow",   "one_plan",
                                                   "one_controller",     "minority_never_trains",
                                                   "checkpoints",        "recovery_bound",
                                                   "clean_exit",         "coverage",
                                                   "resources_flat",     "strangers_refused",
                                                   "preempt_checkpoint", "spare_world_held",
                                                   "probes_answered"};

static const char *const inv_descs[EA__I_COUNT] = {
    "training reaches the target step",
    "the committed step only grows (no rollback)",
    "every step completed exactly once in the final history (none lost, none applied twice)",
    "every step's params digest identical across the ranks of its generation",
    "final params equal a fault-free reference run's",
    "a member never runs two generations",
    "generation numbers only grow (running and persisted, per node)",
    "every node that commits a generation gets the same plan",
    "never two controllers acting with quorum at once",
    "a minority side never trains",
    "every committed checkpoint verifies; resuming the newest reproduces the live state",
    "every fault recovered within its bound (no hang)",
    "drained and SIGTERMed agents exit 0; no agent dies unexpectedly",
    "the schedule ran: at least --min-faults faults were injected",
    "agents' resident memory and open descriptors stay flat (no leak over a long run)",
    "an agent of another cluster joins no generation and touches no checkpoint of the cluster",
    "after a mass preemption (notices that leave fewer than min_nodes) LATEST names a checkpoint "
    "at the step reached, not the last periodic one",
    "while a ready spare is left, a lost member's place is taken at the same world size",
    "GET /healthz answers within 1 s while 1000 connections flood the metrics listener"};

const char *ea__chaos_inv_name(int inv) {
  return inv >= 0 && inv < EA__I_COUNT ? inv_names[inv] : "?";
}

const char *ea__chaos_inv_desc(int inv) {
  return inv >= 0 && inv < EA__I_COUNT ? inv_descs[inv] : "?";
}

/* ---- logging --------------------------------------------------------------- */

static void vlogf(ea__chaos_run *r, const char *fmt, va_list ap) {
  if (!r->log) return;
  char ts[32];
  ea__chaos_fmt_ts(ea__chaos_now_ms(), ts, sizeof ts);
  fprintf(r->log, "%s ", ts);
  vfprintf(r->log, fmt, ap);
  size_t l = strlen(fmt);
  if (!l || fmt[l - 1] != '\n') fputc('\n', r->log);
  fflush(r->log);
}

void ea__chaos_logf(ea__chaos_run *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlogf(r, fmt, ap);
  va_end(ap);
}

void ea__chaos_say(ea__chaos_run *r, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  double t = r->t0 ? (double)(ea__chaos_now_ms() - r->t0) / 1000.0 : 0.0;
  printf("[%7.1fs] %s\n", t, line);
  fflush(stdout);
  ea__chaos_logf(r, "%s", line);
}

void ea__chaos_violate(ea__chaos_run *r, int inv, const char *fmt, ...) {
  if (EA_ARRAY_RESERVE(r->viol, r->capviol, r->nviol + 1) != 0) return;
  ea__chaos_violation *v = &r->viol[r->nviol++];
  v->inv = inv;
  v->t_ms = ea__chaos_now_ms();
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(v->msg, sizeof v->msg, fmt, ap);
  va_end(ap);
  ea__chaos_say(r, "VIOLATION %s: %s", ea__chaos_inv_name(inv), v->msg);
}

/* ---- nodes ------------------------------------------------------------------ */

uint32_t ea__chaos_wpn(const ea__chaos_run *r) {
  return r->cfg.compute.workers_per_node ? r->cfg.compute.workers_per_node : 1;
}

ea__chaos_node *ea__chaos_slot_node(ea__chaos_run *r, int s) {
  return s >= 1 && s <= r->nslots && r->slot_node[s] >= 0 ? &r->nodes[r->slot_node[s]] : NULL;
}

static ea__chaos_node *find_node(ea__chaos_run *r, const char *name) {
  for (size_t i = 0; i < r->nnodes; i++)
    if (strcmp(r->nodes[i].name, name) == 0) return &r->nodes[i];
  return NULL;
}

void ea__chaos_add_span(ea__chaos_run *r, const char *node, int64_t t0, int64_t t1, int what) {
  if (EA_ARRAY_RESERVE(r->spans, r->capspans, r->nspans + 1) != 0) return;
  ea__chaos_span *s = &r->spans[r->nspans++];
  snprintf(s->node, sizeof s->node, "%s", node);
  s->t0 = t0;
  s->t1 = t1;
  s->what = what;
}

/* A new identity on slot s: name, directories and a node id derived from
 * the seed, so the election order (lowest id) is the same on every run of
 * a seed — which makes "who is controller" part of the reproducible
 * schedule rather than luck. */
ea__chaos_node *ea__chaos_node_new(ea__chaos_run *r, const char *prefix, int s, int gen_of_slot) {
  if (r->nnodes >= CH_MAX_NODES) return NULL;
  ea__chaos_node *n = &r->nodes[r->nnodes];
  memset(n, 0, sizeof *n);
  if (gen_of_slot == 0)
    snprintf(n->name, sizeof n->name, "%s%d", prefix, s);
  else if (gen_of_slot < 25)
    snprintf(n->name, sizeof n->name, "%s%d%c", prefix, s, 'a' + gen_of_slot);
  else
    snprintf(n->name, sizeof n->name, "%s%dx%d", prefix, s, gen_of_slot);
  n->slot = s;
  n->gen_of_slot = gen_of_slot;
  snprintf(n->dir, sizeof n->dir, "%s/%s", r->o.work, n->name);
  snprintf(n->data, sizeof n->data, "%s/d", n->dir);
  snprintf(n->sock, sizeof n->sock, "%s/admin.sock", n->data);
  if (ea__chaos_mkdirs(n->data, 0700) < 0) return NULL;
  uint64_t a = ea_mix64(r->o.seed ^ ((uint64_t)s << 40) ^ ((uint64_t)gen_of_slot << 20) ^
                        (uint64_t)(unsigned char)prefix[0]);
  uint64_t b = ea_mix64(a ^ 0x6e6f64652d696400ull);
  snprintf(n->idhex, sizeof n->idhex, "%016llx%016llx", (unsigned long long)a,
           (unsigned long long)b);
  char path[CH_PATH_MAX + 16], line[40];
  snprintf(path, sizeof path, "%s/node-id", n->data);
  int l = snprintf(line, sizeof line, "%s\n", n->idhex);
  if (ea__chaos_write_file(path, line, (size_t)l) < 0) return NULL;
  r->nnodes++;
  r->slot_node[s] = (int)(r->nnodes - 1);
  return n;
}

bool ea__chaos_node_running(const ea__chaos_node *n) {
  return n && n->pid > 0;
}

/* An agent exits 0 by itself when the job reached train.steps (agent/job/job.c):
 * its log then says "job finished", and its workers' last lines say where
 * they finished ("worker K finished: step=S digest=D").  Those stand in for
 * the status the agent can no longer answer.  Reads the log's last 256 KiB. */
static bool finished_from_log(ea__chaos_node *n) {
  char path[CH_PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/agent.%d.log", n->dir, n->starts - 1);
  FILE *f = fopen(path, "r");
  if (!f) return false;
  /* the last 256 KiB, or the whole file from its start when it is shorter */
  long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : 0;
  if (fseek(f, size > 256 * 1024 ? size - 256 * 1024 : 0, SEEK_SET) != 0) rewind(f);
  char line[2048];
  bool fin = false;
  while (fgets(line, sizeof line, f)) {
    if (strstr(line, " job finished: ")) fin = true;
    unsigned k;
    unsigned long long step;
    char dig[20];
    const char *p = strstr(line, " train worker ");
    if (p && sscanf(p, " train worker %u finished: step=%llu digest=%19s", &k, &step, dig) == 3 &&
        k < CH_MAX_WPN) {
      snprintf(n->st.w[k].state, sizeof n->st.w[k].state, "done");
      n->st.w[k].step = step;
      snprintf(n->st.w[k].digest, sizeof n->st.w[k].digest, "%s", dig);
      if (k >= n->st.nworkers) n->st.nworkers = k + 1;
    }
  }
  fclose(f);
  return fin;
}

static bool any_finished(const ea__chaos_run *r) {
  for (size_t i = 0; i < r->nnodes; i++)
    if (r->nodes[i].finished) return true;
  return false;
}

static void on_reap(void *ctx, pid_t pid, int status) {
  ea__chaos_run *r = ctx;
  for (size_t i = 0; i < r->nnodes; i++) {
    ea__chaos_node *n = &r->nodes[i];
    if (n->pid != pid) continue;
    int64_t now = ea__chaos_now_ms();
    ea__chaos_add_span(r, n->name, n->start_ms, now, 0);
    n->pid = 0;
    n->exit_ms = now;
    n->exit_status = status;
    n->stopped = false;
    n->st.ok = false;
    char how[64];
    if (WIFEXITED(status))
      snprintf(how, sizeof how, "exit status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
      snprintf(how, sizeof how, "killed by signal %d (%s)", WTERMSIG(status),
               strsignal(WTERMSIG(status)));
    else
      snprintf(how, sizeof how, "status 0x%x", status);
    ea__chaos_logf(r, "agent %s (pid %d) ended: %s", n->name, (int)pid, how);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && !n->expect_death && finished_from_log(n)) {
      n->finished = true; /* the job ended: every agent leaves, exit 0 */
      ea__chaos_logf(r, "agent %s: the job finished", n->name);
    } else if (n->expect_exit0) {
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        ea__chaos_violate(r, EA__I_CLEAN_EXIT,
                          "agent %s was drained/SIGTERMed and should exit 0: %s", n->name, how);
    } else if (!n->expect_death) {
      ea__chaos_violate(r, EA__I_CLEAN_EXIT,
                        "agent %s died without being told to: %s (log %s/agent.%d.log)", n->name,
                        how, n->dir, n->starts - 1);
    }
    n->expect_exit0 = false;
    n->expect_death = false;
    return;
  }
}

static void seeds_for(ea__chaos_run *r, const ea__chaos_node *self, char *out, size_t cap) {
  size_t off = 0;
  out[0] = 0;
  if (self->join_via[0]) { /* the join-flood fault: through the flooded seed only */
    snprintf(out, cap, "%s", self->join_via);
    return;
  }
  for (int s = 1; s <= r->nslots; s++) {
    ea__chaos_node *n = ea__chaos_slot_node(r, s);
    if (!ea__chaos_node_running(n) || n == self || n->stopped) continue;
    char a[80];
    if (r->o.netns)
      snprintf(a, sizeof a, "%s:7000", r->ip[n->slot]);
    else if (n->gossip[0])
      snprintf(a, sizeof a, "%s", n->gossip);
    else
      continue;
    if (off + strlen(a) + 2 >= cap) break;
    off += (size_t)snprintf(out + off, cap - off, "%s%s", off ? "," : "", a);
  }
}

int ea__chaos_node_start(ea__chaos_run *r, ea__chaos_node *n) {
  char bind[64], seeds[1024], log[CH_PATH_MAX + 32];
  if (r->o.netns)
    snprintf(bind, sizeof bind, "%s:7000", r->ip[n->slot]);
  else
    snprintf(bind, sizeof bind, "127.0.0.1:0");
  seeds_for(r, n, seeds, sizeof seeds);
  snprintf(log, sizeof log, "%s/agent.%d.log", n->dir, n->starts);
  char *argv[24];
  int a = 0;
  argv[a++] = r->o.agent_bin;
  argv[a++] = "run";
  argv[a++] = "--name";
  argv[a++] = n->name;
  argv[a++] = "--data-dir";
  argv[a++] = n->data;
  argv[a++] = "--config";
  argv[a++] = r->job_path;
  argv[a++] = "--log-level";
  argv[a++] = "debug";
  argv[a++] = "--log-format";
  argv[a++] = "text";
  argv[a++] = "--bind";
  argv[a++] = bind;
  if (seeds[0]) {
    argv[a++] = "--join";
    argv[a++] = seeds;
  }
  /* Every agent serves /healthz and /metrics (the http-flood fault's
   * target): on its namespace's address, or on an ephemeral loopback port
   * (status self.metrics says which). */
  char metrics[96];
  snprintf(metrics, sizeof metrics, "observability.metrics_listen=%s:%s",
           r->o.netns ? r->ip[n->slot] : "127.0.0.1", r->o.netns ? "9400" : "0");
  argv[a++] = "--set";
  argv[a++] = metrics;
  char notice[200];
  if (r->notice_port) { /* the preempt fault's fake metadata service (preempt.c) */
    snprintf(notice, sizeof notice, "runtime.preemption_notice=http://127.0.0.1:%d/going/%s",
             r->notice_port, n->name);
    argv[a++] = "--set";
    argv[a++] = notice;
  }
  argv[a] = NULL;
  char envbuf[128];
  char *env[2] = {NULL, NULL};
  if (n->ckpt_fault[0]) {
    snprintf(envbuf, sizeof envbuf, "EA_CKPT_FAULT=%s", n->ckpt_fault);
    env[0] = envbuf;
  }
  pid_t pid;
  int rc = ea__chaos_spawn(argv, r->o.netns ? r->ns[n->slot] : NULL, log, env, &pid);
  if (rc < 0) {
    ea__chaos_say(r, "cannot start %s: %s", n->name, strerror(-rc));
    return rc;
  }
  n->pid = pid;
  n->starts++;
  n->start_ms = ea__chaos_now_ms();
  n->max_gen_seen = 0;
  n->stopped = false;
  n->expect_exit0 = n->expect_death = false;
  if (!r->t0) r->t0 = n->start_ms;
  ea__chaos_logf(r, "started %s pid %d bind %s join [%s]%s%s", n->name, (int)pid, bind, seeds,
                 env[0] ? " " : "", env[0] ? env[0] : "");
  /* Wait for its admin socket: then it is listening and we know its
   * gossip address (the next agent's seed). */
  int64_t deadline = ea__chaos_mono_ms() + START_TIMEOUT_MS;
  while (ea__chaos_mono_ms() < deadline && !ea__chaos_interrupted) {
    ea__chaos_reap(on_reap, r);
    if (!ea__chaos_node_running(n)) return -ECHILD;
    ea__chaos_status st;
    if (ea__chaos_status_query(n->sock, EA__CHAOS_STATUS_TIMEOUT_MS, &st) == 0) {
      n->st = st;
      snprintf(n->gossip, sizeof n->gossip, "%s", st.gossip);
      return 0;
    }
    ea__chaos_sleep_ms(20);
  }
  ea__chaos_say(r, "%s did not answer on %s within %d ms", n->name, n->sock, START_TIMEOUT_MS);
  return -ETIMEDOUT;
}

/* Signal an agent, and its workers too when asked (they are found before
 * the agent is signalled, while it still has them as children). */
void ea__chaos_node_signal(ea__chaos_run *r, ea__chaos_node *n, int sig, bool workers) {
  if (!ea__chaos_node_running(n)) return;
  pid_t kids[CH_MAX_WPN * 2];
  int nk = workers ? ea__chaos_children(n->pid, kids, CH_MAX_WPN * 2) : 0;
  kill(n->pid, sig);
  for (int i = 0; i < nk; i++) kill(kids[i], sig);
  ea__chaos_logf(r, "signal %d (%s) to %s pid %d%s", sig, strsignal(sig), n->name, (int)n->pid,
                 nk ? " and its workers" : "");
}

bool ea__chaos_wait_gone(ea__chaos_run *r, ea__chaos_node *n, int ms) {
  int64_t deadline = ea__chaos_mono_ms() + ms;
  while (ea__chaos_node_running(n) && ea__chaos_mono_ms() < deadline) {
    ea__chaos_reap(on_reap, r);
    if (!ea__chaos_node_running(n)) break;
    ea__chaos_sleep_ms(10);
  }
  return !ea__chaos_node_running(n);
}

void ea__chaos_stop_all(ea__chaos_run *r) {
  for (size_t i = 0; i < r->nnodes; i++) {
    ea__chaos_node *n = &r->nodes[i];
    if (!ea__chaos_node_running(n)) continue;
    n->expect_death = true;
    n->expect_exit0 = false;
    if (n->stopped) ea__chaos_node_signal(r, n, SIGCONT, true);
    ea__chaos_node_signal(r, n, SIGKILL, true);
  }
  for (size_t i = 0; i < r->nnodes; i++) ea__chaos_wait_gone(r, &r->nodes[i], 5000);
}

/* ---- polling and the continuous invariants ------------------------------------ */

static void sample(ea__chaos_node *n, const ea__chaos_status *st) {
  if (n->nsamples) {
    ea__chaos_sample *l = &n->samples[n->nsamples - 1];
    if (strcmp(l->phase, st->phase) == 0 && l->gen == st->gen && l->world == st->world &&
        l->controller == st->controller && st->t_ms - l->t_ms < 1000)
      return;
  }
  if (EA_ARRAY_RESERVE(n->samples, n->capsamples, n->nsamples + 1) != 0) return;
  ea__chaos_sample *s = &n->samples[n->nsamples++];
  s->t_ms = st->t_ms;
  snprintf(s->phase, sizeof s->phase, "%s", st->phase);
  s->gen = st->gen;
  s->world = st->world;
  s->step = st->last_step;
  s->controller = st->controller && st->has_quorum;
}

uint64_t ea__chaos_cluster_step(ea__chaos_run *r) {
  uint64_t m = 0;
  for (size_t i = 0; i < r->nnodes; i++) {
    ea__chaos_node *n = &r->nodes[i];
    if (ea__chaos_node_running(n) && !n->stopped && n->st.ok && n->st.last_step > m)
      m = n->st.last_step;
  }
  return m;
}

static void check_node(ea__chaos_run *r, ea__chaos_node *n, const ea__chaos_status *st) {
  /* Generations only grow on each agent: the one it runs (per process; a
   * restarted agent runs nothing at first) and the one it persisted (per
   * data dir, across restarts). */
  if (st->gen) {
    if (st->gen < n->max_gen_seen)
      ea__chaos_violate(r, EA__I_GEN_GROWS, "%s runs generation %llu/%04llx after %llu/%04llx",
                        n->name, (unsigned long long)(ea_rdzv_gen64_term(st->gen)),
                        (unsigned long long)((uint64_t)ea_rdzv_gen64_ctrl(st->gen)),
                        (unsigned long long)ea_rdzv_gen64_term(n->max_gen_seen),
                        (unsigned long long)(uint64_t)ea_rdzv_gen64_ctrl(n->max_gen_seen));
    if (st->gen > n->max_gen_seen) n->max_gen_seen = st->gen;
  }
  if (st->durable) {
    if (st->durable < n->max_durable)
      ea__chaos_violate(r, EA__I_GEN_GROWS,
                        "%s's persisted generation went back from %llu/%04llx to %llu/%04llx",
                        n->name, (unsigned long long)ea_rdzv_gen64_term(n->max_durable),
                        (unsigned long long)(uint64_t)ea_rdzv_gen64_ctrl(n->max_durable),
                        (unsigned long long)ea_rdzv_gen64_term(st->durable),
                        (unsigned long long)(uint64_t)ea_rdzv_gen64_ctrl(st->durable));
    if (st->durable > n->max_durable) n->max_durable = st->durable;
  }
  if (st->has_ckpt && !r->ckpt_available) {
    r->ckpt_available = true;
    ea__chaos_say(
        r, "the agents report checkpoint fields in status: checkpoint checks and faults enabled");
  }
  /* Minority side of a partition: once the partition is on, its nodes may
   * finish the step in flight and nothing more (under quorum: majority). */
  if (r->partition_since && (r->minority_mask & (1u << n->slot)) &&
      st->last_step > n->steps_at_partition + 1 && strcmp(r->cfg.distributed.quorum, "none") != 0) {
    ea__chaos_violate(
        r, EA__I_MINORITY,
        "%s, on the minority side of the partition since %.1f s, trained from step %llu to %llu "
        "(phase %s, generation %llu/%04llx, world %u)",
        n->name, (double)(st->t_ms - r->partition_since) / 1000.0,
        (unsigned long long)n->steps_at_partition, (unsigned long long)st->last_step, st->phase,
        (unsigned long long)(ea_rdzv_gen64_term(st->gen)),
        (unsigned long long)((uint64_t)ea_rdzv_gen64_ctrl(st->gen)), st->world);
    n->steps_at_partition = st->last_step; /* report each further run once */
  }
}

static void check_cluster(ea__chaos_run *r) {
  int64_t now = ea__chaos_now_ms();
  /* Two controllers that both see a quorum.  Views converge within a
   * gossip round or two, so a short overlap while a lower-id node is
   * being learned is expected (members obey only the newer generation);
   * lasting longer than the detection bound is not. */
  char names[256] = "";
  int nctrl = 0;
  size_t off = 0;
  for (size_t i = 0; i < r->nnodes; i++) {
    ea__chaos_node *n = &r->nodes[i];
    if (!ea__chaos_node_running(n) || n->stopped || !n->st.ok || now - n->st.t_ms > 1000) continue;
    if (n->st.controller && n->st.has_quorum) {
      nctrl++;
      if (off < sizeof names - 32)
        off += (size_t)snprintf(names + off, sizeof names - off, "%s%s", off ? ", " : "", n->name);
    }
  }
  int64_t grace = (int64_t)(r->detection_bound_ms ? r->detection_bound_ms : 4150) + 1000;
  if (nctrl >= 2 && strcmp(r->cfg.distributed.quorum, "none") != 0) {
    if (!r->two_ctrl_since) r->two_ctrl_since = now;
    if (now - r->two_ctrl_since > grace && r->ctrl_violation_at < r->two_ctrl_since) {
      ea__chaos_violate(r, EA__I_CONTROLLER, "%d controllers acting with quorum for %.1f s: %s",
                        nctrl, (double)(now - r->two_ctrl_since) / 1000.0, names);
      r->ctrl_violation_at = now;
    }
  } else {
    r->two_ctrl_since = 0;
  }
  /* The cluster's step never falls back by more than the one step a
   * departed node may have finished alone. */
  uint64_t cs = ea__chaos_cluster_step(r);
  if (cs + 1 < r->max_cluster_step && !any_finished(r)) {
    ea__chaos_violate(r, EA__I_PROGRESS,
                      "the highest step held by a live worker fell from %llu to %llu",
                      (unsigned long long)r->max_cluster_step, (unsigned long long)cs);
    r->max_cluster_step = cs;
  }
  if (cs > r->max_cluster_step) r->max_cluster_step = cs;
  if (r->nprog == 0 || now - r->prog[r->nprog - 1].t_ms >= 250) {
    (void)EA_ARRAY_RESERVE(r->prog, r->capprog, r->nprog + 1); /* a gap if not */
    if (r->nprog < r->capprog) {
      r->prog[r->nprog].t_ms = now;
      r->prog[r->nprog].step = cs;
      r->nprog++;
    }
  }
}

static int64_t last_ckpt_scan;

static void tick(ea__chaos_run *r) {
  ea__chaos_reap(on_reap, r);
  for (size_t i = 0; i < r->nnodes; i++) {
    ea__chaos_node *n = &r->nodes[i];
    if (!ea__chaos_node_running(n) || n->stopped) continue;
    ea__chaos_status st;
    if (ea__chaos_status_query(n->sock, EA__CHAOS_STATUS_TIMEOUT_MS, &st) == 0) {
      check_node(r, n, &st);
      n->st = st;
      if (st.gossip[0]) snprintf(n->gossip, sizeof n->gossip, "%s", st.gossip);
      if (st.detection_bound_ms > r->detection_bound_ms)
        r->detection_bound_ms = st.detection_bound_ms;
      sample(n, &st);
    } else {
      n->st.ok = false;
    }
  }
  check_cluster(r);
  ea__chaos_rsrc_tick(r);
  int64_t now = ea__chaos_mono_ms();
  if (r->ckpt_available && now - last_ckpt_scan >= 1000) {
    last_ckpt_scan = now;
    ea__chaos_ckpt_scan(r);
  }
}

/* Poll until cond holds or deadline_ms (monotonic) passes. */
bool ea__chaos_wait_until(ea__chaos_run *r, int64_t deadline_ms, ea__chaos_cond_fn cond,
                          void *ctx) {
  for (;;) {
    int64_t t = ea__chaos_mono_ms();
    tick(r);
    if (cond(r, ctx)) return true;
    if (ea__chaos_interrupted || ea__chaos_mono_ms() >= deadline_ms) return false;
    int64_t spent = ea__chaos_mono_ms() - t;
    ea__chaos_sleep_ms((int)(POLL_MS - spent > 5 ? POLL_MS - spent : 5));
  }
}

bool ea__chaos_never(ea__chaos_run *r, void *ctx) {
  (void)r;
  (void)ctx;
  return false;
}

/* ---- what "formed" means --------------------------------------------------- */

static bool all_done(ea__chaos_run *r, const ea__chaos_status *st) {
  if (!st->nworkers) return false;
  for (uint32_t k = 0; k < st->nworkers; k++)
    if (strcmp(st->w[k].state, "done") != 0 || st->w[k].step < r->target_steps) return false;
  return true;
}

/* The controller's hold of w->held_node, when it began by w->hold_from:
 * w->hold_end moves to its end.  Its length is the flap cooldown doubled for
 * each earlier hold of that node, as the rendezvous core counts them. */
static void track_hold(ea__chaos_run *r, ea__chaos_want *w) {
  int64_t base = (int64_t)r->cfg.runtime.flap_cooldown_seconds * 1000;
  if (base <= 0) base = 1;
  const int64_t cap = base > (int64_t)EA_RDZV_HOLD_CAP_MS ? base : (int64_t)EA_RDZV_HOLD_CAP_MS;
  for (int s = 1; s <= r->nslots; s++) {
    ea__chaos_node *n = ea__chaos_slot_node(r, s);
    if (!ea__chaos_node_running(n) || !n->st.ok || !n->st.controller) continue;
    for (uint32_t i = 0; i < n->st.nheld; i++) {
      if (n->st.held_left_ms[i] <= 0) continue;
      if (strcmp(w->held_node, EA__CHAOS_ANY_HELD) == 0) {
        bool expected = false;
        for (int k = 0; k < w->n && !expected; k++)
          expected = strcmp(w->names[k], n->st.held[i]) == 0;
        if (!expected) continue;
      } else if (strcmp(n->st.held[i], w->held_node) != 0) {
        continue;
      }
      int64_t d = base;
      for (uint32_t k = 1; k < n->st.held_holds[i] && d < cap; k++) d *= 2;
      if (d > cap) d = cap;
      int64_t end = n->st.t_ms + n->st.held_left_ms[i];
      if (end - d <= w->hold_from && end > w->hold_end) {
        w->hold_end = end;
        snprintf(w->held_seen, sizeof w->held_seen, "%s", n->st.held[i]);
      }
    }
  }
}

bool ea__chaos_cond_formed(ea__chaos_run *r, void *ctx) {
  ea__chaos_want *w = ctx;
  if (w->held_node) track_hold(r, w);
  uint64_t g = 0, maxstep = 0;
  bool done = true;
  int64_t now = ea__chaos_now_ms();
  for (int i = 0; i < w->n; i++) {
    ea__chaos_node *n = find_node(r, w->names[i]);
    if (!ea__chaos_node_running(n) || n->stopped || !n->st.ok || now - n->st.t_ms > 1000)
      return false;
    const ea__chaos_status *st = &n->st;
    if (strcmp(st->phase, "running") != 0) return false;
    if (st->world != (uint32_t)w->n * ea__chaos_wpn(r) || st->nnodes != (uint32_t)w->n)
      return false;
    if (i == 0) g = st->gen;
    if (st->gen != g || g == 0) return false;
    for (int k = 0; k < w->n; k++) {
      bool found = false;
      for (uint32_t j = 0; j < st->nnodes; j++)
        if (strcmp(st->nodes[j], w->names[k]) == 0) found = true;
      if (!found) return false;
    }
    if (st->last_step > maxstep) maxstep = st->last_step;
    if (!all_done(r, st)) done = false;
  }
  if (w->strictly ? g <= w->gen_after : g < w->gen_after) return false;
  if (maxstep <= w->step_after && !done) return false;
  if (w->worker_node) {
    ea__chaos_node *n = find_node(r, w->worker_node);
    if (!n || w->worker_idx >= n->st.nworkers ||
        n->st.w[w->worker_idx].restarts <= w->restarts_before)
      return false;
  }
  if (w->gone) {
    ea__chaos_node *n = find_node(r, w->gone);
    if (ea__chaos_node_running(n)) return false;
  }
  w->gen_out = g;
  w->world_out = (uint32_t)w->n * ea__chaos_wpn(r);
  w->step_out = maxstep;
  return true;
}

int ea__chaos_cmp_name(const void *a, const void *b) {
  return strcmp((const char *)a, (const char *)b);
}

void ea__chaos_want_set(ea__chaos_want *w, ea__chaos_run *r, const char *without,
                        const char *with) {
  memset(w, 0, sizeof *w);
  for (int s = 1; s <= r->o.nagents; s++) {
    ea__chaos_node *n = ea__chaos_slot_node(r, s);
    if (!n || (without && strcmp(n->name, without) == 0)) continue;
    snprintf(w->names[w->n++], CH_NAME_MAX, "%s", n->name);
  }
  if (with) snprintf(w->names[w->n++], CH_NAME_MAX, "%s", with);
  qsort(w->names, (size_t)w->n, CH_NAME_MAX, ea__chaos_cmp_name);
}

void ea__chaos_want_str(const ea__chaos_want *w, char *out, size_t cap) {
  size_t off = 0;
  out[0] = 0;
  for (int i = 0; i < w->n && off < cap - 1; i++)
    off += (size_t)snprintf(out + off, cap - off, "%s%s", i ? "," : "", w->names[i]);
}

/* Run one phase: wait for w, with the bound; fill p. */
static bool cond_formed_or_end(ea__chaos_run *r, void *ctx) {
  return ea__chaos_cond_formed(r, ctx) || any_finished(r);
}

bool ea__chaos_phase_wait(ea__chaos_run *r, ea__chaos_phase *p, ea__chaos_want *w, int64_t t_start,
                          bool expected, const char *what) {
  p->expected = expected;
  p->t_start = t_start;
  /* A node coming back may first sit out one rendezvous timeout (it was
   * part of a formation abandoned when it failed, docs/rendezvous.md), so
   * phases that take a node back get the longer bound. */
  p->bound_ms =
      (strcmp(what, "restored") == 0 ? r->bound_restore_ms : r->bound_ms) + r->bound_extra_ms;
  p->t_detect = p->t_reform = p->t_first_step = -1;
  ea__chaos_want_str(w, p->nodes, sizeof p->nodes);
  int64_t deadline = ea__chaos_mono_ms() + p->bound_ms - (ea__chaos_now_ms() - t_start);
  bool ok;
  for (;;) {
    /* The job may end meanwhile (the hang then is none: ea__chaos_hang):
     * no use waiting out the bound. */
    ok = ea__chaos_wait_until(r, deadline, cond_formed_or_end, w) && ea__chaos_cond_formed(r, w);
    if (ok || any_finished(r) || !w->held_node || !w->hold_end || ea__chaos_interrupted) break;
    /* The node was held out past the bound: the bound runs from its hold's
     * end (ea__chaos_want.held_node). */
    int64_t want = w->hold_end - t_start + r->bound_restore_ms;
    if (want <= p->bound_ms) break;
    ea__chaos_say(r, "  %s is held out until %.1f s after the heal: the bound runs from then",
                  w->held_seen, (double)(w->hold_end - t_start) / 1000.0);
    deadline += want - p->bound_ms;
    p->bound_ms = want;
  }
  if (ok) {
    p->observed = true;
    p->t_seen = ea__chaos_now_ms();
    p->gen = w->gen_out;
    p->world = w->world_out;
    ea__chaos_say(r, "  %s: world %u, generation %llu/%04llx, step %llu (%.2f s)", what,
                  w->world_out, (unsigned long long)ea_rdzv_gen64_term(w->gen_out),
                  (unsigned long long)(uint64_t)ea_rdzv_gen64_ctrl(w->gen_out),
                  (unsigned long long)w->step_out, (double)(p->t_seen - t_start) / 1000.0);
  } else if (expected && !ea__chaos_interrupted) {
    p->timed_out = true;
  }
  return ok;
}

/* A short description of what each expected node is doing, for a hang. */
void ea__chaos_cluster_state(ea__chaos_run *r, const ea__chaos_want *w, char *out, size_t cap) {
  size_t off = 0;
  out[0] = 0;
  for (int i = 0; i < w->n && off < cap - 1; i++) {
    ea__chaos_node *n = find_node(r, w->names[i]);
    if (!n) continue;
    if (!ea__chaos_node_running(n))
      off += (size_t)snprintf(out + off, cap - off, "%s%s: not running", i ? "; " : "", n->name);
    else if (!n->st.ok)
      off += (size_t)snprintf(out + off, cap - off, "%s%s: no status", i ? "; " : "", n->name);
    else
      off += (size_t)snprintf(out + off, cap - off, "%s%s: %s gen %llu world %u step %llu (%s)",
                              i ? "; " : "", n->name, n->st.phase,
                              (unsigned long long)(ea_rdzv_gen64_term(n->st.gen)), n->st.world,
                              (unsigned long long)n->st.last_step, n->st.reason);
  }
}

void ea__chaos_hang(ea__chaos_run *r, ea__chaos_episode *e, const char *phase,
                    const ea__chaos_want *w) {
  /* Interrupted (^C, or a timeout's SIGINT): every wait returns at once,
   * and that is no hang of the cluster's. */
  if (ea__chaos_interrupted) return;
  if (any_finished(r)) {
    /* The job reached train.steps and its agents left while this phase was
     * under way: nothing is left to form, so the phase is not a hang.  The
     * target_step and each_step_once invariants still judge the run. */
    ea__chaos_logf(r, "  fault #%d: the job finished during its %s phase (not a hang)",
                   (int)(e - r->eps) + 1, phase);
    return;
  }
  char st[900];
  ea__chaos_cluster_state(r, w, st, sizeof st);
  int64_t bound = strncmp(phase, "restored", 8) == 0 ? r->bound_restore_ms : r->bound_ms;
  ea__chaos_violate(r, EA__I_RECOVERY,
                    "fault #%d (%s%s%s): the %s phase did not complete within %.1f s; %s",
                    (int)(e - r->eps) + 1, ea__chaos_kind_name(e->f.kind),
                    e->victim[0] ? " of " : "", e->victim, phase, (double)bound / 1000.0, st);
}

bool ea__chaos_cond_all_running(ea__chaos_run *r, void *ctx) {
  (void)ctx;
  ea__chaos_want w;
  ea__chaos_want_set(&w, r, NULL, NULL);
  return ea__chaos_cond_formed(r, &w);
}

/* ---- the cluster as a whole ------------------------------------------------- */

static bool whole(ea__chaos_run *r, uint64_t step_after, int64_t bound_ms) {
  ea__chaos_want w;
  ea__chaos_want_set(&w, r, NULL, NULL);
  w.step_after = step_after;
  return ea__chaos_wait_until(r, ea__chaos_mono_ms() + bound_ms, ea__chaos_cond_formed, &w);
}

/* Every slot has a running agent: start (on its data dir) any that is not
 * — unless it ended with the job (a job that finished is not restarted). */
static void fill_slots(ea__chaos_run *r) {
  for (int s = 1; s <= r->o.nagents; s++) {
    ea__chaos_node *n = ea__chaos_slot_node(r, s);
    if (n && !ea__chaos_node_running(n) && !n->finished) {
      ea__chaos_say(r, "  restarting %s, which is not running", n->name);
      n->ckpt_fault[0] = 0;
      ea__chaos_node_start(r, n);
    }
  }
}

bool ea__chaos_ensure_whole(ea__chaos_run *r) {
  if (whole(r, 0, 2000)) return true;
  fill_slots(r);
  return whole(r, 0, r->bound_restore_ms);
}

ea__chaos_node *ea__chaos_slot_new(ea__chaos_run *r, int s) {
  int g = 0;
  for (size_t i = 0; i < r->nnodes; i++)
    if (r->nodes[i].slot == s && r->nodes[i].gen_of_slot >= g) g = r->nodes[i].gen_of_slot + 1;
  return ea__chaos_node_new(r, "n", s, g);
}

ea__chaos_node *ea__chaos_replace_fresh(ea__chaos_run *r, ea__chaos_node *old) {
  old->retired = true;
  return ea__chaos_slot_new(r, old->slot);
}

/* ---- the run ---------------------------------------------------------------- */

static bool cond_progress(ea__chaos_run *r, void *ctx) {
  uint64_t want_step = *(uint64_t *)ctx;
  return ea__chaos_cluster_step(r) >= want_step;
}

static bool cond_done(ea__chaos_run *r, void *ctx) {
  (void)ctx;
  for (int s = 1; s <= r->o.nagents; s++) {
    ea__chaos_node *n = ea__chaos_slot_node(r, s);
    /* Ended with the job: with its workers done, or cut off while it ended
     * (it learnt the end from LATEST; its workers never reached it). */
    if (n && n->finished) continue;
    if (!ea__chaos_node_running(n) || !n->st.ok || !all_done(r, &n->st)) return false;
  }
  return true;
}

int ea__chaos_execute(ea__chaos_run *r) {
  char err[512];
  char steps[32];
  snprintf(steps, sizeof steps, "%llu", (unsigned long long)r->target_steps);
  if (ea__chaos_set_key(r, "train.steps", steps, err, sizeof err) < 0 ||
      ea__chaos_write_job(r, err, sizeof err) < 0) {
    ea__chaos_say(r, "%s", err);
    return -EINVAL;
  }
  int64_t scale = r->cfg.distributed.scale_up_delay_ms;
  r->bound_ms = r->o.recovery_bound_ms;
  ea__chaos_say(r, "starting %d agents (%s), target %llu steps", r->o.nagents,
                r->o.netns ? "one network namespace each" : "loopback",
                (unsigned long long)r->target_steps);
  for (int s = 1; s <= r->o.nagents; s++) {
    ea__chaos_node *n = ea__chaos_node_new(r, "n", s, 0);
    if (!n || ea__chaos_node_start(r, n) < 0) {
      ea__chaos_violate(r, EA__I_RECOVERY, "agent of slot %d did not start", s);
      r->aborted = true;
      snprintf(r->abort_why, sizeof r->abort_why, "agent of slot %d did not start", s);
      return -EIO;
    }
  }
  if (!ea__chaos_wait_until(r, ea__chaos_mono_ms() + 60000, ea__chaos_cond_all_running, NULL)) {
    ea__chaos_want w;
    ea__chaos_want_set(&w, r, NULL, NULL);
    char st[900];
    ea__chaos_cluster_state(r, &w, st, sizeof st);
    ea__chaos_violate(r, EA__I_RECOVERY,
                      "the first generation of world %u did not form within 60 s: %s",
                      (unsigned)r->o.nagents * ea__chaos_wpn(r), st);
    r->aborted = true;
    snprintf(r->abort_why, sizeof r->abort_why, "the cluster never formed");
    return -ETIMEDOUT;
  }
  if (!r->bound_ms)
    r->bound_ms = (int64_t)(r->detection_bound_ms ? r->detection_bound_ms : 4150) + scale +
                  (int64_t)r->cfg.distributed.communication_timeout_seconds * 1000 + BOUND_SLACK_MS;
  r->bound_restore_ms = r->bound_ms + (int64_t)r->cfg.runtime.rendezvous_timeout_seconds * 1000;
  if (!r->ckpt_available && !r->ckpt_why[0])
    snprintf(r->ckpt_why, sizeof r->ckpt_why,
             "the agents' status has no checkpoint fields yet (the checkpoint flow is not wired "
             "into the "
             "agent): checkpoint faults and checks cannot run");
  ea__chaos_say(
      r,
      "world %u trains; recovery bound %.1f s (detection %llu ms + batching %lld ms + comm "
      "timeout %u s + %d ms), %.1f s to take a node back (+ rendezvous timeout %u s)",
      (unsigned)r->o.nagents * ea__chaos_wpn(r), (double)r->bound_ms / 1000.0,
      (unsigned long long)r->detection_bound_ms, (long long)scale,
      r->cfg.distributed.communication_timeout_seconds, BOUND_SLACK_MS,
      (double)r->bound_restore_ms / 1000.0, r->cfg.runtime.rendezvous_timeout_seconds);
  for (size_t i = 0; i < r->neps && !ea__chaos_interrupted && !r->aborted; i++) {
    ea__chaos_episode *e = &r->eps[i];
    uint64_t trigger = (uint64_t)(e->f.frac * (double)r->target_steps);
    if (ea__chaos_cluster_step(r) < trigger) {
      /* Training must keep moving towards the trigger: no progress for a
       * whole bound is itself a hang. */
      for (;;) {
        uint64_t before = ea__chaos_cluster_step(r);
        if (ea__chaos_wait_until(r, ea__chaos_mono_ms() + r->bound_ms, cond_progress, &trigger))
          break;
        if (ea__chaos_interrupted || any_finished(r)) break;
        if (ea__chaos_cluster_step(r) <= before) {
          ea__chaos_violate(r, EA__I_RECOVERY,
                            "training stood still at step %llu for %.1f s between faults",
                            (unsigned long long)before, (double)r->bound_ms / 1000.0);
          break;
        }
      }
    }
    /* The job may end during a long phase (a link's hold-out grows with
     * each one): its agents leave, and what is left of the schedule is not
     * run. */
    if (any_finished(r) || ea__chaos_cluster_step(r) >= r->target_steps) {
      for (size_t k = i; k < r->neps; k++) {
        r->eps[k].state = EA__EP_NOT_RUN;
        snprintf(r->eps[k].skip_reason, sizeof r->eps[k].skip_reason,
                 "training had already reached the target step");
      }
      break;
    }
    ea__chaos_episode_run(r, e);
  }
  if (!r->aborted && !ea__chaos_interrupted) {
    ea__chaos_say(r, "schedule done (%d faults injected); training on to step %llu", r->injected,
                  (unsigned long long)r->target_steps);
    fill_slots(r);
    uint64_t now_step = ea__chaos_cluster_step(r);
    double rate = r->calib_rate > 1 ? r->calib_rate : 100;
    int64_t limit = (int64_t)((double)(r->target_steps -
                                       (now_step < r->target_steps ? now_step : r->target_steps)) /
                              rate * 3000.0) +
                    60000;
    if (ea__chaos_wait_until(r, ea__chaos_mono_ms() + limit, cond_done, NULL)) {
      r->t_done = ea__chaos_now_ms();
      /* Every final worker reports the digest of the same final params. */
      bool same = true;
      for (int s = 1; s <= r->o.nagents; s++) {
        ea__chaos_node *n = ea__chaos_slot_node(r, s);
        for (uint32_t k = 0; n && all_done(r, &n->st) && k < n->st.nworkers; k++) {
          if (!r->final_digest_known) {
            snprintf(r->final_digest_str, sizeof r->final_digest_str, "%s", n->st.w[k].digest);
            r->final_digest = strtoull(n->st.w[k].digest, NULL, 16);
            r->final_digest_known = true;
          } else if (strcmp(r->final_digest_str, n->st.w[k].digest) != 0) {
            same = false;
          }
        }
      }
      if (!same)
        ea__chaos_violate(r, EA__I_DIGEST,
                          "the final workers report different params digests at step %llu",
                          (unsigned long long)r->target_steps);
      ea__chaos_say(r, "training reached step %llu; final params digest %s",
                    (unsigned long long)r->target_steps, r->final_digest_str);
    } else if (!ea__chaos_interrupted) {
      ea__chaos_want w;
      ea__chaos_want_set(&w, r, NULL, NULL);
      char st[900];
      ea__chaos_cluster_state(r, &w, st, sizeof st);
      ea__chaos_violate(r, EA__I_TARGET, "training did not reach step %llu within %.0f s: %s",
                        (unsigned long long)r->target_steps, limit / 1000.0, st);
    }
  }
  if (r->ckpt_available) ea__chaos_ckpt_scan(r);
  r->t_end = ea__chaos_now_ms();
  ea__chaos_stop_all(r);
  return 0;
}

void ea__chaos_teardown(ea__chaos_run *r) {
  if (r->nodes) ea__chaos_stop_all(r);
  ea__chaos_notice_stop(r);
  /* Adopted orphans (workers of agents that were SIGKILLed) are our
   * children now: end each by its pid, then reap. */
  int64_t deadline = ea__chaos_mono_ms() + 5000;
  for (;;) {
    pid_t kids[256];
    int nk = ea__chaos_children(getpid(), kids, 256);
    ea__chaos_reap(on_reap, r);
    if (nk == 0 || ea__chaos_mono_ms() >= deadline) break;
    for (int i = 0; i < nk; i++) kill(kids[i], SIGKILL);
    ea__chaos_sleep_ms(20);
  }
  ea__chaos_net_down(r);
  if (r->tmpfs_ckpt) {
    umount2(r->ckpt_dir, MNT_DETACH);
    r->tmpfs_ckpt = false;
  }
}

void ea__chaos_run_free(ea__chaos_run *r) {
  for (size_t i = 0; r->nodes && i < r->nnodes; i++) free(r->nodes[i].samples);
  free(r->nodes);
  free(r->sched);
  free(r->eps);
  free(r->viol);
  free(r->spans);
  free(r->rsrc);
  free(r->prog);
  free(r->ckpts);
  free(r->ref.ref_loss);
  if (r->hist) ea__chaos_history_free(r->hist);
  if (r->log) fclose(r->log);
  memset(r, 0, sizeof *r);
}
