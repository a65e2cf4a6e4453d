/* Check suite for the agent ↔ worker message codec (train/ipc.c).
 *
 * The promises asserted here: every message type round-trips, with and
 * without its optional keys; keys may come in any order and unknown keys
 * (of any nesting) are skipped, so a Python dict is a valid message; every
 * truncation of a valid packet is rejected; each kind of corruption (wrong
 * type, missing or duplicate key, out-of-range value, inconsistent commit)
 * is rejected with an error that names the field; the encoder refuses what
 * the decoder would reject and never writes past its buffer; the largest
 * COMMIT fits one packet; over a real SOCK_SEQPACKET pair, recv times out,
 * sees end of stream, and drops an oversized packet without losing the next
 * one; a peer's last packets are read even when it closed with ours unread.  A seeded mutation run
 * (EA_SEED=… replays) must never crash and must either reject with a message or decode to something
 * that re-encodes.
 *
 * The byte-exact vectors are tests/vectors/ipc.json, which
 * tests/python/test_protocol.py reads too: every message's fields encode to
 * exactly its bytes and its bytes decode to exactly its fields; every
 * malformed packet there is refused with its error text, word for word; the
 * accepted variants re-encode to the bytes given.  So the agent and the
 * Python package cannot drift apart without one of the two tests failing.
 */
#include "ea_ipc.h"

#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <msgpack.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static uint64_t g_seed, g_rng;

static uint64_t rnd(void) { /* splitmix64 */
  uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static void seed_rng(void) {
  const char *s = getenv("EA_SEED");
  g_seed = s && *s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
  g_rng = g_seed;
}

static const ea_ipc_type all_types[] = {
    EA_IPC_HELLO,   EA_IPC_READY,   EA_IPC_STEP,   EA_IPC_FAILED, EA_IPC_ABORTED, EA_IPC_DONE,
    EA_IPC_EXITING, EA_IPC_PREPARE, EA_IPC_COMMIT, EA_IPC_PAUSE,  EA_IPC_STOP};
#define NTYPES (sizeof all_types / sizeof all_types[0])

/* A message of type t with every field it carries set to a value that
 * exercises the encoding (large integers, negative ints, non-round floats);
 * opt adds the optional keys.  Fields the type does not carry stay zero, so
 * a decoded copy compares equal byte for byte. */
static void fill(ea_ipc_msg *m, ea_ipc_type t, bool opt) {
  ea_ipc_msg_init(m, t);
  switch (t) {
    case EA_IPC_HELLO:
      m->pid = 4242;
      m->local_rank = 3;
      strcpy(m->comm_addr, "127.0.0.1:40123");
      m->next_step = 1ull << 40;
      m->digest = 0xfedcba9876543210ull;
      break;
    case EA_IPC_READY:
      m->gen = 7;
      strcpy(m->comm_addr, "[::1]:5000");
      m->next_step = 99;
      m->digest = UINT64_MAX;
      if (opt) {
        m->has_nccl_id = true;
        for (int i = 0; i < EA_COMM_NCCL_ID_BYTES; i++) m->nccl_id[i] = (uint8_t)(i * 7 + 1);
      }
      break;
    case EA_IPC_STEP:
      m->gen = 3;
      m->step = 12345;
      m->loss = 5.544177;
      m->digest = 1;
      m->samples = 21;
      m->seconds = 0.00123;
      if (opt) {
        m->has_grad_norm = m->has_compute_seconds = true;
        m->grad_norm = 0.75;
        m->compute_seconds = 1e-4;
      }
      break;
    case EA_IPC_FAILED:
      m->gen = 2;
      m->error = -ECONNRESET;
      strcpy(m->message, "allreduce of step 12: Connection reset by peer");
      m->next_step = 12;
      if (opt) { /* the rank it could not exchange with */
        m->has_peer = true;
        m->peer = 4;
      }
      break;
    case EA_IPC_ABORTED:
      m->gen = 5;
      m->next_step = 0;
      break;
    case EA_IPC_DONE:
      m->gen = 9;
      m->next_step = 2000;
      m->digest = 77;
      break;
    case EA_IPC_EXITING:
      strcpy(m->reason, "stop");
      m->code = -1;
      break;
    case EA_IPC_PREPARE:
      m->gen = 1ull << 33;
      m->at_boundary = true;
      m->make_nccl_id = opt;
      break;
    case EA_IPC_COMMIT:
      m->gen = 4;
      m->rank = 2;
      m->world = 3;
      m->sync_root = 1;
      m->timeout_ms = 10000;
      m->npeers = 3;
      for (int i = 0; i < 3; i++)
        snprintf(m->peers[i], sizeof m->peers[i], "10.0.0.%d:%d", i + 1, 40000 + i);
      if (opt) {
        m->backend = EA_COMM_NCCL;
        m->has_nccl_id = true;
        memset(m->nccl_id, 0xab, sizeof m->nccl_id);
      }
      break;
    case EA_IPC_PAUSE:
      strcpy(m->reason, "minority side of a partition");
      break;
    case EA_IPC_STOP:
      break;
  }
}

static ea_ipc_msg *msg_new(void) {
  ea_ipc_msg *m = malloc(sizeof *m);
  ck_assert_ptr_nonnull(m);
  return m;
}

static size_t enc(const ea_ipc_msg *m, uint8_t *buf, size_t cap) {
  size_t len = 0;
  char err[200] = "";
  int rc = ea_ipc_encode(m, buf, cap, &len, err, sizeof err);
  ck_assert_msg(rc == 0, "encode %s: %d %s", ea_ipc_type_name(m->type), rc, err);
  return len;
}

/* Decode must fail with -EBADMSG and an error containing want. */
static void expect_bad(const uint8_t *buf, size_t len, const char *want) {
  ea_ipc_msg *m = msg_new();
  char err[200] = "";
  int rc = ea_ipc_decode(buf, len, m, err, sizeof err);
  ck_assert_msg(rc == -EBADMSG, "expected -EBADMSG (%s), got %d", want, rc);
  ck_assert_msg(strstr(err, want), "error \"%s\" does not name \"%s\"", err, want);
  free(m);
}

/* ---- a tiny hand packer for hostile or foreign-looking input ------------- */

typedef struct {
  msgpack_sbuffer sb;
  msgpack_packer pk;
} hand;

static void hand_init(hand *h) {
  msgpack_sbuffer_init(&h->sb);
  msgpack_packer_init(&h->pk, &h->sb, msgpack_sbuffer_write);
}
static void hs(hand *h, const char *s) {
  msgpack_pack_str(&h->pk, strlen(s));
  msgpack_pack_str_body(&h->pk, s, strlen(s));
}
static void hu(hand *h, uint64_t v) {
  msgpack_pack_uint64(&h->pk, v);
}
static void hraw(hand *h, const void *p, size_t n) {
  msgpack_sbuffer_write(&h->sb, p, n);
}

/* ---- tests ---------------------------------------------------------------- */

START_TEST(test_roundtrip_every_type) {
  uint8_t buf[EA_IPC_MAX_MSG];
  ea_ipc_msg *a = msg_new(), *b = msg_new();
  for (size_t i = 0; i < NTYPES; i++)
    for (int opt = 0; opt < 2; opt++) {
      fill(a, all_types[i], opt);
      size_t len = enc(a, buf, sizeof buf);
      char err[200] = "";
      memset(b, 0x5a, sizeof *b);
      int rc = ea_ipc_decode(buf, len, b, err, sizeof err);
      ck_assert_msg(rc == 0, "decode %s: %s", ea_ipc_type_name(a->type), err);
      ck_assert_msg(memcmp(a, b, sizeof *a) == 0, "%s (opt=%d) did not round-trip",
                    ea_ipc_type_name(a->type), opt);
    }
  free(a);
  free(b);
}
END_TEST

START_TEST(test_type_names) {
  for (size_t i = 0; i < NTYPES; i++) ck_assert_str_ne(ea_ipc_type_name(all_types[i]), "?");
  ck_assert_str_eq(ea_ipc_type_name((ea_ipc_type)99), "?");
  ck_assert_str_eq(ea_ipc_type_name(EA_IPC_COMMIT), "commit");
  ck_assert_str_eq(ea_ipc_type_name(EA_IPC_CKPT_AGAIN), "ckpt_again");
  /* ckpt_again carries gen and step, nothing else */
  ea_ipc_msg *a = msg_new(), *b = msg_new();
  ea_ipc_msg_init(a, EA_IPC_CKPT_AGAIN);
  a->gen = (7ull << 16) | 0xbeef;
  a->step = 250;
  uint8_t buf[256];
  char err[200] = "";
  size_t len = enc(a, buf, sizeof buf);
  ck_assert_msg(ea_ipc_decode(buf, len, b, err, sizeof err) == 0, "%s", err);
  ck_assert(memcmp(a, b, sizeof *a) == 0);
  free(a);
  free(b);
}
END_TEST

START_TEST(test_every_truncation_rejected) {
  uint8_t buf[EA_IPC_MAX_MSG];
  ea_ipc_msg *a = msg_new(), *b = msg_new();
  for (size_t i = 0; i < NTYPES; i++) {
    fill(a, all_types[i], true);
    size_t len = enc(a, buf, sizeof buf);
    for (size_t cut = 0; cut < len; cut++) {
      char err[200] = "";
      int rc = ea_ipc_decode(buf, cut, b, err, sizeof err);
      ck_assert_msg(rc == -EBADMSG, "%s cut at %zu/%zu decoded", ea_ipc_type_name(a->type), cut,
                    len);
      ck_assert_msg(err[0] != 0, "no reason for %s cut at %zu", ea_ipc_type_name(a->type), cut);
    }
  }
  free(a);
  free(b);
}
END_TEST

/* A Python worker's dict: keys in another order, type last, ints packed
 * wide and signed, a float32, plus keys this version does not know. */
START_TEST(test_foreign_order_and_unknown_keys) {
  hand h;
  hand_init(&h);
  msgpack_pack_map(&h.pk, 8);
  hs(&h, "seconds");
  msgpack_pack_float(&h.pk, 0.5f);
  hs(&h, "x-extra");
  msgpack_pack_map(&h.pk, 2);
  hs(&h, "nested");
  msgpack_pack_array(&h.pk, 3);
  msgpack_pack_nil(&h.pk);
  msgpack_pack_double(&h.pk, 1.5);
  msgpack_pack_bin(&h.pk, 2);
  msgpack_pack_bin_body(&h.pk, "ab", 2);
  hs(&h, "neg");
  msgpack_pack_int8(&h.pk, -5);
  hs(&h, "gen");
  hraw(&h, "\xd3\x00\x00\x00\x00\x00\x00\x00\x07", 9); /* int64 7 */
  hs(&h, "step");
  hu(&h, 12);
  hs(&h, "loss");
  msgpack_pack_int(&h.pk, 3); /* an int where a float goes */
  hs(&h, "digest");
  hu(&h, UINT64_MAX);
  hs(&h, "samples");
  hraw(&h, "\xd0\x08", 2); /* int8 8 */
  hs(&h, "type");
  hs(&h, "step");
  ea_ipc_msg *m = msg_new();
  char err[200] = "";
  int rc = ea_ipc_decode(h.sb.data, h.sb.size, m, err, sizeof err);
  ck_assert_msg(rc == 0, "foreign step rejected: %s", err);
  ck_assert_int_eq(m->type, EA_IPC_STEP);
  ck_assert_uint_eq(m->gen, 7);
  ck_assert_uint_eq(m->step, 12);
  ck_assert_uint_eq(m->samples, 8);
  ck_assert_uint_eq(m->digest, UINT64_MAX);
  ck_assert(m->loss == 3.0 && m->seconds == 0.5);
  ck_assert(!m->has_grad_norm);
  free(m);
  msgpack_sbuffer_destroy(&h.sb);
}
END_TEST

/* Builds {"type": t, <good keys of fill(t)>} with one key's value replaced
 * by the raw bytes given (or dropped when raw is NULL), or an extra pair. */
static void with_field(ea_ipc_type t, const char *key, const void *raw, size_t rawlen,
                       const char *want) {
  uint8_t buf[EA_IPC_MAX_MSG];
  ea_ipc_msg *a = msg_new();
  fill(a, t, true);
  size_t len = enc(a, buf, sizeof buf);
  free(a);
  /* Re-pack: walk the valid map with msgpack-c's unpacker (trusted input:
   * our own encoder's bytes) and copy every pair, swapping the one. */
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  ck_assert(msgpack_unpack_next(&u, (const char *)buf, len, NULL) == MSGPACK_UNPACK_SUCCESS);
  msgpack_object_map *mp = &u.data.via.map;
  hand h;
  hand_init(&h);
  bool found = false;
  for (uint32_t i = 0; i < mp->size; i++)
    if (mp->ptr[i].key.via.str.size == strlen(key) &&
        !memcmp(mp->ptr[i].key.via.str.ptr, key, strlen(key)))
      found = true;
  uint32_t n = mp->size - (found && !raw ? 1 : 0) + (found ? 0 : 1);
  msgpack_pack_map(&h.pk, n);
  for (uint32_t i = 0; i < mp->size; i++) {
    const msgpack_object_kv *kv = &mp->ptr[i];
    bool is = kv->key.via.str.size == strlen(key) && !memcmp(kv->key.via.str.ptr, key, strlen(key));
    if (is && !raw) continue;
    msgpack_pack_object(&h.pk, kv->key);
    if (is)
      hraw(&h, raw, rawlen);
    else
      msgpack_pack_object(&h.pk, kv->val);
  }
  if (!found) {
    hs(&h, key);
    hraw(&h, raw, rawlen);
  }
  expect_bad((const uint8_t *)h.sb.data, h.sb.size, want);
  msgpack_sbuffer_destroy(&h.sb);
  msgpack_unpacked_destroy(&u);
}

START_TEST(test_corruption_names_the_field) {
  /* wrong types */
  with_field(EA_IPC_HELLO, "comm_addr", "\x05", 1, "hello.comm_addr: expected str");
  with_field(EA_IPC_HELLO, "pid", "\xa1x", 2, "hello.pid: expected uint");
  with_field(EA_IPC_HELLO, "pid", "\xff", 1, "hello.pid: out of range"); /* −1 */
  with_field(EA_IPC_STEP, "loss", "\xa1x", 2, "step.loss: expected float");
  with_field(EA_IPC_PREPARE, "at_boundary", "\x01", 1, "prepare.at_boundary: expected bool");
  with_field(EA_IPC_COMMIT, "peers", "\xa1x", 2, "commit.peers: expected array");
  with_field(EA_IPC_COMMIT, "peers",
             "\x93\xa3"
             "a:1\x07\xa3"
             "c:3",
             10, "commit.peers[1]: expected str");
  with_field(EA_IPC_COMMIT, "nccl_id", "\xc4\x02xy", 4, "commit.nccl_id: expected 128 bytes");
  with_field(EA_IPC_COMMIT, "backend", "\xa3gpu", 4, "commit.backend");
  with_field(EA_IPC_FAILED, "error", "\xcd\x01\x00", 3, "failed.error: expected a negative errno");
  with_field(EA_IPC_EXITING, "code", "\xce\x80\x00\x00\x00", 5, "exiting.code: out of range");
  with_field(EA_IPC_HELLO, "local_rank", "\xcf\x00\x00\x00\x01\x00\x00\x00\x00", 9,
             "hello.local_rank: out of range");
  /* missing */
  with_field(EA_IPC_READY, "gen", NULL, 0, "ready.gen: missing");
  with_field(EA_IPC_COMMIT, "world", NULL, 0, "commit.world: missing");
  with_field(EA_IPC_PAUSE, "reason", NULL, 0, "pause.reason: missing");
  /* inconsistent commit */
  with_field(EA_IPC_COMMIT, "rank", "\x03", 1, "commit.rank");
  with_field(EA_IPC_COMMIT, "sync_root", "\x09", 1, "commit.sync_root");
  with_field(EA_IPC_COMMIT, "world", "\x04", 1, "commit.peers: 3 addresses for world 4");
  with_field(EA_IPC_COMMIT, "world", "\x00", 1, "commit.world: must be >= 1");
  /* strings */
  with_field(EA_IPC_HELLO, "comm_addr", "\xa0", 1, "hello.comm_addr: expected a non-empty address");
  with_field(EA_IPC_HELLO, "comm_addr",
             "\xa3"
             "a\0b",
             4, "hello.comm_addr: contains a NUL byte");
  char longstr[3 + 300];
  longstr[0] = (char)0xda;
  longstr[1] = 0x01;
  longstr[2] = 0x2c; /* str16 of 300 */
  memset(longstr + 3, 'r', 300);
  with_field(EA_IPC_EXITING, "reason", longstr, sizeof longstr, "exiting.reason: too long");
}
END_TEST

START_TEST(test_encoder_refuses_and_bounds) {
  uint8_t buf[EA_IPC_MAX_MSG];
  ea_ipc_msg *m = msg_new();
  size_t len;
  char err[200] = "";
  fill(m, EA_IPC_COMMIT, false);
  m->rank = 3;
  ck_assert_int_eq(ea_ipc_encode(m, buf, sizeof buf, &len, err, sizeof err), -EINVAL);
  ck_assert_msg(strstr(err, "commit.rank"), "%s", err);
  fill(m, EA_IPC_COMMIT, false);
  m->backend = EA_COMM_NCCL; /* without an id */
  ck_assert_int_eq(ea_ipc_encode(m, buf, sizeof buf, &len, err, sizeof err), -EINVAL);
  ck_assert_msg(strstr(err, "commit.nccl_id"), "%s", err);
  fill(m, EA_IPC_FAILED, false);
  m->error = 0;
  ck_assert_int_eq(ea_ipc_encode(m, buf, sizeof buf, &len, err, sizeof err), -EINVAL);
  fill(m, EA_IPC_HELLO, false);
  memset(m->comm_addr, 'a', sizeof m->comm_addr); /* no NUL */
  ck_assert_int_eq(ea_ipc_encode(m, buf, sizeof buf, &len, err, sizeof err), -EINVAL);
  ck_assert_msg(strstr(err, "hello.comm_addr"), "%s", err);
  m->type = (ea_ipc_type)55;
  ck_assert_int_eq(ea_ipc_encode(m, buf, sizeof buf, &len, err, sizeof err), -EINVAL);

  /* Every cap short of the size fails cleanly and writes nothing past it. */
  fill(m, EA_IPC_STEP, true);
  size_t full = enc(m, buf, sizeof buf);
  for (size_t cap = 0; cap < full; cap++) {
    memset(buf, 0xee, sizeof buf);
    ck_assert_int_eq(ea_ipc_encode(m, buf, cap, &len, err, sizeof err), -EMSGSIZE);
    for (size_t i = cap; i < full + 8; i++) ck_assert_uint_eq(buf[i], 0xee);
  }
  free(m);
}
END_TEST

START_TEST(test_largest_commit_fits) {
  static uint8_t buf[EA_IPC_MAX_MSG];
  ea_ipc_msg *a = msg_new(), *b = msg_new();
  ea_ipc_msg_init(a, EA_IPC_COMMIT);
  a->gen = UINT64_MAX;
  a->world = a->npeers = EA_IPC_MAX_PEERS;
  a->rank = a->sync_root = EA_IPC_MAX_PEERS - 1;
  a->timeout_ms = UINT32_MAX;
  a->backend = EA_COMM_NCCL;
  a->has_nccl_id = true;
  for (uint32_t i = 0; i < a->npeers; i++) memset(a->peers[i], 'p', EA_COMM_ADDR_MAX - 1);
  memset(a->store, 's', EA_COMM_ADDR_MAX - 1);
  a->torch_backend = EA_IPC_TORCH_NCCL;
  size_t len = enc(a, buf, sizeof buf);
  ck_assert_uint_le(len, EA_IPC_MAX_MSG);
  char err[200] = "";
  ck_assert_msg(ea_ipc_decode(buf, len, b, err, sizeof err) == 0, "%s", err);
  ck_assert(memcmp(a, b, sizeof *a) == 0);
  a->npeers = a->world = EA_IPC_MAX_PEERS + 1;
  ck_assert_int_eq(ea_ipc_encode(a, buf, sizeof buf, &len, err, sizeof err), -EINVAL);
  free(a);
  free(b);
}
END_TEST

START_TEST(test_mutations_never_crash) {
  seed_rng();
  printf("test_mutations_never_crash: EA_SEED=%" PRIu64 "\n", g_seed);
  uint8_t buf[EA_IPC_MAX_MSG], re[EA_IPC_MAX_MSG];
  ea_ipc_msg *a = msg_new(), *b = msg_new();
  int accepted = 0, rejected = 0;
  for (int iter = 0; iter < 20000; iter++) {
    fill(a, all_types[rnd() % NTYPES], rnd() & 1);
    size_t len = enc(a, buf, sizeof buf);
    int flips = 1 + (int)(rnd() % 3);
    for (int f = 0; f < flips; f++) buf[rnd() % len] ^= (uint8_t)(1u << (rnd() % 8));
    char err[200] = "";
    int rc = ea_ipc_decode(buf, len, b, err, sizeof err);
    if (rc == 0) {
      /* Whatever decodes must encode again (the encoder's rules are the
       * decoder's) and decode to the same message. */
      size_t l2 = 0;
      ck_assert_msg(ea_ipc_encode(b, re, sizeof re, &l2, err, sizeof err) == 0, "re-encode: %s",
                    err);
      ea_ipc_msg *c = msg_new();
      ck_assert_int_eq(ea_ipc_decode(re, l2, c, err, sizeof err), 0);
      ck_assert(memcmp(b, c, sizeof *b) == 0);
      free(c);
      accepted++;
    } else {
      ck_assert_int_eq(rc, -EBADMSG);
      ck_assert(err[0] != 0);
      rejected++;
    }
  }
  printf("  mutations: %d accepted, %d rejected\n", accepted, rejected);
  ck_assert_int_gt(rejected, 1000);
  free(a);
  free(b);
}
END_TEST

START_TEST(test_socketpair_send_recv) {
  int sv[2];
  ck_assert_int_eq(ea_ipc_socketpair(sv), 0);
  ea_ipc_msg *a = msg_new(), *b = msg_new();
  char err[200] = "";
  /* nothing there: a bounded wait */
  ck_assert_int_eq(ea_ipc_recv(sv[1], b, 20, err, sizeof err), -ETIMEDOUT);
  for (size_t i = 0; i < NTYPES; i++) {
    fill(a, all_types[i], true);
    ck_assert_int_eq(ea_ipc_send(sv[0], a), 0);
  }
  /* a packet over the limit, then a good one: the first is dropped whole */
  static uint8_t big[EA_IPC_MAX_MSG + 100];
  memset(big, 0x80, sizeof big);
  ck_assert_int_eq(send(sv[0], big, sizeof big, 0), (ssize_t)sizeof big);
  fill(a, EA_IPC_STOP, false);
  ck_assert_int_eq(ea_ipc_send(sv[0], a), 0);
  /* and garbage that is not msgpack */
  ck_assert_int_eq(send(sv[0], "\xc1", 1, 0), 1);
  for (size_t i = 0; i < NTYPES; i++) {
    ck_assert_msg(ea_ipc_recv(sv[1], b, 1000, err, sizeof err) == 0, "%s", err);
    fill(a, all_types[i], true);
    ck_assert(memcmp(a, b, sizeof *a) == 0);
  }
  ck_assert_int_eq(ea_ipc_recv(sv[1], b, 1000, err, sizeof err), -EMSGSIZE);
  ck_assert_int_eq(ea_ipc_recv(sv[1], b, 1000, err, sizeof err), 0);
  ck_assert_int_eq(b->type, EA_IPC_STOP);
  ck_assert_int_eq(ea_ipc_recv(sv[1], b, 1000, err, sizeof err), -EBADMSG);
  /* the other end goes away */
  close(sv[0]);
  ck_assert_int_eq(ea_ipc_recv(sv[1], b, 1000, err, sizeof err), -ECONNRESET);
  fill(a, EA_IPC_STOP, false);
  int rc = ea_ipc_send(sv[1], a);
  ck_assert_msg(rc == -EPIPE || rc == -ECONNRESET, "send to a closed peer: %d", rc);
  close(sv[1]);
  free(a);
  free(b);
}
END_TEST

START_TEST(test_last_packets_survive_unread_close) {
  /* A worker that exits with a packet of ours unread (a CKPT_DONE that came
   * after its reader stopped) still gets its last packets to us: Linux
   * reports ECONNRESET first, and recv reads past it to EXITING, then to
   * end of stream. */
  int sv[2];
  ck_assert_int_eq(ea_ipc_socketpair(sv), 0);
  ea_ipc_msg *a = msg_new(), *b = msg_new();
  char err[200] = "";
  fill(a, EA_IPC_STOP, false);
  ck_assert_int_eq(ea_ipc_send(sv[0], a), 0); /* never read by sv[1] */
  fill(a, EA_IPC_DONE, true);
  ck_assert_int_eq(ea_ipc_send(sv[1], a), 0);
  fill(a, EA_IPC_EXITING, true);
  ck_assert_int_eq(ea_ipc_send(sv[1], a), 0);
  close(sv[1]);
  ck_assert_msg(ea_ipc_recv(sv[0], b, 1000, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(b->type, EA_IPC_DONE);
  ck_assert_msg(ea_ipc_recv(sv[0], b, 1000, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(b->type, EA_IPC_EXITING);
  fill(a, EA_IPC_EXITING, true);
  ck_assert(memcmp(a, b, sizeof *a) == 0);
  ck_assert_int_eq(ea_ipc_recv(sv[0], b, 1000, err, sizeof err), -ECONNRESET);
  /* the raw reader (the agent's supervisor) sees the same */
  ck_assert_int_eq(ea_ipc_socketpair(sv), 0);
  fill(a, EA_IPC_STOP, false);
  ck_assert_int_eq(ea_ipc_send(sv[0], a), 0);
  fill(a, EA_IPC_EXITING, true);
  ck_assert_int_eq(ea_ipc_send(sv[1], a), 0);
  close(sv[1]);
  uint8_t raw[EA_IPC_MAX_MSG];
  int fd = -2;
  ck_assert_int_gt(ea_ipc_recv_packet(sv[0], raw, sizeof raw, &fd), 0);
  ck_assert_int_eq(fd, -1);
  ck_assert_int_eq(ea_ipc_recv_packet(sv[0], raw, sizeof raw, &fd), 0);
  close(sv[0]);
  free(a);
  free(b);
}
END_TEST

/* ---- the shared vectors: tests/vectors/ipc.json --------------------------
 *
 * The one file of test vectors that tests/python/test_protocol.py reads too
 * (its "about" says how values are written).  Tests run from the repository
 * root (tests/run.sh cd's there), so the path is relative to it. */

#define VECTORS_FILE "tests/vectors/ipc.json"

static json_t *load_vectors(const char *section) {
  json_error_t je;
  json_t *root = json_load_file(VECTORS_FILE, 0, &je);
  ck_assert_msg(root, "%s:%d: %s (run from the repository root)", VECTORS_FILE, je.line, je.text);
  json_t *list = json_incref(json_object_get(root, section));
  json_decref(root);
  ck_assert_msg(json_is_array(list) && json_array_size(list) > 0, "%s: no \"%s\"", VECTORS_FILE,
                section);
  return list;
}

/* The bytes of a hex string, in a buffer the caller frees. */
static uint8_t *unhex(const char *h, size_t *len) {
  size_t n = strlen(h);
  ck_assert_msg(n % 2 == 0, "odd hex length %zu", n);
  uint8_t *out = malloc(n / 2 + 1);
  ck_assert_ptr_nonnull(out);
  for (size_t i = 0; i < n / 2; i++) {
    unsigned v;
    ck_assert_msg(sscanf(h + 2 * i, "%2x", &v) == 1, "bad hex at %zu", 2 * i);
    out[i] = (uint8_t)v;
  }
  *len = n / 2;
  return out;
}

static const char *member_str(json_t *o, const char *key) {
  const char *s = json_string_value(json_object_get(o, key));
  ck_assert_msg(s, "%s: an entry without \"%s\"", VECTORS_FILE, key);
  return s;
}

/* An integer of the file: a JSON integer, or {"u64": "0x…"} for one that
 * does not fit jansson's json_int_t. */
static uint64_t jv_u64(json_t *v, const char *key) {
  json_t *big = json_object_get(v, "u64");
  if (big) return strtoull(json_string_value(big), NULL, 0);
  ck_assert_msg(json_is_integer(v), "%s: expected an integer", key);
  return (uint64_t)json_integer_value(v);
}

static void jv_str(json_t *v, const char *key, char *dst, size_t cap) {
  const char *s = json_string_value(v);
  ck_assert_msg(s && strlen(s) < cap, "%s: expected a string < %zu bytes", key, cap);
  strcpy(dst, s);
}

static void jv_bin(json_t *v, const char *key, uint8_t *dst, size_t want) {
  size_t n;
  uint8_t *b = unhex(json_string_value(json_object_get(v, "bin")), &n);
  ck_assert_msg(n == want, "%s: %zu bytes, not %zu", key, n, want);
  memcpy(dst, b, n);
  free(b);
}

enum { J_U64, J_U32, J_I32, J_F64, J_BOOL, J_STR };
#define MO(f) offsetof(ea_ipc_msg, f)
#define NO_HAS ((size_t)-1)
/* The keys that map onto one field of ea_ipc_msg; has: the flag an optional
 * key sets (NO_HAS: none).  The others are read in msg_from_json. */
static const struct {
  const char *key;
  int kind;
  size_t off, has, cap;
} plain_keys[] = {
    {"gen", J_U64, MO(gen), NO_HAS, 0},
    {"pid", J_U64, MO(pid), NO_HAS, 0},
    {"local_rank", J_U32, MO(local_rank), NO_HAS, 0},
    {"comm_addr", J_STR, MO(comm_addr), NO_HAS, EA_COMM_ADDR_MAX},
    {"next_step", J_U64, MO(next_step), NO_HAS, 0},
    {"digest", J_U64, MO(digest), NO_HAS, 0},
    {"step", J_U64, MO(step), NO_HAS, 0},
    {"loss", J_F64, MO(loss), NO_HAS, 0},
    {"samples", J_U64, MO(samples), NO_HAS, 0},
    {"seconds", J_F64, MO(seconds), NO_HAS, 0},
    {"grad_norm", J_F64, MO(grad_norm), MO(has_grad_norm), 0},
    {"compute_seconds", J_F64, MO(compute_seconds), MO(has_compute_seconds), 0},
    {"error", J_I32, MO(error), NO_HAS, 0},
    {"peer", J_U32, MO(peer), MO(has_peer), 0},
    {"message", J_STR, MO(message), NO_HAS, EA_IPC_TEXT_MAX},
    {"reason", J_STR, MO(reason), NO_HAS, EA_IPC_TEXT_MAX},
    {"code", J_I32, MO(code), NO_HAS, 0},
    {"at_boundary", J_BOOL, MO(at_boundary), NO_HAS, 0},
    {"make_nccl_id", J_BOOL, MO(make_nccl_id), NO_HAS, 0},
    {"rank", J_U32, MO(rank), NO_HAS, 0},
    {"world", J_U32, MO(world), NO_HAS, 0},
    {"sync_root", J_U32, MO(sync_root), NO_HAS, 0},
    {"timeout_ms", J_U32, MO(timeout_ms), NO_HAS, 0},
    {"offset", J_U64, MO(offset), NO_HAS, 0},
    {"length", J_U64, MO(length), NO_HAS, 0},
    {"total", J_U64, MO(total), NO_HAS, 0},
    {"hash", J_U64, MO(hash), NO_HAS, 0},
    {"stall_us", J_U64, MO(stall_us), NO_HAS, 0},
    {"wait_us", J_U64, MO(wait_us), NO_HAS, 0},
    {"skipped", J_U64, MO(skipped), NO_HAS, 0},
    {"status", J_I32, MO(status), NO_HAS, 0},
    {"name", J_STR, MO(name), NO_HAS, EA_IPC_TEXT_MAX},
    {"fallbacks", J_U32, MO(fallbacks), NO_HAS, 0},
    {"ckpt_interval", J_U32, MO(ckpt_interval), NO_HAS, 0},
    {"ckpt_dir", J_STR, MO(ckpt_dir), NO_HAS, EA_IPC_PATH_MAX},
    {"resume", J_STR, MO(resume), NO_HAS, EA_IPC_PATH_MAX},
    {"store", J_STR, MO(store), NO_HAS, EA_COMM_ADDR_MAX},
    {"header_bytes", J_U64, MO(header_bytes), NO_HAS, 0},
};

/* Every type the file may name: the enum and the checkpoint types. */
static const ea_ipc_type file_types[] = {
    EA_IPC_HELLO,      EA_IPC_READY,   EA_IPC_STEP,        EA_IPC_FAILED,       EA_IPC_ABORTED,
    EA_IPC_DONE,       EA_IPC_EXITING, EA_IPC_CKPT_STAGED, EA_IPC_CKPT_SKIPPED, EA_IPC_CKPT_LOADED,
    EA_IPC_PREPARE,    EA_IPC_COMMIT,  EA_IPC_PAUSE,       EA_IPC_STOP,         EA_IPC_CKPT_DONE,
    EA_IPC_CKPT_AGAIN, EA_IPC_CKPT_AT};
#define NFILE_TYPES (sizeof file_types / sizeof file_types[0])

/* A vector's fields as the message the agent's codec holds.  A key this
 * reader does not know fails the test: the file may not say more than the
 * C side checks. */
static void msg_from_json(json_t *fields, ea_ipc_msg *m, const char *name) {
  const char *type = member_str(fields, "type");
  size_t t = 0;
  while (t < NFILE_TYPES && strcmp(ea_ipc_type_name(file_types[t]), type) != 0) t++;
  ck_assert_msg(t < NFILE_TYPES, "%s: unknown type \"%s\"", name, type);
  ea_ipc_msg_init(m, file_types[t]);
  const char *key;
  json_t *v;
  json_object_foreach(fields, key, v) {
    size_t i = 0;
    while (i < sizeof plain_keys / sizeof plain_keys[0] && strcmp(plain_keys[i].key, key) != 0) i++;
    if (i < sizeof plain_keys / sizeof plain_keys[0]) {
      char *f = (char *)m + plain_keys[i].off;
      switch (plain_keys[i].kind) {
        case J_U64:
          *(uint64_t *)f = jv_u64(v, key);
          break;
        case J_U32:
          *(uint32_t *)f = (uint32_t)jv_u64(v, key);
          break;
        case J_I32:
          ck_assert_msg(json_is_integer(v), "%s.%s: expected an integer", name, key);
          *(int32_t *)f = (int32_t)json_integer_value(v);
          break;
        case J_F64:
          ck_assert_msg(json_is_number(v), "%s.%s: expected a number", name, key);
          *(double *)f = json_number_value(v);
          break;
        case J_BOOL:
          ck_assert_msg(json_is_boolean(v), "%s.%s: expected a bool", name, key);
          *(bool *)f = json_is_true(v);
          break;
        case J_STR:
          jv_str(v, key, f, plain_keys[i].cap);
          break;
      }
      if (plain_keys[i].has != NO_HAS) *(bool *)((char *)m + plain_keys[i].has) = true;
    } else if (!strcmp(key, "type")) {
    } else if (!strcmp(key, "backend")) {
      const char *b = json_string_value(v);
      ck_assert_msg(b && (!strcmp(b, "tcp") || !strcmp(b, "nccl")), "%s.backend", name);
      m->backend = !strcmp(b, "nccl") ? EA_COMM_NCCL : EA_COMM_TCP;
    } else if (!strcmp(key, "peers")) {
      ck_assert_msg(json_is_array(v) && json_array_size(v) <= EA_IPC_MAX_PEERS, "%s.peers", name);
      m->npeers = (uint32_t)json_array_size(v);
      for (size_t p = 0; p < m->npeers; p++)
        jv_str(json_array_get(v, p), "peers[]", m->peers[p], EA_COMM_ADDR_MAX);
    } else if (!strcmp(key, "nccl_id")) {
      jv_bin(v, key, m->nccl_id, EA_COMM_NCCL_ID_BYTES);
      m->has_nccl_id = true;
    } else if (!strcmp(key, "ring_token")) {
      jv_bin(v, key, m->ring_token, EA_COMM_HELLO_KEY_BYTES);
      m->has_ring_token = true;
    } else if (!strcmp(key, "ckpt_busy")) {
      const char *b = json_string_value(v);
      ck_assert_msg(b && (!strcmp(b, "wait") || !strcmp(b, "skip")), "%s.ckpt_busy", name);
      m->ckpt_skip = !strcmp(b, "skip");
    } else if (!strcmp(key, "ckpt_verify")) {
      const char *b = json_string_value(v);
      ck_assert_msg(b && (!strcmp(b, "full") || !strcmp(b, "size")), "%s.ckpt_verify", name);
      m->ckpt_verify_size = !strcmp(b, "size");
    } else if (!strcmp(key, "torch_backend")) {
      const char *b = json_string_value(v);
      ck_assert_msg(b && (!strcmp(b, "gloo") || !strcmp(b, "nccl")), "%s.torch_backend", name);
      m->torch_backend = !strcmp(b, "gloo") ? EA_IPC_TORCH_GLOO : EA_IPC_TORCH_NCCL;
    } else if (!strcmp(key, "layout")) {
      const char *b = json_string_value(v);
      ck_assert_msg(b && !strcmp(b, "ea-state-1"), "%s.layout", name);
      m->layout = EA_IPC_LAYOUT_EA_STATE_1;
    } else {
      ck_abort_msg("%s: key \"%s\" unknown to this reader", name, key);
    }
  }
}

static void hex_of(const uint8_t *b, size_t n, char *out) {
  for (size_t i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", b[i]);
  out[2 * n] = 0;
}

/* Every vector: its fields encode to exactly its bytes, and its bytes decode
 * to exactly its fields ("decoded" where decoding fills a key in). */
START_TEST(test_shared_vectors_both_ways) {
  json_t *list = load_vectors("messages");
  static uint8_t buf[EA_IPC_MAX_MSG];
  static char got_hex[2 * EA_IPC_MAX_MSG + 1];
  ea_ipc_msg *a = msg_new(), *b = msg_new(), *want = msg_new();
  bool seen[NFILE_TYPES] = {false};
  size_t i;
  json_t *v;
  json_array_foreach(list, i, v) {
    const char *name = member_str(v, "name"), *hex = member_str(v, "hex");
    msg_from_json(json_object_get(v, "fields"), a, name);
    json_t *dec = json_object_get(v, "decoded");
    msg_from_json(dec ? dec : json_object_get(v, "fields"), want, name);
    size_t len = enc(a, buf, sizeof buf);
    hex_of(buf, len, got_hex);
    ck_assert_msg(!strcmp(got_hex, hex), "%s: encodes to\n%s\nnot\n%s", name, got_hex, hex);
    size_t n;
    uint8_t *pkt = unhex(hex, &n);
    char err[256] = "";
    memset(b, 0x5a, sizeof *b);
    ck_assert_msg(ea_ipc_decode(pkt, n, b, err, sizeof err) == 0, "%s: %s", name, err);
    ck_assert_msg(memcmp(b, want, sizeof *b) == 0, "%s: decodes to another message", name);
    free(pkt);
    for (size_t t = 0; t < NFILE_TYPES; t++)
      if (file_types[t] == a->type) seen[t] = true;
  }
  /* Every type both codecs speak has a vector (ckpt_again is the agent's
   * alone: python/elastic_agent does not know it). */
  for (size_t t = 0; t < NFILE_TYPES; t++)
    if (file_types[t] != EA_IPC_CKPT_AGAIN)
      ck_assert_msg(seen[t], "no vector of %s", ea_ipc_type_name(file_types[t]));
  json_decref(list);
  free(a);
  free(b);
  free(want);
}
END_TEST

/* Every refused packet: -EBADMSG, and the error is the file's, word for word. */
START_TEST(test_shared_malformed_exact_error) {
  json_t *list = load_vectors("malformed");
  ea_ipc_msg *m = msg_new();
  size_t i;
  json_t *v;
  json_array_foreach(list, i, v) {
    const char *want = member_str(v, "error");
    size_t n;
    uint8_t *pkt = unhex(member_str(v, "hex"), &n);
    char err[256] = "";
    int rc = ea_ipc_decode(pkt, n, m, err, sizeof err);
    ck_assert_msg(rc == -EBADMSG, "malformed[%zu] (%s): got %d", i, want, rc);
    ck_assert_msg(!strcmp(err, want), "malformed[%zu]: \"%s\", not \"%s\"", i, err, want);
    free(pkt);
  }
  json_decref(list);
  free(m);
}
END_TEST

/* Packets no encoder writes (foreign widths, unknown keys) decode, and the
 * message encodes to the file's bytes. */
START_TEST(test_shared_accepted_reencode) {
  json_t *list = load_vectors("accepted");
  static uint8_t buf[EA_IPC_MAX_MSG];
  static char got_hex[2 * EA_IPC_MAX_MSG + 1];
  ea_ipc_msg *m = msg_new();
  size_t i;
  json_t *v;
  json_array_foreach(list, i, v) {
    size_t n;
    uint8_t *pkt = unhex(member_str(v, "hex"), &n);
    char err[256] = "";
    ck_assert_msg(ea_ipc_decode(pkt, n, m, err, sizeof err) == 0, "accepted[%zu]: %s", i, err);
    hex_of(buf, enc(m, buf, sizeof buf), got_hex);
    ck_assert_msg(!strcmp(got_hex, member_str(v, "reencoded")), "accepted[%zu]: re-encodes to %s",
                  i, got_hex);
    free(pkt);
  }
  json_decref(list);
  free(m);
}
END_TEST

static Suite *ipc_suite(void) {
  Suite *s = suite_create("ipc");
  TCase *tc = tcase_create("codec");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_roundtrip_every_type);
  tcase_add_test(tc, test_type_names);
  tcase_add_test(tc, test_every_truncation_rejected);
  tcase_add_test(tc, test_foreign_order_and_unknown_keys);
  tcase_add_test(tc, test_corruption_names_the_field);
  tcase_add_test(tc, test_encoder_refuses_and_bounds);
  tcase_add_test(tc, test_largest_commit_fits);
  tcase_add_test(tc, test_mutations_never_crash);
  tcase_add_test(tc, test_socketpair_send_recv);
  tcase_add_test(tc, test_last_packets_survive_unread_close);
  tcase_add_test(tc, test_shared_vectors_both_ways);
  tcase_add_test(tc, test_shared_malformed_exact_error);
  tcase_add_test(tc, test_shared_accepted_reencode);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(ipc_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
