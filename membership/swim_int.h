/* swim_int.h — what the membership core's private pieces share.
 *
 * swim.c is the protocol; the structures it stands on each have a file of
 * their own (memberlist's habit: awareness.go, suspicion.go, queue.go):
 *   swim_meta.c       process-wide intern table of member metadata
 *   swim_idmap.c      node id → member index (open addressing)
 *   swim_heap.c       indexed binary min-heap (under queue and suspicion)
 *   swim_probelist.c  randomized round-robin probe order
 *   swim_queue.c      the dissemination (broadcast) queue
 *   swim_suspicion.c  suspicion timers and memberlist's timeout formula
 * They refer to members by the caller's index and never see struct
 * ea_swim.  This header holds the little they have in common: the "no
 * index" sentinel and the 64-bit hash mixer.  (The mixer is a hash, not a
 * random number generator; it belongs in a base layer once there is one.)
 */
#ifndef EA_SWIM_INT_H
#define EA_SWIM_INT_H

#include "ea_wire.h"

#include <stdint.h>
#include <string.h>

/* No index: an empty slot, a member with no queue entry or no timer. */
#define EA__NONE UINT32_MAX

/* The murmur3 / splitmix64 finalizer: every input bit reaches every output
 * bit, so the low bits of the result can index a power-of-two table. */
static inline uint64_t ea__mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

/* Hash of a 128-bit node id.  Ids are random, but the second half is
 * rotated so that ids differing only in one half still spread. */
static inline uint64_t ea__id_hash(const ea_node_id *id) {
  uint64_t a, b;
  memcpy(&a, id->b, 8);
  memcpy(&b, id->b + 8, 8);
  return ea__mix64(a ^ ((b << 29) | (b >> 35)));
}

#endif
