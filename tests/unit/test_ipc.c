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
 */
#include "ea_ipc.h"

#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <msgpack.h>
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

START_TEST(test_framing_errors) {
  expect_bad((const uint8_t *)"\x93\x01\x02\x03", 4, "message: expected a map");
  expect_bad((const uint8_t *)"", 0, "message: expected a map (truncated)");
  /* {"type": "bogus"} */
  expect_bad((const uint8_t *)"\x81\xa4type\xa5" "bogus", 12, "type: unknown message type \"bogus\"");
  /* {"gen": 1} */
  expect_bad((const uint8_t *)"\x81\xa3gen\x01", 6, "type: missing");
  /* {"type": "stop", "type": "stop"} */
  expect_bad((const uint8_t *)"\x82\xa4type\xa4stop\xa4type\xa4stop", 21, "type: duplicate key");
  /* {"type":"aborted","gen":1,"gen":2,"next_step":0} */
  expect_bad((const uint8_t *)"\x84\xa4type\xa7" "aborted\xa3gen\x01\xa3gen\x02\xa9next_step\x00", 35,
             "aborted.gen: duplicate key");
  /* {"type":"stop"} then a stray byte */
  expect_bad((const uint8_t *)"\x81\xa4type\xa4stop\xc0", 12, "stop: 1 trailing bytes");
  /* a map claiming 65535 entries in 3 bytes */
  expect_bad((const uint8_t *)"\xde\xff\xff", 3, "message: expected a map (truncated)");
  /* an integer key */
  expect_bad((const uint8_t *)"\x81\x01\x02", 3, "message: key 0: expected str");
  /* an unknown key whose value claims more elements than bytes */
  expect_bad((const uint8_t *)"\x82\xa4type\xa4stop\xa1x\xdd\x7f\xff\xff\xff", 18,
             "value of \"x\": truncated");
  /* the never-used byte 0xc1 */
  expect_bad((const uint8_t *)"\x82\xa4type\xa4stop\xa1x\xc1", 14, "value of \"x\": wrong type");
  /* 17 nested arrays under an unknown key pass the skipper's depth */
  uint8_t deep[64] = "\x82\xa4type\xa4stop\xa1x";
  size_t dl = 13;
  for (int i = 0; i < 18; i++) deep[dl++] = 0x91;
  deep[dl++] = 0xc0;
  expect_bad(deep, dl, "value of \"x\": out of range");
  /* {"type":"stop"} is the smallest valid message */
  ea_ipc_msg *m = msg_new();
  ck_assert_int_eq(ea_ipc_decode("\x81\xa4type\xa4stop", 11, m, NULL, 0), 0);
  ck_assert_int_eq(m->type, EA_IPC_STOP);
  free(m);
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

/* ---- the library's extension keys (docs/pytorch.md, "Agent-side changes
 * required") ------------------------------------------------------------- */

static size_t unhex(const char *h, uint8_t *out, size_t cap) {
  size_t n = 0;
  for (; h[0] && h[1] && n < cap; h += 2) {
    unsigned v;
    ck_assert(sscanf(h, "%2x", &v) == 1);
    out[n++] = (uint8_t)v;
  }
  return n;
}

/* The two vectors of docs/pytorch.md, written by the Python encoder
 * (python/elastic_agent/protocol.py): our encoder must write the same
 * bytes from the same fields, and decode → encode must give them back. */
static const char commit_ext_hex[] =
    "8aa474797065a6636f6d6d6974a367656e07a472616e6b01a5776f726c6402a5706565727392ae31302e302e302e"
    "373a3431303030ae31302e302e302e383a3431303030a973796e635f726f6f7400a76261636b656e64a3746370aa"
    "74696d656f75745f6d73cd7530a573746f7265ae31302e302e302e373a3431303030ad746f7263685f6261636b65"
    "6e64a4676c6f6f";
static const char staged_ext_hex[] =
    "8ea474797065ab636b70745f737461676564a367656e05a47374657014a472616e6b01a5776f726c6403a66f6666"
    "736574cdc49ba66c656e677468cdc49ba5746f74616cce00024dd2a468617368cfdeadbeefcafef00da87374616c"
    "6c5f757340a7776169745f757300a7736b697070656400a66c61796f7574aa65612d73746174652d31ac68656164"
    "65725f6279746573cd0400";

START_TEST(test_extension_keys_match_the_python_encoder) {
  uint8_t want[512], buf[512];
  ea_ipc_msg *a = msg_new(), *b = msg_new();
  char err[200] = "";

  ea_ipc_msg_init(a, EA_IPC_COMMIT);
  a->gen = 7;
  a->rank = 1;
  a->world = a->npeers = 2;
  strcpy(a->peers[0], "10.0.0.7:41000");
  strcpy(a->peers[1], "10.0.0.8:41000");
  a->timeout_ms = 30000;
  strcpy(a->store, "10.0.0.7:41000");
  a->torch_backend = EA_IPC_TORCH_GLOO;
  size_t wn = unhex(commit_ext_hex, want, sizeof want), len = enc(a, buf, sizeof buf);
  ck_assert_uint_eq(len, wn);
  ck_assert_msg(memcmp(buf, want, wn) == 0, "commit with store/torch_backend: bytes differ");
  ck_assert_msg(ea_ipc_decode(want, wn, b, err, sizeof err) == 0, "%s", err);
  ck_assert(memcmp(a, b, sizeof *a) == 0);

  ea_ipc_msg_init(a, EA_IPC_CKPT_STAGED);
  a->gen = 5;
  a->step = 20;
  a->rank = 1;
  a->world = 3;
  a->offset = a->length = 50331;
  a->total = 150994;
  a->hash = 0xdeadbeefcafef00dull;
  a->stall_us = 64;
  a->layout = EA_IPC_LAYOUT_EA_STATE_1;
  a->header_bytes = 1024;
  wn = unhex(staged_ext_hex, want, sizeof want);
  len = enc(a, buf, sizeof buf);
  ck_assert_uint_eq(len, wn);
  ck_assert_msg(memcmp(buf, want, wn) == 0, "ckpt_staged with layout: bytes differ");
  ck_assert_msg(ea_ipc_decode(want, wn, b, err, sizeof err) == 0, "%s", err);
  ck_assert(memcmp(a, b, sizeof *a) == 0);

  /* The library's error texts (tests/python/test_protocol.py, MALFORMED). */
  static const struct {
    const char *k1, *v1, *k2, *v2, *want;
  } bad[] = {
      {"store", "", "torch_backend", "gloo",
       "commit.store: expected a non-empty address < 96 bytes"},
      {"torch_backend", "mpi", NULL, NULL, "commit.torch_backend: expected \"gloo\" or \"nccl\""},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    hand h;
    hand_init(&h);
    msgpack_pack_map(&h.pk, 8 + (bad[i].k2 ? 2 : 1));
    hs(&h, "type"), hs(&h, "commit");
    hs(&h, "gen"), hu(&h, 1);
    hs(&h, "rank"), hu(&h, 0);
    hs(&h, "world"), hu(&h, 1);
    hs(&h, "peers"), msgpack_pack_array(&h.pk, 1), hs(&h, "a:1");
    hs(&h, "sync_root"), hu(&h, 0);
    hs(&h, "backend"), hs(&h, "tcp");
    hs(&h, "timeout_ms"), hu(&h, 5000);
    hs(&h, bad[i].k1), hs(&h, bad[i].v1);
    if (bad[i].k2) hs(&h, bad[i].k2), hs(&h, bad[i].v2);
    expect_bad((const uint8_t *)h.sb.data, h.sb.size, bad[i].want);
    msgpack_sbuffer_destroy(&h.sb);
  }
  /* ckpt_staged: layout and header_bytes both or neither; H <= T. */
  for (int c = 0; c < 4; c++) {
    hand h;
    hand_init(&h);
    msgpack_pack_map(&h.pk, 12 + (c == 2 ? 2 : 1));
    hs(&h, "type"), hs(&h, "ckpt_staged");
    const char *u[] = {"gen", "step", "rank", "offset", "hash", "stall_us", "wait_us", "skipped"};
    for (size_t i = 0; i < sizeof u / sizeof u[0]; i++) hs(&h, u[i]), hu(&h, 0);
    hs(&h, "world"), hu(&h, 1);
    hs(&h, "length"), hu(&h, 10);
    hs(&h, "total"), hu(&h, 10);
    if (c == 0) hs(&h, "layout"), hs(&h, "ea-state-1");
    if (c == 1) hs(&h, "header_bytes"), hu(&h, 8);
    if (c == 2) hs(&h, "layout"), hs(&h, "ea-state-1"), hs(&h, "header_bytes"), hu(&h, 64);
    if (c == 3) hs(&h, "layout"), hs(&h, "ea-state-2");
    static const char *const want_err[] = {"ckpt_staged.header_bytes: required with layout",
                                           "ckpt_staged.layout: required with header_bytes",
                                           "ckpt_staged.header_bytes: 64 beyond the 10-byte state",
                                           "ckpt_staged.layout: expected \"ea-state-1\""};
    expect_bad((const uint8_t *)h.sb.data, h.sb.size, want_err[c]);
    msgpack_sbuffer_destroy(&h.sb);
  }
  /* Absent keys stay absent: a message without them encodes as before. */
  ea_ipc_msg_init(a, EA_IPC_COMMIT);
  a->world = a->npeers = 1;
  strcpy(a->peers[0], "a:1");
  len = enc(a, buf, sizeof buf);
  ck_assert_ptr_null(memmem(buf, len, "store", 5));
  ck_assert_ptr_null(memmem(buf, len, "torch_backend", 13));
  free(a);
  free(b);
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
  tcase_add_test(tc, test_framing_errors);
  tcase_add_test(tc, test_encoder_refuses_and_bounds);
  tcase_add_test(tc, test_largest_commit_fits);
  tcase_add_test(tc, test_mutations_never_crash);
  tcase_add_test(tc, test_socketpair_send_recv);
  tcase_add_test(tc, test_last_packets_survive_unread_close);
  tcase_add_test(tc, test_extension_keys_match_the_python_encoder);
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
