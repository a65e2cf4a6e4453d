/* The project's one pseudo-random generator: xoshiro256** 1.0 (Blackman and
 * Vigna), seeded through splitmix64.  Seven copies of two or three
 * generators used to live in the gossip core, the simulator, the
 * transport, rendezvous, the trainer, the fault injector and the chaos
 * harness; they now all draw from this one, each from its own domain
 * (ea_base.h), so that a seed printed by a failing test replays everywhere.
 *
 * The definition is the trainer's, bit for bit, because the training data
 * order is a documented function of it (docs/trainer.md): changing a single
 * operation here would reorder every resumed job's data. */
#include "ea_base.h"

uint64_t ea_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t ea_splitmix64(uint64_t *x) {
  *x += 0x9E3779B97F4A7C15ull;
  return ea_mix64(*x);
}

void ea_rng_seed(ea_rng *r, uint64_t seed, uint64_t domain, uint64_t index) {
  uint64_t x = seed ^ ea_mix64(domain * 0x9E3779B97F4A7C15ull + index);
  for (int i = 0; i < 4; i++) r->s[i] = ea_splitmix64(&x);
  /* xoshiro's only bad state is all zeros; splitmix64 cannot produce four
   * zeros in a row, but keep the invariant explicit. */
  if ((r->s[0] | r->s[1] | r->s[2] | r->s[3]) == 0) r->s[0] = 1;
}

static inline uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

uint64_t ea_rng_next(ea_rng *r) {
  uint64_t *s = r->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

uint32_t ea_rng_below(ea_rng *r, uint64_t bound) {
  if (bound <= 1) return 0; /* one choice: nothing to draw */
  /* Lemire, "Fast random integer generation in an interval" (2019): the high
   * half of x·bound is uniform once the low half's biased zone is rejected. */
  uint64_t x = (ea_rng_next(r) >> 32) * bound;
  uint32_t lo = (uint32_t)x;
  if (lo < bound) {
    uint32_t thresh = (uint32_t)((0x100000000ull - bound) % bound);
    while (lo < thresh) {
      x = (ea_rng_next(r) >> 32) * bound;
      lo = (uint32_t)x;
    }
  }
  return (uint32_t)(x >> 32);
}

float ea_rng_unit(ea_rng *r) {
  return (float)(ea_rng_next(r) >> 40) * (1.0f / 16777216.0f);
}

double ea_rng_double(ea_rng *r) {
  return (double)(ea_rng_next(r) >> 11) * 0x1.0p-53;
}
