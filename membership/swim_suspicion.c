/* swim_suspicion.c — suspicion timers and memberlist's timeout formula
 * (swim_suspicion.h; the formula is derived in swim.c's opening comment).
 *
 * Why confirmations shrink the timer: a lone suspicion is the typical false
 * positive under packet loss (one prober's packets were lost), and waiting
 * the full max gives the suspect time to hear of it and refute; a real
 * crash is confirmed by every member that probes it, and each independent
 * confirmation makes a false positive less likely, so the timer falls
 * towards min.  The logarithm makes the first confirmations count most.
 */
#include "swim_suspicion.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void ea__susp_bounds(const ea_swim_config *cfg, uint32_t n, uint64_t *mn, uint64_t *mx) {
  double scale_n = log10((double)(n > 10 ? n : 10));
  uint64_t m = (uint64_t)floor((double)cfg->suspicion_mult * scale_n * cfg->probe_interval_ms);
  if (m < 1) m = 1;
  *mn = m;
  *mx = (uint64_t)(cfg->suspicion_max_mult ? cfg->suspicion_max_mult : 1) * m;
}

uint32_t ea__susp_k(const ea_swim_config *cfg, uint32_t n) {
  uint32_t k = cfg->suspicion_mult > 2 ? cfg->suspicion_mult - 2 : 0;
  if (k > EA__SUSP_K_MAX) k = EA__SUSP_K_MAX;
  if (n < 2 || n - 2 < k) k = 0;
  return k;
}

uint64_t ea__susp_timeout(const ea__susp *p) {
  if (p->k == 0) return p->min;
  double frac = log((double)p->n + 1.0) / log((double)p->k + 1.0);
  double raw = (double)p->max - frac * (double)(p->max - p->min);
  uint64_t t = raw <= 0 ? 0 : (uint64_t)floor(raw);
  return t < p->min ? p->min : t;
}

void ea__susp_init(ea__susp_set *t) {
  memset(t, 0, sizeof *t);
  ea__heap_init(&t->heap);
  t->free = EA__NONE;
}

void ea__susp_close(ea__susp_set *t) {
  free(t->sp);
  ea__heap_close(&t->heap);
  t->sp = NULL;
  t->nsp = t->cap = 0;
  t->free = EA__NONE;
}

int ea__susp_start(ea__susp_set *t, uint64_t now, uint32_t key, const ea_node_id *from,
                   uint64_t min, uint64_t max, uint32_t k, uint32_t *out) {
  uint32_t si;
  if (t->free != EA__NONE) {
    si = t->free;
    t->free = t->sp[si].next_free;
  } else {
    if (t->nsp == t->cap) {
      uint32_t nc = t->cap ? t->cap * 2 : 16;
      ea__susp *np = realloc(t->sp, (size_t)nc * sizeof *np);
      if (!np) return -ENOMEM;
      t->sp = np;
      if (ea__heap_reserve(&t->heap, nc) != 0) return -ENOMEM;
      t->cap = nc;
    }
    si = t->nsp++;
  }
  ea__susp *p = &t->sp[si];
  memset(p, 0, sizeof *p);
  p->key = key;
  p->start = now;
  p->min = min;
  p->max = max;
  p->k = k;
  p->from[0] = *from;
  p->nfrom = 1;
  p->deadline = now + (k == 0 ? p->min : p->max);
  ea__heap_push(&t->heap, si, p->deadline);
  *out = si;
  return 0;
}

bool ea__susp_confirm(ea__susp_set *t, uint32_t si, const ea_node_id *from) {
  ea__susp *p = &t->sp[si];
  if (p->n >= p->k) return false;
  for (uint32_t i = 0; i < p->nfrom; i++)
    if (memcmp(&p->from[i], from, sizeof *from) == 0) return false;
  p->from[p->nfrom++] = *from;
  p->n++;
  p->deadline = p->start + ea__susp_timeout(p);
  ea__heap_update(&t->heap, si, p->deadline);
  return true;
}

void ea__susp_cancel(ea__susp_set *t, uint32_t si) {
  ea__heap_remove(&t->heap, si);
  t->sp[si].next_free = t->free;
  t->free = si;
}
