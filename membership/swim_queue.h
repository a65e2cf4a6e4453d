/* swim_queue.h — the dissemination (broadcast) queue: memberlist's
 * TransmitLimitedQueue.
 *
 * Promises:
 *  - At most one entry per member: queueing news about a member replaces
 *    (invalidates) whatever was queued about it, whatever its age.
 *  - ea__bq_fill() takes refutations (ea__bq_push_first) before anything
 *    else, then the least-transmitted entries first and, among equals, the
 *    newest first — fresh news overtakes news most members already heard,
 *    and a refutation overtakes even fresh news: under heavy loss the
 *    queue is a flood of new suspicions, and the ALIVE that cancels one
 *    must not wait behind the next (Lifeguard).
 *  - An entry leaves the queue after `limit` transmissions; the core passes
 *    ea__bq_limit(retransmit_mult, N) = retransmit_mult · ceil(log10(N+1)),
 *    memberlist's retransmitLimit.
 *  - A fill never exceeds the byte budget it is given (sizes are the
 *    codec's exact ea_wire_update_size, cached per entry).
 *  - A fill does not repeat what the packet already holds: an entry equal
 *    to one of the caller's own updates (same member, state and
 *    incarnation, metadata included if the entry has it) is counted as
 *    transmitted without a second copy.
 *
 * Members are named by the owner's key (swim.c: the member's index).  The
 * owner keeps, per key, the handle of its entry (EA__NONE when none); the
 * queue reads and writes it through slot(ctx, key), so finding the entry
 * to invalidate costs no lookup here.  slot() must return a pointer valid
 * for the duration of the call; the queue calls it from push, fill (an
 * entry that reached its limit), drop and clear.
 *
 * Ownership: an ALIVE entry holds a reference on its metadata blob (taken
 * by push, dropped when the entry leaves); other states carry none.  The
 * ea__bq struct is the caller's memory; its arrays are the queue's.
 */
#ifndef EA_SWIM_QUEUE_H
#define EA_SWIM_QUEUE_H

#include "swim_heap.h"
#include "swim_meta.h"

#include "ea_wire.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
  ea_node_id id, from;
  uint32_t inc;
  uint8_t state;
  uint8_t transmits;
  bool first;          /* a refutation: ahead of every other entry */
  uint16_t size;       /* encoded size, cached */
  uint32_t key;        /* member it is about (the owner's handle slot) */
  uint32_t next_free;  /* free list link while unused */
  uint64_t order;      /* enqueue sequence: larger is newer */
  ea__meta_blob *meta; /* ALIVE only; referenced */
  uint32_t meta_inc;   /* sent in meta's slot when meta is not (ea_update) */
} ea__qent;

typedef uint32_t *(*ea__bq_slot_fn)(void *ctx, uint32_t key);

typedef struct {
  ea__heap heap; /* pool indices by (transmits, newest first) */
  ea__qent *pool;
  uint32_t cap, free;
  uint64_t order;
  size_t min_size; /* smallest possible update: fills stop below it */
  ea__bq_slot_fn slot;
  void *ctx;
} ea__bq;

void ea__bq_init(ea__bq *q, ea__bq_slot_fn slot, void *ctx);
/* Free everything, dropping each entry's metadata reference; slot() is not
 * called (the owner is going away). */
void ea__bq_close(ea__bq *q);

static inline uint32_t ea__bq_len(const ea__bq *q) {
  return q->heap.n;
}

/* retransmit_mult · ceil(log10(n+1)), at least 1 and at most 255 (the
 * transmit counter's range); ceil(log10(1)) counts as 1.  Inline: the core
 * asks on every packet it fills. */
static inline uint32_t ea__bq_limit(uint32_t retransmit_mult, uint32_t n) {
  uint32_t d = 0;
  for (uint64_t p = 1; p < (uint64_t)n + 1; p *= 10) d++;
  uint32_t lim = retransmit_mult * (d ? d : 1);
  if (lim < 1) lim = 1;
  return lim > 255 ? 255 : lim;
}

/* Queue news about member `key`, replacing any queued entry about it.
 * meta is borrowed (retained when state is ALIVE; ignored otherwise);
 * without it the update carries meta_inc in its place (ea_update).
 * 0, or -ENOMEM: the older entry is gone and nothing is queued. */
int ea__bq_push(ea__bq *q, uint32_t key, const ea_node_id *id, const ea_node_id *from,
                uint8_t state, uint32_t inc, ea__meta_blob *meta, uint32_t meta_inc);

/* The same, for a refutation (an ALIVE that cancels a suspicion or a
 * death): it goes out ahead of every entry not pushed this way, for all of
 * its transmissions. */
int ea__bq_push_first(ea__bq *q, uint32_t key, const ea_node_id *id, const ea_node_id *from,
                      uint8_t state, uint32_t inc, ea__meta_blob *meta, uint32_t meta_inc);

/* Append entries to msg->updates while they fit in `left` bytes and under
 * EA_WIRE_MAX_UPDATES.  Each appended entry counts one transmission and
 * leaves the queue at `limit`.  An entry too big for what is left is
 * skipped (it stays, untouched); after 8 of those the fill stops, so a long
 * queue costs O(packet), not O(queue).  Returns how many were appended.
 * The updates' meta is copied: msg does not reference the blobs. */
uint32_t ea__bq_fill(ea__bq *q, ea_msg *msg, size_t left, uint32_t limit);

/* Remove entry `handle` (what slot() holds for its key). */
void ea__bq_drop(ea__bq *q, uint32_t handle);
/* The member behind entry `handle` now has key `key` (the owner moved it). */
void ea__bq_rekey(ea__bq *q, uint32_t handle, uint32_t key);
/* Remove every entry. */
void ea__bq_clear(ea__bq *q);

#endif
