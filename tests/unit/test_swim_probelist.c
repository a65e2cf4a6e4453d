/* Check suite for the probe order (membership/swim_probelist.c).
 *
 * Promises (SWIM §4.3, randomized round-robin): each round returns every
 * listed member exactly once, and the round boundary is reported; a new
 * round is a fresh shuffle; members removed during a round make nobody
 * else skipped or probed twice in it; a newcomer lands at a uniformly
 * random position, skips nobody, and costs at most one member (the one it
 * displaces from the probed prefix) a second probe that round; the owner's per-member position is
 * exact after every operation; and the randomness is drawn only through the owner's callback, a
 * fixed number of draws per operation (one per insert, n − 1 per shuffle), which is what lets the
 * simulator replay a run from one seed.  Seeded (EA_SEED=… replays).
 */
#include "swim_probelist.h"
#include "swim_unit.h"

#include <check.h>

#define KEYS 1024
static uint32_t pos[KEYS]; /* the owner's probe_pos per member */
static uint64_t draws;

static uint32_t *slot(void *ctx, uint32_t key) {
  ck_assert_ptr_eq(ctx, pos);
  ck_assert_uint_lt(key, KEYS);
  return &pos[key];
}

static uint32_t below(void *ctx, uint32_t n) {
  ck_assert_ptr_eq(ctx, pos);
  ck_assert_uint_gt(n, 0);
  draws++;
  return rnd_below(n);
}

static void setup(void) {
  seed_rng();
  draws = 0;
  for (uint32_t k = 0; k < KEYS; k++) pos[k] = EA__NONE;
}

static void assert_positions(const ea__plist *p) {
  uint32_t listed = 0;
  for (uint32_t i = 0; i < p->n; i++) ck_assert_uint_eq(pos[p->list[i]], i);
  for (uint32_t k = 0; k < KEYS; k++) listed += pos[k] != EA__NONE;
  ck_assert_uint_eq(listed, p->n);
  ck_assert_uint_le(p->cursor, p->n);
}

static void fill_list(ea__plist *p, uint32_t n) {
  for (uint32_t k = 0; k < n; k++) ck_assert_int_eq(ea__plist_insert(p, k), 0);
}

START_TEST(test_each_member_once_per_round) {
  ea__plist p;
  ea__plist_init(&p, slot, below, pos);
  bool nr;
  ck_assert_uint_eq(ea__plist_next(&p, &nr), EA__NONE); /* empty */
  ck_assert(!nr);
  enum { N = 37 };
  fill_list(&p, N);
  assert_positions(&p);
  uint32_t order[2][N];
  for (int round = 0; round < 6; round++) {
    bool seen[N] = {false};
    for (uint32_t i = 0; i < N; i++) {
      uint32_t k = ea__plist_next(&p, &nr);
      /* The first round runs in insertion order (already random); each
       * later one starts with a reshuffle, reported on its first probe. */
      ck_assert(nr == (round > 0 && i == 0));
      ck_assert_uint_lt(k, N);
      ck_assert(!seen[k]);
      seen[k] = true;
      if (round < 2) order[round][i] = k;
    }
    assert_positions(&p);
  }
  /* Rounds differ (the chance of two equal shuffles of 37 is 1/37!). */
  ck_assert_int_ne(memcmp(order[0], order[1], sizeof order[0]), 0);
  ea__plist_close(&p);
}
END_TEST

START_TEST(test_removal_mid_round_skips_nobody) {
  for (int trial = 0; trial < 200; trial++) {
    setup();
    g_rng ^= (uint64_t)trial * 0x9e3779b97f4a7c15ULL;
    ea__plist p;
    ea__plist_init(&p, slot, below, pos);
    uint32_t n = 2 + rnd_below(60);
    fill_list(&p, n);
    bool nr, probed[KEYS] = {false}, removed[KEYS] = {false};
    uint32_t taken = rnd_below(n);
    for (uint32_t i = 0; i < taken; i++) probed[ea__plist_next(&p, &nr)] = true;
    /* Remove some probed and some not yet probed members. */
    uint32_t nrm = rnd_below(n);
    for (uint32_t i = 0; i < nrm; i++) {
      uint32_t k = rnd_below(n);
      if (removed[k]) continue;
      ea__plist_remove(&p, k);
      removed[k] = true;
      ck_assert_uint_eq(pos[k], EA__NONE);
      assert_positions(&p);
    }
    ea__plist_remove(&p, KEYS - 1); /* never listed: a no-op */
    /* The rest of the round: exactly the members not yet probed, not removed. */
    uint32_t want = 0;
    for (uint32_t k = 0; k < n; k++) want += !probed[k] && !removed[k];
    for (uint32_t i = 0; i < want; i++) {
      uint32_t k = ea__plist_next(&p, &nr);
      ck_assert(!nr);
      ck_assert(!removed[k]);
      ck_assert(!probed[k]);
      probed[k] = true;
    }
    if (p.n) { /* and then a new round */
      ea__plist_next(&p, &nr);
      ck_assert(nr);
    }
    ea__plist_close(&p);
  }
}
END_TEST

START_TEST(test_newcomer_mid_round) {
  ea__plist p;
  ea__plist_init(&p, slot, below, pos);
  enum { N = 50 };
  fill_list(&p, N);
  bool nr;
  uint32_t seen[N + 1] = {0};
  for (uint32_t i = 0; i < 20; i++) seen[ea__plist_next(&p, &nr)]++;
  ck_assert_int_eq(ea__plist_insert(&p, N), 0); /* a newcomer mid-round */
  uint32_t landed = pos[N];
  assert_positions(&p);
  /* Until the round ends: nobody skipped; the newcomer probed iff it landed
   * ahead of the cursor; and iff it landed behind it, the one member it
   * displaced from the probed prefix is probed a second time. */
  uint32_t k = ea__plist_next(&p, &nr);
  for (; !nr; k = ea__plist_next(&p, &nr)) seen[k]++;
  uint32_t twice = 0;
  for (uint32_t m = 0; m < N; m++) {
    ck_assert_uint_ge(seen[m], 1);
    ck_assert_uint_le(seen[m], 2);
    twice += seen[m] == 2;
  }
  ck_assert_uint_eq(seen[N], landed >= 20 ? 1 : 0);
  ck_assert_uint_eq(twice, landed >= 20 ? 0 : 1);
  /* The next round (begun by the last call) has everyone exactly once. */
  memset(seen, 0, sizeof seen);
  seen[k]++;
  for (uint32_t i = 1; i < N + 1; i++) {
    seen[ea__plist_next(&p, &nr)]++;
    ck_assert(!nr);
  }
  for (uint32_t m = 0; m <= N; m++) ck_assert_uint_eq(seen[m], 1);
  ea__plist_close(&p);
}
END_TEST

START_TEST(test_newcomer_position_uniform) {
  /* Insert into a list of 9, note where it landed, take it out again. */
  enum { N = 9, TRIALS = 50000 };
  ea__plist p;
  ea__plist_init(&p, slot, below, pos);
  fill_list(&p, N);
  uint32_t hist[N + 1] = {0};
  for (int t = 0; t < TRIALS; t++) {
    ck_assert_int_eq(ea__plist_insert(&p, N), 0);
    hist[pos[N]]++;
    ea__plist_remove(&p, N);
  }
  assert_positions(&p);
  /* Chi-square, 9 degrees of freedom: 50 is p ≈ 1e-7 (a uniform draw fails
   * one seed in ten million; an append-only insert scores 450000). */
  double e = (double)TRIALS / (N + 1), chi = 0;
  for (int i = 0; i <= N; i++) chi += ((double)hist[i] - e) * ((double)hist[i] - e) / e;
  ck_assert_msg(chi < 50, "chi-square %.1f: positions not uniform", chi);
  ea__plist_close(&p);
}
END_TEST

START_TEST(test_draws_per_operation) {
  ea__plist p;
  ea__plist_init(&p, slot, below, pos);
  enum { N = 100 };
  fill_list(&p, N);
  ck_assert_uint_eq(draws, N); /* one per insert */
  bool nr;
  for (uint32_t i = 0; i < N; i++) ea__plist_next(&p, &nr);
  ck_assert_uint_eq(draws, N); /* probing within a round draws nothing */
  ea__plist_next(&p, &nr);
  ck_assert(nr);
  ck_assert_uint_eq(draws, N + (N - 1)); /* a Fisher–Yates shuffle */
  ea__plist_remove(&p, 5);
  ck_assert_uint_eq(draws, 2 * N - 1); /* removal draws nothing */
  ea__plist_close(&p);
}
END_TEST

START_TEST(test_restart_reserve_rekey) {
  ea__plist p;
  ea__plist_init(&p, slot, below, pos);
  ea__plist_reserve(&p, 500);
  ck_assert_uint_ge(p.cap, 500);
  uint32_t *before = p.list;
  fill_list(&p, 500);
  ck_assert_ptr_eq(p.list, before); /* no reallocation while filling */
  bool nr;
  uint32_t first[3];
  for (int i = 0; i < 3; i++) first[i] = ea__plist_next(&p, &nr);
  uint64_t d = draws;
  ea__plist_restart(&p); /* the same order again, no shuffle */
  for (int i = 0; i < 3; i++) {
    ck_assert_uint_eq(ea__plist_next(&p, &nr), first[i]);
    ck_assert(!nr);
  }
  ck_assert_uint_eq(draws, d);
  /* The owner moves member 499 to key 600 (a swap-remove in its table). */
  uint32_t at = pos[499];
  pos[600] = at;
  pos[499] = EA__NONE;
  ea__plist_rekey(&p, at, 600);
  assert_positions(&p);
  ea__plist_remove(&p, 600);
  assert_positions(&p);
  ck_assert_uint_eq(p.n, 499);
  ea__plist_close(&p);
}
END_TEST

int main(void) {
  Suite *s = suite_create("swim_probelist");
  TCase *t = tcase_create("probelist");
  tcase_add_checked_fixture(t, setup, NULL);
  tcase_add_test(t, test_each_member_once_per_round);
  tcase_add_test(t, test_removal_mid_round_skips_nobody);
  tcase_add_test(t, test_newcomer_mid_round);
  tcase_add_test(t, test_newcomer_position_uniform);
  tcase_add_test(t, test_draws_per_operation);
  tcase_add_test(t, test_restart_reserve_rekey);
  suite_add_tcase(s, t);
  return run_suite(s, "swim_probelist");
}
