/* The page's memory (agent/obs/history.c), in virtual time: one point per
 * one-second slot whatever the tick's jitter, rings that keep the newest
 * EA__HIST_POINTS points and EA__HIST_GENS generations oldest first with
 * totals that keep counting, why a generation formed as the node sets say,
 * and the /api/v1/history text pinned exactly (escaping included) and
 * valid JSON when full.  The jittered tick's seed is printed; EA_SEED=…
 * replays it.
 */
#include "history.h"

#include "ea_base.h"

#include <check.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t g_seed;

static ea__hist_point pt(uint64_t step) {
  return (ea__hist_point){.t_s = 1700000000.0 + (double)step,
                          .step = step,
                          .steps_per_s = 10,
                          .has_loss = true,
                          .loss = 2.5,
                          .gen = 1,
                          .world = 3};
}

/* A slot's first sample is kept, the rest of the slot is not: the
 * boundary is the second, not the distance to the last point. */
START_TEST(one_point_per_second_slot) {
  ea__hist *h = malloc(sizeof *h);
  ea__hist_init(h);
  ea__hist_point p = pt(1);
  ck_assert(ea__hist_sample(h, 999, &p));   /* slot 0 */
  ck_assert(ea__hist_sample(h, 1000, &p));  /* slot 1, 1 ms later */
  ck_assert(!ea__hist_sample(h, 1999, &p)); /* still slot 1 */
  ck_assert(ea__hist_sample(h, 2000, &p));
  ck_assert(!ea__hist_sample(h, 1500, &p)); /* a clock that went back: ignored */
  ck_assert(ea__hist_sample(h, 5400, &p));  /* slots with no tick stay empty */
  ck_assert_uint_eq(h->npt, 4);
  ck_assert_uint_eq(h->points_total, 4);
  free(h);
}
END_TEST

/* The loop's tick every EA__MX_PERIOD_MS (500 ms) with up to 100 ms of
 * jitter each, for ten minutes: one point a second, never two in a slot. */
START_TEST(jittered_tick_gives_a_point_a_second) {
  ea__hist *h = malloc(sizeof *h);
  ea__hist_init(h);
  ea_rng rng;
  ea_rng_seed(&rng, g_seed, 31, 0);
  uint64_t t = 0, kept = 0;
  ea__hist_point p = pt(0);
  while (t < 600000) {
    p.step = t;
    kept += ea__hist_sample(h, t, &p);
    t += 500 + ea_rng_below(&rng, 101);
  }
  /* every slot of the 600 had at least one tick (ticks ≤ 600 ms apart) */
  ck_assert_msg(kept == 600, "kept %" PRIu64 " (EA_SEED=%" PRIu64 ")", kept, g_seed);
  for (size_t i = 1; i < h->npt; i++)
    ck_assert_uint_eq(ea__hist_point_at(h, i)->step / 1000,
                      ea__hist_point_at(h, i - 1)->step / 1000 + 1);
  free(h);
}
END_TEST

START_TEST(rings_keep_the_newest_oldest_first) {
  ea__hist *h = malloc(sizeof *h);
  ea__hist_init(h);
  for (uint64_t i = 0; i < EA__HIST_POINTS + 100; i++) {
    ea__hist_point p = pt(i);
    ck_assert(ea__hist_sample(h, i * 1000, &p));
  }
  ck_assert_uint_eq(h->npt, EA__HIST_POINTS);
  ck_assert_uint_eq(h->points_total, EA__HIST_POINTS + 100);
  ck_assert_uint_eq(ea__hist_point_at(h, 0)->step, 100);
  ck_assert_uint_eq(ea__hist_point_at(h, EA__HIST_POINTS - 1)->step, EA__HIST_POINTS + 99);
  ck_assert_ptr_null(ea__hist_point_at(h, EA__HIST_POINTS));

  for (uint64_t g = 1; g <= EA__HIST_GENS + 6; g++)
    ea__hist_generation(h, &(ea__hist_gen){.gen = g, .world = 2, .kind = EA__HIST_JOIN});
  ck_assert_uint_eq(h->ngen, EA__HIST_GENS);
  ck_assert_uint_eq(h->gens_total, EA__HIST_GENS + 6);
  ck_assert_uint_eq(ea__hist_gen_at(h, 0)->gen, 7);
  ck_assert_uint_eq(ea__hist_gen_at(h, EA__HIST_GENS - 1)->gen, EA__HIST_GENS + 6);
  ck_assert_ptr_null(ea__hist_gen_at(h, EA__HIST_GENS));
  free(h);
}
END_TEST

static const char *explain(bool first, const char *const *gone, const ea__hist_gone *fate,
                           size_t ngone, const char *const *joined, size_t njoined, bool restarted,
                           ea__hist_kind *kind) {
  static ea__hist_gen g;
  memset(&g, 0, sizeof g);
  ea__hist_explain(&g, first, gone, fate, ngone, joined, njoined, restarted);
  *kind = g.kind;
  return g.why;
}

START_TEST(why_a_generation_formed) {
  ea__hist_kind k;
  ck_assert_str_eq(explain(true, NULL, NULL, 0, NULL, 0, false, &k), "first generation here");
  ck_assert_int_eq(k, EA__HIST_START);

  const char *n3[] = {"n3"};
  ea__hist_gone dead[] = {EA__HIST_GONE_DEAD}, left[] = {EA__HIST_GONE_LEFT},
                held[] = {EA__HIST_GONE_HELD}, alive[] = {EA__HIST_GONE_ALIVE};
  ck_assert_str_eq(explain(false, n3, dead, 1, NULL, 0, true, &k), "lost n3");
  ck_assert_int_eq(k, EA__HIST_LOST); /* a node lost outranks the restart it caused */
  ck_assert_str_eq(explain(false, n3, left, 1, NULL, 0, false, &k), "left n3");
  ck_assert_int_eq(k, EA__HIST_LEFT);
  ck_assert_str_eq(explain(false, n3, held, 1, NULL, 0, false, &k), "held out n3");
  ck_assert_int_eq(k, EA__HIST_HELD_OUT);
  ck_assert_str_eq(explain(false, n3, alive, 1, NULL, 0, false, &k), "drained n3");
  ck_assert_int_eq(k, EA__HIST_DRAINED);

  const char *j[] = {"n4", "n5"};
  ck_assert_str_eq(explain(false, NULL, NULL, 0, j, 2, false, &k), "join n4, n5");
  ck_assert_int_eq(k, EA__HIST_JOIN);
  /* every cause named, in kind order; the kind is the first */
  const char *gone[] = {"a", "b", "c"};
  ea__hist_gone fate[] = {EA__HIST_GONE_LEFT, EA__HIST_GONE_DEAD, EA__HIST_GONE_DEAD};
  ck_assert_str_eq(explain(false, gone, fate, 3, j, 1, false, &k), "lost b, c; left a; join n4");
  ck_assert_int_eq(k, EA__HIST_LOST);

  ck_assert_str_eq(explain(false, NULL, NULL, 0, NULL, 0, true, &k),
                   "a worker failed: the same nodes restarted");
  ck_assert_int_eq(k, EA__HIST_FAILURE);
  explain(false, NULL, NULL, 0, NULL, 0, false, &k);
  ck_assert_int_eq(k, EA__HIST_REFORM);
  ck_assert_str_eq(ea__hist_kind_str(EA__HIST_HELD_OUT), "held_out");
  ck_assert_str_eq(ea__hist_kind_str(EA__HIST_KINDS), "?");
}
END_TEST

/* Forty 63-byte names do not fit: whole names only, then ", …"; the text
 * ends inside its buffer. */
START_TEST(why_is_cut_between_names) {
  static char names[40][64];
  const char *gone[40];
  ea__hist_gone fate[40];
  for (int i = 0; i < 40; i++) {
    memset(names[i], 'a' + i % 26, 63);
    names[i][63] = 0;
    gone[i] = names[i];
    fate[i] = EA__HIST_GONE_DEAD;
  }
  ea__hist_gen g = {0};
  ea__hist_explain(&g, false, gone, fate, 40, NULL, 0, false);
  ck_assert_uint_lt(strlen(g.why), sizeof g.why);
  ck_assert_msg(strncmp(g.why, "lost aaa", 8) == 0, "%s", g.why);
  size_t n = strlen(g.why);
  ck_assert_msg(n >= 5 && strcmp(g.why + n - 5, ", \xE2\x80\xA6") == 0, "%s", g.why);
  /* two names fit in 191 bytes: "lost " + 63 + ", " + 63 + ", …" */
  ck_assert_uint_eq(n, 5 + 63 + 2 + 63 + 5);
}
END_TEST

START_TEST(document_exact) {
  ea__hist *h = malloc(sizeof *h);
  ea__hist_init(h);
  ea_sb b = {0};
  ea__hist_format(h, "n1", 1700000000.25, &b);
  ck_assert(!b.oom);
  ck_assert_str_eq(b.buf,
                   "{\"version\":1,\"node\":\"n1\",\"now\":1700000000.250,\"period_ms\":1000,"
                   "\"capacity\":{\"points\":600,\"generations\":64},\"points_total\":0,"
                   "\"generations_total\":0,\"points\":[],\"generations\":[],\"checkpoint\":null}");
  ea_sb_free(&b);

  ea__hist_point p = pt(7);
  ea__hist_sample(h, 1000, &p);
  p = (ea__hist_point){.t_s = 1700000001.5, .step = 9, .steps_per_s = NAN, .gen = 0};
  ea__hist_sample(h, 2000, &p); /* no loss yet, a rate that is not a number */
  ea__hist_gen g = {.gen = 2,
                    .t_s = 1700000001.125,
                    .world = 2,
                    .nodes = 2,
                    .formation_ms = 12,
                    .stalled_ms = 340,
                    .step = 9};
  snprintf(g.id, sizeof g.id, "2/00ff");
  const char *gone[] = {"<script>\"x\"\\</script>", "bad\xff"};
  ea__hist_gone fate[] = {EA__HIST_GONE_DEAD, EA__HIST_GONE_LEFT};
  ea__hist_explain(&g, false, gone, fate, 2, NULL, 0, false);
  ea__hist_generation(h, &g);
  ea__hist_checkpoint(
      h, &(ea__hist_ckpt){.have = true, .step = 200, .gen = 131073, .t_s = 1700000001.0});
  ea__hist_format(h, "n\n1", 1700000002.0, &b);
  ck_assert(!b.oom);
  ck_assert_str_eq(
      b.buf,
      "{\"version\":1,\"node\":\"n\\u000a1\",\"now\":1700000002.000,\"period_ms\":1000,"
      "\"capacity\":{\"points\":600,\"generations\":64},\"points_total\":2,"
      "\"generations_total\":1,\"points\":["
      "{\"t\":1700000007.000,\"step\":7,\"steps_per_s\":10.00,\"loss\":2.500000,\"gen\":1,"
      "\"world\":3},"
      "{\"t\":1700000001.500,\"step\":9,\"steps_per_s\":null,\"loss\":null,\"gen\":0,\"world\":0}"
      "],\"generations\":[{\"gen\":2,\"id\":\"2/00ff\",\"t\":1700000001.125,\"world\":2,"
      "\"nodes\":2,\"formation_ms\":12,\"stalled_ms\":340,\"step\":9,\"kind\":\"lost\","
      "\"why\":\"lost <script>\\\"x\\\"\\\\</script>; left bad\\ufffd\"}],"
      "\"checkpoint\":{\"step\":200,\"gen\":131073,\"t\":1700000001.000,\"bytes\":null}}");
  ea_sb_free(&b);
  free(h);
}
END_TEST

/* Full rings: still one JSON document a strict parser takes, with every
 * point and generation, and the totals past the capacity. */
START_TEST(full_document_parses) {
  ea__hist *h = malloc(sizeof *h);
  ea__hist_init(h);
  for (uint64_t i = 0; i < EA__HIST_POINTS * 2; i++) {
    ea__hist_point p = pt(i);
    p.loss = i % 7 ? 1.0 / (double)(i + 1) : INFINITY;
    ea__hist_sample(h, i * 1000, &p);
  }
  for (uint64_t g = 1; g <= 100; g++) {
    ea__hist_gen x = {.gen = g};
    snprintf(x.why, sizeof x.why, "join n%" PRIu64, g);
    ea__hist_generation(h, &x);
  }
  ea__hist_checkpoint(h, &(ea__hist_ckpt){.have = true, .have_bytes = true, .bytes = 1u << 30});
  ea_sb b = {0};
  ea__hist_format(h, "n1", 1.0, &b);
  ck_assert(!b.oom);
  json_error_t e;
  json_t *d = json_loads(b.buf, JSON_REJECT_DUPLICATES, &e);
  ck_assert_msg(d != NULL, "%s at %d", e.text, e.position);
  ck_assert_uint_eq(json_array_size(json_object_get(d, "points")), EA__HIST_POINTS);
  ck_assert_uint_eq(json_array_size(json_object_get(d, "generations")), EA__HIST_GENS);
  ck_assert_int_eq(json_integer_value(json_object_get(d, "points_total")), EA__HIST_POINTS * 2);
  ck_assert_int_eq(json_integer_value(json_object_get(d, "generations_total")), 100);
  json_t *last = json_array_get(json_object_get(d, "generations"), EA__HIST_GENS - 1);
  ck_assert_str_eq(json_string_value(json_object_get(last, "why")), "join n100");
  ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(d, "checkpoint"), "bytes")),
                   1 << 30);
  json_decref(d);
  /* about 55 KiB: what the page fetches every 2 s at most */
  ck_assert_uint_lt(b.len, 64 * 1024);
  ea_sb_free(&b);
  free(h);
}
END_TEST

int main(void) {
  const char *e = getenv("EA_SEED");
  g_seed = e ? strtoull(e, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
  printf("test_history: seed %" PRIu64 " (EA_SEED=%" PRIu64 " replays)\n", g_seed, g_seed);
  fflush(stdout);
  Suite *s = suite_create("history");
  TCase *tc = tcase_create("pure");
  tcase_add_test(tc, one_point_per_second_slot);
  tcase_add_test(tc, jittered_tick_gives_a_point_a_second);
  tcase_add_test(tc, rings_keep_the_newest_oldest_first);
  tcase_add_test(tc, why_a_generation_formed);
  tcase_add_test(tc, why_is_cut_between_names);
  tcase_add_test(tc, document_exact);
  tcase_add_test(tc, full_document_parses);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
