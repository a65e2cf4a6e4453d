/* Check suite for the straggler detector (rdzv/straggler.c), in virtual
 * time: a rank over factor × the median for a whole window is a
 * straggler, not a millisecond before; a fast sample, a stale rank, a new
 * generation or a slow majority clear it; the lower median makes the
 * slower of two ranks judgeable; sub-millisecond differences are noise. */
#include "ea_rdzv.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static ea_node_id node(int i) {
  ea_node_id id = {{0}};
  id.b[0] = (uint8_t)(i + 1);
  return id;
}

/* One sample per rank at now: times[i] for rank i of world n, gen g. */
static void feed(ea_rdzv_strag *s, uint64_t now, uint64_t g, const double *t, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    ea_node_id id = node((int)i);
    ck_assert_int_eq(ea_rdzv_strag_sample(s, now, g, n, i, &id, t[i]), 0);
  }
}

static const ea_rdzv_strag_rank *rank_of(const ea_rdzv_strag *s, uint32_t r) {
  const ea_rdzv_strag_rank *x;
  size_t n = ea_rdzv_strag_ranks(s, &x);
  ck_assert_uint_lt(r, n);
  return &x[r];
}

START_TEST(test_window_boundary) {
  /* factor 2, window 3 s: rank 3 at 3× the median from t = 1000 (its first
   * slow sample) is not a straggler at 3999, is one at 4000. */
  ea_rdzv_strag *s = ea_rdzv_strag_new(2.0, 3000);
  ck_assert_ptr_nonnull(s);
  const double t[4] = {0.010, 0.011, 0.009, 0.030};
  for (uint64_t now = 1000; now <= 3000; now += 1000) {
    feed(s, now, 7, t, 4);
    ck_assert_uint_eq(ea_rdzv_strag_eval(s, now), 0);
    ck_assert(rank_of(s, 3)->slow);
    ck_assert(!rank_of(s, 0)->slow && !rank_of(s, 1)->slow && !rank_of(s, 2)->slow);
  }
  ck_assert_uint_eq(ea_rdzv_strag_eval(s, 3999), 0);
  ck_assert(!rank_of(s, 3)->straggler);
  ck_assert_uint_eq(rank_of(s, 3)->slow_since_ms, 1000);
  ck_assert_uint_eq(ea_rdzv_strag_eval(s, 4000), 1);
  ck_assert(rank_of(s, 3)->straggler);
  uint32_t nf;
  ck_assert(fabs(ea_rdzv_strag_median(s, &nf) - 0.010) < 1e-12); /* lower median of 4 */
  ck_assert_uint_eq(nf, 4);
  ck_assert_uint_eq(ea_rdzv_strag_gen(s), 7);
  ck_assert(ea_node_id_cmp(&rank_of(s, 3)->node, &(ea_node_id){{4}}) == 0);
  /* One fast second ends it; the window starts over from the next slow one. */
  const double ok[4] = {0.010, 0.011, 0.009, 0.012};
  feed(s, 5000, 7, ok, 4);
  ck_assert_uint_eq(ea_rdzv_strag_eval(s, 5000), 0);
  ck_assert(!rank_of(s, 3)->slow && !rank_of(s, 3)->straggler);
  for (uint64_t now = 6000; now <= 8000; now += 1000) {
    feed(s, now, 7, t, 4);
    ck_assert_uint_eq(ea_rdzv_strag_eval(s, now), 0);
  }
  feed(s, 9000, 7, t, 4);
  ck_assert_uint_eq(ea_rdzv_strag_eval(s, 9000), 1);
  ea_rdzv_strag_free(s);
}
END_TEST

START_TEST(test_ratio_rules) {
  ea_rdzv_strag *s = ea_rdzv_strag_new(2.0, 1000);
  /* Two ranks: the lower median is the faster one, so the slower is judged. */
  const double two[2] = {0.010, 0.025};
  feed(s, 1000, 1, two, 2);
  ck_assert_uint_eq(ea_rdzv_strag_eval(s, 1000), 0);
  feed(s, 2000, 1, two, 2);
  ck_assert_uint_eq(ea_rdzv_strag_eval(s, 2000), 1);
  ck_assert(rank_of(s, 1)->straggler && !rank_of(s, 0)->slow);
  /* Exactly factor × median is not over it. */
  const double edge[2] = {0.010, 0.020};
  feed(s, 3000, 1, edge, 2);
  ck_assert_uint_eq(ea_rdzv_strag_eval(s, 3000), 0);
  ck_assert(!rank_of(s, 1)->slow);
  /* A slow majority is the norm: the median is slow, nobody straggles. */
  const double most[5] = {0.010, 0.030, 0.031, 0.030, 0.032};
  for (uint64_t now = 4000; now <= 7000; now += 1000) {
    feed(s, now, 2, most, 5);
    ck_assert_uint_eq(ea_rdzv_strag_eval(s, now), 0);
  }
  for (uint32_t r = 0; r < 5; r++) ck_assert(!rank_of(s, r)->slow);
  /* Ten times slower, but by less than a millisecond: noise. */
  const double tiny[3] = {0.00005, 0.00005, 0.0005};
  for (uint64_t now = 8000; now <= 11000; now += 1000) {
    feed(s, now, 3, tiny, 3);
    ck_assert_uint_eq(ea_rdzv_strag_eval(s, now), 0);
  }
  ck_assert(!rank_of(s, 2)->slow);
  /* One rank alone is never judged. */
  ea_node_id id = node(0);
  ck_assert_int_eq(ea_rdzv_strag_sample(s, 12000, 4, 1, 0, &id, 5.0), 0);
  ck_assert_uint_eq(ea_rdzv_strag_eval(s, 12000), 0);
  ck_assert(ea_rdzv_strag_median(s, NULL) == 0);
  ea_rdzv_strag_free(s);
}
END_TEST

START_TEST(test_stale_and_generations) {
  ea_rdzv_strag *s = ea_rdzv_strag_new(1.5, 2000);
  const double t[3] = {0.010, 0.010, 0.050};
  for (uint64_t now = 1000; now <= 3000; now += 1000) {
    feed(s, now, 10, t, 3);
    ck_assert_uint_eq(ea_rdzv_strag_eval(s, now), now == 3000);
  }
  /* Rank 2 stops reporting: judged until its sample is STALE_MS old. */
  const double others[2] = {0.010, 0.010};
  for (uint64_t now = 4000; now <= 3000 + EA_RDZV_STRAG_STALE_MS + 1000; now += 1000) {
    for (uint32_t r = 0; r < 2; r++) {
      ea_node_id id = node((int)r);
      ck_assert_int_eq(ea_rdzv_strag_sample(s, now, 10, 3, r, &id, others[r]), 0);
    }
    uint32_t n = ea_rdzv_strag_eval(s, now);
    ck_assert_uint_eq(n, now - 3000 <= EA_RDZV_STRAG_STALE_MS ? 1 : 0);
  }
  ck_assert(!rank_of(s, 2)->straggler && !rank_of(s, 2)->slow);
  /* A newer generation forgets the older; an older one is refused. */
  ck_assert_int_eq(ea_rdzv_strag_sample(s, 9000, 11, 2, 0, &(ea_node_id){{1}}, 0.01), 0);
  const ea_rdzv_strag_rank *x;
  ck_assert_uint_eq(ea_rdzv_strag_ranks(s, &x), 2);
  ck_assert(x[0].have && !x[1].have);
  ck_assert_int_eq(ea_rdzv_strag_sample(s, 9000, 10, 3, 2, &(ea_node_id){{3}}, 0.05), -ESTALE);
  /* Bounds. */
  ea_node_id id = node(0);
  ck_assert_int_eq(ea_rdzv_strag_sample(s, 9000, 11, 2, 2, &id, 0.01), -EINVAL);
  ck_assert_int_eq(ea_rdzv_strag_sample(s, 9000, 11, 0, 0, &id, 0.01), -EINVAL);
  ck_assert_int_eq(ea_rdzv_strag_sample(s, 9000, 0, 2, 0, &id, 0.01), -EINVAL);
  ck_assert_int_eq(ea_rdzv_strag_sample(s, 9000, 11, 2, 0, &id, -1), -EINVAL);
  ck_assert_int_eq(ea_rdzv_strag_sample(s, 9000, 11, 2, 0, &id, NAN), -EINVAL);
  ck_assert_int_eq(ea_rdzv_strag_sample(s, 9000, 11, EA_RDZV_MAX_WORLD + 1, 0, &id, 0.01), -EINVAL);
  ea_rdzv_strag_reset(s);
  ck_assert_uint_eq(ea_rdzv_strag_gen(s), 0);
  ck_assert_uint_eq(ea_rdzv_strag_ranks(s, &x), 0);
  ea_rdzv_strag_free(s);
  ck_assert_ptr_null(ea_rdzv_strag_new(1.0, 1000));
  ck_assert_ptr_null(ea_rdzv_strag_new(2.0, 0));
  ck_assert_ptr_null(ea_rdzv_strag_new(NAN, 1000));
}
END_TEST

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

START_TEST(test_median_is_the_lower_median) {
  /* The selection (no sort) agrees with sorting, duplicates and all, for
   * every size from 2 to 300 and seeded values. */
  uint64_t x = 0x9e3779b97f4a7c15ull;
  static double v[300], sorted[300];
  for (uint32_t n = 2; n <= 300; n++) {
    ea_rdzv_strag *s = ea_rdzv_strag_new(2.0, 1000);
    for (uint32_t i = 0; i < n; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      v[i] = (double)(x % (n % 3 == 0 ? 5 : 1000)) / 1000.0; /* some sizes: many equal */
      ea_node_id id = node((int)(i % 200));
      ck_assert_int_eq(ea_rdzv_strag_sample(s, 1000, 1, n, i, &id, v[i]), 0);
    }
    memcpy(sorted, v, n * sizeof v[0]);
    qsort(sorted, n, sizeof sorted[0], cmp_d);
    ea_rdzv_strag_eval(s, 1000);
    uint32_t nf;
    ck_assert_msg(ea_rdzv_strag_median(s, &nf) == sorted[(n - 1) / 2], "n=%u", n);
    ck_assert_uint_eq(nf, n);
    ea_rdzv_strag_free(s);
  }
}
END_TEST

static Suite *straggler_suite(void) {
  Suite *s = suite_create("straggler");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_window_boundary);
  tcase_add_test(tc, test_ratio_rules);
  tcase_add_test(tc, test_stale_and_generations);
  tcase_add_test(tc, test_median_is_the_lower_median);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(straggler_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
