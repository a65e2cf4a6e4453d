/* libFuzzer harness for the rendezvous control-message decoder
 * (rdzv/rdzv_wire.c over base/mpread.c), and for the state machine
 * behind it (rdzv/rdzv.c): whatever decodes is fed to fresh cores.
 *
 * Beyond "no crash, no sanitizer report", it checks the codec's promises:
 * a failed decode names a field and leaves nothing allocated; whatever
 * decodes re-encodes, decodes again to an equal message, and re-encodes to
 * the same bytes (the encoding is canonical).  Then the message is delivered
 * to two cores whose views hold its sender, one idle and one that is
 * controller of a formation in progress, twice each (duplicates happen),
 * and their timers are run: arbitrary input must not crash the protocol.
 * A mismatch aborts, which libFuzzer reports as a crash with the input saved.
 *
 * Build and run through scripts/fuzz.sh (make fuzz).  Seeds:
 * tests/fuzz/corpus/rdzv, one valid frame of each message type, written by
 * this same file built as a program:
 *   make && cc -DFUZZ_RDZV_MAKE_CORPUS $(make -s print-cflags) tests/fuzz/fuzz_rdzv.c build/libea.a
 * \
 *      $(make -s print-libs) -o /tmp/mk && /tmp/mk tests/fuzz/corpus/rdzv
 */
#include "ea_rdzv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                       \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      fprintf(stderr, "fuzz_rdzv: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                            \
    }                                                                                     \
  } while (0)

/* Three members, ids 01…, 02…, 03…: the seeds use these as senders. */
static ea_member view[3];

static void setup_view(void) {
  for (int i = 0; i < 3; i++) {
    memset(&view[i], 0, sizeof view[i]);
    memset(view[i].id.b, i + 1, 16);
    view[i].state = EA_STATE_ALIVE;
    snprintf(view[i].meta.name, sizeof view[i].meta.name, "n%d", i + 1);
    snprintf(view[i].meta.role, sizeof view[i].meta.role, "worker");
    view[i].meta.control.family = 4;
    view[i].meta.control.port = (uint16_t)(7000 + i);
  }
}

#ifndef FUZZ_RDZV_MAKE_CORPUS

static bool gen_same(const ea_rdzv_gen *a, const ea_rdzv_gen *b) {
  return a->term == b->term && memcmp(a->ctrl.b, b->ctrl.b, 16) == 0;
}

static bool addr_same(const ea_addr *a, const ea_addr *b) {
  return a->family == b->family && a->port == b->port && memcmp(a->ip, b->ip, 16) == 0;
}

static bool worker_same(const ea_rdzv_worker *a, const ea_rdzv_worker *b) {
  return addr_same(&a->listen, &b->listen) && a->step == b->step;
}

static bool msg_same(const ea_rdzv_msg *a, const ea_rdzv_msg *b) {
  if (a->type != b->type || memcmp(a->src.b, b->src.b, 16) || !gen_same(&a->gen, &b->gen))
    return false;
  switch (a->type) {
    case EA_RDZV_PREPARE:
      return a->world == b->world && a->wpn == b->wpn && a->rank_base == b->rank_base &&
             a->boundary == b->boundary;
    case EA_RDZV_READY:
      if (a->nworkers != b->nworkers || a->has_nccl_id != b->has_nccl_id ||
          !gen_same(&a->formed, &b->formed) || a->restarts != b->restarts)
        return false;
      for (uint32_t i = 0; i < a->nworkers; i++)
        if (!worker_same(&a->workers[i], &b->workers[i])) return false;
      return !a->has_nccl_id || memcmp(a->nccl_id, b->nccl_id, sizeof a->nccl_id) == 0;
    case EA_RDZV_COMMIT: {
      const ea_rdzv_plan *p = &a->plan, *q = &b->plan;
      if (p->nnodes != q->nnodes || p->wpn != q->wpn || p->world != q->world ||
          p->has_sync != q->has_sync || (p->has_sync && p->sync_rank != q->sync_rank) ||
          p->sync_step != q->sync_step || p->has_nccl_id != q->has_nccl_id ||
          !gen_same(&p->gen, &q->gen) || p->restarts != q->restarts)
        return false;
      if (p->has_nccl_id && memcmp(p->nccl_id, q->nccl_id, sizeof p->nccl_id)) return false;
      for (uint32_t i = 0; i < p->nnodes; i++)
        if (memcmp(p->nodes[i].id.b, q->nodes[i].id.b, 16) ||
            strcmp(p->nodes[i].name, q->nodes[i].name) ||
            !addr_same(&p->nodes[i].control, &q->nodes[i].control))
          return false;
      for (uint32_t i = 0; i < p->world; i++)
        if (!worker_same(&p->ranks[i], &q->ranks[i])) return false;
      return true;
    }
    case EA_RDZV_NACK:
      return gen_same(&a->seen, &b->seen) && a->nack == b->nack;
    case EA_RDZV_DRAIN:
      return strcmp(a->name, b->name) == 0 && memcmp(a->target.b, b->target.b, 16) == 0 &&
             a->target_inc == b->target_inc;
    case EA_RDZV_REPORT:
      return gen_same(&a->accepted, &b->accepted) && a->flags == b->flags;
    case EA_RDZV_STATE:
      if (a->plan.nnodes != b->plan.nnodes) return false;
      for (uint32_t i = 0; i < a->plan.nnodes; i++)
        if (memcmp(a->plan.nodes[i].id.b, b->plan.nodes[i].id.b, 16)) return false;
      return true;
    case EA_RDZV_BLAME:
      return memcmp(a->peer.b, b->peer.b, 16) == 0;
    default:
      return true;
  }
}

/* ---- the cores ---------------------------------------------------------- */

static uint64_t persisted_pending;
static ea_rdzv_gen persist_gen;

static void io_send(void *ctx, const ea_node_id *to, const ea_addr *c, const ea_rdzv_msg *m) {
  (void)ctx, (void)to, (void)c;
  /* what the core sends must always be encodable */
  uint8_t *buf = NULL;
  size_t len = 0;
  CHECK(ea_rdzv_encode(m, &buf, &len) == 0);
  free(buf);
}
static void io_order(void *ctx, const ea_rdzv_order *o) {
  (void)ctx, (void)o;
}
static void io_persist(void *ctx, const ea_rdzv_gen *g) {
  (void)ctx;
  persisted_pending = 1;
  persist_gen = *g;
}

static void finish_persist(ea_rdzv *r, uint64_t now) {
  for (int k = 0; k < 4 && persisted_pending; k++) {
    persisted_pending = 0;
    ea_rdzv_persisted(r, now, &persist_gen, 0);
  }
}

/* self = n1 (the controller: lowest id) or n2; each gets m twice. */
static void feed(const ea_rdzv_msg *m, int self) {
  ea_rdzv_config c;
  ea_rdzv_config_default(&c);
  c.min_nodes = 2;
  c.max_nodes = 3;
  c.workers_per_node = 2;
  c.scale_up_delay_ms = 0;
  c.rendezvous_timeout_ms = 1000;
  ea_rdzv_io io = {.send = io_send, .order = io_order, .persist = io_persist};
  persisted_pending = 0;
  ea_rdzv *r = ea_rdzv_new(&c, &view[self].id, NULL, &io, 1, 0);
  CHECK(r != NULL);
  ea_rdzv_view(r, 1, view, 3);
  finish_persist(r, 2); /* the controller's first formation reaches PREPARE */
  ea_addr listen = {.family = 4, .port = 9000};
  ea_rdzv_status st;
  ea_rdzv_status_get(r, &st);
  for (uint32_t k = 0; k < 2; k++) /* its own workers answer their PREPARE */
    ea_rdzv_worker_ready(r, 3, k, &st.accepted, &listen, 5, 0, NULL);
  ea_rdzv_recv(r, 4, m);
  finish_persist(r, 5);
  ea_rdzv_recv(r, 6, m);
  finish_persist(r, 7);
  for (uint64_t t = 10; t < 10000; t += 500) ea_rdzv_tick(r, t);
  ea_rdzv_free(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static bool init;
  if (!init) {
    setup_view();
    init = true;
  }
  ea_rdzv_msg m, again;
  const char *err = NULL;
  int rc = ea_rdzv_decode(data, size, &m, &err);
  if (rc != 0) {
    CHECK(rc == -EA_EWIRE && err != NULL);
    CHECK(m.plan.nodes == NULL && m.plan.ranks == NULL);
    return 0;
  }
  uint8_t *re = NULL, *re2 = NULL;
  size_t len = 0, len2 = 0;
  CHECK(ea_rdzv_encode(&m, &re, &len) == 0);
  CHECK(ea_rdzv_decode(re, len, &again, NULL) == 0);
  CHECK(msg_same(&m, &again));
  CHECK(ea_rdzv_encode(&again, &re2, &len2) == 0);
  CHECK(len == len2 && memcmp(re, re2, len) == 0);
  free(re);
  free(re2);
  ea_rdzv_msg_release(&again);
  feed(&m, 0);
  feed(&m, 1);
  ea_rdzv_msg_release(&m);
  return 0;
}

#else /* a program that writes the seed corpus */

static const char *g_dir;

static void put(const char *name, const ea_rdzv_msg *m) {
  uint8_t *buf;
  size_t len;
  if (ea_rdzv_encode(m, &buf, &len) != 0) {
    fprintf(stderr, "cannot encode %s\n", name);
    exit(1);
  }
  char path[512];
  snprintf(path, sizeof path, "%s/%s", g_dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
    perror(path);
    exit(1);
  }
  free(buf);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  g_dir = argv[1];
  setup_view();
  ea_rdzv_gen g1 = {.term = 1}, g2 = {.term = 2};
  memset(g1.ctrl.b, 1, 16);
  memset(g2.ctrl.b, 2, 16);
  ea_rdzv_msg m;

  memset(&m, 0, sizeof m);
  m.type = EA_RDZV_PREPARE;
  m.src = view[1].id;
  m.gen = g2;
  m.world = 6;
  m.wpn = 2;
  m.rank_base = 2;
  m.boundary = true;
  put("prepare", &m);

  memset(&m, 0, sizeof m);
  m.type = EA_RDZV_READY;
  m.src = view[1].id;
  m.gen = g1;
  m.formed = g1;
  m.nworkers = 2;
  m.workers[0] = (ea_rdzv_worker){{.family = 4, .port = 9001}, 7};
  m.workers[1] = (ea_rdzv_worker){{.family = 6, .port = 9002}, 7};
  m.has_nccl_id = true;
  memset(m.nccl_id, 0x5a, sizeof m.nccl_id);
  put("ready", &m);
  m.restarts = 2;
  put("ready-restarts", &m);
  m.restarts = 0;

  ea_rdzv_node nodes[2];
  ea_rdzv_worker ranks[4];
  memset(nodes, 0, sizeof nodes);
  for (int i = 0; i < 2; i++) {
    nodes[i].id = view[i].id;
    snprintf(nodes[i].name, sizeof nodes[i].name, "n%d", i + 1);
    nodes[i].control = view[i].meta.control;
  }
  for (int i = 0; i < 4; i++)
    ranks[i] = (ea_rdzv_worker){{.family = 4, .port = (uint16_t)(9000 + i)}, 3};
  memset(&m, 0, sizeof m);
  m.type = EA_RDZV_COMMIT;
  m.src = view[0].id;
  m.gen = g1;
  m.plan = (ea_rdzv_plan){.gen = g1,
                          .nnodes = 2,
                          .wpn = 2,
                          .world = 4,
                          .nodes = nodes,
                          .ranks = ranks,
                          .has_sync = true,
                          .sync_rank = 0,
                          .sync_step = 3};
  put("commit", &m);
  /* restart mode: the job's restart count as the extra last element */
  m.plan.restarts = 3;
  put("commit-restarts", &m);
  m.plan.restarts = 0;

  memset(&m, 0, sizeof m);
  m.type = EA_RDZV_NACK;
  m.src = view[1].id;
  m.gen = g1;
  m.seen = g2;
  m.nack = EA_RDZV_NACK_STALE;
  put("nack", &m);

  memset(&m, 0, sizeof m);
  m.type = EA_RDZV_ABORT;
  m.src = view[0].id;
  m.gen = g1;
  put("abort", &m);

  memset(&m, 0, sizeof m);
  m.type = EA_RDZV_DRAIN;
  m.src = view[2].id;
  snprintf(m.name, sizeof m.name, "n1");
  m.target = view[0].id;
  m.target_inc = 1796224317u;
  put("drain", &m);

  memset(&m, 0, sizeof m);
  m.type = EA_RDZV_REPORT;
  m.src = view[2].id;
  m.gen = g1;
  m.accepted = g1;
  m.flags = EA_RDZV_F_FAILED | EA_RDZV_F_DRAINING;
  put("report", &m);
  m.flags = EA_RDZV_F_FAILED | EA_RDZV_F_STARTING;
  put("report-starting", &m);

  memset(&m, 0, sizeof m);
  m.type = EA_RDZV_QUERY;
  m.src = view[0].id;
  put("query", &m);

  memset(&m, 0, sizeof m);
  m.type = EA_RDZV_STATE;
  m.src = view[1].id;
  m.gen = g2;
  m.plan.nnodes = 2;
  m.plan.nodes = nodes;
  put("state", &m);

  memset(&m, 0, sizeof m);
  m.type = EA_RDZV_RELEASE;
  m.src = view[0].id;
  m.gen = g2;
  put("release", &m);

  memset(&m, 0, sizeof m);
  m.type = EA_RDZV_BLAME;
  m.src = view[2].id;
  m.gen = g1;
  m.peer = view[1].id;
  put("blame", &m);
  return 0;
}

#endif
