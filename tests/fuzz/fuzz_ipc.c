/* libFuzzer harness for the agent ↔ worker message decoder (train/ipc.c
 * over base/mpread.c).  A worker may be a user's program, so the
 * agent decodes whatever arrives on the socket; this is that input.
 *
 * Beyond "no crash, no sanitizer report", it checks the codec's promises:
 * a failed decode is -EBADMSG with a message naming a field; whatever
 * decodes re-encodes (the encoder's rules are the decoder's), decodes again
 * to an equal message, and re-encodes to the same bytes.  A mismatch
 * aborts, which libFuzzer reports as a crash with the input saved.
 *
 * Build and run through scripts/fuzz.sh (make fuzz).  Seeds:
 * tests/fuzz/corpus/ipc, one valid packet of each message type (the
 * checkpoint ones included), written by this same file built as a program:
 *   make && cc -DFUZZ_IPC_MAKE_CORPUS $(make -s print-cflags) tests/fuzz/fuzz_ipc.c build/libea.a \
 *      $(make -s print-libs) -o /tmp/mk && /tmp/mk tests/fuzz/corpus/ipc
 */
#include "ea_ipc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                      \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      fprintf(stderr, "fuzz_ipc: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                           \
    }                                                                                    \
  } while (0)

#ifndef FUZZ_IPC_MAKE_CORPUS

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* ~60 KiB each: static, one input at a time */
  static ea_ipc_msg m, again;
  static uint8_t re[EA_IPC_MAX_MSG], re2[EA_IPC_MAX_MSG];
  char err[256] = "";
  int rc = ea_ipc_decode(data, size, &m, err, sizeof err);
  if (rc != 0) {
    CHECK(rc == -EBADMSG && err[0] != 0);
    return 0;
  }
  CHECK(m.fd == -1);
  size_t len = 0, len2 = 0;
  CHECK(ea_ipc_encode(&m, re, sizeof re, &len, err, sizeof err) == 0);
  CHECK(ea_ipc_decode(re, len, &again, err, sizeof err) == 0);
  CHECK(memcmp(&m, &again, sizeof m) == 0);
  CHECK(ea_ipc_encode(&again, re2, sizeof re2, &len2, err, sizeof err) == 0);
  CHECK(len == len2 && memcmp(re, re2, len) == 0);
  return 0;
}

#else /* a program that writes the seed corpus */

static const char *g_dir;
static ea_ipc_msg g_m;

static void put(const char *name) {
  static uint8_t buf[EA_IPC_MAX_MSG];
  size_t len;
  char err[256];
  if (ea_ipc_encode(&g_m, buf, sizeof buf, &len, err, sizeof err) != 0) {
    fprintf(stderr, "cannot encode %s: %s\n", name, err);
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

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  g_dir = argv[1];
  ea_ipc_msg *m = &g_m;

  ea_ipc_msg_init(m, EA_IPC_HELLO);
  m->pid = 4242;
  strcpy(m->comm_addr, "127.0.0.1:40123");
  m->next_step = 7;
  m->digest = 0xfedcba9876543210ull;
  put("hello");

  ea_ipc_msg_init(m, EA_IPC_READY);
  m->gen = 2;
  strcpy(m->comm_addr, "[::1]:5000");
  m->has_nccl_id = true;
  memset(m->nccl_id, 0x5a, sizeof m->nccl_id);
  put("ready");

  ea_ipc_msg_init(m, EA_IPC_STEP);
  m->gen = 2;
  m->step = 99;
  m->loss = 5.5;
  m->samples = 8;
  m->seconds = 0.002;
  m->has_grad_norm = m->has_compute_seconds = true;
  m->grad_norm = 0.5;
  m->compute_seconds = 0.001;
  put("step");

  ea_ipc_msg_init(m, EA_IPC_FAILED);
  m->gen = 2;
  m->error = -ECONNRESET;
  strcpy(m->message, "allreduce of step 12: Connection reset by peer");
  put("failed");
  m->has_peer = true;
  m->peer = 3;
  strcpy(m->message,
         "connecting rank 2/5: Connection timed out; rank 3 did not answer our connect");
  put("failed-peer");

  ea_ipc_msg_init(m, EA_IPC_EXITING);
  strcpy(m->reason, "stop");
  put("exiting");

  ea_ipc_msg_init(m, EA_IPC_PREPARE);
  m->gen = 3;
  m->at_boundary = true;
  put("prepare");

  ea_ipc_msg_init(m, EA_IPC_COMMIT);
  m->gen = 3;
  m->rank = 1;
  m->world = 2;
  m->npeers = 2;
  m->timeout_ms = 5000;
  strcpy(m->peers[0], "10.0.0.1:4000");
  strcpy(m->peers[1], "10.0.0.2:4000");
  put("commit");
  m->ckpt_interval = 100;
  m->ckpt_skip = true;
  strcpy(m->ckpt_dir, "/shared/ck");
  strcpy(m->resume, "latest");
  m->ckpt_verify_size = true;
  put("commit-ckpt");
  m->has_ring_token = true;
  for (int i = 0; i < (int)sizeof m->ring_token; i++) m->ring_token[i] = (uint8_t)(0x40 + i);
  put("commit-ring-token");

  ea_ipc_msg_init(m, EA_IPC_STOP);
  put("stop");

  ea_ipc_msg_init(m, EA_IPC_CKPT_STAGED);
  m->gen = 3;
  m->step = 100;
  m->rank = 1;
  m->world = 2;
  m->total = 151040;
  m->offset = 75520;
  m->length = 75520;
  m->hash = 0x0123456789abcdefull;
  m->stall_us = 40;
  m->wait_us = 1000;
  m->skipped = 1;
  put("ckpt_staged");

  ea_ipc_msg_init(m, EA_IPC_CKPT_SKIPPED);
  m->gen = 3;
  m->step = 200;
  m->world = 2;
  strcpy(m->reason, "busy: step 100 is still being written");
  m->skipped = 2;
  put("ckpt_skipped");

  ea_ipc_msg_init(m, EA_IPC_CKPT_LOADED);
  m->gen = 4;
  m->step = 100;
  strcpy(m->name, "step-100.gen-3");
  m->fallbacks = 1;
  strcpy(m->message, "step-200.gen-3: shard-1-of-2.bin: content does not match");
  m->seconds = 0.01;
  put("ckpt_loaded");

  ea_ipc_msg_init(m, EA_IPC_CKPT_DONE);
  m->gen = 3;
  m->step = 100;
  m->status = -ENOSPC;
  strcpy(m->message, "No space left on device");
  put("ckpt_done");
  return 0;
}

#endif
