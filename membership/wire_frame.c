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
