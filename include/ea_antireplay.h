/* ea_antireplay.h — the receiver's memory of what it has already accepted:
 * a per-sender sliding window over (epoch, counter), so that a sealed packet
 * or frame captured on the wire and sent again is dropped (issue 11).
 *
 * Every sealed message carries, inside its AEAD (ea_wire_seal_rp), the
 * sender's node id, its epoch (strictly increasing across restarts of that
 * node: agent/node_id.c's boot file) and a counter (strictly increasing
 * within the epoch).  The receiver keeps, per sender, the newest epoch it
 * has seen, the highest counter of that epoch and a bitmap of the
 * EA_AR_WINDOW counters below it:
 *
 *   epoch older than the sender's newest seen             → REPLAY (epoch)
 *   newer epoch                                            → accept; the window
 *                                                            restarts at it
 *   counter above the highest                              → accept; slide
 *   within the window and not yet seen                     → accept (reordered)
 *   within the window and seen                             → REPLAY (duplicate)
 *   EA_AR_WINDOW or more below the highest                 → REPLAY (too old)
 *
 * A sender the table does not know (first contact, or evicted) is admitted
 * at whatever it sends, and everything of that epoch below it counts as
 * seen: the receiver cannot know what it accepted before it restarted, so it
 * assumes the worst.  (A command replayed to a freshly restarted receiver as
 * the very first message from its sender is admitted by the window; what
 * stops it applying is that state-changing commands name the receiver's
 * incarnation: rdzv DRAIN.)
 *
 * The table is bounded (cap senders, least recently accepted evicted), and a
 * caller adds a sender only after its message authenticated, so a flood of
 * forged sender ids costs nothing.  Pure: no I/O, no clock, no allocation
 * after ea_ar_init. */
#ifndef EA_ANTIREPLAY_H
#define EA_ANTIREPLAY_H

#include "ea_wire.h"

#include <stddef.h>
#include <stdint.h>

#define EA_AR_WINDOW 2048 /* counters remembered below the highest, per sender */

typedef enum {
  EA_AR_OK = 0,
  EA_AR_DUP = 1,   /* this (epoch, counter) was accepted already */
  EA_AR_OLD = 2,   /* counter below the window */
  EA_AR_EPOCH = 3, /* epoch older than the newest seen from this sender */
} ea_ar_verdict;

typedef struct ea_ar_entry ea_ar_entry;

typedef struct {
  ea_ar_entry *e;   /* cap entries */
  uint32_t *heads;  /* hash buckets: entry index + 1, 0 = empty */
  uint32_t nbucket; /* power of two */
  uint32_t cap, n;
  uint32_t lru_head, lru_tail; /* index + 1; head = most recent */
  uint64_t evictions;
} ea_ar_table;

/* cap senders (≥ 1).  0, or -ENOMEM. */
int ea_ar_init(ea_ar_table *t, uint32_t cap);
void ea_ar_free(ea_ar_table *t);
/* Judge (and, when EA_AR_OK, record) one authenticated message. */
ea_ar_verdict ea_ar_check(ea_ar_table *t, const ea_node_id *sender, uint64_t epoch,
                          uint64_t counter);
const char *ea_ar_verdict_str(ea_ar_verdict v);
/* Senders currently remembered. */
uint32_t ea_ar_count(const ea_ar_table *t);

#endif
