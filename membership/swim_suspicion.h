/* swim_suspicion.h — suspicion timers (memberlist's suspicion.go).
 *
 * One timer per suspected member.  It starts at `max`, and each
 * confirmation — a SUSPECT from a `from` not heard before (the first
 * suspector's is the accusation, not a confirmation) — shrinks it, until K
 * confirmations bring it to `min`:
 *     timeout(C) = max − (max − min) · ln(C+1) / ln(K+1),  never below min
 * measured from when the suspicion began.  With K = 0 (too few members to
 * confirm) the timer is `min` from the start.  swim.c's opening comment
 * derives min, max and K from the cluster size (ea__susp_bounds,
 * ea__susp_k); this file only keeps the timers.
 *
 * Timers live in a pool (stable indices: the core keeps one per member)
 * ordered by deadline in an indexed heap, so the next to expire is O(1)
 * and a confirmation re-keys its timer in O(log n).  Equal deadlines expire
 * in a deterministic order (swim_heap.h).
 *
 * The ea__susp_set struct is the caller's memory; its arrays are the set's.
 */
#ifndef EA_SWIM_SUSPICION_H
#define EA_SWIM_SUSPICION_H

#include "swim_heap.h"

#include "ea_membership.h"

#include <stdbool.h>
#include <stdint.h>

/* Distinct confirmations remembered per suspicion: K is suspicion_mult − 2
 * (2 at our defaults, memberlist's too); a config asking for more than this
 * is clamped, which only means the timer reaches min after 16 confirmers. */
#define EA__SUSP_K_MAX 16

typedef struct {
  uint32_t key;         /* the member suspected (the owner's index) */
  uint32_t next_free;   /* free list link while unused */
  uint32_t k, n, nfrom; /* confirmations wanted, counted; froms remembered */
  uint64_t start, deadline, min, max;
  ea_node_id from[EA__SUSP_K_MAX + 1]; /* from[0] is the first suspector */
} ea__susp;

typedef struct {
  ea__susp *sp;
  uint32_t nsp, cap, free;
  ea__heap heap; /* pool indices by deadline */
} ea__susp_set;

/* memberlist's suspicion bounds for n members alive or suspect (ourselves
 * included): min = suspicion_mult · log10(max(n,10)) · probe_interval
 * (at least 1 ms), max = suspicion_max_mult · min. */
void ea__susp_bounds(const ea_swim_config *cfg, uint32_t n, uint64_t *min, uint64_t *max);
/* Confirmations that shrink a timer to min: suspicion_mult − 2, at most
 * EA__SUSP_K_MAX, and 0 when the other n − 2 members are fewer. */
uint32_t ea__susp_k(const ea_swim_config *cfg, uint32_t n);
/* The timer's length after p->n confirmations (the formula above). */
uint64_t ea__susp_timeout(const ea__susp *p);

void ea__susp_init(ea__susp_set *t);
void ea__susp_close(ea__susp_set *t);

/* A timer for member `key` suspected by `from` at `now`; *out gets its
 * index.  0 or -ENOMEM. */
int ea__susp_start(ea__susp_set *t, uint64_t now, uint32_t key, const ea_node_id *from,
                   uint64_t min, uint64_t max, uint32_t k, uint32_t *out);
/* A suspicion of the same member from `from`.  Returns true when it was a
 * new independent confirmation (the deadline moved); false for a from
 * already counted or once K are in. */
bool ea__susp_confirm(ea__susp_set *t, uint32_t si, const ea_node_id *from);
/* Stop timer si (resolved, expired or its member reaped). */
void ea__susp_cancel(ea__susp_set *t, uint32_t si);

static inline ea__susp *ea__susp_at(ea__susp_set *t, uint32_t si) {
  return &t->sp[si];
}
/* The timer that expires first, or NULL. */
static inline const ea__susp *ea__susp_first(const ea__susp_set *t) {
  return t->heap.n ? &t->sp[t->heap.items[0].id] : NULL;
}
static inline uint32_t ea__susp_count(const ea__susp_set *t) {
  return t->heap.n;
}

#endif
