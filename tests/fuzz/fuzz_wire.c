/* libFuzzer harness for every network-facing decoder of the gossip wire
 * (membership/wire.c over base/mpread.c, seal.c, wire_frame.c).  Each input is fed, as is,
 * to the packet decoder, the push-pull state decoder, the seal opener (both
 * layouts: 0xEB, and 0xEC with its replay header, which then goes through a
 * replay window: accepted once, refused the second time) and the
 * TCP frame-header decoder (plain and sealed).  Beyond
 * "no crash, no sanitizer report", it checks the codec's promise that
 * whatever decodes is a valid struct: it re-encodes (to exactly the size the
 * size helpers predict) and decodes again to an equal struct; a mismatch
 * aborts, which libFuzzer reports as a crash with the input saved.
 *
 * Build and run through scripts/fuzz.sh (make fuzz).  Seeds: tests/fuzz/corpus/wire,
 * written by tests/fuzz/make_corpus.c.
 */
#include "ea_antireplay.h"
#include "ea_wire.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The key make_corpus.c seals its seeds with, so that the fuzzer starts with
 * inputs that open. */
static const uint8_t fuzz_key[EA_KEY_BYTES] = {
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
    0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f};

#define CHECK(cond)                                                                       \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      fprintf(stderr, "fuzz_wire: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                            \
    }                                                                                     \
  } while (0)

static int addr_same(const ea_addr *a, const ea_addr *b) {
  return a->family == b->family && ea_addr_eq(a, b);
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

static void fuzz_msg(const uint8_t *data, size_t size) {
  static ea_msg m, again;
  static uint8_t re[64 * 1024]; /* 64 updates of at most ~420 bytes fit easily */
  const char *err = NULL;
  if (ea_wire_decode_msg(data, size, &m, &err) != 0) {
    CHECK(err != NULL);
    return;
  }
  size_t want = ea_wire_msg_base_size(&m), len = 0;
  for (uint32_t i = 0; i < m.nupdates; i++) want += ea_wire_update_size(&m.updates[i]);
  CHECK(ea_wire_encode_msg(&m, re, sizeof re, &len) == 0);
  CHECK(len == want);
  /* canonical encoding is never longer than what decoded, save for the
   * updates' array header, which the encoder always writes as array16 */
  CHECK(len <= size + 2);
  CHECK(ea_wire_decode_msg(re, len, &again, NULL) == 0);
  CHECK(msg_eq(&m, &again));
}

static void fuzz_state(const uint8_t *data, size_t size) {
  uint8_t kind, kind2;
  ea_node_id src, src2;
  ea_update *ups = NULL, *ups2 = NULL;
  size_t n = 0, n2 = 0, len = 0;
  uint8_t *re = NULL;
  const char *err = NULL;
  if (ea_wire_decode_state(data, size, &kind, &src, &ups, &n, &err) != 0) {
    CHECK(err != NULL);
    CHECK(ups == NULL);
    return;
  }
  CHECK(ea_wire_encode_state(kind, &src, ups, n, &re, &len) == 0);
  CHECK(ea_wire_decode_state(re, len, &kind2, &src2, &ups2, &n2, NULL) == 0);
  CHECK(kind == kind2 && ea_node_id_cmp(&src, &src2) == 0 && n == n2);
  for (size_t i = 0; i < n; i++) CHECK(update_eq(&ups[i], &ups2[i]));
  free(ups);
  free(ups2);
  free(re);
}

static void fuzz_seal(const uint8_t *data, size_t size) {
  static uint8_t out[EA_WIRE_MAX_PACKET * 4], back[EA_WIRE_MAX_PACKET * 4];
  size_t olen = 0, blen = 0;
  if (size > EA_WIRE_MAX_PACKET * 3) return;
  int rc = ea_wire_open(fuzz_key, data, size, out, sizeof out, &olen);
  if (rc == 0) { /* a seed (or an astonishing forgery): its plaintext is a packet too */
    CHECK(olen == size - (EA_WIRE_SEAL_OVERHEAD - 1) && out[0] == EA_WIRE_MAGIC_PLAIN);
    fuzz_msg(out, olen);
  } else {
    CHECK(rc == -EBADMSG);
  }
  /* seal → open is the identity on any plaintext packet */
  if (size >= 1 && data[0] == EA_WIRE_MAGIC_PLAIN) {
    CHECK(ea_wire_seal(fuzz_key, data, size, out, sizeof out, &olen) == 0);
    CHECK(ea_wire_open(fuzz_key, out, olen, back, sizeof back, &blen) == 0);
    CHECK(blen == size && memcmp(back, data, size) == 0);
  }
}

/* The replay-proof seal (seal.c ea_wire_open_rp) and the window behind it
 * (antireplay.c).  What opens is a packet, and its header is accepted by a
 * window once and never twice; the first 32 bytes read as a header and
 * re-encoded are the same bytes; arbitrary headers fed to a small window in
 * a row never accept the same (sender, epoch, counter) twice nor grow it
 * past its cap. */
static void fuzz_seal_rp(const uint8_t *data, size_t size) {
  static uint8_t out[EA_WIRE_MAX_PACKET * 4], back[EA_WIRE_MAX_PACKET * 4];
  static ea_ar_table win;
  static int inited;
  if (!inited) inited = ea_ar_init(&win, 8) == 0;
  size_t olen = 0, blen = 0;
  if (size > EA_WIRE_MAX_PACKET * 3) return;
  ea_wire_rp rp, rp2;
  int rc = ea_wire_open_rp(fuzz_key, data, size, out, sizeof out, &olen, &rp);
  if (rc == 0) {
    CHECK(olen == size - (EA_WIRE_SEAL_RP_OVERHEAD - 1) && out[0] == EA_WIRE_MAGIC_PLAIN);
    ea_ar_table t;
    CHECK(ea_ar_init(&t, 2) == 0);
    CHECK(ea_ar_check(&t, &rp.sender, rp.epoch, rp.counter) == EA_AR_OK);
    CHECK(ea_ar_check(&t, &rp.sender, rp.epoch, rp.counter) == EA_AR_DUP);
    ea_ar_free(&t);
    fuzz_msg(out, olen);
  } else {
    CHECK(rc == -EBADMSG || (rc == -EPROTO && data[0] == EA_WIRE_MAGIC_SEALED));
  }
  if (size >= 1 && data[0] == EA_WIRE_MAGIC_PLAIN) {
    ea_wire_sender s = {.epoch = size, .next = size * 7};
    memcpy(s.id.b, fuzz_key, 16);
    CHECK(ea_wire_seal_rp(fuzz_key, &s, data, size, out, sizeof out, &olen, NULL) == 0);
    CHECK(ea_wire_open_rp(fuzz_key, out, olen, back, sizeof back, &blen, &rp2) == 0);
    CHECK(blen == size && memcmp(back, data, size) == 0);
    CHECK(rp2.epoch == size && rp2.counter == size * 7 && s.next == size * 7 + 1);
  }
  if (size >= EA_WIRE_RP_BYTES) {
    uint8_t re[EA_WIRE_RP_BYTES];
    ea_wire_rp_decode(data, &rp);
    ea_wire_rp_encode(&rp, re);
    CHECK(memcmp(re, data, EA_WIRE_RP_BYTES) == 0);
    /* the input as a run of headers (sender = one byte, epoch and
     * counter small) against a window that lives across inputs */
    for (size_t i = 0; inited && i + 4 <= size; i += 4) {
      ea_node_id id;
      memset(id.b, data[i] & 0x0f, sizeof id.b);
      uint64_t e = data[i + 1] & 3, c = (uint64_t)data[i + 2] << 4 | (data[i + 3] & 0x0f);
      ea_ar_verdict v = ea_ar_check(&win, &id, e, c);
      CHECK(v <= EA_AR_EPOCH);
      if (v == EA_AR_OK) CHECK(ea_ar_check(&win, &id, e, c) == EA_AR_DUP);
      CHECK(ea_ar_count(&win) <= 8);
    }
  }
}

/* The TCP frame header (wire_frame.c): plain and sealed.  Whatever decodes
 * re-encodes to a header that decodes to the same length and flags; what
 * does not names why. */
static void fuzz_frame_hdr(const uint8_t *data, size_t size) {
  for (int keyed = 0; keyed < 2; keyed++) {
    const uint8_t *key = keyed ? fuzz_key : NULL;
    uint32_t len = 0, len2 = 0;
    uint8_t flags = 0, flags2 = 0, re[EA_WIRE_FRAME_HDR_MAX];
    size_t rl = 0;
    const char *err = NULL;
    size_t n = size < ea_wire_frame_hdr_size(keyed) ? size : ea_wire_frame_hdr_size(keyed);
    int rc = ea_wire_frame_hdr_decode(key, data, n, EA_WIRE_MAX_FRAME, &len, &flags, &err);
    if (rc != 0) {
      CHECK(err != NULL);
      CHECK(rc == -EA_EWIRE || rc == -EBADMSG || rc == -EMSGSIZE);
      continue;
    }
    CHECK(len <= EA_WIRE_MAX_FRAME && (flags == 0) == (len != 0));
    CHECK(ea_wire_frame_hdr_encode(key, len, flags, re, sizeof re, &rl) == 0);
    CHECK(rl == ea_wire_frame_hdr_size(keyed));
    CHECK(ea_wire_frame_hdr_decode(key, re, rl, EA_WIRE_MAX_FRAME, &len2, &flags2, NULL) == 0);
    CHECK(len == len2 && flags == flags2);
  }
}

/* The stream reader: the input's first byte picks a chunk size; the rest is
 * the stream.  Fed in chunks and whole, the events and bodies must agree;
 * a body is never longer than its header said, a FRAME follows its HEADER,
 * and every call makes progress or reports an event. */
typedef struct {
  int events[64];
  size_t nev;
  uint64_t sum; /* of the bodies' bytes */
  int err;
} fuzz_rd_trace;

static void fuzz_rd_run(const uint8_t *key, const uint8_t *in, size_t n, size_t chunk,
                        fuzz_rd_trace *t) {
  ea_wire_reader r = {.key = key, .max_len = 1u << 16};
  memset(t, 0, sizeof *t);
  bool header = false;
  for (size_t off = 0; off < n && t->nev < 64;) {
    size_t m = n - off < chunk ? n - off : chunk, used = 0;
    const char *err = NULL;
    int rc = ea_wire_reader_feed(&r, in + off, m, &used, &err);
    CHECK(used <= m);
    off += used;
    if (rc < 0) {
      CHECK(err != NULL);
      t->err = rc;
      break;
    }
    CHECK(used > 0 || rc != EA_WIRE_RD_MORE);
    CHECK(!r.in_body || r.got <= r.len);
    if (rc == EA_WIRE_RD_MORE) continue;
    t->events[t->nev++] = rc;
    if (rc == EA_WIRE_RD_HEADER) {
      CHECK(!header);
      header = true;
      if (r.flags & EA_WIRE_FRAME_BUSY) {
        CHECK(r.len == 0);
        ea_wire_reader_next(&r, 0);
        header = false;
      }
    } else {
      CHECK(header && r.got == r.len && r.len > 0 && r.len <= (1u << 16));
      for (size_t i = 0; i < r.len; i++) t->sum += r.body[i];
      ea_wire_reader_next(&r, (size_t)chunk * 7);
      header = false;
    }
  }
  ea_wire_reader_free(&r);
}

static void fuzz_reader(const uint8_t *data, size_t size) {
  if (size < 2) return;
  size_t chunk = 1 + data[0] % 61;
  for (int keyed = 0; keyed < 2; keyed++) {
    const uint8_t *key = keyed ? fuzz_key : NULL;
    fuzz_rd_trace a, b;
    fuzz_rd_run(key, data + 1, size - 1, chunk, &a);
    fuzz_rd_run(key, data + 1, size - 1, size, &b);
    CHECK(a.nev == b.nev && a.sum == b.sum && a.err == b.err);
    CHECK(memcmp(a.events, b.events, a.nev * sizeof a.events[0]) == 0);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_msg(data, size);
  fuzz_state(data, size);
  fuzz_seal(data, size);
  fuzz_seal_rp(data, size);
  fuzz_frame_hdr(data, size);
  fuzz_reader(data, size);
  return 0;
}
