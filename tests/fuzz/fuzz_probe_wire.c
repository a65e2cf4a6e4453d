/* libFuzzer harness for the checkpoint-directory probe's decoder
 * (agent/ckpt/probe_wire.c over base/mpread.c: PROBE_REQ, PROBE_ANS), which a
 * running agent feeds with whatever arrives on its control channel.
 *
 * Beyond "no crash, no sanitizer report", it checks the codec's promises:
 * a failed decode names a field and leaves the message zeroed; whatever
 * decodes re-encodes, decodes again to an equal message and re-encodes to
 * the same bytes (canonical); ea__probe_wire_is holds for it; a request's
 * file name is one ea__probe_file_ok accepts (it can name no other path).
 * A mismatch aborts, which libFuzzer reports as a crash with the input
 * saved.
 *
 * Build and run through scripts/fuzz.sh (make fuzz).  Seeds:
 * tests/fuzz/corpus/probe_wire, one request and one answer, written by this
 * file built as a program:
 *   make && cc -DFUZZ_PROBE_WIRE_MAKE_CORPUS $(make -s print-cflags) tests/fuzz/fuzz_probe_wire.c \
 *      build/libea.a $(make -s print-libs) -o /tmp/mk && /tmp/mk tests/fuzz/corpus/probe_wire
 */
#include "probe.h"

#include "ea_mpread.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                             \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      fprintf(stderr, "fuzz_probe_wire: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                                  \
    }                                                                                           \
  } while (0)

#ifndef FUZZ_PROBE_WIRE_MAKE_CORPUS

static bool same(const ea__probe_msg *a, const ea__probe_msg *b) {
  if (a->type != b->type || memcmp(a->src.b, b->src.b, 16) || a->nonce != b->nonce) return false;
  if (a->type == EA__PROBE_REQ)
    return ea_addr_eq(&a->reply_to, &b->reply_to) && strcmp(a->file, b->file) == 0 &&
           strcmp(a->token, b->token) == 0;
  return a->result == b->result && a->error == b->error && strcmp(a->node, b->node) == 0 &&
         strcmp(a->dir, b->dir) == 0 && a->wall_us == b->wall_us;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static ea__probe_msg m, again;
  static const ea__probe_msg zero;
  const char *err = NULL;
  int rc = ea__probe_decode(data, size, &m, &err);
  if (rc != 0) {
    CHECK(rc == -EA_EWIRE);
    CHECK(err != NULL && err[0]);
    CHECK(memcmp(&m, &zero, sizeof m) == 0);
    return 0;
  }
  CHECK(ea__probe_wire_is(data, size));
  if (m.type == EA__PROBE_REQ) CHECK(ea__probe_file_ok(m.file));
  static uint8_t re[EA__PROBE_WIRE_MAX], re2[EA__PROBE_WIRE_MAX];
  size_t len = 0, len2 = 0;
  CHECK(ea__probe_encode(&m, re, sizeof re, &len) == 0);
  CHECK(ea__probe_decode(re, len, &again, &err) == 0);
  CHECK(same(&m, &again));
  CHECK(ea__probe_encode(&again, re2, sizeof re2, &len2) == 0);
  CHECK(len2 == len && memcmp(re, re2, len) == 0);
  return 0;
}

#else /* a program that writes the seed corpus */

static void put(const char *dir, const char *name, const ea__probe_msg *m) {
  uint8_t buf[EA__PROBE_WIRE_MAX];
  size_t len;
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (ea__probe_encode(m, buf, sizeof buf, &len) != 0 || !f || fwrite(buf, 1, len, f) != len ||
      fclose(f) != 0) {
    perror(path);
    exit(1);
  }
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  ea__probe_msg m;
  memset(&m, 0, sizeof m);
  m.type = EA__PROBE_REQ;
  memset(m.src.b, 0x11, 16);
  m.nonce = 0x1234;
  m.reply_to.family = 4;
  m.reply_to.port = 40000;
  m.reply_to.ip[0] = 127, m.reply_to.ip[3] = 1;
  snprintf(m.file, sizeof m.file, ".preflight-0123456789abcdef0123456789abcdef");
  snprintf(m.token, sizeof m.token, "00112233445566778899aabbccddeeff0011223344556677");
  put(argv[1], "request", &m);
  memset(&m, 0, sizeof m);
  m.type = EA__PROBE_ANS;
  memset(m.src.b, 0x22, 16);
  m.nonce = 0x1234;
  m.result = EA__PROBE_ERROR;
  m.error = 13;
  snprintf(m.node, sizeof m.node, "gpu-node-3");
  snprintf(m.dir, sizeof m.dir, "/mnt/shared/ckpt");
  m.wall_us = 1796159001885123ull;
  put(argv[1], "answer", &m);
  return 0;
}

#endif
