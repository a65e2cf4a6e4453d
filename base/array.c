/* One growable-array helper for every module.  Doubling keeps appends
 * amortised O(1); the overflow checks matter because counts in this project
 * often come off the network (a claimed member count, a manifest's tensor
 * count) before anything else bounds them. */
#include "ea_base.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

int ea_array_reserve(void **p, size_t *cap, size_t need, size_t elem, size_t init) {
  if (need <= *cap) return 0;
  if (elem == 0) return -EINVAL;
  size_t nc = *cap ? *cap : (init ? init : 16);
  while (nc < need) {
    if (nc > SIZE_MAX / 2) {
      nc = need;
      break;
    }
    nc *= 2;
  }
  if (nc > SIZE_MAX / elem) return -EOVERFLOW;
  void *q = realloc(*p, nc * elem);
  if (!q) return -ENOMEM;
  *p = q;
  *cap = nc;
  return 0;
}
