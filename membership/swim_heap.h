/* swim_heap.h — an indexed binary min-heap of (key, id).
 *
 * The dissemination queue orders its entries by (transmissions, age) and
 * the suspicion timers by deadline; both need the minimum in O(1) and to
 * remove or re-key an arbitrary entry in O(log n), so each entry's place in
 * the heap is tracked: pos[id].  Ids are the caller's pool indices, below
 * the capacity given to ea__heap_reserve().  Items are 16 bytes, so a sift
 * moves the key with the id instead of chasing the caller's pool (a node
 * under heavy loss holds hundreds of queued updates).
 *
 * Equal keys: ties are broken by position only, deterministically — the
 * same sequence of calls gives the same order, which the simulator's replay
 * from a seed relies on.
 *
 * Memory is the caller's struct (zero it, or ea__heap_init); the arrays are
 * the heap's, freed by ea__heap_close.
 */
#ifndef EA_SWIM_HEAP_H
#define EA_SWIM_HEAP_H

#include "swim_int.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
  uint64_t key;
  uint32_t id;
} ea__heap_item;

typedef struct {
  ea__heap_item *items; /* items[0] has the smallest key */
  uint32_t *pos;        /* pos[id]: index into items, EA__NONE when absent */
  uint32_t n;           /* items in the heap */
  uint32_t cap;         /* ids are < cap */
} ea__heap;

void ea__heap_init(ea__heap *h);
/* Room for ids < cap (never shrinks).  0 or -ENOMEM (the heap is unchanged). */
int ea__heap_reserve(ea__heap *h, uint32_t cap);
void ea__heap_close(ea__heap *h);
/* id (< cap) must be absent. */
void ea__heap_push(ea__heap *h, uint32_t id, uint64_t key);
/* id must be present. */
void ea__heap_remove(ea__heap *h, uint32_t id);
/* Change a present id's key, in either direction. */
void ea__heap_update(ea__heap *h, uint32_t id, uint64_t key);

static inline bool ea__heap_contains(const ea__heap *h, uint32_t id) {
  return id < h->cap && h->pos[id] != EA__NONE;
}

/* The minimum, or NULL when empty.  Valid until the next change. */
static inline const ea__heap_item *ea__heap_top(const ea__heap *h) {
  return h->n ? &h->items[0] : NULL;
}

#endif
