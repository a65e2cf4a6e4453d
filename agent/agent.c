/* The running agent: one libuv loop that owns the gossip transport (and
 * through it the SWIM core), the control channel and the rendezvous core
 * (generations), the worker supervisor, the admin socket and the signal
 * handlers — and the bookkeeping that turns their events into what
 * operators see: log lines for every member, controller and generation
 * change, every worker failure and recovery, the remembered-peers file, the
 * persisted generation, and the `status` document.
 *
 * How the pieces are wired.  The rendezvous core (agent/rdzv.c) is pure: it
 * is told about membership (ea_rdzv_view, from the settle handler below),
 * control messages (ea_rdzv_recv, from control.c), the local workers'
 * reports (ea_rdzv_worker_*, from the supervisor's callbacks) and time
 * (ea_rdzv_tick, from one timer re-armed to ea_rdzv_next_deadline after
 * every call).  What it wants done comes back through ea_rdzv_io while it
 * runs: messages go straight to the control channel, persists to the libuv
 * thread pool, and orders to the workers as IPC messages (PREPARE, COMMIT,
 * PAUSE).  Its rule is that io callbacks never call back into it, so
 * anything that must be reported back (a worker that cannot be told, the
 * DRAINED order, a drain that began remotely) is flagged and handled by
 * core_done(), which every caller runs right after its call into the core.
 *
 * Checkpoints ride along (docs/checkpoints.md, "The live flow"): the
 * workers' staged shards go to an ea__ckpt_svc that writes them on the
 * thread pool and reports each to the controller over the control channel;
 * the elected controller alone owns an ea__ckpt_ctl that commits MANIFESTs.
 * Both only record and log from their callbacks.
 *
 * Membership changes arrive from inside the SWIM core (on_change) where
 * nothing may call back into it, so they are only logged and flagged there;
 * an idle handle started by the first change of a loop turn then re-runs
 * the election, feeds the view to the rendezvous and schedules the peers
 * file, once, before the loop sleeps (the Redis cluster bus's "do side
 * effects once per loop turn" habit: a burst of fifty updates in one
 * push-pull costs one election and at most one file write per second).
 *
 * Shutdown is a drain, then a graceful leave.  SIGTERM/SIGINT (a spot
 * reclaim, a scale-in) or `elastic-agent drain` asks the controller to
 * re-form the group without this node; when it has (the DRAINED order) or
 * after the rendezvous timeout, the workers are stopped, the transport
 * broadcasts LEFT (bounded at 1 s), every handle is closed and uv_run
 * returns because nothing is left — the loop is then closed and must report
 * no leaked handle.  A second signal skips the drain (workers are killed),
 * a third skips the leave.
 */
#include "agent.h"
#include "ckpt_svc.h"
#include "supervisor.h"

#include "ea_ckpt.h"
#include "ea_comm.h"
#include "ea_ipc.h"
#include "ea_log.h"
#include "ea_train.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

/* Peers file rewrites are rate-limited: membership can change many times a
 * second during a mass join, and the file only matters across restarts. */
#define PEERS_WRITE_INTERVAL_MS 1000
/* Remembered peers: enough to find a live one after losing many, few
 * enough that a rejoin does not open hundreds of connections at once. */
#define PEERS_MAX 64
/* One `progress` line per this long while training: a person following
 * the log sees the job move without a line per step (steps of the built-in
 * model take milliseconds; per-step lines are at debug level). */
#define PROGRESS_INTERVAL_MS 10000
/* Core calls that flagged work for core_done() are re-run at most this many
 * rounds per call: each round reports failures of workers that could not
 * be told something, and a report cannot make another worker untellable
 * more than once per worker (EA_RDZV_MAX_WPN). */
#define CORE_ROUNDS (EA_RDZV_MAX_WPN + 2)

typedef enum { PHASE_RUNNING, PHASE_DRAINING, PHASE_STOPPING, PHASE_LEAVING, PHASE_CLOSING } phase;

typedef enum {
  W_STARTING, /* spawned, no HELLO yet */
  W_IDLE,     /* said HELLO, in no generation */
  W_PREPARING,
  W_READY,
  W_TRAINING, /* committed; steps flowing */
  W_FAILED,   /* its communicator broke; keeps its state */
  W_PAUSED,
  W_DONE, /* reached train.steps */
  W_EXITED,
} wstate;

static const char *wstate_str(wstate s) {
  static const char *const n[] = {"starting", "idle",   "preparing", "ready", "training",
                                  "failed",   "paused", "done",      "exited"};
  return s <= W_EXITED ? n[s] : "?";
}

typedef struct {
  int pid;
  wstate state;
  uint64_t gen;       /* newest generation told (PREPARE/COMMIT), u64 form */
  uint64_t next_step; /* steps it has completed */
  double loss;
  bool has_loss;
  uint64_t digest;
  double step_s;
  uint32_t restarts;
  bool fail_pending; /* could not be told something: report it failed */
  char comm[EA_COMM_ADDR_MAX];
} wk_info;

/* What `status` shows about checkpoints.  Commits are known to the node
 * that was controller when they happened; every node also reads LATEST
 * (off the loop) after each shard it writes, so all of them can say which
 * checkpoint is the newest, one checkpoint late at worst. */
typedef struct {
  /* as controller: checkpoints of the whole job */
  uint64_t started, committed, failed, skipped, stale, bytes;
  bool have_last;
  uint64_t last_step, last_gen;
  double last_persist_s, last_write_s, last_commit_s, last_stall_s, last_wait_s;
  char last_error[512];
  /* this node's shards (the rest is in ea__ckpt_svc_stats) */
  double shard_write_s, shard_stall_s;
  /* shard reports: sent to the controller, delivered to our own
   * controller directly, received over the control channel, dropped (no
   * controller known, or a report for a controller we no longer are) */
  uint64_t reports_sent, reports_local, reports_in, reports_dropped, reports_bad;
  /* DIR/LATEST, read off the loop */
  char latest[EA_CKPT_NAME_MAX];
  bool latest_busy, latest_again;
  /* cold start */
  bool resume_done; /* --resume-from has been acted on: later cold starts take "latest" */
  bool loaded;
  char loaded_name[EA_CKPT_NAME_MAX];
  uint64_t loaded_step, loaded_digest;
  uint32_t loaded_fallbacks;
  double loaded_s;
  char loaded_why[EA_IPC_TEXT_MAX];
} ckpt_info;

typedef struct {
  uv_loop_t loop;
  const ea__agent_opts *o;
  ea_transport *tr;
  ea__admin *admin;
  ea__ctl *ctl;
  ea_rdzv *rdzv;
  ea__sup *sup;
  uv_signal_t sigterm, sigint;
  uv_idle_t settle; /* runs the post-change work once, right after the change */
  uv_timer_t peers_timer, rdzv_timer, drain_timer;
  bool handles_open;
  phase phase;
  int signals;
  bool members_dirty, peers_dirty, peers_busy;
  uint64_t peers_last_ms;
  /* The controller last logged (elect_update): for the log line only; who
   * the controller is, is ea_rdzv_election()'s answer. */
  bool ctrl_logged, ctrl_logged_have;
  ea_node_id ctrl_logged_id;
  ea_node_id id;
  char idhex[33];
  char sock_path[EA_PATH_MAX + 32];
  char peers_path[EA_PATH_MAX + 32];
  char gen_path[EA_PATH_MAX + 32];
  char job_path[EA_PATH_MAX + 32];
  uint64_t start_ms;
  bool joined;
  int join_failures;
  ea_meta meta; /* ours, as last given to the transport */

  /* ---- generations ---- */
  ea_comm_backend backend;
  uint32_t wpn;
  wk_info *w;      /* wpn entries (none for an observer) */
  ea_ipc_msg *ipc; /* scratch: ~50 KiB, off the stack */
  bool draining_seen, drained_order;
  bool persist_failed; /* io.persist could not even start: tell the core */
  ea_rdzv_gen persist_failed_gen;
  int persist_failed_rc;
  char drained_why[EA_RDZV_REASON_MAX];
  char reason_shape[EA_RDZV_REASON_MAX];
  struct {
    bool active;
    ea_rdzv_gen gen;
    uint64_t g64;
    uint32_t rank_base, world;
    uint64_t at_ms; /* when the workers were told */
  } prep;
  struct {
    bool active;
    ea_rdzv_gen gen;
    uint64_t g64;
    uint32_t rank_base, world, nnodes;
    bool first_step_seen;
    uint64_t commit_ms;
  } run;
  uint64_t stall_ms; /* training stopped here at this time (0: it did not) */
  char stall_why[96];
  uint64_t progress_ms, progress_step;
  double last_loss;
  bool has_loss;
  uint64_t last_formation_ms, last_stall_ms;
  uint64_t gens_committed, recoveries, worker_failures, worker_restarts;

  /* ---- checkpoints ---- */
  char ckpt_dir[EA_PATH_MAX];  /* checkpoint.dir, resolved and absolute */
  ea__ckpt_svc *ckpt_svc;      /* our workers' shards to files */
  ea__ckpt_ctl *ckpt_ctl;      /* shard reports to MANIFESTs: while we are controller */
  bool have_dims;              /* the built-in trainer: the manifest's tensor table */
  ea_model_dims dims;
  ckpt_info ck;
} agent;

typedef struct {
  uv_work_t w;
  agent *a;
  char *buf;
  size_t len;
  int rc;
} peers_job;

typedef struct {
  uv_work_t w;
  agent *a;
  ea_rdzv_gen g;
  char buf[256];
  size_t len;
  int rc;
} gen_job;

typedef struct {
  uv_work_t w;
  agent *a;
  char name[EA_CKPT_NAME_MAX];
  int rc;
} latest_job;

/* ---- detection bound ------------------------------------------------------ */

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

/* ---- helpers ---------------------------------------------------------------- */

static const char *member_name(const ea_member *m) {
  return m && m->meta.name[0] ? m->meta.name : "?";
}

static const ea_member *find_member(agent *a, const ea_node_id *id) {
  return ea_swim_find(ea_transport_swim(a->tr), id);
}

static uint64_t now_ms(agent *a) {
  return uv_now(&a->loop);
}

/* Precise milliseconds for durations that are logged (the loop's cached
 * time can be a whole callback behind). */
static uint64_t mono_ms(void) {
  return uv_hrtime() / 1000000u;
}

static void gen_str(const ea_rdzv_gen *g, char *out, size_t cap) {
  ea_rdzv_gen_str(g, out, cap);
}

static void stall(agent *a, const char *why) {
  if (a->stall_ms) return;
  a->stall_ms = mono_ms();
  snprintf(a->stall_why, sizeof a->stall_why, "%s", why);
}

static bool workers_running(const agent *a) {
  for (uint32_t k = 0; a->sup && k < a->wpn; k++)
    if (ea__sup_running(a->sup, k)) return true;
  return false;
}

/* ---- driving the rendezvous core ---------------------------------------------- */

static void on_rdzv_timer(uv_timer_t *h);
static void begin_drain(agent *a, const char *why, bool core_knows);
static void stop_and_leave(agent *a, bool kill, const char *why);
static void leave_now(agent *a);

static void rdzv_rearm(agent *a) {
  if (!a->handles_open) return;
  uint64_t d = ea_rdzv_next_deadline(a->rdzv), now = now_ms(a);
  if (d == UINT64_MAX) {
    uv_timer_stop(&a->rdzv_timer);
    return;
  }
  uv_timer_start(&a->rdzv_timer, on_rdzv_timer, d > now ? d - now : 0, 0);
}

/* Run after every call into the core: report what its io callbacks could
 * not (workers that could not be told something), act on orders that must
 * not run inside it, advertise the generation we run, re-arm the timer. */
static void core_done(agent *a) {
  if (a->phase == PHASE_CLOSING) return;
  for (int round = 0; round < CORE_ROUNDS; round++) {
    bool any = false;
    if (a->persist_failed) {
      a->persist_failed = false;
      any = true;
      ea_rdzv_persisted(a->rdzv, now_ms(a), &a->persist_failed_gen, a->persist_failed_rc);
    }
    for (uint32_t k = 0; k < a->wpn; k++) {
      if (!a->w[k].fail_pending) continue;
      a->w[k].fail_pending = false;
      any = true;
      ea_rdzv_worker_failed(a->rdzv, now_ms(a), k);
    }
    if (!any) break;
  }
  /* Advertise the generation we run (never after LEFT went out: a new
   * incarnation would announce us alive again). */
  uint64_t lg = ea_rdzv_last_gen(a->rdzv);
  if (lg != a->meta.last_gen && a->tr && a->phase < PHASE_LEAVING) {
    a->meta.last_gen = lg;
    ea_transport_set_meta(a->tr, &a->meta);
  }
  ea_rdzv_status st;
  ea_rdzv_status_get(a->rdzv, &st);
  if (st.draining && !a->draining_seen) {
    a->draining_seen = true;
    if (a->phase == PHASE_RUNNING) begin_drain(a, "asked to drain by another agent", true);
  }
  if (a->drained_order) {
    a->drained_order = false;
    if (a->phase == PHASE_RUNNING || a->phase == PHASE_DRAINING) {
      ea_log(EA_LOG_INFO, "drain", "drained: %s; stopping the workers and leaving", a->drained_why);
      stop_and_leave(a, false, "drained");
    }
  }
  rdzv_rearm(a);
}

static void on_rdzv_timer(uv_timer_t *h) {
  agent *a = h->data;
  if (a->phase == PHASE_CLOSING) return;
  ea_rdzv_tick(a->rdzv, now_ms(a));
  core_done(a);
}

/* io.send */
static void io_send(void *ctx, const ea_node_id *to, const ea_addr *control, const ea_rdzv_msg *m) {
  agent *a = ctx;
  if (a->ctl) ea__ctl_send(a->ctl, to, control, m);
}

static void gen_work(uv_work_t *w) {
  gen_job *j = (gen_job *)w;
  j->rc = ea__write_file_atomic(j->a->gen_path, j->buf, j->len, 0600);
}

static void gen_after(uv_work_t *w, int status) {
  gen_job *j = (gen_job *)w;
  agent *a = j->a;
  int rc = status < 0 ? status : j->rc;
  ea_rdzv_gen g = j->g;
  free(j);
  if (a->phase == PHASE_CLOSING) return;
  if (rc < 0)
    ea_log(EA_LOG_ERROR, "generation", "cannot persist generation %" PRIu64 " to %s: %s", g.term,
           a->gen_path, strerror(-rc));
  ea_rdzv_persisted(a->rdzv, now_ms(a), &g, rc);
  core_done(a);
}

/* io.persist: data_dir/generation on the thread pool; the core is told
 * when it is durable (never from inside this callback). */
static void io_persist(void *ctx, const ea_rdzv_gen *g) {
  agent *a = ctx;
  gen_job *j = calloc(1, sizeof *j);
  int rc = j ? ea__gen_format(g, j->buf, sizeof j->buf) : -ENOMEM;
  if (rc >= 0) {
    j->a = a;
    j->g = *g;
    j->len = (size_t)rc;
    rc = uv_queue_work(&a->loop, &j->w, gen_work, gen_after);
  }
  if (rc < 0) {
    /* Cannot even queue it: core_done() reports the failure (the core
     * retries after its back-off). */
    ea_log(EA_LOG_ERROR, "generation", "cannot schedule the write of %s: %s", a->gen_path,
           strerror(-rc));
    free(j);
    a->persist_failed = true;
    a->persist_failed_gen = *g;
    a->persist_failed_rc = rc;
  }
}

/* Log the core's "why things are as they are" at info when its wording
 * changes, at debug when only a number in it moved (countdowns). */
static void io_reason(void *ctx, const char *text) {
  agent *a = ctx;
  char shape[EA_RDZV_REASON_MAX];
  size_t k = 0;
  for (const char *p = text; *p && k + 1 < sizeof shape; p++)
    if (!isdigit((unsigned char)*p)) shape[k++] = *p;
  shape[k] = 0;
  bool same = strcmp(shape, a->reason_shape) == 0;
  memcpy(a->reason_shape, shape, k + 1);
  ea_log(same ? EA_LOG_DEBUG : EA_LOG_INFO, "rdzv", "%s", text);
}

/* ---- orders to the workers ------------------------------------------------------- */

/* A plan's NCCL unique id is copied into a COMMIT as is (order_commit). */
_Static_assert(EA_RDZV_NCCL_ID_BYTES == EA_COMM_NCCL_ID_BYTES, "NCCL unique id size");

/* Send one message to worker k.  A worker that is not running will get the
 * current order when it says HELLO; one that cannot be told (its socket
 * is full or closed) is reported failed after the core call returns. */
static void wsend(agent *a, uint32_t k, const ea_ipc_msg *m) {
  int rc = ea__sup_send(a->sup, k, m);
  if (rc == 0 || rc == -ESRCH) return;
  ea_log(EA_LOG_WARN, "worker", "worker %u: cannot send %s: %s", k, ea_ipc_type_name(m->type),
         strerror(-rc));
  a->w[k].fail_pending = true;
}

static void send_prepare(agent *a, uint32_t k) {
  ea_ipc_msg *m = a->ipc;
  ea_ipc_msg_init(m, EA_IPC_PREPARE);
  m->gen = a->prep.g64;
  /* Now, not at a boundary: the order does not say whether the old
   * communicator is still healthy (a join) or stuck on a partitioned peer
   * (a failure), and waiting out a stuck allreduce costs the op timeout.
   * For a join the core has already waited for a step boundary before
   * ordering this, so at most the step in flight is recomputed. */
  m->at_boundary = false;
  m->make_nccl_id = a->backend == EA_COMM_NCCL && a->prep.rank_base == 0 && k == 0;
  a->w[k].gen = a->prep.g64;
  if (a->w[k].state != W_STARTING && a->w[k].state != W_EXITED) a->w[k].state = W_PREPARING;
  wsend(a, k, m);
}

static void order_prepare(agent *a, const ea_rdzv_order *o) {
  char g[48];
  gen_str(&o->gen, g, sizeof g);
  a->prep.active = true;
  a->prep.gen = o->gen;
  a->prep.g64 = ea_rdzv_gen_u64(&o->gen);
  a->prep.rank_base = o->rank_base;
  a->prep.world = o->world;
  a->prep.at_ms = mono_ms();
  a->run.active = false;
  stall(a, "a new generation");
  ea_log(EA_LOG_INFO, "generation", "prepare gen=%s world=%u ranks=%u-%u", g, o->world,
         o->rank_base, o->rank_base + o->wpn - 1);
  for (uint32_t k = 0; k < a->wpn; k++) send_prepare(a, k);
}

static void order_commit(agent *a, const ea_rdzv_order *o) {
  const ea_rdzv_plan *p = o->plan;
  char g[48];
  gen_str(&p->gen, g, sizeof g);
  int me = -1;
  for (uint32_t i = 0; i < p->nnodes; i++)
    if (ea_node_id_cmp(&p->nodes[i].id, &a->id) == 0) me = (int)i;
  if (me < 0 || p->wpn != a->wpn) { /* the core checked this; be loud if not */
    ea_log(EA_LOG_ERROR, "generation", "commit gen=%s does not include this node", g);
    return;
  }
  uint64_t t = mono_ms();
  a->run.active = true;
  a->run.gen = p->gen;
  a->run.g64 = ea_rdzv_gen_u64(&p->gen);
  a->run.rank_base = (uint32_t)me * p->wpn;
  a->run.world = p->world;
  a->run.nnodes = p->nnodes;
  a->run.first_step_seen = false;
  a->run.commit_ms = t;
  a->prep.active = false;
  a->gens_committed++;
  a->last_formation_ms = a->prep.at_ms ? t - a->prep.at_ms : 0;
  a->last_stall_ms = a->stall_ms ? t - a->stall_ms : 0;

  ea_ipc_msg *m = a->ipc;
  ea_ipc_msg_init(m, EA_IPC_COMMIT);
  m->gen = a->run.g64;
  m->world = p->world;
  m->sync_root = p->has_sync ? p->sync_rank : 0;
  m->backend = a->backend;
  m->timeout_ms = a->o->cfg.distributed.communication_timeout_seconds * 1000u;
  bool ok = true;
  if (a->backend == EA_COMM_TCP) {
    if (p->world > EA_IPC_MAX_PEERS) {
      ea_log(EA_LOG_ERROR, "generation",
             "gen=%s: world %u is larger than the tcp backend's %u ranks; use nccl", g, p->world,
             EA_IPC_MAX_PEERS);
      ok = false;
    }
    for (uint32_t r = 0; ok && r < p->world; r++)
      ea_addr_str(&p->ranks[r].listen, m->peers[r], sizeof m->peers[r]);
    m->npeers = ok ? p->world : 0;
  } else {
    if (!p->has_nccl_id) {
      ea_log(EA_LOG_ERROR, "generation", "gen=%s: nccl plan without a unique id", g);
      ok = false;
    }
    m->has_nccl_id = p->has_nccl_id;
    memcpy(m->nccl_id, p->nccl_id, sizeof m->nccl_id);
  }
  /* Checkpoints: every rank stages its shard after each multiple of the
   * interval; with no live state anywhere (a cold start) the sync root
   * loads one first.  --resume-from names it for the first cold start
   * only: after training ran from it, a cold start takes the newest. */
  const ea_config *cfg = &a->o->cfg;
  m->ckpt_interval = cfg->checkpoint.save_interval_steps;
  m->ckpt_skip = m->ckpt_interval && strcmp(cfg->checkpoint.busy_policy, "skip") == 0;
  memcpy(m->ckpt_dir, a->ckpt_dir, sizeof m->ckpt_dir);
  const char *resume = NULL;
  if (!p->has_sync) {
    if (a->o->resume_from[0] && !a->ck.resume_done)
      resume = a->o->resume_from;
    else if (cfg->checkpoint.resume_from_last)
      resume = "latest";
  }
  if (resume) {
    memcpy(m->resume, resume, strlen(resume) + 1);
    m->ckpt_verify_size = strcmp(cfg->checkpoint.verify_on_resume, "size") == 0;
  }
  for (uint32_t k = 0; k < a->wpn; k++) {
    a->w[k].gen = a->run.g64;
    if (!ok) {
      a->w[k].fail_pending = true;
      continue;
    }
    m->rank = a->run.rank_base + k;
    a->w[k].state = W_TRAINING;
    wsend(a, k, m);
  }

  /* One line per generation: who, as which ranks, from which state, and
   * how long training stood still on this node. */
  char names[512];
  size_t off = 0;
  names[0] = 0;
  for (uint32_t i = 0; i < p->nnodes && off + 2 < sizeof names; i++) {
    int w = snprintf(names + off, sizeof names - off, "%s%s", i ? "," : "",
                     p->nodes[i].name[0] ? p->nodes[i].name : "?");
    if (w < 0) break;
    off += (size_t)w < sizeof names - off ? (size_t)w : sizeof names - off - 1;
  }
  char sync[64];
  if (p->has_sync)
    snprintf(sync, sizeof sync, "rank %u at step %" PRIu64, p->sync_rank, p->sync_step);
  else if (resume)
    snprintf(sync, sizeof sync, "none (no live state): resume %.30s", resume);
  else
    snprintf(sync, sizeof sync, "none (no live state)");
  ea_log(EA_LOG_INFO, "generation",
         "committed gen=%s world=%u nodes=%s ranks=%u-%u sync=%s formation_ms=%" PRIu64
         " stalled_ms=%" PRIu64 "%s%s",
         g, p->world, names, a->run.rank_base, a->run.rank_base + a->wpn - 1, sync,
         a->last_formation_ms, a->last_stall_ms, a->stall_ms ? " after=" : "",
         a->stall_ms ? a->stall_why : "");
}

static void order_pause(agent *a, const char *why) {
  ea_ipc_msg *m = a->ipc;
  ea_ipc_msg_init(m, EA_IPC_PAUSE);
  snprintf(m->reason, sizeof m->reason, "%s", why ? why : "paused");
  a->run.active = false;
  a->prep.active = false;
  stall(a, "paused");
  /* A lost quorum is worth a warning; a formation abandoned for a newer
   * one (every recovery from a crash has one) is not. */
  ea_log(why && strncmp(why, "no quorum", 9) == 0 ? EA_LOG_WARN : EA_LOG_INFO, "generation",
         "paused: %s", why ? why : "?");
  for (uint32_t k = 0; k < a->wpn; k++) wsend(a, k, m);
}

/* io.order: runs inside the core; talks to the workers only. */
static void io_order(void *ctx, const ea_rdzv_order *o) {
  agent *a = ctx;
  if (a->phase == PHASE_CLOSING) return;
  switch (o->kind) {
    case EA_RDZV_DO_PREPARE:
      if (a->sup) order_prepare(a, o);
      break;
    case EA_RDZV_DO_COMMIT:
      if (a->sup) order_commit(a, o);
      break;
    case EA_RDZV_DO_PAUSE:
      if (a->sup) order_pause(a, o->why);
      break;
    case EA_RDZV_DO_DRAINED:
      a->run.active = a->prep.active = false;
      a->drained_order = true;
      snprintf(a->drained_why, sizeof a->drained_why, "%s", o->why ? o->why : "drained");
      break;
    default:
      break;
  }
}

/* ---- checkpoints ------------------------------------------------------------------ */

/* The live flow of docs/checkpoints.md: every agent runs an ea__ckpt_svc
 * that turns its workers' staged shards into files off the loop and reports
 * each to the controller; the controller (only while elected) runs an
 * ea__ckpt_ctl that commits a MANIFEST once all W shards of a step are
 * durable.  Reports travel on the control channel next to the rendezvous
 * messages (ckpt_wire.c's codec, told apart by its type byte). */

/* One log line per event.  Alerts — a shard that could not be written, a
 * checkpoint given up for a reason operators must hear about, a commit the
 * generation fence refused — go out at error level under the event name
 * "alert", which is what log-based alerting keys on.  Per-shard lines are
 * debug: a job of W ranks would otherwise log W lines per checkpoint. */
static void ckpt_log_event(const ea__ckpt_event *e) {
  char line[1024];
  ea__ckpt_event_format(e, line, sizeof line);
  if (e->alert) {
    ea_log(EA_LOG_ERROR, "alert", "checkpoint %s", line);
    return;
  }
  ea_log_level lv = EA_LOG_INFO;
  if (e->kind == EA__CKPT_EV_SHARD_WRITTEN || e->kind == EA__CKPT_EV_SHARD_DURABLE)
    lv = EA_LOG_DEBUG;
  else if (e->kind == EA__CKPT_EV_FAILED)
    lv = EA_LOG_WARN; /* given up without an alert: a rank skipped it (busy policy) */
  ea_log(lv, "ckpt", "%s", line);
}

static void latest_work(uv_work_t *w) {
  latest_job *j = (latest_job *)w;
  j->rc = ea_ckpt_read_latest(j->a->ckpt_dir, j->name, sizeof j->name);
}

static void ckpt_read_latest(agent *a);

static void latest_after(uv_work_t *w, int status) {
  latest_job *j = (latest_job *)w;
  agent *a = j->a;
  a->ck.latest_busy = false;
  if (status == 0 && j->rc == 0) memcpy(a->ck.latest, j->name, sizeof a->ck.latest);
  free(j);
  if (a->ck.latest_again && a->phase < PHASE_CLOSING) ckpt_read_latest(a);
}

/* Re-read DIR/LATEST on the thread pool (a shared file system can take
 * milliseconds to answer; the loop carries gossip).  At most one read is
 * out; a request meanwhile runs one more afterwards. */
static void ckpt_read_latest(agent *a) {
  if (a->ck.latest_busy) {
    a->ck.latest_again = true;
    return;
  }
  a->ck.latest_again = false;
  latest_job *j = calloc(1, sizeof *j);
  if (!j) return;
  j->a = a;
  if (uv_queue_work(&a->loop, &j->w, latest_work, latest_after) < 0) {
    free(j);
    return;
  }
  a->ck.latest_busy = true;
}

/* svc.reply: CKPT_DONE to the worker (a restarted worker ignores one for
 * a shard it never staged). */
static void ckpt_reply(void *ctx, uint32_t local, const ea_ipc_msg *m) {
  agent *a = ctx;
  if (!a->sup) return;
  int rc = ea__sup_send(a->sup, local, m);
  if (rc && rc != -ESRCH)
    ea_log(EA_LOG_WARN, "ckpt", "worker %u: cannot send ckpt_done for step %" PRIu64 ": %s", local,
           m->step, strerror(-rc));
}

static void ckpt_report_dropped(agent *a, const ea__ckpt_msg *m, const char *why) {
  a->ck.reports_dropped++;
  ea_log(EA_LOG_WARN, "ckpt",
         "report of shard %u of step-%" PRIu64 ".gen-%" PRIu64 " dropped: %s (that checkpoint "
         "cannot complete; a newer one supersedes it)",
         m->rank, m->step, m->gen, why);
}

/* svc.report: to the controller — ours directly, another over the control
 * channel.  Best effort like every control message: a lost report leaves
 * its checkpoint incomplete until a newer one commits. */
static void ckpt_report(void *ctx, const ea__ckpt_msg *m) {
  agent *a = ctx;
  if (a->phase >= PHASE_LEAVING || !a->tr) return;
  const ea_election *el = ea_rdzv_election(a->rdzv);
  if (!el || !el->have) {
    ckpt_report_dropped(a, m, "no controller");
    return;
  }
  if (ea_node_id_cmp(&el->controller, &a->id) == 0) {
    if (!a->ckpt_ctl) {
      ckpt_report_dropped(a, m, "this node is controller but cannot commit");
      return;
    }
    a->ck.reports_local++;
    ea__ckpt_ctl_recv(a->ckpt_ctl, m);
    return;
  }
  const ea_member *c = find_member(a, &el->controller);
  uint8_t buf[EA__CKPT_WIRE_MAX];
  size_t len = 0;
  int rc = c && a->ctl ? ea__ckpt_encode(m, buf, sizeof buf, &len) : -ENOENT;
  if (rc) {
    ckpt_report_dropped(a, m, rc == -ENOENT ? "the controller is not in the member table"
                                            : "it does not encode");
    return;
  }
  ea__ctl_send_bytes(a->ctl, &c->id, &c->meta.control, buf, len);
  a->ck.reports_sent++;
}

/* svc.event: this node's shards. */
static void ckpt_svc_event(void *ctx, const ea__ckpt_event *e) {
  agent *a = ctx;
  if (e->kind == EA__CKPT_EV_SHARD_WRITTEN) {
    a->ck.shard_write_s = e->seconds;
    a->ck.shard_stall_s = e->stall_seconds;
    ckpt_read_latest(a);
  }
  ckpt_log_event(e);
}

/* ctl.event: checkpoints of the job, while we are controller.  May run
 * from inside ea__ckpt_ctl_recv: records and logs only. */
static void ckpt_ctl_event(void *ctx, const ea__ckpt_event *e) {
  agent *a = ctx;
  ckpt_info *k = &a->ck;
  switch (e->kind) {
    case EA__CKPT_EV_STARTED:
      k->started++;
      break;
    case EA__CKPT_EV_COMMITTED:
      k->committed++;
      k->bytes += e->bytes;
      k->have_last = true;
      k->last_step = e->step;
      k->last_gen = e->gen;
      k->last_persist_s = e->seconds;
      k->last_write_s = e->write_seconds;
      k->last_commit_s = e->commit_seconds;
      k->last_stall_s = e->stall_seconds;
      k->last_wait_s = e->wait_seconds;
      if (e->latest_moved) memcpy(k->latest, e->name, sizeof k->latest);
      break;
    case EA__CKPT_EV_FAILED:
    case EA__CKPT_EV_STALE:
      /* A rank that skipped (busy policy) reports EAGAIN, with no alert. */
      if (e->kind == EA__CKPT_EV_STALE)
        k->stale++;
      else if (!e->alert && e->error == -EAGAIN)
        k->skipped++;
      else
        k->failed++;
      if (e->alert) snprintf(k->last_error, sizeof k->last_error, "%s: %.440s", e->name, e->why);
      break;
    default:
      break;
  }
  ckpt_log_event(e);
}

/* Own an ea__ckpt_ctl exactly while the election names us.  A new
 * controller starts with nothing collected: checkpoints whose reports went
 * to the old one are given up (a newer one supersedes them, retention
 * removes their files). */
static void ckpt_ctl_update(agent *a) {
  const ea_election *el = ea_rdzv_election(a->rdzv);
  bool want = a->phase < PHASE_LEAVING && el && el->have &&
              ea_node_id_cmp(&el->controller, &a->id) == 0;
  if (want && !a->ckpt_ctl) {
    ea__ckpt_ctl_opts o = {.dir = a->ckpt_dir,
                           .keep_last = a->o->cfg.checkpoint.keep_last,
                           .config_hash = ea_config_hash(&a->o->cfg),
                           .dims = a->have_dims ? &a->dims : NULL};
    ea__ckpt_ctl_cbs cb = {.event = ckpt_ctl_event};
    int rc = ea__ckpt_ctl_new(&a->loop, &o, &cb, a, &a->ckpt_ctl);
    if (rc)
      ea_log(EA_LOG_ERROR, "ckpt", "cannot start committing checkpoints in %s: %s", a->ckpt_dir,
             strerror(-rc));
    else
      ea_log(EA_LOG_INFO, "ckpt", "controller: this node commits checkpoints in %s (keep_last %u)",
             a->ckpt_dir, a->o->cfg.checkpoint.keep_last);
  } else if (!want && a->ckpt_ctl) {
    ea__ckpt_ctl_close(a->ckpt_ctl, NULL, NULL);
    a->ckpt_ctl = NULL;
    if (a->phase < PHASE_LEAVING)
      ea_log(EA_LOG_INFO, "ckpt", "no longer the controller: no longer committing checkpoints");
  }
}

/* Control-channel frames of the checkpoint codec (the frame hook of
 * ea__ctl): a report for the controller. */
static bool on_ctl_frame(void *ctx, const uint8_t *plain, size_t len) {
  agent *a = ctx;
  if (!ea__ckpt_wire_is(plain, len)) return false;
  ea__ckpt_msg m;
  const char *why = "?";
  if (ea__ckpt_decode(plain, len, &m, &why) != 0) {
    a->ck.reports_bad++;
    ea_log(EA_LOG_WARN, "ckpt", "malformed checkpoint report dropped: %s", why);
    return true;
  }
  if (a->phase >= PHASE_LEAVING) return true;
  if (!a->ckpt_ctl) {
    /* Sent to us as controller, and we are not (any more). */
    a->ck.reports_dropped++;
    ea_log(EA_LOG_DEBUG, "ckpt",
           "report of shard %u of step-%" PRIu64 ".gen-%" PRIu64 " ignored: not the controller",
           m.rank, m.step, m.gen);
    return true;
  }
  a->ck.reports_in++;
  ea__ckpt_ctl_recv(a->ckpt_ctl, &m);
  return true;
}

/* A worker staged or skipped a checkpoint.  One the service cannot take is
 * still answered, so the worker's staging buffer is free again. */
static void ckpt_from_worker(agent *a, uint32_t k, const ea_ipc_msg *m) {
  int rc = a->ckpt_svc ? ea__ckpt_svc_on_worker(a->ckpt_svc, k, m) : -ESHUTDOWN;
  if (rc == 0) return;
  ea_log(EA_LOG_WARN, "ckpt", "worker %u: checkpoint of step %" PRIu64 " not taken: %s", k, m->step,
         strerror(-rc));
  if ((int)m->type != EA_IPC_CKPT_STAGED || !a->sup) return;
  ea_ipc_msg *d = a->ipc;
  ea_ipc_msg_init(d, EA_IPC_CKPT_DONE);
  d->gen = m->gen;
  d->step = m->step;
  d->status = rc;
  snprintf(d->message, sizeof d->message, "the agent cannot write it: %s", strerror(-rc));
  ea__sup_send(a->sup, k, d);
}

/* The sync root's worker loaded a checkpoint (a cold start). */
static void ckpt_loaded(agent *a, uint32_t k, const ea_ipc_msg *m) {
  ckpt_info *c = &a->ck;
  c->loaded = true;
  c->resume_done = true;
  snprintf(c->loaded_name, sizeof c->loaded_name, "%.*s", (int)sizeof c->loaded_name - 1, m->name);
  c->loaded_step = m->step;
  c->loaded_digest = m->digest;
  c->loaded_fallbacks = m->fallbacks;
  c->loaded_s = m->seconds;
  snprintf(c->loaded_why, sizeof c->loaded_why, "%s", m->message);
  ea_log(EA_LOG_INFO, "ckpt",
         "loaded %s worker=%u gen=%" PRIu64 " step=%" PRIu64 " digest=%016" PRIx64
         " fallbacks=%u seconds=%.3f",
         c->loaded_name, k, m->gen, m->step, m->digest, m->fallbacks, m->seconds);
  if (m->fallbacks)
    ea_log(EA_LOG_WARN, "alert",
           "checkpoint resume passed over %u newer checkpoint%s that did not verify and loaded "
           "%s; first reason: %s",
           m->fallbacks, m->fallbacks == 1 ? "" : "s", c->loaded_name, m->message);
}

static int ckpt_start(agent *a, char *err, size_t errlen) {
  ea__ckpt_svc_opts o = {.dir = a->ckpt_dir, .io_flags = 0, .self = a->id};
  ea__ckpt_svc_cbs cb = {.reply = ckpt_reply, .report = ckpt_report, .event = ckpt_svc_event};
  int rc = ea__ckpt_svc_new(&a->loop, &o, &cb, a, &a->ckpt_svc);
  if (rc) snprintf(err, errlen, "checkpoint service for %s: %s", a->ckpt_dir, strerror(-rc));
  return rc;
}

/* ---- what the workers say ---------------------------------------------------------- */

static void log_step(agent *a, uint32_t k, const ea_ipc_msg *m) {
  if (ea_log_enabled(EA_LOG_DEBUG))
    ea_log(EA_LOG_DEBUG, "step",
           "worker=%u gen=%" PRIu64 " rank=%u world=%u step=%" PRIu64
           " loss=%.6f digest=%016" PRIx64 " ms=%.2f",
           k, m->gen, a->run.rank_base + k, a->run.world, m->step, m->loss, m->digest,
           m->seconds * 1e3);
  if (!a->run.first_step_seen && a->run.active && m->gen == a->run.g64) {
    a->run.first_step_seen = true;
    uint64_t t = mono_ms();
    char g[48];
    gen_str(&a->run.gen, g, sizeof g);
    if (a->gens_committed == 1) {
      ea_log(EA_LOG_INFO, "recovery", "training started gen=%s world=%u step=%" PRIu64, g,
             a->run.world, m->step);
    } else if (a->stall_ms) {
      a->recoveries++;
      ea_log(EA_LOG_INFO, "recovery",
             "training again gen=%s world=%u step=%" PRIu64 " after=%s stalled_ms=%" PRIu64
             " commit_to_step_ms=%" PRIu64,
             g, a->run.world, m->step, a->stall_why, t - a->stall_ms, t - a->run.commit_ms);
    } else {
      ea_log(EA_LOG_INFO, "recovery", "training gen=%s world=%u step=%" PRIu64, g, a->run.world,
             m->step);
    }
    a->stall_ms = 0;
  }
  uint64_t now = now_ms(a);
  if (k == 0 && now - a->progress_ms >= PROGRESS_INTERVAL_MS) {
    double rate =
        a->progress_ms && m->step > a->progress_step
            ? (double)(m->step - a->progress_step) * 1000.0 / (double)(now - a->progress_ms)
            : 0.0;
    ea_log(EA_LOG_INFO, "progress",
           "gen=%" PRIu64 " world=%u step=%" PRIu64 " loss=%.4f steps_per_s=%.1f",
           ea_rdzv_gen64_term(m->gen),
           a->run.world, m->step, m->loss, rate);
    a->progress_ms = now;
    a->progress_step = m->step;
  }
}

static void on_worker_msg(void *ctx, uint32_t k, const ea_ipc_msg *m) {
  agent *a = ctx;
  if (a->phase == PHASE_CLOSING || k >= a->wpn) return;
  wk_info *w = &a->w[k];
  uint64_t now = now_ms(a);
  /* The checkpoint messages sit outside the enum (ea_ipc.h says why). */
  if ((int)m->type == EA_IPC_CKPT_STAGED || (int)m->type == EA_IPC_CKPT_SKIPPED) {
    ckpt_from_worker(a, k, m);
    return;
  }
  if ((int)m->type == EA_IPC_CKPT_LOADED) {
    ckpt_loaded(a, k, m);
    return;
  }
  switch (m->type) {
    case EA_IPC_HELLO:
      w->pid = (int)m->pid;
      w->state = W_IDLE;
      w->next_step = m->next_step;
      w->digest = m->digest;
      snprintf(w->comm, sizeof w->comm, "%s", m->comm_addr);
      ea_log(EA_LOG_INFO, "worker", "worker %u hello pid=%" PRIu64 " comm=%s step=%" PRIu64, k,
             m->pid, m->comm_addr, m->next_step);
      /* Spawned while a generation forms: the order may have gone out
       * before it could read (then it is queued in its socket already). */
      if (a->prep.active && w->gen != a->prep.g64 && a->phase <= PHASE_DRAINING) send_prepare(a, k);
      break;
    case EA_IPC_READY: {
      w->next_step = m->next_step;
      w->digest = m->digest;
      if (!a->prep.active || m->gen != a->prep.g64) {
        ea_log(EA_LOG_DEBUG, "worker", "worker %u ready for gen %" PRIu64 ": not the one prepared",
               k, m->gen);
        break;
      }
      ea_addr la;
      if (ea_addr_parse(m->comm_addr, 0, &la) < 0 || la.port == 0) {
        ea_log(EA_LOG_ERROR, "worker",
               "worker %u: comm address '%s' is not a numeric ip:port (set EA_COMM_BIND)", k,
               m->comm_addr);
        w->state = W_FAILED;
        ea_rdzv_worker_failed(a->rdzv, now, k);
        core_done(a);
        break;
      }
      w->state = W_READY;
      ea_log(EA_LOG_DEBUG, "worker",
             "worker %u ready gen=%" PRIu64 " step=%" PRIu64 " digest=%016" PRIx64, k, m->gen,
             m->next_step, m->digest);
      ea_rdzv_worker_ready(a->rdzv, now, k, &a->prep.gen, &la, m->next_step,
                           m->has_nccl_id ? m->nccl_id : NULL);
      core_done(a);
      break;
    }
    case EA_IPC_STEP:
      a->ck.resume_done = true; /* training runs: a --resume-from has been acted on */
      w->next_step = m->step + 1;
      w->loss = m->loss;
      w->has_loss = true;
      w->digest = m->digest;
      w->step_s = m->seconds;
      if (w->state != W_PREPARING && w->state != W_READY) w->state = W_TRAINING;
      a->last_loss = m->loss;
      a->has_loss = true;
      log_step(a, k, m);
      ea_rdzv_worker_step(a->rdzv, now, k, m->step + 1);
      core_done(a);
      break;
    case EA_IPC_FAILED:
      w->next_step = m->next_step;
      if (m->gen != w->gen) {
        /* About a communicator we already told it to abandon. */
        ea_log(EA_LOG_INFO, "worker", "worker %u: gen %" PRIu64 " ended: %s (superseded)", k,
               m->gen, m->message);
        break;
      }
      w->state = W_FAILED;
      a->worker_failures++;
      stall(a, "a worker's communicator failed");
      ea_log(EA_LOG_WARN, "worker", "worker %u failed gen=%" PRIu64 " step=%" PRIu64 ": %s", k,
             m->gen, m->next_step, m->message);
      ea_rdzv_worker_failed(a->rdzv, now, k);
      core_done(a);
      break;
    case EA_IPC_ABORTED:
      w->state = W_PAUSED;
      w->next_step = m->next_step;
      break;
    case EA_IPC_DONE:
      w->next_step = m->next_step;
      w->digest = m->digest;
      if (w->state != W_DONE)
        ea_log(EA_LOG_INFO, "train", "worker %u finished: step=%" PRIu64 " digest=%016" PRIx64, k,
               m->next_step, m->digest);
      w->state = W_DONE;
      break;
    case EA_IPC_EXITING:
      ea_log(m->code ? EA_LOG_WARN : EA_LOG_INFO, "worker", "worker %u exiting code=%d: %s", k,
             m->code, m->reason);
      break;
    default:
      break;
  }
}

static void on_worker_exit(void *ctx, uint32_t k, int64_t status, int sig) {
  agent *a = ctx;
  if (k >= a->wpn) return;
  wk_info *w = &a->w[k];
  w->state = W_EXITED;
  w->pid = 0;
  w->gen = 0; /* its successor has been told nothing */
  if (a->phase >= PHASE_STOPPING) {
    if (a->phase == PHASE_STOPPING && !workers_running(a)) {
      ea_log(EA_LOG_INFO, "leave", "workers stopped; leaving the cluster");
      leave_now(a);
    }
    return;
  }
  a->worker_failures++;
  stall(a, "a worker exited");
  ea_log(EA_LOG_WARN, "worker", "worker %u failure: exited status=%" PRId64 " signal=%d", k, status,
         sig);
  ea_rdzv_worker_failed(a->rdzv, now_ms(a), k);
  core_done(a);
  if (a->phase >= PHASE_STOPPING) return; /* the report drained us */
  uint32_t max = a->o->cfg.runtime.failure_retry_times;
  if (w->restarts >= max) {
    ea_log(EA_LOG_ERROR, "worker",
           "worker %u failed %u time%s after %u restart%s (runtime.failure_retry_times): draining "
           "this node",
           k, w->restarts + 1, w->restarts ? "s" : "", w->restarts, w->restarts == 1 ? "" : "s");
    begin_drain(a, "a worker kept failing", false);
    return;
  }
  w->restarts++;
  a->worker_restarts++;
  w->state = W_STARTING;
  int rc = ea__sup_start(a->sup, k);
  ea_log(rc ? EA_LOG_ERROR : EA_LOG_INFO, "worker", "worker %u restart %u of %u%s%s", k,
         w->restarts, max, rc ? ": " : "", rc ? strerror(-rc) : "");
  if (rc) {
    w->state = W_EXITED;
    begin_drain(a, "a worker cannot be restarted", false);
  }
}

/* ---- drain, stop, leave, close ------------------------------------------------------ */

static void shutdown_all(agent *a) {
  if (a->phase == PHASE_CLOSING) return;
  a->phase = PHASE_CLOSING;
  if (a->admin) ea__admin_close(a->admin, NULL, NULL);
  a->admin = NULL;
  if (a->ctl) ea__ctl_close(a->ctl, NULL, NULL);
  a->ctl = NULL;
  /* A shard write in flight stops at its next chunk and removes its file;
   * a commit in flight is finished (never cut between its renames). */
  if (a->ckpt_svc) ea__ckpt_svc_close(a->ckpt_svc, NULL, NULL);
  a->ckpt_svc = NULL;
  if (a->ckpt_ctl) ea__ckpt_ctl_close(a->ckpt_ctl, NULL, NULL);
  a->ckpt_ctl = NULL;
  if (a->sup) ea__sup_free(a->sup, NULL, NULL); /* kills what still runs */
  a->sup = NULL;
  if (a->tr) ea_transport_close(a->tr, NULL, NULL);
  a->tr = NULL;
  if (a->handles_open) {
    a->handles_open = false;
    uv_close((uv_handle_t *)&a->sigterm, NULL);
    uv_close((uv_handle_t *)&a->sigint, NULL);
    uv_close((uv_handle_t *)&a->settle, NULL);
    uv_close((uv_handle_t *)&a->peers_timer, NULL);
    uv_close((uv_handle_t *)&a->rdzv_timer, NULL);
    uv_close((uv_handle_t *)&a->drain_timer, NULL);
  }
}

static void left_done(void *ctx) {
  agent *a = ctx;
  ea_log(EA_LOG_INFO, "leave", "left the cluster; shutting down");
  shutdown_all(a);
}

static void leave_now(agent *a) {
  if (a->phase >= PHASE_LEAVING) return;
  a->phase = PHASE_LEAVING;
  if (a->handles_open) uv_timer_stop(&a->drain_timer);
  if (a->tr)
    ea_transport_leave(a->tr, left_done, a);
  else
    shutdown_all(a);
}

/* Stop the workers (STOP, or SIGKILL when kill), then leave once they have
 * all exited (on_worker_exit). */
static void stop_and_leave(agent *a, bool kill, const char *why) {
  if (a->phase >= PHASE_STOPPING) return;
  a->phase = PHASE_STOPPING;
  if (a->handles_open) uv_timer_stop(&a->drain_timer);
  if (!workers_running(a)) {
    leave_now(a);
    return;
  }
  ea_log(EA_LOG_INFO, "leave", "%s the workers (%s)", kill ? "killing" : "stopping", why);
  for (uint32_t k = 0; k < a->wpn; k++) {
    if (kill)
      ea__sup_kill(a->sup, k);
    else
      ea__sup_stop(a->sup, k);
  }
}

static void on_drain_timeout(uv_timer_t *h) {
  agent *a = h->data;
  if (a->phase != PHASE_DRAINING) return;
  ea_log(EA_LOG_WARN, "drain",
         "the group did not re-form without this node within %u s "
         "(runtime.rendezvous_timeout_seconds); leaving anyway",
         a->o->cfg.runtime.rendezvous_timeout_seconds);
  stop_and_leave(a, false, "drain deadline");
}

/* Alive members other than us that could train (not observers). */
static uint32_t others_alive(agent *a) {
  const ea_member *ms;
  size_t n = ea_swim_members(ea_transport_swim(a->tr), &ms);
  uint32_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (ms[i].state == EA_STATE_ALIVE && ea_node_id_cmp(&ms[i].id, &a->id) != 0 &&
        strcmp(ms[i].meta.role, "observer") != 0)
      k++;
  return k;
}

/* Drain this node: the controller re-forms the group without it (the step
 * in flight is the only work lost), then DRAINED stops the workers and we
 * leave.  core_knows: the core already drains (a DRAIN message, or it was
 * told by the caller). */
static void begin_drain(agent *a, const char *why, bool core_knows) {
  if (a->phase != PHASE_RUNNING) return;
  a->phase = PHASE_DRAINING;
  a->draining_seen = true;
  ea_rdzv_status st;
  ea_rdzv_status_get(a->rdzv, &st);
  bool in_gen =
      st.phase == EA_RDZV_RUNNING || st.phase == EA_RDZV_FAILED || st.phase == EA_RDZV_PREPARED;
  uint32_t others = a->tr ? others_alive(a) : 0, minn = a->o->cfg.compute.min_nodes;
  if (!a->sup || (in_gen && others < minn)) {
    if (a->sup)
      ea_log(EA_LOG_INFO, "drain",
             "%s: no generation can form without this node (%u other node%s alive, min_nodes "
             "%u): stopping now",
             why, others, others == 1 ? "" : "s", minn);
    stop_and_leave(a, false, why);
    return;
  }
  ea_log(EA_LOG_INFO, "drain",
         "%s: asking the controller to re-form the group without this node (deadline %u s)", why,
         a->o->cfg.runtime.rendezvous_timeout_seconds);
  uv_timer_start(&a->drain_timer, on_drain_timeout,
                 (uint64_t)a->o->cfg.runtime.rendezvous_timeout_seconds * 1000u, 0);
  if (!core_knows) {
    ea_rdzv_drain(a->rdzv, now_ms(a), NULL);
    core_done(a);
  }
}

static void on_signal(uv_signal_t *h, int signum) {
  agent *a = h->data;
  const char *sig = signum == SIGTERM ? "SIGTERM" : "SIGINT";
  switch (a->phase) {
    case PHASE_RUNNING:
      ea_log(EA_LOG_INFO, "leave", "received %s: draining this node, then leaving the cluster",
             sig);
      begin_drain(a, sig, false);
      break;
    case PHASE_DRAINING:
      ea_log(EA_LOG_WARN, "leave", "second signal: not waiting for the drain");
      stop_and_leave(a, true, "second signal");
      break;
    case PHASE_STOPPING:
      ea_log(EA_LOG_WARN, "leave", "second signal: killing the workers");
      for (uint32_t k = 0; k < a->wpn; k++) ea__sup_kill(a->sup, k);
      break;
    default:
      ea_log(EA_LOG_WARN, "leave", "another signal: exiting without waiting for the leave");
      shutdown_all(a);
      break;
  }
}

/* ---- membership events ---------------------------------------------------------- */

static void on_settle(uv_idle_t *h);

/* Called from inside the core: log and flag only. */
static void on_change(void *ctx, const ea_member *m, uint8_t old_state) {
  agent *a = ctx;
  char hex[33], addr[64];
  ea_node_id_hex(&m->id, hex);
  ea_addr_str(&m->meta.gossip, addr, sizeof addr);
  bool self = ea_node_id_cmp(&m->id, &a->id) == 0;
  /* A member re-announced alive with new metadata (every agent does when
   * it runs a new generation): not news for the log. */
  bool quiet = old_state == m->state && m->state == EA_STATE_ALIVE;
  ea_log(quiet                       ? EA_LOG_DEBUG
         : m->state == EA_STATE_DEAD ? EA_LOG_WARN
                                     : EA_LOG_INFO,
         "member", "name=%s id=%.8s addr=%s state=%s->%s incarnation=%" PRIu32 "%s", member_name(m),
         hex, addr, old_state == 0xff ? "new" : ea_member_state_str(old_state),
         ea_member_state_str(m->state), m->incarnation, self ? " (self)" : "");
  a->members_dirty = true;
  /* An active idle handle makes the next poll non-blocking, so the
   * election and the peers file follow within this loop turn. */
  if (a->handles_open) uv_idle_start(&a->settle, on_settle);
}

static void on_join(void *ctx, int ok, const char *via) {
  agent *a = ctx;
  (void)via; /* the transport logged the details */
  if (ok)
    a->joined = true;
  else
    a->join_failures++;
}

/* The controller changed?  Own the checkpoint committer accordingly and
 * log the change.  Run after ea_rdzv_view() has taken the new view.
 *
 * One election, computed by the rendezvous core (ea_rdzv_election), answers
 * every "who is the controller" question here: where shard reports go, who
 * owns the ea__ckpt_ctl that commits MANIFESTs, what `status` and the log
 * name.  The agent used to elect a second time itself, without the quorum
 * rule; it used only have/controller/eligible/reason, and ea_elect() picks
 * have/controller/eligible from the view alone (the quorum argument only
 * sets has_quorum and the reason's wording), so the core's answer names the
 * same member at the same moments: the agent hands the core the view in
 * the same on_settle turn it used to elect in, and the core re-elects
 * before returning.  Three cases to keep in mind:
 *   - before the first view the core has no answer (NULL): "no election
 *     yet", no controller, reports dropped — as before the first election;
 *   - without a quorum the core still names the controller (have is true,
 *     has_quorum false): it stays the checkpoint controller and the target
 *     of reports exactly as before; a minority side's workers are paused,
 *     so there are few reports, and the generation fence of ea_ckpt_commit
 *     refuses a stale commit anyway;
 *   - under quorum: none, or before any generation formed, has_quorum is
 *     true and the reason carries no count, as before.
 * The one visible difference: the reason (status controller.reason and
 * this log line) now carries the quorum count once a generation has
 * formed ("…; quorum 2 of 3", "no quorum: 1 of 3; …"). */
static void elect_update(agent *a) {
  const ea_election *e = ea_rdzv_election(a->rdzv);
  if (!e) return;
  bool changed = !a->ctrl_logged || e->have != a->ctrl_logged_have ||
                 (e->have && ea_node_id_cmp(&e->controller, &a->ctrl_logged_id) != 0);
  a->ctrl_logged = true;
  a->ctrl_logged_have = e->have;
  a->ctrl_logged_id = e->controller;
  ckpt_ctl_update(a);
  if (!changed) return;
  if (e->have) {
    char hex[33];
    ea_node_id_hex(&e->controller, hex);
    const ea_member *c = find_member(a, &e->controller);
    ea_log(EA_LOG_INFO, "election", "controller=%s id=%s%s reason=\"%s\"", member_name(c), hex,
           ea_node_id_cmp(&e->controller, &a->id) == 0 ? " (self)" : "", e->reason);
  } else {
    ea_log(EA_LOG_WARN, "election", "no controller reason=\"%s\"", e->reason);
  }
}

/* A control message from another agent. */
static void on_control(void *ctx, const ea_rdzv_msg *m) {
  agent *a = ctx;
  if (a->phase >= PHASE_LEAVING || !a->rdzv) return;
  ea_rdzv_recv(a->rdzv, now_ms(a), m);
  core_done(a);
}

/* ---- remembered peers ------------------------------------------------------------- */

static void peers_schedule(agent *a);

static void peers_work(uv_work_t *w) {
  peers_job *j = (peers_job *)w;
  j->rc = ea__write_file_atomic(j->a->peers_path, j->buf, j->len, 0600);
}

static void peers_after(uv_work_t *w, int status) {
  peers_job *j = (peers_job *)w;
  agent *a = j->a;
  if (status == 0 && j->rc < 0)
    ea_log(EA_LOG_WARN, "peers", "cannot write %s: %s", a->peers_path, strerror(-j->rc));
  free(j->buf);
  free(j);
  a->peers_busy = false;
  a->peers_last_ms = uv_now(&a->loop);
  if (a->peers_dirty && a->phase <= PHASE_DRAINING) peers_schedule(a);
}

static void peers_write_now(agent *a) {
  a->peers_dirty = false;
  const ea_member *ms;
  size_t n = ea_swim_members(ea_transport_swim(a->tr), &ms);
  ea__sb b = {0};
  ea__sb_puts(&b,
              "# elastic-agent: peers last seen alive (gossip address, name); rewritten "
              "on membership changes\n");
  size_t k = 0;
  for (size_t i = 0; i < n && k < PEERS_MAX; i++) {
    if (ea_node_id_cmp(&ms[i].id, &a->id) == 0) continue;
    if (ms[i].state != EA_STATE_ALIVE && ms[i].state != EA_STATE_SUSPECT) continue;
    char addr[64];
    ea_addr_str(&ms[i].meta.gossip, addr, sizeof addr);
    ea__sb_printf(&b, "%s %s\n", addr, member_name(&ms[i]));
    k++;
  }
  /* With nobody else alive, keep the previous list: after a partition or a
   * cluster-wide outage, the last known peers are still the best guess. */
  if (k == 0 || b.oom) {
    ea__sb_free(&b);
    return;
  }
  peers_job *j = calloc(1, sizeof *j);
  if (!j) {
    ea__sb_free(&b);
    return;
  }
  j->a = a;
  j->buf = b.buf;
  j->len = b.len;
  if (uv_queue_work(&a->loop, &j->w, peers_work, peers_after) < 0) {
    free(j->buf);
    free(j);
    return;
  }
  a->peers_busy = true;
}

static void peers_timer_cb(uv_timer_t *h) {
  agent *a = h->data;
  if (a->phase <= PHASE_DRAINING && a->peers_dirty && !a->peers_busy) peers_write_now(a);
}

static void peers_schedule(agent *a) {
  a->peers_dirty = true;
  if (a->peers_busy) return; /* peers_after re-schedules */
  uint64_t now = uv_now(&a->loop);
  if (a->peers_last_ms == 0 || now - a->peers_last_ms >= PEERS_WRITE_INTERVAL_MS) {
    peers_write_now(a);
  } else if (!uv_is_active((uv_handle_t *)&a->peers_timer)) {
    uv_timer_start(&a->peers_timer, peers_timer_cb,
                   PEERS_WRITE_INTERVAL_MS - (now - a->peers_last_ms), 0);
  }
}

static void on_settle(uv_idle_t *h) {
  agent *a = h->data;
  uv_idle_stop(h);
  if (!a->members_dirty || !a->tr || a->phase >= PHASE_LEAVING) return;
  a->members_dirty = false;
  const ea_member *ms;
  size_t n = ea_swim_members(ea_transport_swim(a->tr), &ms);
  ea_rdzv_view(a->rdzv, now_ms(a), ms, n);
  elect_update(a);
  core_done(a);
  if (a->phase <= PHASE_DRAINING) peers_schedule(a);
}

/* ---- status ------------------------------------------------------------------------- */

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
static void status_generation(agent *a, ea__sb *o) {
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
                a->phase == PHASE_RUNNING    ? "running"
                : a->phase == PHASE_DRAINING ? "draining"
                : a->phase == PHASE_STOPPING ? "stopping"
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
    const wk_info *w = &a->w[k];
    ea__sb_printf(o,
                  "%s{\"idx\":%" PRIu32 ",\"pid\":%d,\"state\":\"%s\",\"gen\":%" PRIu64
                  ",\"step\":%" PRIu64 ",\"loss\":",
                  k ? "," : "", k, a->sup ? ea__sup_pid(a->sup, k) : 0, wstate_str(w->state),
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
static void status_checkpoint(agent *a, ea__sb *o) {
  const ckpt_info *k = &a->ck;
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

static void status_counters(agent *a, ea__sb *o) {
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

static int cmd_status(void *ctx, const char *args, ea__sb *o) {
  agent *a = ctx;
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
                a->phase >= PHASE_STOPPING ? "true" : "false");

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
    ea__sb_json_str(o, member_name(c));
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

/* "drain NAME": drain a member (this node's own name: ourselves). */
static int cmd_drain(void *ctx, const char *args, ea__sb *o) {
  agent *a = ctx;
  char name[EA_NAME_MAX];
  while (*args == ' ') args++;
  size_t n = strcspn(args, " \t\r\n");
  if (n == 0 || n >= sizeof name || args[n + strspn(args + n, " \t\r\n")]) {
    ea__sb_puts(o, "{\"error\":\"usage: drain NAME (one member name)\"}");
    return -EINVAL;
  }
  memcpy(name, args, n);
  name[n] = 0;
  if (!a->rdzv || a->phase >= PHASE_LEAVING) {
    ea__sb_puts(o, "{\"error\":\"shutting down\"}");
    return -ESHUTDOWN;
  }
  if (strcmp(name, a->o->name) == 0) {
    bool already = a->phase != PHASE_RUNNING;
    begin_drain(a, "drain command", false);
    ea__sb_puts(o, "{\"draining\":");
    ea__sb_json_str(o, name);
    ea__sb_printf(o, ",\"self\":true,\"already\":%s}", already ? "true" : "false");
    return 0;
  }
  int rc = ea_rdzv_drain(a->rdzv, now_ms(a), name);
  core_done(a);
  if (rc < 0) {
    ea__sb_puts(o, "{\"error\":");
    char msg[EA_NAME_MAX + 64];
    snprintf(msg, sizeof msg, "no alive member named '%s'", name);
    ea__sb_json_str(o, msg);
    ea__sb_puts(o, "}");
    return rc;
  }
  ea_log(EA_LOG_INFO, "drain", "asked %s to drain (drain command)", name);
  ea__sb_puts(o, "{\"draining\":");
  ea__sb_json_str(o, name);
  ea__sb_puts(o, ",\"self\":false}");
  return 0;
}

static const ea__admin_cmd admin_cmds[] = {
    {"status", "members, controller, generation, workers, counters and configuration as JSON",
     cmd_status},
    {"drain", "drain NAME: re-form the group without that member, which then leaves and exits",
     cmd_drain},
};

/* ---- run ------------------------------------------------------------------------------ */

void ea__agent_opts_default(ea__agent_opts *o) {
  memset(o, 0, sizeof *o);
  ea_config_default(&o->cfg);
  snprintf(o->bind, sizeof o->bind, "%s", EA__DEFAULT_BIND);
  snprintf(o->data_dir, sizeof o->data_dir, "%s", EA__DEFAULT_DATA_DIR);
  snprintf(o->role, sizeof o->role, "worker");
  char host[256];
  if (gethostname(host, sizeof host) < 0) snprintf(host, sizeof host, "node");
  host[sizeof host - 1] = 0;
  snprintf(o->name, sizeof o->name, "%.*s", EA_NAME_MAX - 1, host);
}

/* The control listener's address: --control-bind, or the gossip bind
 * address with the next port (an ephemeral gossip port gets an ephemeral
 * control port). */
static int control_bind_addr(const ea__agent_opts *o, ea_addr *out, char *err, size_t errlen) {
  if (o->control_bind[0]) {
    if (ea_addr_parse(o->control_bind, 0, out) < 0) {
      snprintf(err, errlen, "--control-bind: cannot parse '%s'", o->control_bind);
      return -EINVAL;
    }
    return 0;
  }
  if (ea_addr_parse(o->bind, 7000, out) < 0) {
    snprintf(err, errlen, "--bind: cannot parse '%s'", o->bind);
    return -EINVAL;
  }
  out->port = out->port && out->port < 65535 ? (uint16_t)(out->port + 1) : 0;
  return 0;
}

/* The communicator backend the workers use.  auto: the built-in trainer
 * computes on the CPU, so its buffers are host memory and the tcp ring is
 * the right fit; a user's program (worker_command) gets nccl when it is
 * built in and this node has an NVIDIA device. */
static int pick_backend(const ea__agent_opts *o, ea_comm_backend *b, char *err, size_t errlen) {
  const char *s = o->cfg.distributed.backend;
  if (strcmp(s, "auto") == 0) {
    bool gpu = access("/dev/nvidiactl", F_OK) == 0;
    *b = o->cfg.compute.worker_command[0] && gpu && ea_comm_nccl_available() ? EA_COMM_NCCL
                                                                             : EA_COMM_TCP;
    return 0;
  }
  if (ea_comm_backend_parse(s, b) < 0) {
    snprintf(err, errlen, "distributed.backend: unknown backend '%s'", s);
    return -EINVAL;
  }
  if (*b == EA_COMM_NCCL && !ea_comm_nccl_available()) {
    snprintf(err, errlen, "distributed.backend: nccl is not built into this binary");
    return -EOPNOTSUPP;
  }
  return 0;
}

/* What every worker inherits: its node's name for its log lines, one BLAS
 * thread unless the operator chose (several workers share a node's cores,
 * and the built-in model's matrices are small), and the OpenBLAS kernel
 * choice when Debian's 0.3.21 misdetects this CPU (~6× slower otherwise). */
static void worker_environment(const ea__agent_opts *o) {
  setenv("EA_NODE_NAME", o->name, 1);
  setenv("OPENBLAS_NUM_THREADS", "1", 0);
  const char *core = ea_train_blas_coretype_hint();
  if (core && !getenv("OPENBLAS_CORETYPE")) {
    setenv("OPENBLAS_CORETYPE", core, 1);
    ea_log(EA_LOG_INFO, "start",
           "OpenBLAS fell back to generic kernels on this CPU: workers get OPENBLAS_CORETYPE=%s",
           core);
  }
}

/* The effective job configuration (defaults < --config < --set), written
 * for the workers, which load it with --config: they then run exactly the
 * job the agent was given, flags included. */
static int write_job_file(agent *a, char *err, size_t errlen) {
  int n = ea_config_dump(&a->o->cfg, NULL, 0);
  char *buf = n > 0 ? malloc((size_t)n + 1) : NULL;
  if (!buf || ea_config_dump(&a->o->cfg, buf, (size_t)n + 1) != n) {
    free(buf);
    snprintf(err, errlen, "cannot render the job configuration");
    return -ENOMEM;
  }
  int rc = ea__write_file_atomic(a->job_path, buf, (size_t)n, 0600);
  free(buf);
  if (rc < 0) snprintf(err, errlen, "cannot write %s: %s", a->job_path, strerror(-rc));
  return rc;
}

/* checkpoint.dir ("" = <data-dir>/checkpoints), made absolute: workers
 * get it in their COMMIT, and the manifest names files relative to it. */
static int ckpt_resolve_dir(const ea__agent_opts *o, char *out, size_t cap, char *err,
                            size_t errlen) {
  const char *d = o->cfg.checkpoint.dir;
  char cwd[EA_PATH_MAX] = "";
  bool rel = d[0] ? d[0] != '/' : o->data_dir[0] != '/';
  if (rel && !getcwd(cwd, sizeof cwd)) {
    int e = errno;
    snprintf(err, errlen, "checkpoint.dir: cannot resolve a relative path: getcwd: %s",
             strerror(e));
    return -e;
  }
  int n = d[0] ? snprintf(out, cap, "%s%s%s", cwd, rel ? "/" : "", d)
               : snprintf(out, cap, "%s%s%s/checkpoints", cwd, rel ? "/" : "", o->data_dir);
  if (n < 0 || (size_t)n >= cap || (size_t)n >= EA_IPC_PATH_MAX) {
    snprintf(err, errlen, "checkpoint.dir: the path is longer than %u bytes",
             EA_IPC_PATH_MAX - 1);
    return -ENAMETOOLONG;
  }
  return 0;
}

/* Generations start above every checkpoint already in the directory.  A
 * cluster started with fresh data directories numbers its generations from
 * 1, and the generation fence of ea_ckpt_commit would refuse every commit
 * below the newest generation on disk: so the newest generation found there
 * (complete or not; its number is in the directory name) becomes the floor
 * of what this agent has seen, as if it had persisted it.  Runs before the
 * loop starts (one directory listing). */
static void ckpt_gen_floor(const char *dir, ea_rdzv_gen *g) {
  ea_ckpt_entry *e = NULL;
  size_t n = 0;
  if (ea_ckpt_list(dir, &e, &n) < 0) return;
  uint64_t top = 0;
  for (size_t i = 0; i < n; i++)
    if (e[i].generation > top) top = e[i].generation;
  free(e);
  uint64_t term = ea_rdzv_gen64_term(top);
  if (term <= g->term) return;
  ea_rdzv_gen64_unpack(top, g);
  ea_log(EA_LOG_INFO, "generation",
         "checkpoints in %s were written up to generation term %" PRIu64
         ": generations formed here start above it",
         dir, term);
}

static int start_rdzv(agent *a, const ea_rdzv_gen *persisted, uint64_t seed, char *err,
                      size_t errlen) {
  ea_rdzv_config rc;
  ea_rdzv_config_default(&rc);
  ea_rdzv_config_from(&rc, &a->o->cfg);
  ea_rdzv_io io = {
      .ctx = a, .send = io_send, .order = io_order, .persist = io_persist, .reason = io_reason};
  a->rdzv = ea_rdzv_new(&rc, &a->id, persisted, &io, seed, now_ms(a));
  if (!a->rdzv) {
    snprintf(err, errlen,
             "cannot create the rendezvous (compute.max_nodes x workers_per_node over %u, or out "
             "of memory)",
             EA_RDZV_MAX_WORLD);
    return -EINVAL;
  }
  return 0;
}

static int start_workers(agent *a, char *err, size_t errlen) {
  if (strcmp(a->o->role, "observer") == 0) {
    a->wpn = 0; /* observers never train (ea_rdzv never picks them) */
    return 0;
  }
  a->ipc = malloc(sizeof *a->ipc);
  a->w = calloc(a->wpn, sizeof *a->w);
  if (!a->ipc || !a->w) {
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  /* Workers listen on the address the cluster knows this node by. */
  ea_addr cb = *ea_transport_addr(a->tr);
  cb.port = 0;
  char bind[80];
  ea_addr_str(&cb, bind, sizeof bind);
  ea__sup_opts so = {.workers = a->wpn,
                     .worker_command = a->o->cfg.compute.worker_command,
                     .config_path = a->job_path,
                     .comm_bind = bind};
  ea__sup_cbs cb2 = {.on_message = on_worker_msg, .on_exit = on_worker_exit};
  int rc = ckpt_start(a, err, errlen);
  if (rc < 0) return rc;
  rc = ea__sup_new(&a->loop, &so, &cb2, a, &a->sup);
  if (rc < 0) {
    snprintf(err, errlen, "worker supervisor: %s", strerror(-rc));
    return rc;
  }
  rc = ea__sup_start_all(a->sup);
  if (rc < 0) {
    snprintf(err, errlen, "cannot start the workers: %s", uv_strerror(rc));
    return rc;
  }
  return 0;
}

int ea__agent_run(const ea__agent_opts *o) {
  char err[EA_PATH_MAX + 256];
  int rc = ea__data_dir_prepare(o->data_dir, err, sizeof err);
  int lock_fd = -1;
  if (rc == 0) rc = ea__data_dir_lock(o->data_dir, &lock_fd, err, sizeof err);
  agent *a = calloc(1, sizeof *a);
  if (rc == 0 && !a) rc = -ENOMEM, snprintf(err, sizeof err, "out of memory");
  bool created = false;
  if (rc == 0) rc = ea__node_id_load(o->data_dir, &a->id, &created, err, sizeof err);
  ea_rdzv_gen persisted = {0};
  if (rc == 0) rc = ea__gen_load(o->data_dir, &persisted, err, sizeof err);
  if (rc == 0) rc = ckpt_resolve_dir(o, a->ckpt_dir, sizeof a->ckpt_dir, err, sizeof err);
  uint8_t key[EA_KEY_BYTES];
  bool have_key = false;
  if (rc == 0 && o->key_file[0]) {
    const char *kerr = "key file";
    rc = ea_wire_load_key(o->key_file, key, &kerr);
    if (rc < 0)
      snprintf(err, sizeof err, "--key-file %.300s: %s", o->key_file, kerr);
    else
      have_key = true;
  }
  ea_addr cbind;
  if (rc == 0) rc = control_bind_addr(o, &cbind, err, sizeof err);
  if (rc == 0 && a) {
    a->o = o;
    a->wpn = o->cfg.compute.workers_per_node;
    if (!o->cfg.compute.worker_command[0]) {
      a->dims = (ea_model_dims){.context = o->cfg.train.context,
                                .embed_dim = o->cfg.train.embed_dim,
                                .hidden = o->cfg.train.hidden,
                                .layers = o->cfg.train.layers};
      a->have_dims = ea_state_layout(&a->dims, NULL, NULL) == 0;
    }
    rc = pick_backend(o, &a->backend, err, sizeof err);
  }
  if (rc == 0) {
    snprintf(a->job_path, sizeof a->job_path, "%s/job.yaml", o->data_dir);
    rc = write_job_file(a, err, sizeof err);
  }
  if (rc < 0) {
    ea_log(EA_LOG_ERROR, "start", "%s", err);
    if (lock_fd >= 0) close(lock_fd);
    free(a);
    return rc;
  }
  ea_node_id_hex(&a->id, a->idhex);
  snprintf(a->sock_path, sizeof a->sock_path, "%s/%s", o->data_dir, EA__ADMIN_SOCK);
  snprintf(a->peers_path, sizeof a->peers_path, "%s/%s", o->data_dir, EA__PEERS_FILE);
  snprintf(a->gen_path, sizeof a->gen_path, "%s/%s", o->data_dir, EA__GEN_FILE);
  if (created)
    ea_log(EA_LOG_INFO, "start", "new node id %s written to %s/%s", a->idhex, o->data_dir,
           EA__NODE_ID_FILE);
  if (persisted.term) {
    char g[48];
    ea_rdzv_gen_str(&persisted, g, sizeof g);
    ea_log(EA_LOG_INFO, "start", "last generation accepted here: %s (%s)", g, a->gen_path);
  }
  ckpt_gen_floor(a->ckpt_dir, &persisted);
  worker_environment(o);

  uv_loop_init(&a->loop);
  a->start_ms = uv_now(&a->loop);
  uint64_t seed = 0;
  if (getrandom(&seed, sizeof seed, 0) != sizeof seed) seed = a->start_ms ^ (uint64_t)getpid();

  rc = ea__ctl_start(&a->loop, &cbind, have_key ? key : NULL, on_control, a, &a->ctl, err,
                     sizeof err);
  if (rc == 0) ea__ctl_set_frame_hook(a->ctl, on_ctl_frame);
  ea_transport_opts to = {
      .bind = o->bind,
      .advertise = o->advertise[0] ? o->advertise : NULL,
      .key = have_key ? key : NULL,
      .swim = o->cfg.membership,
      .self = a->id,
      .seed = seed,
      .join_retry_max_ms = o->cfg.runtime.join_retry_max_ms,
      .control_port = a->ctl ? ea__ctl_bound(a->ctl)->port : 0,
      .ctx = a,
      .on_change = on_change,
      .on_join = on_join,
  };
  snprintf(to.meta.name, sizeof to.meta.name, "%s", o->name);
  snprintf(to.meta.role, sizeof to.meta.role, "%s", o->role);
  snprintf(to.meta.tags, sizeof to.meta.tags, "%s", o->tags);
  snprintf(to.meta.version, sizeof to.meta.version, "%s", EA_VERSION);
  a->meta = to.meta;
  if (rc == 0) rc = ea_transport_start(&a->loop, &to, &a->tr, err, sizeof err);
  memset(key, 0, sizeof key);
  if (rc == 0)
    rc = ea__admin_start(&a->loop, a->sock_path, admin_cmds,
                         sizeof admin_cmds / sizeof admin_cmds[0], a, &a->admin, err, sizeof err);
  if (rc == 0) rc = start_rdzv(a, &persisted, seed, err, sizeof err);
  if (rc == 0) {
    uv_signal_init(&a->loop, &a->sigterm);
    uv_signal_init(&a->loop, &a->sigint);
    uv_idle_init(&a->loop, &a->settle);
    uv_timer_init(&a->loop, &a->peers_timer);
    uv_timer_init(&a->loop, &a->rdzv_timer);
    uv_timer_init(&a->loop, &a->drain_timer);
    a->sigterm.data = a->sigint.data = a->settle.data = a->peers_timer.data = a;
    a->rdzv_timer.data = a->drain_timer.data = a;
    a->handles_open = true;
    rc = start_workers(a, err, sizeof err);
  }
  if (rc < 0) {
    ea_log(EA_LOG_ERROR, "start", "%s", err); /* shutdown_all closes what started */
  } else {
    uv_signal_start(&a->sigterm, on_signal, SIGTERM);
    uv_signal_start(&a->sigint, on_signal, SIGINT);
    a->meta = ea_swim_self(ea_transport_swim(a->tr))->meta;

    char gaddr[64], caddr[64];
    ea_addr_str(ea_transport_addr(a->tr), gaddr, sizeof gaddr);
    ea_addr_str(ea_transport_control(a->tr), caddr, sizeof caddr);
    ea_log(EA_LOG_INFO, "listen",
           "name=%s id=%s gossip=%s (udp) push-pull=%s (tcp) control=%s (tcp) admin=%s "
           "version=%s role=%s",
           o->name, a->idhex, gaddr, gaddr, caddr, a->sock_path, EA_VERSION, o->role);
    ea_log(EA_LOG_INFO, "start",
           "job: %u worker%s per node (%s), min_nodes %u, max_nodes %u, backend %s, %" PRIu64
           " steps, global batch %u; workers load %s",
           a->wpn, a->wpn == 1 ? "" : "s",
           o->cfg.compute.worker_command[0] ? o->cfg.compute.worker_command : "built-in trainer",
           o->cfg.compute.min_nodes, o->cfg.compute.max_nodes, ea_comm_backend_name(a->backend),
           o->cfg.train.steps, o->cfg.distributed.global_batch, a->job_path);
    if (!have_key)
      ea_log(EA_LOG_WARN, "security",
             "gossip is not authenticated: anyone who can reach UDP/TCP port %u can join this "
             "cluster and read its membership; create a key with `elastic-agent keygen FILE` "
             "and give every agent --key-file FILE",
             ea_transport_addr(a->tr)->port);
    ea_addr *peers = NULL;
    size_t npeers = 0;
    if (ea__peers_load(o->data_dir, &peers, &npeers) == 0 && npeers > 0)
      ea_log(EA_LOG_INFO, "join", "%zu remembered peer%s in %s will be tried too", npeers,
             npeers == 1 ? "" : "s", a->peers_path);
    a->members_dirty = true; /* first election and view: ourselves */
    uv_idle_start(&a->settle, on_settle);
    rc = ea_transport_join(a->tr, o->join, peers, npeers, err, sizeof err);
    free(peers);
    if (rc < 0) ea_log(EA_LOG_ERROR, "join", "%s", err);
  }
  if (rc < 0) shutdown_all(a);

  uv_run(&a->loop, UV_RUN_DEFAULT);
  int lrc = uv_loop_close(&a->loop);
  if (lrc < 0) {
    ea_log(EA_LOG_ERROR, "exit", "event loop still has open handles at exit: %s", uv_strerror(lrc));
    if (rc == 0) rc = lrc;
  } else if (rc == 0) {
    ea_log(EA_LOG_INFO, "exit", "stopped cleanly");
  }
  ea_rdzv_free(a->rdzv);
  free(a->w);
  free(a->ipc);
  close(lock_fd);
  free(a);
  return rc;
}
