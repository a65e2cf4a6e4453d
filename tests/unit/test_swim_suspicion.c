/* Check suite for the suspicion timers (membership/swim_suspicion.c).
 *
 * Promises (memberlist's suspicion.go, with the numbers of swim.c's opening
 * comment): min = suspicion_mult · log10(max(N,10)) · probe_interval and
 * max = suspicion_max_mult · min; K = suspicion_mult − 2, capped, and 0 when
 * fewer than K others could confirm; a timer starts at max (at min when
 * K = 0); each confirmation from a new `from` shrinks it to
 * max − (max − min) · ln(C+1)/ln(K+1), measured from the start, down to
 * min after K; repeats, the accuser itself and confirmations past K change
 * nothing; the first timer to expire is always the one with the earliest
 * deadline, through confirmations and cancellations.  Seeded (EA_SEED=…).
 */
#include "swim_suspicion.h"
#include "swim_unit.h"

#include <check.h>
#include <math.h>

static ea_swim_config cfg(void) {
  ea_swim_config c;
  ea_swim_config_default(&c);
  return c;
}

START_TEST(test_bounds_formula) {
  ea_swim_config c = cfg();
  c.suspicion_mult = 4;
  c.suspicion_max_mult = 6;
  c.probe_interval_ms = 150;
  uint64_t mn, mx;
  uint32_t ns[] = {1, 5, 10, 11, 64, 100, 1000, 5000};
  for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
    ea__susp_bounds(&c, ns[i], &mn, &mx);
    double n = ns[i] < 10 ? 10 : ns[i];
    ck_assert_uint_eq(mn, (uint64_t)floor(4.0 * log10(n) * 150));
    ck_assert_uint_eq(mx, 6 * mn);
  }
  ea__susp_bounds(&c, 64, &mn, &mx);
  ck_assert_uint_eq(mn, 1083); /* the figure swim.c's detection bound uses */
  ea__susp_bounds(&c, 3, &mn, &mx);
  ck_assert_uint_eq(mn, 600); /* small clusters count as 10 */
  c.suspicion_max_mult = 0;
  ea__susp_bounds(&c, 64, &mn, &mx);
  ck_assert_uint_eq(mx, mn); /* max never below min */
  c.suspicion_mult = 0;
  ea__susp_bounds(&c, 64, &mn, &mx);
  ck_assert_uint_eq(mn, 1); /* never a zero timer */
}
END_TEST

START_TEST(test_k_formula) {
  ea_swim_config c = cfg();
  c.suspicion_mult = 4;
  ck_assert_uint_eq(ea__susp_k(&c, 64), 2);
  ck_assert_uint_eq(ea__susp_k(&c, 4), 2);
  ck_assert_uint_eq(ea__susp_k(&c, 3), 0); /* one other member cannot give two confirmations */
  ck_assert_uint_eq(ea__susp_k(&c, 1), 0);
  ck_assert_uint_eq(ea__susp_k(&c, 0), 0);
  c.suspicion_mult = 2;
  ck_assert_uint_eq(ea__susp_k(&c, 64), 0);
  c.suspicion_mult = 30;
  ck_assert_uint_eq(ea__susp_k(&c, 1000), EA__SUSP_K_MAX);
  ck_assert_uint_eq(ea__susp_k(&c, 10), 0);
}
END_TEST

static ea__susp one(uint64_t mn, uint64_t mx, uint32_t k, uint32_t n) {
  ea__susp p;
  memset(&p, 0, sizeof p);
  p.min = mn;
  p.max = mx;
  p.k = k;
  p.n = n;
  return p;
}

START_TEST(test_timeout_formula) {
  ea__susp p = one(1000, 6000, 2, 0);
  ck_assert_uint_eq(ea__susp_timeout(&p), 6000);
  p.n = 1;
  ck_assert_uint_eq(ea__susp_timeout(&p), (uint64_t)floor(6000 - 5000 * log(2) / log(3)));
  ck_assert_uint_eq(ea__susp_timeout(&p), 2845);
  p.n = 2;
  ck_assert_uint_eq(ea__susp_timeout(&p), 1000);
  p = one(1000, 6000, 0, 0);
  ck_assert_uint_eq(ea__susp_timeout(&p), 1000);
  /* Monotone, and never below min, for any K. */
  for (uint32_t k = 1; k <= EA__SUSP_K_MAX; k++) {
    uint64_t last = UINT64_MAX;
    for (uint32_t n = 0; n <= k; n++) {
      p = one(500, 3000, k, n);
      uint64_t t = ea__susp_timeout(&p);
      ck_assert_uint_le(t, last);
      ck_assert_uint_ge(t, 500);
      last = t;
    }
    ck_assert_uint_eq(last, 500);
  }
}
END_TEST

START_TEST(test_confirmations_shrink_the_timer) {
  ea__susp_set t;
  ea__susp_init(&t);
  ea_node_id accuser = test_id(1), c1 = test_id(2), c2 = test_id(3), c3 = test_id(4);
  uint32_t si;
  ck_assert_int_eq(ea__susp_start(&t, 10000, 42, &accuser, 1000, 6000, 2, &si), 0);
  const ea__susp *p = ea__susp_at(&t, si);
  ck_assert_uint_eq(p->key, 42);
  ck_assert_uint_eq(p->deadline, 16000);          /* starts at max */
  ck_assert(!ea__susp_confirm(&t, si, &accuser)); /* the accusation is not a confirmation */
  ck_assert_uint_eq(p->deadline, 16000);
  ck_assert(ea__susp_confirm(&t, si, &c1));
  ck_assert_uint_eq(p->deadline, 10000 + 2845); /* from the start, not from now */
  ck_assert(!ea__susp_confirm(&t, si, &c1));    /* a repeat */
  ck_assert_uint_eq(p->deadline, 12845);
  ck_assert(ea__susp_confirm(&t, si, &c2));
  ck_assert_uint_eq(p->deadline, 11000);     /* K in: min */
  ck_assert(!ea__susp_confirm(&t, si, &c3)); /* past K: nothing to gain */
  ck_assert_uint_eq(p->deadline, 11000);
  ck_assert_uint_eq(p->n, 2);
  ck_assert_int_eq(memcmp(&p->from[0], &accuser, sizeof accuser), 0);
  /* K = 0: min from the start, and nothing confirms. */
  uint32_t s0;
  ck_assert_int_eq(ea__susp_start(&t, 20000, 43, &accuser, 1000, 6000, 0, &s0), 0);
  ck_assert_uint_eq(ea__susp_at(&t, s0)->deadline, 21000);
  ck_assert(!ea__susp_confirm(&t, s0, &c1));
  ea__susp_close(&t);
}
END_TEST

START_TEST(test_first_to_expire) {
  ea__susp_set t;
  ea__susp_init(&t);
  ck_assert_ptr_null(ea__susp_first(&t));
  ea_node_id who = test_id(1), other = test_id(2);
  uint32_t a, b, c;
  ea__susp_start(&t, 0, 1, &who, 1000, 6000, 2, &a);    /* due 6000 */
  ea__susp_start(&t, 1000, 2, &who, 1000, 6000, 2, &b); /* due 7000 */
  ea__susp_start(&t, 2000, 3, &who, 1000, 3000, 0, &c); /* due 3000: K = 0 */
  ck_assert_uint_eq(ea__susp_count(&t), 3);
  ck_assert_uint_eq(ea__susp_first(&t)->key, 3);
  ea__susp_cancel(&t, c);
  ck_assert_uint_eq(ea__susp_first(&t)->key, 1);
  /* A confirmation can overtake: b falls to 1000 + 2845 < 6000. */
  ck_assert(ea__susp_confirm(&t, b, &other));
  ck_assert_uint_eq(ea__susp_first(&t)->key, 2);
  ck_assert_uint_eq(ea__susp_first(&t)->deadline, 3845);
  /* A cancelled timer's slot is reused. */
  uint32_t d;
  ea__susp_start(&t, 3000, 4, &who, 1000, 6000, 2, &d);
  ck_assert_uint_eq(d, c);
  ea__susp_close(&t);
}
END_TEST

START_TEST(test_many_timers_expire_in_order) {
  ea__susp_set t;
  ea__susp_init(&t);
  enum { M = 300 };
  uint32_t si[M];
  bool live[M];
  for (uint32_t i = 0; i < M; i++) {
    ea_node_id who = test_id(i);
    uint64_t mn = 100 + rnd_below(1000);
    ck_assert_int_eq(ea__susp_start(&t, rnd_below(5000), i, &who, mn, mn * 6, 2, &si[i]), 0);
    live[i] = true;
  }
  for (int k = 0; k < 400; k++) {
    uint32_t i = rnd_below(M);
    if (!live[i]) continue;
    if (rnd() & 1) {
      ea_node_id c = test_id(1000 + (uint32_t)k);
      ea__susp_confirm(&t, si[i], &c);
    } else if (rnd_below(4) == 0) {
      ea__susp_cancel(&t, si[i]);
      live[i] = false;
    }
  }
  /* Expire everything: deadlines come out in order, each live timer once. */
  uint64_t last = 0;
  uint32_t n = 0;
  const ea__susp *p;
  while ((p = ea__susp_first(&t))) {
    ck_assert_uint_ge(p->deadline, last);
    last = p->deadline;
    uint32_t key = p->key;
    ck_assert(live[key]);
    live[key] = false;
    ea__susp_cancel(&t, si[key]);
    n++;
  }
  for (uint32_t i = 0; i < M; i++) ck_assert(!live[i]);
  ck_assert_uint_gt(n, 0);
  ea__susp_close(&t);
}
END_TEST

int main(void) {
  Suite *s = suite_create("swim_suspicion");
  TCase *t = tcase_create("suspicion");
  tcase_add_checked_fixture(t, seed_rng, NULL);
  tcase_add_test(t, test_bounds_formula);
  tcase_add_test(t, test_k_formula);
  tcase_add_test(t, test_timeout_formula);
  tcase_add_test(t, test_confirmations_shrink_the_timer);
  tcase_add_test(t, test_first_to_expire);
  tcase_add_test(t, test_many_timers_expire_in_order);
  suite_add_tcase(s, t);
  return run_suite(s, "swim_suspicion");
}
