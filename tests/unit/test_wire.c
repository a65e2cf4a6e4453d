/* Check suite for the gossip wire codec (membership/wire.c over base/mpread.c) and the
 * cluster-key seal (membership/seal.c).
 *
 * The codec's promises, each asserted here: every message type round-trips
 * with 0, 1 and as many updates as fit a sealed UDP packet; the size helpers
 * give the exact encoded size (the SWIM core budgets packets with them); a
 * buffer that is too small gives -EMSGSIZE, never a short packet; every
 * truncation and a seeded corpus of mutations of valid input is rejected with
 * a named field or decodes to something that re-encodes to the same struct;
 * a frame cannot make the decoder allocate for more updates than its bytes
 * hold.  Randomized tests print their seed; EA_SEED=… replays one.
 */
#include "ea_membership.h"
#include "ea_wire.h"

#include <check.h>
#include <sys/stat.h>
#include <errno.h>
#include <inttypes.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Plaintext budget such that the sealed packet is at most EA_WIRE_MAX_PACKET. */
#define PLAIN_CAP (EA_WIRE_MAX_PACKET - (EA_WIRE_SEAL_RP_OVERHEAD - 1))

/* ---- seeded randomness ------------------------------------------------- */

static uint64_t g_seed;
static uint64_t g_rng;

static uint64_t rnd(void) { /* splitmix64 */
  uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static uint32_t rndn(uint32_t n) {
  return (uint32_t)(rnd() % n);
}

static void seed_rng(void) {
  const char *s = getenv("EA_SEED");
  g_seed = s && *s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
  g_rng = g_seed;
}

/* ---- builders and comparison ------------------------------------------- */

static void rnd_id(ea_node_id *id) {
  for (int i = 0; i < 16; i++) id->b[i] = (uint8_t)rnd();
}

static void mk_addr(ea_addr *a, int v6, uint16_t port) {
  memset(a, 0, sizeof *a);
  a->family = v6 ? 6 : 4;
  a->port = port;
  for (int i = 0; i < (v6 ? 16 : 4); i++) a->ip[i] = (uint8_t)rnd();
}

/* A string of exactly len characters from a small printable alphabet. */
static void rnd_str(char *dst, size_t len) {
  for (size_t i = 0; i < len; i++) dst[i] = (char)('a' + rndn(26));
  dst[len] = 0;
}

/* Values chosen to straddle msgpack's header-size boundaries. */
static const uint64_t edge_ints[] = {0,     1,     127,    128,        255,        256,
                                     65535, 65536, 100000, UINT32_MAX, 1ull << 32, UINT64_MAX};
static const size_t edge_lens[] = {0, 1, 31, 32, 63, 127};

static uint64_t edge_int(uint64_t max) {
  for (;;) {
    uint64_t v = edge_ints[rndn(sizeof edge_ints / sizeof edge_ints[0])];
    if (v <= max) return v;
  }
}
static size_t edge_len(size_t cap) {
  for (;;) {
    size_t l = edge_lens[rndn(sizeof edge_lens / sizeof edge_lens[0])];
    if (l < cap) return l;
  }
}

static void mk_update(ea_update *u, int with_meta, int v6) {
  memset(u, 0, sizeof *u);
  u->state = (uint8_t)rndn(4);
  u->incarnation = (uint32_t)edge_int(UINT32_MAX);
  rnd_id(&u->id);
  rnd_id(&u->from);
  u->has_meta = with_meta;
  if (!with_meta) {
    if (rndn(2)) u->meta_inc = (uint32_t)edge_int(UINT32_MAX); /* 0 is nil */
    return;
  }
  ea_meta *m = &u->meta;
  rnd_str(m->name, edge_len(sizeof m->name));
  mk_addr(&m->gossip, v6, (uint16_t)rnd());
  mk_addr(&m->control, !v6, (uint16_t)rnd());
  rnd_str(m->role, edge_len(sizeof m->role));
  rnd_str(m->tags, edge_len(sizeof m->tags));
  rnd_str(m->version, edge_len(sizeof m->version));
  m->last_gen = edge_int(UINT64_MAX);
}

static void mk_msg(ea_msg *m, uint8_t type, int v6) {
  memset(m, 0, sizeof *m);
  m->type = type;
  m->seq = (uint32_t)edge_int(UINT32_MAX);
  rnd_id(&m->src);
  rnd_id(&m->target);
  if (type == EA_MSG_PING_REQ || type == EA_MSG_NACK) {
    mk_addr(&m->target_addr, v6, 7000);
    mk_addr(&m->reply_to, v6, 7001);
  }
}

static int addr_same(const ea_addr *a, const ea_addr *b) {
  return a->family == b->family && (a->family == 0 || ea_addr_eq(a, b));
}

static int update_eq(const ea_update *a, const ea_update *b) {
  if (a->state != b->state || a->incarnation != b->incarnation || ea_node_id_cmp(&a->id, &b->id) ||
      ea_node_id_cmp(&a->from, &b->from) || a->has_meta != b->has_meta)
    return 0;
  if (!a->has_meta) return a->meta_inc == b->meta_inc;
  const ea_meta *x = &a->meta, *y = &b->meta;
  return !strcmp(x->name, y->name) && addr_same(&x->gossip, &y->gossip) &&
         addr_same(&x->control, &y->control) && !strcmp(x->role, y->role) &&
         !strcmp(x->tags, y->tags) && !strcmp(x->version, y->version) && x->last_gen == y->last_gen;
}

static int msg_eq(const ea_msg *a, const ea_msg *b) {
  if (a->type != b->type || a->seq != b->seq || ea_node_id_cmp(&a->src, &b->src) ||
      ea_node_id_cmp(&a->target, &b->target) || !addr_same(&a->target_addr, &b->target_addr) ||
      !addr_same(&a->reply_to, &b->reply_to) || a->nupdates != b->nupdates)
    return 0;
  for (uint32_t i = 0; i < a->nupdates; i++)
    if (!update_eq(&a->updates[i], &b->updates[i])) return 0;
  return 1;
}

/* Encode, check the exact-size promise, decode, compare. */
static size_t roundtrip(const ea_msg *m, uint8_t *buf, size_t cap) {
  static ea_msg back;
  size_t len = 0, want = ea_wire_msg_base_size(m);
  for (uint32_t i = 0; i < m->nupdates; i++) want += ea_wire_update_size(&m->updates[i]);
  int rc = ea_wire_encode_msg(m, buf, cap, &len);
  ck_assert_int_eq(rc, 0);
  ck_assert_uint_eq(len, want);
  ck_assert_uint_le(len, cap);
  const char *err = NULL;
  rc = ea_wire_decode_msg(buf, len, &back, &err);
  ck_assert_msg(rc == 0, "decode failed: %s", err ? err : "(null)");
  ck_assert(msg_eq(m, &back));
  return len;
}

/* ---- helpers ----------------------------------------------------------- */

START_TEST(test_helpers) {
  ea_node_id a = {{0}}, b = {{0}};
  char hex[33];
  for (int i = 0; i < 16; i++) a.b[i] = (uint8_t)(i * 17);
  ea_node_id_hex(&a, hex);
  ck_assert_str_eq(hex, "00112233445566778899aabbccddeeff");
  ck_assert_int_eq(ea_node_id_cmp(&a, &a), 0);
  ck_assert_int_eq(ea_node_id_cmp(&a, &b), 1);
  ck_assert_int_eq(ea_node_id_cmp(&b, &a), -1);
  b.b[15] = 0xff;
  ck_assert_int_eq(ea_node_id_cmp(&a, &b), 1); /* first byte decides */

  ea_addr v4 = {.family = 4, .port = 7000, .ip = {10, 1, 2, 3}};
  ea_addr v6 = {.family = 6, .port = 7946};
  v6.ip[15] = 1;
  ea_addr none = {0};
  char s[64];
  ea_addr_str(&v4, s, sizeof s);
  ck_assert_str_eq(s, "10.1.2.3:7000");
  ea_addr_str(&v6, s, sizeof s);
  ck_assert_str_eq(s, "[::1]:7946");
  ea_addr_str(&none, s, sizeof s);
  ck_assert_str_eq(s, "none");
  ea_addr_str(&v4, s, 5); /* truncated, still terminated */
  ck_assert_str_eq(s, "10.1");

  ea_addr v4b = v4;
  v4b.ip[10] = 99; /* beyond an IPv4 address: not part of it */
  ck_assert(ea_addr_eq(&v4, &v4b));
  v4b.port = 7001;
  ck_assert(!ea_addr_eq(&v4, &v4b));
  ck_assert(!ea_addr_eq(&v4, &v6));
  ck_assert(ea_addr_eq(&none, &none));
}
END_TEST

/* ---- encoding ---------------------------------------------------------- */

START_TEST(test_roundtrip_every_type) {
  static ea_msg m;
  uint8_t buf[PLAIN_CAP], sealed[EA_WIRE_MAX_PACKET + 64], key[EA_KEY_BYTES] = {1};
  seed_rng();
  printf("test_roundtrip_every_type: EA_SEED=%" PRIu64 "\n", g_seed);
  for (uint8_t type = EA_MSG_PING; type <= EA_MSG_GOSSIP; type++)
    for (int v6 = 0; v6 <= 1; v6++)
      for (int meta = 0; meta <= 1; meta++) {
        mk_msg(&m, type, v6);
        roundtrip(&m, buf, sizeof buf); /* 0 updates */
        mk_update(&m.updates[0], meta, v6);
        m.nupdates = 1;
        roundtrip(&m, buf, sizeof buf);
        /* as many as fit the plaintext budget of one sealed packet */
        size_t used = ea_wire_msg_base_size(&m) + ea_wire_update_size(&m.updates[0]);
        for (;;) {
          ea_update u;
          mk_update(&u, meta, v6);
          if (m.nupdates == EA_WIRE_MAX_UPDATES || used + ea_wire_update_size(&u) > sizeof buf)
            break;
          m.updates[m.nupdates++] = u;
          used += ea_wire_update_size(&u);
        }
        ck_assert_uint_gt(m.nupdates, 1);
        size_t len = roundtrip(&m, buf, sizeof buf);
        ck_assert_uint_eq(len, used);
        size_t slen;
        ea_wire_sender snd = {.epoch = 1};
        ck_assert_int_eq(ea_wire_seal_rp(key, &snd, buf, len, sealed, sizeof sealed, &slen, NULL),
                         0);
        ck_assert_uint_le(slen, EA_WIRE_MAX_PACKET);
        /* the core's default budget is the same plaintext less its 0xEA */
        ea_swim_config dc;
        ea_swim_config_default(&dc);
        ck_assert_uint_eq(dc.max_packet + EA_WIRE_SEAL_RP_OVERHEAD, EA_WIRE_MAX_PACKET);
      }
}
END_TEST

START_TEST(test_size_exact) {
  /* Messages with 0..64 updates whose ints and strings sit on msgpack's
   * header-size boundaries: the encoded length is base + Σ update sizes. */
  static ea_msg m;
  static uint8_t buf[64 * 1024];
  seed_rng();
  printf("test_size_exact: EA_SEED=%" PRIu64 "\n", g_seed);
  for (int round = 0; round < 20; round++) {
    mk_msg(&m, (uint8_t)(1 + rndn(5)), (int)rndn(2));
    for (uint32_t n = 0; n <= EA_WIRE_MAX_UPDATES; n++) {
      m.nupdates = n;
      roundtrip(&m, buf, sizeof buf);
      if (n < EA_WIRE_MAX_UPDATES) mk_update(&m.updates[n], (int)rndn(2), (int)rndn(2));
    }
  }
}
END_TEST

START_TEST(test_emsgsize) {
  static ea_msg m;
  uint8_t buf[2048];
  size_t len, len2 = 12345;
  seed_rng();
  mk_msg(&m, EA_MSG_PING_REQ, 1);
  for (int i = 0; i < 5; i++) mk_update(&m.updates[m.nupdates++], 1, i & 1);
  ck_assert_int_eq(ea_wire_encode_msg(&m, buf, sizeof buf, &len), 0);
  for (size_t cap = 0; cap < len; cap++) {
    memset(buf, 0x5a, sizeof buf);
    ck_assert_int_eq(ea_wire_encode_msg(&m, buf, cap, &len2), -EMSGSIZE);
    ck_assert_uint_eq(len2, 12345);           /* *len untouched on failure */
    for (size_t i = cap; i < sizeof buf; i++) /* nothing written past cap */
      ck_assert_uint_eq(buf[i], 0x5a);
  }
  ck_assert_int_eq(ea_wire_encode_msg(&m, buf, len, &len2), 0);
  ck_assert_uint_eq(len2, len);
}
END_TEST

START_TEST(test_encode_einval) {
  static ea_msg m;
  uint8_t buf[2048];
  size_t len;
  mk_msg(&m, EA_MSG_PING, 0);
  m.type = 0;
  ck_assert_int_eq(ea_wire_encode_msg(&m, buf, sizeof buf, &len), -EINVAL);
  m.type = 6;
  ck_assert_int_eq(ea_wire_encode_msg(&m, buf, sizeof buf, &len), -EINVAL);
  m.type = EA_MSG_ACK;
  m.nupdates = EA_WIRE_MAX_UPDATES + 1;
  ck_assert_int_eq(ea_wire_encode_msg(&m, buf, sizeof buf, &len), -EINVAL);
  m.nupdates = 1;
  mk_update(&m.updates[0], 1, 0);
  m.updates[0].state = 4;
  ck_assert_int_eq(ea_wire_encode_msg(&m, buf, sizeof buf, &len), -EINVAL);
  m.updates[0].state = EA_STATE_DEAD;
  m.updates[0].meta.control.family = 5;
  ck_assert_int_eq(ea_wire_encode_msg(&m, buf, sizeof buf, &len), -EINVAL);
  m.updates[0].meta.control.family = 6;
  m.updates[0].meta_inc = 9; /* one slot: the metadata or an incarnation */
  ck_assert_int_eq(ea_wire_encode_msg(&m, buf, sizeof buf, &len), -EINVAL);
  m.updates[0].meta_inc = 0;
  m.reply_to.family = 2;
  ck_assert_int_eq(ea_wire_encode_msg(&m, buf, sizeof buf, &len), -EINVAL);
  m.reply_to.family = 0;
  ck_assert_int_eq(ea_wire_encode_msg(&m, buf, sizeof buf, &len), 0);
}
END_TEST

START_TEST(test_unterminated_strings) {
  /* A caller that filled a field to the last byte without a NUL: the encoder
   * reads no further than the field and sends the first size-1 bytes. */
  static ea_msg m, back;
  uint8_t buf[2048];
  size_t len;
  seed_rng();
  mk_msg(&m, EA_MSG_GOSSIP, 0);
  mk_update(&m.updates[0], 1, 0);
  m.nupdates = 1;
  memset(m.updates[0].meta.name, 'x', sizeof m.updates[0].meta.name);
  memset(m.updates[0].meta.tags, 'y', sizeof m.updates[0].meta.tags);
  ck_assert_int_eq(ea_wire_encode_msg(&m, buf, sizeof buf, &len), 0);
  ck_assert_uint_eq(len, ea_wire_msg_base_size(&m) + ea_wire_update_size(&m.updates[0]));
  ck_assert_int_eq(ea_wire_decode_msg(buf, len, &back, NULL), 0);
  ck_assert_uint_eq(strlen(back.updates[0].meta.name), EA_NAME_MAX - 1);
  ck_assert_uint_eq(strlen(back.updates[0].meta.tags), EA_TAGS_MAX - 1);
}
END_TEST

/* ---- hand-built bad packets -------------------------------------------- */

/* Knobs for build_bad(): every field valid by default; each test breaks one. */
typedef struct {
  int magic;
  int nfields;
  uint64_t version, type, state;
  int neg_seq;  /* seq as a negative int8 */
  int seq_u64;  /* seq = 2^32 */
  int id_len;   /* src bin length */
  int addr_len; /* target_addr bin length */
  int family;   /* target_addr family byte */
  int nupd;     /* updates array count (with that many bodies) */
  int upd_fields;
  int name_len;    /* meta.name length */
  int name_nul;    /* a NUL inside meta.name */
  int name_as_bin; /* meta.name sent as bin */
  int name_ctl;    /* a control byte (this value) inside meta.name */
  int trailing;    /* extra bytes after the message */
  int slot;        /* the meta slot: 0 the array, 1 the uint slot_val, 2 a str, 3 int -1 */
  uint64_t slot_val;
} knobs;

static knobs kdef(void) {
  return (knobs){.magic = 0xEA,
                 .nfields = 8,
                 .version = 1,
                 .type = EA_MSG_GOSSIP,
                 .state = 0,
                 .id_len = 16,
                 .addr_len = 19,
                 .family = 4,
                 .nupd = 1,
                 .upd_fields = 5,
                 .name_len = 5};
}

static int sb_write(void *d, const char *p, size_t n) {
  return msgpack_sbuffer_write(d, p, n);
}

static void pk_bin(msgpack_packer *pk, size_t n, uint8_t fill) {
  uint8_t b[64];
  memset(b, fill, sizeof b);
  msgpack_pack_bin(pk, n);
  msgpack_pack_bin_body(pk, b, n);
}

static void build_bad(const knobs *k, msgpack_sbuffer *sb) {
  msgpack_packer pk;
  msgpack_sbuffer_init(sb);
  msgpack_packer_init(&pk, sb, sb_write);
  char mg = (char)k->magic;
  msgpack_sbuffer_write(sb, &mg, 1);
  msgpack_pack_array(&pk, k->nfields);
  msgpack_pack_uint64(&pk, k->version);
  msgpack_pack_uint64(&pk, k->type);
  if (k->neg_seq)
    msgpack_pack_int8(&pk, -3);
  else
    msgpack_pack_uint64(&pk, k->seq_u64 ? 1ull << 32 : 77);
  pk_bin(&pk, k->id_len, 1);
  pk_bin(&pk, 16, 2);
  uint8_t a[32] = {(uint8_t)k->family, 0x1b, 0x58, 127, 0, 0, 1};
  msgpack_pack_bin(&pk, k->addr_len);
  msgpack_pack_bin_body(&pk, a, k->addr_len);
  pk_bin(&pk, 19, 0);
  msgpack_pack_array(&pk, k->nupd);
  for (int i = 0; i < k->nupd; i++) {
    msgpack_pack_array(&pk, k->upd_fields);
    msgpack_pack_uint64(&pk, k->state);
    msgpack_pack_uint32(&pk, 3);
    pk_bin(&pk, 16, 3);
    pk_bin(&pk, 16, 4);
    if (k->slot) {
      if (k->slot == 1) msgpack_pack_uint64(&pk, k->slot_val);
      if (k->slot == 2) msgpack_pack_str_with_body(&pk, "x", 1);
      if (k->slot == 3) msgpack_pack_int8(&pk, -1);
      continue;
    }
    msgpack_pack_array(&pk, 7);
    char name[200];
    memset(name, 'n', sizeof name);
    if (k->name_nul) name[1] = 0;
    if (k->name_ctl) name[2] = (char)k->name_ctl;
    if (k->name_as_bin) {
      msgpack_pack_bin(&pk, k->name_len);
      msgpack_pack_bin_body(&pk, name, k->name_len);
    } else {
      msgpack_pack_str(&pk, k->name_len);
      msgpack_pack_str_body(&pk, name, k->name_len);
    }
    a[0] = 6;
    msgpack_pack_bin(&pk, 19);
    msgpack_pack_bin_body(&pk, a, 19);
    msgpack_pack_bin(&pk, 19);
    msgpack_pack_bin_body(&pk, a, 19);
    msgpack_pack_str_with_body(&pk, "worker", 6);
    msgpack_pack_str_with_body(&pk, "", 0);
    msgpack_pack_str_with_body(&pk, "0.1.0", 5);
    msgpack_pack_uint64(&pk, 9);
  }
  for (int i = 0; i < k->trailing; i++) msgpack_pack_nil(&pk);
}

/* Decode the knobs' packet; expect success or an error mentioning `want`. */
static void expect(const knobs *k, const char *want) {
  static ea_msg m;
  msgpack_sbuffer sb;
  build_bad(k, &sb);
  const char *err = NULL;
  int rc = ea_wire_decode_msg((const uint8_t *)sb.data, sb.size, &m, &err);
  if (!want) {
    ck_assert_msg(rc == 0, "valid packet rejected: %s", err ? err : "(null)");
  } else {
    ck_assert_int_eq(rc, -EA_EWIRE);
    ck_assert_ptr_nonnull(err);
    ck_assert_msg(strstr(err, want) != NULL, "error \"%s\" does not name \"%s\"", err, want);
  }
  msgpack_sbuffer_destroy(&sb);
}

START_TEST(test_decode_rejects) {
  knobs k = kdef();
  expect(&k, NULL); /* the builder's default is valid */
  k = kdef(), k.magic = 0x00, expect(&k, "magic");
  k = kdef(), k.magic = 0xEB, expect(&k, "magic: sealed");
  k = kdef(), k.version = 2, expect(&k, "version");
  k = kdef(), k.nfields = 9, expect(&k, "header");
  k = kdef(), k.type = 0, expect(&k, "type");
  k = kdef(), k.type = 6, expect(&k, "type");
  k = kdef(), k.type = 1000, expect(&k, "type");
  k = kdef(), k.neg_seq = 1, expect(&k, "seq");
  k = kdef(), k.seq_u64 = 1, expect(&k, "seq: out of range");
  k = kdef(), k.id_len = 15, expect(&k, "src");
  k = kdef(), k.id_len = 17, expect(&k, "src");
  k = kdef(), k.addr_len = 18, expect(&k, "target_addr: not 19 bytes");
  k = kdef(), k.addr_len = 20, expect(&k, "target_addr: not 19 bytes");
  k = kdef(), k.family = 5, expect(&k, "target_addr: bad address family");
  k = kdef(), k.family = 0, expect(&k, NULL);
  k = kdef(), k.family = 6, expect(&k, NULL);
  k = kdef(), k.nupd = EA_WIRE_MAX_UPDATES, expect(&k, NULL);
  k = kdef(), k.nupd = EA_WIRE_MAX_UPDATES + 1, expect(&k, "updates: too many");
  k = kdef(), k.upd_fields = 6, expect(&k, "update:");
  k = kdef(), k.state = 3, expect(&k, NULL);
  k = kdef(), k.state = 4, expect(&k, "update.state");
  k = kdef(), k.name_len = EA_NAME_MAX - 1, expect(&k, NULL);
  k = kdef(), k.name_len = EA_NAME_MAX, expect(&k, "update.meta.name: out of range or too long");
  k = kdef(), k.name_len = 180, expect(&k, "update.meta.name");
  k = kdef(), k.name_nul = 1, expect(&k, "update.meta.name");
  k = kdef(), k.name_as_bin = 1, expect(&k, "update.meta.name: wrong type");
  /* a name that would forge a log line ("n\n2026-… info …") or move the
   * cursor (ESC) is refused (issue 11, item 7) */
  k = kdef(), k.name_ctl = '\n', expect(&k, "update.meta.name: control character");
  k = kdef(), k.name_ctl = '\r', expect(&k, "update.meta.name: control character");
  k = kdef(), k.name_ctl = 0x1b, expect(&k, "update.meta.name: control character");
  k = kdef(), k.name_ctl = 0x7f, expect(&k, "update.meta.name: control character");
  k = kdef(), k.name_ctl = 0x80, expect(&k, NULL); /* UTF-8 bytes are fine */
  k = kdef(), k.trailing = 1, expect(&k, "trailing");
  /* the meta slot holds the metadata, an incarnation (ea_update.meta_inc) or nil */
  k = kdef(), k.slot = 1, k.slot_val = 7, expect(&k, NULL);
  k = kdef(), k.slot = 1, k.slot_val = UINT32_MAX, expect(&k, NULL);
  k = kdef(), k.slot = 1, k.slot_val = (uint64_t)UINT32_MAX + 1,
  expect(&k, "update.meta: out of range");
  k = kdef(), k.slot = 1, k.slot_val = 0, expect(&k, "update.meta: incarnation 0 travels as nil");
  k = kdef(), k.slot = 2, expect(&k, "update.meta: not a 7-element array, an incarnation or nil");
  k = kdef(), k.slot = 3, expect(&k, "update.meta");

  static ea_msg m;
  const char *err = NULL;
  ck_assert_int_eq(ea_wire_decode_msg((const uint8_t *)"", 0, &m, &err), -EA_EWIRE);
  ck_assert_ptr_nonnull(err);
  /* a header claiming 2^32-1 updates (array32) is refused on the count */
  uint8_t huge[256];
  size_t len;
  mk_msg(&m, EA_MSG_PING, 0);
  ck_assert_int_eq(ea_wire_encode_msg(&m, huge, sizeof huge, &len), 0);
  ck_assert_uint_eq(huge[len - 3], 0xdc); /* the updates' array16 ends the packet */
  memcpy(huge + len - 3, "\xdd\xff\xff\xff\xff", 5);
  ck_assert_int_eq(ea_wire_decode_msg(huge, len + 2, &m, &err), -EA_EWIRE);
  ck_assert_str_eq(err, "updates: too many");
}
END_TEST

/* ---- truncations and mutations ------------------------------------------ */

static size_t sample_packets(uint8_t bufs[][2048], size_t lens[], size_t max) {
  static ea_msg m;
  size_t n = 0;
  for (uint8_t t = EA_MSG_PING; t <= EA_MSG_GOSSIP && n < max; t++) {
    mk_msg(&m, t, t & 1);
    for (uint32_t i = 0; i < t; i++) mk_update(&m.updates[m.nupdates++], (i + t) & 1, i & 1);
    ck_assert_int_eq(ea_wire_encode_msg(&m, bufs[n], sizeof bufs[n], &lens[n]), 0);
    n++;
  }
  return n;
}

START_TEST(test_every_truncation) {
  static ea_msg m;
  static uint8_t bufs[5][2048];
  size_t lens[5];
  seed_rng();
  size_t n = sample_packets(bufs, lens, 5);
  for (size_t p = 0; p < n; p++) {
    for (size_t l = 0; l < lens[p]; l++) {
      const char *err = NULL;
      ck_assert_int_eq(ea_wire_decode_msg(bufs[p], l, &m, &err), -EA_EWIRE);
      ck_assert_ptr_nonnull(err);
    }
    ck_assert_int_eq(ea_wire_decode_msg(bufs[p], lens[p], &m, NULL), 0);
  }
}
END_TEST

/* One random edit: flip a bit, overwrite a byte with an edge value, insert or
 * delete a byte, or duplicate a span. */
static size_t mutate(uint8_t *b, size_t len, size_t cap) {
  static const uint8_t edge[] = {0x00, 0x7f, 0x80, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc4, 0xc5,
                                 0xc6, 0xcc, 0xcf, 0xd0, 0xd3, 0xd9, 0xdb, 0xdc, 0xdd, 0xff};
  switch (rndn(5)) {
    case 0:
      if (len) b[rndn((uint32_t)len)] ^= (uint8_t)(1u << rndn(8));
      break;
    case 1:
      if (len) b[rndn((uint32_t)len)] = edge[rndn(sizeof edge)];
      break;
    case 2:
      if (len < cap) {
        size_t at = rndn((uint32_t)len + 1);
        memmove(b + at + 1, b + at, len - at);
        b[at] = rndn(2) ? edge[rndn(sizeof edge)] : (uint8_t)rnd();
        len++;
      }
      break;
    case 3:
      if (len) {
        size_t at = rndn((uint32_t)len);
        memmove(b + at, b + at + 1, len - at - 1);
        len--;
      }
      break;
    default:
      if (len) {
        size_t at = rndn((uint32_t)len), n = 1 + rndn(32);
        if (n > len - at) n = len - at;
        if (n > cap - len) n = cap - len;
        memmove(b + at + n, b + at, len - at);
        len += n;
      }
  }
  return len;
}

START_TEST(test_mutation_corpus) {
  static ea_msg m, again;
  static uint8_t bufs[5][2048], work[4096], re[4096];
  size_t lens[5];
  seed_rng();
  printf("test_mutation_corpus: EA_SEED=%" PRIu64 "\n", g_seed);
  size_t n = sample_packets(bufs, lens, 5);
  unsigned ok = 0, rejected = 0;
  for (int it = 0; it < 20000; it++) {
    size_t p = rndn((uint32_t)n), len = lens[p];
    memcpy(work, bufs[p], len);
    for (uint32_t e = 1 + rndn(4); e > 0; e--) len = mutate(work, len, sizeof work);
    const char *err = NULL;
    int rc = ea_wire_decode_msg(work, len, &m, &err);
    if (rc != 0) {
      ck_assert_msg(rc == -EA_EWIRE && err != NULL, "seed %" PRIu64 " iter %d", g_seed, it);
      rejected++;
      continue;
    }
    ok++;
    /* whatever decodes is a valid struct: it re-encodes and decodes equal */
    size_t rlen;
    ck_assert_int_eq(ea_wire_encode_msg(&m, re, sizeof re, &rlen), 0);
    ck_assert_int_eq(ea_wire_decode_msg(re, rlen, &again, NULL), 0);
    ck_assert_msg(msg_eq(&m, &again), "seed %" PRIu64 " iter %d", g_seed, it);
  }
  printf("test_mutation_corpus: %u decoded, %u rejected\n", ok, rejected);
  ck_assert_uint_gt(rejected, 0);
}
END_TEST

/* ---- push-pull state ---------------------------------------------------- */

START_TEST(test_state_roundtrip) {
  enum { N = 1000 };
  ea_update *ups = calloc(N, sizeof *ups);
  ea_node_id src;
  seed_rng();
  rnd_id(&src);
  for (int i = 0; i < N; i++) mk_update(&ups[i], i % 3 != 0, i & 1);
  uint8_t *buf = NULL;
  size_t len = 0;
  ck_assert_int_eq(ea_wire_encode_state(EA_SYNC_JOIN, &src, ups, N, &buf, &len), 0);
  ck_assert_uint_eq(buf[0], EA_WIRE_MAGIC_PLAIN);
  size_t want = 0;
  for (int i = 0; i < N; i++) want += ea_wire_update_size(&ups[i]);
  ck_assert_uint_eq(len, want + 1 + 1 + 1 + 1 + 18 + 3); /* magic arr ver kind src array16 */

  uint8_t kind = 0;
  ea_node_id src2;
  ea_update *back = NULL;
  size_t n = 0;
  const char *err = NULL;
  ck_assert_int_eq(ea_wire_decode_state(buf, len, &kind, &src2, &back, &n, &err), 0);
  ck_assert_uint_eq(kind, EA_SYNC_JOIN);
  ck_assert_int_eq(ea_node_id_cmp(&src, &src2), 0);
  ck_assert_uint_eq(n, N);
  for (int i = 0; i < N; i++) ck_assert(update_eq(&ups[i], &back[i]));
  free(back);

  /* every truncation of a smaller frame is rejected, and frees nothing twice */
  uint8_t *small = NULL;
  size_t slen;
  ck_assert_int_eq(ea_wire_encode_state(EA_SYNC_PERIODIC, &src, ups, 7, &small, &slen), 0);
  for (size_t l = 0; l < slen; l++) {
    back = (ea_update *)1;
    err = NULL;
    ck_assert_int_eq(ea_wire_decode_state(small, l, &kind, &src2, &back, &n, &err), -EA_EWIRE);
    ck_assert_ptr_nonnull(err);
    ck_assert_ptr_null(back);
  }
  /* empty state is fine */
  free(small);
  ck_assert_int_eq(ea_wire_encode_state(EA_SYNC_PERIODIC, &src, NULL, 0, &small, &slen), 0);
  ck_assert_int_eq(ea_wire_decode_state(small, slen, &kind, &src2, &back, &n, &err), 0);
  ck_assert_uint_eq(n, 0);
  free(back);
  free(small);
  ck_assert_int_eq(ea_wire_encode_state(3, &src, ups, 1, &small, &slen), -EINVAL);
  free(buf);
  free(ups);
}
END_TEST

START_TEST(test_state_rejects) {
  uint8_t kind;
  ea_node_id src;
  ea_update *ups = NULL;
  size_t n;
  const char *err = NULL;
  /* [1, 1, src, array32(0xffffffff)]: claims 2^32-1 updates in 27 bytes */
  uint8_t f[128] = {0xEA, 0x94, 0x01, 0x01, 0xc4, 16};
  size_t len = 6 + 16;
  f[len++] = 0xdd;
  for (int i = 0; i < 4; i++) f[len++] = 0xff;
  ck_assert_int_eq(ea_wire_decode_state(f, len, &kind, &src, &ups, &n, &err), -EA_EWIRE);
  ck_assert_str_eq(err, "updates: count exceeds frame size");
  ck_assert_ptr_null(ups);
  /* a count of 2 with bytes for only one minimal (40-byte) update */
  f[len - 5] = 0x92;
  len -= 4;
  memset(f + len, 0, 40);
  len += 40;
  ck_assert_int_eq(ea_wire_decode_state(f, len, &kind, &src, &ups, &n, &err), -EA_EWIRE);
  ck_assert_str_eq(err, "updates: count exceeds frame size");
  ck_assert_ptr_null(ups);
  /* unknown kind, oversized frame, sealed magic */
  uint8_t g[] = {0xEA, 0x94, 0x01, 0x07};
  ck_assert_int_eq(ea_wire_decode_state(g, sizeof g, &kind, &src, &ups, &n, &err), -EA_EWIRE);
  ck_assert_str_eq(err, "kind: unknown sync kind");
  ck_assert_int_eq(ea_wire_decode_state(g, EA_WIRE_MAX_FRAME + 1ul, &kind, &src, &ups, &n, &err),
                   -EA_EWIRE);
  g[0] = 0xEB;
  ck_assert_int_eq(ea_wire_decode_state(g, sizeof g, &kind, &src, &ups, &n, &err), -EA_EWIRE);
}
END_TEST

START_TEST(test_state_mutations) {
  ea_update ups[6];
  ea_node_id src;
  static uint8_t work[8192];
  seed_rng();
  printf("test_state_mutations: EA_SEED=%" PRIu64 "\n", g_seed);
  rnd_id(&src);
  for (int i = 0; i < 6; i++) mk_update(&ups[i], i & 1, i & 2);
  uint8_t *buf;
  size_t blen;
  ck_assert_int_eq(ea_wire_encode_state(EA_SYNC_JOIN, &src, ups, 6, &buf, &blen), 0);
  for (int it = 0; it < 10000; it++) {
    size_t len = blen;
    memcpy(work, buf, len);
    for (uint32_t e = 1 + rndn(4); e > 0; e--) len = mutate(work, len, sizeof work);
    uint8_t kind;
    ea_node_id s2;
    ea_update *back = NULL;
    size_t n;
    const char *err = NULL;
    int rc = ea_wire_decode_state(work, len, &kind, &s2, &back, &n, &err);
    if (rc) {
      ck_assert_msg(rc == -EA_EWIRE && err, "seed %" PRIu64 " iter %d", g_seed, it);
      continue;
    }
    uint8_t *re;
    size_t rlen;
    ck_assert_int_eq(ea_wire_encode_state(kind, &s2, back, n, &re, &rlen), 0);
    ea_update *again;
    size_t n2;
    ck_assert_int_eq(ea_wire_decode_state(re, rlen, &kind, &s2, &again, &n2, NULL), 0);
    ck_assert_uint_eq(n, n2);
    for (size_t i = 0; i < n; i++) ck_assert(update_eq(&back[i], &again[i]));
    free(again);
    free(re);
    free(back);
  }
  free(buf);
}
END_TEST

/* ---- seal -------------------------------------------------------------- */

START_TEST(test_seal_open) {
  static ea_msg m;
  uint8_t key[EA_KEY_BYTES], key2[EA_KEY_BYTES], pt[2048], ct[2048 + 64], out[2048];
  size_t len, clen, olen;
  seed_rng();
  for (int i = 0; i < EA_KEY_BYTES; i++) key[i] = (uint8_t)rnd();
  memcpy(key2, key, sizeof key);
  key2[7] ^= 1;
  mk_msg(&m, EA_MSG_ACK, 0);
  mk_update(&m.updates[m.nupdates++], 1, 0);
  ck_assert_int_eq(ea_wire_encode_msg(&m, pt, sizeof pt, &len), 0);

  ck_assert_int_eq(ea_wire_seal(key, pt, len, ct, len + 39, &clen), -EMSGSIZE);
  ck_assert_int_eq(ea_wire_seal(key, pt, len, ct, len + 40, &clen), 0);
  ck_assert_uint_eq(clen, len + EA_WIRE_SEAL_OVERHEAD - 1);
  ck_assert_uint_eq(ct[0], EA_WIRE_MAGIC_SEALED);
  ck_assert_int_eq(ea_wire_open(key, ct, clen, out, sizeof out, &olen), 0);
  ck_assert_uint_eq(olen, len);
  ck_assert_mem_eq(out, pt, len);
  static ea_msg back;
  ck_assert_int_eq(ea_wire_decode_msg(out, olen, &back, NULL), 0);
  ck_assert(msg_eq(&m, &back));

  /* two seals of the same packet differ (random nonce) */
  uint8_t ct2[2048 + 64];
  size_t clen2;
  ck_assert_int_eq(ea_wire_seal(key, pt, len, ct2, sizeof ct2, &clen2), 0);
  ck_assert(memcmp(ct, ct2, clen) != 0);

  /* any flipped byte, in magic, nonce, ciphertext or tag, fails to open */
  for (size_t i = 0; i < clen; i++) {
    ct[i] ^= 0x20;
    ck_assert_int_eq(ea_wire_open(key, ct, clen, out, sizeof out, &olen), -EBADMSG);
    ct[i] ^= 0x20;
  }
  ck_assert_int_eq(ea_wire_open(key2, ct, clen, out, sizeof out, &olen), -EBADMSG);
  for (size_t l = 0; l < clen; l++)
    ck_assert_int_eq(ea_wire_open(key, ct, l, out, sizeof out, &olen), -EBADMSG);
  ck_assert_int_eq(ea_wire_open(key, pt, len, out, sizeof out, &olen), -EBADMSG); /* not sealed */
  ck_assert_int_eq(ea_wire_open(key, ct, clen, out, len - 1, &olen), -EBADMSG);
  ck_assert_int_eq(ea_wire_open(key, ct, clen, out, len, &olen), 0);
  ck_assert_int_eq(ea_wire_seal(key, ct, clen, ct2, sizeof ct2, &clen2), -EINVAL); /* not plain */
}
END_TEST

/* ---- the stream reader (ea_wire_reader) ------------------------------------ */

/* Three frames (bodies of 1, 300 and 70,000 bytes) behind their headers,
 * plain and sealed, fed whole, byte by byte and in uneven chunks: the same
 * events and bodies every way. */
/* The sending half: what ea_wire_frame_encode writes, a reader with the
 * same key reads back as the sealed body, which opens to the plain frame;
 * over max_len or a short buffer is -EMSGSIZE, nothing written counts. */
START_TEST(test_frame_encode) {
  uint8_t key[EA_KEY_BYTES];
  memset(key, 0x17, sizeof key);
  uint8_t plain[300];
  plain[0] = EA_WIRE_MAGIC_PLAIN;
  for (size_t i = 1; i < sizeof plain; i++) plain[i] = (uint8_t)(i * 13);
  for (int keyed = 0; keyed < 2; keyed++) {
    const uint8_t *k = keyed ? key : NULL;
    ea_wire_sender snd = {.epoch = 7};
    memset(&snd.id, 0x33, sizeof snd.id);
    const size_t need = ea_wire_frame_size(keyed, sizeof plain);
    uint8_t *out = malloc(need);
    size_t len = 0;
    ck_assert_int_eq(ea_wire_frame_encode(k, &snd, plain, sizeof plain, 1u << 20, out, need, &len),
                     0);
    ck_assert_uint_eq(len, need);
    ea_wire_reader r = {.key = k, .max_len = 1u << 20};
    size_t used = 0, off = 0;
    int rc;
    while ((rc = ea_wire_reader_feed(&r, out + off, len - off, &used, NULL)) != EA_WIRE_RD_FRAME) {
      ck_assert_int_ge(rc, 0);
      off += used;
    }
    ck_assert_uint_eq(off + used, len);
    if (keyed) {
      uint8_t back[sizeof plain + EA_WIRE_SEAL_RP_OVERHEAD]; /* cap ≥ len − 40 */
      size_t blen = 0;
      ea_wire_rp rp;
      ck_assert_int_eq(ea_wire_open_rp(key, r.body, r.len, back, sizeof back, &blen, &rp), 0);
      ck_assert_uint_eq(blen, sizeof plain);
      ck_assert_mem_eq(back, plain, sizeof plain);
    } else {
      ck_assert_uint_eq(r.len, sizeof plain);
      ck_assert_mem_eq(r.body, plain, sizeof plain);
    }
    ea_wire_reader_free(&r);
    /* the body on the wire over max_len; a buffer one byte short */
    ck_assert_int_eq(
        ea_wire_frame_encode(k, &snd, plain, sizeof plain,
                             (uint32_t)(need - ea_wire_frame_hdr_size(keyed) - 1), out, need, &len),
        -EMSGSIZE);
    ck_assert_int_eq(
        ea_wire_frame_encode(k, &snd, plain, sizeof plain, 1u << 20, out, need - 1, &len),
        -EMSGSIZE);
    free(out);
  }
}
END_TEST

START_TEST(test_frame_reader) {
  uint8_t key[EA_KEY_BYTES];
  memset(key, 0x42, sizeof key);
  const uint32_t lens[3] = {1, 300, 70000};
  for (int keyed = 0; keyed < 2; keyed++) {
    const uint8_t *k = keyed ? key : NULL;
    const size_t hsz = ea_wire_frame_hdr_size(keyed);
    size_t total = 0;
    for (int i = 0; i < 3; i++) total += hsz + lens[i];
    uint8_t *stream = malloc(total), *p = stream;
    for (int i = 0; i < 3; i++) {
      size_t hl = 0;
      ck_assert_int_eq(ea_wire_frame_hdr_encode(k, lens[i], 0, p, hsz, &hl), 0);
      p += hl;
      for (uint32_t b = 0; b < lens[i]; b++) *p++ = (uint8_t)(b * 7 + (uint32_t)i);
    }
    const size_t chunks[] = {1, 3, 7, 50, 4096, total};
    for (size_t ci = 0; ci < sizeof chunks / sizeof chunks[0]; ci++) {
      const size_t chunk = chunks[ci];
      ea_wire_reader r = {.key = k, .max_len = 1u << 20};
      int frames = 0, headers = 0;
      for (size_t off = 0; off < total;) {
        size_t n = total - off < chunk ? total - off : chunk, used = 0;
        const char *err = NULL;
        int rc = ea_wire_reader_feed(&r, stream + off, n, &used, &err);
        ck_assert_int_ge(rc, 0);
        ck_assert_uint_le(used, n);
        ck_assert(used > 0 || rc != EA_WIRE_RD_MORE);
        off += used;
        if (rc == EA_WIRE_RD_HEADER) {
          ck_assert_uint_eq(r.len, lens[headers]);
          ck_assert_int_eq(headers++, frames);
        } else if (rc == EA_WIRE_RD_FRAME) {
          ck_assert_uint_eq(r.len, lens[frames]);
          for (uint32_t b = 0; b < r.len; b++)
            ck_assert_uint_eq(r.body[b], (uint8_t)(b * 7 + (uint32_t)frames));
          frames++;
          ea_wire_reader_next(&r, 4096);
          ck_assert(r.cap <= 4096); /* the 70,000-byte buffer given back */
        }
      }
      ck_assert_int_eq(frames, 3);
      ea_wire_reader_free(&r);
    }
    free(stream);
  }
  /* A header announcing 1 MiB followed by 5 bytes: the buffer holds what
   * arrived, not what was announced. */
  uint8_t h[EA_WIRE_FRAME_HDR_MAX + 5];
  size_t hl = 0, used = 0;
  ck_assert_int_eq(ea_wire_frame_hdr_encode(NULL, 1u << 20, 0, h, sizeof h, &hl), 0);
  memset(h + hl, 1, 5);
  ea_wire_reader r = {.max_len = 1u << 21};
  ck_assert_int_eq(ea_wire_reader_feed(&r, h, hl + 5, &used, NULL), EA_WIRE_RD_HEADER);
  ck_assert_int_eq(ea_wire_reader_feed(&r, h + used, hl + 5 - used, &used, NULL), EA_WIRE_RD_MORE);
  ck_assert_uint_le(r.cap, 4096);
  ea_wire_reader_free(&r);
  /* BUSY: a header without a body */
  ck_assert_int_eq(ea_wire_frame_hdr_encode(key, 0, EA_WIRE_FRAME_BUSY, h, sizeof h, &hl), 0);
  r = (ea_wire_reader){.key = key, .max_len = 100};
  ck_assert_int_eq(ea_wire_reader_feed(&r, h, hl, &used, NULL), EA_WIRE_RD_HEADER);
  ck_assert(r.flags == EA_WIRE_FRAME_BUSY && r.len == 0);
  /* refused: a version-1 length at its first byte, plain to a keyed
   * reader at its first byte, another key, a length over max_len */
  const char *err = NULL;
  r = (ea_wire_reader){.key = key, .max_len = 100};
  ck_assert_int_eq(ea_wire_reader_feed(&r, (const uint8_t *)"\x00\x00\x01\x00", 4, &used, &err),
                   -EA_EWIRE);
  ck_assert_uint_eq(r.hdr_got, 4);
  ck_assert_ptr_nonnull(strstr(err, "version-1"));
  ck_assert_int_eq(ea_wire_frame_hdr_encode(NULL, 50, 0, h, sizeof h, &hl), 0);
  r = (ea_wire_reader){.key = key, .max_len = 100};
  ck_assert_int_eq(ea_wire_reader_feed(&r, h, 1, &used, &err), -EBADMSG);
  uint8_t other[EA_KEY_BYTES];
  memset(other, 0x43, sizeof other);
  ck_assert_int_eq(ea_wire_frame_hdr_encode(other, 50, 0, h, sizeof h, &hl), 0);
  r = (ea_wire_reader){.key = key, .max_len = 100};
  ck_assert_int_eq(ea_wire_reader_feed(&r, h, 47, &used, &err), EA_WIRE_RD_MORE);
  ck_assert_int_eq(ea_wire_reader_feed(&r, h + 47, 1, &used, &err), -EBADMSG);
  ck_assert_int_eq(ea_wire_frame_hdr_encode(key, 101, 0, h, sizeof h, &hl), 0);
  r = (ea_wire_reader){.key = key, .max_len = 100};
  ck_assert_int_eq(ea_wire_reader_feed(&r, h, hl, &used, &err), -EMSGSIZE);
}
END_TEST

/* ---- the TCP frame header (version 2) ------------------------------------ */

START_TEST(test_frame_header) {
  uint8_t key[EA_KEY_BYTES], other[EA_KEY_BYTES];
  memset(key, 0x42, sizeof key);
  memset(other, 0x43, sizeof other);
  uint8_t h[EA_WIRE_FRAME_HDR_MAX], p[EA_WIRE_FRAME_HDR_MAX];
  size_t hl = 0, pl = 0;
  uint32_t len = 0;
  uint8_t flags = 9;
  const char *err = NULL;
  ck_assert_uint_eq(ea_wire_frame_hdr_size(false), 8);
  ck_assert_uint_eq(ea_wire_frame_hdr_size(true), 48);
  /* round trips, plain and sealed */
  ck_assert_int_eq(ea_wire_frame_hdr_encode(NULL, 1234567, 0, p, sizeof p, &pl), 0);
  ck_assert_uint_eq(pl, 8);
  ck_assert_mem_eq(p,
                   "\xEA"
                   "F\x02\x00\x00\x12\xd6\x87",
                   8);
  ck_assert_int_eq(ea_wire_frame_hdr_decode(NULL, p, pl, EA_WIRE_MAX_FRAME, &len, &flags, &err), 0);
  ck_assert_uint_eq(len, 1234567);
  ck_assert_uint_eq(flags, 0);
  ck_assert_int_eq(ea_wire_frame_hdr_encode(key, 99, 0, h, sizeof h, &hl), 0);
  ck_assert_uint_eq(hl, 48);
  ck_assert_uint_eq(h[0], EA_WIRE_MAGIC_SEALED);
  ck_assert_int_eq(ea_wire_frame_hdr_decode(key, h, hl, EA_WIRE_MAX_FRAME, &len, &flags, &err), 0);
  ck_assert_uint_eq(len, 99);
  ck_assert_int_eq(ea_wire_frame_hdr_encode(key, 0, EA_WIRE_FRAME_BUSY, h, sizeof h, &hl), 0);
  ck_assert_int_eq(ea_wire_frame_hdr_decode(key, h, hl, EA_WIRE_MAX_FRAME, &len, &flags, &err), 0);
  ck_assert(len == 0 && flags == EA_WIRE_FRAME_BUSY);
  /* bad pairs are not encoded */
  ck_assert_int_eq(ea_wire_frame_hdr_encode(NULL, 0, 0, p, sizeof p, &pl), -EINVAL);
  ck_assert_int_eq(ea_wire_frame_hdr_encode(NULL, 5, EA_WIRE_FRAME_BUSY, p, sizeof p, &pl),
                   -EINVAL);
  ck_assert_int_eq(ea_wire_frame_hdr_encode(NULL, 5, 0x80, p, sizeof p, &pl), -EINVAL);
  ck_assert_int_eq(ea_wire_frame_hdr_encode(key, 5, 0, h, 47, &hl), -EMSGSIZE);
  /* unauthenticated: another key, every flipped bit, plain to keyed, sealed to plain */
  ck_assert_int_eq(ea_wire_frame_hdr_encode(key, 99, 0, h, sizeof h, &hl), 0);
  ck_assert_int_eq(ea_wire_frame_hdr_decode(other, h, hl, EA_WIRE_MAX_FRAME, &len, &flags, &err),
                   -EBADMSG);
  ck_assert_ptr_nonnull(strstr(err, "does not open"));
  for (size_t i = 0; i < hl * 8; i++) {
    h[i / 8] ^= (uint8_t)(1u << (i % 8));
    int rc = ea_wire_frame_hdr_decode(key, h, hl, EA_WIRE_MAX_FRAME, &len, &flags, &err);
    /* a flipped magic byte is no longer a sealed header at all */
    ck_assert_msg(i < 8 ? rc < 0 : rc == -EBADMSG, "bit %zu flipped: rc %d", i, rc);
    h[i / 8] ^= (uint8_t)(1u << (i % 8));
  }
  ck_assert_int_eq(ea_wire_frame_hdr_decode(key, h, hl - 1, EA_WIRE_MAX_FRAME, &len, &flags, &err),
                   -EBADMSG);
  ck_assert_int_eq(ea_wire_frame_hdr_decode(key, p, pl, EA_WIRE_MAX_FRAME, &len, &flags, &err),
                   -EBADMSG);
  ck_assert_ptr_nonnull(strstr(err, "not sealed"));
  ck_assert_int_eq(ea_wire_frame_hdr_decode(NULL, h, 8, EA_WIRE_MAX_FRAME, &len, &flags, &err),
                   -EBADMSG);
  ck_assert_ptr_nonnull(strstr(err, "no cluster key"));
  /* malformed, each named */
  struct {
    const char *bytes, *why;
  } bad[] = {
      {"\x00\x00\x00\x05\xEA\x93\x01\x10", "version-1 framing"},
      {"\x01\x00\x00\x05\xEA\x93\x01\x10", "version-1 framing"},
      {"GET / HT", "not an elastic-agent frame"},
      {"\xEA"
       "G\x02\x00\x00\x00\x00\x05",
       "not a frame header"},
      {"\xEA"
       "F\x01\x00\x00\x00\x00\x05",
       "unsupported version"},
      {"\xEA"
       "F\x03\x00\x00\x00\x00\x05",
       "unsupported version"},
      {"\xEA"
       "F\x02\x02\x00\x00\x00\x05",
       "reserved flag"},
      {"\xEA"
       "F\x02\x00\x00\x00\x00\x00",
       "zero length"},
      {"\xEA"
       "F\x02\x01\x00\x00\x00\x05",
       "busy with a length"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int rc = ea_wire_frame_hdr_decode(NULL, (const uint8_t *)bad[i].bytes, 8, EA_WIRE_MAX_FRAME,
                                      &len, &flags, &err);
    ck_assert_msg(rc == -EA_EWIRE && strstr(err, bad[i].why), "case %zu: rc %d, %s", i, rc, err);
  }
  /* version 1 is named even with a key, from its first byte alone */
  ck_assert_int_eq(ea_wire_frame_hdr_decode(key, (const uint8_t *)"\x00", 1, EA_WIRE_MAX_FRAME,
                                            &len, &flags, &err),
                   -EA_EWIRE);
  ck_assert_ptr_nonnull(strstr(err, "version-1"));
  /* over the caller's limit */
  ck_assert_int_eq(ea_wire_frame_hdr_encode(key, 1001, 0, h, sizeof h, &hl), 0);
  ck_assert_int_eq(ea_wire_frame_hdr_decode(key, h, hl, 1000, &len, &flags, &err), -EMSGSIZE);
  ck_assert_ptr_nonnull(strstr(err, "over the limit"));
}
END_TEST

/* ---- key files ---------------------------------------------------------- */

static char g_dir[64];

static const char *write_file(const char *name, const void *data, size_t len) {
  static char path[128];
  snprintf(path, sizeof path, "%s/%s", g_dir, name);
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(data, 1, len, f), len);
  fclose(f);
  ck_assert_int_eq(chmod(path, 0600), 0);
  return path;
}

START_TEST(test_load_key) {
  strcpy(g_dir, "/tmp/ea-test-wire-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
  uint8_t key[EA_KEY_BYTES], want[EA_KEY_BYTES];
  const char *err = NULL, *p;
  const char *hex = "000102030405060708090a0b0c0d0e0f101112131415161718191A1B1C1D1E1F";
  for (int i = 0; i < EA_KEY_BYTES; i++) want[i] = (uint8_t)i;

  p = write_file("hex", hex, 64);
  ck_assert_int_eq(ea_wire_load_key(p, key, &err), 0);
  ck_assert_mem_eq(key, want, sizeof key);
  char buf[80];
  snprintf(buf, sizeof buf, "%s \r\n\n", hex);
  p = write_file("hexnl", buf, strlen(buf));
  memset(key, 0, sizeof key);
  ck_assert_int_eq(ea_wire_load_key(p, key, &err), 0);
  ck_assert_mem_eq(key, want, sizeof key);
  p = write_file("raw", want, 32);
  memset(key, 0, sizeof key);
  ck_assert_int_eq(ea_wire_load_key(p, key, &err), 0);
  ck_assert_mem_eq(key, want, sizeof key);

  memset(key, 0x77, sizeof key);
  p = write_file("short", hex, 63);
  ck_assert_int_eq(ea_wire_load_key(p, key, &err), -EINVAL);
  ck_assert_str_eq(err, "key file must hold 64 hex characters or 32 bytes");
  p = write_file("raw31", want, 31);
  ck_assert_int_eq(ea_wire_load_key(p, key, &err), -EINVAL);
  snprintf(buf, sizeof buf, "%s0", hex);
  p = write_file("long", buf, 65);
  ck_assert_int_eq(ea_wire_load_key(p, key, &err), -EINVAL);
  ck_assert_str_eq(err, "key file must hold 64 hex characters or 32 bytes");
  snprintf(buf, sizeof buf, "%s", hex);
  buf[40] = 'g';
  p = write_file("badhex", buf, 64);
  ck_assert_int_eq(ea_wire_load_key(p, key, &err), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "hex"));
  p = write_file("empty", "", 0);
  ck_assert_int_eq(ea_wire_load_key(p, key, &err), -EINVAL);
  for (int i = 0; i < EA_KEY_BYTES; i++) ck_assert_uint_eq(key[i], 0x77); /* untouched */
  snprintf(buf, sizeof buf, "%s/missing", g_dir);
  ck_assert_int_eq(ea_wire_load_key(buf, key, &err), -ENOENT);
  ck_assert_ptr_nonnull(err);

  /* a key that group or others can read is refused, naming the mode, and
   * the key is left untouched (issue 11, item 7: as ssh does) */
  static const unsigned loose[] = {0644, 0640, 0604, 0660, 0666, 0601};
  for (size_t i = 0; i < sizeof loose / sizeof loose[0]; i++) {
    p = write_file("loose", hex, 64);
    ck_assert_int_eq(chmod(p, loose[i]), 0);
    /* root-owned and group-readable is accepted only for a non-root agent
     * in the file's group; the test runs as root or owns the file */
    ck_assert_int_eq(ea_wire_load_key(p, key, &err), -EPERM);
    char mode[8];
    snprintf(mode, sizeof mode, "%04o", loose[i]);
    ck_assert_msg(strstr(err, mode) && strstr(err, "chmod 600"), "%s", err);
    for (int b = 0; b < EA_KEY_BYTES; b++) ck_assert_uint_eq(key[b], 0x77);
  }
  p = write_file("loose", hex, 64);
  ck_assert_int_eq(chmod(p, 0400), 0);
  ck_assert_int_eq(ea_wire_load_key(p, key, &err), 0);
  ck_assert_mem_eq(key, want, sizeof key);

  const char *names[] = {"hex",  "hexnl",  "raw",   "short", "raw31",
                         "long", "badhex", "empty", "loose"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    snprintf(buf, sizeof buf, "%s/%s", g_dir, names[i]);
    unlink(buf);
  }
  rmdir(g_dir);
}
END_TEST

static Suite *wire_suite(void) {
  Suite *s = suite_create("wire");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_helpers);
  tcase_add_test(tc, test_roundtrip_every_type);
  tcase_add_test(tc, test_size_exact);
  tcase_add_test(tc, test_emsgsize);
  tcase_add_test(tc, test_encode_einval);
  tcase_add_test(tc, test_unterminated_strings);
  tcase_add_test(tc, test_decode_rejects);
  tcase_add_test(tc, test_every_truncation);
  tcase_add_test(tc, test_mutation_corpus);
  tcase_add_test(tc, test_state_roundtrip);
  tcase_add_test(tc, test_state_rejects);
  tcase_add_test(tc, test_state_mutations);
  tcase_add_test(tc, test_seal_open);
  tcase_add_test(tc, test_load_key);
  tcase_add_test(tc, test_frame_header);
  tcase_add_test(tc, test_frame_reader);
  tcase_add_test(tc, test_frame_encode);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(wire_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
