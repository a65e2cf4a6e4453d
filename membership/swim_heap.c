/* swim_heap.c — the indexed binary min-heap under the dissemination queue
 * and the suspicion timers (why indexed, and why items carry their key:
 * swim_heap.h).  A textbook heap; sift-up stops at an equal parent and
 * sift-down at an equal child, so equal keys never move needlessly.
 */
#include "swim_heap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void ea__heap_init(ea__heap *h) {
  memset(h, 0, sizeof *h);
}

int ea__heap_reserve(ea__heap *h, uint32_t cap) {
  if (cap <= h->cap) return 0;
  ea__heap_item *ni = realloc(h->items, (size_t)cap * sizeof *ni);
  if (!ni) return -ENOMEM;
  h->items = ni;
  uint32_t *np = realloc(h->pos, (size_t)cap * sizeof *np);
  if (!np) return -ENOMEM;
  h->pos = np;
  for (uint32_t i = h->cap; i < cap; i++) h->pos[i] = EA__NONE;
  h->cap = cap;
  return 0;
}

void ea__heap_close(ea__heap *h) {
  free(h->items);
  free(h->pos);
  memset(h, 0, sizeof *h);
}

static void place(ea__heap *h, uint32_t at, ea__heap_item it) {
  h->items[at] = it;
  h->pos[it.id] = at;
}

static uint32_t sift_up(ea__heap *h, uint32_t at) {
  ea__heap_item it = h->items[at];
  while (at > 0) {
    uint32_t par = (at - 1) / 2;
    if (h->items[par].key <= it.key) break;
    place(h, at, h->items[par]);
    at = par;
  }
  place(h, at, it);
  return at;
}

static void sift_down(ea__heap *h, uint32_t at) {
  ea__heap_item it = h->items[at];
  for (;;) {
    uint32_t c = 2 * at + 1;
    if (c >= h->n) break;
    if (c + 1 < h->n && h->items[c + 1].key < h->items[c].key) c++;
    if (h->items[c].key >= it.key) break;
    place(h, at, h->items[c]);
    at = c;
  }
  place(h, at, it);
}

void ea__heap_push(ea__heap *h, uint32_t id, uint64_t key) {
  h->n++;
  place(h, h->n - 1, (ea__heap_item){key, id});
  sift_up(h, h->n - 1);
}

void ea__heap_remove(ea__heap *h, uint32_t id) {
  uint32_t at = h->pos[id];
  h->pos[id] = EA__NONE;
  h->n--;
  if (at < h->n) {
    place(h, at, h->items[h->n]);
    if (at > 0 && h->items[at].key < h->items[(at - 1) / 2].key)
      sift_up(h, at);
    else
      sift_down(h, at);
  }
}

void ea__heap_update(ea__heap *h, uint32_t id, uint64_t key) {
  uint32_t at = h->pos[id];
  h->items[at].key = key;
  sift_down(h, sift_up(h, at));
}
