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
 */
#ifndef EA_SWIM_IDMAP_H
#define EA_SWIM_IDMAP_H

#include "swim_int.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
  uint32_t *slots; /* index+1, 0 = empty */
  uint32_t mask;   /* slot count − 1 (a power of two) */
} ea__idmap;

/* An empty map of cap slots (a power of two).  0 or -ENOMEM. */
int ea__idmap_init(ea__idmap *m, uint32_t cap);
void ea__idmap_close(ea__idmap *m);

/* Index of id, or EA__NONE. */
uint32_t ea__idmap_find(const ea__idmap *m, const void *recs, size_t stride, const ea_node_id *id);
/* Record id (not in the map) at index idx.  There must be room
 * (ea__idmap_reserve). */
void ea__idmap_put(ea__idmap *m, const ea_node_id *id, uint32_t idx);
/* Forget id (no-op when absent). */
void ea__idmap_del(ea__idmap *m, const void *recs, size_t stride, const ea_node_id *id);
/* id's record moved to index idx (no-op when absent). */
void ea__idmap_move(ea__idmap *m, const void *recs, size_t stride, const ea_node_id *id,
                    uint32_t idx);
/* Room for `want` entries at most half full, doubling as needed; the
 * table's n entries are recs[0..n).  0, or -ENOMEM (the map is unchanged
 * by the failed doubling, earlier doublings stay). */
int ea__idmap_reserve(ea__idmap *m, const void *recs, size_t stride, uint32_t n, uint32_t want);

#endif
