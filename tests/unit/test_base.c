/* Check suite for base/: the growable array, the string builder and the
 * bounded msgpack readers every codec shares (ea_mpread.h).  Each test is a
 * promise of the header: growth keeps contents, an overflowing request is
 * refused without touching the array, JSON quoting stays valid on hostile
 * bytes, and a reader never moves the cursor on failure. */
#include "ea_base.h"
#include "ea_log.h"
#include "ea_mpread.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <unistd.h>
#include <msgpack.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ea_logkv: in JSON each field is a member of the line's object, typed
 * (numbers as numbers, a non-finite double as null, strings escaped); in
 * text only the message shows. */
START_TEST(test_logkv_fields_are_json_members) {
  char path[] = "/tmp/ea-test-log-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  ck_assert_int_eq(ea_log_setup("info", "json", path), 0);
  ea_log_set_node("n1");
  ea_logkv(EA_LOG_INFO, "progress",
           (ea_log_kv[]){EA_KV_U("generation", 7), EA_KV_U("step", 120), EA_KV_F("loss", 2.5),
                         EA_KV_F("bad", NAN), EA_KV_I("delta", -3), EA_KV_S("why", "a\"b")},
           6, "gen=7 step=120 loss=%.1f", 2.5);
  ea_logkv(EA_LOG_DEBUG, "progress", NULL, 0, "below the level");
  ck_assert_int_eq(ea_log_setup("info", "text", path), 0);
  ea_logkv(EA_LOG_INFO, "progress", (ea_log_kv[]){EA_KV_U("step", 9)}, 1, "step=9");
  FILE *f = fopen(path, "r");
  ck_assert_ptr_nonnull(f);
  char a[512] = "", b[512] = "", c[64] = "";
  ck_assert_ptr_nonnull(fgets(a, sizeof a, f));
  ck_assert_ptr_nonnull(fgets(b, sizeof b, f));
  ck_assert_ptr_null(fgets(c, sizeof c, f));
  fclose(f);
  unlink(path);
  ck_assert_msg(strstr(a,
                       "\"node\":\"n1\",\"event\":\"progress\",\"generation\":7,\"step\":120,"
                       "\"loss\":2.5,\"bad\":null,\"delta\":-3,\"why\":\"a\\\"b\","
                       "\"msg\":\"gen=7 step=120 loss=2.5\"}\n") != NULL,
                "%s", a);
  ck_assert_msg(strstr(b, " info  n1 progress step=9\n") != NULL && !strstr(b, "\"step\""), "%s",
                b);
  ea_log_set_node("");
  ck_assert_int_eq(ea_log_setup("info", "text", NULL), 0);
}
END_TEST

/* A value with control bytes (a member name from the network, a worker's
 * output) cannot forge a log line or drive a terminal: in text they are
 * escaped as \n, \r, \t, \xNN, in JSON as \u00NN; either way the event is
 * one line (issue 11, item 7). */
START_TEST(test_log_escapes_control_bytes) {
  char path[] = "/tmp/ea-test-log-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  const char *forged = "n9\n2026-12-01T00:00:00.000Z info  n1 drain drained\r\x1b[2J\x7f\tend";
  ck_assert_int_eq(ea_log_setup("info", "text", path), 0);
  ea_log_set_node("n1\nx");
  ea_log(EA_LOG_INFO, "membership", "member %s joined", forged);
  ck_assert_int_eq(ea_log_setup("info", "json", path), 0);
  ea_logkv(EA_LOG_INFO, "membership", (ea_log_kv[]){EA_KV_S("name", forged)}, 1, "member %s joined",
           forged);
  FILE *f = fopen(path, "r");
  ck_assert_ptr_nonnull(f);
  char a[1024] = "", b[1024] = "", c[64] = "";
  ck_assert_ptr_nonnull(fgets(a, sizeof a, f));
  ck_assert_ptr_nonnull(fgets(b, sizeof b, f));
  ck_assert_ptr_null(fgets(c, sizeof c, f)); /* two events, two lines */
  fclose(f);
  unlink(path);
  ck_assert_msg(strstr(a,
                       " info  n1\\nx membership member n9\\n2026-12-01T00:00:00.000Z info  n1 "
                       "drain drained\\r\\x1b[2J\\x7f\\tend joined\n"),
                "%s", a);
  ck_assert_msg(strstr(b, "\"node\":\"n1\\u000ax\"") &&
                    strstr(b,
                           "\"name\":\"n9\\u000a2026-12-01T00:00:00.000Z info  n1 drain "
                           "drained\\u000d\\u001b[2J\\u007f\\u0009end\""),
                "%s", b);
  for (const char *p = a; *p; p++) ck_assert(*p == '\n' ? p[1] == 0 : (unsigned char)*p >= 0x20);
  ea_log_set_node("");
  ck_assert_int_eq(ea_log_setup("info", "text", NULL), 0);
}
END_TEST

START_TEST(test_array_grows_and_keeps_contents) {
  uint32_t *a = NULL;
  size_t cap = 0;
  for (uint32_t i = 0; i < 1000; i++) {
    ck_assert_int_eq(EA_ARRAY_RESERVE(a, cap, (size_t)i + 1), 0);
    a[i] = i * 7;
  }
  ck_assert_uint_ge(cap, 1000);
  ck_assert_uint_eq(cap & (cap - 1), 0); /* doubling from 16 */
  for (uint32_t i = 0; i < 1000; i++) ck_assert_uint_eq(a[i], i * 7);
  size_t before = cap;
  ck_assert_int_eq(EA_ARRAY_RESERVE(a, cap, 10), 0); /* no shrink, no move */
  ck_assert_uint_eq(cap, before);
  free(a);
}
END_TEST

START_TEST(test_array_overflow_refused_untouched) {
  uint64_t *a = NULL;
  size_t cap = 0;
  ck_assert_int_eq(EA_ARRAY_RESERVE(a, cap, 4), 0);
  uint64_t *keep = a;
  size_t kcap = cap;
  ck_assert_int_eq(EA_ARRAY_RESERVE(a, cap, SIZE_MAX / 4), -EOVERFLOW);
  ck_assert_ptr_eq(a, keep);
  ck_assert_uint_eq(cap, kcap);
  void *p = NULL;
  size_t c = 0;
  ck_assert_int_eq(ea_array_reserve(&p, &c, 3, 8, 2), 0);
  ck_assert_uint_eq(c, 4); /* from init 2, doubled once */
  free(p);
  free(a);
}
END_TEST

START_TEST(test_sb_printf_long_and_short) {
  ea_sb b = {0};
  ea_sb_printf(&b, "%s-%d", "x", 42);
  ck_assert_str_eq(b.buf, "x-42");
  char big[2000];
  memset(big, 'a', sizeof big - 1);
  big[sizeof big - 1] = 0;
  ea_sb_printf(&b, "[%s]", big); /* past the 256-byte fast path */
  ck_assert_uint_eq(b.len, 4 + 2 + 1999);
  ck_assert_int_eq(b.buf[b.len - 1], ']');
  ck_assert_uint_eq(strlen(b.buf), b.len);
  ea_sb_putn(&b, "xyz", 2);
  ck_assert_int_eq(b.buf[b.len - 1], 'y');
  ea_sb_reset(&b);
  ck_assert_uint_eq(b.len, 0);
  ck_assert_str_eq(b.buf, "");
  ck_assert(!b.oom);
  ea_sb_free(&b);
  ck_assert_ptr_null(b.buf);
}
END_TEST

START_TEST(test_sb_json_str_hostile_bytes) {
  ea_sb b = {0};
  ea_sb_json_str(&b, "a\"b\\c\n\x01\x7f");
  ck_assert_str_eq(b.buf, "\"a\\\"b\\\\c\\u000a\\u0001\\u007f\"");
  ea_sb_reset(&b);
  ea_sb_json_str(&b,
                 "h\xc3\xa9"
                 "\xff"
                 "\xed\xa0\x80"
                 "\xc3");
  /* valid é kept; 0xff, a surrogate and a truncated sequence replaced */
  ck_assert_str_eq(b.buf, "\"h\xc3\xa9\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\"");
  ea_sb_free(&b);
}
END_TEST

/* UTF-8 text out of any bytes: invalid bytes as U+FFFD one for one, valid
 * characters kept, a character that crosses the limit left out whole. */
START_TEST(test_sb_put_utf8) {
  ea_sb b = {0};
  ea_sb_put_utf8(&b, "ok \xc3\xa9\xff\xed\xa0\x80 \xf0\x9f\x98\x80\xc3", 100);
  ck_assert_str_eq(b.buf,
                   "ok \xc3\xa9\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD \xf0\x9f\x98\x80"
                   "\xEF\xBF\xBD");
  ea_sb_reset(&b);
  ea_sb_put_utf8(&b, "ab\xf0\x9f\x98\x80", 5); /* the 4-byte character crosses 5 */
  ck_assert_str_eq(b.buf, "ab");
  ea_sb_reset(&b);
  ea_sb_put_utf8(&b, "ab\xff\xfe", 3); /* an invalid byte is one byte */
  ck_assert_str_eq(b.buf, "ab\xEF\xBF\xBD");
  ea_sb_reset(&b);
  ea_sb_put_utf8(&b, "", 10);
  ea_sb_put_utf8(&b, "xyz", 0);
  ck_assert_uint_eq(b.len, 0);
  ea_sb_free(&b);
}
END_TEST

/* msgpack bytes packed with msgpack-c, the writer every peer uses. */
typedef struct {
  msgpack_sbuffer sb;
  msgpack_packer pk;
} packed;

static void pk_begin(packed *p) {
  msgpack_sbuffer_init(&p->sb);
  msgpack_packer_init(&p->pk, &p->sb, msgpack_sbuffer_write);
}

START_TEST(test_mpr_int_float_map) {
  packed p;
  pk_begin(&p);
  msgpack_pack_map(&p.pk, 2);
  msgpack_pack_int64(&p.pk, -5);
  msgpack_pack_int64(&p.pk, INT64_MIN);
  msgpack_pack_double(&p.pk, 1.5);
  msgpack_pack_int(&p.pk, 3);
  ea__mpr r;
  ea__mpr_init(&r, (const uint8_t *)p.sb.data, p.sb.size);
  uint32_t n;
  ck_assert_int_eq(ea__mpr_map(&r, &n), 0);
  ck_assert_uint_eq(n, 2);
  int64_t v;
  const uint8_t *at = r.pos;
  ck_assert_int_eq(ea__mpr_int(&r, 0, 10, &v), EA__MPR_RANGE);
  ck_assert_ptr_eq(r.pos, at); /* a failed read does not move */
  ck_assert_int_eq(ea__mpr_int(&r, -10, 10, &v), 0);
  ck_assert_int_eq(v, -5);
  ck_assert_int_eq(ea__mpr_int(&r, INT64_MIN, 0, &v), 0);
  ck_assert(v == INT64_MIN);
  double d;
  ck_assert_int_eq(ea__mpr_float(&r, &d), 0);
  ck_assert(d == 1.5);
  ck_assert_int_eq(ea__mpr_float(&r, &d), 0); /* an int reads as a float */
  ck_assert(d == 3.0);
  ck_assert_int_eq(ea__mpr_float(&r, &d), EA__MPR_EOF);
  msgpack_sbuffer_destroy(&p.sb);
  /* a map claiming more entries than bytes left is a lie */
  const uint8_t lie[] = {0xdf, 0xff, 0xff, 0xff, 0xff, 0x01};
  ea__mpr_init(&r, lie, sizeof lie);
  ck_assert_int_eq(ea__mpr_map(&r, &n), EA__MPR_EOF);
  ck_assert_ptr_eq(r.pos, lie);
}
END_TEST

START_TEST(test_mpr_skip_depth_and_lies) {
  packed p;
  pk_begin(&p);
  for (int i = 0; i < 5; i++) msgpack_pack_array(&p.pk, 1);
  msgpack_pack_str_with_body(&p.pk, "deep", 4);
  msgpack_pack_ext_with_body(&p.pk, "xy", 2, 7);
  ea__mpr r;
  ea__mpr_init(&r, (const uint8_t *)p.sb.data, p.sb.size);
  ck_assert_int_eq(ea__mpr_skip(&r, 3), EA__MPR_RANGE);
  ck_assert_ptr_eq(r.pos, (const uint8_t *)p.sb.data);
  ck_assert_int_eq(ea__mpr_skip(&r, 5), 0);
  ck_assert_int_eq(ea__mpr_skip(&r, 0), 0); /* the ext */
  ck_assert_uint_eq(ea__mpr_left(&r), 0);
  msgpack_sbuffer_destroy(&p.sb);
  const uint8_t lie[] = {0xdd, 0x7f, 0xff, 0xff, 0xff, 0xc0};
  ea__mpr_init(&r, lie, sizeof lie);
  ck_assert_int_eq(ea__mpr_skip(&r, 16), EA__MPR_EOF);
  ck_assert_str_eq(ea__mpr_strerror(EA__MPR_EOF), "truncated");
}
END_TEST

START_TEST(test_mpr_cstr) {
  packed p;
  pk_begin(&p);
  msgpack_pack_str_with_body(&p.pk, "node-1", 6);
  msgpack_pack_str_with_body(&p.pk, "a\0b", 3);
  msgpack_pack_str_with_body(&p.pk, "toolong", 7);
  ea__mpr r;
  ea__mpr_init(&r, (const uint8_t *)p.sb.data, p.sb.size);
  char s[7];
  ck_assert_int_eq(ea__mpr_cstr(&r, s, sizeof s), 0);
  ck_assert_str_eq(s, "node-1");
  ck_assert_int_eq(ea__mpr_cstr(&r, s, sizeof s), EA__MPR_RANGE); /* NUL inside */
  ck_assert_int_eq(ea__mpr_skip(&r, 1), 0);
  ck_assert_int_eq(ea__mpr_cstr(&r, s, sizeof s), EA__MPR_RANGE); /* 7 > 6 */
  msgpack_sbuffer_destroy(&p.sb);
}
END_TEST

int main(void) {
  Suite *s = suite_create("base");
  TCase *tc = tcase_create("base");
  tcase_add_test(tc, test_logkv_fields_are_json_members);
  tcase_add_test(tc, test_log_escapes_control_bytes);
  tcase_add_test(tc, test_array_grows_and_keeps_contents);
  tcase_add_test(tc, test_array_overflow_refused_untouched);
  tcase_add_test(tc, test_sb_printf_long_and_short);
  tcase_add_test(tc, test_sb_json_str_hostile_bytes);
  tcase_add_test(tc, test_sb_put_utf8);
  tcase_add_test(tc, test_mpr_int_float_map);
  tcase_add_test(tc, test_mpr_skip_depth_and_lies);
  tcase_add_test(tc, test_mpr_cstr);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
