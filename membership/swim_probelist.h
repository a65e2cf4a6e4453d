/* swim_probelist.h — the order in which a core probes its members:
 * randomized round-robin (SWIM, Das et al. 2002, §4.3; memberlist's
 * probeNode/resetNodes).
 *
 * Promises:
 *  - Rounds: ea__plist_next() returns every listed member exactly once
 *    before any member a second time; a new round starts with a fresh
 *    shuffle.  So every member is probed once per round by every other,
 *    a worst-case bound SWIM's pure random choice lacks, while the order
 *    stays unpredictable.
 *  - A newcomer goes to a uniformly random position of the current list
 *    (append, then swap with a random position), so its place in the
 *    current round is as random as everyone else's.  Nobody is skipped
 *    for it; when it lands among those already probed this round, the
 *    member it displaces moves to the end and is probed once more
 *    (memberlist accepts the same).
 *  - Removal during a round neither skips nor repeats anyone else in
 *    that round: the "already probed" prefix stays a prefix.
 *
 * Members are named by the owner's key (swim.c: the member's index).  The
 * owner keeps each key's position (EA__NONE when not listed) and the list
 * writes it through slot(ctx, key), a pointer valid for the duration of
 * the call.  Randomness comes from the owner too, below(ctx, n), uniform in
 * [0, n): the simulator replays a run from one seed only if every draw
 * comes from the core's own generator, in the same order.
 *
 * The ea__plist struct is the caller's memory; the array is the list's.
 */
#ifndef EA_SWIM_PROBELIST_H
#define EA_SWIM_PROBELIST_H

#include "swim_int.h"

#include <stdbool.h>
#include <stdint.h>

typedef uint32_t *(*ea__plist_slot_fn)(void *ctx, uint32_t key);
typedef uint32_t (*ea__plist_rand_fn)(void *ctx, uint32_t n);

typedef struct {
  uint32_t *list; /* keys; list[0..cursor) were probed this round */
  uint32_t n, cap, cursor;
  ea__plist_slot_fn slot;
  ea__plist_rand_fn below;
  void *ctx;
} ea__plist;

void ea__plist_init(ea__plist *p, ea__plist_slot_fn slot, ea__plist_rand_fn below, void *ctx);
void ea__plist_close(ea__plist *p);
/* Room for `want` keys without reallocating (best effort: a failure is
 * ignored, the next insert tries again). */
void ea__plist_reserve(ea__plist *p, uint32_t want);
/* List `key` (not listed) at a random position.  0 or -ENOMEM (not listed,
 * no random draw made). */
int ea__plist_insert(ea__plist *p, uint32_t key);
/* Unlist `key` (no-op when its position is EA__NONE). */
void ea__plist_remove(ea__plist *p, uint32_t key);
/* The next key to probe, EA__NONE when the list is empty.  At the end of a
 * round the list is reshuffled first and *new_round set (else cleared). */
uint32_t ea__plist_next(ea__plist *p, bool *new_round);
/* Start the round over without reshuffling (the list is already in random
 * order when it was built by random insertion). */
static inline void ea__plist_restart(ea__plist *p) {
  p->cursor = 0;
}
/* The member at position pos now has key `key` (the owner moved it). */
static inline void ea__plist_rekey(ea__plist *p, uint32_t pos, uint32_t key) {
  p->list[pos] = key;
}

#endif
