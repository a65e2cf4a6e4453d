/* swim_queue.c — the dissemination queue (its promises: swim_queue.h).
 *
 * SWIM spreads news by piggybacking it on the probe traffic, so the order
 * in which queued updates go out decides how fast a death or a refutation
 * reaches everyone.  Entries live in a pool (stable indices, so the core
 * can keep one handle per member for O(1) invalidation) and the pool is
 * ordered by an indexed heap on one 64-bit key:
 *     key = !first << 63 | transmits << 55 | (~order & (2^55 − 1))
 * refutations (entries pushed with ea__bq_push_first) ahead of everything,
 * then fewer transmissions first, then larger enqueue sequence (newer)
 * first.  2^55 enqueues per core is beyond any run, and transmits ≤ 255.
 */
#include "swim_queue.h"

#include "ea_membership.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Refutations first, then fewer transmissions, then newer: the key orders
 * exactly so. */
static uint64_t q_key(const ea__qent *e) {
  return (uint64_t)!e->first << 63 | (uint64_t)e->transmits << 55 |
         (~e->order & ((1ULL << 55) - 1));
}

void ea__bq_init(ea__bq *q, ea__bq_slot_fn slot, void *ctx) {
  memset(q, 0, sizeof *q);
  ea__heap_init(&q->heap);
  q->free = EA__NONE;
  q->slot = slot;
  q->ctx = ctx;
  ea_update u = {.state = EA_STATE_DEAD};
  q->min_size = ea_wire_update_size(&u);
}

void ea__bq_close(ea__bq *q) {
  for (uint32_t i = 0; i < q->heap.n; i++) ea__meta_release(q->pool[q->heap.items[i].id].meta);
  ea__heap_close(&q->heap);
  free(q->pool);
  q->pool = NULL;
  q->cap = 0;
  q->free = EA__NONE;
}

/* Give pool entry k back: the owner's handle is cleared, the entry goes on
 * the free list (it must already be out of the heap). */
static void release_slot(ea__bq *q, uint32_t k) {
  *q->slot(q->ctx, q->pool[k].key) = EA__NONE;
  q->pool[k].next_free = q->free;
  q->free = k;
}

void ea__bq_drop(ea__bq *q, uint32_t k) {
  ea__meta_blob *meta = q->pool[k].meta;
  ea__heap_remove(&q->heap, k);
  release_slot(q, k);
  ea__meta_release(meta);
}

void ea__bq_rekey(ea__bq *q, uint32_t k, uint32_t key) {
  q->pool[k].key = key;
}

void ea__bq_clear(ea__bq *q) {
  while (q->heap.n) ea__bq_drop(q, q->heap.items[q->heap.n - 1].id);
}

static void fill_update(const ea__qent *e, ea_update *u) {
  u->state = e->state;
  u->incarnation = e->inc;
  u->id = e->id;
  u->from = e->from;
  u->has_meta = e->meta != NULL;
  u->meta_inc = e->meta ? 0 : e->meta_inc;
  if (e->meta) u->meta = e->meta->m;
}

static int push_entry(ea__bq *q, const ea__qent *e) {
  if (q->free == EA__NONE) {
    uint32_t nc = q->cap ? q->cap * 2 : 64;
    ea__qent *np = realloc(q->pool, (size_t)nc * sizeof *np);
    if (!np) return -ENOMEM;
    q->pool = np;
    if (ea__heap_reserve(&q->heap, nc) != 0) return -ENOMEM;
    for (uint32_t k = nc; k-- > q->cap;) {
      q->pool[k].next_free = q->free;
      q->free = k;
    }
    q->cap = nc;
  }
  uint32_t k = q->free;
  q->free = q->pool[k].next_free;
  q->pool[k] = *e;
  *q->slot(q->ctx, e->key) = k;
  ea__heap_push(&q->heap, k, q_key(e));
  return 0;
}

static int push_common(ea__bq *q, uint32_t key, const ea_node_id *id, const ea_node_id *from,
                       uint8_t state, uint32_t inc, ea__meta_blob *meta, uint32_t meta_inc,
                       bool first) {
  ea__qent e = {.id = *id,
                .from = *from,
                .inc = inc,
                .state = state,
                .first = first,
                .key = key,
                .order = ++q->order,
                .meta_inc = meta_inc};
  if (state == EA_STATE_ALIVE && meta) e.meta = ea__meta_retain(meta);
  ea_update u;
  fill_update(&e, &u);
  size_t sz = ea_wire_update_size(&u);
  e.size = (uint16_t)(sz > UINT16_MAX ? UINT16_MAX : sz);
  uint32_t old = *q->slot(q->ctx, key);
  if (old != EA__NONE) ea__bq_drop(q, old);
  int rc = push_entry(q, &e);
  if (rc != 0) ea__meta_release(e.meta);
  return rc;
}

int ea__bq_push(ea__bq *q, uint32_t key, const ea_node_id *id, const ea_node_id *from,
                uint8_t state, uint32_t inc, ea__meta_blob *meta, uint32_t meta_inc) {
  return push_common(q, key, id, from, state, inc, meta, meta_inc, false);
}

int ea__bq_push_first(ea__bq *q, uint32_t key, const ea_node_id *id, const ea_node_id *from,
                      uint8_t state, uint32_t inc, ea__meta_blob *meta, uint32_t meta_inc) {
  return push_common(q, key, id, from, state, inc, meta, meta_inc, true);
}

/* Whether the packet already holds what entry e would add: the caller's own
 * updates (the refutation an ack to an accuser starts with) about the same
 * member at the same state and incarnation, with metadata if e has it. */
static bool carried(const ea_msg *msg, uint32_t pre, const ea__qent *e) {
  for (uint32_t i = 0; i < pre; i++) {
    const ea_update *u = &msg->updates[i];
    if (u->state == e->state && u->incarnation == e->inc && (u->has_meta || !e->meta) &&
        memcmp(&u->id, &e->id, sizeof e->id) == 0)
      return true;
  }
  return false;
}

uint32_t ea__bq_fill(ea__bq *q, ea_msg *msg, size_t left, uint32_t limit) {
  uint32_t taken[EA_WIRE_MAX_UPDATES + 8];
  bool incl[EA_WIRE_MAX_UPDATES + 8];
  uint32_t nt = 0, misfits = 0, added = 0;
  const uint32_t pre = msg->nupdates;
  /* Entries are unlinked from the heap while the packet is filled (so none
   * is picked twice) and relinked with their new count after: pool slots and
   * the owner's handles stay put, which keeps this off the member table.
   * Past 8 updates that did not fit, stop looking for smaller ones: the
   * packet is as good as full, and a long queue would make this O(queue). */
  while (q->heap.n && misfits < 8 && msg->nupdates < EA_WIRE_MAX_UPDATES && left >= q->min_size) {
    uint32_t k = q->heap.items[0].id;
    ea__heap_remove(&q->heap, k);
    ea__qent *e = &q->pool[k];
    if (pre && carried(msg, pre, e)) {
      incl[nt] = true; /* goes out in this packet: counts as a transmission */
    } else if ((incl[nt] = e->size <= left)) {
      fill_update(e, &msg->updates[msg->nupdates++]);
      left -= e->size;
      added++;
    } else {
      misfits++;
    }
    taken[nt++] = k;
  }
  for (uint32_t i = 0; i < nt; i++) {
    ea__qent *e = &q->pool[taken[i]];
    if (incl[i] && ++e->transmits >= limit) {
      ea__meta_release(e->meta);
      release_slot(q, taken[i]);
      continue;
    }
    ea__heap_push(&q->heap, taken[i], q_key(e));
  }
  return added;
}
