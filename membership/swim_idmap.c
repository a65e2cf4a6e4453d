/* swim_idmap.c — the member table's id index (swim_idmap.h says why the ids
 * are not stored here).  Linear probing on ea__id_hash; deletion by
 * backward shift: after emptying a slot, each following entry of the run
 * moves back into the hole unless its home slot lies cyclically between
 * the hole and itself (moving it would put it before its home, where a
 * lookup would never find it).
 */
#include "swim_idmap.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

int ea__idmap_init(ea__idmap *m, uint32_t cap) {
  m->slots = calloc(cap, sizeof *m->slots);
  m->mask = cap - 1;
  return m->slots ? 0 : -ENOMEM;
}

void ea__idmap_close(ea__idmap *m) {
  free(m->slots);
  m->slots = NULL;
  m->mask = 0;
}

void ea__idmap_move(ea__idmap *m, const void *recs, size_t stride, const ea_node_id *id,
                    uint32_t idx) {
  uint32_t *p = ea__idmap_slot(m, recs, stride, id);
  if (p) *p = idx + 1;
}

static int grow(ea__idmap *m, const void *recs, size_t stride, uint32_t n) {
  uint32_t ncap = (m->mask + 1) * 2;
  uint32_t *ns = calloc(ncap, sizeof *ns);
  if (!ns) return -ENOMEM;
  for (uint32_t i = 0; i < n; i++)
    ea__idmap_put_slots(ns, ncap - 1, ea__idmap_rec_id(recs, stride, i), i);
  free(m->slots);
  m->slots = ns;
  m->mask = ncap - 1;
  return 0;
}

int ea__idmap_grow(ea__idmap *m, const void *recs, size_t stride, uint32_t n, uint32_t want) {
  while ((uint64_t)want * 2 > (uint64_t)m->mask + 1)
    if (grow(m, recs, stride, n) != 0) return -ENOMEM;
  return 0;
}

void ea__idmap_del(ea__idmap *m, const void *recs, size_t stride, const ea_node_id *id) {
  uint32_t mask = m->mask;
  uint32_t *p = ea__idmap_slot(m, recs, stride, id);
  if (!p) return;
  uint32_t i = (uint32_t)(p - m->slots), j = i;
  for (;;) {
    j = (j + 1) & mask;
    if (!m->slots[j]) break;
    uint32_t k = ea__idmap_home(ea__idmap_rec_id(recs, stride, m->slots[j] - 1), mask);
    /* Move j back into the hole at i unless its home k lies cyclically in (i, j]. */
    bool keep = (i <= j) ? (i < k && k <= j) : (i < k || k <= j);
    if (keep) continue;
    m->slots[i] = m->slots[j];
    i = j;
  }
  m->slots[i] = 0;
}
