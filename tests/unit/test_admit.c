/* Check suite for ea_admit (include/ea_admit.h): the token bucket per
 * source, known sources, and which connection on probation is closed to
 * make room — per source, then max-min fair across sources, never one
 * whose header has arrived, never-authenticated sources first.  Virtual
 * time: the caller's clock is a number here. */
#include "ea_admit.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

static ea_addr v4(uint8_t d) {
  ea_addr a = {.family = 4, .port = 1000 + d};
  a.ip[0] = 10, a.ip[3] = d;
  return a;
}

static ea_addr v6(uint8_t net, uint8_t host) {
  ea_addr a = {.family = 6};
  a.ip[0] = 0x20, a.ip[1] = 0x01, a.ip[7] = net, a.ip[15] = host;
  return a;
}

static const ea_admit_config CFG = {.rate = 10, .burst = 20, .per_source = 8, .total = 64};

START_TEST(bucket) {
  ea_admit *a = ea_admit_new(&CFG);
  ck_assert_ptr_nonnull(a);
  ea_addr x = v4(1), y = v4(2);
  for (int i = 0; i < 20; i++) ck_assert(ea_admit_connect(a, &x, 1000));
  ck_assert(!ea_admit_connect(a, &x, 1000)); /* the burst is spent */
  ck_assert(ea_admit_connect(a, &y, 1000));  /* another source has its own */
  ck_assert(!ea_admit_connect(a, &x, 1050)); /* half a token */
  ck_assert(ea_admit_connect(a, &x, 1100));  /* 10 a second */
  ck_assert(!ea_admit_connect(a, &x, 1100));
  /* refilled to the burst, not beyond */
  for (int i = 0; i < 20; i++) ck_assert(ea_admit_connect(a, &x, 60000));
  ck_assert(!ea_admit_connect(a, &x, 60000));
  /* a known source is never refused; the port does not matter */
  ea_addr x2 = x;
  x2.port = 9;
  ck_assert(!ea_admit_known(a, &x2));
  ea_admit_authed(a, &x2, 60000);
  ck_assert(ea_admit_known(a, &x));
  for (int i = 0; i < 1000; i++) ck_assert(ea_admit_connect(a, &x, 60000));
  ea_admit_free(a);
}
END_TEST

START_TEST(ipv6_by_64) {
  ea_admit *a = ea_admit_new(&CFG);
  ea_addr p = v6(1, 1), q = v6(1, 2), r = v6(2, 1);
  ck_assert(ea_admit_same_source(&p, &q));
  ck_assert(!ea_admit_same_source(&p, &r));
  for (int i = 0; i < 20; i++) ck_assert(ea_admit_connect(a, i % 2 ? &p : &q, 5));
  ck_assert(!ea_admit_connect(a, &q, 5)); /* one /64, one bucket */
  ck_assert(ea_admit_connect(a, &r, 5));
  ea_addr four = v4(1);
  ck_assert(!ea_admit_same_source(&four, &p));
  ea_admit_free(a);
}
END_TEST

/* More sources than the table: the least recently seen is forgotten, an
 * authenticated one last. */
START_TEST(table_full) {
  ea_admit *a = ea_admit_new(&CFG);
  ea_addr known = v4(0);
  ea_admit_authed(a, &known, 1);
  for (int i = 1; i <= EA_ADMIT_SOURCES + 10; i++) {
    ea_addr s = {.family = 4};
    s.ip[0] = 11, s.ip[2] = (uint8_t)(i >> 8), s.ip[3] = (uint8_t)i;
    ck_assert(ea_admit_connect(a, &s, 10 + (uint64_t)i));
  }
  ck_assert(ea_admit_known(a, &known));
  ea_admit_free(a);
}
END_TEST

static ea_admit_wait wait_of(ea_addr src, uint64_t since, bool hdr) {
  return (ea_admit_wait){.src = src, .since_ms = since, .header_here = hdr};
}

START_TEST(victim_per_source) {
  ea_admit *a = ea_admit_new(&CFG);
  ea_admit_wait w[16];
  size_t n = 0;
  ea_addr x = v4(1), y = v4(2);
  for (int i = 0; i < 7; i++) w[n++] = wait_of(x, 100 + (uint64_t)i, false);
  w[n++] = wait_of(y, 50, false);
  bool own;
  ck_assert_int_eq(ea_admit_victim(a, w, n, &x, &own), -1); /* 7 from x: room for an 8th */
  w[n++] = wait_of(x, 99, true);                            /* its header is here */
  ck_assert_int_eq(ea_admit_victim(a, w, n, &x, &own), 0);  /* x's oldest waiting */
  ck_assert(own);
  ck_assert_int_eq(ea_admit_victim(a, w, n, &y, &own), -1); /* y: 1 of 8, 9 of 64 */
  ea_admit_free(a);
}
END_TEST

/* Past the total, the source holding the most loses its oldest waiting
 * connection, never-authenticated sources before known ones; a newcomer
 * holding nothing always gets room, however many sources flood. */
START_TEST(victim_fair) {
  ea_admit *a = ea_admit_new(&CFG);
  ea_admit_wait w[64];
  size_t n = 0;
  /* 25 flooding sources: 8, 8, 8, 8, 8, 8, 8, 8 from the first eight (64) */
  for (int s = 0; s < 8; s++)
    for (int i = 0; i < 8; i++)
      w[n++] = wait_of(v4((uint8_t)(10 + s)), (uint64_t)(s * 8 + i), false);
  ea_addr joiner = v4(99);
  bool own;
  int v = ea_admit_victim(a, w, n, &joiner, &own);
  ck_assert_int_ge(v, 0);
  ck_assert(!own);
  ck_assert_uint_eq(w[v].since_ms, 0); /* the oldest of a source holding 8 */
  /* one source holds more: it pays, though its connections are newer */
  w[63] = wait_of(v4(10), 500, false); /* source .10 now holds 9 */
  v = ea_admit_victim(a, w, n, &joiner, &own);
  ck_assert(ea_admit_same_source(&w[v].src, &w[0].src));
  ck_assert_uint_eq(w[v].since_ms, 0);
  /* its header is here: not that one, the next oldest of the same source */
  w[0].header_here = true;
  v = ea_admit_victim(a, w, n, &joiner, &own);
  ck_assert_uint_eq(w[v].since_ms, 1);
  /* a known source is evicted only when no stranger is waiting */
  ea_addr ten = v4(10);
  ea_admit_authed(a, &ten, 1);
  v = ea_admit_victim(a, w, n, &joiner, &own);
  ck_assert(!ea_admit_same_source(&w[v].src, &ten));
  for (size_t i = 0; i < n; i++) w[i].src = ten;
  w[5].header_here = false;
  v = ea_admit_victim(a, w, n, &joiner, &own);
  ck_assert_int_ge(v, 0);
  /* every one's header is here: nobody can be closed */
  for (size_t i = 0; i < n; i++) w[i].header_here = true;
  ck_assert_int_eq(ea_admit_victim(a, w, n, &joiner, &own), -1);
  ea_admit_free(a);
}
END_TEST

static Suite *admit_suite(void) {
  Suite *s = suite_create("admit");
  TCase *tc = tcase_create("admit");
  tcase_add_test(tc, bucket);
  tcase_add_test(tc, ipv6_by_64);
  tcase_add_test(tc, table_full);
  tcase_add_test(tc, victim_per_source);
  tcase_add_test(tc, victim_fair);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(admit_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
