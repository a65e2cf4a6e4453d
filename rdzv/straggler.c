/* The straggler detector: which ranks of the running generation compute
 * their steps much slower than the others, for long enough to matter.
 *
 * The controller feeds it one sample per rank per second (the rank's mean
 * forward/backward time per step over that second, reported by its agent
 * in JOB_PACE) and asks it, once a second, to judge.  The judgement is
 * relative on purpose: the median of the ranks' own times is the
 * reference, so a model that is slow everywhere is not a straggler
 * anywhere, and no absolute threshold has to be tuned per model or
 * accelerator.  A rank must stay slow for a whole window: one slow second
 * (a checkpoint staging copy, a GC pause, a page-cache miss) is noise; a
 * slow GPU, a throttled CPU or a noisy neighbour lasts.  The rules are in
 * ea_rdzv.h, "straggler detection".
 *
 * It lives in rdzv/ because it is pure protocol logic of the controller,
 * next to the membership decisions an eviction feeds (ea_rdzv_hold_out),
 * and is tested in virtual time like the rest (tests/unit/test_straggler.c).
 */
#include "ea_rdzv.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct ea_rdzv_strag {
  double factor;
  uint32_t window_ms;
  uint64_t gen;
  uint32_t world;
  ea_rdzv_strag_rank *ranks; /* world */
  double *scratch;           /* world: the fresh samples, for the median */
  double median;
  uint32_t nfresh;
};

ea_rdzv_strag *ea_rdzv_strag_new(double factor, uint32_t window_ms) {
  if (!(factor > 1.0) || !isfinite(factor) || window_ms == 0) return NULL;
  ea_rdzv_strag *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->factor = factor;
  s->window_ms = window_ms;
  return s;
}

void ea_rdzv_strag_reset(ea_rdzv_strag *s) {
  free(s->ranks);
  free(s->scratch);
  s->ranks = NULL;
  s->scratch = NULL;
  s->gen = 0;
  s->world = 0;
  s->median = 0;
  s->nfresh = 0;
}

void ea_rdzv_strag_free(ea_rdzv_strag *s) {
  if (!s) return;
  ea_rdzv_strag_reset(s);
  free(s);
}

int ea_rdzv_strag_sample(ea_rdzv_strag *s, uint64_t now_ms, uint64_t gen64, uint32_t world,
                         uint32_t rank, const ea_node_id *node, double compute_s) {
  if (gen64 == 0 || world == 0 || world > EA_RDZV_MAX_WORLD || rank >= world ||
      !isfinite(compute_s) || compute_s < 0)
    return -EINVAL;
  if (gen64 < s->gen) return -ESTALE;
  if (gen64 > s->gen || world != s->world) {
    /* A new generation: ranks have moved, start over. */
    ea_rdzv_strag_rank *r = calloc(world, sizeof *r);
    double *d = malloc(world * sizeof *d);
    if (!r || !d) {
      free(r);
      free(d);
      return -ENOMEM;
    }
    ea_rdzv_strag_reset(s);
    s->ranks = r;
    s->scratch = d;
    s->gen = gen64;
    s->world = world;
  }
  ea_rdzv_strag_rank *x = &s->ranks[rank];
  x->have = true;
  x->node = *node;
  x->compute_s = compute_s;
  x->at_ms = now_ms;
  return 0;
}

/* The k-th smallest of v[0..n) (v is reordered): Hoare's selection, O(n)
 * on average, instead of sorting — the controller judges every second, and
 * a sort of 2^18 ranks took ~40 ms of its loop. */
static double select_kth(double *v, uint32_t n, uint32_t k) {
  int64_t lo = 0, hi = (int64_t)n - 1;
  while (lo < hi) {
    double pivot = v[lo + (hi - lo) / 2];
    int64_t i = lo, j = hi;
    while (i <= j) {
      while (v[i] < pivot) i++;
      while (v[j] > pivot) j--;
      if (i <= j) {
        double t = v[i];
        v[i++] = v[j];
        v[j--] = t;
      }
    }
    /* [lo, j] ≤ pivot ≤ [i, hi], and what lies between equals it */
    if ((int64_t)k <= j)
      hi = j;
    else if ((int64_t)k >= i)
      lo = i;
    else
      return v[k];
  }
  return v[k];
}

static bool fresh(const ea_rdzv_strag_rank *x, uint64_t now) {
  return x->have && (now < x->at_ms || now - x->at_ms <= EA_RDZV_STRAG_STALE_MS);
}

uint32_t ea_rdzv_strag_eval(ea_rdzv_strag *s, uint64_t now_ms) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < s->world; i++)
    if (fresh(&s->ranks[i], now_ms)) s->scratch[n++] = s->ranks[i].compute_s;
  s->nfresh = n;
  s->median = 0;
  if (n >= 2) s->median = select_kth(s->scratch, n, (n - 1) / 2);
  uint32_t stragglers = 0;
  for (uint32_t i = 0; i < s->world; i++) {
    ea_rdzv_strag_rank *x = &s->ranks[i];
    bool slow = n >= 2 && fresh(x, now_ms) && x->compute_s > s->factor * s->median &&
                x->compute_s - s->median >= EA_RDZV_STRAG_MIN_EXCESS_S;
    x->slow = slow;
    if (!slow) {
      x->slow_since_ms = 0;
      x->straggler = false;
      continue;
    }
    if (!x->slow_since_ms) x->slow_since_ms = x->at_ms ? x->at_ms : 1;
    x->straggler = now_ms >= x->slow_since_ms && now_ms - x->slow_since_ms >= s->window_ms;
    stragglers += x->straggler;
  }
  return stragglers;
}

size_t ea_rdzv_strag_ranks(const ea_rdzv_strag *s, const ea_rdzv_strag_rank **out) {
  *out = s->ranks;
  return s->world;
}

double ea_rdzv_strag_median(const ea_rdzv_strag *s, uint32_t *nfresh) {
  if (nfresh) *nfresh = s->nfresh;
  return s->median;
}

uint64_t ea_rdzv_strag_gen(const ea_rdzv_strag *s) {
  return s->gen;
}
