/* sim.c — the deterministic simulator (see sim.h for what it models).
 *
 * Built for speed at thousands of nodes.  Events live in a timing wheel of
 * 1 ms buckets covering the next WHEEL_MS (delays, probes, gossip and
 * suspicion timers all fall inside it: O(1) push and pop), with a binary
 * heap for the few far-off ones (push-pull, reaping); pop takes the smaller
 * of the wheel's next bucket head and the heap top by (time, sequence), and
 * the sequence makes equal-time events replay in the same order.  At most
 * one live timer entry per node:
 * after every call into a core its next deadline is re-read and pushed only
 * if earlier than the entry already queued; an entry that no longer matches
 * the node's schedule is skipped when it pops.  Addresses encode the node
 * index (198.18.0.0/15, the benchmarking range), so routing a packet is
 * arithmetic, not a lookup.  In the fast (struct) mode a packet stores only
 * the header and the updates it carries, and push-pull merges one core's
 * table straight into another's (ea__swim_merge_core), sharing interned
 * metadata instead of copying 5000 records per exchange.
 */
#include "sim.h"

#include "ea_base.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NEVER UINT64_MAX
#define SIM_PORT 7946
/* Wheel span: longer than any delay, probe, gossip or suspicion timer at the
 * default config (max suspicion at 5000 nodes is 6.7 s); a power of two. */
#define WHEEL_MS 16384u
#define NIL UINT32_MAX
/* The part of an ea_update before its metadata. */
#define UPD_FIXED offsetof(ea_update, meta)

enum { N_DOWN = 0, N_UP, N_PAUSED, N_CRASHED };
enum { EV_TIMER = 1, EV_DELIVER, EV_SYNC_REMOTE, EV_SYNC_REPLY, EV_RESUME };

typedef struct node node;

struct node {
  ea_sim *sim;
  uint32_t idx;
  uint8_t status;
  uint8_t side;
  uint32_t epoch; /* bumps on crash/restart: in-flight push-pull replies die */
  uint64_t sched; /* time of this node's queued timer entry, NEVER if none */
  ea_swim *core;
  ea_node_id id;
};

typedef struct {
  uint64_t t, seq;
  void *p;
  uint32_t node;
  uint32_t kind;
} ev;

typedef struct {
  uint32_t from, to;
  uint32_t len; /* bytes (codec) or update count (struct) */
  uint8_t data[];
} pkt;

typedef struct {
  uint32_t from, to;
  uint32_t from_epoch;
  uint8_t kind;
  uint8_t *bytes; /* codec mode: encoded state of the sender of this leg */
  size_t len;
} sync_req;

typedef struct {
  uint64_t key;
  double p;
} link_loss;

struct ea_sim {
  ea_sim_config cfg;
  uint64_t now;
  ea_rng rng;
  node *nodes; /* compact: the hot per-event lookups stay in cache */
  ea_meta *metas;
  size_t n;
  ev *heap; /* events at or beyond now + WHEEL_MS when pushed */
  size_t nheap, capheap;
  struct wnode {
    ev e;
    uint32_t next;
  } * pool; /* wheel entries, free list */
  uint32_t npool, cappool, pool_free;
  uint32_t whead[WHEEL_MS], wtail[WHEEL_MS];
  uint64_t wbits[WHEEL_MS / 64]; /* non-empty buckets */
  size_t nwheel;
  uint64_t wcur; /* wheel time: every wheel event is in [wcur, wcur + WHEEL_MS) */
  uint64_t evseq;
  ea_msg *rx;     /* scratch for delivery */
  uint8_t *txbuf; /* scratch for encoding */
  struct {
    uint32_t from;
    ea_addr to;
    uint8_t kind;
  } * pending; /* io->sync calls made inside a core call */
  size_t npending, cappending;
  link_loss *links; /* open addressing on key = from<<32|to */
  size_t nlinks, caplinks;
  ea_node_id *sorted_ids; /* for index_of */
  uint32_t *sorted_idx;
  ea_sim_observer obs;
  void *obs_ctx;
  ea_sim_stats st;
  long tr_a, tr_b; /* EA_SIM_TRACE=A,B (trace_pkt); -1: off */
};

/* ---- randomness: base's ea_rng, domain EA_RNG_SIM ---- */

static uint64_t rnd(ea_sim *sim) {
  return ea_rng_next(&sim->rng);
}

static double rnd01(ea_sim *sim) {
  return ea_rng_double(&sim->rng);
}

static uint32_t delay(ea_sim *sim) {
  uint32_t lo = sim->cfg.delay_min_ms, hi = sim->cfg.delay_max_ms;
  if (hi <= lo) return lo;
  return lo + ea_rng_below(&sim->rng, (uint64_t)(hi - lo) + 1);
}

uint64_t ea_sim_env_seed(void) {
  const char *e = getenv("EA_SEED");
  if (e && *e) return strtoull(e, NULL, 0);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t x = (uint64_t)ts.tv_sec * 1000000007ULL ^ (uint64_t)ts.tv_nsec;
  return ea_splitmix64(&x) & 0xffffffffffffULL; /* short enough to type back in */
}

/* ---- event queue: far heap + timing wheel ---- */

static bool ev_less(const ev *a, const ev *b) {
  return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static int heap_push(ea_sim *sim, ev e) {
  if (sim->nheap == sim->capheap) {
    size_t nc = sim->capheap ? sim->capheap * 2 : 1024;
    ev *nh = realloc(sim->heap, nc * sizeof *nh);
    if (!nh) return -ENOMEM;
    sim->heap = nh;
    sim->capheap = nc;
  }
  size_t i = sim->nheap++;
  while (i > 0) {
    size_t par = (i - 1) / 2;
    if (!ev_less(&e, &sim->heap[par])) break;
    sim->heap[i] = sim->heap[par];
    i = par;
  }
  sim->heap[i] = e;
  return 0;
}

static ev heap_pop(ea_sim *sim) {
  ev top = sim->heap[0];
  ev last = sim->heap[--sim->nheap];
  size_t i = 0, n = sim->nheap;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && ev_less(&sim->heap[c + 1], &sim->heap[c])) c++;
    if (!ev_less(&sim->heap[c], &last)) break;
    sim->heap[i] = sim->heap[c];
    i = c;
  }
  if (n) sim->heap[i] = last;
  return top;
}

static int push(ea_sim *sim, uint64_t t, uint32_t kind, uint32_t nodei, void *p) {
  ev e = {t < sim->wcur ? sim->wcur : t, sim->evseq++, p, nodei, kind};
  if (e.t - sim->wcur >= WHEEL_MS) return heap_push(sim, e);
  uint32_t k;
  if (sim->pool_free != NIL) {
    k = sim->pool_free;
    sim->pool_free = sim->pool[k].next;
  } else {
    if (sim->npool == sim->cappool) {
      uint32_t nc = sim->cappool ? sim->cappool * 2 : 1024;
      struct wnode *np = realloc(sim->pool, (size_t)nc * sizeof *np);
      if (!np) return -ENOMEM;
      sim->pool = np;
      sim->cappool = nc;
    }
    k = sim->npool++;
  }
  sim->pool[k].e = e;
  sim->pool[k].next = NIL;
  uint32_t b = (uint32_t)(e.t & (WHEEL_MS - 1));
  if (sim->whead[b] == NIL) {
    sim->whead[b] = k;
    sim->wbits[b / 64] |= 1ULL << (b % 64);
  } else {
    sim->pool[sim->wtail[b]].next = k;
  }
  sim->wtail[b] = k;
  sim->nwheel++;
  return 0;
}

/* Time of the first non-empty bucket at or after wcur, or NEVER. */
static uint64_t wheel_next(const ea_sim *sim) {
  if (!sim->nwheel) return NEVER;
  uint32_t b = (uint32_t)(sim->wcur & (WHEEL_MS - 1));
  for (uint32_t scanned = 0; scanned < WHEEL_MS + 64;) {
    uint64_t w = sim->wbits[b / 64] >> (b % 64);
    if (w) return sim->wcur + scanned + (uint32_t)__builtin_ctzll(w);
    uint32_t step = 64 - b % 64;
    scanned += step;
    b = (b + step) & (WHEEL_MS - 1);
  }
  return NEVER;
}

/* Pop the earliest event if its time is <= limit. */
static bool pop(ea_sim *sim, uint64_t limit, ev *out) {
  uint64_t tw = wheel_next(sim);
  const ev *hw = NULL;
  uint32_t b = 0;
  if (tw != NEVER) {
    b = (uint32_t)(tw & (WHEEL_MS - 1));
    hw = &sim->pool[sim->whead[b]].e;
  }
  bool from_heap = sim->nheap && (!hw || ev_less(&sim->heap[0], hw));
  uint64_t t = from_heap ? sim->heap[0].t : (hw ? hw->t : NEVER);
  if (t == NEVER || t > limit) return false;
  if (from_heap) {
    *out = heap_pop(sim);
  } else {
    uint32_t k = sim->whead[b];
    *out = sim->pool[k].e;
    sim->whead[b] = sim->pool[k].next;
    if (sim->whead[b] == NIL) sim->wbits[b / 64] &= ~(1ULL << (b % 64));
    sim->pool[k].next = sim->pool_free;
    sim->pool_free = k;
    sim->nwheel--;
  }
  sim->wcur = t;
  return true;
}

/* ---- addressing ---- */

static void make_addr(size_t i, ea_addr *a) {
  memset(a, 0, sizeof *a);
  a->family = 4;
  a->port = SIM_PORT;
  a->ip[0] = 198;
  a->ip[1] = (uint8_t)(18 + (i >> 16));
  a->ip[2] = (uint8_t)(i >> 8);
  a->ip[3] = (uint8_t)i;
}

static long addr_index(const ea_sim *sim, const ea_addr *a) {
  if (a->family != 4 || a->port != SIM_PORT || a->ip[0] != 198 || a->ip[1] < 18 || a->ip[1] > 19)
    return -1;
  size_t i = ((size_t)(a->ip[1] - 18) << 16) | ((size_t)a->ip[2] << 8) | a->ip[3];
  return i < sim->n ? (long)i : -1;
}

/* ---- per-link loss ---- */

static double link_p(const ea_sim *sim, uint32_t from, uint32_t to) {
  if (!sim->nlinks) return 0;
  uint64_t key = (uint64_t)from << 32 | to;
  size_t mask = sim->caplinks - 1, i = (size_t)(key * 0x9e3779b97f4a7c15ULL >> 20) & mask;
  while (sim->links[i].key) {
    if (sim->links[i].key == key + 1) return sim->links[i].p;
    i = (i + 1) & mask;
  }
  return 0;
}

void ea_sim_set_link_loss(ea_sim *sim, size_t from, size_t to, double p) {
  if ((sim->nlinks + 1) * 2 > sim->caplinks) {
    size_t nc = sim->caplinks ? sim->caplinks * 2 : 64;
    link_loss *nl = calloc(nc, sizeof *nl);
    if (!nl) return;
    for (size_t i = 0; i < sim->caplinks; i++) {
      if (!sim->links[i].key) continue;
      uint64_t k = sim->links[i].key - 1;
      size_t j = (size_t)(k * 0x9e3779b97f4a7c15ULL >> 20) & (nc - 1);
      while (nl[j].key) j = (j + 1) & (nc - 1);
      nl[j] = sim->links[i];
    }
    free(sim->links);
    sim->links = nl;
    sim->caplinks = nc;
  }
  uint64_t key = (uint64_t)from << 32 | to;
  size_t mask = sim->caplinks - 1, i = (size_t)(key * 0x9e3779b97f4a7c15ULL >> 20) & mask;
  while (sim->links[i].key && sim->links[i].key != key + 1) i = (i + 1) & mask;
  if (!sim->links[i].key) sim->nlinks++;
  sim->links[i].key = key + 1; /* 0 marks an empty slot */
  sim->links[i].p = p;
}

/* ---- the seam ---- */

/* Keep exactly one valid timer entry per node, at its current deadline.  A
 * deadline that moved (later, when an ack cancels the probe timeout) gets a
 * new entry; the old one is recognised as stale by the node's `sched` alone
 * when it pops, without touching the (cold) core. */
static void reschedule(node *nd) {
  ea_sim *sim = nd->sim;
  if (nd->status != N_UP || !nd->core) return;
  uint64_t dl = ea_swim_next_deadline(nd->core);
  if (dl != NEVER && dl < sim->now) dl = sim->now;
  if (dl == nd->sched) return;
  nd->sched = dl;
  if (dl != NEVER) push(sim, dl, EV_TIMER, nd->idx, NULL);
}

/* EA_SIM_TRACE=A,B: every packet between nodes A and B, and every packet
 * to A that carries news of B, on stderr with the updates about A or B —
 * how a false DEAD came about (bench/gossip --trace names the pair). */
static void trace_pkt(const ea_sim *sim, uint32_t from, long to, const ea_msg *m, bool lost) {
  long a = sim->tr_a, b = sim->tr_b;
  bool between = (from == a && to == b) || (from == b && to == a);
  bool news = false;
  for (uint32_t i = 0; i < m->nupdates && !between && !news; i++)
    news = to == a && ea_sim_index_of(sim, &m->updates[i].id) == b;
  if (!between && !news) return;
  static const char *types[] = {"?", "ping", "ack", "ping-req", "nack", "gossip"};
  static const char *states[] = {"alive", "suspect", "dead", "left"};
  fprintf(stderr, "sim: t=%" PRIu64 " %u→%ld %s seq=%" PRIu32 " target=%ld%s:", sim->now, from, to,
          m->type < 6 ? types[m->type] : "?", m->seq, ea_sim_index_of(sim, &m->target),
          lost ? " LOST" : "");
  for (uint32_t i = 0; i < m->nupdates; i++) {
    long id = ea_sim_index_of(sim, &m->updates[i].id);
    if (id != a && id != b) continue;
    const ea_update *u = &m->updates[i];
    fprintf(stderr, " [%ld %s/%" PRIu32 " from %ld%s mi=%" PRIu32 "]", id,
            u->state < 4 ? states[u->state] : "?", u->incarnation, ea_sim_index_of(sim, &u->from),
            u->has_meta ? " +meta" : "", u->meta_inc);
  }
  fprintf(stderr, " (%" PRIu32 " updates)\n", m->nupdates);
}

static void io_send(void *ctx, const ea_addr *to, const ea_msg *m) {
  node *nd = ctx;
  ea_sim *sim = nd->sim;
  sim->st.packets_sent++;
  size_t bytes = 0;
  pkt *p = NULL;
  if (sim->cfg.codec) {
    if (ea_wire_encode_msg(m, sim->txbuf, EA_WIRE_MAX_PACKET * 4, &bytes) != 0) {
      sim->st.codec_errors++;
      return;
    }
  } else {
    bytes = ea_wire_msg_base_size(m);
    for (uint32_t i = 0; i < m->nupdates; i++) bytes += ea_wire_update_size(&m->updates[i]);
  }
  sim->st.bytes_sent += bytes;
  if (bytes > sim->cfg.swim.max_packet) sim->st.oversize++;
  long dst = addr_index(sim, to);
  if (dst < 0) {
    sim->st.dropped_down++;
    return;
  }
  if (sim->nodes[dst].side != nd->side) {
    sim->st.dropped_partition++;
    return;
  }
  double pl = sim->cfg.loss, pk = link_p(sim, nd->idx, (uint32_t)dst);
  bool lost = (pl > 0 || pk > 0) && rnd01(sim) < 1.0 - (1.0 - pl) * (1.0 - pk);
  if (sim->tr_a >= 0) trace_pkt(sim, nd->idx, dst, m, lost);
  if (lost) {
    sim->st.dropped_loss++;
    return;
  }
  if (sim->cfg.codec) {
    p = malloc(sizeof *p + bytes);
    if (!p) return;
    memcpy(p->data, sim->txbuf, bytes);
    p->len = (uint32_t)bytes;
  } else {
    /* Compact: an update's metadata (most of its 330 bytes) only when it
     * has any — SUSPECT and DEAD updates, the bulk under loss, carry none. */
    size_t hdr = offsetof(ea_msg, updates), body = 0;
    for (uint32_t i = 0; i < m->nupdates; i++)
      body += UPD_FIXED + (m->updates[i].has_meta ? sizeof(ea_meta) : 0);
    p = malloc(sizeof *p + hdr + body);
    if (!p) return;
    memcpy(p->data, m, hdr);
    uint8_t *w = p->data + hdr;
    for (uint32_t i = 0; i < m->nupdates; i++) {
      memcpy(w, &m->updates[i], UPD_FIXED);
      w += UPD_FIXED;
      if (m->updates[i].has_meta) {
        memcpy(w, &m->updates[i].meta, sizeof(ea_meta));
        w += sizeof(ea_meta);
      }
    }
    p->len = m->nupdates;
  }
  p->from = nd->idx;
  p->to = (uint32_t)dst;
  push(sim, sim->now + delay(sim), EV_DELIVER, (uint32_t)dst, p);
}

static void io_sync(void *ctx, const ea_addr *to, ea_sync_kind kind) {
  node *nd = ctx;
  ea_sim *sim = nd->sim;
  if (sim->npending == sim->cappending) {
    size_t nc = sim->cappending ? sim->cappending * 2 : 16;
    void *np = realloc(sim->pending, nc * sizeof *sim->pending);
    if (!np) return;
    sim->pending = np;
    sim->cappending = nc;
  }
  sim->pending[sim->npending].from = nd->idx;
  sim->pending[sim->npending].to = *to;
  sim->pending[sim->npending].kind = (uint8_t)kind;
  sim->npending++;
}

static void io_change(void *ctx, const ea_member *m, uint8_t old) {
  node *nd = ctx;
  if (nd->sim->obs) nd->sim->obs(nd->sim->obs_ctx, nd->idx, m, old, nd->sim->now);
}

/* Encoded state of a node, for a push-pull leg in codec mode. */
static int encode_state(ea_sim *sim, node *nd, uint8_t kind, uint8_t **out, size_t *len) {
  ea_update *ups;
  size_t n;
  int rc = ea_swim_export(nd->core, &ups, &n);
  if (rc) return rc;
  rc = ea_wire_encode_state(kind, &nd->id, ups, n, out, len);
  free(ups);
  if (rc) sim->st.codec_errors++;
  return rc;
}

static void merge_leg(ea_sim *sim, node *dst, node *src, sync_req *r) {
  if (sim->cfg.codec) {
    ea_update *ups = NULL;
    size_t n = 0;
    uint8_t kind;
    ea_node_id from;
    const char *err = NULL;
    if (ea_wire_decode_state(r->bytes, r->len, &kind, &from, &ups, &n, &err) != 0) {
      sim->st.codec_errors++;
      return;
    }
    ea_swim_merge(dst->core, sim->now, ups, n);
    free(ups);
  } else {
    ea__swim_merge_core(dst->core, sim->now, src->core);
  }
}

static void flush_syncs(ea_sim *sim) {
  for (size_t i = 0; i < sim->npending; i++) {
    node *from = &sim->nodes[sim->pending[i].from];
    long to = addr_index(sim, &sim->pending[i].to);
    sim->st.syncs++;
    if (to < 0) {
      sim->st.syncs_failed++;
      continue;
    }
    sync_req *r = calloc(1, sizeof *r);
    if (!r) continue;
    r->from = from->idx;
    r->to = (uint32_t)to;
    r->from_epoch = from->epoch;
    r->kind = sim->pending[i].kind;
    if (sim->cfg.codec) {
      if (encode_state(sim, from, r->kind, &r->bytes, &r->len) != 0) {
        free(r);
        continue;
      }
      sim->st.sync_bytes += r->len;
    } else {
      sim->st.sync_bytes += ea__swim_export_bytes(from->core);
    }
    /* TCP: a connect and a transfer, no loss (retransmitted), but no route
     * across a partition or to a stopped peer (checked on arrival). */
    push(sim, sim->now + delay(sim), EV_SYNC_REMOTE, (uint32_t)to, r);
  }
  sim->npending = 0;
}

/* After any call into a node's core. */
static void after_call(ea_sim *sim, node *nd) {
  if (sim->npending) flush_syncs(sim);
  reschedule(nd);
}

static void sync_remote(ea_sim *sim, sync_req *r) {
  node *from = &sim->nodes[r->from], *to = &sim->nodes[r->to];
  if (to->status != N_UP || !to->core || to->side != from->side) {
    sim->st.syncs_failed++;
    free(r->bytes);
    free(r);
    return;
  }
  merge_leg(sim, to, from, r);
  free(r->bytes);
  r->bytes = NULL;
  if (sim->cfg.codec) {
    if (encode_state(sim, to, r->kind, &r->bytes, &r->len) != 0) {
      free(r);
      after_call(sim, to);
      return;
    }
    sim->st.sync_bytes += r->len;
  } else {
    sim->st.sync_bytes += ea__swim_export_bytes(to->core);
  }
  after_call(sim, to);
  push(sim, sim->now + delay(sim), EV_SYNC_REPLY, r->from, r);
}

static void sync_reply(ea_sim *sim, sync_req *r) {
  node *from = &sim->nodes[r->from], *to = &sim->nodes[r->to];
  if (from->status == N_UP && from->core && from->epoch == r->from_epoch &&
      from->side == to->side) {
    merge_leg(sim, from, to, r);
    after_call(sim, from);
  } else {
    sim->st.syncs_failed++;
  }
  free(r->bytes);
  free(r);
}

static void deliver(ea_sim *sim, pkt *p) {
  node *nd = &sim->nodes[p->to];
  if (nd->status != N_UP || !nd->core) {
    sim->st.dropped_down++;
    free(p);
    return;
  }
  ea_msg *m = sim->rx;
  if (sim->cfg.codec) {
    const char *err = NULL;
    if (ea_wire_decode_msg(p->data, p->len, m, &err) != 0) {
      sim->st.codec_errors++;
      free(p);
      return;
    }
  } else {
    size_t hdr = offsetof(ea_msg, updates);
    memcpy(m, p->data, hdr);
    const uint8_t *r = p->data + hdr;
    for (uint32_t i = 0; i < p->len; i++) {
      memcpy(&m->updates[i], r, UPD_FIXED);
      r += UPD_FIXED;
      if (m->updates[i].has_meta) {
        memcpy(&m->updates[i].meta, r, sizeof(ea_meta));
        r += sizeof(ea_meta);
      }
    }
  }
  ea_addr from;
  make_addr(p->from, &from);
  free(p);
  sim->st.packets_delivered++;
  ea_swim_recv(nd->core, sim->now, &from, m);
  after_call(sim, nd);
}

static void timer(ea_sim *sim, uint64_t t, node *nd) {
  if (nd->status != N_UP || !nd->core || t != nd->sched) return; /* stale entry */
  nd->sched = NEVER;
  ea_swim_tick(nd->core, sim->now);
  after_call(sim, nd);
}

/* ---- construction ---- */

void ea_sim_config_default(ea_sim_config *c, size_t n, uint64_t seed) {
  memset(c, 0, sizeof *c);
  c->n = n;
  c->seed = seed;
  ea_swim_config_default(&c->swim);
  c->delay_min_ms = 1;
  c->delay_max_ms = 5;
  c->loss = 0;
  c->codec = true;
}

static int start_core(ea_sim *sim, node *nd) {
  ea_swim_io io = {
      .ctx = nd, .send = io_send, .sync = io_sync, .on_change = sim->obs ? io_change : NULL};
  uint64_t x = sim->cfg.seed ^ ((uint64_t)nd->idx << 20) ^ ((uint64_t)nd->epoch << 48);
  uint64_t seed = ea_splitmix64(&x);
  nd->core = ea_swim_new(&sim->cfg.swim, &nd->id, &sim->metas[nd->idx], &io, seed, sim->now);
  if (!nd->core) return -ENOMEM;
  nd->status = N_UP;
  nd->sched = NEVER;
  reschedule(nd);
  return 0;
}

static int cmp_sorted(const void *a, const void *b, void *ctx) {
  const ea_node_id *ids = ctx;
  return ea_node_id_cmp(&ids[*(const uint32_t *)a], &ids[*(const uint32_t *)b]);
}

ea_sim *ea_sim_new(const ea_sim_config *c) {
  ea_sim *sim = calloc(1, sizeof *sim);
  if (!sim) return NULL;
  sim->cfg = *c;
  sim->n = c->n;
  sim->pool_free = NIL;
  sim->tr_a = sim->tr_b = -1;
  const char *tr = getenv("EA_SIM_TRACE");
  if (tr && sscanf(tr, "%ld,%ld", &sim->tr_a, &sim->tr_b) != 2) sim->tr_a = sim->tr_b = -1;
  for (uint32_t b = 0; b < WHEEL_MS; b++) sim->whead[b] = NIL;
  ea_rng_seed(&sim->rng, c->seed, EA_RNG_SIM, 0);
  sim->nodes = calloc(c->n ? c->n : 1, sizeof *sim->nodes);
  sim->metas = calloc(c->n ? c->n : 1, sizeof *sim->metas);
  sim->rx = malloc(sizeof *sim->rx);
  sim->txbuf = malloc(EA_WIRE_MAX_PACKET * 4);
  sim->sorted_ids = malloc((c->n ? c->n : 1) * sizeof *sim->sorted_ids);
  sim->sorted_idx = malloc((c->n ? c->n : 1) * sizeof *sim->sorted_idx);
  if (!sim->nodes || !sim->metas || !sim->rx || !sim->txbuf || !sim->sorted_ids ||
      !sim->sorted_idx) {
    ea_sim_free(sim);
    return NULL;
  }
  ea_node_id *ids = malloc((c->n ? c->n : 1) * sizeof *ids);
  if (!ids) {
    ea_sim_free(sim);
    return NULL;
  }
  for (size_t i = 0; i < c->n; i++) {
    node *nd = &sim->nodes[i];
    nd->sim = sim;
    nd->idx = (uint32_t)i;
    nd->sched = NEVER;
    for (int k = 0; k < 2; k++) {
      uint64_t r = rnd(sim);
      memcpy(nd->id.b + 8 * k, &r, 8);
    }
    ids[i] = nd->id;
    snprintf(sim->metas[i].name, sizeof sim->metas[i].name, "n%zu", i);
    make_addr(i, &sim->metas[nd->idx].gossip);
    sim->metas[i].control = sim->metas[i].gossip;
    sim->metas[i].control.port = SIM_PORT + 1;
    snprintf(sim->metas[i].role, sizeof sim->metas[i].role, "worker");
    snprintf(sim->metas[i].version, sizeof sim->metas[i].version, "sim");
    sim->sorted_idx[i] = (uint32_t)i;
  }
  qsort_r(sim->sorted_idx, c->n, sizeof *sim->sorted_idx, cmp_sorted, ids);
  for (size_t i = 0; i < c->n; i++) sim->sorted_ids[i] = ids[sim->sorted_idx[i]];
  free(ids);
  for (size_t i = 0; i < c->n; i++) {
    if (start_core(sim, &sim->nodes[i]) != 0) {
      ea_sim_free(sim);
      return NULL;
    }
  }
  return sim;
}

void ea_sim_free(ea_sim *sim) {
  if (!sim) return;
  ev e;
  while (pop(sim, NEVER - 1, &e)) {
    if (e.kind == EV_DELIVER) free(e.p);
    if (e.kind == EV_SYNC_REMOTE || e.kind == EV_SYNC_REPLY) {
      sync_req *r = e.p;
      free(r->bytes);
      free(r);
    }
  }
  free(sim->pool);
  for (size_t i = 0; sim->nodes && i < sim->n; i++) ea_swim_free(sim->nodes[i].core);
  free(sim->nodes);
  free(sim->metas);
  free(sim->heap);
  free(sim->rx);
  free(sim->txbuf);
  free(sim->pending);
  free(sim->links);
  free(sim->sorted_ids);
  free(sim->sorted_idx);
  free(sim);
}

uint64_t ea_sim_seed(const ea_sim *sim) {
  return sim->cfg.seed;
}
uint64_t ea_sim_now(const ea_sim *sim) {
  return sim->now;
}
size_t ea_sim_size(const ea_sim *sim) {
  return sim->n;
}
ea_swim *ea_sim_core(ea_sim *sim, size_t i) {
  return i < sim->n ? sim->nodes[i].core : NULL;
}
const ea_node_id *ea_sim_id(const ea_sim *sim, size_t i) {
  return &sim->nodes[i].id;
}
const ea_addr *ea_sim_addr(const ea_sim *sim, size_t i) {
  return &sim->metas[i].gossip;
}
bool ea_sim_is_up(const ea_sim *sim, size_t i) {
  return i < sim->n && sim->nodes[i].status == N_UP;
}

long ea_sim_index_of(const ea_sim *sim, const ea_node_id *id) {
  size_t lo = 0, hi = sim->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = ea_node_id_cmp(&sim->sorted_ids[mid], id);
    if (c == 0) return sim->sorted_idx[mid];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return -1;
}

/* ---- lifecycle ---- */

void ea_sim_join(ea_sim *sim, size_t i, size_t seed) {
  node *nd = &sim->nodes[i];
  if (nd->status != N_UP) return;
  ea_swim_join(nd->core, sim->now, &sim->metas[seed].gossip, 1);
  after_call(sim, nd);
}

/* The bootstrap directory's LEFT announcement goes nowhere. */
static void dir_send(void *ctx, const ea_addr *to, const ea_msg *m) {
  (void)ctx;
  (void)to;
  (void)m;
}

void ea_sim_bootstrap(ea_sim *sim) {
  /* A directory core learns everyone, then leaves (so its own LEFT record
   * teaches the others nothing), and every node merges it while it still
   * knows only itself — so nobody re-gossips what everybody already knows. */
  ea_node_id dir_id;
  memset(&dir_id, 0xff, sizeof dir_id);
  ea_meta dm;
  memset(&dm, 0, sizeof dm);
  make_addr(sim->n, &dm.gossip); /* outside the node range: unroutable */
  ea_swim_io io = {.ctx = NULL, .send = dir_send, .sync = NULL, .on_change = NULL};
  ea_swim *dir = ea_swim_new(&sim->cfg.swim, &dir_id, &dm, &io, 1, sim->now);
  if (!dir) return;
  for (size_t i = 0; i < sim->n; i++)
    if (sim->nodes[i].status == N_UP) ea__swim_merge_core(dir, sim->now, sim->nodes[i].core);
  /* Leaving marks the directory's own record LEFT (its announcement goes
   * to dir_send, and it is never ticked), and a stranger's LEFT record
   * teaches a node nothing. */
  ea_swim_leave(dir, sim->now);
  for (size_t i = 0; i < sim->n; i++) {
    node *nd = &sim->nodes[i];
    if (nd->status != N_UP) continue;
    ea__swim_merge_core(nd->core, sim->now, dir);
    ea__swim_settle(nd->core);
    after_call(sim, nd);
  }
  ea_swim_free(dir);
}

void ea_sim_crash(ea_sim *sim, size_t i) {
  node *nd = &sim->nodes[i];
  nd->status = N_CRASHED;
  nd->sched = NEVER;
  nd->epoch++;
}

void ea_sim_pause(ea_sim *sim, size_t i, uint64_t ms) {
  node *nd = &sim->nodes[i];
  if (nd->status != N_UP) return;
  nd->status = N_PAUSED;
  nd->sched = NEVER;
  push(sim, sim->now + ms, EV_RESUME, (uint32_t)i, NULL);
}

void ea_sim_restart_at(ea_sim *sim, size_t i, size_t seed, uint32_t inc) {
  node *nd = &sim->nodes[i];
  ea_swim_free(nd->core);
  nd->core = NULL;
  nd->epoch++;
  if (start_core(sim, nd) != 0) {
    nd->status = N_CRASHED;
    return;
  }
  if (inc) ea_swim_set_incarnation(nd->core, sim->now, inc);
  ea_sim_join(sim, i, seed);
}

void ea_sim_restart(ea_sim *sim, size_t i, size_t seed) {
  ea_sim_restart_at(sim, i, seed, 0);
}

void ea_sim_leave(ea_sim *sim, size_t i) {
  node *nd = &sim->nodes[i];
  if (nd->status != N_UP) return;
  ea_swim_leave(nd->core, sim->now);
  after_call(sim, nd);
}

void ea_sim_set_meta(ea_sim *sim, size_t i, const ea_meta *meta) {
  node *nd = &sim->nodes[i];
  sim->metas[i] = *meta;
  if (nd->status != N_UP) return;
  ea_swim_set_meta(nd->core, sim->now, meta);
  after_call(sim, nd);
}

bool ea_sim_probe_soon(ea_sim *sim, size_t i, size_t target, bool gone) {
  node *nd = &sim->nodes[i];
  if (nd->status != N_UP) return false;
  const ea_node_id *id = ea_sim_id(sim, target);
  bool yes =
      gone ? ea_swim_peer_gone(nd->core, sim->now, id) : ea_swim_probe_soon(nd->core, sim->now, id);
  after_call(sim, nd);
  return yes;
}

/* ---- network ---- */

void ea_sim_set_loss(ea_sim *sim, double p) {
  sim->cfg.loss = p;
}

void ea_sim_set_delay(ea_sim *sim, uint32_t min_ms, uint32_t max_ms) {
  sim->cfg.delay_min_ms = min_ms;
  sim->cfg.delay_max_ms = max_ms < min_ms ? min_ms : max_ms;
}

void ea_sim_partition(ea_sim *sim, const uint8_t *side) {
  for (size_t i = 0; i < sim->n; i++) sim->nodes[i].side = side[i];
}

void ea_sim_heal(ea_sim *sim) {
  for (size_t i = 0; i < sim->n; i++) sim->nodes[i].side = 0;
}

/* ---- time ---- */

void ea_sim_run_until(ea_sim *sim, uint64_t t_ms) {
  ev e;
  while (pop(sim, t_ms, &e)) {
    sim->now = e.t;
    sim->st.events++;
    node *nd = &sim->nodes[e.node < sim->n ? e.node : 0];
    switch (e.kind) {
      case EV_TIMER:
        timer(sim, e.t, nd);
        break;
      case EV_DELIVER:
        deliver(sim, e.p);
        break;
      case EV_SYNC_REMOTE:
        sync_remote(sim, e.p);
        break;
      case EV_SYNC_REPLY:
        sync_reply(sim, e.p);
        break;
      case EV_RESUME:
        if (nd->status == N_PAUSED) {
          nd->status = N_UP;
          nd->sched = NEVER;
          /* The time jump: everything that came due while frozen runs now. */
          ea_swim_tick(nd->core, sim->now);
          after_call(sim, nd);
        }
        break;
    }
  }
  if (t_ms > sim->now) sim->now = t_ms;
}

void ea_sim_run_for(ea_sim *sim, uint64_t ms) {
  ea_sim_run_until(sim, sim->now + ms);
}

bool ea_sim_run_until_cond(ea_sim *sim, uint64_t deadline, uint64_t step_ms,
                           bool (*cond)(ea_sim *sim, void *ctx), void *ctx) {
  if (step_ms == 0) step_ms = 1;
  for (;;) {
    if (cond(sim, ctx)) return true;
    if (sim->now >= deadline) return false;
    uint64_t next = sim->now + step_ms;
    ea_sim_run_until(sim, next < deadline ? next : deadline);
  }
}

/* ---- observation ---- */

void ea_sim_set_observer(ea_sim *sim, ea_sim_observer fn, void *ctx) {
  sim->obs = fn;
  sim->obs_ctx = ctx;
  for (size_t i = 0; i < sim->n; i++)
    if (sim->nodes[i].core) ea__swim_set_on_change(sim->nodes[i].core, fn ? io_change : NULL);
}

int ea_sim_view_state(const ea_sim *sim, size_t observer, size_t target, uint32_t *inc) {
  const node *o = &sim->nodes[observer];
  if (!o->core) return -1;
  return ea__swim_state_of(o->core, &sim->nodes[target].id, inc);
}

void ea_sim_stats_get(const ea_sim *sim, ea_sim_stats *out) {
  *out = sim->st;
}

/* ---- the detection bound (derivation in swim.c) ---- */

void ea_sim_detect_bound(const ea_swim_config *c, size_t n, double eps, uint32_t dmax,
                         ea_sim_bound *b) {
  memset(b, 0, sizeof *b);
  double I = c->probe_interval_ms, G = c->gossip_interval_ms,
         g = c->gossip_nodes ? c->gossip_nodes : 1;
  double N = (double)(n > 1 ? n : 2);
  double j = ceil(log(1.0 / eps));
  double mn = floor(c->suspicion_mult * log10(N > 10 ? N : 10) * I);
  double mx = (c->suspicion_max_mult ? c->suspicion_max_mult : 1) * mn;
  double K = c->suspicion_mult > 2 ? c->suspicion_mult - 2 : 0;
  if (N - 2 < K) K = 0;
  b->first_probe_ms = j * I;
  b->suspect_ms = I;
  /* The K-th independent confirmation arrives about K probe intervals after
   * the first suspicion, plus a gossip hop; if that beats min, min rules. */
  b->suspicion_ms = (K * I + G + 2.0 * dmax <= mn) ? mn : mx;
  /* Pittel: push gossip with fanout g reaches all N in log_{g+1} N + ln N / g rounds. */
  b->spread_rounds = (uint32_t)ceil(log(N) / log(g + 1) + log(N) / g);
  b->spread_ms = b->spread_rounds * (G + dmax);
  b->total_ms = b->first_probe_ms + b->suspect_ms + b->suspicion_ms + b->spread_ms;
  b->lower_ms = I - dmax + mn;
  if (b->lower_ms < 0) b->lower_ms = 0;
  b->expected_ms = I * M_E / (M_E - 1.0) + b->suspicion_ms + b->spread_ms;
}
