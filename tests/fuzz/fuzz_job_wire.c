/* libFuzzer harness for the job's control-message decoder (agent/job/job_wire.c
 * over base/mpread.c: JOB_EXIT, JOB_DONE, JOB_END, JOB_PACE, JOB_LINK_*), and for the error-file
 * parser (agent/job/job.c), which reads what a user's program wrote.
 *
 * Beyond "no crash, no sanitizer report", it checks the codec's promises:
 * a failed decode names a field and leaves the message zeroed; whatever
 * decodes re-encodes, decodes again to an equal message and re-encodes to
 * the same bytes (canonical); ea__job_wire_is holds for it; its failure
 * formats into a bounded line.  The same bytes are also parsed as a
 * TORCHELASTIC_ERROR_FILE: the message is NUL-terminated and within bounds
 * whatever the input.  A mismatch aborts, which libFuzzer reports as a
 * crash with the input saved.
 *
 * Build and run through scripts/fuzz.sh (make fuzz).  Seeds:
 * tests/fuzz/corpus/job_wire, one valid frame of each message type and
 * shape, written by this same file built as a program:
 *   make && cc -DFUZZ_JOB_WIRE_MAKE_CORPUS $(make -s print-cflags) tests/fuzz/fuzz_job_wire.c \
 *      build/libea.a $(make -s print-libs) -o /tmp/mk && /tmp/mk tests/fuzz/corpus/job_wire
 */
#include "job.h"

#include "ea_wire.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                           \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      fprintf(stderr, "fuzz_job_wire: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                                \
    }                                                                                         \
  } while (0)

#ifndef FUZZ_JOB_WIRE_MAKE_CORPUS

static bool fail_same(const ea__job_failure *a, const ea__job_failure *b) {
  return a->gen == b->gen && a->rank == b->rank && strcmp(a->node, b->node) == 0 &&
         a->has_code == b->has_code && a->code == b->code && a->signal == b->signal &&
         a->source == b->source && a->at_ms == b->at_ms && strcmp(a->message, b->message) == 0;
}

static bool msg_same(const ea__job_msg *a, const ea__job_msg *b) {
  if (a->type != b->type || memcmp(a->src.b, b->src.b, 16)) return false;
  switch (a->type) {
    case EA__JOB_EXIT:
      return fail_same(&a->f, &b->f);
    case EA__JOB_DONE:
    case EA__JOB_CKPT_AGAIN:
    case EA__JOB_RESTORE:
      return a->gen == b->gen && a->step == b->step;
    case EA__JOB_LINK_PING:
    case EA__JOB_LINK_PONG:
      return a->gen == b->gen && a->nonce == b->nonce;
    case EA__JOB_LINK_DOWN:
      return a->gen == b->gen && memcmp(a->peer.b, b->peer.b, 16) == 0;
    case EA__JOB_PACE:
      if (a->gen != b->gen || a->world != b->world || a->npace != b->npace) return false;
      for (uint32_t i = 0; i < a->npace; i++)
        if (a->pace[i].rank != b->pace[i].rank || a->pace[i].compute_s != b->pace[i].compute_s)
          return false;
      return true;
    default:
      return a->kind == b->kind && strcmp(a->reason, b->reason) == 0 &&
             a->has_failure == b->has_failure && (!a->has_failure || fail_same(&a->f, &b->f));
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* as a TORCHELASTIC_ERROR_FILE */
  char text[EA__JOB_MSG_MAX];
  memset(text, 0x55, sizeof text);
  int prc = ea__job_parse_error_file((const char *)data, size, text, sizeof text);
  CHECK(prc == 0 || prc == -EINVAL);
  CHECK(memchr(text, 0, sizeof text) != NULL);

  ea__job_msg m;
  const char *err = NULL;
  int rc = ea__job_decode(data, size, &m, &err);
  if (rc != 0) {
    CHECK(rc == -EA_EWIRE);
    CHECK(err != NULL && err[0]);
    static const ea__job_msg zero;
    CHECK(memcmp(&m, &zero, sizeof m) == 0);
    return 0;
  }
  CHECK(ea__job_wire_is(data, size));
  uint8_t re[EA__JOB_WIRE_MAX];
  size_t len = 0;
  CHECK(ea__job_encode(&m, re, sizeof re, &len) == 0);
  ea__job_msg again;
  CHECK(ea__job_decode(re, len, &again, &err) == 0);
  CHECK(msg_same(&m, &again));
  uint8_t re2[EA__JOB_WIRE_MAX];
  size_t len2 = 0;
  CHECK(ea__job_encode(&again, re2, sizeof re2, &len2) == 0);
  CHECK(len2 == len && memcmp(re, re2, len) == 0);
  if (m.type == EA__JOB_EXIT || m.has_failure) {
    char line[EA__JOB_MSG_MAX + 256];
    ea__job_failure_str(&m.f, line, sizeof line);
    CHECK(strlen(line) < sizeof line);
  }
  return 0;
}

#else /* a program that writes the seed corpus */

static const char *g_dir;

static void put(const char *name, const void *b, size_t len) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", g_dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(b, 1, len, f) != len || fclose(f) != 0) {
    perror(path);
    exit(1);
  }
}

static void put_msg(const char *name, const ea__job_msg *m) {
  uint8_t buf[EA__JOB_WIRE_MAX];
  size_t len;
  if (ea__job_encode(m, buf, sizeof buf, &len) != 0) {
    fprintf(stderr, "cannot encode %s\n", name);
    exit(1);
  }
  put(name, buf, len);
}

static void failure(ea__job_failure *f, bool code) {
  memset(f, 0, sizeof *f);
  f->gen = (7ull << 16) | 0x1f2e;
  f->rank = 5;
  snprintf(f->node, sizeof f->node, "gpu-node-3");
  f->has_code = code;
  f->code = code ? 1 : 0;
  f->signal = code ? 0 : 9;
  f->source = code ? EA__JOB_SRC_ERROR_FILE : EA__JOB_SRC_STDERR;
  f->at_ms = 1796159001885ull;
  snprintf(f->message, sizeof f->message,
           code ? "RuntimeError: CUDA out of memory\ntrain.py:42 in step"
                : "Traceback (most recent call last):\nKeyboardInterrupt");
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  g_dir = argv[1];
  ea__job_msg m;
  memset(&m, 0, sizeof m);
  m.type = EA__JOB_EXIT;
  memset(m.src.b, 0x11, 16);
  failure(&m.f, true);
  put_msg("exit-code", &m);
  failure(&m.f, false);
  put_msg("exit-signal", &m);
  memset(&m, 0, sizeof m);
  m.type = EA__JOB_DONE;
  memset(m.src.b, 0x22, 16);
  m.gen = (9ull << 16) | 0x0102;
  m.step = 250;
  put_msg("done", &m);
  m.type = EA__JOB_CKPT_AGAIN;
  put_msg("ckpt-again", &m);
  m.type = EA__JOB_RESTORE;
  put_msg("restore", &m);
  memset(&m, 0, sizeof m);
  m.type = EA__JOB_PACE;
  memset(m.src.b, 0x44, 16);
  m.gen = (9ull << 16) | 0x0102;
  m.world = 8;
  m.npace = 2;
  m.pace[0] = (ea__job_pace){4, 0.0123};
  m.pace[1] = (ea__job_pace){5, 0.25};
  put_msg("pace", &m);
  memset(&m, 0, sizeof m);
  m.type = EA__JOB_LINK_PING;
  memset(m.src.b, 0x55, 16);
  m.gen = (9ull << 16) | 0x0102;
  m.nonce = 0x1234567890ull;
  put_msg("link-ping", &m);
  m.type = EA__JOB_LINK_PONG;
  put_msg("link-pong", &m);
  m.type = EA__JOB_LINK_DOWN;
  m.nonce = 0;
  memset(m.peer.b, 0x66, 16);
  put_msg("link-down", &m);
  memset(&m, 0, sizeof m);
  m.type = EA__JOB_END;
  memset(m.src.b, 0x33, 16);
  m.kind = EA__JOB_SUCCESS;
  snprintf(m.reason, sizeof m.reason, "all 8 workers of generation 4 exited 0");
  put_msg("end-success", &m);
  m.kind = EA__JOB_RESTARTS;
  snprintf(m.reason, sizeof m.reason, "restarts exhausted: a worker failed after 3 restarts");
  m.has_failure = true;
  failure(&m.f, true);
  put_msg("end-restarts", &m);
  static const char errfile[] =
      "{\"message\": {\"message\": \"RuntimeError: boom\", \"extraInfo\": {\"py_callstack\": "
      "\"Traceback (most recent call last):\\n  File \\\"x.py\\\", line 3\\nRuntimeError: "
      "boom\\n\", \"timestamp\": \"1796159001\"}}}";
  put("error-file", errfile, sizeof errfile - 1);
  return 0;
}

#endif
