/* agent_fake.h — a partial agent for unit tests of agent/'s glue (drain.c,
 * ident.c, job_glue.c, ckpt_glue.c): the least of ea__agent_run
 * that lets those files run in one process.
 *
 * What is real: the libuv loop and the agent's own handles
 * (ea__agent_handles_init: the settle idle, the rendezvous, drain and tick
 * timers, the signal handles, none started), a temporary data dir with its
 * node-id, the gossip transport bound to 127.0.0.1:0, the pure rendezvous
 * core configured as the agent configures it (ea__agent_rdzv_config) with
 * the agent's own order handler (workers.c's ea__agent_io_order), the worker
 * supervisor (slots only: no worker process is ever spawned), and the
 * product's shutdown (drain.c's ea__agent_shutdown) at the end, after which
 * the loop must close with no handle left.
 *
 * What is fake: the control channel (none: the core's messages are
 * recorded, the last DRAIN's name kept), the generation file (io.persist is
 * recorded and acknowledged by fa_pump as durable, as agent.c's gen_after
 * would), the workers (fa_pump answers a PREPARE with READY for every local
 * slot), and the settle turn (fa_settle hands the member table to the core
 * as agent.c's on_settle does, without the identity filter: tests of
 * ident.c call it themselves).  Peers are real transports on the same loop
 * (fa_peer_add), so a member table holds what gossip put there.
 *
 * Time is the loop's: the code under test reads uv_now, so waits are
 * polls of the loop with a deadline (fa_run_until), never sleeps.
 *
 * Header-only (static functions): tests/unit/test_*.c are built one file
 * each against libea.a.
 */
#ifndef EA_AGENT_FAKE_H
#define EA_AGENT_FAKE_H

#include "agent_int.h"

#include "ea_log.h"

#include <check.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define FA_PEERS_MAX 6
#define FA_WAIT_MS 5000 /* every wait's deadline: loopback gossip answers in ms */

typedef struct {
  ea_transport *tr;
  ea_node_id id;
  bool gone; /* closed */
} fa_peer;

typedef struct {
  ea__agent a; /* first: the core's io ctx is &a, the fixture is found from it */
  ea__agent_opts o;
  char tmp[64];
  /* recorded from the rendezvous core */
  uint32_t sent[256]; /* messages by type */
  char drain_name[EA_NAME_MAX];
  uint32_t orders[8]; /* by ea_rdzv_order_kind */
  bool persist_pending;
  ea_rdzv_gen persist_gen;
  uint64_t readied_g64; /* the generation fa_pump last answered READY for */
  uint32_t changes;     /* membership changes seen by the transport */
  fa_peer peers[FA_PEERS_MAX];
  size_t npeers;
} fa;

static inline fa *fa_of(ea__agent *a) {
  return (fa *)((char *)a - offsetof(fa, a));
}

static void fa_rm_rf(const char *dir) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

/* ---- the core's io ------------------------------------------------------------ */

static void fa_io_send(void *ctx, const ea_node_id *to, const ea_addr *control,
                       const ea_rdzv_msg *m) {
  (void)to;
  (void)control;
  fa *f = fa_of(ctx);
  f->sent[m->type]++;
  if (m->type == EA_RDZV_DRAIN) snprintf(f->drain_name, sizeof f->drain_name, "%s", m->name);
}

static void fa_io_order(void *ctx, const ea_rdzv_order *o) {
  fa *f = fa_of(ctx);
  if (o->kind < 8) f->orders[o->kind]++;
  ea__agent_io_order(ctx, o); /* the agent's own: a->prep, a->run, DRAINED */
}

static void fa_io_persist(void *ctx, const ea_rdzv_gen *g) {
  fa *f = fa_of(ctx);
  f->persist_pending = true;
  f->persist_gen = *g;
}

static void fa_io_reason(void *ctx, const char *text) {
  (void)ctx;
  ea_log(EA_LOG_DEBUG, "rdzv", "%s", text);
}

static void fa_on_change(void *ctx, const ea_member *m, uint8_t old_state) {
  (void)m;
  (void)old_state;
  ((fa *)ctx)->changes++;
}

static void fa_sup_msg(void *ctx, uint32_t idx, const ea_ipc_msg *m) {
  (void)ctx;
  (void)idx;
  (void)m;
}

static void fa_sup_exit(void *ctx, uint32_t idx, int64_t st, int sig) {
  (void)ctx;
  (void)idx;
  (void)st;
  (void)sig;
}

/* ---- set-up ------------------------------------------------------------------- */

/* Options with a fresh data dir; change f->o before fa_start. */
static void fa_init(fa *f, const char *name) {
  memset(f, 0, sizeof *f);
  snprintf(f->tmp, sizeof f->tmp, "/tmp/ea-test-glue-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(f->tmp));
  ea__agent_opts_default(&f->o);
  snprintf(f->o.name, sizeof f->o.name, "%s", name);
  snprintf(f->o.data_dir, sizeof f->o.data_dir, "%s/data", f->tmp);
  snprintf(f->o.bind, sizeof f->o.bind, "127.0.0.1:0");
  ea_config *c = &f->o.cfg;
  c->compute.min_nodes = 1;
  c->compute.workers_per_node = 1;
  c->distributed.scale_up_delay_ms = 0;
  c->runtime.rendezvous_timeout_seconds = 5;
  c->checkpoint.save_interval_steps = 0;
}

/* The agent's parts, in ea__agent_run's order, for launch mode `mode`. */
static void fa_start(fa *f, ea__mode mode) {
  ea__agent *a = &f->a;
  char err[EA_PATH_MAX + 256];
  bool created = false;
  a->o = &f->o;
  a->mode = mode;
  a->backend = EA_COMM_TCP; /* pick_backend's answer for a CPU-only node */
  ck_assert_msg(ea__data_dir_prepare(f->o.data_dir, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(ea__node_id_load(f->o.data_dir, &a->id, &created, err, sizeof err) == 0, "%s", err);
  ea_node_id_hex(&a->id, a->idhex);
  a->sender.id = a->id;
  ck_assert_msg(
      ea__agent_ckpt_dir_resolve(&f->o, a->ckpt_dir, sizeof a->ckpt_dir, err, sizeof err) == 0,
      "%s", err);
  ck_assert_int_eq(mkdir(a->ckpt_dir, 0700), 0);
  a->wpn = f->o.cfg.compute.workers_per_node;
  a->w = calloc(a->wpn ? a->wpn : 1, sizeof *a->w);
  a->ipc = malloc(sizeof *a->ipc);
  ck_assert(a->w && a->ipc);

  ck_assert_int_eq(uv_loop_init(&a->loop), 0);
  a->start_ms = uv_now(&a->loop);
  ea__agent_handles_init(a); /* the agent's own, as ea__agent_run's */

  ea_transport_opts to = {.bind = f->o.bind,
                          .swim = f->o.cfg.membership,
                          .self = a->id,
                          .sender = &a->sender,
                          .seed = 1,
                          .ctx = f,
                          .on_change = fa_on_change};
  snprintf(to.meta.name, sizeof to.meta.name, "%s", f->o.name);
  snprintf(to.meta.role, sizeof to.meta.role, "%s", f->o.role);
  snprintf(to.meta.tags, sizeof to.meta.tags, "%s", f->o.tags);
  ck_assert_msg(ea_transport_start(&a->loop, &to, &a->tr, err, sizeof err) == 0, "%s", err);
  a->meta = ea_swim_self(ea_transport_swim(a->tr))->meta;

  /* The rendezvous as agent.c's start_rdzv configures it. */
  ea_rdzv_config rc;
  ea__agent_rdzv_config(a, &rc);
  ea_rdzv_io io = {.ctx = a,
                   .send = fa_io_send,
                   .order = fa_io_order,
                   .persist = fa_io_persist,
                   .reason = fa_io_reason};
  ea_rdzv_gen persisted = {0};
  a->rdzv = ea_rdzv_new(&rc, &a->id, &persisted, &io, 1, ea__agent_now_ms(a));
  ck_assert_ptr_nonnull(a->rdzv);

  if (a->wpn) {
    ea__sup_opts so = {.workers = a->wpn, .no_ipc = mode == EA__MODE_TORCHRUN};
    ea__sup_cbs cb = {.on_message = fa_sup_msg, .on_exit = fa_sup_exit};
    ck_assert_int_eq(ea__sup_new(&a->loop, &so, &cb, a, &a->sup), 0);
  }
}

/* ---- driving ------------------------------------------------------------------ */

/* What agent.c and the workers would do next: the generation file is
 * durable; every local worker is ready for the generation being prepared. */
static void fa_pump(fa *f) {
  ea__agent *a = &f->a;
  if (a->phase == EA__PHASE_CLOSING) return;
  if (f->persist_pending) {
    f->persist_pending = false;
    ea_rdzv_persisted(a->rdzv, ea__agent_now_ms(a), &f->persist_gen, 0);
    ea__agent_core_done(a);
  }
  if (a->prep.active && f->readied_g64 != a->prep.g64) {
    f->readied_g64 = a->prep.g64;
    for (uint32_t k = 0; k < a->wpn; k++) {
      ea_addr listen;
      ck_assert_int_eq(ea_addr_parse("127.0.0.1", (uint16_t)(20000 + k), &listen), 0);
      a->w[k].state = EA__W_READY;
      ea_rdzv_worker_ready(a->rdzv, ea__agent_now_ms(a), k, &a->prep.gen, &listen, 0, 0, NULL);
    }
    ea__agent_core_done(a);
  }
}

/* Run the loop (and fa_pump) until cond holds or ms pass: whether it held. */
static bool fa_run_until(fa *f, bool (*cond)(fa *), uint64_t ms) {
  uv_update_time(&f->a.loop);
  uint64_t end = uv_now(&f->a.loop) + ms;
  for (;;) {
    fa_pump(f);
    if (cond(f)) return true;
    if (uv_now(&f->a.loop) >= end) return false;
    uv_run(&f->a.loop, UV_RUN_ONCE);
    uv_update_time(&f->a.loop);
  }
}

static bool fa_never(fa *f) {
  (void)f;
  return false;
}

/* Run the loop for ms, whatever happens. */
static void fa_run_for(fa *f, uint64_t ms) {
  (void)fa_run_until(f, fa_never, ms);
}

/* agent.c's settle turn without the identity filter: the member table to
 * the core, the checkpoint committer to whoever the election names. */
static void fa_settle(fa *f) {
  ea__agent *a = &f->a;
  const ea_member *ms;
  size_t n = ea_swim_members(ea_transport_swim(a->tr), &ms);
  ea_rdzv_view(a->rdzv, ea__agent_now_ms(a), ms, n);
  ea__agent_ckpt_ctl_update(a);
  ea__agent_core_done(a);
}

static bool fa_running(fa *f) {
  return f->a.run.active;
}

/* This node alone forms and commits a generation (min_nodes 1). */
static void fa_form(fa *f) {
  fa_settle(f);
  ck_assert_msg(fa_run_until(f, fa_running, FA_WAIT_MS), "no generation formed");
  ea_rdzv_status st;
  ea_rdzv_status_get(f->a.rdzv, &st);
  ck_assert_int_eq(st.phase, EA_RDZV_RUNNING);
  ck_assert(st.controller);
}

/* ---- peers: real transports on the same loop ----------------------------------- */

static const ea_member *fa_member(fa *f, const ea_node_id *id) {
  return ea_swim_find(ea_transport_swim(f->a.tr), id);
}

static size_t fa_want_peer;
static uint8_t fa_want_state;
static bool fa_peer_is(fa *f) {
  const ea_member *m = fa_member(f, &f->peers[fa_want_peer].id);
  return m && m->state == fa_want_state;
}

/* A member named name (tags: its gossip tags, "" none) that joined this
 * agent and is seen alive here; returns its index. */
static size_t fa_peer_add(fa *f, const char *name, const char *tags) {
  ck_assert_uint_lt(f->npeers, FA_PEERS_MAX);
  size_t i = f->npeers++;
  fa_peer *p = &f->peers[i];
  ck_assert_int_eq(getrandom(p->id.b, sizeof p->id.b, 0), (ssize_t)sizeof p->id.b);
  char err[256], seed[64];
  ea_transport_opts to = {.bind = "127.0.0.1:0", .swim = f->o.cfg.membership, .self = p->id};
  ea_swim_config_default(&to.swim);
  to.seed = 100 + i;
  snprintf(to.meta.name, sizeof to.meta.name, "%s", name);
  snprintf(to.meta.role, sizeof to.meta.role, "worker");
  snprintf(to.meta.tags, sizeof to.meta.tags, "%s", tags);
  ck_assert_msg(ea_transport_start(&f->a.loop, &to, &p->tr, err, sizeof err) == 0, "%s", err);
  ea_addr_str(ea_transport_addr(f->a.tr), seed, sizeof seed);
  ck_assert_msg(ea_transport_join(p->tr, seed, NULL, 0, err, sizeof err) == 0, "%s", err);
  fa_want_peer = i;
  fa_want_state = EA_STATE_ALIVE;
  ck_assert_msg(fa_run_until(f, fa_peer_is, FA_WAIT_MS), "peer %s never seen alive", name);
  return i;
}

static void fa_peer_left(void *ctx) {
  (void)ctx;
}

/* Peer i leaves gracefully (LEFT) and is seen so here. */
static void fa_peer_leave(fa *f, size_t i) {
  ea_transport_leave(f->peers[i].tr, fa_peer_left, NULL);
  fa_want_peer = i;
  fa_want_state = EA_STATE_LEFT;
  ck_assert_msg(fa_run_until(f, fa_peer_is, FA_WAIT_MS), "peer %zu never seen left", i);
}

/* ---- tear-down ------------------------------------------------------------------ */

/* The product's shutdown, then every peer; the loop must then close with
 * nothing left open (libuv's habit: a leaked handle fails the test). */
static void fa_free(fa *f) {
  ea__agent *a = &f->a;
  ea__agent_shutdown(a);
  for (size_t i = 0; i < f->npeers; i++)
    if (!f->peers[i].gone) ea_transport_close(f->peers[i].tr, NULL, NULL);
  uv_run(&a->loop, UV_RUN_DEFAULT);
  ck_assert_int_eq(uv_loop_close(&a->loop), 0);
  ea__agent_alerts_free(a);
  ea__agent_spare_free(a);
  ea_rdzv_free(a->rdzv);
  free(a->w);
  free(a->ipc);
  free(a->run_ids);
  fa_rm_rf(f->tmp);
}

#endif
