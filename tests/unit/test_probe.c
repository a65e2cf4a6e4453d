/* Check suite for the checkpoint-directory probe's codec (agent/ckpt/probe_wire.c,
 * drawn in agent/ckpt/probe.h): what `elastic-agent preflight --join` sends to a
 * running agent on the control channel and what it answers.  Round trips of
 * both messages, the file-name rule that keeps a request inside
 * checkpoint.dir, the encoder refusing what the decoder would, and the
 * decoder's promises on hostile input: every truncation and every flipped
 * byte either decodes to something the encoder accepts or fails naming a
 * field with the message zeroed. */
#include "probe.h"

#include "ea_mpread.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ea__probe_msg req(void) {
  ea__probe_msg m;
  memset(&m, 0, sizeof m);
  m.type = EA__PROBE_REQ;
  memset(m.src.b, 0xab, 16);
  m.nonce = 0x0123456789abcdefull;
  m.reply_to.family = 4;
  m.reply_to.port = 40123;
  m.reply_to.ip[0] = 10, m.reply_to.ip[3] = 7;
  snprintf(m.file, sizeof m.file, ".preflight-0123456789abcdef0123456789abcdef");
  snprintf(m.token, sizeof m.token, "5f1e2d3c4b5a69788796a5b4c3d2e1f0a1b2c3d4e5f60718");
  return m;
}

static ea__probe_msg ans(void) {
  ea__probe_msg m;
  memset(&m, 0, sizeof m);
  m.type = EA__PROBE_ANS;
  memset(m.src.b, 0x42, 16);
  m.nonce = 99;
  m.result = EA__PROBE_ABSENT;
  snprintf(m.node, sizeof m.node, "gpu-node-3");
  snprintf(m.dir, sizeof m.dir, "/var/lib/elastic-agent/checkpoints");
  m.wall_us = 1796159001885123ull;
  return m;
}

START_TEST(request_round_trip) {
  ea__probe_msg m = req(), back;
  uint8_t buf[EA__PROBE_WIRE_MAX];
  size_t len;
  ck_assert_int_eq(ea__probe_encode(&m, buf, sizeof buf, &len), 0);
  ck_assert(ea__probe_wire_is(buf, len));
  const char *err = NULL;
  ck_assert_int_eq(ea__probe_decode(buf, len, &back, &err), 0);
  ck_assert_int_eq(back.type, EA__PROBE_REQ);
  ck_assert_mem_eq(back.src.b, m.src.b, 16);
  ck_assert_uint_eq(back.nonce, m.nonce);
  ck_assert_int_eq(ea_addr_eq(&back.reply_to, &m.reply_to), 1);
  ck_assert_str_eq(back.file, m.file);
  ck_assert_str_eq(back.token, m.token);
}
END_TEST

START_TEST(answer_round_trip) {
  ea__probe_msg m = ans(), back;
  uint8_t buf[EA__PROBE_WIRE_MAX];
  size_t len;
  for (uint8_t r = EA__PROBE_SEEN; r <= EA__PROBE_ERROR; r++) {
    m.result = r;
    m.error = r == EA__PROBE_ERROR ? EACCES : 0;
    ck_assert_int_eq(ea__probe_encode(&m, buf, sizeof buf, &len), 0);
    ck_assert_int_eq(ea__probe_decode(buf, len, &back, NULL), 0);
    ck_assert_int_eq(back.result, r);
    ck_assert_uint_eq(back.error, m.error);
    ck_assert_str_eq(back.node, "gpu-node-3");
    ck_assert_str_eq(back.dir, m.dir);
    ck_assert_uint_eq(back.wall_us, m.wall_us);
  }
  /* the longest directory still fits the buffer the agent uses */
  memset(m.dir, 'd', sizeof m.dir - 1);
  m.dir[sizeof m.dir - 1] = 0;
  memset(m.node, 'n', sizeof m.node - 1);
  m.node[sizeof m.node - 1] = 0;
  ck_assert_int_eq(ea__probe_encode(&m, buf, sizeof buf, &len), 0);
  ck_assert_int_eq(ea__probe_decode(buf, len, &back, NULL), 0);
  ck_assert_uint_eq(strlen(back.dir), sizeof m.dir - 1);
  ck_assert_str_eq(ea__probe_result_str(EA__PROBE_SEEN), "seen");
  ck_assert_str_eq(ea__probe_result_str(EA__PROBE_DIFFERS), "differs");
}
END_TEST

START_TEST(file_names_stay_inside_the_directory) {
  ck_assert(ea__probe_file_ok(".preflight-0"));
  ck_assert(ea__probe_file_ok(".preflight-0123456789abcdef0123456789abcdef"));
  ck_assert(!ea__probe_file_ok(".preflight-"));
  ck_assert(!ea__probe_file_ok(".preflight-0123456789abcdef0123456789abcdef0"));
  ck_assert(!ea__probe_file_ok(".preflight-../../etc/passwd"));
  ck_assert(!ea__probe_file_ok(".preflight-ABCDEF"));
  ck_assert(!ea__probe_file_ok("MANIFEST"));
  ck_assert(!ea__probe_file_ok("../.preflight-00"));
  /* the encoder refuses such a request, and so does the decoder: build the
   * bytes of a valid request, then swap the name for a path of equal length */
  ea__probe_msg m = req();
  uint8_t buf[EA__PROBE_WIRE_MAX];
  size_t len;
  snprintf(m.file, sizeof m.file, ".preflight-../x");
  ck_assert_int_eq(ea__probe_encode(&m, buf, sizeof buf, &len), -EINVAL);
  m = req();
  snprintf(m.file, sizeof m.file, ".preflight-00000");
  ck_assert_int_eq(ea__probe_encode(&m, buf, sizeof buf, &len), 0);
  uint8_t *p = memmem(buf, len, ".preflight-00000", 16);
  ck_assert_ptr_nonnull(p);
  memcpy(p + 11, "../xx", 5);
  ea__probe_msg back;
  const char *err = NULL;
  ck_assert_int_eq(ea__probe_decode(buf, len, &back, &err), -EA_EWIRE);
  ck_assert_str_eq(err, "file");
}
END_TEST

START_TEST(encoder_refuses_what_the_decoder_would) {
  uint8_t buf[EA__PROBE_WIRE_MAX];
  size_t len;
  ea__probe_msg m = req();
  m.reply_to.port = 0;
  ck_assert_int_eq(ea__probe_encode(&m, buf, sizeof buf, &len), -EINVAL);
  m = req();
  m.reply_to.family = 0;
  ck_assert_int_eq(ea__probe_encode(&m, buf, sizeof buf, &len), -EINVAL);
  m = req();
  m.token[0] = 0;
  ck_assert_int_eq(ea__probe_encode(&m, buf, sizeof buf, &len), -EINVAL);
  m = ans();
  m.result = EA__PROBE_ERROR; /* an error needs its errno */
  ck_assert_int_eq(ea__probe_encode(&m, buf, sizeof buf, &len), -EINVAL);
  m.result = 9;
  ck_assert_int_eq(ea__probe_encode(&m, buf, sizeof buf, &len), -EINVAL);
  m = ans();
  m.type = 0x20;
  ck_assert_int_eq(ea__probe_encode(&m, buf, sizeof buf, &len), -EINVAL);
  m = ans();
  ck_assert_int_eq(ea__probe_encode(&m, buf, 10, &len), -EMSGSIZE);
}
END_TEST

/* Every prefix of a valid message fails (naming a field, message zeroed);
 * every single-byte change either fails the same way or decodes to a
 * message the encoder accepts. */
START_TEST(hostile_input_names_a_field) {
  ea__probe_msg ms[2] = {req(), ans()};
  static const ea__probe_msg zero;
  for (int k = 0; k < 2; k++) {
    uint8_t buf[EA__PROBE_WIRE_MAX], re[EA__PROBE_WIRE_MAX];
    size_t len, rlen;
    ck_assert_int_eq(ea__probe_encode(&ms[k], buf, sizeof buf, &len), 0);
    for (size_t n = 0; n < len; n++) {
      ea__probe_msg m;
      const char *err = NULL;
      ck_assert_int_eq(ea__probe_decode(buf, n, &m, &err), -EA_EWIRE);
      ck_assert_ptr_nonnull(err);
      ck_assert(memcmp(&m, &zero, sizeof m) == 0);
    }
    for (size_t i = 0; i < len; i++) {
      for (int bit = 0; bit < 8; bit++) {
        uint8_t save = buf[i];
        buf[i] ^= (uint8_t)(1u << bit);
        ea__probe_msg m;
        const char *err = NULL;
        int rc = ea__probe_decode(buf, len, &m, &err);
        if (rc == 0)
          ck_assert_int_eq(ea__probe_encode(&m, re, sizeof re, &rlen), 0);
        else
          ck_assert(err != NULL && memcmp(&m, &zero, sizeof m) == 0);
        buf[i] = save;
      }
    }
    /* a trailing byte */
    buf[len] = 0xc0;
    ea__probe_msg m;
    const char *err = NULL;
    ck_assert_int_eq(ea__probe_decode(buf, len + 1, &m, &err), -EA_EWIRE);
    ck_assert_str_eq(err, "trailing bytes");
  }
}
END_TEST

START_TEST(other_codecs_are_not_probes) {
  /* [version 1, type 0x21, …]: a checkpoint report's head */
  const uint8_t ck[] = {0xEA, 0x94, 0x01, 0x21, 0xc0, 0xc0};
  const uint8_t job[] = {0xEA, 0x94, 0x01, 0x31, 0xc0, 0xc0};
  const uint8_t probe[] = {0xEA, 0x95, 0x01, 0x40, 0xc0, 0xc0, 0xc0};
  ck_assert(!ea__probe_wire_is(ck, sizeof ck));
  ck_assert(!ea__probe_wire_is(job, sizeof job));
  ck_assert(ea__probe_wire_is(probe, sizeof probe));
  ck_assert(!ea__probe_wire_is(probe, 2));
  ea__probe_msg m;
  const char *err = NULL;
  ck_assert_int_eq(ea__probe_decode(probe, sizeof probe, &m, &err), -EA_EWIRE);
  ck_assert_str_eq(err, "src");
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("probe");
  TCase *t = tcase_create("codec");
  tcase_add_test(t, request_round_trip);
  tcase_add_test(t, answer_round_trip);
  tcase_add_test(t, file_names_stay_inside_the_directory);
  tcase_add_test(t, encoder_refuses_what_the_decoder_would);
  tcase_add_test(t, hostile_input_names_a_field);
  tcase_add_test(t, other_codecs_are_not_probes);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
