/* Writes the seed inputs of tests/fuzz/corpus/wire with the real encoder, so
 * the seeds always match the codec: one packet of each message type (IPv4
 * and IPv6, with and without meta, 0 to several updates), two push-pull
 * frames, a packet sealed with the fuzz harness's fixed key (both layouts:
 * 0xEB, and 0xEC with its replay header), and three TCP frame
 * headers (plain, sealed, busy).
 *
 * The seeds are committed; regenerate them when the wire format changes:
 *   cc -D_GNU_SOURCE -Iinclude tests/fuzz/make_corpus.c membership/wire.c base/mpread.c \
 *      membership/seal.c membership/wire_frame.c -lmsgpackc -lsodium -o /tmp/mc && \
 *      /tmp/mc tests/fuzz/corpus/wire
 *
 * Not a fuzz harness (no fuzz_ prefix); deterministic (no random input, so
 * only the sealed seed's nonce differs between runs).
 */
#include "ea_wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const uint8_t fuzz_key[EA_KEY_BYTES] = {
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
    0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f};

static const char *g_dir;

static int put(const char *name, const uint8_t *b, size_t n) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", g_dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(b, 1, n, f) != n || fclose(f) != 0) {
    perror(path);
    return -1;
  }
  return 0;
}

static void addr(ea_addr *a, int v6, uint16_t port, uint8_t last) {
  memset(a, 0, sizeof *a);
  a->family = v6 ? 6 : 4;
  a->port = port;
  if (v6) {
    a->ip[0] = 0xfd;
    a->ip[15] = last;
  } else {
    a->ip[0] = 10, a->ip[3] = last;
  }
}

static void update(ea_update *u, uint8_t state, uint32_t inc, uint8_t who, int meta, int v6) {
  memset(u, 0, sizeof *u);
  u->state = state;
  u->incarnation = inc;
  memset(u->id.b, who, 16);
  memset(u->from.b, who + 1, 16);
  u->has_meta = meta;
  if (!meta) {
    /* a refutation without metadata, or an accuser's copy's age */
    if (state != EA_STATE_LEFT && inc) u->meta_inc = inc / 2 + 1;
    return;
  }
  snprintf(u->meta.name, sizeof u->meta.name, "node-%u.gpu-cluster.example", who);
  addr(&u->meta.gossip, v6, 7946, who);
  addr(&u->meta.control, v6, 7947, who);
  snprintf(u->meta.role, sizeof u->meta.role, "worker");
  snprintf(u->meta.tags, sizeof u->meta.tags, "rack=r%u,zone=a,gpus=8", who);
  snprintf(u->meta.version, sizeof u->meta.version, "0.1.0");
  u->meta.last_gen = 1000ull * who;
}

int main(int argc, char **argv) {
  static ea_msg m;
  static uint8_t buf[4096], sealed[4096 + 64];
  size_t len, slen;
  char name[64];
  if (argc != 2) {
    fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  g_dir = argv[1];
  for (uint8_t t = EA_MSG_PING; t <= EA_MSG_GOSSIP; t++) {
    memset(&m, 0, sizeof m);
    m.type = t;
    m.seq = 1u << (t * 6); /* 64 .. 2^30: every int width */
    memset(m.src.b, 0xa0 + t, 16);
    memset(m.target.b, 0xb0 + t, 16);
    if (t == EA_MSG_PING_REQ || t == EA_MSG_NACK) {
      addr(&m.target_addr, t & 1, 7946, 9);
      addr(&m.reply_to, t & 1, 7946, 2);
    }
    for (uint32_t i = 0; i + 1 < t; i++)
      update(&m.updates[m.nupdates++], (uint8_t)(i % 4), 300 * i, (uint8_t)(i + t), i != 1, i & 1);
    if (ea_wire_encode_msg(&m, buf, sizeof buf, &len)) return 1;
    snprintf(name, sizeof name, "msg-type%u", t);
    if (put(name, buf, len)) return 1;
    if (t == EA_MSG_ACK) {
      if (ea_wire_seal(fuzz_key, buf, len, sealed, sizeof sealed, &slen)) return 1;
      if (put("sealed-ack", sealed, slen)) return 1;
      /* the replay-proof seal (0xEC) every agent sends now */
      ea_wire_sender s = {.epoch = 1796224317u, .next = 41};
      memset(s.id.b, 0xa2, 16);
      if (ea_wire_seal_rp(fuzz_key, &s, buf, len, sealed, sizeof sealed, &slen, NULL)) return 1;
      if (put("sealed-rp-ack", sealed, slen)) return 1;
    }
  }
  ea_update ups[4];
  for (int i = 0; i < 4; i++) update(&ups[i], (uint8_t)i, 7u << (i * 6), (uint8_t)i, i != 2, i & 1);
  ea_node_id src;
  memset(src.b, 0x5e, 16);
  uint8_t *out;
  if (ea_wire_encode_state(EA_SYNC_JOIN, &src, ups, 4, &out, &len)) return 1;
  if (put("state-join", out, len)) return 1;
  free(out);
  if (ea_wire_encode_state(EA_SYNC_PERIODIC, &src, NULL, 0, &out, &len)) return 1;
  if (put("state-empty", out, len)) return 1;
  free(out);
  /* TCP frame headers (wire_frame.c): plain, sealed, busy */
  uint8_t hdr[EA_WIRE_FRAME_HDR_MAX];
  if (ea_wire_frame_hdr_encode(NULL, 4096, 0, hdr, sizeof hdr, &len)) return 1;
  if (put("frame-hdr-plain", hdr, len)) return 1;
  if (ea_wire_frame_hdr_encode(fuzz_key, 4096, 0, hdr, sizeof hdr, &len)) return 1;
  if (put("frame-hdr-sealed", hdr, len)) return 1;
  if (ea_wire_frame_hdr_encode(fuzz_key, 0, EA_WIRE_FRAME_BUSY, hdr, sizeof hdr, &len)) return 1;
  if (put("frame-hdr-busy", hdr, len)) return 1;
  return 0;
}
