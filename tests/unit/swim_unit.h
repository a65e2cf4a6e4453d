/* swim_unit.h — what the unit suites of membership/'s data structures
 * share (test_swim_heap, _idmap, _meta, _probelist, _queue, _suspicion):
 * a seed from EA_SEED or the clock, printed so a failure replays, a
 * splitmix64 stream drawn from it, and the suite runner.
 */
#ifndef EA_SWIM_UNIT_H
#define EA_SWIM_UNIT_H

#include "ea_wire.h"

#include <check.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t g_seed, g_rng;

static inline uint64_t rnd(void) { /* splitmix64 */
  uint64_t z = (g_rng += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static inline uint32_t rnd_below(uint32_t n) {
  return (uint32_t)(rnd() % n);
}

/* Checked fixture: every case starts from the same stream. */
static inline void seed_rng(void) {
  g_rng = g_seed;
}

/* A random node id whose first bytes are `tag` (so tests can tell ids apart
 * at a glance); the rest is random. */
static inline ea_node_id test_id(uint32_t tag) {
  ea_node_id id;
  uint64_t a = rnd(), b = rnd();
  memcpy(id.b, &a, 8);
  memcpy(id.b + 8, &b, 8);
  memcpy(id.b, &tag, 4);
  return id;
}

static inline int run_suite(Suite *s, const char *name) {
  const char *e = getenv("EA_SEED");
  g_seed = (e && *e) ? strtoull(e, NULL, 0) : (uint64_t)time(NULL);
  printf("%s: seed %" PRIu64 " (EA_SEED=%" PRIu64 " to replay)\n", name, g_seed, g_seed);
  fflush(stdout);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}

#endif
