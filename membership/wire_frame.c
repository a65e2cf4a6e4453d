/* wire_frame.c — the header in front of every frame on the two TCP channels
 * (gossip push-pull and the control channel), version 2.
 *
 * Why a header of its own.  Version 1 framed a sealed frame with a bare
 * u32 length, so a receiver had to buffer the whole frame — up to 16 MiB —
 * before it could open it and learn that the sender did not hold the key:
 * 64 half-sent frames took a keyed controller from 16 MB to 1.07 GB
 * (issue 11).  Now the length travels in a small header that is itself
 * sealed: the receiver reads 48 bytes, opens them, and only then buffers a
 * body, of the length the key holder announced.  A connection without the
 * key costs its receiver 48 bytes and a deadline.
 *
 *   plain header (8 bytes)   0xEA 'F' version=2 flags len:u32be
 *   sealed header (48 bytes) ea_wire_seal(plain header): 0xEB nonce(24)
 *                            XChaCha20-Poly1305(7 bytes) tag(16)
 *
 * then `len` bytes of body: the frame itself, sealed (keyed) or plain,
 * exactly as in version 1.  flags: EA_WIRE_FRAME_BUSY (len 0, no body) is a
 * responder's "too many connections, try later", so that a joiner can say
 * what happened instead of "connection reset by peer"; every other bit is
 * reserved and must be 0.
 *
 * A version-1 stream starts with its length's high byte, 0x00 or 0x01 (the
 * limit is just over 16 MiB), never 0xEA or 0xEB: it is recognised and named
 * ("version-1 framing: an older agent") rather than reported as garbage.
 *
 * Without a key the header is the 8 plain bytes: nothing is authenticated
 * (anyone may join an unkeyed cluster), but the framing is the same. */
#include "ea_wire.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define HDR_TAG 'F'

_Static_assert(EA_WIRE_FRAME_HDR_SEALED == EA_WIRE_FRAME_HDR_PLAIN + EA_WIRE_SEAL_OVERHEAD - 1,
               "a sealed header is the plain one sealed");

size_t ea_wire_frame_hdr_size(bool sealed) {
  return sealed ? EA_WIRE_FRAME_HDR_SEALED : EA_WIRE_FRAME_HDR_PLAIN;
}

int ea_wire_frame_hdr_encode(const uint8_t *key, uint32_t len, uint8_t flags, uint8_t *out,
                             size_t cap, size_t *outlen) {
  if ((flags & ~EA_WIRE_FRAME_BUSY) || ((flags & EA_WIRE_FRAME_BUSY) != 0) != (len == 0))
    return -EINVAL;
  uint8_t p[EA_WIRE_FRAME_HDR_PLAIN] = {EA_WIRE_MAGIC_PLAIN,   HDR_TAG,
                                        EA_WIRE_FRAME_VERSION, flags,
                                        (uint8_t)(len >> 24),  (uint8_t)(len >> 16),
                                        (uint8_t)(len >> 8),   (uint8_t)len};
  if (!key) {
    if (cap < sizeof p) return -EMSGSIZE;
    memcpy(out, p, sizeof p);
    *outlen = sizeof p;
    return 0;
  }
  return ea_wire_seal(key, p, sizeof p, out, cap, outlen);
}

size_t ea_wire_frame_size(bool sealed, size_t plen) {
  return ea_wire_frame_hdr_size(sealed) + plen + (sealed ? EA_WIRE_SEAL_RP_OVERHEAD - 1 : 0);
}

int ea_wire_frame_encode(const uint8_t *key, ea_wire_sender *sender, const uint8_t *plain,
                         size_t plen, uint32_t max_len, uint8_t *out, size_t cap, size_t *outlen) {
  const size_t hsz = ea_wire_frame_hdr_size(key != NULL);
  const size_t need = ea_wire_frame_size(key != NULL, plen);
  if (plen == 0) return -EINVAL;
  if (need - hsz > max_len || cap < need) return -EMSGSIZE;
  size_t blen = plen, hlen = 0;
  int rc = 0;
  if (key)
    rc = ea_wire_seal_rp(key, sender, plain, plen, out + hsz, cap - hsz, &blen, NULL);
  else
    memcpy(out + hsz, plain, plen);
  if (rc == 0) rc = ea_wire_frame_hdr_encode(key, (uint32_t)blen, 0, out, hsz, &hlen);
  if (rc < 0) return rc;
  *outlen = hlen + blen;
  return 0;
}

int ea_wire_frame_hdr_decode(const uint8_t *key, const uint8_t *in, size_t n, uint32_t max_len,
                             uint32_t *len, uint8_t *flags, const char **err) {
  const char *dummy;
  if (!err) err = &dummy;
  if (n < 1) {
    *err = "frame header: empty";
    return -EA_EWIRE;
  }
  if (in[0] == 0x00 || in[0] == 0x01) {
    *err = "frame header: version-1 framing (length first): an older agent";
    return -EA_EWIRE;
  }
  uint8_t p[EA_WIRE_FRAME_HDR_SEALED];
  const uint8_t *h = in;
  if (key) {
    if (in[0] != EA_WIRE_MAGIC_SEALED) {
      *err = in[0] == EA_WIRE_MAGIC_PLAIN ? "frame header: not sealed, and this agent has a key"
                                          : "frame header: not an elastic-agent frame";
      return in[0] == EA_WIRE_MAGIC_PLAIN ? -EBADMSG : -EA_EWIRE;
    }
    size_t pl = 0;
    if (n != EA_WIRE_FRAME_HDR_SEALED || ea_wire_open(key, in, n, p, sizeof p, &pl) != 0 ||
        pl != EA_WIRE_FRAME_HDR_PLAIN) {
      *err = "frame header: does not open with this cluster key";
      return -EBADMSG;
    }
    h = p;
  } else {
    if (in[0] == EA_WIRE_MAGIC_SEALED) {
      *err = "frame header: sealed, and this agent has no cluster key";
      return -EBADMSG;
    }
    if (in[0] != EA_WIRE_MAGIC_PLAIN) {
      *err = "frame header: not an elastic-agent frame";
      return -EA_EWIRE;
    }
    if (n != EA_WIRE_FRAME_HDR_PLAIN) {
      *err = "frame header: wrong size";
      return -EA_EWIRE;
    }
  }
  if (h[1] != HDR_TAG) {
    *err = "frame header: not a frame header";
    return -EA_EWIRE;
  }
  if (h[2] != EA_WIRE_FRAME_VERSION) {
    *err = "frame header: unsupported version";
    return -EA_EWIRE;
  }
  uint8_t f = h[3];
  uint32_t l = (uint32_t)h[4] << 24 | (uint32_t)h[5] << 16 | (uint32_t)h[6] << 8 | h[7];
  if (f & ~EA_WIRE_FRAME_BUSY) {
    *err = "frame header: reserved flag set";
    return -EA_EWIRE;
  }
  if (((f & EA_WIRE_FRAME_BUSY) != 0) != (l == 0)) {
    *err = f ? "frame header: busy with a length" : "frame header: zero length";
    return -EA_EWIRE;
  }
  if (l > max_len) {
    *err = "frame header: length over the limit";
    return -EMSGSIZE;
  }
  *len = l;
  *flags = f;
  return 0;
}

/* ---- the reader --------------------------------------------------------- */

int ea_wire_reader_feed(ea_wire_reader *r, const uint8_t *in, size_t n, size_t *used,
                        const char **err) {
  const char *dummy;
  if (!err) err = &dummy;
  *used = 0;
  if (!r->in_body) {
    const size_t hsz = ea_wire_frame_hdr_size(r->key != NULL);
    size_t k = hsz - r->hdr_got < n ? hsz - r->hdr_got : n;
    memcpy(r->hdr + r->hdr_got, in, k);
    r->hdr_got += k;
    *used = k;
    if (r->hdr_got == 0) return EA_WIRE_RD_MORE;
    /* a version-1 length, or the wrong magic for our key, is known from
     * the first byte */
    bool early = r->hdr[0] != (r->key ? EA_WIRE_MAGIC_SEALED : EA_WIRE_MAGIC_PLAIN);
    if (r->hdr_got < hsz && !early) return EA_WIRE_RD_MORE;
    uint32_t len = 0;
    uint8_t flags = 0;
    int rc = ea_wire_frame_hdr_decode(r->key, r->hdr, r->hdr_got, r->max_len, &len, &flags, err);
    if (rc < 0) return rc;
    r->hdr_got = 0;
    r->in_body = true;
    r->flags = flags;
    r->len = len;
    r->got = 0;
    return EA_WIRE_RD_HEADER;
  }
  size_t want = r->len - r->got;
  size_t k = want < n ? want : n;
  if (r->got + k > r->cap) {
    /* Grow with what actually arrived, never to the announced length at
     * once. */
    size_t cap = r->cap ? r->cap * 2 : 4096;
    while (cap < r->got + k) cap *= 2;
    if (cap > r->len) cap = r->len;
    uint8_t *nb = realloc(r->body, cap);
    if (!nb) {
      *err = "out of memory for a frame body";
      return -ENOMEM;
    }
    r->body = nb;
    r->cap = cap;
  }
  memcpy(r->body + r->got, in, k);
  r->got += k;
  *used = k;
  return r->got == r->len && r->len > 0 ? EA_WIRE_RD_FRAME : EA_WIRE_RD_MORE;
}

void ea_wire_reader_next(ea_wire_reader *r, size_t keep) {
  r->in_body = false;
  r->hdr_got = 0;
  r->got = 0;
  r->len = 0;
  if (r->cap > keep) {
    free(r->body);
    r->body = NULL;
    r->cap = 0;
  }
}

void ea_wire_reader_free(ea_wire_reader *r) {
  free(r->body);
  r->body = NULL;
  r->cap = 0;
}
