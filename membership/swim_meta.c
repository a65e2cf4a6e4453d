/* swim_meta.c — the process-wide intern table of member metadata.
 *
 * Why a table at all: see swim_meta.h (5000 simulated cores would otherwise
 * hold 25 million copies).  Why this shape: a chained hash table under one
 * mutex, with an atomic reference count per blob.  Interning happens when a
 * core learns a member or a member's metadata changes — rare next to the
 * retain/release traffic of the dissemination queue, which takes no lock.
 * The one subtle case is a blob whose count has just reached zero while
 * another thread looks it up: intern() never revives a zero-ref blob (it
 * makes a new one), so the releaser may unlink and free it safely.
 *
 * The blob also caches wire_extra, the encoded size its metadata adds to an
 * update, so that the core can budget packets and count push-pull bytes
 * without encoding anything.
 */
#include "swim_meta.h"

#include "swim_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static struct {
  pthread_mutex_t lock;
  ea__meta_blob **tab;
  size_t cap, count;
} interned = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0};

static void canon_str(char *dst, const char *src, size_t cap) {
  size_t n = strnlen(src, cap - 1);
  memcpy(dst, src, n);
}

static void canon_addr(ea_addr *dst, const ea_addr *src) {
  dst->family = src->family;
  dst->port = src->port;
  if (src->family == 4)
    memcpy(dst->ip, src->ip, 4);
  else if (src->family == 6)
    memcpy(dst->ip, src->ip, 16);
}

static void canon_meta(ea_meta *c, const ea_meta *m) {
  memset(c, 0, sizeof *c);
  canon_str(c->name, m->name, sizeof c->name);
  canon_addr(&c->gossip, &m->gossip);
  canon_addr(&c->control, &m->control);
  canon_str(c->role, m->role, sizeof c->role);
  canon_str(c->tags, m->tags, sizeof c->tags);
  canon_str(c->version, m->version, sizeof c->version);
  c->last_gen = m->last_gen;
}

static uint64_t meta_hash(const ea_meta *c) {
  const uint8_t *p = (const uint8_t *)c;
  uint64_t h = 0x9e3779b97f4a7c15ULL;
  size_t i = 0;
  for (; i + 8 <= sizeof *c; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    h = (h ^ ea__mix64(w + i)) * 0x100000001b3ULL;
  }
  for (; i < sizeof *c; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
  return ea__mix64(h);
}

void ea__meta_free_last(ea__meta_blob *b) {
  /* The caller took it to zero; intern() never revives a zero-ref blob, so
   * nobody else can reach it except through the table, which we now unlink. */
  pthread_mutex_lock(&interned.lock);
  ea__meta_blob **pp = &interned.tab[b->hash & (interned.cap - 1)];
  while (*pp && *pp != b) pp = &(*pp)->next;
  if (*pp) *pp = b->next;
  interned.count--;
  pthread_mutex_unlock(&interned.lock);
  free(b);
}

static int intern_grow(void) {
  size_t ncap = interned.cap ? interned.cap * 2 : 1024;
  ea__meta_blob **nt = calloc(ncap, sizeof *nt);
  if (!nt) return -ENOMEM;
  for (size_t i = 0; i < interned.cap; i++) {
    ea__meta_blob *b = interned.tab[i];
    while (b) {
      ea__meta_blob *nx = b->next;
      b->next = nt[b->hash & (ncap - 1)];
      nt[b->hash & (ncap - 1)] = b;
      b = nx;
    }
  }
  free(interned.tab);
  interned.tab = nt;
  interned.cap = ncap;
  return 0;
}

ea__meta_blob *ea__meta_intern(const ea_meta *m) {
  ea_meta c;
  canon_meta(&c, m);
  uint64_t h = meta_hash(&c);
  ea__meta_blob *r = NULL;
  pthread_mutex_lock(&interned.lock);
  if (interned.cap) {
    for (ea__meta_blob *b = interned.tab[h & (interned.cap - 1)]; b; b = b->next) {
      if (b->hash != h || memcmp(&b->m, &c, sizeof c) != 0) continue;
      /* Revive only a live blob: one at zero is being freed by its releaser. */
      uint32_t cur = atomic_load_explicit(&b->refs, memory_order_relaxed);
      while (cur > 0 && !atomic_compare_exchange_weak(&b->refs, &cur, cur + 1)) {
      }
      if (cur > 0) {
        r = b;
        break;
      }
    }
  }
  if (!r && (interned.count + 1 <= interned.cap || intern_grow() == 0)) {
    r = malloc(sizeof *r);
    if (r) {
      r->hash = h;
      atomic_init(&r->refs, 1);
      r->m = c;
      ea_update u;
      memset(&u, 0, sizeof u);
      size_t without = ea_wire_update_size(&u);
      u.has_meta = true;
      u.meta = c;
      r->wire_extra = (uint32_t)(ea_wire_update_size(&u) - without);
      r->next = interned.tab[h & (interned.cap - 1)];
      interned.tab[h & (interned.cap - 1)] = r;
      interned.count++;
    }
  }
  pthread_mutex_unlock(&interned.lock);
  return r;
}

bool ea__meta_same(const ea__meta_blob *b, const ea_meta *m) {
  if (!b) return false;
  ea_meta c;
  canon_meta(&c, m);
  return memcmp(&b->m, &c, sizeof c) == 0;
}

size_t ea__meta_count(void) {
  pthread_mutex_lock(&interned.lock);
  size_t n = interned.count;
  pthread_mutex_unlock(&interned.lock);
  return n;
}
