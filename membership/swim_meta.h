/* swim_meta.h — interned member metadata, shared by every core in the process.
 *
 * A member's ea_meta (name, addresses, role, tags, version, last generation)
 * is ~300 bytes and changes rarely; every core holds one for every member
 * it knows.  The simulator runs 5000 cores of 5000 members in one process,
 * so each distinct ea_meta is stored once, in a process-wide table, and
 * shared by reference count: 5000 copies instead of 25 million.
 *
 * Equality is on the canonical form: strings cut at their NUL (and at the
 * field's size), bytes after it zero, unused address bytes zero.  Two metas
 * that encode the same on the wire are the same blob.
 *
 * Ownership: ea__meta_intern() returns a new reference; ea__meta_retain()
 * adds one to a blob the caller already holds; ea__meta_release() drops
 * one and frees the blob with the last.  A blob's fields never change while
 * it is referenced.  All three are safe from any thread (a mutex guards the
 * table; the count is atomic).  Retain and release are inline: the
 * dissemination queue takes and drops a reference per queued ALIVE.
 */
#ifndef EA_SWIM_META_H
#define EA_SWIM_META_H

#include "ea_wire.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ea__meta_blob {
  struct ea__meta_blob *next; /* hash chain (the table's) */
  uint64_t hash;
  _Atomic uint32_t refs;
  uint32_t wire_extra; /* encoded meta size − 1 (the nil it replaces) */
  ea_meta m;           /* canonical: strings NUL-padded, unused address bytes zero */
} ea__meta_blob;

/* A referenced blob equal to m (canonically), or NULL on allocation failure. */
ea__meta_blob *ea__meta_intern(const ea_meta *m);
/* Take another reference on a blob the caller already holds.  Returns b. */
static inline ea__meta_blob *ea__meta_retain(ea__meta_blob *b) {
  atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
  return b;
}
/* Unlink and free a blob whose count the caller took to zero. */
void ea__meta_free_last(ea__meta_blob *b);
/* Drop a reference (NULL is a no-op). */
static inline void ea__meta_release(ea__meta_blob *b) {
  if (b && atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) == 1) ea__meta_free_last(b);
}
/* Whether b (may be NULL: false) holds m, compared canonically. */
bool ea__meta_same(const ea__meta_blob *b, const ea_meta *m);
/* Distinct blobs alive in the process (for tests). */
size_t ea__meta_count(void);

#endif
