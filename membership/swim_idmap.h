/* swim_idmap.h — node id → index into the caller's member array.
 *
 * Open addressing with linear probing; a slot holds index+1 (0 = empty),
 * four bytes, and the ids themselves stay in the caller's records: the
 * simulator holds 5000 maps of 5000 members, and storing the 16-byte ids a
 * second time would cost 1.6 GB.  So every call that compares ids takes
 * the records as (recs, stride): record i starts at recs + i·stride with
 * its ea_node_id.  Deletion shifts the probe run back (no tombstones), so
 * lookups stay short however many members come and go.
 *
 * Load factor: ea__idmap_reserve() keeps the table at most half full.
 * The ea__idmap struct is the caller's memory; the slot array is the map's.
 * Lookup, insert and the reserve check are inline: a 5000-node simulation
 * spends a third of its time in them, most of it in 25 million inserts at
 * bootstrap.
 */
#ifndef EA_SWIM_IDMAP_H
#define EA_SWIM_IDMAP_H

#include "swim_int.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct {
  uint32_t *slots; /* index+1, 0 = empty */
  uint32_t mask;   /* slot count − 1 (a power of two) */
} ea__idmap;

/* An empty map of cap slots (a power of two).  0 or -ENOMEM. */
int ea__idmap_init(ea__idmap *m, uint32_t cap);
void ea__idmap_close(ea__idmap *m);

static inline uint32_t ea__idmap_home(const ea_node_id *id, uint32_t mask) {
  return (uint32_t)ea__id_hash(id) & mask;
}

static inline const ea_node_id *ea__idmap_rec_id(const void *recs, size_t stride, uint32_t idx) {
  return (const ea_node_id *)((const char *)recs + (size_t)idx * stride);
}

/* The slot holding id, or NULL. */
static inline uint32_t *ea__idmap_slot(const ea__idmap *m, const void *recs, size_t stride,
                                       const ea_node_id *id) {
  uint32_t i = ea__idmap_home(id, m->mask);
  for (;;) {
    uint32_t v = m->slots[i];
    if (!v) return NULL;
    if (memcmp(ea__idmap_rec_id(recs, stride, v - 1), id, sizeof *id) == 0) return &m->slots[i];
    i = (i + 1) & m->mask;
  }
}

/* Index of id, or EA__NONE. */
static inline uint32_t ea__idmap_find(const ea__idmap *m, const void *recs, size_t stride,
                                      const ea_node_id *id) {
  const uint32_t *p = ea__idmap_slot(m, recs, stride, id);
  return p ? *p - 1 : EA__NONE;
}

static inline void ea__idmap_put_slots(uint32_t *slots, uint32_t mask, const ea_node_id *id,
                                       uint32_t idx) {
  uint32_t i = ea__idmap_home(id, mask);
  while (slots[i]) i = (i + 1) & mask;
  slots[i] = idx + 1;
}

/* Record id (not in the map) at index idx.  There must be room
 * (ea__idmap_reserve). */
static inline void ea__idmap_put(ea__idmap *m, const ea_node_id *id, uint32_t idx) {
  ea__idmap_put_slots(m->slots, m->mask, id, idx);
}
/* Forget id (no-op when absent). */
void ea__idmap_del(ea__idmap *m, const void *recs, size_t stride, const ea_node_id *id);
/* id's record moved to index idx (no-op when absent). */
void ea__idmap_move(ea__idmap *m, const void *recs, size_t stride, const ea_node_id *id,
                    uint32_t idx);
/* The doubling behind ea__idmap_reserve. */
int ea__idmap_grow(ea__idmap *m, const void *recs, size_t stride, uint32_t n, uint32_t want);
/* Room for `want` entries at most half full, doubling as needed; the
 * table's n entries are recs[0..n).  0, or -ENOMEM (the map is unchanged
 * by the failed doubling, earlier doublings stay). */
static inline int ea__idmap_reserve(ea__idmap *m, const void *recs, size_t stride, uint32_t n,
                                    uint32_t want) {
  if ((uint64_t)want * 2 <= (uint64_t)m->mask + 1) return 0;
  return ea__idmap_grow(m, recs, stride, n, want);
}

#endif
