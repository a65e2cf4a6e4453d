/* libFuzzer harness for the checkpoint control-message decoder
 * (agent/ckpt/ckpt_wire.c over base/mpread.c), and for the controller's
 * commit core behind it (agent/ckpt/ckpt_core.c): whatever decodes is fed to a
 * fresh core.
 *
 * Beyond "no crash, no sanitizer report", it checks the codec's promises:
 * a failed decode names a field and leaves the message zeroed; whatever
 * decodes re-encodes, decodes again to an equal message, and re-encodes to
 * the same bytes (the encoding is canonical); ea__ckpt_wire_is holds for
 * it.  Then the report is given to a core, twice (duplicates happen), next
 * to a made-up report for another rank of the same checkpoint, and any
 * commit the core asks for is answered with a failure (no disk here):
 * arbitrary input must not crash the bookkeeping.  A mismatch aborts, which
 * libFuzzer reports as a crash with the input saved.
 *
 * Build and run through scripts/fuzz.sh (make fuzz).  Seeds:
 * tests/fuzz/corpus/ckpt_wire, one valid frame of each message type and
 * shape, written by this same file built as a program:
 *   make && cc -DFUZZ_CKPT_WIRE_MAKE_CORPUS $(make -s print-cflags) tests/fuzz/fuzz_ckpt_wire.c
 * build/libea.a \
 *      $(make -s print-libs) -o /tmp/mk && /tmp/mk tests/fuzz/corpus/ckpt_wire
 */
#include "ckpt_svc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                            \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      fprintf(stderr, "fuzz_ckpt_wire: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                                 \
    }                                                                                          \
  } while (0)

#ifndef FUZZ_CKPT_WIRE_MAKE_CORPUS

static ea__ckpt_commit_job *g_job;

static void io_commit(void *ctx, ea__ckpt_commit_job *j) {
  (void)ctx;
  CHECK(g_job == NULL); /* one at a time */
  g_job = j;
}

static void io_event(void *ctx, const ea__ckpt_event *e) {
  (void)ctx;
  char line[1024];
  ea__ckpt_event_format(e, line, sizeof line);
  CHECK(e->kind >= EA__CKPT_EV_STARTED && e->kind <= EA__CKPT_EV_STALE);
}

static void answer(ea__ckpt_core *c) {
  while (g_job) {
    ea__ckpt_commit_job *j = g_job;
    g_job = NULL;
    /* every shard checked in: the manifest the core built is complete */
    char err[256];
    CHECK(ea_ckpt_manifest_validate(&j->manifest, err, sizeof err) == 0);
    j->rc = -EIO;
    snprintf(j->err, sizeof j->err, "fuzz: no disk");
    ea__ckpt_core_committed(c, 2.0, j);
  }
}

static void feed(const ea__ckpt_msg *m) {
  /* bounded worlds only: a manifest holds one ~600-byte record per rank */
  if (m->world > 64) return;
  const ea_model_dims dims = {8, 8, 32, 1};
  ea__ckpt_ctl_opts o = {.dir = "/nonexistent", .keep_last = 2, .dims = &dims, .max_pending = 2};
  ea__ckpt_core_io io = {.commit = io_commit, .event = io_event};
  ea__ckpt_core *c;
  CHECK(ea__ckpt_core_new(&o, &io, &c) == 0);
  ea__ckpt_core_recv(c, 1.0, m);
  answer(c);
  ea__ckpt_core_recv(c, 1.0, m);
  answer(c);
  if (m->type == EA__CKPT_SHARD_DURABLE && m->world > 1) {
    /* the other ranks of the same checkpoint, so a commit can happen */
    for (uint32_t r = 0; r < m->world; r++) {
      if (r == m->rank) continue;
      ea__ckpt_msg o2 = *m;
      o2.rank = r;
      ea_ckpt_shard_range(o2.total, o2.world, r, &o2.offset, &o2.length);
      o2.block_size = ea_ckpt_block_size(o2.length);
      o2.n_blocks = (uint32_t)((o2.length + o2.block_size - 1) / o2.block_size);
      ea__ckpt_core_recv(c, 1.5, &o2);
      answer(c);
    }
  }
  ea__ckpt_core_stats st;
  ea__ckpt_core_stats_get(c, &st);
  CHECK(st.pending <= 2);
  ea__ckpt_core_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ea__ckpt_msg m, again;
  const char *err = NULL;
  int rc = ea__ckpt_decode(data, size, &m, &err);
  if (rc != 0) {
    static const ea__ckpt_msg zero;
    CHECK(rc == -EA_EWIRE && err != NULL);
    CHECK(memcmp(&m, &zero, sizeof m) == 0);
    return 0;
  }
  CHECK(ea__ckpt_wire_is(data, size));
  uint8_t re[EA__CKPT_WIRE_MAX], re2[EA__CKPT_WIRE_MAX];
  size_t len = 0, len2 = 0;
  CHECK(ea__ckpt_encode(&m, re, sizeof re, &len) == 0);
  CHECK(ea__ckpt_decode(re, len, &again, NULL) == 0);
  CHECK(memcmp(&m, &again, sizeof m) == 0);
  CHECK(ea__ckpt_encode(&again, re2, sizeof re2, &len2) == 0);
  CHECK(len == len2 && memcmp(re, re2, len) == 0);
  feed(&m);
  return 0;
}

#else /* a program that writes the seed corpus */

static const char *g_dir;

static void put(const char *name, const ea__ckpt_msg *m) {
  uint8_t buf[EA__CKPT_WIRE_MAX];
  size_t len;
  if (ea__ckpt_encode(m, buf, sizeof buf, &len) != 0) {
    fprintf(stderr, "cannot encode %s\n", name);
    exit(1);
  }
  char path[512];
  snprintf(path, sizeof path, "%s/%s", g_dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
    perror(path);
    exit(1);
  }
}

static void durable(ea__ckpt_msg *m, uint64_t total, uint32_t world, uint32_t rank) {
  memset(m, 0, sizeof *m);
  m->type = EA__CKPT_SHARD_DURABLE;
  memset(m->src.b, 0x11, 16);
  m->gen = 3;
  m->step = 100;
  m->rank = rank;
  m->world = world;
  m->total = total;
  ea_ckpt_shard_range(total, world, rank, &m->offset, &m->length);
  m->hash = 0x9e3779b97f4a7c15ull;
  m->block_size = ea_ckpt_block_size(m->length);
  m->n_blocks = (uint32_t)((m->length + m->block_size - 1) / m->block_size);
  for (uint32_t i = 0; i < m->n_blocks; i++) m->block_hash[i] = 0x0101010101010101ull * (i + 1);
  m->write_us = 2500;
  m->stall_us = 80;
  m->direct = true;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  g_dir = argv[1];
  ea__ckpt_msg m;
  durable(&m, 151040, 1, 0);
  put("durable-w1", &m);
  durable(&m, 151040, 3, 2);
  put("durable-w3", &m);
  durable(&m, 5u << 20, 2, 1); /* several blocks */
  put("durable-blocks", &m);
  durable(&m, 1ull << 40, 4, 3); /* 64 blocks */
  put("durable-64-blocks", &m);
  memset(&m, 0, sizeof m);
  m.type = EA__CKPT_SHARD_FAILED;
  memset(m.src.b, 0x22, 16);
  m.gen = 3;
  m.step = 100;
  m.rank = 1;
  m.world = 3;
  m.kind = EA__CKPT_FAIL_WRITE;
  m.error = 28;
  snprintf(m.message, sizeof m.message, "write /ck/step-100.gen-3/shard-1-of-3.bin: No space");
  put("failed-write", &m);
  m.kind = EA__CKPT_FAIL_SKIPPED;
  m.error = 11;
  snprintf(m.message, sizeof m.message, "rank 1 skipped it: busy");
  put("failed-skipped", &m);
  return 0;
}

#endif
