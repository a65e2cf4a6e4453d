/* The agent's side of its workers: the orders the rendezvous core gives
 * (PREPARE, COMMIT, PAUSE) turned into IPC messages for each local worker,
 * and what the workers say back (HELLO, READY, STEP, FAILED, …) turned
 * into reports to the core, log lines and the per-worker state `status`
 * shows.  A worker's exit is a failure report at once (the fastest failure
 * signal there is), then a restart, until runtime.max_restarts is spent
 * and the node drains.  In restart mode (torchrun) the orders go to the
 * launcher instead (job_glue.c, launch.c) and a worker's exit is its
 * generation's business, not a local restart.
 *
 * Everything here runs on the loop: the supervisor (supervisor.c) delivers
 * messages and exits from its callbacks, never from inside a send, and
 * io.order runs inside the core, so it only talks to the workers; what it
 * cannot do there (a worker that cannot be told) is flagged for
 * ea__agent_core_done().  What the workers say goes to the rendezvous core
 * as intents (ea__agent_do, agent.c).
 */
#include "agent_int.h"

#include "ea_log.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One `progress` line per this long while training: a person following
 * the log sees the job move without a line per step (steps of the built-in
 * model take milliseconds; per-step lines are at debug level). */
#define PROGRESS_INTERVAL_MS 10000

/* A plan's NCCL unique id is copied into a COMMIT as is (order_commit). */
_Static_assert(EA_RDZV_NCCL_ID_BYTES == EA_COMM_NCCL_ID_BYTES, "NCCL unique id size");

const char *ea__agent_wstate_str(ea__wstate s) {
  static const char *const n[] = {"starting", "idle",   "preparing", "ready", "training",
                                  "failed",   "paused", "done",      "exited"};
  return s <= EA__W_EXITED ? n[s] : "?";
}

bool ea__agent_workers_running(const ea__agent *a) {
  for (uint32_t k = 0; a->sup && k < a->wpn; k++)
    if (ea__sup_running(a->sup, k)) return true;
  return false;
}

/* ---- orders to the workers ------------------------------------------------------- */

/* Send one message to worker k.  A worker that is not running will get the
 * current order when it says HELLO; one that cannot be told (its socket
 * is full or closed) is reported failed after the core call returns. */
static void wsend(ea__agent *a, uint32_t k, const ea_ipc_msg *m) {
  int rc = ea__sup_send(a->sup, k, m);
  if (rc == 0 || rc == -ESRCH) return;
  ea_log(EA_LOG_WARN, "worker", "worker %u: cannot send %s: %s", k, ea_ipc_type_name(m->type),
         strerror(-rc));
  a->w[k].fail_pending = true;
}

static void send_prepare(ea__agent *a, uint32_t k) {
  ea_ipc_msg *m = a->ipc;
  ea_ipc_msg_init(m, EA_IPC_PREPARE);
  m->gen = a->prep.g64;
  /* Now, not at a boundary: the order does not say whether the old
   * communicator is still healthy (a join) or stuck on a partitioned peer
   * (a failure), and waiting out a stuck allreduce costs the op timeout.
   * For a join the core has already waited for a step boundary before
   * ordering this, so at most the step in flight is recomputed. */
  m->at_boundary = false;
  m->make_nccl_id =
      a->backend == EA_COMM_NCCL && a->mode != EA__MODE_LIBRARY && a->prep.rank_base == 0 && k == 0;
  a->w[k].gen = a->prep.g64;
  if (a->w[k].state != EA__W_STARTING && a->w[k].state != EA__W_EXITED)
    a->w[k].state = EA__W_PREPARING;
  wsend(a, k, m);
}

static void order_prepare(ea__agent *a, const ea_rdzv_order *o) {
  char g[48];
  ea_rdzv_gen_str(&o->gen, g, sizeof g);
  a->prep.active = true;
  a->prep.gen = o->gen;
  a->prep.g64 = ea_rdzv_gen_u64(&o->gen);
  a->prep.rank_base = o->rank_base;
  a->prep.world = o->world;
  a->prep.at_ms = ea__agent_mono_ms();
  a->run.active = false;
  ea__agent_stall(a, "a new generation");
  ea_logkv(EA_LOG_INFO, "generation",
           (ea_log_kv[]){EA_KV_U("generation", ea_rdzv_gen64_term(a->prep.g64)),
                         EA_KV_U("world", o->world)},
           2, "prepare gen=%s world=%u ranks=%u-%u", g, o->world, o->rank_base,
           o->rank_base + o->wpn - 1);
  if (a->job) ea__job_local_done(a->job, 0, 0);
  if (a->launch) {
    ea__agent_restart_prepare(a, o);
    return;
  }
  for (uint32_t k = 0; k < a->wpn; k++) send_prepare(a, k);
}

static void order_commit(ea__agent *a, const ea_rdzv_order *o) {
  const ea_rdzv_plan *p = o->plan;
  char g[48];
  ea_rdzv_gen_str(&p->gen, g, sizeof g);
  int me = -1;
  for (uint32_t i = 0; i < p->nnodes; i++)
    if (ea_node_id_cmp(&p->nodes[i].id, &a->id) == 0) me = (int)i;
  if (me < 0 || p->wpn != a->wpn) { /* the core checked this; be loud if not */
    ea_log(EA_LOG_ERROR, "generation", "commit gen=%s does not include this node", g);
    return;
  }
  uint64_t t = ea__agent_mono_ms();
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
  ea__agent_metrics_formation(a, (double)a->last_formation_ms / 1000.0);
  if (a->launch) {
    ea__agent_restart_commit(a, p, (uint32_t)me, g);
    return;
  }

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
    /* The ring the builtin workers form authenticates its hellos with the
     * generation's token (a library program's ring is torch's own). */
    if (a->have_ring_key && a->mode == EA__MODE_BUILTIN) {
      ea__ring_token(a->ring_key, a->run.g64, m->ring_token);
      m->has_ring_token = true;
    }
    if (ok && a->mode == EA__MODE_LIBRARY) {
      /* The library's TCPStore lives in rank 0's worker, on the comm_addr
       * it bound once at start and said in hello/ready: a port this agent
       * picked per generation (restart mode's MASTER_PORT) would have no
       * listener, since the process is not restarted.  Sent explicitly so
       * the program does not have to know that peers[0] is the store. */
      memcpy(m->store, m->peers[0], sizeof m->store);
      const char *b = a->o->cfg.distributed.backend;
      m->torch_backend = strcmp(b, "nccl") == 0  ? EA_IPC_TORCH_NCCL
                         : strcmp(b, "tcp") == 0 ? EA_IPC_TORCH_GLOO
                                                 : EA_IPC_TORCH_NONE;
    }
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
    if (a->o->smoke && a->o->smoke->restore_asked)
      resume = a->o->smoke->restore_spec; /* the smoke run's own checkpoint */
    else if (a->o->resume_from[0] && !a->ck.resume_done)
      resume = a->o->resume_from;
    else if (cfg->checkpoint.resume_from_last)
      resume = "latest";
  }
  /* Another cluster's checkpoint.dir (its CLUSTER as last read): neither
   * resume from it nor stage shards into it (ident.c; the commit path
   * checks again before it writes or deletes anything). */
  char refused[EA_PATH_MAX + 400];
  if (m->ckpt_interval || resume) {
    if (ea__ident_ckpt_refused(a, resume ? "resume from" : "commit into", refused,
                               sizeof refused)) {
      resume = NULL;
      m->ckpt_interval = 0;
      m->ckpt_skip = false;
    }
  }
  if (a->o->smoke) ea__smoke_generation(a->o->smoke, a->run.g64, p->has_sync, p->world);
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
    a->w[k].state = EA__W_TRAINING;
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
  ea_logkv(EA_LOG_INFO, "generation",
           (ea_log_kv[]){EA_KV_U("generation", ea_rdzv_gen64_term(a->run.g64)),
                         EA_KV_U("world", p->world), EA_KV_U("formation_ms", a->last_formation_ms)},
           3,
           "committed gen=%s world=%u nodes=%s ranks=%u-%u sync=%s formation_ms=%" PRIu64
           " stalled_ms=%" PRIu64 "%s%s",
           g, p->world, names, a->run.rank_base, a->run.rank_base + a->wpn - 1, sync,
           a->last_formation_ms, a->last_stall_ms, a->stall_ms ? " after=" : "",
           a->stall_ms ? a->stall_why : "");
}

/* A local worker's communicator failed: its ring neighbours on other nodes
 * are probed now rather than at their turn in the gossip round (when the
 * peer process is gone the kernel has already reset the connection, and
 * the round could take N probe intervals to reach it).  Only a probe: a
 * neighbour is declared dead by failed probes and suspicion; when the
 * worker's error says the kernel reset or refused the connection (`gone`),
 * a failed probe's suspicion runs one probe interval instead of waiting
 * for other members' confirmations (ea_swim_peer_gone).  A timeout is no
 * such evidence (a frozen or unplugged peer): the usual protocol. */
static bool error_says_gone(int32_t error) {
  return error == -ECONNRESET || error == -ECONNREFUSED || error == -EPIPE;
}

static void probe_ring_neighbours(ea__agent *a, bool gone) {
  const ea_rdzv_plan *p = a->rdzv ? ea_rdzv_running(a->rdzv) : NULL;
  if (!p || !a->tr || p->world < 2 || !p->wpn) return;
  const uint32_t base = a->run.rank_base;
  const uint32_t ranks[2] = {(base + p->world - 1) % p->world, (base + p->wpn) % p->world};
  for (int i = 0; i < 2; i++) {
    uint32_t node = ranks[i] / p->wpn;
    if (node >= p->nnodes || ea_node_id_cmp(&p->nodes[node].id, &a->id) == 0) continue;
    if (ea_transport_probe_soon(a->tr, &p->nodes[node].id, gone))
      ea_log(EA_LOG_DEBUG, "worker", "probing ring neighbour %s (rank %u) now%s",
             p->nodes[node].name[0] ? p->nodes[node].name : "?", ranks[i],
             gone ? " (connection reset)" : "");
  }
}

/* Keep worker w's `failed` for status, and find the node of the rank it
 * could not exchange with (rank r of the plan is on node r / wpn).  Returns
 * that node's id, or NULL when the worker named no peer, the rank is not
 * in the running plan, or it is one of our own (a link inside this node
 * says nothing about the network). */
static const ea_node_id *note_failure(ea__agent *a, ea__agent_wk *w, const ea_ipc_msg *m) {
  snprintf(w->fail_msg, sizeof w->fail_msg, "%s", m->message);
  w->fail_gen = m->gen;
  w->fail_rank = m->has_peer ? (int64_t)m->peer : -1;
  w->fail_node[0] = 0;
  const ea_rdzv_plan *p = a->rdzv ? ea_rdzv_running(a->rdzv) : NULL;
  if (!m->has_peer || !p || !p->wpn || ea_rdzv_gen_u64(&p->gen) != m->gen || m->peer >= p->world)
    return NULL;
  const ea_rdzv_node *n = &p->nodes[m->peer / p->wpn];
  snprintf(w->fail_node, sizeof w->fail_node, "%s", n->name);
  return ea_node_id_cmp(&n->id, &a->id) == 0 ? NULL : &n->id;
}

static void order_pause(ea__agent *a, const char *why) {
  ea_ipc_msg *m = a->ipc;
  ea_ipc_msg_init(m, EA_IPC_PAUSE);
  snprintf(m->reason, sizeof m->reason, "%s", why ? why : "paused");
  a->run.active = false;
  a->prep.active = false;
  ea__agent_stall(a, "paused");
  /* A lost quorum is worth a warning; a formation abandoned for a newer
   * one (every recovery from a crash has one) is not. */
  ea_log(why && strncmp(why, "no quorum", 9) == 0 ? EA_LOG_WARN : EA_LOG_INFO, "generation",
         "paused: %s", why ? why : "?");
  if (a->launch) { /* a torchrun program cannot wait without its group */
    ea__launch_stop_all(a->launch, a->o->cfg.runtime.stop_grace_seconds * 1000u);
    return;
  }
  for (uint32_t k = 0; k < a->wpn; k++) wsend(a, k, m);
}

/* io.order: runs inside the core; talks to the workers only. */
void ea__agent_io_order(void *ctx, const ea_rdzv_order *o) {
  ea__agent *a = ctx;
  if (a->phase == EA__PHASE_CLOSING) return;
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

/* ---- what the workers say ---------------------------------------------------------- */

static void log_step(ea__agent *a, uint32_t k, const ea_ipc_msg *m) {
  if (ea_log_enabled(EA_LOG_DEBUG))
    ea_log(EA_LOG_DEBUG, "step",
           "worker=%u gen=%" PRIu64 " rank=%u world=%u step=%" PRIu64
           " loss=%.6f digest=%016" PRIx64 " ms=%.2f",
           k, m->gen, a->run.rank_base + k, a->run.world, m->step, m->loss, m->digest,
           m->seconds * 1e3);
  if (!a->run.first_step_seen && a->run.active && m->gen == a->run.g64) {
    a->run.first_step_seen = true;
    uint64_t t = ea__agent_mono_ms();
    char g[48];
    ea_rdzv_gen_str(&a->run.gen, g, sizeof g);
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
  /* observability.alert_on_nan: once per run of non-finite losses (the
   * trainer keeps reporting them every step: a condition of the registry,
   * not repeated while firing), resolved by a finite one. */
  if (!isfinite(m->loss) && a->o->cfg.observability.alert_on_nan &&
      !ea__agent_alert_firing(a, EA__ALERT_LOSS_NAN, "")) {
    ea__agent_alert_kv(
        a, EA__ALERT_LOSS_NAN, EA__SEV_CRITICAL, "",
        (ea_log_kv[]){EA_KV_U("generation", ea_rdzv_gen64_term(m->gen)), EA_KV_U("step", m->step),
                      EA_KV_U("rank", a->run.rank_base + k), EA_KV_F("loss", m->loss)},
        4, "loss_nan gen=%" PRIu64 " step=%" PRIu64 " rank=%u loss=%f: training diverged",
        ea_rdzv_gen64_term(m->gen), m->step, a->run.rank_base + k, m->loss);
  } else if (isfinite(m->loss) && k == 0) {
    ea__agent_alert_resolve(a, EA__ALERT_LOSS_NAN, "", "loss_nan resolved at step %" PRIu64,
                            m->step);
  }
  uint64_t now = ea__agent_now_ms(a);
  /* logging.metrics_interval_steps: every N steps; 0: every
   * PROGRESS_INTERVAL_MS. */
  uint32_t every = a->o->cfg.logging.metrics_interval_steps;
  if (k == 0 && (every ? m->step % every == 0 : now - a->progress_ms >= PROGRESS_INTERVAL_MS)) {
    double rate =
        a->progress_ms && m->step > a->progress_step
            ? (double)(m->step - a->progress_step) * 1000.0 / (double)(now - a->progress_ms)
            : 0.0;
    ea_logkv(EA_LOG_INFO, "progress",
             (ea_log_kv[]){EA_KV_U("generation", ea_rdzv_gen64_term(m->gen)),
                           EA_KV_U("world", a->run.world), EA_KV_U("step", m->step),
                           EA_KV_F("loss", m->loss), EA_KV_F("steps_per_s", rate)},
             5, "gen=%" PRIu64 " world=%u step=%" PRIu64 " loss=%.4f steps_per_s=%.1f",
             ea_rdzv_gen64_term(m->gen), a->run.world, m->step, m->loss, rate);
    a->progress_ms = now;
    a->progress_step = m->step;
  }
}

/* Restart mode with warm interpreters: local rank k counts as starting
 * while this node has never been in a generation and k's first spare is
 * still importing — admission after the imports, as library mode admits
 * after hello, so a joiner's import stops nobody (the running ranks train
 * on until it is ready, then restart once, warm).  Never again after the
 * first generation: a spare being replaced is not a worker starting. */
static bool restart_starting(ea__agent *a, uint32_t k) {
  if (a->gens_committed || !a->sup) return false;
  ea__sup_spare sp;
  ea__sup_spare_get(a->sup, k, &sp);
  return sp.kept && !sp.off && !sp.ready;
}

void ea__agent_update_starting(ea__agent *a) {
  bool lib = a->mode == EA__MODE_LIBRARY;
  if ((!lib && a->mode != EA__MODE_TORCHRUN) || !a->tr || a->phase >= EA__PHASE_LEAVING) return;
  /* A node without its cluster identity yet is "starting" too (ident.c). */
  bool up = a->ident.have;
  bool any = false;
  ea__intent in[EA_RDZV_MAX_WPN + 1];
  size_t n = 0;
  for (uint32_t k = 0; k < a->wpn && k < EA_RDZV_MAX_WPN; k++) {
    bool starting = lib ? !a->w[k].hello || !a->ident.have : restart_starting(a, k);
    up = up && !starting;
    any = any || starting;
    /* the fast signal, on the control channel (EA_RDZV_F_STARTING) */
    if (lib || starting || a->restart_flagged)
      in[n++] = (ea__intent){.kind = EA__DO_WORKER_STARTING, .worker = k, .on = starting};
  }
  if (!lib) a->restart_flagged = a->restart_flagged || any;
  /* and what a generation's commit flagged (its callers run inside it) */
  in[n++] = (ea__intent){.kind = EA__DO_SETTLE};
  ea__agent_do(a, in, n);
  bool was = ea_rdzv_tags_have(a->meta.tags, EA_RDZV_TAG_STARTING);
  if (was == !up) return;
  if (ea_rdzv_tags_set(a->meta.tags, sizeof a->meta.tags, EA_RDZV_TAG_STARTING, !up) < 0) {
    ea_log(EA_LOG_WARN, "worker",
           "no room in the gossip tags for %s: joining without waiting "
           "for the workers' %s",
           EA_RDZV_TAG_STARTING, lib ? "hello" : "warm interpreters");
    return;
  }
  ea_transport_set_meta(a->tr, &a->meta);
  if (lib)
    ea_log(EA_LOG_INFO, "worker",
           up ? "every worker said hello: this node can be taken in"
              : "a worker is starting: not taken into a new generation "
                "until it says hello");
  else if (any || a->restart_flagged)
    ea_log(EA_LOG_INFO, "worker",
           up ? "every warm interpreter is ready: this node can be taken in"
              : "a warm interpreter is importing: not taken into a generation until it is "
                "ready");
}

static void on_spare(void *ctx, uint32_t k) {
  (void)k;
  ea__agent_update_starting(ctx);
}

static void on_worker_msg(void *ctx, uint32_t k, const ea_ipc_msg *m) {
  ea__agent *a = ctx;
  if (a->phase == EA__PHASE_CLOSING || k >= a->wpn) return;
  ea__agent_wk *w = &a->w[k];
  /* The checkpoint messages sit outside the enum (ea_ipc.h says why). */
  if ((int)m->type == EA_IPC_CKPT_STAGED || (int)m->type == EA_IPC_CKPT_SKIPPED) {
    ea__agent_ckpt_from_worker(a, k, m);
    return;
  }
  if ((int)m->type == EA_IPC_CKPT_LOADED) {
    ea__agent_ckpt_loaded(a, k, m);
    return;
  }
  switch (m->type) {
    case EA_IPC_HELLO:
      w->pid = (int)m->pid;
      w->state = EA__W_IDLE;
      w->next_step = m->next_step;
      w->state_gen = 0; /* a new process: whatever state it has, not trained here */
      w->digest = m->digest;
      snprintf(w->comm, sizeof w->comm, "%s", m->comm_addr);
      ea_log(EA_LOG_INFO, "worker", "worker %u hello pid=%" PRIu64 " comm=%s step=%" PRIu64, k,
             m->pid, m->comm_addr, m->next_step);
      w->hello = true;
      ea__agent_update_starting(a);
      /* Spawned while a generation forms: the order may have gone out
       * before it could read (then it is queued in its socket already). */
      if (a->prep.active && w->gen != a->prep.g64 && a->phase <= EA__PHASE_DRAINING)
        send_prepare(a, k);
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
        w->state = EA__W_FAILED;
        ea__agent_do1(a, (ea__intent){.kind = EA__DO_WORKER_FAILED, .worker = k});
        break;
      }
      w->state = EA__W_READY;
      ea_log(EA_LOG_DEBUG, "worker",
             "worker %u ready gen=%" PRIu64 " step=%" PRIu64 " digest=%016" PRIx64, k, m->gen,
             m->next_step, m->digest);
      /* A smoke run's restore: no live state is offered (the generation
       * then loads the checkpoint, as a cold start does). */
      bool fresh = a->o->smoke && a->o->smoke->restore_asked;
      ea__agent_do1(a, (ea__intent){.kind = EA__DO_WORKER_READY,
                                    .worker = k,
                                    .gen = &a->prep.gen,
                                    .listen = &la,
                                    .u64 = fresh ? 0 : m->next_step,
                                    .state_gen = fresh ? 0 : w->state_gen,
                                    .nccl_id = m->has_nccl_id ? m->nccl_id : NULL});
      break;
    }
    case EA_IPC_STEP:
      a->ck.resume_done = true; /* training runs: a --resume-from has been acted on */
      w->next_step = m->step + 1;
      w->state_gen = m->gen;
      w->loss = m->loss;
      w->has_loss = true;
      w->digest = m->digest;
      w->step_s = m->seconds;
      w->compute_s = m->has_compute_seconds ? m->compute_seconds : -1;
      if (w->state != EA__W_PREPARING && w->state != EA__W_READY) w->state = EA__W_TRAINING;
      a->last_loss = m->loss;
      a->has_loss = true;
      log_step(a, k, m);
      if (a->o->smoke) ea__smoke_step(a->o->smoke, k, m->step + 1, m->loss, a->run.world);
      ea__agent_pace_step(a, k, m); /* compute_seconds: the straggler signal */
      ea__agent_do1(a, (ea__intent){.kind = EA__DO_WORKER_STEP, .worker = k, .u64 = m->step + 1});
      break;
    case EA_IPC_FAILED:
      w->next_step = m->next_step;
      if (m->gen != w->gen) {
        /* About a communicator we already told it to abandon. */
        ea_log(EA_LOG_INFO, "worker", "worker %u: gen %" PRIu64 " ended: %s (superseded)", k,
               m->gen, m->message);
        break;
      }
      w->state = EA__W_FAILED;
      a->worker_failures++;
      probe_ring_neighbours(a, error_says_gone(m->error));
      ea__agent_stall(a, "a worker's communicator failed");
      const ea_node_id *peer = note_failure(a, w, m);
      ea_log(EA_LOG_WARN, "worker", "worker %u failed gen=%" PRIu64 " step=%" PRIu64 ": %s%s%s%s",
             k, m->gen, m->next_step, m->message, peer ? " (blames node " : "",
             peer ? w->fail_node : "", peer ? ")" : "");
      if (!peer) ea__agent_link_comm_failed(a); /* no peer named: probe the links */
      ea__agent_do1(a, (ea__intent){.kind = EA__DO_WORKER_FAILED_PEER, .worker = k, .peer = peer});
      break;
    case EA_IPC_ABORTED:
      w->state = EA__W_PAUSED;
      w->next_step = m->next_step;
      break;
    case EA_IPC_DONE:
      w->next_step = m->next_step;
      w->digest = m->digest;
      if (w->state != EA__W_DONE)
        ea_log(EA_LOG_INFO, "train", "worker %u finished: step=%" PRIu64 " digest=%016" PRIx64, k,
               m->next_step, m->digest);
      w->state = EA__W_DONE;
      w->done_gen = m->gen;
      ea__agent_local_done_check(a, m->next_step);
      break;
    case EA_IPC_EXITING:
      ea_log(m->code ? EA_LOG_WARN : EA_LOG_INFO, "worker", "worker %u exiting code=%d: %s", k,
             m->code, m->reason);
      snprintf(w->exit_reason, sizeof w->exit_reason, "%s", m->reason);
      w->exit_code = m->code;
      break;
    default:
      break;
  }
}

static void on_worker_exit(void *ctx, uint32_t k, int64_t status, int sig) {
  ea__agent *a = ctx;
  if (k >= a->wpn) return;
  ea__agent_wk *w = &a->w[k];
  int pid = w->pid;
  w->state = EA__W_EXITED;
  w->pid = 0;
  w->gen = 0; /* its successor has been told nothing */
  if (a->phase >= EA__PHASE_STOPPING) {
    if (a->phase == EA__PHASE_STOPPING && !ea__agent_workers_running(a)) {
      ea_log(EA_LOG_INFO, "leave", "workers stopped; leaving the cluster");
      ea__agent_leave_now(a);
    }
    return;
  }
  if ((status != 0 || sig != 0) && !a->launch) {
    /* A library program says why before it exits (`exiting`, e.g.
     * "RuntimeError: …"): the alert carries that reason. */
    bool said = w->exit_reason[0] && sig == 0 && w->exit_code == status;
    char subj[32], g[48] = "none";
    snprintf(subj, sizeof subj, "worker %u", k);
    if (a->run.active) ea_rdzv_gen_str(&a->run.gen, g, sizeof g);
    ea__agent_alert(a, EA__ALERT_WORKER_EXIT, EA__SEV_WARNING, subj,
                    "worker exit: worker %u (pid %d, rank %u, gen %s) %s %d%s%s", k, pid,
                    a->run.rank_base + k, g, sig ? "was killed by signal" : "exited with status",
                    sig ? sig : (int)status, said ? ": " : "", said ? w->exit_reason : "");
  }
  if (a->launch) { /* restart mode: launch.c tells finished from failed */
    ea__launch_on_exit(a->launch, k, status, sig);
    return;
  }
  if (a->mode == EA__MODE_LIBRARY && status == 0 && sig == 0 && a->run.active) {
    /* A program that exits 0 has finished (it re-forms in place otherwise). */
    w->state = EA__W_DONE;
    w->done_gen = a->run.g64;
    ea_log(EA_LOG_INFO, "worker", "worker %u finished (exit status 0)", k);
    ea__agent_local_done_check(a, w->next_step);
    return;
  }
  a->worker_failures++;
  ea__agent_stall(a, "a worker exited");
  ea__agent_job_worker_crashed(a, k, status, sig); /* the controller counts it (flapping) */
  /* A library program says why before it exits (`exiting`, e.g.
   * "RuntimeError: …"): that reason goes with the failure. */
  bool said = w->exit_reason[0] && sig == 0 && w->exit_code == status;
  ea_log(EA_LOG_WARN, "worker", "worker %u failure: exited status=%" PRId64 " signal=%d%s%s", k,
         status, sig, said ? ": " : "", said ? w->exit_reason : "");
  uint32_t max = a->o->cfg.runtime.max_restarts;
  /* Library mode: the failure report says at once that this worker is
   * starting again, so the others re-form without this node rather than
   * wait for the new process's imports (it comes back after its hello). */
  ea__intent in[2];
  size_t n = 0;
  if (a->mode == EA__MODE_LIBRARY && w->restarts < max)
    in[n++] = (ea__intent){.kind = EA__DO_WORKER_STARTING, .worker = k, .on = true};
  in[n++] = (ea__intent){.kind = EA__DO_WORKER_FAILED, .worker = k};
  ea__agent_do(a, in, n);
  if (a->phase >= EA__PHASE_STOPPING) return; /* the report drained us */
  if (w->restarts >= max) {
    ea_log(EA_LOG_ERROR, "worker",
           "worker %u failed %u time%s after %u restart%s (runtime.max_restarts): draining "
           "this node",
           k, w->restarts + 1, w->restarts ? "s" : "", w->restarts, w->restarts == 1 ? "" : "s");
    ea__agent_begin_drain(a, "a worker kept failing", false);
    return;
  }
  w->restarts++;
  a->worker_restarts++;
  w->state = EA__W_STARTING;
  w->hello = false;
  w->exit_reason[0] = 0;
  ea__agent_update_starting(a);
  int rc = ea__sup_start(a->sup, k);
  ea_log(rc ? EA_LOG_ERROR : EA_LOG_INFO, "worker", "worker %u restart %u of %u%s%s", k,
         w->restarts, max, rc ? ": " : "", rc ? strerror(-rc) : "");
  if (rc) {
    w->state = EA__W_EXITED;
    ea__agent_begin_drain(a, "a worker cannot be restarted", false);
  }
}

/* ---- start ------------------------------------------------------------------------ */

/* compute.warm_start: the path of _warm.py in launcher, or "" when workers
 * start cold (`on` with a program that cannot was refused before, by
 * ea__agent_job_preflight). */
static void warm_setup(ea__agent *a, char *launcher, size_t cap) {
  launcher[0] = 0;
  const ea_config *c = &a->o->cfg;
  char why[600] = "";
  if (ea__launch_warm(c, a->mode, a->o->worker_argc, a->o->worker_argv, why, sizeof why) != 0) {
    if (strcmp(c->compute.warm_start, "off") != 0)
      ea_log(EA_LOG_INFO, "start", "warm start: off: %s", why);
    return;
  }
  char dir[EA_PATH_MAX];
  int rc = ea__launch_python_home(dir, sizeof dir);
  snprintf(launcher, cap, "%.4000s/elastic_agent/_warm.py", dir);
  if (rc || access(launcher, R_OK) != 0) {
    ea_log(EA_LOG_WARN, "start",
           "warm start: off: %s is missing (make install puts it in "
           "PREFIX/lib/elastic-agent/python; or set EA_PYTHONPATH)",
           rc ? "python/elastic_agent/_warm.py" : launcher);
    launcher[0] = 0;
    return;
  }
  ea_log(EA_LOG_INFO, "start",
         "warm start: one warm interpreter per local rank, preloading %s (compute.warm_start %s)",
         c->compute.preload[0] ? c->compute.preload : "nothing", c->compute.warm_start);
}

int ea__agent_workers_start(ea__agent *a, char *err, size_t errlen) {
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
  for (uint32_t k = 0; k < a->wpn; k++) a->w[k].compute_s = -1;
  /* Workers listen on the address the cluster knows this node by. */
  ea_addr cb = *ea_transport_addr(a->tr);
  cb.port = 0;
  char bind[80];
  ea_addr_str(&cb, bind, sizeof bind);
  uint32_t grace = a->o->cfg.runtime.stop_grace_seconds * 1000u;
  char launcher[EA_PATH_MAX + 64];
  warm_setup(a, launcher, sizeof launcher);
  ea__sup_opts so = {.workers = a->wpn,
                     .worker_command = a->o->cfg.compute.worker_command,
                     .argv = a->o->worker_argc > 0 ? a->o->worker_argv : NULL,
                     .no_ipc = a->mode == EA__MODE_TORCHRUN,
                     .config_path = a->job_path,
                     .comm_bind = bind,
                     .train_steps = a->o->cfg.train.steps,
                     .stop_grace_ms = grace,
                     .term_grace_ms = grace,
                     .warm_launcher = launcher,
                     .preload = a->o->cfg.compute.preload,
                     .spare_delay_ms = EA__SUP_SPARE_DELAY_MS};
  ea__sup_cbs cb2 = {.on_message = on_worker_msg, .on_exit = on_worker_exit, .on_spare = on_spare};
  int rc = ea__agent_ckpt_start(a, err, errlen);
  if (rc < 0) return rc;
  rc = ea__sup_new(&a->loop, &so, &cb2, a, &a->sup);
  if (rc < 0) {
    snprintf(err, errlen, "worker supervisor: %s", strerror(-rc));
    return rc;
  }
  if (a->mode == EA__MODE_TORCHRUN) return ea__agent_restart_start(a, err, errlen);
  ea__sup_spares_start(a->sup);
  rc = ea__sup_start_all(a->sup);
  if (rc < 0) {
    snprintf(err, errlen, "cannot start the workers: %s", uv_strerror(rc));
    return rc;
  }
  ea__agent_update_starting(a); /* none has said hello yet */
  return 0;
}
