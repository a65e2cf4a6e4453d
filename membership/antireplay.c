/* antireplay.c — the per-sender replay window (ea_antireplay.h).
 *
 * The window is a ring of EA_AR_WINDOW bits: counter c is bit c mod
 * EA_AR_WINDOW, valid for top - EA_AR_WINDOW < c ≤ top.  Moving top forward
 * clears the bits of the counters it skips (all of them past a whole
 * window).  `floor` is the lowest counter of the epoch that may still be
 * accepted: 0 after an epoch change (the window then knows every counter of
 * the epoch it has seen), the first counter seen for a sender met for the
 * first time (everything before it is unknown, so counted as seen).
 *
 * Senders are found through a chained hash of their id and kept in LRU
 * order; the table is full at cap and then forgets the sender accepted
 * longest ago. */
#include "ea_antireplay.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define WORDS (EA_AR_WINDOW / 64)
_Static_assert(EA_AR_WINDOW % 64 == 0, "window in whole words");

struct ea_ar_entry {
  ea_node_id id;
  uint64_t epoch, top, floor;
  uint64_t bits[WORDS];
  uint32_t hnext;      /* next in bucket, index + 1 */
  uint32_t prev, next; /* LRU, index + 1 */
};

static uint32_t id_hash(const ea_node_id *id) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (int i = 0; i < 16; i++) h = (h ^ id->b[i]) * 0x100000001b3ULL;
  return (uint32_t)(h ^ (h >> 32));
}

int ea_ar_init(ea_ar_table *t, uint32_t cap) {
  memset(t, 0, sizeof *t);
  if (cap == 0 || cap > (1u << 24)) return -EINVAL;
  uint32_t nb = 1;
  while (nb < 2 * cap) nb <<= 1;
  t->e = calloc(cap, sizeof *t->e);
  t->heads = calloc(nb, sizeof *t->heads);
  if (!t->e || !t->heads) {
    ea_ar_free(t);
    return -ENOMEM;
  }
  t->nbucket = nb;
  t->cap = cap;
  return 0;
}

void ea_ar_free(ea_ar_table *t) {
  free(t->e);
  free(t->heads);
  memset(t, 0, sizeof *t);
}

uint32_t ea_ar_count(const ea_ar_table *t) {
  return t->n;
}

const char *ea_ar_verdict_str(ea_ar_verdict v) {
  switch (v) {
    case EA_AR_OK:
      return "ok";
    case EA_AR_DUP:
      return "already accepted (duplicate)";
    case EA_AR_OLD:
      return "older than the replay window";
    case EA_AR_EPOCH:
      return "from an older epoch of its sender (before it restarted)";
  }
  return "?";
}

static void lru_unlink(ea_ar_table *t, uint32_t i) {
  ea_ar_entry *e = &t->e[i];
  if (e->prev)
    t->e[e->prev - 1].next = e->next;
  else
    t->lru_head = e->next;
  if (e->next)
    t->e[e->next - 1].prev = e->prev;
  else
    t->lru_tail = e->prev;
  e->prev = e->next = 0;
}

static void lru_front(ea_ar_table *t, uint32_t i) {
  ea_ar_entry *e = &t->e[i];
  e->prev = 0;
  e->next = t->lru_head;
  if (t->lru_head) t->e[t->lru_head - 1].prev = i + 1;
  t->lru_head = i + 1;
  if (!t->lru_tail) t->lru_tail = i + 1;
}

static void hash_unlink(ea_ar_table *t, uint32_t i) {
  uint32_t *p = &t->heads[id_hash(&t->e[i].id) & (t->nbucket - 1)];
  while (*p && *p != i + 1) p = &t->e[*p - 1].hnext;
  if (*p) *p = t->e[i].hnext;
  t->e[i].hnext = 0;
}

static int64_t find(const ea_ar_table *t, const ea_node_id *id) {
  for (uint32_t k = t->heads[id_hash(id) & (t->nbucket - 1)]; k; k = t->e[k - 1].hnext)
    if (memcmp(t->e[k - 1].id.b, id->b, 16) == 0) return (int64_t)k - 1;
  return -1;
}

static void set_bit(ea_ar_entry *e, uint64_t c) {
  uint64_t b = c % EA_AR_WINDOW;
  e->bits[b / 64] |= 1ULL << (b % 64);
}

static int get_bit(const ea_ar_entry *e, uint64_t c) {
  uint64_t b = c % EA_AR_WINDOW;
  return (int)((e->bits[b / 64] >> (b % 64)) & 1);
}

/* Clear bits lo..hi (lo ≤ hi < EA_AR_WINDOW) of the ring. */
static void clear_bits(ea_ar_entry *e, uint64_t lo, uint64_t hi) {
  uint64_t wl = lo / 64, wh = hi / 64;
  uint64_t ml = ~0ULL << (lo % 64), mh = ~0ULL >> (63 - hi % 64);
  if (wl == wh) {
    e->bits[wl] &= ~(ml & mh);
    return;
  }
  e->bits[wl] &= ~ml;
  for (uint64_t w = wl + 1; w < wh; w++) e->bits[w] = 0;
  e->bits[wh] &= ~mh;
}

/* Clear the bits of counters from..to (to - from < EA_AR_WINDOW), which
 * may wrap around the ring. */
static void clear_range(ea_ar_entry *e, uint64_t from, uint64_t to) {
  uint64_t b0 = from % EA_AR_WINDOW, b1 = to % EA_AR_WINDOW;
  if (b0 <= b1) {
    clear_bits(e, b0, b1);
  } else {
    clear_bits(e, b0, EA_AR_WINDOW - 1);
    clear_bits(e, 0, b1);
  }
}

static void restart_at(ea_ar_entry *e, uint64_t epoch, uint64_t counter, uint64_t floor) {
  e->epoch = epoch;
  e->top = counter;
  e->floor = floor;
  memset(e->bits, 0, sizeof e->bits);
  set_bit(e, counter);
}

ea_ar_verdict ea_ar_check(ea_ar_table *t, const ea_node_id *sender, uint64_t epoch,
                          uint64_t counter) {
  int64_t f = find(t, sender);
  if (f < 0) {
    uint32_t i;
    if (t->n < t->cap) {
      i = t->n++;
    } else {
      i = t->lru_tail - 1; /* the sender accepted longest ago */
      lru_unlink(t, i);
      hash_unlink(t, i);
      t->evictions++;
    }
    ea_ar_entry *e = &t->e[i];
    memset(e, 0, sizeof *e);
    e->id = *sender;
    restart_at(e, epoch, counter, counter);
    uint32_t *h = &t->heads[id_hash(sender) & (t->nbucket - 1)];
    e->hnext = *h;
    *h = i + 1;
    lru_front(t, i);
    return EA_AR_OK;
  }
  uint32_t i = (uint32_t)f;
  ea_ar_entry *e = &t->e[i];
  if (epoch < e->epoch) return EA_AR_EPOCH;
  if (epoch > e->epoch) {
    restart_at(e, epoch, counter, 0);
  } else if (counter > e->top) {
    if (counter - e->top >= EA_AR_WINDOW) {
      memset(e->bits, 0, sizeof e->bits);
    } else {
      if (counter - e->top > 1) clear_range(e, e->top + 1, counter - 1);
    }
    e->top = counter;
    set_bit(e, counter);
  } else {
    if (counter < e->floor || e->top - counter >= EA_AR_WINDOW) return EA_AR_OLD;
    if (get_bit(e, counter)) return EA_AR_DUP;
    set_bit(e, counter);
  }
  if (t->lru_head != i + 1) {
    lru_unlink(t, i);
    lru_front(t, i);
  }
  return EA_AR_OK;
}
