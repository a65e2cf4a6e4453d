/* Check suite for the admin socket's JSON (base/json.c, on jansson).
 *
 * What json.c promises, tested as such: documents are one line of compact
 * JSON ("k":v, as tests/e2e/lib.sh's `counter` greps them); names that are
 * not valid UTF-8 still give a valid document (U+FFFD for each bad byte);
 * counters are exact to 2^63-1; fixed-decimal reals print like the "%.Nf"
 * they replace (minus trailing zeros) and keep their JSON type; the CLI's
 * DOM gives back each number's literal as written and bounds nesting; and
 * running out of memory at any allocation either yields the whole
 * document or flags it (never a document with holes), leaking nothing.
 */
#include "agent_int.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *dump_and_free(json_t *doc) {
  ck_assert_ptr_nonnull(doc);
  char *s = ea_json_dump(doc);
  ck_assert_ptr_nonnull(s);
  json_decref(doc);
  return s;
}

START_TEST(compact_one_line) {
  ea_jb b = {0};
  json_t *d = json_object();
  json_t *o = ea_jb_obj(&b, d, "counters");
  ea_jb_u64(&b, o, "dropped_unauthenticated", 7);
  json_t *a = ea_jb_arr(&b, d, "nodes");
  ea_jb_str(&b, a, NULL, "n1");
  ea_jb_str(&b, a, NULL, "n2");
  ea_jb_null(&b, d, "latest");
  ea_jb_bool(&b, d, "self", true);
  ck_assert(!b.oom);
  char *s = dump_and_free(d);
  ck_assert_str_eq(s,
                   "{\"counters\":{\"dropped_unauthenticated\":7},\"nodes\":[\"n1\",\"n2\"],"
                   "\"latest\":null,\"self\":true}");
  free(s);
}
END_TEST

START_TEST(strings_stay_valid_utf8) {
  ea_jb b = {0};
  json_t *d = json_object();
  ea_jb_str(&b, d, "bad",
            "a\xff"
            "b\xc0\x80"
            "c");                                     /* a stray byte, an overlong NUL */
  ea_jb_str(&b, d, "surrogate", "\xed\xa0\x80");      /* U+D800 encoded: not UTF-8 */
  ea_jb_str(&b, d, "ok", "n\xc3\xa4me \xe2\x82\xac"); /* "näme €" */
  ea_jb_str(&b, d, "ctl", "q\"\\\n\x01");
  ea_jb_str(&b, d, "null", NULL);
  ck_assert(!b.oom);
  char *s = dump_and_free(d);
  ck_assert_str_eq(s,
                   "{\"bad\":\"a\xef\xbf\xbd"
                   "b\xef\xbf\xbd\xef\xbf\xbd"
                   "c\","
                   "\"surrogate\":\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\","
                   "\"ok\":\"n\xc3\xa4me \xe2\x82\xac\",\"ctl\":\"q\\\"\\\\\\n\\u0001\","
                   "\"null\":\"\"}");
  free(s);
}
END_TEST

START_TEST(numbers_keep_types_and_values) {
  ea_jb b = {0};
  json_t *d = json_object();
  ea_jb_u64(&b, d, "big", INT64_MAX);
  ea_jb_u64(&b, d, "huge", UINT64_MAX);
  ea_jb_int(&b, d, "neg", -3);
  ea_jb_fixed(&b, d, "loss", 0.12345678, 6);
  ea_jb_fixed(&b, d, "loss0", 2.5, 6);
  ea_jb_fixed(&b, d, "uptime", 12.0, 1);
  ea_jb_fixed(&b, d, "uptime2", 30.649, 1);
  ea_jb_fixed(&b, d, "ms", 0.0004, 3);
  ea_jb_fixed(&b, d, "nan", NAN, 3);
  ea_jb_fixed(&b, d, "inf", INFINITY, 3);
  ck_assert(!b.oom);
  char *s = dump_and_free(d);
  ck_assert_str_eq(s,
                   "{\"big\":9223372036854775807,\"huge\":1.84467440737096e19,\"neg\":-3,"
                   "\"loss\":0.123457,\"loss0\":2.5,\"uptime\":12.0,\"uptime2\":30.6,"
                   "\"ms\":0.0,\"nan\":null,\"inf\":null}");
  free(s);
}
END_TEST

START_TEST(error_document) {
  char *s = dump_and_free(ea_json_error("no alive member named 'x'"));
  ck_assert_str_eq(s, "{\"error\":\"no alive member named 'x'\"}");
  free(s);
}
END_TEST

START_TEST(parse_gives_literals_back) {
  const char *doc =
      "{\"a\":{\"n\":18446744073709551615.0,\"i\":123456789012,\"r\":0.935250,"
      "\"u\":12.0,\"t\":true,\"z\":null,\"s\":\"x\\u00e4\"},\"l\":[1,2,3],"
      "\"e\":[]}";
  ea_json *j = NULL;
  char err[128];
  ck_assert_int_eq(ea_json_parse(doc, strlen(doc), &j, err, sizeof err), 0);
  ck_assert_str_eq(ea_json_str(j, "a.i", "?"), "123456789012");
  ck_assert_str_eq(ea_json_str(j, "a.r", "?"), "0.93525");
  ck_assert_str_eq(ea_json_str(j, "a.u", "?"), "12.0");
  ck_assert_str_eq(ea_json_str(j, "a.n", "?"), "1.8446744073709552e19");
  ck_assert_str_eq(ea_json_str(j, "a.t", "?"), "true");
  ck_assert_str_eq(ea_json_str(j, "a.z", "?"), "null");
  ck_assert_str_eq(ea_json_str(j, "a.s", "?"), "x\xc3\xa4");
  ck_assert_str_eq(ea_json_str(j, "a.missing", "?"), "?");
  ck_assert(ea_json_num(j, "a.r", 0) == 0.93525);
  ck_assert(ea_json_num(j, "a.t", 0) == 1);
  ck_assert_int_eq(ea_json_get(j, "a.z")->type, EA_J_NULL);
  const ea_json *l = ea_json_get(j, "l");
  ck_assert_int_eq(l->type, EA_J_ARR);
  ck_assert_uint_eq(l->n, 3);
  ck_assert_str_eq(l->child->next->next->text, "3");
  ck_assert_ptr_null(l->child->next->next->next);
  ck_assert_uint_eq(ea_json_get(j, "e")->n, 0);
  ck_assert_ptr_null(ea_json_get(j, "e")->child);
  ck_assert_int_eq(ea_json_get(j, "a")->type, EA_J_OBJ);
  ck_assert_str_eq(ea_json_get(j, "a")->child->key, "n"); /* document order */
  ea_json_free(j);
}
END_TEST

START_TEST(parse_round_trips_our_writer) {
  ea_jb b = {0};
  json_t *d = json_object();
  ea_jb_fixed(&b, d, "since_s", 20.5, 1);
  ea_jb_fixed(&b, d, "step_ms", 0.78, 2);
  ea_jb_u64(&b, d, "gen", 163491);
  ea_jb_fixed(&b, d, "tiny", 1e-7, 9);
  ea_jb_u64(&b, d, "huge", UINT64_MAX);
  char *s = dump_and_free(d);
  ea_json *j = NULL;
  char err[128];
  ck_assert_int_eq(ea_json_parse(s, strlen(s), &j, err, sizeof err), 0);
  ck_assert_str_eq(ea_json_str(j, "since_s", "?"), "20.5");
  ck_assert_str_eq(ea_json_str(j, "step_ms", "?"), "0.78");
  ck_assert_str_eq(ea_json_str(j, "gen", "?"), "163491");
  /* the literal the CLI shows is the one the agent wrote */
  const char *tiny = strstr(s, "\"tiny\":") + 7, *huge = strstr(s, "\"huge\":") + 7;
  ck_assert_str_eq(ea_json_str(j, "tiny", "?"), "1e-7");
  ck_assert_int_eq(strncmp(tiny, "1e-7,", 5), 0);
  ck_assert_str_eq(ea_json_str(j, "huge", "?"), "1.84467440737096e19");
  ck_assert_int_eq(strncmp(huge, "1.84467440737096e19}", 20), 0);
  ea_json_free(j);
  free(s);
}
END_TEST

START_TEST(parse_errors_name_the_offset) {
  ea_json *j = NULL;
  char err[128] = "";
  const char *bad = "{\"a\":1,}";
  ck_assert_int_eq(ea_json_parse(bad, strlen(bad), &j, err, sizeof err), -EINVAL);
  ck_assert_msg(strstr(err, "JSON offset "), "%s", err);
  ck_assert_int_eq(ea_json_parse("", 0, &j, err, sizeof err), -EINVAL);
  /* nesting: 64 levels below the root parse, 65 do not */
  char deep[2 * 66 + 1];
  for (int depth = 65; depth <= 66; depth++) {
    memset(deep, '[', (size_t)depth);
    memset(deep + depth, ']', (size_t)depth);
    int rc = ea_json_parse(deep, 2 * (size_t)depth, &j, err, sizeof err);
    if (depth == 65) {
      ck_assert_int_eq(rc, 0);
      ea_json_free(j);
    } else {
      ck_assert_int_eq(rc, -EINVAL);
      ck_assert_msg(strstr(err, "nested"), "%s", err);
    }
  }
}
END_TEST

/* ---- out of memory at every allocation --------------------------------------- */

static long g_allocs_left, g_live;

static void *failing_malloc(size_t n) {
  if (g_allocs_left == 0) return NULL;
  if (g_allocs_left > 0) g_allocs_left--;
  void *p = malloc(n);
  if (p) g_live++;
  return p;
}

static void counting_free(void *p) {
  if (p) g_live--;
  free(p);
}

/* A document shaped like `status`: nested objects, arrays, every setter. */
static json_t *build(ea_jb *b) {
  json_t *d = json_object();
  ea_jb_str(b, d, "version", "0.1.0");
  json_t *self = ea_jb_obj(b, d, "self");
  ea_jb_str(b, self, "name", "n\xff");
  ea_jb_int(b, self, "pid", 42);
  ea_jb_fixed(b, self, "uptime_s", 3.25, 1);
  json_t *ms = ea_jb_arr(b, d, "members");
  for (int i = 0; i < 3; i++) {
    json_t *m = ea_jb_obj(b, ms, NULL);
    ea_jb_str(b, m, "name", "member");
    ea_jb_bool(b, m, "self", i == 0);
    ea_jb_u64(b, m, "incarnation", (uint64_t)i);
  }
  ea_jb_null(b, d, "resumed");
  return d;
}

START_TEST(out_of_memory_anywhere) {
  ea_jb b0 = {0};
  char *want = dump_and_free(build(&b0));
  ck_assert(!b0.oom);
  json_set_alloc_funcs(failing_malloc, counting_free);
  int flagged = 0;
  for (long k = 0;; k++) {
    g_allocs_left = k;
    g_live = 0;
    ea_jb b = {0};
    json_t *d = build(&b);
    char *got = d && !b.oom ? ea_json_dump(d) : NULL;
    json_decref(d);
    bool whole = got && strcmp(got, want) == 0;
    ck_assert_msg(b.oom || !d || whole || !got, "allocation %ld: a document with holes: %s", k,
                  got ? got : "(none)");
    free(got); /* ea_json_dump's buffer is libc malloc's */
    ck_assert_msg(g_live == 0, "allocation %ld: %ld blocks leaked", k, g_live);
    if (whole) break;
    flagged += b.oom;
    ck_assert_msg(k < 10000, "never completed");
  }
  json_set_alloc_funcs(malloc, free);
  ck_assert_int_gt(flagged, 10);
  free(want);
}
END_TEST

static Suite *json_suite(void) {
  Suite *s = suite_create("json");
  TCase *tc = tcase_create("json");
  tcase_add_test(tc, compact_one_line);
  tcase_add_test(tc, strings_stay_valid_utf8);
  tcase_add_test(tc, numbers_keep_types_and_values);
  tcase_add_test(tc, error_document);
  tcase_add_test(tc, parse_gives_literals_back);
  tcase_add_test(tc, parse_round_trips_our_writer);
  tcase_add_test(tc, parse_errors_name_the_offset);
  tcase_add_test(tc, out_of_memory_anywhere);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(json_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
