/* swim_probelist.c — randomized round-robin probe order (promises:
 * swim_probelist.h).  A shuffled array and a cursor: probing is O(1), a
 * round's reshuffle is O(N) once per N probes, and insert and remove are
 * O(1) swaps, each of which tells the owner where the moved keys now are.
 */
#include "swim_probelist.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void ea__plist_init(ea__plist *p, ea__plist_slot_fn slot, ea__plist_rand_fn below, void *ctx) {
  memset(p, 0, sizeof *p);
  p->slot = slot;
  p->below = below;
  p->ctx = ctx;
}

void ea__plist_close(ea__plist *p) {
  free(p->list);
  p->list = NULL;
  p->n = p->cap = p->cursor = 0;
}

void ea__plist_reserve(ea__plist *p, uint32_t want) {
  if (want <= p->cap) return;
  uint32_t *np = realloc(p->list, (size_t)want * sizeof *np);
  if (!np) return;
  p->list = np;
  p->cap = want;
}

static void put(ea__plist *p, uint32_t pos, uint32_t key) {
  p->list[pos] = key;
  *p->slot(p->ctx, key) = pos;
}

int ea__plist_insert(ea__plist *p, uint32_t key) {
  if (p->n == p->cap) {
    uint32_t nc = p->cap ? p->cap * 2 : 64;
    uint32_t *np = realloc(p->list, (size_t)nc * sizeof *np);
    if (!np) return -ENOMEM;
    p->list = np;
    p->cap = nc;
  }
  /* memberlist: append, then swap with a random position. */
  uint32_t pos = p->below(p->ctx, p->n + 1);
  uint32_t last = p->n++;
  if (pos != last) put(p, last, p->list[pos]);
  put(p, pos, key);
  return 0;
}

void ea__plist_remove(ea__plist *p, uint32_t key) {
  uint32_t pos = *p->slot(p->ctx, key);
  if (pos == EA__NONE) return;
  uint32_t last = p->n - 1;
  if (pos < p->cursor) {
    /* Keep the "already probed this round" prefix intact: fill the hole
     * with the prefix's last entry, and that slot with the list's last. */
    uint32_t c = p->cursor - 1;
    if (c != pos) put(p, pos, p->list[c]);
    if (last != c) put(p, c, p->list[last]);
    p->cursor--;
  } else if (pos != last) {
    put(p, pos, p->list[last]);
  }
  p->n--;
  *p->slot(p->ctx, key) = EA__NONE;
}

static void shuffle(ea__plist *p) {
  for (uint32_t i = p->n; i > 1; i--) {
    uint32_t j = p->below(p->ctx, i);
    uint32_t t = p->list[i - 1];
    p->list[i - 1] = p->list[j];
    p->list[j] = t;
  }
  for (uint32_t i = 0; i < p->n; i++) *p->slot(p->ctx, p->list[i]) = i;
  p->cursor = 0;
}

uint32_t ea__plist_next(ea__plist *p, bool *new_round) {
  *new_round = false;
  if (p->cursor >= p->n) {
    if (p->n == 0) return EA__NONE;
    shuffle(p);
    *new_round = true;
  }
  return p->list[p->cursor++];
}
