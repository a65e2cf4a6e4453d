/* admit.c — admission of incoming connections before they authenticate
 * (include/ea_admit.h): per-source token buckets and the max-min fair
 * choice of which connection on probation to close. */
#include "ea_admit.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  ea_addr src;      /* port 0 */
  double tokens;    /* connects it may open now */
  uint64_t last_ms; /* tokens as of this time */
  bool used;
  bool authed;
} source;

struct ea_admit {
  ea_admit_config cfg;
  source s[EA_ADMIT_SOURCES];
};

ea_admit *ea_admit_new(const ea_admit_config *cfg) {
  ea_admit *a = calloc(1, sizeof *a);
  if (a) a->cfg = *cfg;
  return a;
}

void ea_admit_free(ea_admit *a) {
  free(a);
}

bool ea_admit_same_source(const ea_addr *x, const ea_addr *y) {
  return x->family == y->family &&
         memcmp(x->ip, y->ip, x->family == 6 ? 8 : sizeof x->ip) == 0; /* IPv6: the /64 */
}

static source *find(const ea_admit *a, const ea_addr *src) {
  for (size_t i = 0; i < EA_ADMIT_SOURCES; i++)
    if (a->s[i].used && ea_admit_same_source(&a->s[i].src, src)) return (source *)&a->s[i];
  return NULL;
}

/* src's slot, made when it has none in the place of a free one, else the
 * one seen least recently (authenticated ones last). */
static source *get(ea_admit *a, const ea_addr *src, uint64_t now) {
  source *v = find(a, src);
  if (v) return v;
  for (size_t i = 0; i < EA_ADMIT_SOURCES; i++) {
    source *s = &a->s[i];
    if (!v || (!s->used && v->used) ||
        (s->used && v->used &&
         (s->authed < v->authed || (s->authed == v->authed && s->last_ms < v->last_ms))))
      v = s;
  }
  memset(v, 0, sizeof *v);
  v->used = true;
  v->src = *src;
  v->src.port = 0;
  v->tokens = a->cfg.burst;
  v->last_ms = now;
  return v;
}

bool ea_admit_connect(ea_admit *a, const ea_addr *src, uint64_t now_ms) {
  source *s = get(a, src, now_ms);
  if (now_ms > s->last_ms) s->tokens += (double)(now_ms - s->last_ms) * a->cfg.rate / 1000.0;
  if (s->tokens > a->cfg.burst) s->tokens = a->cfg.burst;
  if (now_ms > s->last_ms) s->last_ms = now_ms;
  if (s->authed) return true;
  if (s->tokens < 1.0) return false;
  s->tokens -= 1.0;
  return true;
}

void ea_admit_authed(ea_admit *a, const ea_addr *src, uint64_t now_ms) {
  get(a, src, now_ms)->authed = true;
}

bool ea_admit_known(const ea_admit *a, const ea_addr *src) {
  const source *s = find(a, src);
  return s && s->authed;
}

int ea_admit_victim(const ea_admit *a, const ea_admit_wait *w, size_t n, const ea_addr *src,
                    bool *per_source) {
  *per_source = false;
  /* the newcomer's own source first */
  size_t mine = 0;
  int oldest = -1;
  for (size_t i = 0; i < n; i++) {
    if (!ea_admit_same_source(&w[i].src, src)) continue;
    mine++;
    if (!w[i].header_here && (oldest < 0 || w[i].since_ms <= w[oldest].since_ms)) oldest = (int)i;
  }
  if (mine >= a->cfg.per_source && oldest >= 0) {
    *per_source = true;
    return oldest;
  }
  if (n < a->cfg.total) return -1;
  /* the source holding the most, never-authenticated ones first; its oldest
   * waiting connection */
  int victim = -1;
  size_t vcount = 0;
  bool vknown = true;
  for (size_t i = 0; i < n; i++) {
    if (w[i].header_here) continue;
    size_t count = 0;
    int old = -1;
    for (size_t k = 0; k < n; k++) {
      if (!ea_admit_same_source(&w[k].src, &w[i].src)) continue;
      count++;
      if (!w[k].header_here && (old < 0 || w[k].since_ms <= w[old].since_ms)) old = (int)k;
    }
    bool known = ea_admit_known(a, &w[i].src);
    if (victim < 0 || (vknown && !known) || (vknown == known && count > vcount)) {
      victim = old;
      vcount = count;
      vknown = known;
    }
  }
  return victim;
}
